"""Gated DeltaNet scan over a prompt of filled and exact rows (paper §2.3, Appendix H).

Per head the state ``S`` is ``(d_k, d_v)``; for each row t (gate g_t in [0, 1], beta_t):

    S_t = g_t (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,     o_t = S_t^T q_t,

computed in the order of HF ``torch_recurrent_gated_delta_rule`` (Qwen3-Next):
``S = g S;  m = k^T S;  S = S + k (beta (v - m))^T;  o = S^T q``. This equals
``rfmath.gating.delta_rule_step`` up to rounding. No scaling of q happens here (the HF kernel
divides q by sqrt(d_k) first; ``rfmodel.model`` does that before calling the scan).
With ``erase=False`` the erase term is dropped, ``S_t = g_t S_{t-1} + beta_t k_t v_t^T``: the
simplified layer of Appendix H.

The scan takes arrays; filled rows are handled by the caller, which passes k, v, g, beta
computed from the predicted input x_hat on those rows and from the true input on exact rows.
:func:`gdn_prefill_scan` runs the prefix, adds the terminal correction ``rho * delta_M`` once
at the end of the prefix (rho from the gates the scan uses anyway), then runs the tail.

Backends: ``"reference"`` (:func:`gdn_scan_reference`, NumPy, loop over rows, heads
vectorized) and ``"numba"`` (``rfmodel.kernels.gdn_scan``, heads in parallel), bitwise equal.
Shapes: q, k ``(H, N, d_k)``; v ``(H, N, d_v)``; g, beta ``(H, N)``; state ``(H, d_k, d_v)``.
"""
from __future__ import annotations

import numpy as np

from rfmath.gating import corrected_state, filled_share
from rfmodel import _validate as _v
from rfmodel import kernels

__all__ = [
    "gdn_scan",
    "gdn_scan_reference",
    "gdn_prefill_scan",
    "filled_share_from_gates",
    "terminal_correction",
    "BACKENDS",
]


def gdn_scan_reference(q, k, v, g, beta, state, erase=True):
    """NumPy twin of ``kernels.gdn_scan``: same arguments (state updated in place), same order.

    Returns the outputs ``(H, N, d_v)``; ``state`` holds the final state afterwards.
    """
    H, N, _ = k.shape
    out = np.empty((H, N, v.shape[2]), dtype=v.dtype)
    for t in range(N):
        state *= g[:, t, None, None]  # (H, d_k, d_v)
        k_t = k[:, t, :, None]  # (H, d_k, 1)
        if erase:
            mem = (k_t * state).sum(axis=1)  # k^T S: (H, d_v), rows summed in order
            delta = (v[:, t] - mem) * beta[:, t, None]  # (H, d_v)
        else:
            delta = v[:, t] * beta[:, t, None]
        state += k_t * delta[:, None, :]
        out[:, t] = (state * q[:, t, :, None]).sum(axis=1)  # S^T q: (H, d_v)
    return out


def _numba_scan(q, k, v, g, beta, state, erase=True):
    return kernels.gdn_scan(q, k, v, g, beta, state, erase)


BACKENDS = {"reference": gdn_scan_reference, "numba": _numba_scan}


def _check_scan(q, k, v, g, beta, state0):
    kk = _v.float_array(k, "k", ndim=3)
    H, N, d_k = kk.shape
    qq = _v.float_array(q, "q", shape=(H, N, d_k))
    vv = _v.float_array(v, "v", ndim=3)
    if vv.shape[:2] != (H, N):
        raise ValueError(f"v must have shape (H, N, d_v) = ({H}, {N}, d_v) to match k {kk.shape}; "
                         f"got {vv.shape}.")
    gg = _v.float_array(g, "g", shape=(H, N))
    if gg.size and ((gg < 0) | (gg > 1)).any():
        raise ValueError(f"g must hold gates in [0, 1]; got min {gg.min():.6g}, max {gg.max():.6g}. "
                         "Pass exp(log-gate), not the log-gate.")
    bb = _v.float_array(beta, "beta", shape=(H, N))
    d_v = vv.shape[2]
    dtype = np.float32 if all(a.dtype == np.float32 for a in (qq, kk, vv, gg, bb)) else np.float64
    if state0 is None:
        s = np.zeros((H, d_k, d_v), dtype=dtype)
    else:
        s0 = _v.float_array(state0, "state0", shape=(H, d_k, d_v))
        dtype = np.float64 if s0.dtype == np.float64 else dtype
        s = np.array(s0, dtype=dtype, order="C")
    arrays = [np.ascontiguousarray(a, dtype=dtype) for a in (qq, kk, vv, gg, bb)]
    return arrays, s


