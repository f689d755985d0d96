"""Attention over a cache that mixes filled and exact rows (paper §2.1-2.3).

Follows HF ``modeling_llama.py`` (``LlamaRMSNorm``, ``rotate_half``/``apply_rotary_pos_emb``,
``repeat_kv``, ``eager_attention_forward``):

- :func:`rms_norm` ``x / sqrt(mean(x^2) + eps) * w``;
- :func:`rope` ``x * cos + rotate_half(x) * sin`` with ``inv_freq = theta^(-arange(0, D, 2)/D)``,
  angles ``pos * inv_freq`` and cos/sin concatenated twice along D (the "rotate_half" layout);
- :func:`attend` causal by *positions* (key pos <= query pos, and > query pos - window with a
  sliding window), GQA by repeating each KV head for ``H // Hkv`` consecutive query heads,
  scores ``(q @ k^T) * scale`` with ``scale = 1/sqrt(D)``, softmax by ``rfmath.attention``.

Filled rows enter simply as rows of the cache: their keys carry RoPE at their own positions,
so :func:`attend` never needs to know which rows are filled.

Rescales (§2.3, "Value rescale"): per KV head, the scale is the *mean over the c rows of the
per-row ratio* ``||v_exact_i|| / ||v_pred_i||`` (the paper: "the ratio of the exact value norm
to the predicted one, averaged over the c rows"); ``mode="ratio_of_means"`` gives
``mean_i ||v_exact_i|| / mean_i ||v_pred_i||`` instead. Norms are over the head dim D.
Shapes: q ``(H, n_q, D)``, k ``(Hkv, n_k, D)``, v ``(Hkv, n_k, Dv)``, positions int ``(n,)``.
"""
from __future__ import annotations

import numpy as np

from rfmath.attention import softmax
from rfmodel import _validate as _v

__all__ = [
    "rms_norm",
    "rotate_half",
    "rope",
    "attend",
    "rescale_factors",
    "value_rescale",
    "key_rescale",
    "splice",
]


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """HF Llama RMSNorm over the last axis: ``x / sqrt(mean(x^2) + eps) * w``. Keeps x's dtype."""
    var = np.mean(x * x, axis=-1, keepdims=True)
    return (x * (1.0 / np.sqrt(var + x.dtype.type(eps)))) * w


