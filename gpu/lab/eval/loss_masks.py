"""Loss instruments of paper section 3.1: novel tokens, key tokens, per-document Delta NLL.

Definitions (positions index the prompt's token ids ``ids[0..N)``; scoring covers the
positions ``[start, N)``):

* **Novel token.** With ``run = 8``, a window is ``ids[s:s+run]`` for ``0 <= s <= N-run``;
  it is *repeated* when the same token sequence also starts at some earlier position
  ``p < s`` (the two occurrences may overlap). Position ``t`` is **not novel** iff some
  repeated window contains it (``s <= t < s+run``): the token sits inside an 8-token run
  that also appears earlier in the prompt, so the model could copy it. Every other
  position is novel; a prompt shorter than ``run`` is all novel. Computed in O(N) with a
  hash map of windows (exact keys, no false matches).
* **Key token.** A scored token whose exact loss rises by more than ``threshold`` (2 nats)
  when the context is cut to its last W tokens: ``nll_cut - nll_full > threshold``.
* **Delta NLL.** An arm's loss minus the exact arm's, averaged over a document's masked
  positions (each document then weighs the same in any average over documents).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["novel_token_mask", "key_token_mask", "delta_nll", "repeated_windows"]


def _as_1d(x: Any, dtype=None) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x, dtype=dtype)
    return arr.reshape(-1) if arr.ndim != 1 else arr


def repeated_windows(ids: Any, run: int = 8) -> np.ndarray:
    """``rep[s]`` is True iff ``ids[s:s+run]`` also occurs starting at an earlier position;
    length ``max(N - run + 1, 0)``."""
    if run < 1:
        raise ValueError("run must be >= 1")
    arr = np.ascontiguousarray(_as_1d(ids).astype(np.int64, copy=False))
    n_win = len(arr) - run + 1
    if n_win <= 0:
        return np.zeros(0, dtype=bool)
    rep = np.zeros(n_win, dtype=bool)
    raw = arr.tobytes()
    width = run * 8
    seen: dict[bytes, int] = {}
    setdefault = seen.setdefault
    for s in range(n_win):
        off = s * 8
        if setdefault(raw[off:off + width], s) != s:
            rep[s] = True
    return rep


def novel_token_mask(ids: Any, start: int = 0, run: int = 8) -> np.ndarray:
    """Boolean mask over the scored positions ``[start, N)``: True where the token is novel
    (not inside any ``run``-token window that also occurs earlier in ``ids``)."""
    n = len(_as_1d(ids))
    if not 0 <= start <= n:
        raise ValueError(f"start must lie in [0, {n}], got {start}")
    rep = repeated_windows(ids, run)
    # cover[t] = number of repeated windows containing t, via a difference array
    diff = np.zeros(n + 1, dtype=np.int64)
    idx = np.flatnonzero(rep)
    np.add.at(diff, idx, 1)
    np.add.at(diff, idx + run, -1)
    covered = np.cumsum(diff[:n]) > 0
    return ~covered[start:]


def key_token_mask(nll_full: Any, nll_cut: Any, threshold: float = 2.0) -> np.ndarray:
    """True where the exact loss with the context cut (``nll_cut``) exceeds the loss with
    the full context (``nll_full``) by more than ``threshold`` nats; NaN compares False."""
    full = _as_1d(nll_full, np.float64)
    cut = _as_1d(nll_cut, np.float64)
    if full.shape != cut.shape:
        raise ValueError(f"nll_full and nll_cut differ in shape: {full.shape} vs {cut.shape}")
    with np.errstate(invalid="ignore"):
        return (cut - full) > threshold


def delta_nll(nll_arm: Any, nll_exact: Any, mask: Any = None) -> float:
    """Per-document mean of ``nll_arm - nll_exact`` over the positions where ``mask`` is
    True (every position when ``mask`` is None), in nats per token; NaN when the mask
    selects nothing."""
    arm = _as_1d(nll_arm, np.float64)
    exact = _as_1d(nll_exact, np.float64)
    if arm.shape != exact.shape:
        raise ValueError(f"nll_arm and nll_exact differ in shape: {arm.shape} vs {exact.shape}")
    if mask is None:
        sel = np.ones(arm.shape, dtype=bool)
    else:
        sel = _as_1d(mask).astype(bool)
        if sel.shape != arm.shape:
            raise ValueError(f"mask has shape {sel.shape}, the losses {arm.shape}")
    k = int(sel.sum())
    if k == 0:
        return float("nan")
    return float((arm[sel] - exact[sel]).sum() / k)
