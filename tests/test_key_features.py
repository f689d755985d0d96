"""The key-feature study (gpu.lab.tools.key_features) on a tiny random llama.

Oracles: the shifted and causal-mean features against direct loops; the study's ``x`` feature
set against the product's own kv maps (``gpu.maps.fit.fit`` with ``kinds=("kv",)`` at the same
lambda on the same documents: the study's baseline is the shipped kind, not a re-derivation);
the attention read error against its definition (zero for exact entries, zero when only a
sink row the engine keeps exact is wrong, positive otherwise).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from gpu.core.engine import Engine
from gpu.lab.tools import key_features as kf
from gpu.maps.files import load_maps
from gpu.maps.fit import FitOptions, capture, documents, fit
from gpu_fixtures import calib_dir, load_tiny, scratch, tiny_dir, token_ids
from rfmath.ridge import solve

S, LAM, DOC_TOKENS = 2, 0.01, 200

rows = arrays(np.float32, st.tuples(st.integers(1, 12), st.integers(1, 4)),
              elements=st.floats(-100, 100, width=32))


@settings(max_examples=40, deadline=None)
@given(rows, st.integers(0, 4))
def test_shifted_moves_rows_down(x, k):
    got = kf.shifted(x, k)
    assert got.shape == x.shape
    for t in range(x.shape[0]):
        np.testing.assert_array_equal(got[t], x[t - k] if t >= k else 0)


def test_sink_rows_feed_no_neighbour():
    x = np.ones((6, 3), np.float32)
    x[0] *= 50                                    # an attention sink: 50x the median norm
    assert (kf.ordinary(x)[0] == 0).all() and (kf.ordinary(x)[1:] == 1).all()
    xs = {2: x, 1: x}
    prev = kf.features("x+prev", xs, 2)
    np.testing.assert_array_equal(prev[:, :3], x)  # the row's own x_S stays whole
    assert (prev[1, 3:] == 0).all() and (prev[2, 3:] == 1).all()


def test_prev_features_recover_a_previous_row_map():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 4)).astype(np.float32)
    W = rng.normal(size=(3, 4))
    y = kf.shifted(x, 1) @ W.T                    # the target reads only the previous row
    f = kf.features("x+prev", {2: x, 1: x}, 2)
    A, _ = solve(f, y, 1e-8)
    np.testing.assert_allclose(A[:, 4:], W, atol=1e-4)
    np.testing.assert_allclose(A[:, :4], 0, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(rows, st.integers(1, 5))
def test_causal_mean_is_the_mean_of_the_last_rows(x, window):
    got = kf.causal_mean(x, window)
    for t in range(x.shape[0]):
        want = x[max(t - window + 1, 0):t + 1].astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(got[t], want, rtol=1e-5, atol=1e-4)


def test_feature_sets_stack_their_sources():
    xs = {l: np.random.default_rng(l).normal(size=(5, 3)).astype(np.float32) for l in range(6)}
    assert kf.features("x", xs, 4) is xs[4]
    np.testing.assert_array_equal(kf.features("x+lower", xs, 4), np.hstack([xs[4], xs[2]]))
    np.testing.assert_array_equal(kf.features("x+prev2", xs, 4)[3],
                                  np.concatenate([xs[4][3], xs[4][2], xs[4][1]]))
    with pytest.raises(ValueError, match=r"x\+prev"):
        kf.features("x+next", xs, 4)


def test_x_features_give_the_fitted_kv_maps():
    calib = calib_dir(n_docs=4, chars=900)
    loaded = load_tiny("llama", 0)
    out = scratch("kf") / "m.safetensors"
    opts = FitOptions([S], out, str(calib), (LAM,), max_tokens=100_000, doc_tokens=DOC_TOKENS,
                      kinds=("kv",))
    fit(loaded, opts, progress=False)
    shipped = load_maps(out)
    engine = Engine(loaded.model)
    fit_docs, _ = documents(opts)
    moments = kf.accumulate(engine, loaded.tokenizer, fit_docs, S, ["x"], 100_000,
                            doc_tokens=DOC_TOKENS, progress=False)
    mine = kf.entry_maps(engine, moments["x"], LAM)
    assert sorted(mine) == shipped.layers
    for l, (A, b) in mine.items():
        A_f, b_f = shipped.matrix(l)
        np.testing.assert_allclose(A_f.numpy(), A, rtol=2 ** -7, atol=2 ** -7 * np.abs(A).max())
        np.testing.assert_allclose(b_f.numpy(), b, rtol=1e-4, atol=1e-5 * np.abs(b).max())


def exact_entries(engine: Engine, layer: int, x: torch.Tensor) -> torch.Tensor:
    """(1, n, 2 m) the layer's own key and value projections of its normed input."""
    attn, normed = engine.adapter.attn(layer), engine.adapter.input_norm(layer)(x)
    return torch.cat([attn.k_proj(normed), attn.v_proj(normed)], dim=-1)


