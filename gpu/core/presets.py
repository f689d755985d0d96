"""The named configurations commands and studies start from, each a :class:`PrefillConfig`:
one home for their literals.

- :func:`pop`: POP native, the paper's baseline (section 6.4): the identity fill of the last
  floor(L/3) layers, a one-token tail, no exact rows.
- the advised configuration of a built-in model or of a map file: gpu.core.advised.
"""
from __future__ import annotations

from .config import PrefillConfig, pop_split

POP_TAIL = 1


def pop(n_layers: int, base: PrefillConfig | None = None) -> PrefillConfig:
    """POP native for an ``n_layers`` model (``base``'s other fields, e.g. its chunk)."""
    return (base or PrefillConfig()).replace(fill="identity", split=pop_split(n_layers),
                                             tail=POP_TAIL, rows="none", values_fill=None)

