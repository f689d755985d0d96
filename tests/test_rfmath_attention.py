"""Property tests for rfmath.attention against the statements of §2.4 ("Why attention").

Oracle: recompute the softmax-weighted output after the change and compare it with the exact
effect (value change) or the bound (logit change).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rfmath.attention import (
    logit_change_bound,
    output_change_sq_bound,
    softmax,
    top_k_rows,
    unprotected_attention,
    value_change_effect,
    weight_change_bound,
)

LOGIT = st.floats(min_value=-10.0, max_value=10.0)
VALUE = st.floats(min_value=-10.0, max_value=10.0)


@st.composite
def attention_case(draw, *, max_rows: int = 12, max_dim: int = 4):
    """Logits of one query over n rows, values (n, D) and a row index j."""
    n = draw(st.integers(1, max_rows))
    dim = draw(st.integers(1, max_dim))
    logits = draw(hnp.arrays(np.float64, n, elements=LOGIT))
    values = draw(hnp.arrays(np.float64, (n, dim), elements=VALUE))
    j = draw(st.integers(0, n - 1))
    return logits, values, j


def naive_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s)
    return e / e.sum()


@given(attention_case(), st.data())
def test_value_change_is_exact(case, data):
    """Row j's value moves by delta: the output moves by exactly a_ij * delta."""
    logits, values, j = case
    delta = data.draw(hnp.arrays(np.float64, values.shape[1], elements=VALUE))
    a = softmax(logits)
    moved = values.copy()
    moved[j] += delta
    change = naive_softmax(logits) @ moved - naive_softmax(logits) @ values
    assert np.allclose(value_change_effect(a[j], delta), change, rtol=1e-9, atol=1e-9)


@given(attention_case(), st.floats(min_value=-8.0, max_value=8.0))
def test_logit_change_within_bound(case, eps):
    """Row j's logit moves by eps: the output moves by at most 2 V a_ij (e^|eps| - 1),
    V the largest value norm among the rows."""
    logits, values, j = case
    a = softmax(logits)
    shifted = logits.copy()
    shifted[j] += eps
    change = np.linalg.norm(naive_softmax(shifted) @ values - naive_softmax(logits) @ values)
    v_max = np.linalg.norm(values, axis=1).max()
    bound = logit_change_bound(a[j], eps, v_max)
    assert change <= bound * (1.0 + 1e-9) + 1e-12


@given(attention_case(), st.floats(min_value=-8.0, max_value=8.0))
def test_weight_change_le(case, eps):
    """Lean weight_change_le: row j's score times f = e^eps moves the weights by
    sum_k |a'_k - a_k| <= 2 a_j (E - 1) with E = e^|eps| >= max(f, 1/f)."""
    logits, _, j = case
    a = naive_softmax(logits)
    shifted = logits.copy()
    shifted[j] += eps
    l1 = np.abs(naive_softmax(shifted) - a).sum()
    assert l1 <= weight_change_bound(softmax(logits)[j], eps) * (1.0 + 1e-9) + 1e-12


@given(attention_case(), st.floats(min_value=-8.0, max_value=8.0))
def test_output_score_change_norm_sq_le(case, eps):
    """Lean output_score_change_normSq_le: with |v_i|^2 <= V^2 for every row, row j's score
    times e^eps moves the vector output by |o' - o|^2 <= (2 V a_j (e^|eps| - 1))^2 (squared
    norms: no square root on either side)."""
    logits, values, j = case
    shifted = logits.copy()
    shifted[j] += eps
    diff = naive_softmax(shifted) @ values - naive_softmax(logits) @ values
    change_sq = float(np.sum(diff * diff))
    v_sq = float(np.max(np.sum(values * values, axis=1)))  # V^2: every |v_i|^2 <= V^2
    bound = output_change_sq_bound(softmax(logits)[j], eps, v_sq)
    assert change_sq <= bound * (1.0 + 1e-9) + 1e-12


@st.composite
def selection_case(draw, *, max_rows: int = 16):
    """Summed attention per row, a count k and any other selection of k rows."""
    n = draw(st.integers(1, max_rows))
    scores = draw(hnp.arrays(np.float64, n, elements=st.floats(0.0, 50.0)))
    k = draw(st.integers(0, n))
    order = draw(st.permutations(range(n)))
    other = np.zeros(n, dtype=bool)
    other[list(order[:k])] = True
    return scores, k, other


