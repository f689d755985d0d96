"""What only an evaluation adds to a prefill, beside the user's PrefillConfig (paper 6.5, 2.3).

A user's prefill is one PrefillConfig. The studies also splice exact keys or values into the
filled rows, fix the exact rows by hand, swap in a control selector or give DeltaM
explicitly; those are :class:`Extras`, kept apart so that the configuration a user sees holds
no diagnostic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPLICES = ("keys", "values", "both")


@dataclass(frozen=True, eq=False)
class Extras:
    """Evaluation-only additions to one prefill.

    splice: replace the filled rows' keys, values or both by those of ``exact_cache``.
    selector: a row selector that replaces the configured ``rows`` (the count-matched controls).
    exact_rows: prefix rows fixed as exact (no selector runs; the configuration's rows must be
    'none'). deltas: {layer: DeltaM (H_v, d_k, d_v)} for the terminal-state correction, given
    instead of read from the maps.
    """

    splice: str | None = None
    exact_cache: object | None = None
    selector: object | None = None
    exact_rows: np.ndarray | None = None
    deltas: dict | None = None

    def __post_init__(self):
        if self.splice is not None and (self.splice not in SPLICES or self.exact_cache is None):
            raise ValueError(f"splice={self.splice!r} needs one of {SPLICES} and an exact_cache "
                             "(the exact arm's cache of the same prompt)")
        if self.selector is not None and self.exact_rows is not None:
            raise ValueError("give either exact_rows or a selector: a selector chooses the exact "
                             "rows itself")


NONE = Extras()
