"""Exact prefix rows chosen inside a vLLM step: the ``attention`` selector served (paper
section 2.4; the tiered prefill, docs/results-quality.md).

The project's engine ranks the prefix rows by the attention the prompt's last ``window`` rows
pay them in the reference layers below the split, summed over heads and window rows, keeps the
top ``share`` of the prefix exact to the top and fills the rest (gpu.core.select.AttentionRows,
optionally with whole spans). In vLLM the same scores are read while the lower layers run:
each reference layer's keys of the step's rows and the queries of the window rows (projected
from the layer's input by gpu.serving.model). The ranking needs the window, so the step that
holds a prompt's last row selects. A prompt vLLM cuts into chunks (longer than its step budget,
``--max-num-batched-tokens``) fills each earlier chunk's rows when they are computed and keeps
their x_S, keys and last queries (:class:`Pending`); the step holding the end ranks every new
row, recomputes the chosen earlier rows from x_S to the top and rewrites the others' entries,
so a chunked prompt ends as the whole prompt in one step would. A prompt whose start was cached
ranks its new rows only (the cached rows keep their entries). Until the end arrives the earlier
blocks hold the plain fill: a request that reuses them from vLLM's prefix cache meanwhile, or
this request after a preemption (its waiting rows are dropped when it leaves the batch), reads
those filled entries (valid, but without the chosen rows made exact).
Pure torch and NumPy: no vLLM import.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

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

    def last(self, window: int) -> np.ndarray:
        """Step-token indices of the last ``window`` prompt rows this step holds (the window's
        queries when it holds the prompt's end; kept for it otherwise)."""
        hi = min(self.first + self.new, self.prompt_len)
        lo = max(hi - window, self.first)
        return self.start + np.arange(lo - self.first, hi - self.first)

    @property
    def n_prefix(self) -> int:
        """New prefix rows of this step (positions first .. prompt_len - tail)."""
        return max(self.prompt_len - self.tail - self.first, 0)


@dataclass
class Pending:
    """A prompt's new rows from steps before the one holding its end (vLLM cut it into
    chunks): their positions, x_S and keys at the reference layers, and the queries of its
    last ``window`` rows so far. They are filled when computed and ranked with the rest when
    the prompt's end arrives (gpu.serving.model)."""

    positions: torch.Tensor
    x: torch.Tensor
    keys: list[torch.Tensor]
    queries: list[torch.Tensor]
    query_positions: torch.Tensor

    def then(self, later: "Pending", window: int) -> "Pending":
        """These rows followed by ``later``'s, the queries cut to the last ``window``."""
        cat = torch.cat
        return Pending(cat([self.positions, later.positions]), cat([self.x, later.x]),
                       [cat(p) for p in zip(self.keys, later.keys)],
                       [cat(p)[-window:] for p in zip(self.queries, later.queries)],
                       cat([self.query_positions, later.query_positions])[-window:])

    def clone(self) -> "Pending":
        """A copy owning its tensors (a step's views die with the step's buffers)."""
        return Pending(self.positions.clone(), self.x.clone(), [k.clone() for k in self.keys],
                       [q.clone() for q in self.queries], self.query_positions.clone())


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
    the engine's AttentionRows ranking of ``scores``, completed to whole spans with the rows'
    ``pieces`` when the selection asks."""
    if n_prefix < 2:
        return np.zeros(0, np.int64)
    ref = AttentionRows(window=selection.window, share=selection.share,
                        complete=selection.complete)
    return ref.completed(ref.ranked(scores, n_prefix), pieces, n_prefix)


@dataclass(frozen=True)
class Virtual:
    """Rows of earlier steps that the step holding their prompt's end computes again:
    ``owner`` (the request's index in the step), ``positions``, x_S, and whether each runs
    exact (chosen) or is filled again (its entry rewritten as the whole-prompt fill writes it)."""

    owner: np.ndarray
    positions: np.ndarray
    x: torch.Tensor
    exact: np.ndarray

    @classmethod
    def none(cls, like: torch.Tensor) -> "Virtual":
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), like[:0], np.zeros(0, bool))

    @classmethod
    def join(cls, parts: list["Virtual"], like: torch.Tensor) -> "Virtual":
        """The rows of ``parts`` together (none: :meth:`none`)."""
        if not parts:
            return cls.none(like)
        return cls(np.concatenate([v.owner for v in parts]).astype(np.int64),
                   np.concatenate([v.positions for v in parts]).astype(np.int64),
                   torch.cat([v.x for v in parts]), np.concatenate([v.exact for v in parts]))


def merged_order(step_owner: np.ndarray, step_pos: np.ndarray, virtual: Virtual) -> np.ndarray:
    """The order of the rows [the step's tokens, then ``virtual``'s] by request and position
    (what gpu.serving.rows.plan_rows reads): identity when there are no virtual rows."""
    if not virtual.positions.size:
        return np.arange(step_pos.size)
    return np.lexsort((np.concatenate([step_pos, virtual.positions]),
                       np.concatenate([step_owner, virtual.owner])))
