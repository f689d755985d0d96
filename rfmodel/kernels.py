"""Numba hot loops of rfmodel; each kernel names its plain NumPy twin.

The twins live beside their callers (``ridge.py``, ``gdn.py``) and are the readable
definitions (the selectors' and the text scan's kernels: rfmodel.text_kernels); the kernels here must agree with them:
bitwise where the arithmetic order is the same (the GDN scan, the integer selector kernels),
within a stated tolerance where it is not (the ridge accumulation: BLAS sums in its own order).

All kernels are compiled with ``cache=True`` (the compiled code lands in ``__pycache__``) and
without ``fastmath``, so LLVM neither reassociates sums nor fuses multiply-adds: each float
operation is the one written. ``NUMBA_DISABLE_JIT=1`` runs the same code as plain Python.
Parallel loops (``prange``) split work by output element or head only, so every output is
accumulated by one thread in a fixed order and results do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

ROW_BLOCK = 64  # rows cast to float64 per block in the ridge kernels
PARALLEL_MIN_WORK = 1 << 20  # below this many multiply-adds a thread launch costs more


# --------------------------------------------------------------------------------------------
# Ridge accumulation (twin: rfmodel.ridge._accumulate_reference, which uses BLAS)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _xtx_group(out, xb, wb, m, i0, d):
    """out[i0:i0+4, i0:] += wb[:m, i0:i0+4]^T xb[:m, i0:] (rows beyond d skipped)."""
    i1, i2, i3 = i0 + 1, i0 + 2, i0 + 3
    if i3 < d:
        for r in range(m):
            a0, a1, a2, a3 = wb[r, i0], wb[r, i1], wb[r, i2], wb[r, i3]
            for j in range(i0, d):
                xj = xb[r, j]
                out[i0, j] += a0 * xj
                out[i1, j] += a1 * xj
                out[i2, j] += a2 * xj
                out[i3, j] += a3 * xj
    else:
        for i in range(i0, d):
            for r in range(m):
                a = wb[r, i]
                for j in range(i, d):
                    out[i, j] += a * xb[r, j]


@njit(cache=True)
def _cast_block(x, w, r0, m, xb, wb):
    """xb[:m] = float64(x[r0:r0+m]); wb[:m] = w[r] * xb[r] (row weights applied once)."""
    for r in range(m):
        wr = w[r0 + r]
        for j in range(x.shape[1]):
            v = np.float64(x[r0 + r, j])
            xb[r, j] = v
            wb[r, j] = wr * v


@njit(cache=True)
def _xtx_pair(out, xb, wb, m, p, groups, d):
    """Row groups p and groups-1-p (equal triangle work per pair, for balanced threads)."""
    _xtx_group(out, xb, wb, m, 4 * p, d)
    q = groups - 1 - p
    if q != p:
        _xtx_group(out, xb, wb, m, 4 * q, d)


@njit(cache=True)
def _mirror(out):
    d = out.shape[0]
    for i in range(d):
        for j in range(i + 1, d):
            out[j, i] = out[i, j]


@njit(cache=True)
def _xty_row(out, wb, yb, m, i):
    for r in range(m):
        a = wb[r, i]
        for j in range(yb.shape[1]):
            out[i, j] += a * yb[r, j]


# Each kernel exists twice, serial and threaded, with the same per-entry arithmetic; the
# threaded one only splits rows of ``out`` between threads, so both agree bitwise.
@njit(cache=True)
def _ridge_xtx_serial(x, w, out):
    """Accumulate ``out += X^T diag(w) X`` in float64; X rows are cast to float64 first.

    x: ``(n, d)`` float32 or float64, C-contiguous; w: ``(n,)`` float64; out: ``(d, d)``
    float64, updated in place (kept symmetric). Each product ``(w_r x_ri) x_rj`` is formed in
    float64 (exact for fp32 rows with w = 1) and each entry sums its rows in row order.
    Twin: ``rfmodel.ridge._accumulate_reference`` (BLAS ``X^T (w X)``), equal to a tolerance.
    """
    n, d = x.shape
    xb, wb = np.empty((ROW_BLOCK, d)), np.empty((ROW_BLOCK, d))
    groups = (d + 3) // 4
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        for p in range((groups + 1) // 2):
            _xtx_pair(out, xb, wb, m, p, groups, d)
    _mirror(out)


@njit(cache=True, parallel=True)
def _ridge_xtx_parallel(x, w, out):
    """``_ridge_xtx_serial`` with the row-group pairs split between threads."""
    n, d = x.shape
    xb, wb = np.empty((ROW_BLOCK, d)), np.empty((ROW_BLOCK, d))
    groups = (d + 3) // 4
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        for p in prange((groups + 1) // 2):
            _xtx_pair(out, xb, wb, m, p, groups, d)
    _mirror(out)


@njit(cache=True)
def _ridge_xty_serial(x, y, w, out):
    """Accumulate ``out += X^T diag(w) Y`` in float64 (rows cast to float64 first).

    x: ``(n, d_in)``, y: ``(n, d_out)`` float32/float64 C-contiguous; w: ``(n,)`` float64;
    out: ``(d_in, d_out)`` float64 updated in place; rows summed in row order.
    Twin: ``rfmodel.ridge._accumulate_reference``.
    """
    n, d_in = x.shape
    xb, wb = np.empty((ROW_BLOCK, d_in)), np.empty((ROW_BLOCK, d_in))
    yb, ones = np.empty((ROW_BLOCK, y.shape[1])), np.ones(n)
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        _cast_block(y, ones, r0, m, yb, yb)
        for i in range(d_in):
            _xty_row(out, wb, yb, m, i)


@njit(cache=True, parallel=True)
def _ridge_xty_parallel(x, y, w, out):
    """``_ridge_xty_serial`` with the rows of ``out`` split between threads."""
    n, d_in = x.shape
    xb, wb = np.empty((ROW_BLOCK, d_in)), np.empty((ROW_BLOCK, d_in))
    yb, ones = np.empty((ROW_BLOCK, y.shape[1])), np.ones(n)
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        _cast_block(y, ones, r0, m, yb, yb)
        for i in prange(d_in):
            _xty_row(out, wb, yb, m, i)


def ridge_xtx(x, w, out):
    """``out += X^T diag(w) X`` (``_ridge_xtx_serial``); threads only for large chunks."""
    big = x.shape[0] * x.shape[1] * x.shape[1] >= PARALLEL_MIN_WORK
    (_ridge_xtx_parallel if big else _ridge_xtx_serial)(x, w, out)


def ridge_xty(x, y, w, out):
    """``out += X^T diag(w) Y`` (``_ridge_xty_serial``); threads only for large chunks."""
    big = x.shape[0] * x.shape[1] * y.shape[1] >= PARALLEL_MIN_WORK
    (_ridge_xty_parallel if big else _ridge_xty_serial)(x, y, w, out)


# --------------------------------------------------------------------------------------------
# Gated delta rule scan (twin: rfmodel.gdn.gdn_scan_reference, same arithmetic order)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _gdn_head(q, k, v, g, beta, s, out, h, erase):
    """One head of the scan: state s (d_k, d_v) updated in place, outputs into out[h]."""
    N, d_k = k.shape[1], k.shape[2]
    d_v = v.shape[2]
    mem = np.empty(d_v, dtype=v.dtype)
    delta = np.empty(d_v, dtype=v.dtype)
    for t in range(N):
        gt = g[h, t]
        for i in range(d_k):
            for j in range(d_v):
                s[i, j] = s[i, j] * gt
        bt = beta[h, t]
        if erase:
            for j in range(d_v):
                mem[j] = k[h, t, 0] * s[0, j]
            for i in range(1, d_k):
                ki = k[h, t, i]
                for j in range(d_v):
                    mem[j] = mem[j] + ki * s[i, j]
            for j in range(d_v):
                delta[j] = (v[h, t, j] - mem[j]) * bt
        else:
            for j in range(d_v):
                delta[j] = v[h, t, j] * bt
        for i in range(d_k):
            ki = k[h, t, i]
            for j in range(d_v):
                s[i, j] = s[i, j] + ki * delta[j]
        for j in range(d_v):
            out[h, t, j] = s[0, j] * q[h, t, 0]
        for i in range(1, d_k):
            qi = q[h, t, i]
            for j in range(d_v):
                out[h, t, j] = out[h, t, j] + s[i, j] * qi


@njit(cache=True, parallel=True)
def _gdn_scan_parallel(q, k, v, g, beta, state, erase):
    out = np.empty((k.shape[0], k.shape[1], v.shape[2]), dtype=v.dtype)
    for h in prange(k.shape[0]):
        _gdn_head(q, k, v, g, beta, state[h], out, h, erase)
    return out


@njit(cache=True)
def _gdn_scan_serial(q, k, v, g, beta, state, erase):
    out = np.empty((k.shape[0], k.shape[1], v.shape[2]), dtype=v.dtype)
    for h in range(k.shape[0]):
        _gdn_head(q, k, v, g, beta, state[h], out, h, erase)
    return out



def gdn_scan(q, k, v, g, beta, state, erase):
    """Gated delta rule over rows; bitwise equal to its NumPy twin.

    q, k: ``(H, N, d_k)``; v: ``(H, N, d_v)``; g, beta: ``(H, N)``; state: ``(H, d_k, d_v)``
    (all one float dtype, C-contiguous), updated in place to the final state; erase: bool.
    Per row and head: ``S = g S;  m = k^T S;  S = S + k (beta (v - m))^T;  o = S^T q``
    (``delta = v beta`` when erase is False) -- the order of
    ``rfmodel.gdn.gdn_scan_reference`` (and of HF ``torch_recurrent_gated_delta_rule``).
    Heads run in parallel when the problem is large (each head by one thread, so results do
    not depend on it). Returns the outputs ``(H, N, d_v)``.
    """
    H, N, d_k = k.shape
    if H > 1 and H * N * d_k * v.shape[2] >= PARALLEL_MIN_WORK:
        return _gdn_scan_parallel(q, k, v, g, beta, state, erase)
    return _gdn_scan_serial(q, k, v, g, beta, state, erase)
