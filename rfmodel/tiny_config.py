"""The tiny reference model's architecture and caches (rfmodel.model, paper 2.1): its
configuration, the HF-named weight shapes it loads, and the per-layer cache records."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rfmodel import _validate as _v

__all__ = ["ARMS", "LAYER_TYPES", "TinyConfig", "AttnCache", "GdnCache", "Cache", "weight_shapes"]

ARMS = ("exact", "nofill", "identity", "ridgefill")
LAYER_TYPES = ("attention", "gdn")


@dataclass(frozen=True)
class TinyConfig:
    """Architecture of a TinyModel. ``layer_types=None`` means every layer is attention."""

    vocab: int = 64
    hidden: int = 32
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 8
    intermediate: int = 64
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    qk_norm: bool = False
    layer_types: tuple[str, ...] | None = None
    gdn_heads: int = 2
    gdn_k_dim: int = 8
    gdn_v_dim: int = 8
    tie_embeddings: bool = False

    def __post_init__(self):
        for name in ("vocab", "hidden", "n_layers", "n_heads", "n_kv_heads", "head_dim",
                     "intermediate", "gdn_heads", "gdn_k_dim", "gdn_v_dim"):
            _v.integer(getattr(self, name), name, minimum=1)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads must be a multiple of n_kv_heads; got {self.n_heads} and "
                             f"{self.n_kv_heads}.")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even (RoPE rotates pairs); got {self.head_dim}.")
        types = ("attention",) * self.n_layers if self.layer_types is None else tuple(self.layer_types)
        if len(types) != self.n_layers or any(t not in LAYER_TYPES for t in types):
            raise ValueError(f"layer_types must list {self.n_layers} entries from {LAYER_TYPES}; "
                             f"got {self.layer_types!r}.")
        object.__setattr__(self, "layer_types", types)


@dataclass
class AttnCache:
    """One attention layer's cache: k, v ``(Hkv, n, D)`` (post-norm, post-RoPE), positions
    ``(n,)``, and which rows were filled ``(n,)`` bool."""

    k: np.ndarray
    v: np.ndarray
    pos: np.ndarray
    filled: np.ndarray


@dataclass
class GdnCache:
    """One GDN layer's recurrent state ``(Hg, d_k, d_v)`` and the filled share rho ``(Hg,)``
    measured at the end of the prefix (zeros when nothing was filled)."""

    state: np.ndarray
    rho: np.ndarray


@dataclass
class Cache:
    """Per-layer caches of a prompt of ``length`` rows; decode_step appends to it in place."""

    layers: list
    length: int
    info: dict = field(default_factory=dict)


def weight_shapes(c: TinyConfig) -> dict[str, tuple[int, ...]]:
    C, D = c.hidden, c.head_dim
    shapes = {"model.embed_tokens.weight": (c.vocab, C), "model.norm.weight": (C,)}
    if not c.tie_embeddings:
        shapes["lm_head.weight"] = (c.vocab, C)
    for i, kind in enumerate(c.layer_types):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (C,)
        shapes[p + "post_attention_layernorm.weight"] = (C,)
        shapes[p + "mlp.gate_proj.weight"] = (c.intermediate, C)
        shapes[p + "mlp.up_proj.weight"] = (c.intermediate, C)
        shapes[p + "mlp.down_proj.weight"] = (C, c.intermediate)
        if kind == "attention":
            shapes[p + "self_attn.q_proj.weight"] = (c.n_heads * D, C)
            shapes[p + "self_attn.k_proj.weight"] = (c.n_kv_heads * D, C)
            shapes[p + "self_attn.v_proj.weight"] = (c.n_kv_heads * D, C)
            shapes[p + "self_attn.o_proj.weight"] = (C, c.n_heads * D)
            if c.qk_norm:
                shapes[p + "self_attn.q_norm.weight"] = (D,)
                shapes[p + "self_attn.k_norm.weight"] = (D,)
        else:
            H, dk, dv = c.gdn_heads, c.gdn_k_dim, c.gdn_v_dim
            a = p + "linear_attn."
            shapes.update({a + "q_proj.weight": (H * dk, C), a + "k_proj.weight": (H * dk, C),
                           a + "v_proj.weight": (H * dv, C), a + "a_proj.weight": (H, C),
                           a + "b_proj.weight": (H, C), a + "o_proj.weight": (C, H * dv),
                           a + "A_log": (H,), a + "dt_bias": (H,)})
    return shapes
