"""The batched fill (issue 21, gpu.core.batched) against the per-layer path it replaces, on a
tiny model of every family: the same cache entries and logits within 1e-6 (fp32), with the
maps' stacked product and with a predictor that has none, for the ridge and identity fills,
with exact rows, and for the probe's sweep. Oracle: gpu.core.late.filled_entries, layer by
layer (the path the earlier equivalence tests tie to the stock forward)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu.core import batched
from gpu.core.cache import read_by_someone
from gpu.core.engine import Engine
from gpu.core.plan import Plan
from gpu.core.walk import Filling, Late
from gpu.maps.files import load_maps, save_maps
from gpu_fixtures import run_plan, DenseMaps, random_maps
from test_press import FAMILIES, N, S, T, _ids, _shape, family_model

TOL = 1e-6


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield request.param, family_model(request.param)
    torch.set_num_threads(before)


def _entries(cache, layer):
    """Every tensor a cache layer holds (keys/values, or a Gated DeltaNet layer's states)."""
    out = []
    for name, value in sorted(vars(cache.layers[layer]).items()):
        for v in (value.values() if isinstance(value, dict) else [value]):
            if isinstance(v, torch.Tensor):
                out.append(v)
    return out


def _close(a, b):
    """Every late-layer entry and the logits within TOL (relative to the entry's scale)."""
    assert torch.allclose(a.logits, b.logits, atol=TOL * 10, rtol=TOL * 10)
    for layer in range(len(a.cache.layers)):
        ours, theirs = _entries(a.cache, layer), _entries(b.cache, layer)
        assert len(ours) == len(theirs) > 0
        for x, y in zip(ours, theirs):
            scale = float(y.abs().max()) or 1.0
            assert float((x - y).abs().max()) <= TOL * scale, layer


def _saved_maps(tmp_path, L, d, seed=3):
    path = save_maps(tmp_path / f"m{seed}.safetensors", random_maps(S, n_layers=L, d=d, seed=seed),
                     {"split": S, "d_in": d, "d_out": d})
    return load_maps(path, precision="bf16")


@pytest.mark.parametrize("fill", ["ridge", "identity"])
def test_batched_fill_equals_the_per_layer_path(family, fill, tmp_path, monkeypatch):
    name, model = family
    calls = []
    real = batched.entries
    monkeypatch.setattr(batched, "entries", lambda ctx: calls.append(len(real(ctx))) or real(ctx))
    L, d, vocab = _shape(model)
    ids = _ids(vocab, seed=4)
    exact_rows = np.array([3, 4, 11, 17])
    plan = Plan(N, S, T, L).with_rows(exact_rows)
    for maps in (DenseMaps(S, random_maps(S, n_layers=L, d=d, seed=3)), _saved_maps(tmp_path, L, d)):
        eng = Engine(model, maps)
        one = run_plan(eng, ids, plan, fill, fill_order="layer")
        assert calls == []
        many = run_plan(eng, ids, plan, fill, fill_order="batched")
        assert len(calls) == 1 and calls.pop() > 0  # the batched pass ran and wrote layers
        _close(many, one)


def test_the_batched_pass_writes_what_each_layer_would(family, tmp_path):
    """Each layer's (rows, keys, values) from gpu.core.batched.entries against
    gpu.core.late.filled_entries of that layer alone, for every attention layer above S."""
    from gpu.core import late

    name, model = family
    L, d, vocab = _shape(model)
    maps = _saved_maps(tmp_path, L, d, seed=5)
    eng = Engine(model, maps)
    ids = _ids(vocab, seed=5)
    plan = Plan(N, S, T, L)
    x_split, _ = eng.lower(ids, S, None)
    computed = torch.as_tensor(plan.computed)
    filled = torch.as_tensor(plan.filled)
    filling = Filling(keys="ridge", sources={"ridge": eng.predict_input},
                      predict_many=eng.predict_inputs)
    ctx = Late.prefill(eng.adapter, S, x_split, computed, filled, None, filling,
                       tail_start=plan.n_prefix)
    got = batched.entries(ctx)
    pieces = batched.entries(ctx, elements=1)  # 16 rows per stacked pass: the chunks join up
    assert got.keys() == pieces.keys() and all(
        torch.allclose(got[l][1], pieces[l][1], atol=TOL, rtol=TOL) for l in got)
    readable = {}
    for l in range(S, L):
        info = eng.adapter.layer_info(l)
        if info.kind != "gdn":
            readable[l] = (filled if info.window is None
                           else read_by_someone(filled, computed, N, info.window))
    assert set(got) == {l for l, r in readable.items() if r.numel()} != set()
    for layer, (rows, k, v) in got.items():
        assert torch.equal(rows, readable[layer])
        cos, sin = eng.adapter.rope(x_split, torch.arange(N)[None], layer)
        k1, v1 = late.filled_entries(ctx, layer, rows, None, eng.adapter.input_norm(layer),
                                     cos, sin)
        assert torch.allclose(k, k1, atol=TOL, rtol=TOL), layer
        assert torch.allclose(v, v1, atol=TOL, rtol=TOL), layer


def test_stacked_maps_equal_each_layer_and_stay_one_copy(tmp_path):
    L, d = 6, 16
    maps = _saved_maps(tmp_path, L, d, seed=7)
    x = torch.randn(1, 9, d, generator=torch.Generator().manual_seed(0))
    for layers in ((2, 3, 4, 5), (3, 5), (4,)):
        got = maps.predict_stacked(layers, x)
        assert got.shape == (len(layers), 1, 9, d)
        for i, l in enumerate(layers):
            assert torch.allclose(got[i], maps.predict(l, x), atol=TOL, rtol=TOL)
    # each layer's map is a view of the one stack (no second copy of the weights)
    A2, _ = maps._ready[2]
    assert A2.data_ptr() == maps._stack[0].data_ptr()


def test_stacked_writers_follow_a_weight_change():
    """The stacked K/V weights are cached per model; changing a weight in place rebuilds them."""
    model = family_model("llama")
    eng = Engine(model)
    layers = tuple(range(S, _shape(model)[0]))
    first = batched._stacked(eng.adapter, layers)
    assert batched._stacked(eng.adapter, layers) is first
    with torch.no_grad():
        eng.adapter.attn(S).k_proj.weight.mul_(2.0)
    again = batched._stacked(eng.adapter, layers)
    assert again is not first
    assert torch.equal(again["k_proj.weight"][0], eng.adapter.attn(S).k_proj.weight)


def test_fill_order_auto_batches_on_accelerators_only(monkeypatch):
    """``fill_order='auto'`` is layer by layer on the CPU; 'batched' runs the batched pass
    there too (the engine reads the order from the configuration)."""
    from gpu import PrefillConfig

    assert not PrefillConfig().batched_on("cpu")
    assert PrefillConfig().batched_on("cuda") and PrefillConfig(fill_order="batched").batched_on("cpu")
    assert not PrefillConfig(fill_order="layer").batched_on("cuda")
    model = family_model("llama")
    L, d, vocab = _shape(model)
    eng = Engine(model, DenseMaps(S, random_maps(S, n_layers=L, d=d, seed=3)))
    calls = []
    real = batched.entries
    monkeypatch.setattr(batched, "entries", lambda ctx: calls.append(1) or real(ctx))
    ids = _ids(vocab, seed=8)
    auto = eng.prefill(ids, PrefillConfig(split=S, tail=T, rows="none"))
    assert calls == []
    forced = eng.prefill(ids, PrefillConfig(split=S, tail=T, rows="none", fill_order="batched"))
    assert calls == [1]
    assert torch.allclose(auto.logits, forced.logits, atol=1e-5, rtol=1e-5)
