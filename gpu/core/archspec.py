"""The cost-model architecture (rfmath.cost.Arch) of a Hugging Face config (paper 2.5)."""
from __future__ import annotations

from rfmath.cost import Arch


def arch_of(config) -> Arch:
    """The decoder's shape (the text config of a multimodal checkpoint)."""
    config = config.get_text_config()
    types = getattr(config, "layer_types", None)
    kinds = None
    if types is not None:
        table = {"sliding_attention": "sliding", "full_attention": "attention",
                 "linear_attention": "gdn", "attention": "attention"}
        kinds = tuple(table[t] for t in types)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return Arch(n_layers=config.num_hidden_layers, d_model=config.hidden_size,
                n_heads=config.num_attention_heads, n_kv_heads=config.num_key_value_heads,
                head_dim=head_dim, d_ff=config.intermediate_size, vocab=config.vocab_size,
                layer_types=kinds,
                sliding_window=getattr(config, "sliding_window", None) if kinds and "sliding" in kinds else None)
