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
