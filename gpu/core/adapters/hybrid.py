"""Gated DeltaNet hybrids (Qwen3-Next, Qwen3.5 text): attention layers whose q_proj also
yields an output gate (attention * sigmoid(gate) before o_proj), (1 + w) RMSNorms on queries
and keys, partial rotary (handled by the base adapter), and Gated DeltaNet layers whose token
mixer (``linear_attn``) keeps a conv state and a recurrent state in the cache (paper 2.3)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .base import Adapter, _apply_rope


class HybridAdapter(Adapter):
    family = "gdn-hybrid"

    def __init__(self, model):
        self.model = model
        self.config = model.config.get_text_config()
        inner = model.model
        # Qwen3.5's vision-language wrapper keeps the text decoder in ``language_model``
        self.inner = inner.language_model if not hasattr(inner, "layers") else inner
        self.layers = self.inner.layers

    # --- gated attention ---------------------------------------------------------------------
    def queries_gated(self, i, normed, cos, sin):
        attn = self.attn(i)
        lead = normed.shape[:-1]
        q, gate = torch.chunk(attn.q_proj(normed).view(*lead, -1, attn.head_dim * 2), 2, dim=-1)
        gate = gate.reshape(*lead, -1)
        q = attn.q_norm(q.view(*lead, -1, attn.head_dim)).transpose(1, 2)
        return _apply_rope(q, cos, sin), gate

    def queries(self, i, normed, cos, sin):
        return self.queries_gated(i, normed, cos, sin)[0]

    def finish(self, i, h, attn_out, gate=None):
        if gate is not None:
            attn_out = attn_out * torch.sigmoid(gate)
        return self.finish_mixed(i, h, self.attn(i).o_proj(attn_out))

    def finish_mixed(self, i, h, mixed):
        layer = self.layers[i]
        h = h + mixed
        out = layer.mlp(layer.post_attention_layernorm(h))
        if isinstance(out, tuple):  # MoE blocks may return (hidden, router logits)
            out = out[0]
        return h + out

    # --- Gated DeltaNet ------------------------------------------------------------------------
    def gdn(self, i: int):
        return self.layers[i].linear_attn

    def mix(self, i, normed, cache):
        return self.gdn(i)(hidden_states=normed, cache=cache, attention_mask=None)

    def _a(self, mixer, normed) -> torch.Tensor:
        """The pre-activation ``a`` of the decay (1, n, H_v)."""
        raise NotImplementedError

    def gdn_log_gates(self, i, normed):
        m = self.gdn(i)
        a = self._a(m, normed)
        return -m.A_log.float().exp() * F.softplus(a.float() + m.dt_bias)
