"""The named configurations commands and studies start from, each a :class:`PrefillConfig`:
one home for their literals.

- :func:`pop`: POP native, the paper's baseline (section 6.4): the identity fill of the last
  floor(L/3) layers, a one-token tail, no exact rows.
- :func:`paper`: the paper's default split of 3/8 depth (section 2.1) with the library's
  defaults for everything else.
- the advised configuration of a built-in model or of a map file: gpu.core.advised.
"""
from __future__ import annotations

from .config import PrefillConfig, paper_split, pop_split

POP_TAIL = 1


def pop(n_layers: int, base: PrefillConfig | None = None) -> PrefillConfig:
    """POP native for an ``n_layers`` model (``base``'s other fields, e.g. its chunk)."""
    return (base or PrefillConfig()).replace(fill="identity", split=pop_split(n_layers),
                                             tail=POP_TAIL, rows="none", values_fill=None)


def paper(n_layers: int, base: PrefillConfig | None = None) -> PrefillConfig:
    """The paper's default split for an ``n_layers`` model on ``base`` (default
    PrefillConfig())."""
    return (base or PrefillConfig()).replace(split=paper_split(n_layers))