def rotate_half(x: np.ndarray) -> np.ndarray:
    """``cat(-x2, x1)`` of the two halves of the last axis."""
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Rotary embedding (HF Llama) of ``x (..., n, D)`` at integer ``positions (n,)``.

    D must be even. Angles are computed in x's float dtype (float32 like HF for float32 x).
    """
    xx = _v.float_array(x, "x")
    if xx.ndim < 2 or xx.shape[-1] % 2:
        raise ValueError(f"x must be (..., n, D) with D even; got shape {xx.shape}.")
    pos = np.asarray(positions)
    if pos.dtype.kind not in "iu" or pos.shape != (xx.shape[-2],):
        raise ValueError(f"positions must be integers of shape ({xx.shape[-2]},); got "
                         f"{pos.dtype} {pos.shape}.")
    dt = xx.dtype.type
    d = xx.shape[-1]
    inv_freq = dt(1.0) / (dt(theta) ** (np.arange(0, d, 2, dtype=dt) / dt(d)))  # (D/2,)
    freqs = pos.astype(dt)[:, None] * inv_freq[None, :]  # (n, D/2)
    emb = np.concatenate([freqs, freqs], axis=-1)  # (n, D)
    return xx * np.cos(emb) + rotate_half(xx) * np.sin(emb)


def attend(q, k, v, q_pos, k_pos, window=None, scale=None, *, return_probs=False):
    """Causal GQA softmax attention by positions.

    q ``(H, n_q, D)``, k ``(Hkv, n_k, D)``, v ``(Hkv, n_k, Dv)``, q_pos ``(n_q,)``, k_pos
    ``(n_k,)`` integers; key j is visible to query i iff ``k_pos[j] <= q_pos[i]`` and, with a
    window, ``k_pos[j] > q_pos[i] - window``. scale defaults to ``1/sqrt(D)``. Every query must
    see at least one key. Returns ``out (H, n_q, Dv)`` in q's dtype, plus ``probs (H, n_q, n_k)``
    when return_probs.
    """
    qq = _v.float_array(q, "q", ndim=3)
    kk = _v.float_array(k, "k", ndim=3)
    vv = _v.float_array(v, "v", ndim=3)
    H, n_q, D = qq.shape
    Hkv, n_k, _ = kk.shape
    if kk.shape[2] != D:
        raise ValueError(f"q and k must share the head dim D; got q {qq.shape}, k {kk.shape}.")
    if vv.shape[:2] != (Hkv, n_k):
        raise ValueError(f"v must be (Hkv, n_k, Dv) = ({Hkv}, {n_k}, Dv); got {vv.shape}.")
    if Hkv == 0 or H % Hkv:
        raise ValueError(f"query heads H={H} must be a multiple of KV heads Hkv={Hkv}.")
    qp, kp = np.asarray(q_pos), np.asarray(k_pos)
    if qp.dtype.kind not in "iu" or qp.shape != (n_q,):
        raise ValueError(f"q_pos must be integers of shape ({n_q},); got {qp.dtype} {qp.shape}.")
    if kp.dtype.kind not in "iu" or kp.shape != (n_k,):
        raise ValueError(f"k_pos must be integers of shape ({n_k},); got {kp.dtype} {kp.shape}.")
    visible = kp[None, :] <= qp[:, None]  # (n_q, n_k)
    if window is not None:
        w = _v.integer(window, "window", minimum=1)
        visible &= kp[None, :] > qp[:, None] - w
    if n_q and not visible.any(axis=1).all():
        bad = int(np.argmin(visible.any(axis=1)))
        raise ValueError(f"query {bad} (position {qp[bad]}) sees no key; every query needs at least "
                         "one key at or before its position (include the query row itself).")
    dtype = np.float32 if all(a.dtype == np.float32 for a in (qq, kk, vv)) else np.float64
    sc = dtype(1.0 / np.sqrt(D)) if scale is None else dtype(_v.float_array(scale, "scale", ndim=0))
    rep = H // Hkv
    k_rep = np.repeat(kk.astype(dtype, copy=False), rep, axis=0)  # (H, n_k, D)
    v_rep = np.repeat(vv.astype(dtype, copy=False), rep, axis=0)  # (H, n_k, Dv)
    scores = (qq.astype(dtype, copy=False) @ k_rep.transpose(0, 2, 1)) * sc  # (H, n_q, n_k)
    scores = np.where(visible[None], scores, -np.inf)
    probs = softmax(scores, axis=-1).astype(dtype) if n_q and n_k else np.zeros((H, n_q, n_k), dtype)
    out = probs @ v_rep  # (H, n_q, Dv)
    return (out, probs) if return_probs else out


def rescale_factors(exact: np.ndarray, pred: np.ndarray, mode: str = "mean_ratio") -> np.ndarray:
    """Per-KV-head scales from c rows computed twice, ``exact`` and ``pred`` ``(Hkv, c, D)``.

    mode ``"mean_ratio"`` (default, the paper's wording): ``mean_i ||exact_i|| / ||pred_i||``;
    ``"ratio_of_means"``: ``mean_i ||exact_i|| / mean_i ||pred_i||``. Returns ``(Hkv,)`` float64.
    """
    e = _v.float_array(exact, "exact", ndim=3).astype(np.float64)
    p = _v.float_array(pred, "pred", shape=e.shape).astype(np.float64)
    _v.choice(mode, "mode", ("mean_ratio", "ratio_of_means"))
    if e.shape[1] == 0:
        raise ValueError("exact and pred need at least one row (c >= 1); got c = 0.")
    ne = np.linalg.norm(e, axis=-1)  # (Hkv, c)
    npred = np.linalg.norm(p, axis=-1)  # (Hkv, c)
    if mode == "mean_ratio":
        if (npred == 0).any():
            raise ValueError("a predicted row has norm 0, so its ratio is undefined; use "
                             "mode='ratio_of_means'.")
        return np.mean(ne / npred, axis=1)
    den = npred.mean(axis=1)
    if (den == 0).any():
        raise ValueError("every predicted row of a head has norm 0; no scale can be measured.")
    return ne.mean(axis=1) / den


def _rescale(filled, exact_c, pred_c, mode, name):
    f = _v.float_array(filled, name, ndim=3)
    s = rescale_factors(exact_c, pred_c, mode)
    if s.shape[0] != f.shape[0]:
        raise ValueError(f"{name} has {f.shape[0]} KV heads but the c rows have {s.shape[0]}.")
    return (f * s[:, None, None]).astype(f.dtype)


def value_rescale(v_filled, v_exact_c, v_pred_c, mode: str = "mean_ratio") -> np.ndarray:
    """Filled values ``(Hkv, n_f, Dv)`` times the per-head scale of :func:`rescale_factors`
    measured on the first c tail rows' values from the true (``v_exact_c``) and the predicted
    (``v_pred_c``) input, both ``(Hkv, c, Dv)`` (§2.3)."""
    return _rescale(v_filled, v_exact_c, v_pred_c, mode, "v_filled")


def key_rescale(k_filled, k_exact_c, k_pred_c, mode: str = "mean_ratio") -> np.ndarray:
    """Filled keys scaled likewise (§6.6's key rescale); RoPE keeps norms, so pre- or post-RoPE
    keys give the same scale."""
    return _rescale(k_filled, k_exact_c, k_pred_c, mode, "k_filled")


def splice(filled_k, filled_v, exact_k, exact_v, which: str):
    """Replace filled keys, values or both by their exact counterparts (§6.6 splices).

    All four ``(Hkv, n, D)``; which in ``{"keys", "values", "both"}``. Returns ``(k, v)``.
    """
    _v.choice(which, "which", ("keys", "values", "both"))
    fk, fv = np.asarray(filled_k), np.asarray(filled_v)
    ek, ev = np.asarray(exact_k), np.asarray(exact_v)
    if fk.shape != ek.shape or fv.shape != ev.shape:
        raise ValueError(f"filled and exact arrays must match: keys {fk.shape} vs {ek.shape}, "
                         f"values {fv.shape} vs {ev.shape}.")
    k = ek.copy() if which in ("keys", "both") else fk.copy()
    v = ev.copy() if which in ("values", "both") else fv.copy()
    return k, v
