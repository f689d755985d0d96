"""Qwen3: Llama layout plus per-head RMSNorm on queries and keys (QK-norm) before RoPE."""
from .base import Adapter


class Qwen3Adapter(Adapter):
    family = "qwen3"  # q_norm / k_norm are picked up by Adapter.queries / keys_values
