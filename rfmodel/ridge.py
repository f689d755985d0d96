"""Streaming ridge moments for the RidgeFill maps (paper §2.2, "Fitting").

One capture pass keeps running sums, one document (or chunk) at a time, for every late layer
of one split at once; one solve per layer finishes the fit, and a new lambda needs only new
solves from the saved sums:

    sum_w = sum_t w_t,  sum_x = sum_t w_t x_t,  X^T X = sum_t w_t x_t x_t^T,
    sum_y[l] = sum_t w_t y_lt,  X^T Y[l] = sum_t w_t x_t y_lt^T,

then the centred moments ``X_c^T X_c = X^T X - sum_x sum_x^T / sum_w`` (and likewise for
``X_c^T Y``) go to ``rfmath.ridge.solve_moments``.

Precision: each chunk is cast to float64 *before* its products are formed, so for fp32 rows
every product x_i x_j is exact (24 + 24 bits fit in float64's 53) and only the sums round, in
float64. (The weighted update forms ``(w_t x_ti) x_tj`` in float64.) Both backends do this;
they differ only in summation order: ``"reference"`` calls BLAS (``X^T (w X)``), ``"numba"``
(``rfmodel.kernels.ridge_xtx`` / ``ridge_xty``) sums each entry's rows in row order, blockwise
cast, no temporary weighted copy. They agree to about 1e-13 relative; BLAS is faster on a
workstation (see ``rfmodel.bench``), so it is the default. ``"blocked"`` is the capture pass's
fast path (``ridgefill fit``): float32 products over blocks of 256 rows summed in float64,
within the float32 dot-product bound of the exact moments (not exact products).

Every array of :meth:`RidgeMoments.state_dict` is a plain sum over rows, so summing the state
dicts of several shards (``torch.distributed.all_reduce`` with SUM on each array) and calling
:meth:`RidgeMoments.from_state_dict` equals one pass over all rows, as :meth:`merge` does.
Shapes: x ``(n, d_in)``, y ``(n, d_out)``; maps ``A (d_out, d_in)``, ``b (d_out,)``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rfmath.ridge import solve_anchored_moments, solve_moments
from rfmodel import _validate as _v
from rfmodel.atomic import atomic_path
from rfmodel import kernels

__all__ = ["RidgeMoments", "BACKENDS"]


def _accumulate_reference(x: np.ndarray, ys: list[np.ndarray], w: np.ndarray | None,
                          xtx: np.ndarray, xtys: list[np.ndarray]) -> None:
    """NumPy twin of the ridge kernels: cast to float64, then BLAS ``X^T (w X)``, ``X^T (w Y)``."""
    x64 = np.asarray(x, dtype=np.float64)  # (n, d_in), products exact for fp32 rows
    wx = x64 if w is None else x64 * w[:, None]  # (n, d_in)
    xtx += wx.T @ x64
    for y, xty in zip(ys, xtys):
        xty += wx.T @ np.asarray(y, dtype=np.float64)


def _accumulate_numba(x: np.ndarray, ys: list[np.ndarray], w: np.ndarray | None,
                      xtx: np.ndarray, xtys: list[np.ndarray]) -> None:
    """Numba path: ``kernels.ridge_xtx`` / ``ridge_xty`` (blockwise fp64 cast, row order)."""
    xc = np.ascontiguousarray(x)
    ww = np.ones(xc.shape[0]) if w is None else np.ascontiguousarray(w, dtype=np.float64)
    kernels.ridge_xtx(xc, ww, xtx)
    for y, xty in zip(ys, xtys):
        kernels.ridge_xty(xc, np.ascontiguousarray(y), ww, xty)


BLOCK = 256  # rows per float32 product of the "blocked" backend


def _accumulate_blocked(x: np.ndarray, ys: list[np.ndarray], w: np.ndarray | None,
                        xtx: np.ndarray, xtys: list[np.ndarray]) -> None:
    """Fast path of the capture pass: float32 BLAS products over blocks of ``BLOCK`` rows,
    each block's sum added into the float64 moments. Each entry of a block's product is a
    float32 dot product of at most BLOCK terms, within gamma_BLOCK = BLOCK u / (1 - BLOCK u)
    (u = 2^-24) of its exact value relative to the sum of the terms' magnitudes (the classical
    bound; tests/test_rfmodel_ridge.py checks it); only the float64 sums across blocks round
    further. About twice the float64 path's speed on the CPU."""
    x32 = np.asarray(x, dtype=np.float32)
    wx = x32 if w is None else (x32 * w[:, None]).astype(np.float32)
    y32 = [np.asarray(y, dtype=np.float32) for y in ys]
    for lo in range(0, x32.shape[0], BLOCK):
        b = wx[lo:lo + BLOCK].T
        xtx += b @ x32[lo:lo + BLOCK]
        for y, xty in zip(y32, xtys):
            xty += b @ y[lo:lo + BLOCK]


BACKENDS = {"reference": _accumulate_reference, "numba": _accumulate_numba,
            "blocked": _accumulate_blocked}


