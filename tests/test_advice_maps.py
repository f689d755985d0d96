"""Advice that travels with the maps (gpu.maps.advice): what ``ridgefill advise --maps FILE``
writes (gpu.lab.tools.advise.with_maps: the advisor's map file of the recommended split and kind,
the recommendation beside it), and every entry point given FILE and no setting running that
configuration: RidgeFill.load, ``ridgefill generate``, ``prefill``, both presses and
``ridgefill serve``'s command. Oracle: the same entry points given the recommended
configuration explicitly (the caches equal bitwise)."""
from __future__ import annotations

import importlib.util
import logging

import numpy as np
import pytest
import torch

from gpu import cli
from gpu.api import RidgeFill
from gpu.core.config import PrefillConfig
from gpu.maps.advice import advice_path, read_advice
from gpu.maps.files import load_maps, save_maps
from gpu.press import RidgeFillPress, prefill
from gpu.lab.tools.advise import with_maps
from gpu_fixtures import load_tiny, token_ids

CONFIG = {"split": 2, "tail": 3, "fill": "kv", "values_fill": "identity", "rows": "none"}
REC = {"arm": "kv.identity-values@2/t3", "keeps_budget": True, "config": CONFIG,
       "flags": "--split 2 --tail 3 --fill kv --values-fill identity --rows none",
       "budget": {"retrieval": 5.0, "key": 0.5}, "vs_exact": {"estimate": 0.0},
       "dnll_key": {"estimate": 0.1}, "confirmation": None, "macs_share": 0.7,
       "mac_ceiling": 1.43}
ADVICE = {"model": "tiny", "command": "ridgefill advise --model tiny --maps m.safetensors",
          "seed": 0, "samples": 16, "documents": 4, "fresh_check": None, "calib": "builtin"}


def _kv_maps(tiny, path, seed=0):
    cfg = tiny.model.config
    d_out = 2 * cfg.num_key_value_heads * cfg.head_dim
    rng = np.random.default_rng(seed)
    maps = {l: (rng.normal(size=(d_out, cfg.hidden_size)) * 0.1, np.zeros(d_out))
            for l in range(CONFIG["split"] + 1, tiny.n_layers)}
    return save_maps(path, maps, {"split": CONFIG["split"], "kind": "kv", "d_in": cfg.hidden_size,
                                  "fingerprint": tiny.fingerprint(), "d_out": d_out})


@pytest.fixture
def advised_file(tmp_path):
    tiny = load_tiny("llama")
    src = _kv_maps(tiny, tmp_path / "advisor" / "kv.safetensors")
    out = tmp_path / "mine.safetensors"
    line = with_maps(out, REC, {CONFIG["split"]: {"kv": load_maps(src)}}, ADVICE,
                     tmp_path / "advice.json")
    assert out.read_bytes() == src.read_bytes() and str(advice_path(out)) in line
    return tiny, out


def test_the_file_carries_the_recommendation_and_its_evidence(advised_file):
    _, out = advised_file
    advice = read_advice(out)
    assert advice["config"] == CONFIG and advice["arm"] == REC["arm"]
    assert advice["vs_exact"] == REC["vs_exact"] and advice["command"] == ADVICE["command"]
    assert load_maps(out).advice == advice