@given(selection_case())
def test_topk_minimises_unprotected(case):
    """Lean topk_minimises_unprotected: the ranking keeps k rows with a threshold t (kept
    scores >= t >= dropped scores); any other k rows leave at least as much summed attention
    unprotected."""
    scores, k, other = case
    top = top_k_rows(scores, k)
    assert top.sum() == k == other.sum()  # both selections keep k rows
    t = scores[top].min() if k else scores.max()  # the threshold the theorem assumes
    assert np.all(scores[top] >= t) and np.all(scores[~top] <= t)
    left_top = unprotected_attention(scores, top)
    left_other = unprotected_attention(scores, other)
    assert left_top <= left_other + 1e-9 * max(1.0, float(scores.sum()))


def test_top_k_rows_breaks_ties_towards_earlier_rows():
    assert top_k_rows(np.array([1.0, 3.0, 3.0, 2.0]), 2).tolist() == [False, True, True, False]
    assert top_k_rows(np.array([1.0, 1.0, 1.0]), 1).tolist() == [True, False, False]
    assert unprotected_attention(np.array([1.0, 3.0, 2.0]), np.array([False, True, False])) == 3.0


def test_logit_change_bound_is_nearly_tight_for_small_weights():
    """Two rows with opposite values: a small-weight row's logit shift nearly meets the bound."""
    logits = np.array([-6.0, 0.0])  # a_0 ~ 0.0025
    values = np.array([[1.0], [-1.0]])
    a = softmax(logits)
    shifted = logits + np.array([0.1, 0.0])
    change = np.linalg.norm(softmax(shifted) @ values - a @ values)
    assert 0.99 * logit_change_bound(a[0], 0.1, 1.0) <= change <= logit_change_bound(a[0], 0.1, 1.0)


@given(
    hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6), elements=LOGIT),
    st.floats(min_value=-1e3, max_value=1e3),
)
def test_softmax_is_a_distribution_invariant_to_shift(s, c):
    p = softmax(s)
    assert np.all(p >= 0.0)
    assert np.allclose(p.sum(axis=-1), 1.0)
    assert np.allclose(softmax(s + c), p, rtol=1e-9, atol=1e-12)
    assert np.allclose(p, np.exp(s) / np.exp(s).sum(axis=-1, keepdims=True), rtol=1e-9)


def test_softmax_handles_huge_logits_and_masks():
    p = softmax(np.array([1000.0, 1000.0, -np.inf]))
    assert np.allclose(p, [0.5, 0.5, 0.0])
    q = softmax(np.array([[1.0, 2.0], [3.0, 4.0]]), axis=0)
    assert np.allclose(q.sum(axis=0), 1.0)


def test_value_change_effect_batched_over_queries():
    a = np.array([0.25, 0.5])
    delta = np.array([[2.0, 4.0], [2.0, 4.0]])
    assert np.allclose(value_change_effect(a, delta), [[0.5, 1.0], [1.0, 2.0]])


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: softmax(np.array([1.0, np.nan])), "s"),
        (lambda: softmax(np.array([-np.inf, -np.inf])), "s"),
        (lambda: softmax(np.zeros(0)), "s"),
        (lambda: softmax(np.zeros(3), axis=2), "axis"),
        (lambda: value_change_effect(1.5, np.ones(2)), "a"),
        (lambda: value_change_effect(0.5, np.array([np.nan])), "delta"),
        (lambda: value_change_effect(np.array([0.1, 0.2, 0.3]), np.ones((2, 4))), "a"),
        (lambda: logit_change_bound(-0.1, 1.0, 1.0), "a_ij"),
        (lambda: logit_change_bound(0.1, np.nan, 1.0), "eps"),
        (lambda: logit_change_bound(0.1, 1.0, -1.0), "v_max"),
        (lambda: weight_change_bound(1.5, 1.0), "a_ij"),
        (lambda: output_change_sq_bound(0.1, 1.0, -1.0), "v_norm_sq_max"),
        (lambda: top_k_rows(np.ones(3), 4), "k"),
        (lambda: top_k_rows(np.ones((2, 2)), 1), "scores"),
        (lambda: unprotected_attention(np.ones(3), np.ones(3)), "keep"),
    ],
)
def test_attention_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