class RidgeMoments:
    """Streaming accumulator of the ridge moments of one split and many late layers (§2.2).

    d_in: width of the split state x_S. d_outs: ``{layer: d_out}``, the input width of each
    late layer to fit. backend: ``"reference"`` (BLAS, default), ``"numba"`` or ``"blocked"``
    (float32 block products summed in float64: the capture pass's fast path).

    Example::

        acc = RidgeMoments(64, {5: 64, 6: 64})
        for x_s, xs_late in documents:          # x_s (n, 64) fp32, xs_late {5: (n,64), 6: ...}
            acc.update(x_s, xs_late)
        maps = acc.solve(0.03)                  # {5: (A, b), 6: (A, b)}
    """

    def __init__(self, d_in: int, d_outs: dict[int, int], *, backend: str = "reference"):
        self.d_in = _v.integer(d_in, "d_in", minimum=1)
        if not isinstance(d_outs, dict) or not d_outs:
            raise ValueError(f"d_outs must be a non-empty dict {{layer: d_out}}; got {d_outs!r}.")
        self.d_outs = {
            _v.integer(layer, "d_outs layer", minimum=0): _v.integer(d, f"d_outs[{layer}]", minimum=1)
            for layer, d in sorted(d_outs.items())
        }
        self.backend = _v.choice(backend, "backend", tuple(BACKENDS))
        self.count = 0  # rows seen
        self.weight_sum = 0.0  # sum of row weights (= count when unweighted)
        self.sum_x = np.zeros(self.d_in)
        self.xtx = np.zeros((self.d_in, self.d_in))
        self.sum_y = {layer: np.zeros(d) for layer, d in self.d_outs.items()}
        self.xty = {layer: np.zeros((self.d_in, d)) for layer, d in self.d_outs.items()}

    # ---------------------------------------------------------------- accumulation
    def update(self, x_split: np.ndarray, ys: dict[int, np.ndarray],
               weights: np.ndarray | None = None) -> "RidgeMoments":
        """Add one chunk of rows.

        x_split: ``(n, d_in)`` float32/float64 split states; ys: ``{layer: (n, d_out)}`` with
        exactly this accumulator's layers; weights: optional ``(n,)`` non-negative frequency
        weights (2 means the row counts twice). Returns self.
        """
        x = _v.float_array(x_split, "x_split", shape=(None, self.d_in))
        n = x.shape[0]
        if not isinstance(ys, dict) or set(ys) != set(self.d_outs):
            got = sorted(ys) if isinstance(ys, dict) else type(ys).__name__
            raise ValueError(
                f"ys must be a dict with exactly the layers {sorted(self.d_outs)}; got {got}."
            )
        y_list = [
            _v.float_array(ys[layer], f"ys[{layer}]", shape=(n, d))
            for layer, d in self.d_outs.items()
        ]
        w = None
        if weights is not None:
            w = _v.float_array(weights, "weights", dtype=np.float64, shape=(n,))
            if (w < 0).any():
                raise ValueError("weights must be non-negative; drop rows instead of giving them "
                                 f"negative weight (min {w.min():.6g}).")
        if n == 0:
            return self
        BACKENDS[self.backend](x, y_list, w, self.xtx, [self.xty[l] for l in self.d_outs])
        x64 = x.astype(np.float64)
        self.sum_x += x64.sum(axis=0) if w is None else w @ x64
        for layer, y in zip(self.d_outs, y_list):
            y64 = y.astype(np.float64)
            self.sum_y[layer] += y64.sum(axis=0) if w is None else w @ y64
        self.count += n
        self.weight_sum += float(n if w is None else w.sum())
        return self

    def merge(self, other: "RidgeMoments") -> "RidgeMoments":
        """Add another accumulator's sums (another shard or machine); same as one pass. Returns self."""
        if not isinstance(other, RidgeMoments):
            raise ValueError(f"other must be a RidgeMoments; got {type(other).__name__}.")
        if other.d_in != self.d_in or other.d_outs != self.d_outs:
            raise ValueError(
                f"cannot merge accumulators of different shapes: d_in {self.d_in} vs {other.d_in}, "
                f"d_outs {self.d_outs} vs {other.d_outs}."
            )
        self.count += other.count
        self.weight_sum += other.weight_sum
        self.sum_x += other.sum_x
        self.xtx += other.xtx
        for layer in self.d_outs:
            self.sum_y[layer] += other.sum_y[layer]
            self.xty[layer] += other.xty[layer]
        return self

    # ---------------------------------------------------------------- solve
    def moments(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Centred weighted moments ``(xtx_c (d_in,d_in), xty_c (d_in,d_out), mu_x, mu_y)``."""
        if layer not in self.d_outs:
            raise ValueError(f"layer must be one of {sorted(self.d_outs)}; got {layer!r}.")
        if self.weight_sum <= 0.0:
            raise ValueError("no rows (or only zero-weight rows) accumulated yet; call update first.")
        mu_x = self.sum_x / self.weight_sum
        mu_y = self.sum_y[layer] / self.weight_sum
        xtx_c = self.xtx - np.outer(self.sum_x, mu_x)
        xtx_c = 0.5 * (xtx_c + xtx_c.T)  # exact symmetry despite rounding
        xty_c = self.xty[layer] - np.outer(self.sum_x, mu_y)
        return xtx_c, xty_c, mu_x, mu_y

    def solve(self, lam: float) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Ridge maps ``{layer: (A (d_out, d_in), b (d_out,))}`` with penalty lam (§2.2), via
        ``rfmath.ridge.solve_moments``; call again with another lam without a new pass."""
        layers = list(self.d_outs)
        parts = [self.moments(layer) for layer in layers]
        xtx_c, _, mu_x, _ = parts[0]  # X^T X is shared by every layer: one factorization
        A, b = solve_moments(xtx_c, np.concatenate([p[1] for p in parts], axis=1), mu_x,
                             np.concatenate([p[3] for p in parts]), lam)
        bounds = np.cumsum([0] + [self.d_outs[layer] for layer in layers])
        return {layer: (A[lo:hi], b[lo:hi]) for layer, lo, hi in zip(layers, bounds[:-1], bounds[1:])}

    def solve_anchored(self, lam: float) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Anchored maps ``{layer: (A, b)}``, shrunk toward the identity
        (``rfmath.ridge.solve_anchored_moments``), from the same sums; every layer's width
        must equal d_in (residual-stream targets)."""
        return {layer: solve_anchored_moments(*self.moments(layer), lam) for layer in self.d_outs}

    # ---------------------------------------------------------------- persistence
    def state_dict(self) -> dict[str, np.ndarray]:
        """Every sum as an array; all are additive over rows (all-reduce SUM, then rebuild).

        Keys: ``count`` (int64, 0-d), ``weight_sum`` (float64, 0-d), ``sum_x``, ``xtx``,
        ``sum_y.<layer>``, ``xty.<layer>``. Shapes carry d_in and d_outs.
        """
        out = {
            "count": np.array(self.count, dtype=np.int64),
            "weight_sum": np.array(self.weight_sum, dtype=np.float64),
            "sum_x": self.sum_x.copy(),
            "xtx": self.xtx.copy(),
        }
        for layer in self.d_outs:
            out[f"sum_y.{layer}"] = self.sum_y[layer].copy()
            out[f"xty.{layer}"] = self.xty[layer].copy()
        return out

    @classmethod
    def from_state_dict(cls, d: dict[str, np.ndarray], *, backend: str = "reference") -> "RidgeMoments":
        """Rebuild an accumulator from :meth:`state_dict` output (or a sum of several)."""
        need = {"count", "weight_sum", "sum_x", "xtx"}
        if not isinstance(d, dict) or not need <= set(d):
            raise ValueError(f"d must be a state_dict with keys {sorted(need)} and "
                             f"'sum_y.<layer>' / 'xty.<layer>'; got {sorted(d) if isinstance(d, dict) else d!r}.")
        layers = sorted(int(k.split(".", 1)[1]) for k in d if k.startswith("xty."))
        xtx = np.asarray(d["xtx"], dtype=np.float64)
        if xtx.ndim != 2 or xtx.shape[0] != xtx.shape[1] or not layers:
            raise ValueError(f"state_dict needs a square xtx and at least one layer; got xtx "
                             f"{xtx.shape} and layers {layers}.")
        d_in = xtx.shape[0]
        d_outs = {}
        for layer in layers:
            if f"sum_y.{layer}" not in d:
                raise ValueError(f"state_dict has xty.{layer} but no sum_y.{layer}.")
            d_outs[layer] = int(np.shape(d[f"xty.{layer}"])[1])
        acc = cls(d_in, d_outs, backend=backend)
        acc.count = int(np.asarray(d["count"]))
        acc.weight_sum = float(np.asarray(d["weight_sum"]))
        acc.sum_x = _v.float_array(d["sum_x"], "sum_x", dtype=np.float64, shape=(d_in,)).copy()
        acc.xtx = _v.float_array(xtx, "xtx", dtype=np.float64).copy()
        for layer, d_out in d_outs.items():
            acc.sum_y[layer] = _v.float_array(d[f"sum_y.{layer}"], f"sum_y.{layer}",
                                              dtype=np.float64, shape=(d_out,)).copy()
            acc.xty[layer] = _v.float_array(d[f"xty.{layer}"], f"xty.{layer}",
                                            dtype=np.float64, shape=(d_in, d_out)).copy()
        return acc

    def save(self, path: str | os.PathLike) -> None:
        """Write the sums to an ``.npz`` file atomically (temp file in the same folder, then
        ``os.replace``), so an interrupted save never leaves a half-written checkpoint."""
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, **self.state_dict())

    @classmethod
    def load(cls, path: str | os.PathLike, *, backend: str = "reference") -> "RidgeMoments":
        """Read an accumulator written by :meth:`save`."""
        with np.load(Path(path), allow_pickle=False) as data:
            return cls.from_state_dict({k: data[k] for k in data.files}, backend=backend)
