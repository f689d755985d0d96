"""Streaming ridge moments (rfmodel.ridge) against the one-shot rfmath solve (paper §2.2)."""
import os
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfmath.ridge import solve as one_shot
from rfmath.ridge import solve_anchored
from rfmodel import kernels
from rfmodel.ridge import RidgeMoments


def _py(kernel):
    """The pure-Python source of a Numba kernel (the kernel itself under NUMBA_DISABLE_JIT=1)."""
    return getattr(kernel, "py_func", kernel)


@st.composite
def calib(draw, *, max_rows=120, max_d=12, n_layers=2):
    """Calibration rows: fp32 split states and late-layer inputs with offsets, cut into chunks."""
    n = draw(st.integers(2, max_rows))
    d_in = draw(st.integers(1, max_d))
    d_outs = {layer: draw(st.integers(1, max_d)) for layer in draw(
        st.lists(st.integers(1, 30), min_size=1, max_size=n_layers, unique=True))}
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    offset = draw(st.floats(-5, 5))
    x = (rng.standard_normal((n, d_in)) * rng.uniform(0.2, 3, d_in) + offset).astype(np.float32)
    ys = {l: (x.astype(np.float64) @ rng.standard_normal((d_in, d)) * 0.5
              + rng.standard_normal((n, d)) + offset).astype(np.float32) for l, d in d_outs.items()}
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), max_size=4, unique=True)))
    return x, ys, d_outs, [0, *cuts, n]


def _rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


def _feed(acc, x, ys, bounds, weights=None):
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        acc.update(x[lo:hi], {l: y[lo:hi] for l, y in ys.items()},
                   None if weights is None else weights[lo:hi])
    return acc


def _assert_maps_close(maps, x, ys, lam, weights=None, tol=1e-9):
    for layer, y in ys.items():
        a_ref, b_ref = one_shot(x.astype(np.float64), y.astype(np.float64), lam, weights)
        a, b = maps[layer]
        assert a.shape == a_ref.shape and b.shape == b_ref.shape
        assert _rel(a, a_ref) < tol
        assert np.linalg.norm(b - b_ref) <= tol * (np.linalg.norm(b_ref) + np.linalg.norm(a_ref))


@given(calib(), st.floats(1e-3, 1.0), st.sampled_from(["reference", "numba"]))
def test_ridge_moments_solve_matches_one_shot(data, lam, backend):
    x, ys, d_outs, bounds = data
    acc = _feed(RidgeMoments(x.shape[1], d_outs, backend=backend), x, ys, bounds)
    assert acc.count == x.shape[0]
    _assert_maps_close(acc.solve(lam), x, ys, lam)


@given(calib(), st.floats(1e-3, 1.0))
def test_ridge_moments_solve_anchored_matches_one_shot(data, lam):
    """The anchored maps from the streamed sums equal rfmath's one-shot anchored solve."""
    x, ys, _, bounds = data
    d = x.shape[1]
    rng = np.random.default_rng(int(abs(x).sum() * 1000) % 2**32)
    ys = {l: (x + 0.3 * rng.standard_normal(x.shape)).astype(np.float32) for l in ys}
    acc = _feed(RidgeMoments(d, {l: d for l in ys}), x, ys, bounds)
    for layer, (a, b) in acc.solve_anchored(lam).items():
        a_ref, b_ref = solve_anchored(x.astype(np.float64), ys[layer].astype(np.float64), lam)
        assert _rel(a, a_ref) < 1e-9
        assert np.linalg.norm(b - b_ref) <= 1e-9 * (np.linalg.norm(b_ref) + np.linalg.norm(a_ref))


