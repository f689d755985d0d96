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
    def writer(self, i: int) -> "EntryWriter":
        """Layer ``i``'s cache-entry writer (its own modules, not copies)."""
        return EntryWriter(self.input_norm(i), self.attn(i))

    def keys_values(self, i: int, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Cache entries (post-norm, post-RoPE) of rows whose normed layer input is ``normed``.

        normed: (1, n, d) -> k, v: (1, n_kv, n, head_dim).
        """
        return self.writer(i).project(normed, cos, sin)

    def project_entries(self, i: int, kv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Cache entries from a direct cache-entry map's output ``kv`` (1, n, 2 n_kv d_head):
        its key and value projections stacked, before the key norm and RoPE (the maps' kind
        "kv"). -> k, v: (1, n_kv, n, head_dim), as :meth:`keys_values` returns them."""
        k, v = kv.chunk(2, dim=-1)
        return self.writer(i).entries(k, v, cos, sin)

    def queries(self, i: int, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        attn = self.attn(i)
        shape = (*normed.shape[:-1], -1, attn.head_dim)
        q = attn.q_proj(normed).view(shape).transpose(1, 2)
        if hasattr(attn, "q_norm"):
            q = attn.q_norm(q)
        return _apply_rope(q, cos, sin)

    def queries_gated(self, i: int, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """(queries, output gate or None). Families whose attention output is gated before
        o_proj (Qwen3-Next, Qwen3.5) return the gate; ``finish`` then takes it."""
        return self.queries(i, normed, cos, sin), None

    def scaling(self, i: int) -> float:
        return float(self.attn(i).scaling)

    def finish(self, i: int, h: torch.Tensor, attn_out: torch.Tensor,
               gate: torch.Tensor | None = None) -> torch.Tensor:
        """The rest of the layer after attention: residual add and MLP (Llama order)."""
        layer = self.layers[i]
        h = h + layer.self_attn.o_proj(attn_out)
        return h + layer.mlp(layer.post_attention_layernorm(h))

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self.inner.norm(h))

    # --- Gated DeltaNet layers (hybrid families override these) -------------------------------
    def mix(self, i: int, normed: torch.Tensor, cache) -> torch.Tensor:
        """The GDN layer's own token mixer over ``normed`` (1, n, d), rows in position order,
        continuing from and writing to ``cache``'s conv and recurrent state (None: empty state)."""
        raise NotImplementedError(f"the {self.family} adapter has no Gated DeltaNet layers")

    def finish_mixed(self, i: int, h: torch.Tensor, mixed: torch.Tensor) -> torch.Tensor:
        """The rest of a GDN layer after its mixer: residual add and MLP."""
        raise NotImplementedError(f"the {self.family} adapter has no Gated DeltaNet layers")

    def gdn_log_gates(self, i: int, normed: torch.Tensor) -> torch.Tensor:
        """Log of the per-row, per-value-head state gates (1, n, H_v), as the layer computes them."""
        raise NotImplementedError(f"the {self.family} adapter has no Gated DeltaNet layers")

    def gdn_writes(self, i: int, normed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What each row writes towards the state: its key and value projections (1, n, *)."""
        raise NotImplementedError(f"the {self.family} adapter has no Gated DeltaNet layers")


class EntryWriter(nn.Module):
    """What one attention layer writes into its cache for a row (paper 2.1-2.2): its input
    norm, K/V projections (and key norm) and RoPE at the row's position. ``forward`` takes the
    layer input; ``project`` the normed input. It holds the layer's own modules, so
    ``torch.func.functional_call`` with another layer's stacked weights runs that layer (the
    batched fill, gpu.core.batched)."""

    def __init__(self, norm: nn.Module, attn: nn.Module):
        super().__init__()
        self.norm, self.k_proj, self.v_proj = norm, attn.k_proj, attn.v_proj
        self.k_norm = getattr(attn, "k_norm", None)
        self.head_dim = attn.head_dim

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        return self.project(self.norm(x), cos, sin)

    def project(self, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        return self.entries(self.k_proj(normed), self.v_proj(normed), cos, sin)

    def entries(self, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Key and value projections (1, n, n_kv * head_dim) -> cache entries: heads split,
        the key norm (QK-norm families) and RoPE on the keys."""
        shape = (*k.shape[:-1], -1, self.head_dim)
        k, v = k.view(shape).transpose(1, 2), v.view(shape).transpose(1, 2)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return _apply_rope(k, cos, sin), v


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE on (1, heads, n, head_dim); partial rotary (cos narrower than the head) rotates the
    first cos.shape[-1] dims and passes the rest through, as transformers does."""
    r = cos.shape[-1]
    if r == x.shape[-1]:
        return x * cos.unsqueeze(1) + _rotate_half(x) * sin.unsqueeze(1)
    rot, rest = x[..., :r], x[..., r:]
    return torch.cat((rot * cos.unsqueeze(1) + _rotate_half(rot) * sin.unsqueeze(1), rest), dim=-1)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
