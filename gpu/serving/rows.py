"""Which rows of one vLLM step are filled, and the attention batch of the rows that are not
(paper sections 2.1-2.2, as a serving engine schedules them).

A vLLM step holds the scheduled tokens of several requests side by side: request i's tokens
are ``query_start_loc[i]:query_start_loc[i+1]``, the last of its ``seq_lens[i]`` positions,
so a step may hold a whole prompt, one chunk of a long prompt (chunked prefill), the rest of
a prompt whose start was cached (prefix caching), or decoding tokens. Each new row is
classified by its position in the whole prompt (gpu.serving.step gives the prompt lengths):
positions ``0 .. P - tail - 1`` are the prefix and are filled, unless made exact; the tail,
everything past the prompt (decoding, a preempted request's generated tokens) and the rows
of a request whose prefill began with fewer than :data:`MIN_FILL_ROWS` prefix rows left run
the whole model. Rows already in the cache keep the entries they hold. Since a row's class
depends only on its position and where its request's prefill began, never on how the
scheduler cut the prompt into steps, a chunked prompt is filled as the whole prompt is.

The late layers compute queries only for the exact rows. Causal attention over a paged cache
reads "the last q tokens of a sequence of length s", so each run of consecutive exact rows of
a request becomes one attention sequence of its own: the run's rows as queries, ``s`` = the
run's last position + 1, the request's block table. Pure NumPy: no vLLM import.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepRows:
    """One step's rows: ``filled`` and ``computed`` index the step's tokens (ascending);
    ``starts``/``seq_lens``/``owner`` are the computed rows' attention sequences: sequence j
    holds computed rows ``starts[j]:starts[j+1]`` (indices into ``computed``), ends at
    position ``seq_lens[j] - 1`` and belongs to request ``owner[j]``."""

    filled: np.ndarray
    computed: np.ndarray
    starts: np.ndarray
    seq_lens: np.ndarray
    owner: np.ndarray

    @property
    def any_filled(self) -> bool:
        return self.filled.size > 0


# A request whose prefill starts with fewer prefix rows than this runs exact (vLLM's own
# forward). Filling paid off at every size measured on the 0.5B in bf16 after a 4K cached
# prefix, 1.15x for 32 new rows and 1.40-1.45x from 128 on (gpu.lab.tools.fill_threshold,
# results/serving/fill_threshold.json); below 32 the rows are too few to time apart from
# the step's fixed costs, so they run as stock does
MIN_FILL_ROWS = 32


def prefix_rows(query_start_loc, seq_lens, prompt_lens, started, tail: int,
                min_rows: int = MIN_FILL_ROWS) -> list[np.ndarray]:
    """Per request, the step-token indices of its new prompt-prefix rows (positions below
    ``prompt_lens - tail``); none for a request whose prefill began (``started``: its cached
    prefix) with fewer than ``min_rows`` such rows left."""
    qsl, sl = np.asarray(query_start_loc, np.int64), np.asarray(seq_lens, np.int64)
    plen, began = np.asarray(prompt_lens, np.int64), np.asarray(started, np.int64)
    out = []
    for i in range(sl.size):
        a, b = int(qsl[i]), int(qsl[i + 1])
        first = int(sl[i]) - (b - a)                # the step's first position
        end = int(plen[i]) - tail                   # the prefix's end (exclusive)
        if end - int(began[i]) < max(min_rows, 1) or first >= end:
            out.append(np.zeros(0, np.int64))
            continue
        out.append(np.arange(a, a + min(end, int(sl[i])) - first))
    return out


def plan_step(query_start_loc, seq_lens, filled) -> StepRows:
    """The step's filled rows (``filled``: step-token indices) and the attention sequences
    of every other row (see :class:`StepRows`)."""
    qsl, sl = np.asarray(query_start_loc, np.int64), np.asarray(seq_lens, np.int64)
    return plan_rows(np.repeat(np.arange(sl.size), np.diff(qsl)), positions_of(qsl, sl), filled)


def plan_rows(owner, pos, filled) -> StepRows:
    """:func:`plan_step` over rows given by their request (``owner``) and position, ordered
    by request and, within one, by position (a step's tokens, or a step's tokens with rows of
    earlier steps of a request put before them: gpu.serving.tiered)."""
    owner_tok, pos = np.asarray(owner, np.int64), np.asarray(pos, np.int64)
    is_filled = np.zeros(pos.size, bool)
    is_filled[np.asarray(filled, np.int64)] = True
    computed = np.flatnonzero(~is_filled)
    c_owner, c_pos = owner_tok[computed], pos[computed]
    # a new sequence wherever the request changes or a position is skipped
    new = np.ones(computed.size, bool)
    new[1:] = (c_owner[1:] != c_owner[:-1]) | (c_pos[1:] != c_pos[:-1] + 1)
    first = np.flatnonzero(new)
    last = np.append(first[1:], computed.size) - 1
    return StepRows(filled=np.flatnonzero(is_filled), computed=computed,
                    starts=np.append(first, computed.size),
                    seq_lens=c_pos[last] + 1 if computed.size else np.zeros(0, np.int64),
                    owner=c_owner[first])


def positions_of(query_start_loc, seq_lens) -> np.ndarray:
    """Each step token's position in its request (what vLLM passes as ``positions``)."""
    qsl, sl = np.asarray(query_start_loc, np.int64), np.asarray(seq_lens, np.int64)
    owner = np.repeat(np.arange(sl.size), np.diff(qsl))
    return np.arange(int(qsl[-1])) - qsl[owner] + (sl - np.diff(qsl))[owner]
