"""The ridge map: penalty, centred moments and the closed-form solve (§2.2).

Twins of §2.2 ("The ridge map", "The penalty"):

    A = Y^T X (X^T X + alpha I)^-1,   b = mu_Y - A mu_X,   alpha = lam * tr(X^T X) / d_in,

with X and Y the centred split states and layer inputs stacked as rows. Layout follows
scikit-learn's ``_ridge.py``: public functions validate once, then call the private
``_solve_cholesky`` worker (Cholesky in float64, falling back to a least-squares solve with a
``RidgeSolveWarning`` when the system is not positive definite).
Shapes: X ``(n, d_in)``, Y ``(n, d_out)``, A ``(d_out, d_in)``, b ``(d_out,)``.

Beyond the paper, from the same moments: the *anchored* map shrinks toward the identity
instead of toward zero (``A = I + (Y - X)^T X (X^T X + alpha I)^-1``), and :func:`compose`
turns a map of a layer's normed input into a map of its cache entries (keys and values are
linear in the normed input, so the ridge map of the entries is the projection of the ridge
map of the normed input).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.linalg

from rfmath import _validate as _v

__all__ = ["penalty", "centred_moments", "solve_moments", "solve", "solve_anchored_moments",
           "solve_anchored", "compose", "RidgeSolveWarning"]


class RidgeSolveWarning(RuntimeWarning):
    """The ridge system was not positive definite; a least-squares solve was used instead."""


def _square(xtx: object, name: str) -> np.ndarray:
    m = _v.float_array(xtx, name, min_ndim=2)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] == 0:
        raise ValueError(
            f"{name} must be a non-empty square (d_in, d_in) matrix; got shape {m.shape}."
        )
    return m


def penalty(lam: float, xtx_centred: np.ndarray, d_in: int) -> float:
    """Ridge strength ``alpha = lam * trace(xtx_centred) / d_in`` (§2.2, "The penalty").

    lam > 0; xtx_centred: ``(d_in, d_in)`` centred Gram matrix X^T X; d_in its size (the width
    of the split state). Returns alpha as a float.
    """
    lam_ = _v.positive(lam, "lam")
    m = _square(xtx_centred, "xtx_centred")
    d = _v.integer(d_in, "d_in", minimum=1)
    if d != m.shape[0]:
        raise ValueError(
            f"d_in must equal the size of xtx_centred; got d_in={d} for shape {m.shape}. "
            f"Pass d_in={m.shape[0]}."
        )
    return lam_ * float(np.trace(m)) / d


def centred_moments(
    X: np.ndarray, Y: np.ndarray, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centred moments ``(X_c^T W X_c, X_c^T W Y_c, mu_X, mu_Y)`` of a calibration set (§2.2).

    X: ``(n, d_in)``, Y: ``(n, d_out)``, weights: optional ``(n,)`` non-negative row weights
    (frequency weights: weight 2 equals the row twice) with a positive sum. Means are
    weighted means. Returns float64 ``xtx_c (d_in, d_in)``, ``xty_c (d_in, d_out)``,
    ``mu_x (d_in,)``, ``mu_y (d_out,)``.
    """
    x = _v.float_array(X, "X")
    y = _v.float_array(Y, "Y")
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(
            f"X and Y must be 2-D (n, d); got shapes {x.shape} and {y.shape}. "
            "Reshape a single feature or target with .reshape(-1, 1)."
        )
    if x.shape[0] != y.shape[0]:
        raise ValueError(
            f"X and Y must have the same number of rows; got {x.shape[0]} != {y.shape[0]}."
        )
    if x.shape[0] == 0:
        raise ValueError("X and Y must have at least one row (n = 0). Pass calibration rows.")
    if x.shape[1] == 0 or y.shape[1] == 0:
        raise ValueError(f"X and Y need at least one column; got shapes {x.shape} and {y.shape}.")
    if weights is None:
        w = np.ones(x.shape[0])
    else:
        w = _v.float_array(weights, "weights")
        if w.shape != (x.shape[0],):
            raise ValueError(
                f"weights must have shape ({x.shape[0]},), one per row; got {w.shape}."
            )
        if (w < 0.0).any() or w.sum() <= 0.0:
            raise ValueError(
                "weights must be non-negative with a positive sum; drop rows instead of "
                "giving them negative weight."
            )
    total = w.sum()
    mu_x = w @ x / total
    mu_y = w @ y / total
    xc = x - mu_x  # (n, d_in)
    yc = y - mu_y  # (n, d_out)
    wx = xc * w[:, None]
    return wx.T @ xc, wx.T @ yc, mu_x, mu_y


