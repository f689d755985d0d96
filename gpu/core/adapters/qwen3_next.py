"""Qwen3-Next: Gated DeltaNet + gated attention hybrid; q/k/v/z and b/a come out of two fused,
head-grouped projections; MoE or dense MLP per layer."""
from .hybrid import HybridAdapter


class Qwen3NextAdapter(HybridAdapter):
    family = "qwen3_next"

    def _a(self, m, normed):
        ba = m.in_proj_ba(normed)
        ba = ba.view(*ba.shape[:-1], m.num_k_heads, 2 * m.num_v_heads // m.num_k_heads)
        a = ba[..., m.num_v_heads // m.num_k_heads:]
        return a.reshape(*a.shape[:-2], m.num_v_heads)

    def gdn_writes(self, i, normed):
        m = self.gdn(i)
        _, k, v, _, _, _ = m.fix_query_key_value_ordering(m.in_proj_qkvz(normed), m.in_proj_ba(normed))
        return k.reshape(*k.shape[:2], -1), v.reshape(*v.shape[:2], -1)
