"""The fills beyond the paper in the engine: the anchored map, the direct cache-entry maps
(kv) and keys and values from different fills (``values_fill``).

Oracles: exact prefill (maps fitted with lambda -> 0 on fewer rows than the width interpolate
their calibration rows, so every fill must reproduce the exact cache on those rows), and the
single-source fills (a mixed walk's filled keys are one fill's, its values the other's).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from gpu.core.config import PrefillConfig
from gpu.core.engine import Engine
from gpu.core.plan import Plan
from gpu_fixtures import DenseMaps, LAYERS, random_maps, tiny_model, token_ids
from rfmath.ridge import compose, solve, solve_anchored

N, SPLIT, TAIL = 24, 1, 1  # 23 prefix rows < the width 32: a lambda -> 0 fit interpolates them
LAM = 1e-12


class KindMaps(DenseMaps):
    def __init__(self, split, maps, kind):
        super().__init__(split, maps)
        self.kind = kind


def interpolating_maps(model, ids):
    """{kind: maps} fitted on the prompt's own rows with lambda -> 0 (rfmath solves)."""
    out = model(input_ids=ids, output_hidden_states=True)
    hs = [h[0].double().numpy() for h in out.hidden_states]
    x = hs[SPLIT]
    ridge, anchored, kv = {}, {}, {}
    for l in range(SPLIT + 1, LAYERS):
        layer = model.model.layers[l]
        normed = layer.input_layernorm(out.hidden_states[l])[0].double().numpy()
        attn = layer.self_attn
        W = torch.cat([attn.k_proj.weight, attn.v_proj.weight]).double().numpy()
        c = np.concatenate([(p.bias.double().numpy() if p.bias is not None
                             else np.zeros(p.weight.shape[0])) for p in (attn.k_proj, attn.v_proj)])
        ridge[l] = solve(x, hs[l], LAM)
        anchored[l] = solve_anchored(x, hs[l], LAM)
        kv[l] = compose(W, c, *solve(x, normed, LAM))
    return {k: KindMaps(SPLIT, m, k) for k, m in
            (("ridge", ridge), ("anchored", anchored), ("kv", kv))}


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
@pytest.mark.parametrize("fill", ["ridge", "anchored", "kv"])
@torch.inference_mode()
def test_interpolating_maps_reproduce_the_exact_cache(family, fill):
    model = tiny_model(family, seed=3)
    ids = token_ids(N, seed=5)
    maps = interpolating_maps(model, ids)
    stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
    eng = Engine(model, maps)
    pre = eng.prefill(ids, PrefillConfig(split=SPLIT, tail=TAIL, fill=fill, rows="none",
                                     skip_unread=False))
    for l in range(SPLIT + 1, LAYERS):
        got, want = pre.cache.layers[l], stock.past_key_values.layers[l]
        n = got.keys.shape[2]  # a sliding layer keeps its last window
        for a, b in ((got.keys, want.keys), (got.values, want.values)):
            torch.testing.assert_close(a[:, :, :n], b[:, :, -n:], atol=2e-3, rtol=2e-3)
    # and the maps differ from the identity: the identity fill does not reproduce it
    ident = eng.prefill(ids, PrefillConfig(split=SPLIT, tail=TAIL, fill="identity", rows="none",
                                       skip_unread=False))
    assert not torch.allclose(ident.cache.layers[LAYERS - 1].keys,
                              stock.past_key_values.layers[LAYERS - 1].keys[:, :, -ident.cache.layers[LAYERS - 1].keys.shape[2]:],
                              atol=2e-3)


@pytest.mark.parametrize("keys,values", [("identity", "ridge"), ("ridge", "identity"),
                                         ("anchored", "kv"), ("kv", "ridge")])
@torch.inference_mode()
def test_values_fill_takes_keys_from_one_fill_and_values_from_the_other(keys, values):
    model = tiny_model("qwen3", seed=2)
    ids = token_ids(N, seed=1)
    maps = interpolating_maps(model, token_ids(N, seed=9))  # fitted on other rows: inexact
    eng = Engine(model, maps)
    cfg = PrefillConfig(split=SPLIT, tail=4, fill=keys, values_fill=values, rows="none")
    mixed = eng.prefill(ids, cfg)
    k_only = eng.prefill(ids, cfg.replace(values_fill=None))
    v_only = eng.prefill(ids, cfg.replace(fill=values, values_fill=None))
    filled = torch.as_tensor(mixed.plan.filled)
    for l in range(SPLIT + 1, LAYERS):
        assert torch.equal(mixed.cache.layers[l].keys[:, :, filled],
                           k_only.cache.layers[l].keys[:, :, filled])
        assert torch.equal(mixed.cache.layers[l].values[:, :, filled],
                           v_only.cache.layers[l].values[:, :, filled])
    assert not torch.equal(k_only.cache.layers[LAYERS - 1].values[:, :, filled],
                           v_only.cache.layers[LAYERS - 1].values[:, :, filled])


