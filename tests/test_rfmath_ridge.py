"""Property tests for rfmath.ridge against §2.2 ("The ridge map", "The penalty").

Oracles: the normal equations of the penalised least-squares problem, numpy.linalg.lstsq on
the augmented system [X_c; sqrt(alpha) I], numpy.cov for the moments, repeated rows for
integer weights, and the scale invariance that the trace-scaled penalty promises.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfmath.ridge import RidgeSolveWarning, centred_moments, penalty, solve, solve_moments

LAM = st.floats(min_value=1e-4, max_value=10.0)


@st.composite
def calibration(draw, *, max_rows: int = 40, max_in: int = 6, max_out: int = 4):
    """Seeded Gaussian calibration rows X (n, d_in) -> Y (n, d_out) with optional weights."""
    n = draw(st.integers(2, max_rows))
    d_in = draw(st.integers(1, max_in))
    d_out = draw(st.integers(1, max_out))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1e-2, 1.0, 1e2]))
    x = scale * rng.normal(size=(n, d_in)) + rng.normal(size=d_in)
    y = x @ rng.normal(size=(d_in, d_out)) + rng.normal(size=(n, d_out)) + 3.0
    weights = rng.uniform(0.1, 3.0, size=n) if draw(st.booleans()) else None
    return x, y, weights


def weighted_centred(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None):
    w = np.ones(len(x)) if weights is None else weights
    mx, my = np.average(x, axis=0, weights=w), np.average(y, axis=0, weights=w)
    return x - mx, y - my, w, mx, my


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


@given(calibration(), LAM)
def test_solve_satisfies_normal_equations(case, lam):
    """(X_c^T W X_c + alpha I) A^T = X_c^T W Y_c and the map is right on average."""
    x, y, weights = case
    xc, yc, w, mx, my = weighted_centred(x, y, weights)
    alpha = lam * np.sum(w[:, None] * xc**2) / x.shape[1]  # lam * tr(X^T W X) / d_in
    a, b = solve(x, y, lam, weights)
    assert a.shape == (y.shape[1], x.shape[1]) and b.shape == (y.shape[1],)
    lhs = (xc.T * w) @ xc @ a.T + alpha * a.T
    rhs = (xc.T * w) @ yc
    assert np.allclose(lhs, rhs, rtol=1e-8, atol=1e-8 * np.abs(rhs).max())
    assert np.allclose(a @ mx + b, my, rtol=1e-9, atol=1e-9 * np.abs(my).max())


@given(calibration(), LAM)
def test_solve_matches_lstsq_on_augmented_system(case, lam):
    """A^T solves min ||W^(1/2) (X_c A^T - Y_c)||^2 + alpha ||A||^2, i.e. lstsq on
    [W^(1/2) X_c; sqrt(alpha) I] against [W^(1/2) Y_c; 0]."""
    x, y, weights = case
    xc, yc, w, _, _ = weighted_centred(x, y, weights)
    d_in = x.shape[1]
    alpha = lam * np.sum(w[:, None] * xc**2) / d_in
    root = np.sqrt(w)[:, None]
    big_x = np.vstack([root * xc, np.sqrt(alpha) * np.eye(d_in)])
    big_y = np.vstack([root * yc, np.zeros((d_in, y.shape[1]))])
    expected = np.linalg.lstsq(big_x, big_y, rcond=None)[0].T
    a, _ = solve(x, y, lam, weights)
    assert rel_err(a, expected) < 1e-8


@given(calibration())
def test_centred_moments_match_numpy_cov(case):
    x, y, weights = case
    w = np.ones(len(x)) if weights is None else weights
    xtx, xty, mx, my = centred_moments(x, y, weights)
    joint = np.cov(np.hstack([x, y]).T, aweights=w, bias=True) * w.sum()  # centred, weighted
    d_in = x.shape[1]
    assert np.allclose(xtx, joint[:d_in, :d_in], rtol=1e-9, atol=1e-9 * np.abs(xtx).max())
    assert np.allclose(xty, joint[:d_in, d_in:], rtol=1e-9, atol=1e-9 * np.abs(joint).max())
    assert np.allclose(mx, np.average(x, axis=0, weights=w))
    assert np.allclose(my, np.average(y, axis=0, weights=w))


@given(calibration(), LAM)
def test_penalty_is_lam_times_mean_centred_energy(case, lam):
    """alpha = lam tr(X^T X) / d_in, and tr(X_c^T X_c) is the centred rows' squared norm."""
    x, y, _ = case
    xtx, _, _, _ = centred_moments(x, y)
    energy = np.sum((x - x.mean(axis=0)) ** 2)
    assert np.isclose(penalty(lam, xtx, x.shape[1]), lam * energy / x.shape[1], rtol=1e-9)


