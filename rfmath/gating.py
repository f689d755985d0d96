"""Gated recurrent state: row weights, filled share rho, terminal-state correction, fade bounds.

Twins of the paper's §2.3 ("Terminal-state correction") and Appendix H ("Why the terminal-state
correction is scaled by rho"; the tail-share bound and the delta-rule contraction,
StCorrection.lean and GdnContraction.lean).

Simplified layer of Appendix H (no erase term): ``M_t = g_t M_{t-1} + u_t`` with one gate per
head and row, so after n rows ``M_n = sum_j w_j u_j`` with ``w_j = prod_{k>j} g_k``.
Shapes: gates are ``(..., n)`` -- any leading head axes, rows on the last axis. States are
``(..., d_k, d_v)`` with the same leading head axes. Everything is computed in float64.
"""

from __future__ import annotations

import numpy as np

from rfmath import _validate as _v

__all__ = [
    "state_weights",
    "filled_share",
    "corrected_state",
    "correction_residual",
    "tail_share_bound",
    "contraction_factor",
    "delta_rule_step",
]


def state_weights(gates: np.ndarray) -> np.ndarray:
    """Each row's weight in the final state, ``w_j = prod_{k>j} g_k`` (Appendix H).

    gates: ``(..., n)`` float, every entry in (0, 1]; rows on the last axis.
    Returns ``(..., n)`` float64; the last row's weight is exactly 1.
    Computed as exp of a reverse cumulative sum of log-gates, so long products underflow
    gracefully to 0 instead of accumulating rounding from repeated multiplication.
    """
    g = _v.gates(gates, "gates")
    logs = np.log(g)  # (..., n), <= 0
    through = np.cumsum(logs[..., ::-1], axis=-1)[..., ::-1]  # sum_{k >= j} log g_k
    after = np.zeros_like(through)
    after[..., :-1] = through[..., 1:]  # sum_{k > j} log g_k; last row: empty sum
    return np.exp(after)


def _mask(filled: object, shape: tuple[int, ...]) -> np.ndarray:
    mask = np.asarray(filled)
    if mask.dtype != np.bool_:
        raise ValueError(
            f"filled must be a boolean mask; got dtype {mask.dtype}. "
            "Pass filled.astype(bool) (True = filled row)."
        )
    if mask.ndim == 0 or mask.shape[-1] != shape[-1]:
        raise ValueError(
            f"filled must have one entry per row on its last axis; got shape {mask.shape} "
            f"for gates of shape {shape}."
        )
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        raise ValueError(
            f"filled of shape {mask.shape} does not broadcast to gates of shape {shape}; "
            "give it the gates' shape or just the row axis (n,)."
        ) from None


def filled_share(gates: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """Filled rows' share of the state, ``rho = sum_{filled} w_j / sum_j w_j`` (§2.3, App. H).

    gates: ``(..., n)`` in (0, 1]. filled: bool, ``(n,)`` or broadcastable to gates' shape.
    Returns ``(...)`` float64 in [0, 1] (a 0-d value for one head).
    """
    g = _v.gates(gates, "gates")
    mask = _mask(filled, g.shape)
    w = state_weights(g)
    return np.sum(w * mask, axis=-1) / np.sum(w, axis=-1)


def _heads_rho(rho: object, state_shape: tuple[int, ...]) -> np.ndarray:
    r = _v.float_array(rho, "rho")
    lead = state_shape[: r.ndim]
    try:
        ok = r.ndim <= len(state_shape) and np.broadcast_shapes(r.shape, lead) == lead
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"rho of shape {r.shape} must match the leading (head) axes of state of shape "
            f"{state_shape}; pass one rho per head, e.g. shape {state_shape[:-2]}."
        )
    return r.reshape(r.shape + (1,) * (len(state_shape) - r.ndim))


