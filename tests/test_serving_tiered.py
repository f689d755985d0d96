"""gpu.serving.tiered (the attention selector inside a vLLM step) against closed forms:
the received attention against a per-head, per-query softmax written out in NumPy (grouped
keys, causal); the chosen rows against the selector's definition (the top share by score,
every chosen row scoring at least every other, whole spans a superset); a request's window
against the prompt's last rows. The served path end to end (vLLM against the engine's
AttentionRows) is tests/test_serving_vllm.py's."""
from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.core.config import PrefillConfig
from gpu.core.select import AttentionRows, lower_layers
from gpu.serving.tiered import Request, Selection, chosen, received


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), w=st.integers(1, 6), n=st.integers(1, 12),
       kv=st.sampled_from([1, 2]), groups=st.sampled_from([1, 3]))
def test_received_is_the_summed_causal_softmax(seed, w, n, kv, groups):
    g = np.random.default_rng(seed)
    d, heads = 4, kv * groups
    q, k = g.normal(size=(w, heads, d)), g.normal(size=(n, kv, d))
    q_pos = np.sort(g.integers(0, n + 3, size=w))     # every query sees key 0 at least
    k_pos = np.arange(n)
    scale = 1 / math.sqrt(d)
    want = np.zeros(n)
    for t in range(w):
        for h in range(heads):
            s = np.where(k_pos <= q_pos[t], k[:, h // groups] @ q[t, h] * scale, -np.inf)
            want += np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    got = received(torch.tensor(q), torch.tensor(k), torch.tensor(q_pos), torch.tensor(k_pos),
                   scale)
    assert np.allclose(got.numpy(), want, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(scores=st.lists(st.floats(0, 10, allow_nan=False), min_size=2, max_size=60),
       share=st.sampled_from([0.1, 0.2, 0.3, 0.5]), complete=st.booleans())
def test_chosen_is_the_top_share_and_spans_only_add(scores, share, complete):
    n = len(scores)
    sc = np.asarray(scores)
    pieces = [("Ġ" if i % 3 == 0 else "") + "ab" for i in range(n)]   # three-piece words
    sel = Selection(layers=(3,), window=64, share=share, complete=False)
    top = chosen(sc, n, sel, None)
    assert top.size == math.floor(share * n)
    if top.size:
        assert sc[top].min() >= sc[np.setdiff1d(np.arange(n), top)].max(initial=-1)
    whole = chosen(sc, n, Selection((3,), 64, share, True), pieces) if complete else top
    assert np.isin(top, whole).all() and whole.max(initial=0) < n
    if complete and top.size:   # every chosen row's word is whole
        words = np.cumsum([p.startswith("Ġ") for p in pieces]) - 1
        for wd in np.unique(words[whole]):
            assert np.isin(np.flatnonzero(words == wd), whole).all()


def test_chosen_selects_nothing_from_a_prefix_of_one_row():
    assert chosen(np.ones(1), 1, Selection((3,), 64, 0.5, False), None).size == 0


@given(prompt=st.integers(2, 200), first=st.integers(0, 199), new=st.integers(1, 200),
       window=st.integers(1, 80), tail=st.integers(1, 8))
def test_a_requests_window_is_the_prompts_last_rows_this_step_holds(prompt, first, new,
                                                                    window, tail):
    r = Request(start=5, first=first, new=new, prompt_len=prompt, tail=tail)
    assert r.holds_end == (first <= prompt - 1 < first + new)
    positions = (r.last(window) - r.start + first).tolist()
    held = [p for p in range(first, first + new) if p < prompt]
    assert positions == held[-window:]
    if r.holds_end:
        assert positions == list(range(max(prompt - window, first), prompt))
    assert r.n_prefix == max(prompt - tail - first, 0)


def test_the_selection_reads_the_engines_defaults_and_layers():
    cfg = PrefillConfig(fill="kv", split=12, tail=1, rows="attention",
                        selector_options={"share": 0.2, "complete": True})
    sel = Selection.of(cfg)
    assert sel == Selection(tuple(lower_layers(12)), AttentionRows().window, 0.2, True)
    assert sel.layers == (3, 7, 11)
    assert Selection.of(PrefillConfig(fill="kv", split=12, tail=1, rows="none")) is None


def test_a_chunked_prompts_rows_join_in_order_and_merge_by_position():
    """Pending.then puts a later chunk's rows after the earlier ones and keeps only the last
    ``window`` queries; merged_order sorts the step's tokens and the rows computed again by
    request, then position (identity without such rows)."""
    from gpu.serving.tiered import Pending, Virtual, merged_order

    def rows(lo, hi):
        pos = torch.arange(lo, hi)
        return Pending(pos, pos[:, None].float(), [pos[:, None] * 2], [pos[:, None] * 3], pos)

    both = rows(0, 5).then(rows(5, 8), window=4)
    assert both.positions.tolist() == list(range(8)) and both.x[:, 0].tolist() == list(range(8))
    assert both.keys[0][:, 0].tolist() == [2 * p for p in range(8)]
    assert both.query_positions.tolist() == [4, 5, 6, 7]
    assert both.queries[0][:, 0].tolist() == [12, 15, 18, 21]
    owner, pos = np.array([0, 0, 1, 1]), np.array([6, 7, 3, 4])
    none = Virtual.none(torch.zeros(0, 2))
    assert merged_order(owner, pos, none).tolist() == [0, 1, 2, 3]
    again = Virtual.join([Virtual(np.array([1, 1]), np.array([0, 2]), torch.zeros(2, 2),
                                  np.array([True, False])),
                          Virtual(np.array([0]), np.array([1]), torch.zeros(1, 2),
                                  np.array([True]))], torch.zeros(0, 2))
    order = merged_order(owner, pos, again)
    merged = list(zip(np.concatenate([owner, again.owner])[order],
                      np.concatenate([pos, again.positions])[order]))
    assert merged == [(0, 1), (0, 6), (0, 7), (1, 0), (1, 2), (1, 3), (1, 4)]


def test_a_kept_chunk_owns_its_tensors():
    """Pending.clone equals its source and shares no storage with it: the step's buffers it
    was cut from are overwritten by the next step."""
    from gpu.serving.tiered import Pending

    pos = torch.arange(4)
    src = Pending(pos, pos[:, None].float(), [pos[:, None] * 2], [pos[:, None] * 3], pos)
    copy = src.clone()
    for a, b in zip([src.positions, src.x, *src.keys, *src.queries, src.query_positions],
                    [copy.positions, copy.x, *copy.keys, *copy.queries, copy.query_positions]):
        assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()
    src.x.zero_()
    assert copy.x[:, 0].tolist() == [0, 1, 2, 3]