@given(calib(), st.floats(1e-3, 1.0))
def test_ridge_moments_merge_equals_one_pass(data, lam):
    x, ys, d_outs, bounds = data
    whole = _feed(RidgeMoments(x.shape[1], d_outs), x, ys, [0, x.shape[0]])
    mid = bounds[len(bounds) // 2] if len(bounds) > 2 else 1
    left = _feed(RidgeMoments(x.shape[1], d_outs), x, ys, [0, mid])
    right = _feed(RidgeMoments(x.shape[1], d_outs), x, ys, [mid, x.shape[0]])
    merged = left.merge(right)
    for key, arr in whole.state_dict().items():
        np.testing.assert_allclose(merged.state_dict()[key], arr, rtol=1e-12, atol=1e-9)
    for layer, (a, b) in merged.solve(lam).items():
        a1, b1 = whole.solve(lam)[layer]
        assert _rel(a, a1) < 1e-9 and np.linalg.norm(b - b1) <= 1e-9 * (1 + np.linalg.norm(b1))


@given(calib())
def test_ridge_moments_state_dict_sum_equals_merge(data):
    """What an all-reduce (SUM of every state_dict array) followed by from_state_dict gives."""
    x, ys, d_outs, bounds = data
    shards = [_feed(RidgeMoments(x.shape[1], d_outs), x, ys, [lo, hi])
              for lo, hi in zip(bounds[:-1], bounds[1:])]
    dicts = [s.state_dict() for s in shards]
    summed = {k: sum(d[k] for d in dicts) for k in dicts[0]}
    rebuilt = RidgeMoments.from_state_dict(summed)
    merged = RidgeMoments(x.shape[1], d_outs)
    for s in shards:
        merged.merge(s)
    for key, arr in merged.state_dict().items():
        np.testing.assert_allclose(rebuilt.state_dict()[key], arr, rtol=1e-12, atol=1e-9)
    assert rebuilt.count == x.shape[0] and rebuilt.d_outs == dict(sorted(d_outs.items()))


@settings(max_examples=15)
@given(calib(max_rows=60), st.floats(1e-3, 1.0), st.floats(1e-3, 1.0))
def test_ridge_moments_new_lambda_from_saved(tmp_path_factory, data, lam1, lam2):
    x, ys, d_outs, bounds = data
    acc = _feed(RidgeMoments(x.shape[1], d_outs), x, ys, bounds)
    acc.solve(lam1)
    path = tmp_path_factory.mktemp("moments") / "m.npz"
    acc.save(path)
    assert [p for p in os.listdir(path.parent) if p != "m.npz"] == []  # no temp file left
    loaded = RidgeMoments.load(path)
    for key, arr in acc.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[key], arr)
    _assert_maps_close(loaded.solve(lam2), x, ys, lam2)


@given(calib(), st.floats(1e-3, 1.0), st.sampled_from(["reference", "numba"]))
def test_ridge_moments_weights_match_weighted_solve(data, lam, backend):
    x, ys, d_outs, bounds = data
    w = np.random.default_rng(x.shape[0]).uniform(0.1, 2.0, x.shape[0])
    acc = _feed(RidgeMoments(x.shape[1], d_outs, backend=backend), x, ys, bounds, w)
    assert acc.weight_sum == pytest.approx(w.sum())
    _assert_maps_close(acc.solve(lam), x, ys, lam, weights=w)


@given(calib(max_rows=40), st.floats(1e-3, 1.0))
def test_ridge_moments_integer_weights_equal_repeated_rows(data, lam):
    x, ys, d_outs, _ = data
    reps = np.random.default_rng(7).integers(1, 4, x.shape[0])
    weighted = RidgeMoments(x.shape[1], d_outs).update(x, ys, reps.astype(float))
    repeated = RidgeMoments(x.shape[1], d_outs).update(
        np.repeat(x, reps, axis=0), {l: np.repeat(y, reps, axis=0) for l, y in ys.items()})
    for layer, (a, b) in weighted.solve(lam).items():
        a1, b1 = repeated.solve(lam)[layer]
        assert _rel(a, a1) < 1e-9 and np.linalg.norm(b - b1) <= 1e-9 * (1 + np.linalg.norm(b1))


@given(calib(), st.booleans())
def test_ridge_moments_numba_matches_reference(data, weighted):
    """Same products, different summation order (BLAS): equal to 1e-12 relative."""
    x, ys, d_outs, bounds = data
    w = np.random.default_rng(1).uniform(0, 2, x.shape[0]) if weighted else None
    ref = _feed(RidgeMoments(x.shape[1], d_outs, backend="reference"), x, ys, bounds, w)
    fast = _feed(RidgeMoments(x.shape[1], d_outs, backend="numba"), x, ys, bounds, w)
    for key, arr in ref.state_dict().items():
        scale = np.abs(arr).max() if np.size(arr) else 1.0
        assert np.abs(fast.state_dict()[key] - arr).max() <= 1e-12 * max(scale, 1.0)