def corrected_state(state: np.ndarray, delta_M: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Terminal-state correction ``state + rho * delta_M`` (§2.3, Appendix H).

    state: ``(..., d_k, d_v)`` (any trailing state axes). delta_M: broadcastable to state; it
    estimates exact minus filled state for a fully filled prefix. rho: ``(...)``, one per
    head, matching state's leading axes (a scalar for one head); normally the filled share.
    Returns float64 of state's shape.
    """
    s = _v.float_array(state, "state")
    d = _v.float_array(delta_M, "delta_M")
    try:
        ok = np.broadcast_shapes(d.shape, s.shape) == s.shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"delta_M of shape {d.shape} must broadcast to state of shape {s.shape}.")
    return s + _heads_rho(rho, s.shape) * d


def correction_residual(
    state_filled: np.ndarray, state_exact: np.ndarray, delta_M: np.ndarray, rho: np.ndarray
) -> np.ndarray:
    """What is left after the correction: ``corrected_state(...) - state_exact`` (App. H).

    state_filled, state_exact: same shape ``(..., d_k, d_v)``; delta_M, rho as in
    ``corrected_state``. Returns float64 of that shape; zero when the correction is exact.
    """
    exact = _v.float_array(state_exact, "state_exact")
    filled = _v.float_array(state_filled, "state_filled")
    if exact.shape != filled.shape:
        raise ValueError(
            f"state_filled and state_exact must have the same shape; got {filled.shape} != "
            f"{exact.shape}."
        )
    return corrected_state(filled, delta_M, rho) - exact


def _gamma_m(gamma: object, m: object) -> tuple[np.ndarray, np.ndarray]:
    g = _v.float_array(gamma, "gamma")
    if ((g <= 0.0) | (g >= 1.0)).any():
        raise ValueError(
            f"gamma must satisfy 0 < gamma < 1; got {_v._show(gamma)}. The bound needs every "
            "gate strictly below 1 (a gate of 1 never forgets)."
        )
    m_arr = np.asarray(m)
    if m_arr.dtype.kind not in "iu" or (m_arr < 0).any():
        raise ValueError(
            f"m must be a non-negative integer (the number of exact rows at the end); "
            f"got {_v._show(m)}."
        )
    return g, m_arr


def _scalar_or_array(x: np.ndarray) -> float | np.ndarray:
    return float(x) if x.ndim == 0 else x


def tail_share_bound(gamma: float, m: int) -> float | np.ndarray:
    """Bound ``gamma**m / (1 - gamma)`` on the filled rows' share of the final state (App. H).

    Holds when every gate is at most gamma (0 < gamma < 1) and the last m rows are exact.
    gamma, m: scalars or broadcastable arrays (m a non-negative integer). Returns float64.
    """
    g, m_arr = _gamma_m(gamma, m)
    return _scalar_or_array(g**m_arr / (1.0 - g))


def contraction_factor(gamma: float, m: int) -> float | np.ndarray:
    """Norm contraction ``gamma**m`` of the gated delta rule over m shared inputs (App. H).

    Two runs fed the same last m inputs, every gate <= gamma, end with states whose difference
    is at most ``gamma**m`` times their difference before (Frobenius norm; GdnContraction).
    gamma in (0, 1), m a non-negative integer; scalars or arrays. Returns float64.
    """
    g, m_arr = _gamma_m(gamma, m)
    return _scalar_or_array(g ** m_arr.astype(np.float64))


def delta_rule_step(
    state: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray, beta: np.ndarray
) -> np.ndarray:
    """One gated delta-rule step with the erase term (§2.3, Appendix H):

    ``S' = g * (I - beta k k^T) S + beta * k v^T``.

    state: ``(..., d_k, d_v)``; k: ``(..., d_k)``; v: ``(..., d_v)``; g, beta: ``(...)`` (one
    per head; scalars broadcast). g in (0, 1]. The leading axes must broadcast to state's.
    Returns ``(..., d_k, d_v)`` float64.
    """
    s = _v.float_array(state, "state", min_ndim=2)
    kk = _v.float_array(k, "k", min_ndim=1)
    vv = _v.float_array(v, "v", min_ndim=1)
    gg = _v.gates(g, "g", min_ndim=0)
    bb = _v.float_array(beta, "beta")
    d_k, d_v = s.shape[-2:]
    lead = s.shape[:-2]
    if kk.shape[-1] != d_k:
        raise ValueError(f"k must end in d_k={d_k} (state is {s.shape}); got shape {kk.shape}.")
    if vv.shape[-1] != d_v:
        raise ValueError(f"v must end in d_v={d_v} (state is {s.shape}); got shape {vv.shape}.")
    for name, shape in (
        ("k", kk.shape[:-1]),
        ("v", vv.shape[:-1]),
        ("g", gg.shape),
        ("beta", bb.shape),
    ):
        try:
            ok = np.broadcast_shapes(shape, lead) == lead
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name}'s head axes {shape} must broadcast to state's head axes {lead}."
            )
    k_col = kk[..., :, None]  # (..., d_k, 1)
    ks = np.sum(k_col * s, axis=-2, keepdims=True)  # k^T S: (..., 1, d_v)
    gb = gg[..., None, None]
    bt = bb[..., None, None]
    return gb * (s - bt * k_col * ks) + bt * k_col * vv[..., None, :]
