"""Gemma 3: QK-norm, sliding-window and global layers with their own rotary tables, and
sandwich norms around attention and MLP."""
from __future__ import annotations

import torch

from .base import Adapter


class Gemma3Adapter(Adapter):
    family = "gemma3"

    def rope(self, h: torch.Tensor, positions: torch.Tensor, i: int):
        return self.inner.rotary_emb(h, positions, self.config.layer_types[i])

    def finish(self, i: int, h: torch.Tensor, attn_out: torch.Tensor,
               gate: torch.Tensor | None = None) -> torch.Tensor:
        layer = self.layers[i]
        h = h + layer.post_attention_layernorm(layer.self_attn.o_proj(attn_out))
        return h + layer.post_feedforward_layernorm(layer.mlp(layer.pre_feedforward_layernorm(h)))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """As Gemma3ForCausalLM: lm_head on the final norm, then the final logit soft cap."""
        logits = self.model.lm_head(self.inner.norm(h))
        cap = getattr(self.config, "final_logit_softcapping", None)
        return logits if cap is None else torch.tanh(logits / cap) * cap


class Gemma3MultimodalAdapter(Gemma3Adapter):
    """The text decoder of a multimodal Gemma-3 checkpoint (model_type ``gemma3``,
    Gemma3ForConditionalGeneration): its language model's layers, its text config, and the
    checkpoint's lm_head without a soft cap (as that class computes its logits). Prompts are
    text only: image tokens are not supported."""

    family = "gemma3 (multimodal checkpoint, text decoder)"

    def __init__(self, model):
        self.model = model
        self.config = model.config.get_text_config()
        self.inner = model.model.language_model
        self.layers = self.inner.layers

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.inner.norm(h))
