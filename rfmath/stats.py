"""Paired intervals, the binomial floor, non-inferiority and the count-matched control.

Twins of §3.3 ("Against what": a random control of the same count gains, on average, the same
share of the benefit as its share of the rows) and §3.4 ("With what intervals": paired
percentile bootstrap resampled within strata, the binomial floor ``-100 (1 - alpha**(1/n))``
points, and non-inferiority against a margin using the more conservative of the two bounds).
Per-sample arrays are ``(n,)``; results are floats in the units of the inputs (points for
accuracy). Resampling uses ``numpy.random.default_rng(seed)``, so results are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rfmath import _validate as _v

__all__ = [
    "Interval",
    "NonInferiority",
    "binomial_floor",
    "paired_bootstrap",
    "weighted_bootstrap",
    "noninferior",
    "count_matched_expected",
    "control_size_term",
]

_STATS = ("mean", "median")
_CHUNK_ELEMENTS = 2_000_000  # resampled values held at once (16 MB of float64)


@dataclass(frozen=True)
class Interval:
    """A paired bootstrap result: estimate of stat(x - y) and its percentile interval."""

    estimate: float
    low: float
    high: float
    n: int


@dataclass(frozen=True)
class NonInferiority:
    """A one-sided non-inferiority test of x against y (§3.4).

    estimate: mean(x - y); bootstrap_bound: one-sided lower (1 - alpha) bootstrap bound;
    floor: binomial floor (None unless accuracy data); bound: the more conservative (lower) of
    the two; passed: bound > -margin. Accuracy results are in points (100 x fraction).
    """

    estimate: float
    bootstrap_bound: float
    floor: float | None
    bound: float
    margin: float
    passed: bool
    n: int


def binomial_floor(n: int, alpha: float = 0.05) -> float:
    """Binomial floor ``-100 * (1 - alpha**(1/n))`` points for n samples (§3.4).

    The largest failure rate that n successes out of n cannot rule out at level alpha, as a
    (negative) difference in points. n >= 1, 0 < alpha < 1. Returns a float.
    """
    n_ = _v.integer(n, "n", minimum=1)
    a = _v.unit_interval(alpha, "alpha", open_left=True, open_right=True)
    return float(100.0 * np.expm1(np.log(a) / n_))  # = -100 * (1 - a**(1/n))


def _paired(x: object, y: object) -> tuple[np.ndarray, np.ndarray]:
    xx = _v.float_array(x, "x")
    yy = _v.float_array(y, "y")
    if xx.ndim != 1 or yy.ndim != 1 or xx.shape != yy.shape:
        raise ValueError(
            f"x and y must be 1-D arrays of paired samples of the same length; got shapes "
            f"{xx.shape} and {yy.shape}."
        )
    if xx.size == 0:
        raise ValueError("x and y must hold at least one pair (n = 0).")
    return xx, yy


def _groups(strata: object, n: int) -> list[np.ndarray]:
    """Row indices of each stratum (one group of all rows when strata is None)."""
    if strata is None:
        return [np.arange(n)]
    labels = np.asarray(strata)
    if labels.shape != (n,):
        raise ValueError(f"strata must have shape ({n},), one label per pair; got {labels.shape}.")
    if labels.dtype.kind == "f" and np.isnan(labels).any():
        raise ValueError("strata must not contain NaN; give every pair a label.")
    if labels.dtype.kind == "O":
        labels = labels.astype(str)
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    order = np.argsort(inverse.ravel(), kind="stable")  # rows grouped by stratum
    return np.split(order, np.cumsum(counts)[:-1])


def _resampled_stats(
    d: np.ndarray,
    groups: list[np.ndarray],
    resamples: int,
    seed: int,
    stat: str,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """stat of each of ``resamples`` resamples of d, drawn with replacement inside each group
    (with ``weights``, the mean is the weighted mean of the drawn rows)."""
    rng = np.random.default_rng(seed)
    n = d.size
    out = np.empty(resamples)
    chunk = max(1, min(resamples, _CHUNK_ELEMENTS // n))
    for start in range(0, resamples, chunk):
        b = min(chunk, resamples - start)
        idx = np.empty((b, n), dtype=np.intp)  # (resamples in chunk, n)
        col = 0
        for members in groups:  # keeps each stratum's size in every resample
            size = members.size
            idx[:, col : col + size] = members[rng.integers(0, size, size=(b, size))]
            col += size
        sample = d[idx]
        if weights is not None:
            w = weights[idx]
            out[start : start + b] = (sample * w).sum(axis=1) / w.sum(axis=1)
        else:
            out[start : start + b] = (
                sample.mean(axis=1) if stat == "mean" else np.median(sample, axis=1)
            )
    return out


def paired_bootstrap(
    x: np.ndarray,
    y: np.ndarray,
    *,
    resamples: int = 10000,
    seed: int = 0,
    strata: np.ndarray | None = None,
    stat: str = "mean",
    level: float = 0.95,
) -> Interval:
    """Paired percentile bootstrap interval for stat(x - y) (§3.4).

    x, y: ``(n,)`` paired samples. Pairs are resampled with replacement within each stratum
    (strata: ``(n,)`` labels), so every resample keeps the stratum sizes. stat: "mean" or
    "median"; level in (0, 1) is the two-sided coverage. Returns an ``Interval``.
    """
    xx, yy = _paired(x, y)
    st = _v.choice(stat, "stat", _STATS)
    lv = _v.unit_interval(level, "level", open_left=True, open_right=True)
    b = _v.integer(resamples, "resamples", minimum=1)
    sd = _v.integer(seed, "seed", minimum=0)
    d = xx - yy
    stats = _resampled_stats(d, _groups(strata, d.size), b, sd, st)
    low, high = np.quantile(stats, [(1.0 - lv) / 2.0, (1.0 + lv) / 2.0])
    estimate = d.mean() if st == "mean" else np.median(d)
    return Interval(float(estimate), float(low), float(high), int(d.size))


def weighted_bootstrap(
    values: np.ndarray,
    weights: np.ndarray,
    *,
    resamples: int = 10000,
    seed: int = 0,
    strata: np.ndarray | None = None,
    level: float = 0.95,
) -> Interval:
    """Percentile bootstrap interval for the weighted mean ``sum(w v) / sum(w)`` (§3.4, for a
    measure pooled over clusters).

    values: ``(n,)`` each cluster's mean (a document's mean key-token dNLL); weights: ``(n,)``
    its positive size (its key-token count), so the estimate is the mean over every member
    (per token) while whole clusters are resampled with replacement, within each stratum
    (strata: ``(n,)`` labels), as the members of one cluster are not independent. Equal
    weights give ``paired_bootstrap(values, 0)``. Returns an ``Interval`` (n: clusters).
    """
    vv, ww = _v.float_array(values, "values"), _v.float_array(weights, "weights")
    if vv.ndim != 1 or vv.shape != ww.shape or vv.size == 0:
        raise ValueError(
            f"values and weights must be non-empty 1-D arrays of the same length (one entry per "
            f"cluster); got shapes {vv.shape} and {ww.shape}."
        )
    if not (ww > 0).all():
        raise ValueError("weights must be > 0 (each cluster's size): drop the empty clusters.")
    lv = _v.unit_interval(level, "level", open_left=True, open_right=True)
    b = _v.integer(resamples, "resamples", minimum=1)
    sd = _v.integer(seed, "seed", minimum=0)
    stats = _resampled_stats(vv, _groups(strata, vv.size), b, sd, "mean", weights=ww)
    low, high = np.quantile(stats, [(1.0 - lv) / 2.0, (1.0 + lv) / 2.0])
    return Interval(float((vv * ww).sum() / ww.sum()), float(low), float(high), int(vv.size))


def noninferior(
    x: np.ndarray,
    y: np.ndarray,
    margin: float,
    *,
    resamples: int = 10000,
    seed: int = 0,
    strata: np.ndarray | None = None,
    alpha: float = 0.05,
    accuracy: bool = True,
) -> NonInferiority:
    """Non-inferiority of x against y at a margin fixed in advance (§3.4).

    bootstrap_bound is the one-sided lower (1 - alpha) percentile bound of mean(x - y). With
    accuracy=True, x and y hold 0/1 per sample, results are in points (100 x fraction) and the
    bound is the lower of the bootstrap bound and ``binomial_floor(n, alpha)`` (the paper's
    floor at alpha = 0.05); otherwise it is
    the bootstrap bound, in the units of x and y. margin > 0; passed = bound > -margin.
    """
    xx, yy = _paired(x, y)
    mg = _v.positive(margin, "margin")
    a = _v.unit_interval(alpha, "alpha", open_left=True, open_right=True)
    b = _v.integer(resamples, "resamples", minimum=1)
    sd = _v.integer(seed, "seed", minimum=0)
    if accuracy:
        if not (np.isin(xx, (0.0, 1.0)).all() and np.isin(yy, (0.0, 1.0)).all()):
            raise ValueError(
                "with accuracy=True, x and y must hold 0/1 per sample; pass "
                "accuracy=False for other measures."
            )
        xx, yy = 100.0 * xx, 100.0 * yy  # points
    d = xx - yy
    stats = _resampled_stats(d, _groups(strata, d.size), b, sd, "mean")
    boot = float(np.quantile(stats, a))
    floor = binomial_floor(d.size, a) if accuracy else None
    bound = min(boot, floor) if floor is not None else boot
    return NonInferiority(
        estimate=float(d.mean()),
        bootstrap_bound=boot,
        floor=floor,
        bound=bound,
        margin=mg,
        passed=bool(bound > -mg),
        n=int(d.size),
    )


def count_matched_expected(benefits: np.ndarray, k: int) -> float:
    """Expected total benefit of a uniformly random k-subset of the n rows, ``k/n * sum`` (§3.3).

    benefits: ``(n,)`` each row's own additive benefit if made exact; 0 <= k <= n. Each row is
    in the subset with probability k/n, so the expectation is k/n times the total. Returns a
    float.
    """
    bb = _v.float_array(benefits, "benefits")
    if bb.ndim != 1 or bb.size == 0:
        raise ValueError(f"benefits must be a non-empty 1-D array (n,); got shape {bb.shape}.")
    k_ = _v.integer(k, "k", minimum=0)
    if k_ > bb.size:
        raise ValueError(f"k must be <= n={bb.size} (a subset of the rows); got k={k_}.")
    return k_ / bb.size * float(bb.sum())


def control_size_term(benefits: np.ndarray, k: int, k_control: int) -> float:
    """What a control of a different size adds to a selection's margin, ``(k - k_control)/n *
    sum`` (§3.3; Lean ``control_size_margin``).

    A selection of k rows compared with the average random set of k_control rows has margin
    ``margin_k + (k - k_control)/n * sum(benefits)``, margin_k its margin over random sets of
    its own size: a term of the counts alone. benefits: ``(n,)``; 0 <= k, k_control <= n.
    Returns a float.
    """
    count_matched_expected(benefits, k)  # validates benefits and k
    bb = np.asarray(benefits, dtype=np.float64)
    kc = _v.integer(k_control, "k_control", minimum=0)
    if kc > bb.size:
        raise ValueError(f"k_control must be <= n={bb.size} (a subset of the rows); got {kc}.")
    return (int(k) - kc) / bb.size * float(bb.sum())
