"""Exact prefix rows chosen inside a vLLM step: the ``attention`` selector served (paper
section 2.4; the tiered prefill, docs/results-quality.md).

The project's engine ranks the prefix rows by the attention the prompt's last ``window`` rows
pay them in the reference layers below the split, summed over heads and window rows, keeps the
top ``share`` of the prefix exact to the top and fills the rest (gpu.core.select.AttentionRows,
optionally with whole spans). In vLLM the same scores are read while the lower layers run:
each reference layer's keys of the step's rows and the queries of the window rows (projected
from the layer's input by gpu.serving.model). The ranking needs the window, so only the step
that holds a prompt's last row selects; a prompt's rows in an earlier step (a chunk of a prompt
longer than vLLM's step budget, ``--max-num-batched-tokens``) run exact, the safe side. A
prompt whose start was cached ranks its new rows only (the cached rows keep their entries).
Pure torch and NumPy: no vLLM import.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rfmodel import selectors as rs

from ..core.attention import attention_probs
from ..core.select import AttentionRows, lower_layers

@dataclass(frozen=True)
class Selection:
    """The served selector: the reference ``layers`` below the split, the last ``window``
    prompt rows as queries, the top ``share`` of the ranked rows, whole spans or not."""

    layers: tuple[int, ...]
    window: int
    share: float
    complete: bool

    @classmethod
    def of(cls, config) -> "Selection | None":
        """The selection of a PrefillConfig (None for rows='none'), with AttentionRows'
        defaults for the options it does not give."""
        if config.rows == "none":
            return None
        ref = AttentionRows(**config.options)
        return cls(tuple(lower_layers(config.split)), int(ref.window), float(ref.share),
                   bool(ref.complete))


@dataclass(frozen=True)
class Request:
    """One request's rows in a step: step-token indices ``start`` .. ``start + new`` hold its
    positions ``first`` .. ``first + new``; its prompt ends at ``prompt_len`` with a ``tail``."""

    start: int
    first: int
    new: int
    prompt_len: int
    tail: int

    @property
    def holds_end(self) -> bool:
        """Whether this step computes the prompt's last row (the window's last query)."""
        return self.first < self.prompt_len <= self.first + self.new

    def window(self, window: int) -> np.ndarray:
        """Step-token indices of the window rows this step holds: the prompt's last ``window``
        rows, from this step's first row on."""
        lo = max(self.prompt_len - window, self.first)
        return self.start + np.arange(lo - self.first, self.prompt_len - self.first)

    @property
    def n_prefix(self) -> int:
        """New prefix rows of this step (positions first .. prompt_len - tail)."""
        return max(self.prompt_len - self.tail - self.first, 0)


def received(queries: torch.Tensor, keys: torch.Tensor, q_pos: torch.Tensor,
             k_pos: torch.Tensor, scaling: float) -> torch.Tensor:
    """Attention each key row receives from the query rows, summed over heads and queries
    (gpu.core.select.lower_received's score for one layer): ``queries`` (w, H, D) at positions
    ``q_pos``, ``keys`` (n, Hkv, D) at ``k_pos``, causal; computed in float32."""
    allowed = k_pos[None, :] <= q_pos[:, None]
    q = queries.float().transpose(0, 1)[None]
    k = keys.float().transpose(0, 1)[None]
    return attention_probs(q, k, allowed, scaling).sum(dim=(0, 1, 2))


def chosen(scores: np.ndarray, n_prefix: int, selection: Selection,
           pieces: list[str] | None) -> np.ndarray:
    """The exact rows among ``n_prefix`` new prefix rows (indices from the first new row):
    the top share by ``scores``, completed to whole spans with the rows' ``pieces`` when the
    selection asks (AttentionRows.rows, then Selector.__call__)."""
    if n_prefix < 2:
        return np.zeros(0, np.int64)
    rows = rs.attention_ranked(scores, n_prefix, selection.share)
    if selection.complete and rows.size:
        rows = rs.complete_spans(rows, pieces, n_prefix)
    return rows