@settings(max_examples=40, deadline=None)
@given(calib(max_rows=700), st.booleans())
def test_ridge_moments_blocked_within_the_float32_bound(data, weighted):
    """The capture pass's fast path (float32 products over blocks of BLOCK rows, summed in
    float64) against the exact-product reference: every entry of X^T X and X^T Y within
    gamma_(BLOCK+1) (one more rounding for the weighted rows) of the sum of its terms'
    magnitudes, plus float64 slack. 700 rows: several blocks."""
    from rfmodel.ridge import BLOCK

    x, ys, d_outs, bounds = data
    w = np.random.default_rng(1).uniform(0, 2, x.shape[0]) if weighted else None
    ref = _feed(RidgeMoments(x.shape[1], d_outs, backend="reference"), x, ys, bounds, w)
    fast = _feed(RidgeMoments(x.shape[1], d_outs, backend="blocked"), x, ys, bounds, w)
    u = 2.0 ** -24
    gamma = (BLOCK + 1) * u / (1 - (BLOCK + 1) * u)
    ax = np.abs(x.astype(np.float64)) * (1 if w is None else w[:, None])
    bound = {"xtx": gamma * ax.T @ np.abs(x.astype(np.float64))}
    for l, y in ys.items():
        bound[f"xty.{l}"] = gamma * ax.T @ np.abs(y.astype(np.float64))
    got, want = fast.state_dict(), ref.state_dict()
    for key, arr in want.items():
        err = np.abs(got[key] - arr)
        b = next((v for k, v in bound.items() if key.endswith(k)), None)
        if b is None:  # sums of rows and counts: float64 in both backends
            assert err.max(initial=0) <= 1e-12 * max(np.abs(arr).max(initial=1), 1.0), key
        else:
            assert (err <= b + 1e-12 * (1 + np.abs(arr))).all(), key
    assert any(k.endswith("xtx") for k in want)  # the bounded moments are there


def test_ridge_kernels_py_func_equal_compiled():
    """Serial, parallel and pure-Python runs of each kernel agree bitwise (each entry sums its
    rows in row order whatever the threads); catches bugs that appear only compiled."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((70, 9)).astype(np.float32)  # 70 > one 64-row block; d odd
    y = rng.standard_normal((70, 5)).astype(np.float32)
    w = rng.uniform(0, 2, 70)
    cases = (((9, 9), (x, w), (kernels._ridge_xtx_serial, kernels._ridge_xtx_parallel)),
             ((9, 5), (x, y, w), (kernels._ridge_xty_serial, kernels._ridge_xty_parallel)))
    for shape, args, (serial, parallel) in cases:
        outs = [np.zeros(shape) for _ in range(3)]
        serial(*args, outs[0])
        parallel(*args, outs[1])
        _py(serial)(*args, outs[2])
        np.testing.assert_array_equal(outs[0], outs[1])
        np.testing.assert_array_equal(outs[0], outs[2])


def test_ridge_moments_fp32_products_exact():
    """fp32 rows are cast before multiplying: a sum of exact products (no fp32 rounding)."""
    x = np.array([[4097.0, 4097.0]], dtype=np.float32)  # 4097^2 = 16785409 needs 25 bits
    acc = RidgeMoments(2, {0: 1}).update(x, {0: np.ones((1, 1), np.float32)})
    assert acc.xtx[0, 0] == 4097.0 * 4097.0
    assert np.float32(4097.0) * np.float32(4097.0) != acc.xtx[0, 0]  # fp32 product rounds


@pytest.mark.parametrize(
    "call, arg",
    [
        (lambda a: a.update(np.zeros((3, 5)), {1: np.zeros((3, 2))}), "x_split"),
        (lambda a: a.update(np.full((3, 4), np.nan), {1: np.zeros((3, 2))}), "x_split"),
        (lambda a: a.update(np.zeros((3, 4)), {1: np.zeros((2, 2))}), "ys[1]"),
        (lambda a: a.update(np.zeros((3, 4)), {2: np.zeros((3, 2))}), "ys"),
        (lambda a: a.update(np.zeros((3, 4)), {1: np.zeros((3, 2))}, -np.ones(3)), "weights"),
        (lambda a: a.solve(0.1), "update"),
        (lambda a: a.moments(7), "layer"),
        (lambda a: a.merge(RidgeMoments(3, {1: 2})), "merge"),
    ],
)
def test_ridge_moments_bad_inputs_raise(call, arg):
    with pytest.raises(ValueError, match=re.escape(arg)):
        call(RidgeMoments(4, {1: 2}))


def test_ridge_moments_bad_lambda_raises():
    acc = RidgeMoments(2, {0: 1}).update(np.eye(2), {0: np.ones((2, 1))})
    with pytest.raises(ValueError, match="lam"):
        acc.solve(-1.0)