def test_fill_needs_maps_of_its_kind():
    model = tiny_model("llama", seed=1)
    ridge_only = Engine(model, KindMaps(SPLIT, random_maps(SPLIT), "ridge"))
    with pytest.raises(ValueError, match=r"needs maps of kind 'anchored'.*--kinds anchored"):
        ridge_only.prefill(token_ids(N), PrefillConfig(split=SPLIT, tail=4, fill="anchored",
                                                   rows="none"))
    with pytest.raises(ValueError, match=r"needs maps of kind 'kv'"):
        ridge_only.prefill(token_ids(N), PrefillConfig(split=SPLIT, tail=4, fill="identity",
                                                   values_fill="kv", rows="none"))


def test_values_fill_is_checked():
    with pytest.raises(ValueError, match="values_fill='bogus'"):
        PrefillConfig(values_fill="bogus")
    with pytest.raises(ValueError, match="keys are filled too"):
        PrefillConfig(fill="none", values_fill="ridge")
    assert PrefillConfig(fill="ridge", values_fill="ridge").values_fill is None
    assert PrefillConfig(fill="identity", values_fill="kv").map_kinds == ("kv",)
    assert PrefillConfig(fill="anchored", values_fill="kv").map_kinds == ("anchored", "kv")


def test_sink_rows_are_the_filled_rows_far_above_the_median_norm():
    """late.sink_rows: a filled row whose x_S norm passes SINK_RATIO x the filled rows' median
    (an attention sink: the first token on the Qwen2.5-Coder models), and no other."""
    from gpu.core.late import SINK_RATIO, sink_rows

    x = torch.ones(1, 10, 4)
    x[0, 0] *= SINK_RATIO * 1.5       # a sink
    x[0, 3] *= SINK_RATIO * 0.9       # large, but under the ratio
    x[0, 9] *= SINK_RATIO * 3         # in the tail: never filled
    assert sink_rows(x, np.arange(9)).tolist() == [0]
    assert sink_rows(x, np.arange(1, 9)).tolist() == []
    assert sink_rows(x, np.zeros(0, np.int64)).size == 0


@torch.inference_mode()
def test_kv_fill_runs_its_sink_rows_exact(monkeypatch):
    """With the kv fill (keys or values), the rows late.sink_rows names join the exact rows
    (here the ratio is set so that exactly the largest-norm filled row passes); other fills'
    plans are untouched."""
    from gpu.core import late

    model = tiny_model("llama", seed=3)
    ids = token_ids(N, seed=5)
    maps = interpolating_maps(model, ids)
    x_s = model(input_ids=ids, output_hidden_states=True).hidden_states[SPLIT][0]
    norms = x_s[: N - TAIL].norm(dim=-1)
    top = int(norms.argmax())
    monkeypatch.setattr(late, "SINK_RATIO", float(norms.max() / norms.median()) * 0.999)
    eng = Engine(model, maps)
    for fill, values in (("kv", None), ("identity", "kv")):
        pre = eng.prefill(ids, PrefillConfig(split=SPLIT, tail=TAIL, fill=fill, values_fill=values,
                                         rows="none"))
        assert pre.plan.exact_rows.tolist() == [top], (fill, values)
    assert eng.prefill(ids, PrefillConfig(split=SPLIT, tail=TAIL, fill="ridge",
                                      rows="none")).plan.exact_rows.size == 0


def test_kv_arms_are_keyed_apart_from_the_records_before_the_sink_rows():
    from gpu.lab.eval.instruments import Arm

    at = PrefillConfig(split=3, tail=1, rows="none")
    assert "sinks" in Arm("kv@3/t1", at.replace(fill="kv")).spec()
    assert "sinks" in Arm("i.kv@3/t1", at.replace(fill="identity", values_fill="kv")).spec()
    assert "sinks" not in Arm("ridge@3/t1", at.replace(fill="ridge")).spec()
