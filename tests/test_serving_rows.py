"""gpu.serving.rows against a token-by-token oracle (Hypothesis): a vLLM step of requests that
prefill whole prompts or continue (decoding, an earlier context), a tail, and any filled set.

Oracles: a token is a prefix row exactly when its request prefills from position 0 and its
position is below prompt length minus tail; every computed token lies in exactly one attention
sequence of its own request, at the query slot whose causal position (seq_len - q_len + slot,
how vLLM's kernel places queries) is the token's own position, so it reads exactly that
request's keys 0..position, as in exact prefill."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.serving.rows import plan_step, positions_of, prefix_rows


@st.composite
def steps(draw):
    """(query_start_loc, seq_lens, is_prefill per request, tail, filled token indices)."""
    k = draw(st.integers(1, 5))
    q_lens, seq_lens, prefill = [], [], []
    for _ in range(k):
        if draw(st.booleans()):
            n = draw(st.integers(1, 40))
            q_lens.append(n), seq_lens.append(n), prefill.append(True)
        else:
            q = draw(st.integers(1, 3))
            q_lens.append(q), seq_lens.append(q + draw(st.integers(1, 50))), prefill.append(False)
    qsl = np.concatenate([[0], np.cumsum(q_lens)])
    tail = draw(st.integers(1, 8))
    filled = np.concatenate(prefix_rows(qsl, seq_lens, tail)).astype(np.int64)
    keep = draw(st.lists(st.booleans(), min_size=filled.size, max_size=filled.size))
    return qsl, np.asarray(seq_lens), prefill, tail, filled[np.asarray(keep, bool)]


@given(steps())
@settings(max_examples=200, deadline=None)
def test_prefix_rows_are_the_prompt_prefixes(step):
    qsl, seq_lens, prefill, tail, _ = step
    pos = positions_of(qsl, seq_lens)
    for i, rows in enumerate(prefix_rows(qsl, seq_lens, tail)):
        tokens = np.arange(qsl[i], qsl[i + 1])
        n = qsl[i + 1] - qsl[i]
        expected = tokens[pos[tokens] < n - tail] if prefill[i] else tokens[:0]
        assert rows.tolist() == expected.tolist()
        assert pos[tokens[-1]] == seq_lens[i] - 1


@given(steps())
@settings(max_examples=200, deadline=None)
def test_each_exact_row_reads_its_own_request_up_to_its_position(step):
    qsl, seq_lens, _, _, filled = step
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
