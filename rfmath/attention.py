"""Softmax attention and how much one row's error can move what a query reads (§2.4).

Twins of the paper's §2.4 ("Why attention"): for a query i with attention weights a_i. over
rows j, a change delta in row j's value moves the output by exactly ``a_ij * delta``; a change
eps in row j's logit moves it by at most ``2 * V * a_ij * (exp(|eps|) - 1)``, V the largest
value norm among the rows; the attention weights move by at most ``2 * a_ij * (exp(|eps|) - 1)``
in L1. The rule the selectors rest on: keeping exact the k rows with the largest summed
attention leaves the least summed attention, hence the least total of these bounds, to the
fill (``top_k_rows``, ``unprotected_attention``). Everything is computed in float64.
"""

from __future__ import annotations

import numpy as np

from rfmath import _validate as _v

__all__ = [
    "softmax",
    "value_change_effect",
    "logit_change_bound",
    "weight_change_bound",
    "output_change_sq_bound",
    "top_k_rows",
    "unprotected_attention",
]


def softmax(s: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax of logits ``s`` along ``axis`` (§2.4).

    s: any shape, float; ``-inf`` masks a position, but every slice needs one finite logit.
    Returns float64 of s's shape, non-negative, summing to 1 along ``axis``.
    """
    arr = np.asarray(s, dtype=np.float64)
    if np.isnan(arr).any() or np.isposinf(arr).any():
        raise ValueError(
            "s must not contain NaN or +inf; use -inf to mask a position. "
            f"Got {int((np.isnan(arr) | np.isposinf(arr)).sum())} such entries."
        )
    if arr.ndim == 0:
        raise ValueError("s must have at least one axis; got a scalar. Pass an array of logits.")
    try:
        length = arr.shape[axis]
    except IndexError:
        raise ValueError(f"axis={axis} is out of range for s of shape {arr.shape}.") from None
    if length == 0:
        raise ValueError(
            f"s must have at least one logit along axis={axis}; got shape {arr.shape}."
        )
    top = np.max(arr, axis=axis, keepdims=True)
    if np.isneginf(top).any():
        raise ValueError(
            "every slice of s along axis needs at least one finite logit; a slice is all -inf "
            "(fully masked). Unmask at least one position per query."
        )
    e = np.exp(arr - top)
    return e / np.sum(e, axis=axis, keepdims=True)


def value_change_effect(a: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Exact change ``a_ij * delta`` in query i's output when row j's value moves by delta (§2.4).

    a: ``(...)`` attention weights a_ij in [0, 1]; delta: ``(..., D)`` value changes.
    Returns ``(..., D)`` float64.
    """
    aa = _v.float_array(a, "a")
    dd = _v.float_array(delta, "delta", min_ndim=1)
    if ((aa < 0.0) | (aa > 1.0)).any():
        raise ValueError(
            f"a must hold attention weights in [0, 1]; got {_v._show(a)}. Pass softmax outputs."
        )
    try:
        return aa[..., None] * dd
    except ValueError:
        raise ValueError(
            f"a of shape {aa.shape} must match delta's leading axes; delta has shape {dd.shape} "
            "(..., D)."
        ) from None


def logit_change_bound(a_ij: np.ndarray, eps: np.ndarray, v_max: np.ndarray) -> np.ndarray | float:
    """Bound ``2 * v_max * a_ij * (exp(|eps|) - 1)`` on the output change from a logit shift (§2.4).

    a_ij: attention weight in [0, 1] before the shift; eps: the change in row j's logit;
    v_max >= 0: the largest value norm among the rows the query attends to. Scalars or
    broadcastable arrays; returns float64 (a float for scalar inputs).
    """
    aa = _v.float_array(a_ij, "a_ij")
    ee = _v.float_array(eps, "eps")
    vm = _v.float_array(v_max, "v_max")
    if ((aa < 0.0) | (aa > 1.0)).any():
        raise ValueError(f"a_ij must lie in [0, 1]; got {_v._show(a_ij)}. Pass a softmax weight.")
    if (vm < 0.0).any():
        raise ValueError(f"v_max must be >= 0 (a norm); got {_v._show(v_max)}.")
    out = 2.0 * vm * aa * np.expm1(np.abs(ee))
    return float(out) if out.ndim == 0 else out


def weight_change_bound(a_ij: np.ndarray, eps: np.ndarray) -> np.ndarray | float:
    """Bound ``2 * a_ij * (exp(|eps|) - 1)`` on ``sum_k |a'_ik - a_ik|`` when row j's logit moves
    by eps (§2.4; Lean ``weight_change_le``).

    a_ij: attention weight in [0, 1] before the shift; eps: the change in row j's logit.
    Scalars or broadcastable arrays; returns float64 (a float for scalar inputs).
    """
    aa = _v.float_array(a_ij, "a_ij")
    ee = _v.float_array(eps, "eps")
    if ((aa < 0.0) | (aa > 1.0)).any():
        raise ValueError(f"a_ij must lie in [0, 1]; got {_v._show(a_ij)}. Pass a softmax weight.")
    out = 2.0 * aa * np.expm1(np.abs(ee))
    return float(out) if out.ndim == 0 else out


def output_change_sq_bound(
    a_ij: np.ndarray, eps: np.ndarray, v_norm_sq_max: np.ndarray
) -> np.ndarray | float:
    """Bound ``(2 * V * a_ij * (exp(|eps|) - 1))**2`` on the squared norm of the output change
    when row j's logit moves by eps, with ``V**2 = v_norm_sq_max`` (§2.4; Lean
    ``output_score_change_normSq_le``). Squared norms throughout: no square root is taken.

    a_ij: attention weight in [0, 1] before the shift; eps: the change in row j's logit;
    v_norm_sq_max >= 0: the largest squared value norm among the rows. Scalars or broadcastable
    arrays; returns float64 (a float for scalar inputs).
    """
    aa = _v.float_array(a_ij, "a_ij")
    ee = _v.float_array(eps, "eps")
    vs = _v.float_array(v_norm_sq_max, "v_norm_sq_max")
    if ((aa < 0.0) | (aa > 1.0)).any():
        raise ValueError(f"a_ij must lie in [0, 1]; got {_v._show(a_ij)}. Pass a softmax weight.")
    if (vs < 0.0).any():
        raise ValueError(
            f"v_norm_sq_max must be >= 0 (a squared norm); got {_v._show(v_norm_sq_max)}."
        )
    half = aa * np.expm1(np.abs(ee))
    out = 4.0 * vs * half * half
    return float(out) if out.ndim == 0 else out


def top_k_rows(scores: np.ndarray, k: int) -> np.ndarray:
    """The attention ranking's selection: a mask of the k rows with the largest summed
    attention (§2.4; Lean ``topk_minimises_unprotected``). Ties go to the earlier row.

    scores: ``(n,)`` each row's summed attention; 0 <= k <= n. Returns a bool ``(n,)`` mask with
    exactly k True entries.
    """
    s = _v.float_array(scores, "scores", min_ndim=1)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D (one per row); got shape {s.shape}.")
    k_ = _v.integer(k, "k", minimum=0)
    if k_ > s.size:
        raise ValueError(f"k must be <= the number of rows n={s.size}; got k={k_}.")
    keep = np.zeros(s.size, dtype=bool)
    keep[np.argsort(-s, kind="stable")[:k_]] = True
    return keep


def unprotected_attention(scores: np.ndarray, keep: np.ndarray) -> float:
    """Summed attention of the rows left to the fill, ``sum_{j not kept} s_j`` (§2.4; Lean
    ``unprotected``): with errors of one size, the total of §2.4's bounds a selection leaves.

    scores: ``(n,)`` each row's summed attention; keep: bool ``(n,)`` mask of the kept rows.
    Returns a float.
    """
    s = _v.float_array(scores, "scores", min_ndim=1)
    mask = np.asarray(keep)
    if mask.dtype != np.bool_ or mask.shape != s.shape:
        raise ValueError(
            f"keep must be a bool mask of the scores' shape {s.shape}; got dtype {mask.dtype}, "
            f"shape {mask.shape}."
        )
    return float(np.sum(np.where(mask, 0.0, s)))
