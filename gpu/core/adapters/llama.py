"""Llama-like models (Llama, SmolLM2, Mistral): no QK-norm, one rotary embedding."""
from .base import Adapter


class LlamaAdapter(Adapter):
    family = "llama"
