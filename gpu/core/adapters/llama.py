"""Llama-like models (Llama, SmolLM2, Mistral, Qwen2): no QK-norm, one rotary embedding."""
from .base import Adapter, LayerInfo


class LlamaAdapter(Adapter):
    family = "llama"


class MistralAdapter(LlamaAdapter):
    """Mistral applies ``config.sliding_window`` to every layer without listing
    ``layer_types`` (its stock mask and cache both do): every layer is a sliding one."""

    family = "mistral"

    def layer_info(self, i: int) -> LayerInfo:
        window = getattr(self.config, "sliding_window", None)
        if getattr(self.config, "layer_types", None) is None and window is not None:
            return LayerInfo("sliding", int(window))
        return super().layer_info(i)
