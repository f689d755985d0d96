"""The report's intervals (paper section 3.4): paired bootstrap intervals resampled within
task or domain, and the key-token dNLL per token, resampled by whole documents."""
from __future__ import annotations

import math

import numpy as np

from rfmath.stats import paired_bootstrap, weighted_bootstrap

RESAMPLES = 10_000


def jsonable(x) -> float | None:
    """JSON-safe float (NaN/inf -> None)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def interval(x, y, strata) -> dict | None:
    """Paired bootstrap of mean(x - y) over the pairs where both are finite, resampled
    within strata; when a stratum holds a single pair (which resampling could never vary)
    the pairs are resampled together instead, and ``stratified`` says so."""
    x, y, strata = np.asarray(x, float), np.asarray(y, float), np.asarray(strata)
    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() == 0:
        return None
    labels = _resampled_within(strata[ok])
    iv = paired_bootstrap(x[ok], y[ok], strata=labels, resamples=RESAMPLES, seed=0)
    return {**_bounds(iv), "n": iv.n, "stratified": labels is not None}


def _resampled_within(labels: np.ndarray) -> np.ndarray | None:
    """The strata to resample within: None (all together) when one holds a single pair."""
    single = len(labels) > 1 and np.unique(labels, return_counts=True)[1].min() < 2
    return None if single else labels


def _bounds(iv) -> dict:
    return {"estimate": jsonable(iv.estimate), "low": jsonable(iv.low), "high": jsonable(iv.high)}


def per_token(by_doc: dict[int, np.ndarray], minus: dict[int, np.ndarray] | None = None,
              strata: list[str] | None = None) -> dict | None:
    """The key-token dNLL averaged over key tokens instead of documents (a document with
    many key tokens weighs more), optionally of the difference with another arm on the
    documents both scored; the interval resamples whole documents, within ``strata``:
    {"estimate", "low", "high", "tokens", "documents", "stratified"}, None with no key token."""
    docs = [i for i in by_doc if len(by_doc[i]) and (minus is None or i in minus)]
    if not docs:
        return None
    parts = [by_doc[i] - (minus[i] if minus is not None else 0.0) for i in docs]
    sizes = np.array([len(p) for p in parts])
    labels = None if strata is None else _resampled_within(np.asarray(strata)[docs])
    iv = weighted_bootstrap([p.mean() for p in parts], sizes, strata=labels,
                            resamples=RESAMPLES, seed=0)
    return {**_bounds(iv), "tokens": int(sizes.sum()), "documents": len(docs),
            "stratified": labels is not None}
