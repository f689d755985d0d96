"""What the engine needs to know about a model family (paper section 2.1).

An adapter names the pieces of a Hugging Face causal LM: its decoder layers, each layer's
input norm and key/value writers, the rotary embedding, and how a layer finishes after
attention (residual, MLP). The engine itself is family-agnostic.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class LayerInfo:
    kind: str                 # "attention" | "sliding" | "gdn"
    window: int | None = None  # sliding window (keys with q_pos - k_pos < window are visible)


class Adapter:
    """Default adapter: Llama-like decoder layers (``self_attn``, ``mlp``, two RMSNorms)."""

    family = "llama"

    def __init__(self, model: nn.Module):
        self.model = model
        self.config = model.config
        self.inner = model.model
        self.layers = self.inner.layers

    # --- structure -------------------------------------------------------------------------
    @property
    def n_layers(self) -> int:
        return len(self.layers)

    def layer_info(self, i: int) -> LayerInfo:
        types = getattr(self.config, "layer_types", None)
        if types is not None and types[i] == "sliding_attention":
            return LayerInfo("sliding", int(self.config.sliding_window))
        if types is not None and types[i] == "linear_attention":
            return LayerInfo("gdn")
        return LayerInfo("attention")

    def attn(self, i: int) -> nn.Module:
        return self.layers[i].self_attn

    def input_norm(self, i: int) -> nn.Module:
        return self.layers[i].input_layernorm

    def rope(self, h: torch.Tensor, positions: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin for ``positions`` (shape (1, n)) as the model's own rotary embedding makes them."""
        return self.inner.rotary_emb(h, positions)

    # --- computation -----------------------------------------------------------------------
    def keys_values(self, i: int, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Cache entries (post-norm, post-RoPE) of rows whose normed layer input is ``normed``.

        normed: (1, n, d) -> k, v: (1, n_kv, n, head_dim).
        """
        attn = self.attn(i)
        shape = (*normed.shape[:-1], -1, attn.head_dim)
        k = attn.k_proj(normed).view(shape).transpose(1, 2)
        v = attn.v_proj(normed).view(shape).transpose(1, 2)
        if hasattr(attn, "k_norm"):
            k = attn.k_norm(k)
        k = k * cos.unsqueeze(1) + _rotate_half(k) * sin.unsqueeze(1)
        return k, v

    def queries(self, i: int, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        attn = self.attn(i)
        shape = (*normed.shape[:-1], -1, attn.head_dim)
        q = attn.q_proj(normed).view(shape).transpose(1, 2)
        if hasattr(attn, "q_norm"):
            q = attn.q_norm(q)
        return q * cos.unsqueeze(1) + _rotate_half(q) * sin.unsqueeze(1)

    def scaling(self, i: int) -> float:
        return float(self.attn(i).scaling)

    def finish(self, i: int, h: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        """The rest of the layer after attention: residual add and MLP (Llama order)."""
        layer = self.layers[i]
        h = h + layer.self_attn.o_proj(attn_out)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.inner.norm(h))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
