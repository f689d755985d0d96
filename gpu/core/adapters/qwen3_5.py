"""Qwen3.5 (text path): Gated DeltaNet + gated attention hybrid with separate q/k/v, z, b and a
projections in its GDN layers."""
from .hybrid import HybridAdapter


class Qwen3_5Adapter(HybridAdapter):
    family = "qwen3_5"

    def _a(self, m, normed):
        return m.in_proj_a(normed)

    def gdn_writes(self, i, normed):
        m = self.gdn(i)
        _, k, v = m.in_proj_qkv(normed).split([m.key_dim, m.key_dim, m.value_dim], dim=-1)
        return k, v
