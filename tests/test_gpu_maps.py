"""Map files (gpu.maps.files): round trip, int8 / bf16 predictions within their quantization
bounds, resident vs streaming maps, and the int8 arithmetic against rfmodel.maps.

Oracles: float64 products ``x @ A.T + b`` of the float maps that were saved, the closed-form
rounding bounds (int8: |A_int8 - A| <= scale/2 plus half a float32 ulp of the product; bf16:
relative 2**-8), rfmodel.maps.round_bf16 and rfmodel.maps.dequantize_int8.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from gpu.core.engine import Engine
from gpu.maps.files import FORMAT, GROUP, dequantize, load_maps, save_maps
from gpu.core.plan import Plan
from gpu_fixtures import run_plan, LAYERS, random_maps, tiny_model, token_ids
from rfmodel.maps import dequantize_int8, round_bf16

EPS32 = 2.0 ** -24


def _maps(d_in=200, d_out=48, layers=(2, 3), seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for l in layers:
        A = rng.standard_normal((d_out, d_in)) * rng.uniform(0.01, 2.0, size=(d_out, 1))
        A[0, :GROUP] = 0.0                      # an all-zero group (scale 1.0, codes 0)
        out[l] = (A, rng.standard_normal(d_out))
    return out


def _meta(split=1, **kw):
    return {"model": "tiny", "fingerprint": "abc123", "split": split, "d_in": 200, "d_out": 48,
            "lambda": 0.01, **kw}


def test_round_trip(tmp_path):
    maps = _maps()
    unigram = np.arange(10, dtype=np.int64) * 7
    path = save_maps(tmp_path / "m.safetensors", maps, _meta(note="hello"), unigram)
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]  # no temp file left
    ms = load_maps(path, fingerprint="abc123", split=1, precision="bf16", resident=False)
    assert ms.split == 1 and ms.layers == [2, 3]
    assert ms.meta["format"] == FORMAT and ms.meta["note"] == "hello"
    assert ms.meta["lambda"] == 0.01 and ms.meta["software"].startswith("ridgefill ")
    assert np.array_equal(ms.unigram, unigram)
    for l, (A, b) in maps.items():
        A32 = A.astype(np.float32)
        # bf16 copy: float32 A rounded to nearest bf16 (rfmodel's bit-level rounding)
        assert np.array_equal(ms.tensors[f"layers.{l}.weight_bf16"].float().numpy(), round_bf16(A32))
        assert np.array_equal(ms.tensors[f"layers.{l}.bias"].numpy(), b.astype(np.float32))
        codes = ms.tensors[f"layers.{l}.weight_int8"]
        scales = ms.tensors[f"layers.{l}.scales"]
        assert codes.dtype == torch.int8 and codes.abs().max() <= 127
        assert scales.shape == (A.shape[0], -(-A.shape[1] // GROUP))
        assert float(scales[0, 0]) == 1.0 and not codes[0, :GROUP].any()
    with safe_open(str(path), "pt") as f:
        assert json.loads(f.metadata()["ridgefill"])["layers"] == [2, 3]


def test_dequantize_matches_rfmodel_bitwise(tmp_path):
    maps = _maps(d_in=300)  # 300 = 2 full groups + a short one
    ms = load_maps(save_maps(tmp_path / "m.safetensors", maps, _meta(d_in=300)),
                   resident=False)
    for l in maps:
        codes = ms.tensors[f"layers.{l}.weight_int8"]
        scales = ms.tensors[f"layers.{l}.scales"]
        ours = dequantize(codes, scales).numpy()
        ref = dequantize_int8(codes.numpy(), scales.numpy())
        assert ours.dtype == ref.dtype == np.float32
        assert np.array_equal(ours, ref)


def test_int8_and_bf16_predictions_within_quantization_bounds(tmp_path):
    maps = _maps()
    path = save_maps(tmp_path / "m.safetensors", maps, _meta())
    bf = load_maps(path, precision="bf16")
    i8 = load_maps(path, precision="int8")
    raw = load_maps(path, precision="int8", resident=False).tensors
    x = torch.randn(1, 17, 200, generator=torch.Generator().manual_seed(1)) * 3
    xa = x[0].double().abs().numpy()
    for l, (A, b) in maps.items():
        A32, b32 = A.astype(np.float32).astype(np.float64), b.astype(np.float32).astype(np.float64)
        exact = x[0].double().numpy() @ A32.T + b32          # float64 reference prediction
        # float32 evaluation of a d-term dot product: |error| <= d * eps * sum|x_j A_ij| + |b|
        d = A.shape[1]
        rounding = (d + 2) * EPS32 * (xa @ np.abs(A32).T + np.abs(b32)) * 1.01
        # int8: each weight within scale * (1/2 + 127 * 2**-24) of A (code rounding + product)
        scales = raw[f"layers.{l}.scales"].double().numpy()
        w_bound = np.repeat(scales, GROUP, axis=1)[:, :d] * (0.5 + 127 * EPS32)
        got8 = i8.predict(l, x)[0].double().numpy()
        err8 = np.abs(got8 - exact)
        bound8 = xa @ w_bound.T + rounding
        assert (err8 <= bound8).all()
        assert err8.max() > 0  # the quantization is really there
        # bf16: each weight within 2**-8 of |A| (8-bit significand, round to nearest)
        gotb = bf.predict(l, x)[0].double().numpy()
        errb = np.abs(gotb - exact)
        boundb = xa @ (2.0 ** -8 * np.abs(A32)).T + rounding
        assert (errb <= boundb).all()
        # and the two precisions agree within the sum of their bounds
        assert (np.abs(got8 - gotb) <= bound8 + boundb).all()


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_resident_and_streaming_maps_give_identical_outputs(tmp_path, precision):
    S = 1
    model = tiny_model("llama", seed=3)
    path = save_maps(tmp_path / "m.safetensors", random_maps(S, seed=4), _meta(S, d_in=32, d_out=32))
    res = load_maps(path, precision=precision, resident=True)
    stream = load_maps(path, precision=precision, resident=False)
    assert not res.tensors and stream.tensors  # one converted up front, one on the fly
    x = torch.randn(1, 9, 32, generator=torch.Generator().manual_seed(0))
    for l in res.layers:
        assert torch.equal(res.predict(l, x), stream.predict(l, x))
    ids = token_ids(20, seed=5)
    plan = Plan(20, S, 5, LAYERS, np.array([3]))
    a = run_plan(Engine(model, res), ids, plan, "ridge")
    b = run_plan(Engine(model, stream), ids, plan, "ridge")
    assert torch.equal(a.logits, b.logits)
    for l in range(LAYERS):
        assert torch.equal(a.cache.layers[l].keys, b.cache.layers[l].keys)
        assert torch.equal(a.cache.layers[l].values, b.cache.layers[l].values)
