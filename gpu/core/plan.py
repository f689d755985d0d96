"""The prefill plan (paper section 2.1): split S, tail T, and which prefix rows are exact.

The plan is a value computed once per request; kernels never re-derive it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Plan:
    """Rows 0..n_prefix-1 are the prefix; the last ``tail`` rows run every layer exactly."""

    n: int
    split: int
    tail: int
    n_layers: int
    exact_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __post_init__(self):
        if not 1 <= self.split <= self.n_layers - 1:
            raise ValueError(
                f"split={self.split} is outside 1..{self.n_layers - 1} for a {self.n_layers}-layer "
                "model; choose a layer between the first and the last (paper default: 3/8 of depth)"
            )
        if self.tail < 1:
            raise ValueError(f"tail={self.tail} must be >= 1: the last rows of the prompt run exactly")
        if self.n < 1:
            raise ValueError("the prompt is empty: give at least one token")
        rows = np.unique(np.asarray(self.exact_rows, dtype=np.int64))
        if rows.size and (rows[0] < 0 or rows[-1] >= self.n_prefix):
            raise ValueError(f"exact_rows must lie in the prefix 0..{self.n_prefix - 1}")
        object.__setattr__(self, "exact_rows", rows)

    @property
    def n_prefix(self) -> int:
        return max(self.n - self.tail, 0)

    @property
    def all_exact(self) -> bool:
        return self.n_prefix == 0 or self.exact_rows.size == self.n_prefix

    @property
    def computed(self) -> np.ndarray:
        """Rows that run every layer: exact prefix rows then the tail, in order."""
        return np.concatenate([self.exact_rows, np.arange(self.n_prefix, self.n)])

    @property
    def filled(self) -> np.ndarray:
        mask = np.ones(self.n_prefix, bool)
        mask[self.exact_rows] = False
        return np.flatnonzero(mask)

    def counts(self) -> dict[str, int]:
        return {"prompt_tokens": self.n, "filled": int(self.filled.size),
                "exact_prefix": int(self.exact_rows.size), "tail": self.n - self.n_prefix}

    def with_rows(self, rows) -> "Plan":
        return Plan(self.n, self.split, self.tail, self.n_layers, np.asarray(rows, np.int64))


def row_counts(plan: "Plan | None", n: int) -> dict[str, int]:
    """Filled, exact-prefix and tail rows of a prefill of ``n`` rows under ``plan`` (None:
    exact prefill, every row in the tail): what the evaluation's records carry."""
    if plan is None:
        return {"filled": 0, "exact_prefix": 0, "tail": n}
    c = plan.counts()
    return {"filled": c["filled"], "exact_prefix": c["exact_prefix"], "tail": c["tail"]}
