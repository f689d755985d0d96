"""gpu.serving.rows against a token-by-token oracle (Hypothesis): a vLLM step of requests in
every state a scheduler mixes (a whole prompt, a chunk of one, the rest of one whose start was
cached, decoding, a preempted request's recomputation past its prompt), a tail, a threshold,
and any filled set.

Oracles: a token is a prefix row exactly when its position is below its prompt's length minus
the tail and its request's prefill began with at least ``min_rows`` such rows left (so a row's
class never depends on where the scheduler cut the prompt: every chunking of a prompt fills
the same rows); every computed token lies in exactly one attention sequence of its own
request, at the query slot whose causal position (seq_len - q_len + slot, how vLLM's kernel
places queries) is the token's own position, so it reads exactly that request's keys
0..position, as in exact prefill."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.serving.rows import plan_step, positions_of, prefix_rows


@st.composite
def requests(draw):
    """One request: (prompt length, where its prefill began, first position, step length)."""
    prompt = draw(st.integers(1, 60))
    started = draw(st.integers(0, prompt - 1))                 # a cached prefix, or none
    first = draw(st.integers(started, prompt + 5))             # a chunk, the rest, or decoding
    q = draw(st.integers(1, 40 if first < prompt else 3))
    return prompt, started, first, q


@st.composite
def steps(draw):
    """(query_start_loc, seq_lens, prompt_lens, started, tail, min_rows, filled indices)."""
    reqs = draw(st.lists(requests(), min_size=1, max_size=5))
    prompt, started, first, q = (np.asarray(v, np.int64) for v in zip(*reqs))
    qsl = np.concatenate([[0], np.cumsum(q)])
    tail, min_rows = draw(st.integers(1, 8)), draw(st.integers(0, 30))
    filled = np.concatenate(prefix_rows(qsl, first + q, prompt, started, tail, min_rows))
    keep = draw(st.lists(st.booleans(), min_size=filled.size, max_size=filled.size))
    return (qsl, first + q, prompt, started, tail, min_rows,
            filled.astype(np.int64)[np.asarray(keep, bool)])


@given(steps())
@settings(max_examples=300, deadline=None)
def test_prefix_rows_are_the_prompt_prefixes(step):
    qsl, seq_lens, prompt, started, tail, min_rows, _ = step
    pos = positions_of(qsl, seq_lens)
    for i, rows in enumerate(prefix_rows(qsl, seq_lens, prompt, started, tail, min_rows)):
        tokens = np.arange(qsl[i], qsl[i + 1])
        worth = prompt[i] - tail - started[i] >= max(min_rows, 1)
        expected = tokens[pos[tokens] < prompt[i] - tail] if worth else tokens[:0]
        assert rows.tolist() == expected.tolist()
        assert pos[tokens[-1]] == seq_lens[i] - 1


@given(st.integers(2, 80), st.integers(0, 79), st.integers(1, 8), st.integers(0, 20),
       st.lists(st.integers(1, 30), min_size=1, max_size=10))
@settings(max_examples=200, deadline=None)
def test_every_chunking_fills_the_rows_the_whole_prompt_fills(prompt, started, tail, min_rows,
                                                              cuts):
    """A prompt's rows from ``started`` on, scheduled in chunks of any sizes (each chunk a step
    of its own), fill the same positions as one step of all of them."""
    started = min(started, prompt - 1)
    def filled_positions(sizes):
        out, at = [], started
        for q in sizes:
            q = min(q, prompt - at)
            if q <= 0:
                break
            qsl, sl = np.array([0, q]), np.array([at + q])
            (rows,) = prefix_rows(qsl, sl, [prompt], [started], tail, min_rows)
            out += (positions_of(qsl, sl)[rows]).tolist()
            at += q
        return out, at
    chunked, reached = filled_positions(cuts)
    whole, _ = filled_positions([reached - started])
    assert chunked == whole


@given(steps())
@settings(max_examples=200, deadline=None)
def test_each_exact_row_reads_its_own_request_up_to_its_position(step):
    qsl, seq_lens, *_, filled = step
    plan = plan_step(qsl, seq_lens, filled)
    n = int(qsl[-1])
    assert sorted(plan.filled.tolist() + plan.computed.tolist()) == list(range(n))
    assert set(plan.filled.tolist()) == set(filled.tolist())
    pos = positions_of(qsl, seq_lens)
    owner = np.searchsorted(qsl, np.arange(n), side="right") - 1
    seen = []
    for j in range(plan.seq_lens.size):
        members = plan.computed[plan.starts[j]:plan.starts[j + 1]]
        q = members.size
        assert q >= 1 and (owner[members] == plan.owner[j]).all()
        for slot, token in enumerate(members):
            assert plan.seq_lens[j] - q + slot == pos[token]   # vLLM's causal query position
        seen += members.tolist()
    assert seen == plan.computed.tolist()