def test_read_error_is_zero_for_exact_entries_and_sinks_stay_exact():
    loaded = load_tiny("llama", 0)
    engine = Engine(loaded.model)
    n, layer = 96, S + 1
    with torch.inference_mode():
        xs = capture(engine, token_ids(n, seed=3), S)
        x_true, x_split = torch.from_numpy(xs[layer])[None], torch.from_numpy(xs[S])[None].clone()
        exact = exact_entries(engine, layer, x_true)
        both, keys = kf.read_errors(engine, layer, exact, x_true, x_split)
        assert both < 1e-5 and keys < 1e-5
        wrong = exact.clone()
        wrong[:, 0] += 5.0                      # row 0 wrong ...
        assert min(kf.read_errors(engine, layer, wrong, x_true, x_split)) > 1e-4
        x_split[:, 0] *= 100.0                  # ... but a sink (kept exact by a kv fill)
        both, keys = kf.read_errors(engine, layer, wrong, x_true, x_split)
        assert both < 1e-5 and keys < 1e-5
        m = kf.QUERIES
        before = exact.clone()
        before[:, n - m - 1] += 5.0             # the last predicted row counts ...
        assert min(kf.read_errors(engine, layer, before, x_true, x_split)) > 1e-4
        tail = exact.clone()
        tail[:, n - m:] += 5.0                  # ... the exact rows' own predictions do not
        assert max(kf.read_errors(engine, layer, tail, x_true, x_split)) < 1e-5
        assert min(kf.read_errors(engine, layer, wrong, x_true, x_split, keep_sinks=False)) > 1e-4
        wrong_values = exact.clone()
        wrong_values[:, 1:, exact.shape[-1] // 2:] += 5.0   # values wrong, keys exact
        both, keys = kf.read_errors(engine, layer, wrong_values, x_true, x_split)
        assert both > 1e-4 and keys < 1e-5


def test_identity_row_writes_what_pops_fill_writes():
    loaded = load_tiny("llama", 0)
    engine, n, layer = Engine(loaded.model), 40, S + 1
    ad = engine.adapter
    with torch.inference_mode():
        x_split = torch.from_numpy(capture(engine, token_ids(n, seed=5), S)[S])[None]
        cos, sin = ad.rope(x_split, torch.arange(n)[None], layer)
        got = ad.project_entries(layer, kf.pop_entries(engine, layer, x_split), cos, sin)
        # what gpu.core.late.source_entries writes for the identity fill
        want = ad.keys_values(layer, ad.input_norm(layer)(x_split), cos, sin)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


def test_a_rerun_adds_to_a_record_of_the_same_setup(tmp_path):
    setup = {"model": "m", "fit_tokens": 10, "lambdas": [0.1]}
    path = tmp_path / "key_features.json"
    assert kf.merged(path, setup) == {"commands": [], **setup, "splits": {}}
    path.write_text(json.dumps({"commands": ["a"], **setup, "splits": {"8": {"x": {}}}}))
    assert kf.merged(path, setup)["splits"] == {"8": {"x": {}}}
    assert kf.merged(path, {**setup, "fit_tokens": 20})["splits"] == {}


def test_the_command_writes_every_set_and_layer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)      # no --out: the record goes under the model's own name
    kf.main(["--model", str(tiny_dir("llama", 0)), "--splits", "2", "--features", "x", "x+prev",
             "identity", "--fit-tokens", "400", "--tokens", "96", "--heldout-docs", "2"])
    (out, *others) = (tmp_path / "results" / "key_features").iterdir()
    assert not others
    rec = json.loads((out / "key_features.json").read_text())
    assert rec["model"] == out.name
    assert set(rec["splits"]["2"]) == {"x", "x+prev", "identity"}
    for r in rec["splits"]["2"].values():
        assert sorted(r["layers"], key=int) == ["3"]           # the late layers above split 2
        m = r["layers"]["3"]
        assert -1 <= m["key_cosine"] <= 1 and m["read_error"] >= 0
    assert (out / "key_features.png").stat().st_size > 0
    assert (out / "key_features.md").read_text().count("| 2 |") == 3