def _solve_cholesky(xtx: np.ndarray, xty: np.ndarray, alpha: float) -> np.ndarray:
    """A^T = (X^T X + alpha I)^-1 X^T Y, shape (d_in, d_out)."""
    system = xtx + alpha * np.eye(xtx.shape[0])
    try:
        factor = scipy.linalg.cho_factor(system, lower=False, check_finite=False)
        return scipy.linalg.cho_solve(factor, xty, check_finite=False)
    except np.linalg.LinAlgError:
        warnings.warn(
            f"ridge system is not positive definite (alpha={alpha:.3g}); using the minimum-norm "
            "least-squares solution instead. Check for constant inputs or raise lam.",
            RidgeSolveWarning,
            stacklevel=3,
        )
        return scipy.linalg.lstsq(system, xty, check_finite=False)[0]


def solve_moments(
    xtx_c: np.ndarray, xty_c: np.ndarray, mu_x: np.ndarray, mu_y: np.ndarray, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """Closed-form ridge map from centred moments (§2.2): ``A = Y^T X (X^T X + alpha I)^-1``,
    ``b = mu_y - A mu_x``, with ``alpha = penalty(lam, xtx_c, d_in)``.

    xtx_c ``(d_in, d_in)`` symmetric, xty_c ``(d_in, d_out)``, mu_x ``(d_in,)``, mu_y
    ``(d_out,)``, lam > 0. Solved by Cholesky in float64. Returns ``A (d_out, d_in)``,
    ``b (d_out,)`` float64.
    """
    xtx = _square(xtx_c, "xtx_c")
    d_in = xtx.shape[0]
    scale = float(np.max(np.abs(xtx)))
    if np.max(np.abs(xtx - xtx.T)) > 1e-6 * scale:
        raise ValueError(
            "xtx_c must be symmetric (a Gram matrix X^T X); it is not. Pass the "
            "centred Gram matrix from centred_moments."
        )
    xty = _v.float_array(xty_c, "xty_c")
    if xty.ndim != 2 or xty.shape[0] != d_in:
        raise ValueError(f"xty_c must have shape (d_in, d_out) = ({d_in}, d_out); got {xty.shape}.")
    mx = _v.float_array(mu_x, "mu_x")
    my = _v.float_array(mu_y, "mu_y")
    if mx.shape != (d_in,):
        raise ValueError(f"mu_x must have shape ({d_in},); got {mx.shape}.")
    if my.shape != (xty.shape[1],):
        raise ValueError(f"mu_y must have shape ({xty.shape[1]},); got {my.shape}.")
    alpha = penalty(lam, xtx, d_in)
    a = _solve_cholesky(xtx, xty, alpha).T  # (d_out, d_in)
    return a, my - a @ mx


def solve(
    X: np.ndarray, Y: np.ndarray, lam: float, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One-shot ridge map ``x_hat = A x + b`` fitted on rows X -> Y (§2.2).

    X ``(n, d_in)``, Y ``(n, d_out)``, lam > 0, optional ``(n,)`` row weights. Equivalent to
    ``solve_moments(*centred_moments(X, Y, weights), lam)``. Returns ``A (d_out, d_in)``,
    ``b (d_out,)`` float64.
    """
    _v.positive(lam, "lam")
    return solve_moments(*centred_moments(X, Y, weights), lam)


def _checked_moments(xtx_c, xty_c, mu_x, mu_y) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    xtx = _square(xtx_c, "xtx_c")
    xty = _v.float_array(xty_c, "xty_c")
    d_in = xtx.shape[0]
    if xty.ndim != 2 or xty.shape != (d_in, d_in):
        raise ValueError(f"the anchored map needs d_out == d_in: xty_c must have shape "
                         f"({d_in}, {d_in}); got {xty.shape}. Use solve_moments for other widths.")
    mx, my = _v.float_array(mu_x, "mu_x"), _v.float_array(mu_y, "mu_y")
    if mx.shape != (d_in,) or my.shape != (d_in,):
        raise ValueError(f"mu_x and mu_y must have shape ({d_in},); got {mx.shape}, {my.shape}.")
    return xtx, xty, mx, my


def solve_anchored_moments(
    xtx_c: np.ndarray, xty_c: np.ndarray, mu_x: np.ndarray, mu_y: np.ndarray, lam: float
) -> tuple[np.ndarray, np.ndarray]:
    """The ridge map shrunk toward the identity: the minimiser of
    ``sum_t ||y_t - (A x_t + b)||^2 + alpha ||A - I||_F^2`` (alpha as in :func:`penalty`),

        A = I + (Y_c - X_c)^T X_c (X_c^T X_c + alpha I)^-1,   b = mu_y - A mu_x,

    from the centred moments of :func:`centred_moments` (the residual's moments are
    ``xty_c - xtx_c``: no new pass). As lam grows, A -> I (the identity fill plus the mean
    shift b -> mu_y - mu_x); as lam -> 0, the least-squares map, like :func:`solve_moments`.
    Needs d_out == d_in. Returns ``A (d, d)``, ``b (d,)`` float64."""
    xtx, xty, mx, my = _checked_moments(xtx_c, xty_c, mu_x, mu_y)
    alpha = penalty(lam, xtx, xtx.shape[0])
    a = np.eye(xtx.shape[0]) + _solve_cholesky(xtx, xty - xtx, alpha).T
    return a, my - a @ mx


def solve_anchored(
    X: np.ndarray, Y: np.ndarray, lam: float, weights: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """One-shot anchored map (:func:`solve_anchored_moments`) fitted on rows X -> Y, both
    ``(n, d)``. Returns ``A (d, d)``, ``b (d,)`` float64."""
    _v.positive(lam, "lam")
    return solve_anchored_moments(*centred_moments(X, Y, weights), lam)


def compose(W: np.ndarray, c: np.ndarray | None, A: np.ndarray, b: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """The map ``x -> W (A x + b) + c``: ``(W A, W b + c)``. With (A, b) the ridge map of a
    layer's normed input and (W, c) its stacked key and value projections, this is the ridge
    map of the layer's cache entries themselves (the solve is linear in the targets and the
    penalty depends on X only), ``d_out = rows of W``. W ``(m, d)``, c ``(m,)`` or None,
    A ``(d, d_in)``, b ``(d,)``. Returns ``(m, d_in)``, ``(m,)`` float64."""
    w = _v.float_array(W, "W")
    a, bb = _v.float_array(A, "A"), _v.float_array(b, "b")
    if w.ndim != 2 or a.ndim != 2 or w.shape[1] != a.shape[0] or bb.shape != (a.shape[0],):
        raise ValueError(f"compose needs W (m, d), A (d, d_in), b (d,); got W {w.shape}, "
                         f"A {a.shape}, b {bb.shape}.")
    out_b = w @ bb
    if c is not None:
        cc = _v.float_array(c, "c")
        if cc.shape != (w.shape[0],):
            raise ValueError(f"c must have shape ({w.shape[0]},), one per row of W; got {cc.shape}.")
        out_b = out_b + cc
    return w @ a, out_b
