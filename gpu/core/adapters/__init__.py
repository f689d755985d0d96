"""One adapter per model family; ``for_model`` picks it from ``config.model_type``."""
from __future__ import annotations

from torch import nn

from .base import Adapter, LayerInfo
from .gemma3 import Gemma3Adapter, Gemma3MultimodalAdapter
from .llama import LlamaAdapter, MistralAdapter
from .qwen3 import Qwen3Adapter
from .qwen3_5 import Qwen3_5Adapter
from .qwen3_next import Qwen3NextAdapter

ADAPTERS: dict[str, type[Adapter]] = {
    "llama": LlamaAdapter,
    "mistral": MistralAdapter,
    "qwen2": LlamaAdapter,
    "qwen3": Qwen3Adapter,
    "gemma3_text": Gemma3Adapter,
    "gemma3": Gemma3MultimodalAdapter,
    "qwen3_next": Qwen3NextAdapter,
    "qwen3_5_text": Qwen3_5Adapter,
    "qwen3_5": Qwen3_5Adapter,
}


def for_model(model: nn.Module) -> Adapter:
    kind = model.config.model_type
    if kind not in ADAPTERS:
        raise ValueError(
            f"model_type {kind!r} is not supported; supported families: {sorted(ADAPTERS)}"
        )
    return ADAPTERS[kind](model)


__all__ = ["Adapter", "LayerInfo", "for_model", "ADAPTERS"]
