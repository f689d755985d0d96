"""Numba-vs-NumPy speed of rfmodel's kernels at realistic sizes .

``run_kernel_bench()`` times each kernel against its NumPy twin in one process, on the same
inputs, interleaved, after a warm-up (compilation, reported separately), and prints one line
per case: NumPy ms, Numba ms (medians over repeats) and the ratio NumPy/Numba with its min-max
over repeats. Sizes default to d = 576 (SmolLM2-135M's width) and 8K rows.

Cases:
- ridge accumulation of one 8K-row chunk into ``X^T X`` and ``X^T Y`` for two late layers,
  unweighted and weighted. The NumPy twin is BLAS (dsyrk/dgemm), which a hand-written Numba
  loop does not beat; the Numba path exists for its fixed, thread-count-independent summation
  order and for the weighted update without a weighted copy. Expect a ratio below 1.
- the gated delta rule scan over 8K rows, 9 heads of 64 x 64 (= 576).
- selectors: span completion over 8K rows, the lexical net's 4-gram match of 8K prefix words
  against a 64-word window, and the two whole selectors that use them. Their Numba backend
  also scans the text (code points and rfmodel.charclass flags), where the NumPy twin walks
  the characters and pieces in Python; the character table is built in the warm-up.

Run: ``python -m rfmodel.bench`` (or ``run_kernel_bench(quick=True)`` for a smoke run).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from typing import Callable

import numba
import numpy as np

from rfmodel import gdn, lexical, ridge, selectors
from rfmodel.atomic import write_text

__all__ = ["run_kernel_bench"]


def _time(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _pair(ref: Callable[[], object], fast: Callable[[], object], repeats: int) -> dict:
    """Interleaved timings of ref and fast after one warm-up each; times in ms."""
    warm = _time(fast) * 1e3
    _time(ref)
    t_ref, t_fast = [], []
    for _ in range(repeats):
        t_ref.append(_time(ref) * 1e3)
        t_fast.append(_time(fast) * 1e3)
    ratios = np.array(t_ref) / np.array(t_fast)
    return {"numpy_ms": float(np.median(t_ref)), "numba_ms": float(np.median(t_fast)),
            "ratio": float(np.median(ratios)), "ratio_min": float(ratios.min()),
            "ratio_max": float(ratios.max()), "warmup_ms": warm}


def _ridge_cases(rng, n, d, repeats):
    x = rng.standard_normal((n, d)).astype(np.float32)
    ys = [rng.standard_normal((n, d)).astype(np.float32) for _ in range(2)]
    w = rng.uniform(0.5, 1.5, n)
    out = {}
    for name, weights in (("ridge accumulate (2 layers)", None), ("ridge accumulate weighted", w)):
        def run(backend, weights=weights):
            xtx, xtys = np.zeros((d, d)), [np.zeros((d, d)) for _ in ys]
            ridge.BACKENDS[backend](x, ys, weights, xtx, xtys)
        out[name] = _pair(lambda: run("reference"), lambda: run("numba"), repeats)
    return out


def _gdn_case(rng, n, heads, dk, repeats):
    q, k = rng.standard_normal((2, heads, n, dk))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((heads, n, dk))
    g, beta = rng.uniform(0.8, 1.0, (heads, n)), rng.uniform(0, 1, (heads, n))
    args = [np.ascontiguousarray(a) for a in (q, k, v, g, beta)]

    def run(backend):
        gdn.BACKENDS[backend](*args, np.zeros((heads, dk, dk)), True)
    return {f"gdn scan ({heads} heads x {dk}x{dk})": _pair(lambda: run("reference"), lambda: run("numba"), repeats)}


def _selector_cases(rng, n, repeats):
    pool = ["Ġthe", "Ġcode", "Ġis", "Ġ7", "7", "3", ",", "ĠMc", "Donald", ".", "Ġ12", "345", "ing"]
    pieces = [pool[i] for i in rng.integers(0, len(pool), n)]
    group = selectors.word_groups(pieces)
    sel = np.zeros(n, dtype=np.bool_)
    sel[rng.choice(n, n // 10, replace=False)] = True
    words = rng.integers(0, 2000, n).astype(np.int64)
    window = np.ascontiguousarray(words[-64:])
    rows = np.flatnonzero(sel)
    vocab = ["alpha", "beta", "Gamma", "delta", "x1", "zeta", "eta", "theta", "iota", "kappa", "."]
    text = " ".join(vocab[i] for i in rng.integers(0, len(vocab), n))
    offsets, cur = [], 0
    for tok in text.split(" "):
        offsets.append((cur, cur + len(tok)))
        cur += len(tok) + 1
    spans = np.array(offsets, dtype=np.int64)
    return {
        "span completion kernel": _pair(
            lambda: selectors.SPAN_BACKENDS["reference"](group, sel, 32),
            lambda: selectors.SPAN_BACKENDS["numba"](group, sel, 32), repeats),
        "4-gram match kernel": _pair(
            lambda: lexical.NGRAM_BACKENDS["reference"](words, window, 4),
            lambda: lexical.NGRAM_BACKENDS["numba"](words, window, 4), repeats),
        "complete_spans (whole)": _pair(
            lambda: selectors.complete_spans(rows, pieces, n, backend="reference"),
            lambda: selectors.complete_spans(rows, pieces, n, backend="numba"), repeats),
        "lexical_net (whole)": _pair(
            lambda: lexical.lexical_net(text, spans, len(spans) - 64, backend="reference"),
            lambda: lexical.lexical_net(text, spans, len(spans) - 64, backend="numba"), repeats),
    }


def run_kernel_bench(*, d: int = 576, rows: int = 8192, gdn_heads: int = 9, gdn_dim: int = 64,
                     repeats: int = 5, seed: int = 0, quick: bool = False, file=None,
                     json_path: str | None = None) -> dict[str, dict]:
    """Print and return Numba-vs-NumPy timings ``{case: {numpy_ms, numba_ms, ratio, ...}}``.

    ratio = NumPy time / Numba time (> 1: Numba faster); median over ``repeats`` interleaved
    runs. quick=True shrinks every size (smoke test). json_path: also write JSON lines.
    """
    out = sys.stdout if file is None else file
    if quick:
        d, rows, gdn_heads, gdn_dim, repeats = 64, 512, 2, 16, 2
    rng = np.random.default_rng(seed)
    print(f"# rfmodel kernel bench: numpy {np.__version__}, numba {numba.__version__}, "
          f"{numba.get_num_threads()} numba threads, {os.cpu_count()} cpus, "
          f"{platform.processor() or platform.machine()}", file=out)
    print(f"# sizes: d={d}, rows={rows}, gdn {gdn_heads} heads x {gdn_dim}; median of {repeats}; "
          "ratio = numpy/numba (>1: numba faster)", file=out)
    results = {}
    results.update(_ridge_cases(rng, rows, d, repeats))
    results.update(_gdn_case(rng, rows, gdn_heads, gdn_dim, repeats))
    results.update(_selector_cases(rng, rows, repeats))
    width = max(len(k) for k in results)
    print(f"{'case':<{width}}  {'numpy ms':>10}  {'numba ms':>10}  {'ratio':>7}  {'min-max':>13}  "
          f"{'warm-up ms':>10}", file=out)
    for name, r in results.items():
        print(f"{name:<{width}}  {r['numpy_ms']:>10.2f}  {r['numba_ms']:>10.2f}  {r['ratio']:>6.2f}x  "
              f"{r['ratio_min']:>5.2f}-{r['ratio_max']:<6.2f}  {r['warmup_ms']:>10.1f}", file=out)
    if json_path:
        write_text(json_path, "".join(json.dumps({"case": name, "d": d, "rows": rows, **r}) + "\n"
                                      for name, r in results.items()))
    return results


if __name__ == "__main__":
    run_kernel_bench(quick="--quick" in sys.argv)