@given(calibration(), LAM, st.data())
def test_integer_weights_equal_repeated_rows(case, lam, data):
    x, y, _ = case
    counts = np.array(data.draw(st.lists(st.integers(0, 3), min_size=len(x), max_size=len(x))))
    counts[0] = max(counts[0], 1)
    counts[-1] = max(counts[-1], 1)
    a_w, b_w = solve(x, y, lam, counts.astype(float))
    a_r, b_r = solve(np.repeat(x, counts, axis=0), np.repeat(y, counts, axis=0), lam)
    assert rel_err(a_w, a_r) < 1e-8
    assert np.allclose(b_w, b_r, rtol=1e-8, atol=1e-8 * np.abs(b_r).max())


@given(calibration(), LAM, st.floats(min_value=1e-3, max_value=1e3))
def test_same_lam_means_the_same_at_any_input_scale(case, lam, s):
    """The penalty scales with tr(X^T X), so scaling the inputs leaves predictions unchanged."""
    x, y, weights = case
    a, b = solve(x, y, lam, weights)
    a_s, b_s = solve(s * x, y, lam, weights)
    pred, pred_s = x @ a.T + b, (s * x) @ a_s.T + b_s
    assert np.allclose(pred_s, pred, rtol=1e-7, atol=1e-7 * np.abs(pred).max())


def test_constant_inputs_warn_and_fall_back_to_mean_map():
    x = np.ones((5, 3))
    y = np.arange(10.0).reshape(5, 2)
    with pytest.warns(RidgeSolveWarning):
        a, b = solve(x, y, 0.1)
    assert np.allclose(a, 0.0) and np.allclose(b, y.mean(axis=0))


def test_solve_moments_needs_no_warning_on_full_rank_data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a, b = solve_moments(*centred_moments(x, x), 1e-6)
    assert np.allclose(a, np.eye(4), atol=1e-4) and np.allclose(b, 0.0, atol=1e-4)


GOOD_X = np.arange(12.0).reshape(4, 3) ** 1.5
GOOD_Y = np.arange(8.0).reshape(4, 2)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: penalty(0.0, np.eye(3), 3), "lam"),
        (lambda: penalty(-1.0, np.eye(3), 3), "lam"),
        (lambda: penalty(np.nan, np.eye(3), 3), "lam"),
        (lambda: penalty(0.1, np.eye(3), 2), "d_in"),
        (lambda: penalty(0.1, np.ones((2, 3)), 2), "xtx_centred"),
        (lambda: solve(GOOD_X, GOOD_Y, 0.0), "lam"),
        (lambda: solve(GOOD_X, GOOD_Y[:3], 0.1), "rows"),
        (lambda: solve(GOOD_X[:0], GOOD_Y[:0], 0.1), "n = 0"),
        (lambda: solve(np.where(GOOD_X > 5, np.nan, GOOD_X), GOOD_Y, 0.1), "X"),
        (lambda: solve(GOOD_X[:, 0], GOOD_Y, 0.1), "reshape"),
        (lambda: solve(GOOD_X, GOOD_Y, 0.1, weights=-np.ones(4)), "weights"),
        (lambda: solve(GOOD_X, GOOD_Y, 0.1, weights=np.ones(3)), "weights"),
        (lambda: solve_moments(np.eye(3), np.ones((2, 2)), np.zeros(3), np.zeros(2), 0.1), "xty_c"),
        (lambda: solve_moments(np.eye(3), np.ones((3, 2)), np.zeros(2), np.zeros(2), 0.1), "mu_x"),
        (lambda: solve_moments(np.eye(3), np.ones((3, 2)), np.zeros(3), np.zeros(3), 0.1), "mu_y"),
        (
            lambda: solve_moments(
                np.triu(np.ones((3, 3))), np.ones((3, 2)), np.zeros(3), np.zeros(2), 0.1
            ),
            "symmetric",
        ),
    ],
)
def test_ridge_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
