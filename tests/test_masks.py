"""Loss instruments (paper 3.1) against brute-force oracles."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from gpu.lab.eval.loss_masks import delta_nll, key_token_mask, novel_token_mask, repeated_windows


def novel_oracle(ids, start, run):
    """Straight from the definition: t is not novel iff some window [s, s+run) of the
    prompt contains t and the same sequence also starts at an earlier position p < s."""
    n = len(ids)
    out = []
    for t in range(start, n):
        novel = True
        for s in range(max(0, t - run + 1), min(t, n - run) + 1):
            win = ids[s:s + run]
            if any(ids[p:p + run] == win for p in range(s)):
                novel = False
                break
        out.append(novel)
    return out


@given(
    ids=st.lists(st.integers(0, 3), max_size=60),
    run=st.integers(1, 8),
    data=st.data(),
)
def test_novel_mask_matches_oracle(ids, run, data):
    start = data.draw(st.integers(0, len(ids)))
    got = novel_token_mask(ids, start, run)
    assert got.dtype == bool and got.shape == (len(ids) - start,)
    assert got.tolist() == novel_oracle(ids, start, run)


@given(ids=st.lists(st.integers(0, 1), max_size=40), run=st.integers(1, 6))
def test_repeated_windows_oracle(ids, run):
    rep = repeated_windows(ids, run).tolist()
    expect = [any(ids[p:p + run] == ids[s:s + run] for p in range(s))
              for s in range(max(len(ids) - run + 1, 0))]
    assert rep == expect


def test_novel_mask_hand_cases():
    first = list(range(100, 110))
    ids = first + first  # a verbatim copy of 10 tokens
    m = novel_token_mask(ids, 0, 8)
    assert m[:10].all() and not m[10:].any()
    # a 7-token repeat is shorter than a run: still novel
    ids = list(range(7)) + [50] + list(range(7)) + [60]
    assert novel_token_mask(ids, 0, 8).all()
    # scoring only the second half
    ids = first + [1, 2, 3] + first
    m = novel_token_mask(ids, 13, 8)
    assert m.tolist() == [False] * 10
    # overlapping self-repeat: 9 equal tokens -> window at 1 repeats window at 0
    m = novel_token_mask([5] * 9, 0, 8)
    assert m.tolist() == [True] + [False] * 8
    # shorter than a run: all novel; empty scored range
    assert novel_token_mask([1, 1, 1], 0, 8).tolist() == [True] * 3
    assert novel_token_mask([1, 2], 2, 8).shape == (0,)


def test_novel_mask_accepts_tensors_and_arrays():
    ids = [3, 1, 4, 1, 5, 9, 2, 6] * 3
    a = novel_token_mask(ids, 4)
    assert (novel_token_mask(np.array(ids), 4) == a).all()
    assert (novel_token_mask(torch.tensor([ids]), 4) == a).all()
    with pytest.raises(ValueError):
        novel_token_mask(ids, len(ids) + 1)


def test_novel_mask_large_is_fast():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 50_000, size=200_000)
    ids[150_000:150_100] = ids[1000:1100]
    m = novel_token_mask(ids, 100_000)
    assert not m[50_000:50_100].any() and m.sum() >= 100_000 - 100 - 16


finite = st.floats(-20, 20, allow_nan=False)


@given(st.lists(st.tuples(finite, finite), max_size=40), st.floats(0, 5))
def test_key_token_mask_oracle(pairs, thr):
    full = [a for a, _ in pairs]
    cut = [b for _, b in pairs]
    got = key_token_mask(full, cut, thr)
    assert got.tolist() == [(b - a) > thr for a, b in pairs]


def test_key_token_mask_hand():
    full = np.array([1.0, 1.0, 1.0, 0.5, np.nan])
    cut = np.array([3.0, 3.5, 0.0, 2.6, 9.0])
    assert key_token_mask(full, cut).tolist() == [False, True, False, True, False]
    assert key_token_mask(torch.tensor(full), torch.tensor(cut)).tolist()[1]
    with pytest.raises(ValueError):
        key_token_mask([1.0], [1.0, 2.0])


@given(st.lists(st.tuples(finite, finite, st.booleans()), min_size=1, max_size=40))
def test_delta_nll_oracle(rows):
    arm = [a for a, _, _ in rows]
    ex = [b for _, b, _ in rows]
    mask = [m for _, _, m in rows]
    sel = [a - b for a, b, m in rows if m]
    got = delta_nll(arm, ex, mask)
    if sel:
        assert math.isclose(got, sum(sel) / len(sel), rel_tol=1e-9, abs_tol=1e-9)
    else:
        assert math.isnan(got)
    allm = delta_nll(arm, ex)
    assert math.isclose(allm, sum(a - b for a, b in zip(arm, ex)) / len(arm), rel_tol=1e-9, abs_tol=1e-9)


def test_delta_nll_shapes():
    with pytest.raises(ValueError):
        delta_nll([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        delta_nll([1.0, 2.0], [1.0, 2.0], [True])
    assert delta_nll(torch.tensor([2.0, 4.0]), torch.tensor([1.0, 1.0]), torch.tensor([False, True])) == 3.0
