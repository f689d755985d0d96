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
    xtx, xty, _, _ = centred_moments(x, y, w)
    # A - I = (Sxx + alpha I)^-1 (Sxy - Sxx) with Sxx PSD: ||A - I||_2 <= ||Sxy - Sxx||_2 / alpha,
    # which shrinks like 1/lam (alpha scales with trace(Sxx), so no fixed tolerance holds)
    alpha = penalty(1e9, xtx, x.shape[1])
    gap = np.linalg.norm(big - np.eye(x.shape[1]), 2)
    assert gap <= np.linalg.norm(xty - xtx, 2) / alpha * (1 + 1e-6) + 1e-9
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


# Twins of lean/RidgeFill/Anchored.lean: the scalar (one-coordinate, centred) anchored objective
# J(a) = Syy - 2 a Sxy + a^2 Sxx + alpha (a - 1)^2 = sum_t w_t (y_t - a x_t)^2 + alpha (a - 1)^2,
# minimised by the s of (Sxx + alpha) s = Sxy + alpha, and its matrix form for the minimiser.

OFFSETS = st.lists(st.floats(min_value=-1e3, max_value=1e3), min_size=1, max_size=5)


def _scalar_fit(x, y, w, lam):
    """The moments of a one-column calibration set, alpha, the anchored slope s from
    solve_anchored_moments, and J evaluated directly on the centred rows."""
    xtx, xty, mx, my = centred_moments(x, y, w)
    A, b = solve_anchored_moments(xtx, xty, mx, my, lam)
    assert A.shape == (1, 1)
    alpha = penalty(lam, xtx, 1)
    sxx, sxy = float(xtx[0, 0]), float(xty[0, 0])
    syy = float(centred_moments(y, y, w)[0][0, 0])
    wt = np.ones(len(x)) if w is None else w
    xc, yc = (x - mx)[:, 0], (y - my)[:, 0]

    def direct(a: float) -> float:
        return float((wt * (yc - a * xc) ** 2).sum() + alpha * (a - 1.0) ** 2)

    return sxx, sxy, syy, alpha, float(A[0, 0]), direct


def _objective(x, y, w, alpha):
    """The anchored objective of a map (A, b) on raw rows: sum_t w_t ||y_t - (A x_t + b)||^2
    + alpha ||A - I||_F^2."""
    wt = np.ones(len(x)) if w is None else w

    def f(A_, b_):
        r = y - (x @ A_.T + b_)
        return float((wt[:, None] * r ** 2).sum() + alpha * ((A_ - np.eye(len(A_))) ** 2).sum())

    return f


@given(square_calibration(max_d=1), LAM, OFFSETS)
def test_anchored_objective_gap(data, lam, offsets):
    """anchored_objective_gap: the slope s of solve_anchored_moments satisfies
    (Sxx + alpha) s = Sxy + alpha, the moment form of J equals the direct sum, and
    J(a) - J(s) = (Sxx + alpha) (a - s)^2 for every a."""
    x, y, w = data
    sxx, sxy, syy, alpha, s, direct = _scalar_fit(x, y, w, lam)
    k = sxx + alpha
    assert k > 0
    assert np.isclose(k * s, sxy + alpha, rtol=1e-9, atol=1e-12 * (abs(sxy) + k))
    assert np.isclose(s, 1.0 + (sxy - sxx) / k, rtol=1e-9, atol=1e-12)

    def moments(a: float) -> float:
        return syy - 2.0 * a * sxy + a * a * sxx + alpha * (a - 1.0) * (a - 1.0)

    js = direct(s)
    for off in offsets:
        a = s + off
        ja = direct(a)
        assert np.isclose(moments(a), ja, rtol=1e-8, atol=1e-9 * (abs(ja) + syy + 1.0))
        assert np.isclose(ja - js, k * (a - s) ** 2, rtol=1e-7,
                          atol=1e-9 * (abs(ja) + abs(js) + 1.0))


@given(square_calibration(max_d=4), LAM, st.integers(0, 2**32 - 1),
       st.sampled_from([1e-3, 1e-1, 1.0, 10.0]))
def test_anchored_minimises(data, lam, seed, step):
    """anchored_minimises: no perturbation (E, e) of the anchored map (A, b) lowers the
    objective; with the bias kept optimal, the gap is exactly tr(E (Sxx + alpha I) E^T), the
    matrix form of (Sxx + alpha) (a - s)^2. In one coordinate, J(s) <= J(a) for every a."""
    x, y, w = data
    xtx, xty, mx, my = centred_moments(x, y, w)
    A, b = solve_anchored_moments(xtx, xty, mx, my, lam)
    d = x.shape[1]
    alpha = penalty(lam, xtx, d)
    f = _objective(x, y, w, alpha)
    best = f(A, b)
    tol = 1e-9 * (abs(best) + 1.0)
    rng = np.random.default_rng(seed)
    scale = step * max(1.0, float(np.abs(A).max()))
    for _ in range(4):
        E = scale * rng.normal(size=(d, d))
        e = scale * rng.normal(size=d)
        assert f(A + E, b + e) >= best - tol
        # bias kept optimal for the perturbed map: the gap is the quadratic form exactly
        moved = f(A + E, my - (A + E) @ mx)
        gap = float(np.sum((E @ (xtx + alpha * np.eye(d))) * E))
        assert moved >= best - tol
        assert np.isclose(moved - best, gap, rtol=1e-6, atol=1e-8 * (abs(moved) + abs(best) + 1.0))
    if d == 1:
        _, _, _, _, s, direct = _scalar_fit(x, y, w, lam)
        js = direct(s)
        for off in (-step, step, -10.0 * step, 10.0 * step, -s, 1.0 - s):
            assert js <= direct(s + off) + 1e-9 * (abs(js) + 1.0)


@given(square_calibration(max_d=4), LAM)
def test_anchored_le_identity(data, lam):
    """anchored_le_identity: the anchored map fits no worse than the identity fill with the mean
    shift (A = I, b = mu_y - mu_x, penalty zero). In one coordinate J(s) <= J(1), and
    J(1) = Syy - 2 Sxy + Sxx = sum_t w_t (y_t - x_t)^2 (anchoredObjective_one)."""
    x, y, w = data
    xtx, xty, mx, my = centred_moments(x, y, w)
    A, b = solve_anchored_moments(xtx, xty, mx, my, lam)
    d = x.shape[1]
    f = _objective(x, y, w, penalty(lam, xtx, d))
    ident = f(np.eye(d), my - mx)
    assert f(A, b) <= ident + 1e-9 * (abs(ident) + 1.0)
    if d == 1:
        sxx, sxy, syy, _, s, direct = _scalar_fit(x, y, w, lam)
        j1 = direct(1.0)
        assert np.isclose(j1, syy - 2.0 * sxy + sxx, rtol=1e-8, atol=1e-9 * (syy + sxx + 1.0))
        assert np.isclose(j1, ident, rtol=1e-9, atol=1e-9)
        assert direct(s) <= j1 + 1e-9 * (abs(j1) + 1.0)