def gdn_scan(q, k, v, g, beta, state0=None, *, erase=True, backend="numba"):
    """Gated delta rule over N rows for H heads.

    q, k: ``(H, N, d_k)``; v: ``(H, N, d_v)``; g: ``(H, N)`` gates in [0, 1]; beta ``(H, N)``;
    state0: optional ``(H, d_k, d_v)`` (zeros if None; not modified). erase=False drops the
    delta rule's erase term (Appendix H's simplified layer). Computes in float32 if every
    input is float32, else float64. Returns ``(outputs (H, N, d_v), final state (H, d_k, d_v))``.
    """
    _v.choice(backend, "backend", tuple(BACKENDS))
    arrays, state = _check_scan(q, k, v, g, beta, state0)
    out = BACKENDS[backend](*arrays, state, bool(erase))
    return out, state


def filled_share_from_gates(g: np.ndarray, filled: np.ndarray) -> np.ndarray:
    """Filled rows' share rho of the state at the end of the prefix (§2.3, Appendix H).

    g: ``(H, n)`` gates of the n prefix rows, in (0, 1]; filled: ``(n,)`` bool. Returns
    ``(H,)`` float64 ``sum_{filled} w_j / sum_j w_j`` with ``w_j = prod_{k>j} g_k``
    (``rfmath.gating.filled_share``).
    """
    gg = _v.float_array(g, "g", ndim=2)
    mask = np.asarray(filled)
    if mask.dtype != np.bool_ or mask.shape != (gg.shape[1],):
        raise ValueError(f"filled must be a bool mask of shape ({gg.shape[1]},); got "
                         f"{mask.dtype} {mask.shape}.")
    return np.asarray(filled_share(gg, mask), dtype=np.float64).reshape(gg.shape[0])


def terminal_correction(state: np.ndarray, delta_M: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Terminal-state correction ``state + rho[h] * delta_M[h]`` (§2.3), in state's dtype.

    state: ``(H, d_k, d_v)``; delta_M: ``(H, d_k, d_v)`` (exact minus filled state of a fully
    filled prefix, averaged on calibration prompts); rho: ``(H,)`` (or a scalar).
    """
    s = _v.float_array(state, "state", ndim=3)
    d = _v.float_array(delta_M, "delta_M", shape=s.shape)
    r = _v.float_array(rho, "rho")
    if r.ndim > 1 or (r.ndim == 1 and r.shape != (s.shape[0],)):
        raise ValueError(f"rho must be a scalar or one value per head, shape ({s.shape[0]},); "
                         f"got {r.shape}.")
    return np.asarray(corrected_state(s, d, r), dtype=s.dtype)


def gdn_prefill_scan(q, k, v, g, beta, n_prefix, filled, *, delta_M=None, correction="rho",
                     state0=None, erase=True, backend="numba"):
    """Scan the prefix, correct the state once at its end, then scan the tail.

    q, k, v, g, beta: as :func:`gdn_scan` over all N rows (filled rows' entries computed from
    predicted inputs). n_prefix: rows 0..n_prefix-1 form the prefix; filled: ``(n_prefix,)``
    bool. delta_M: ``(H, d_k, d_v)`` or None (no correction). correction: ``"rho"`` (add
    ``rho * delta_M``, the paper's rule) or ``"unscaled"`` (add ``delta_M``).
    Returns ``(outputs (H, N, d_v), final state, rho (H,))``; rho is computed from the prefix
    gates (NaN-free; 0 when nothing is filled).
    """
    arrays, state = _check_scan(q, k, v, g, beta, state0)
    H, N = arrays[3].shape
    n_p = _v.integer(n_prefix, "n_prefix", minimum=0, maximum=N)
    mask = np.asarray(filled)
    if mask.dtype != np.bool_ or mask.shape != (n_p,):
        raise ValueError(f"filled must be a bool mask of shape ({n_p},); got {mask.dtype} {mask.shape}.")
    _v.choice(correction, "correction", ("rho", "unscaled"))
    _v.choice(backend, "backend", tuple(BACKENDS))
    run = BACKENDS[backend]
    head = [np.ascontiguousarray(a[:, :n_p]) for a in arrays]
    tail = [np.ascontiguousarray(a[:, n_p:]) for a in arrays]
    out_p = run(*head, state, bool(erase))
    if n_p and mask.any():
        rho = filled_share_from_gates(np.maximum(head[3], np.finfo(np.float64).tiny), mask)
    else:
        rho = np.zeros(H)
    if delta_M is not None:
        scale = rho if correction == "rho" else np.ones(H)
        state = np.ascontiguousarray(terminal_correction(state, delta_M, scale))
    out_t = run(*tail, state, bool(erase))
    return np.concatenate([out_p, out_t], axis=1), state, rho