def test_load_and_generate_run_the_advice_from_the_file_alone(advised_file, capsys, caplog):
    """The advice's one line is logged by the library (the ``ridgefill`` logger, never
    printed) and printed to stderr by the CLI, unless ``ridgefill --quiet``."""
    tiny, out = advised_file
    caplog.set_level(logging.INFO, logger="ridgefill")
    rf = RidgeFill.load(str(tiny.path), str(out), device="cpu")
    assert {k: getattr(rf.config, k) for k in CONFIG} == CONFIG
    assert "advised for these maps" in caplog.text
    assert "advised for these maps" not in capsys.readouterr().out
    assert RidgeFill.load(str(tiny.path), str(out), device="cpu", tail=5).config.tail == 5
    argv = ["generate", "--model", str(tiny.path), "--maps", str(out), "--prompt",
            "a b c d e f g h i j k l m n o p", "--max-new-tokens", "2"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr()
    assert "advised for these maps" in printed.err and "advised for" not in printed.out
    assert "keys kv, values identity, split 2, tail 3, rows none" in printed.err
    assert cli.main(["--quiet", *argv]) == 0
    printed = capsys.readouterr()
    assert "advised for" not in printed.err + printed.out
    assert "keys kv, values identity, split 2, tail 3, rows none" in printed.err  # the CLI's own


def test_prefill_and_the_presses_run_the_advice_of_the_maps_they_are_given(advised_file):
    tiny, out = advised_file
    maps = load_maps(out, tiny.model)
    ids = token_ids(40)
    got = prefill(tiny.model, ids, maps)
    want = prefill(tiny.model, ids, maps, PrefillConfig(**CONFIG))
    default = prefill(tiny.model, ids, None, PrefillConfig(fill="identity", split=2, tail=3,
                                                           rows="none"))
    for l in range(tiny.n_layers):
        assert torch.equal(got.layers[l].keys, want.layers[l].keys)
        assert torch.equal(got.layers[l].values, want.layers[l].values)
    assert not torch.equal(got.layers[3].keys, default.layers[3].keys)  # the kv map ran
    assert RidgeFillPress(maps).config == PrefillConfig(**CONFIG)
    if importlib.util.find_spec("kvpress") is not None:
        from gpu.kvpress_press import RidgeFillKVPress
        assert RidgeFillKVPress(maps).config == PrefillConfig(**CONFIG)


def test_serve_runs_the_advice(advised_file):
    from gpu.serving import serve

    tiny, out = advised_file
    _, summary = serve.command(str(tiny.path), maps=str(out))
    assert "keys kv / values identity, split 2, tail 3, rows none" in summary


def test_other_maps_are_never_overwritten_and_what_reads_no_maps_writes_nothing(advised_file,
                                                                                 tmp_path):
    tiny, out = advised_file
    other = _kv_maps(tiny, tmp_path / "other.safetensors", seed=1)
    with pytest.raises(ValueError, match="already holds other maps"):
        with_maps(out, REC, {CONFIG["split"]: {"kv": load_maps(other)}}, ADVICE,
                  tmp_path / "advice.json")
    identity = {**REC, "config": {**CONFIG, "fill": "identity", "values_fill": None}}
    fresh = tmp_path / "none.safetensors"
    line = with_maps(fresh, identity, {}, ADVICE, tmp_path / "advice.json")
    assert "reads no maps" in line and not fresh.exists() and not advice_path(fresh).exists()
    exact = {"arm": "exact", "keeps_budget": False}
    assert "exact prefill" in with_maps(fresh, exact, {}, ADVICE, tmp_path / "a.json")


def test_maps_of_a_builtin_model_run_its_committed_advice_only_where_they_fit(tmp_path,
                                                                              monkeypatch):
    from gpu.core import advised
    from gpu.press import maps_config

    tiny = load_tiny("llama")
    path = _kv_maps(tiny, tmp_path / "kv.safetensors")
    maps = load_maps(path, tiny.model)
    assert maps_config(maps) == PrefillConfig()  # no advice beside them, not a built-in
    meta = {**maps.meta, "model": tiny.name}
    monkeypatch.setattr(maps, "meta", meta)
    monkeypatch.setitem(advised.ADVISED, tiny.name, CONFIG)
    assert maps_config(maps) == maps_config({"kv": maps}) == PrefillConfig(**CONFIG)
    monkeypatch.setitem(advised.ADVISED, tiny.name, {**CONFIG, "split": 3})  # another split
    assert maps_config(maps) == PrefillConfig()
    monkeypatch.setitem(advised.ADVISED, tiny.name, {**CONFIG, "fill": "ridge"})  # another kind
    assert maps_config(maps) == PrefillConfig()
    monkeypatch.setitem(advised.ADVISED, tiny.name, {"fill": "exact"})
    assert maps_config(maps) == PrefillConfig()
