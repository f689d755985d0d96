"""Property tests for the fills beyond the paper in rfmath.ridge: the anchored map (ridge
shrunk toward the identity) and the composed cache-entry map.

Oracles: numpy.linalg.lstsq on the augmented system [X_c; sqrt(alpha) I] -> [Y_c;
sqrt(alpha) I] (the anchored objective written as one least-squares problem), its two limits
(alpha -> infinity: the identity plus the mean shift; alpha -> 0: ordinary least squares), and
a direct ridge solve of the projected targets for :func:`compose`.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfmath.ridge import (centred_moments, compose, penalty, solve, solve_anchored,
                          solve_anchored_moments)

LAM = st.floats(min_value=1e-4, max_value=10.0)


@st.composite
def square_calibration(draw, max_rows: int = 40, max_d: int = 6):
    """Rows X (n, d) -> Y (n, d): a residual stream, Y near X plus a learned change."""
    n = draw(st.integers(2, max_rows))
    d = draw(st.integers(1, max_d))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    scale = draw(st.sampled_from([1e-2, 1.0, 1e2]))
    x = scale * rng.normal(size=(n, d)) + rng.normal(size=d)
    y = x + x @ (0.3 * rng.normal(size=(d, d))) + rng.normal(size=(n, d)) + 2.0
    weights = rng.uniform(0.1, 3.0, size=n) if draw(st.booleans()) else None
    return x, y, weights


@given(square_calibration(), LAM)
def test_anchored_equals_augmented_least_squares(data, lam):
    x, y, w = data
    A, b = solve_anchored(x, y, lam, w)
    wt = np.ones(len(x)) if w is None else w
    mx, my = np.average(x, 0, wt), np.average(y, 0, wt)
    xc, yc = (x - mx) * np.sqrt(wt)[:, None], (y - my) * np.sqrt(wt)[:, None]
    alpha = penalty(lam, xc.T @ xc, x.shape[1])
    d = x.shape[1]
    aug_x = np.vstack([xc, np.sqrt(alpha) * np.eye(d)])
    aug_y = np.vstack([yc, np.sqrt(alpha) * np.eye(d)])
    At = np.linalg.lstsq(aug_x, aug_y, rcond=None)[0]
    scale = max(1.0, np.abs(At).max())
    np.testing.assert_allclose(A, At.T, atol=1e-6 * scale, rtol=1e-6)
    np.testing.assert_allclose(b, my - At.T @ mx, atol=1e-6 * scale * (1 + np.abs(mx).max()),
                               rtol=1e-6)


@given(square_calibration())
def test_anchored_limits_identity_and_least_squares(data):
    x, y, w = data
    big, _ = solve_anchored(x, y, 1e9, w)
    np.testing.assert_allclose(big, np.eye(x.shape[1]), atol=1e-5)
    xtx, _, _, _ = centred_moments(x, y, w)
    if np.linalg.cond(xtx) < 1e6:  # well posed: both fills reach the same least-squares map
        small, bs = solve_anchored(x, y, 1e-12, w)
        ridge, br = solve(x, y, 1e-12, w)
        np.testing.assert_allclose(small, ridge, atol=1e-5 * max(1, np.abs(ridge).max()))
        np.testing.assert_allclose(bs, br, atol=1e-5 * max(1, np.abs(br).max()))


@given(square_calibration(), LAM)
def test_anchored_never_fits_worse_than_identity_with_mean_shift(data, lam):
    """The objective at the anchored minimiser is at most the objective at A = I (the identity
    fill with the best bias), where the penalty is zero."""
    x, y, w = data
    A, b = solve_anchored(x, y, lam, w)
    wt = np.ones(len(x)) if w is None else w
    xtx, _, _, _ = centred_moments(x, y, w)
    alpha = penalty(lam, xtx, x.shape[1])

    def objective(A_, b_):
        r = y - (x @ A_.T + b_)
        return float((wt[:, None] * r ** 2).sum() + alpha * ((A_ - np.eye(len(A_))) ** 2).sum())

    shift = np.average(y - x, 0, wt)
    assert objective(A, b) <= objective(np.eye(x.shape[1]), shift) * (1 + 1e-9) + 1e-9


def test_anchored_refuses_other_widths():
    x = np.random.default_rng(0).normal(size=(10, 3))
    with pytest.raises(ValueError, match="d_out == d_in"):
        solve_anchored_moments(*centred_moments(x, x[:, :2]), 0.1)


@given(square_calibration(), LAM, st.integers(0, 2**32 - 1))
def test_compose_is_the_ridge_map_of_the_projected_targets(data, lam, seed):
    """The ridge map of entries W y + c equals W (ridge map of y) + c."""
    x, y, w = data
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(rng.integers(1, 5), y.shape[1]))
    c = rng.normal(size=W.shape[0])
    A, b = compose(W, c, *solve(x, y, lam, w))
    Ad, bd = solve(x, y @ W.T + c, lam, w)
    np.testing.assert_allclose(A, Ad, atol=1e-7 * max(1, np.abs(Ad).max()), rtol=1e-6)
    np.testing.assert_allclose(b, bd, atol=1e-7 * max(1, np.abs(bd).max()), rtol=1e-6)


def test_compose_checks_shapes():
    with pytest.raises(ValueError, match="W \\(m, d\\)"):
        compose(np.ones((2, 3)), None, np.ones((4, 4)), np.ones(4))
