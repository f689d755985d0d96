"""The product core (issue 18): one PrefillConfig behind the CLI, and a clear error (or a
correct result) for each input that used to give a silent wrong answer. Oracles: the stock
transformers forward, the dataclass's own fields, and the error the issue names."""
from __future__ import annotations

import argparse
from pathlib import Path
from dataclasses import fields

import numpy as np
import pytest
import torch

from gpu import cli
from gpu.api import RidgeFill
from gpu.core import models
from gpu.core.config import PrefillConfig
from gpu.core.engine import Engine
from gpu.core.extras import Extras
from gpu.core.late import every_row_exact
from gpu.core.plan import Plan
from gpu.maps.files import load_maps, save_maps
from gpu_fixtures import (run_plan, HIDDEN, LAYERS, byte_tokenizer, random_maps, tiny_config,
                          tiny_dir, token_ids)

S, T = 1, 8


def _generate_parser() -> argparse.ArgumentParser:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["generate"]


# ----------------------------------------------------------------------------- CLI parity
def test_every_config_field_is_a_cli_flag_with_the_same_default():
    """Each field has its flag, choices and (in the help) its default; a flag left out stays
    out of the namespace, so the model's defaults (gpu.core.advised) fill it."""
    actions = {a.dest: a for a in _generate_parser()._actions}
    for f in fields(PrefillConfig):
        assert f.name in actions, f"PrefillConfig.{f.name} has no CLI flag"
        a = actions[f.name]
        assert cli.flag(f.name) in a.option_strings
        assert a.default is argparse.SUPPRESS, f.name
        if f.default is not None and not isinstance(f.default, (bool, tuple)):
            assert f"(default {f.default}" in a.help, (f.name, a.help)
        assert tuple(a.choices or ()) == tuple(f.metadata.get("choices", ())), f.name


def test_advise_flags_are_advise_options():
    """``ridgefill advise``'s flags are AdviseOptions' fields: no flag given is the dataclass's
    defaults, every field is reachable by its flag, a bad budget key is refused by name."""
    from dataclasses import replace as dc_replace

    from gpu.lab.tools.advise_options import AdviseOptions

    parser = cli.build_parser()
    bare = parser.parse_args(["advise"])
    assert cli.options_from_args(bare, AdviseOptions) == AdviseOptions()
    want = dc_replace(AdviseOptions(), lengths=(512,), budget=(("retrieval", 3),), tails=(1,),
                      samples=2, docs=3, calib="c", seed=4, out_dir=Path("o"), timing_units=0,
                      confirm_samples=5, confirm_docs=6, confirm_tries=7, check=False,
                      check_seed=8, check_samples=9, check_docs=10)
    argv = ["advise", "--lengths", "512", "--budget", "retrieval=3", "--tails", "1",
            "--samples", "2", "--docs", "3", "--calib", "c", "--seed", "4", "--out-dir", "o",
            "--timing-units", "0", "--confirm-samples", "5", "--confirm-docs", "6",
            "--confirm-tries", "7", "--no-check", "--check-seed", "8", "--check-samples", "9",
            "--check-docs", "10"]
    assert cli.options_from_args(parser.parse_args(argv), AdviseOptions) == want
    assert {f.name for f in fields(AdviseOptions)} == {
        a.dest for a in parser._subparsers._group_actions[0].choices["advise"]._actions
        if a.dest not in ("help", "model", "device", "dtype", "threads", "quiet")}
    with pytest.raises(ValueError, match="retrieval=POINTS"):
        AdviseOptions(budget=(("speed", 2.0),))


def test_bench_flags_are_bench_options():
    """``ridgefill bench``'s flags are BenchOptions' fields, with its defaults; the flags the
    Makefile's bench targets use still parse."""
    from gpu.lab.tools.bench_options import BenchOptions

    parser = cli.build_parser()
    assert cli.options_from_args(parser.parse_args(["bench"]), BenchOptions) == BenchOptions()
    a = parser.parse_args(["bench", "--models", "qwen2.5-coder-1.5b", "--lengths", "2048", "4096",
                           "--repeats", "2", "--no-rows-probe", "--no-other-order", "--resume",
                           "--out-dir", "results/bench/large", "--kernels", "--random-weights",
                           "--compile", "--split", "3", "--tail", "4", "--device", "cpu"])
    assert cli.options_from_args(a, BenchOptions) == BenchOptions(
        models=("qwen2.5-coder-1.5b",), lengths=(2048, 4096), repeats=2, rows_probe=False,
        other_order=False, resume=True, out_dir=Path("results/bench/large"), kernels=True,
        random_weights=True, compile=True, split=3, tail=4, device="cpu")


@pytest.mark.parametrize("what", ["study", "mini", "frontier"])
def test_eval_flags_are_eval_options(what):
    """``ridgefill eval study|mini|frontier``'s flags are the fields of its options dataclass:
    no flag is the dataclass's defaults, every field is reachable by its flag (a changed value
    of each comes back), and the Makefile's frontier flags parse."""
    from gpu.lab.eval.options import FrontierOptions, MiniOptions, StudyOptions

    cls = {"study": StudyOptions, "mini": MiniOptions, "frontier": FrontierOptions}[what]
    parser = cli.build_parser()
    assert cli.options_from_args(parser.parse_args(["eval", what]), cls) == cls()
    sub = parser._subparsers._group_actions[0].choices["eval"]._subparsers._group_actions[0]
    assert {f.name for f in fields(cls)} == {a.dest for a in sub.choices[what]._actions
                                             if a.dest not in ("help", "threads", "quiet")}
    given = {"models": ("m",), "out_dir": Path("o"), "device": "cpu", "samples": 3, "docs": 2,
             "lengths": (512,), "tasks": ("niah_single_1",), "loss_length": 256,
             "continuation": 5, "instruments": ("needle",), "seed": 7, "tails": (1, 96),
             "fills": ("kv",), "cut": ("x*",), "keep": ("y*",), "checks": (0.25,),
             "timing_units": 0, "suite": "ruler", "maps_from": Path("p"), "tiered": True,
             "tiered_fills": ("kv.identity", "none")}
    argv = ["eval", what]
    for f in fields(cls):
        v = given[f.name]
        if isinstance(v, bool):  # --tiered / --no-tiered
            argv.append(cli.flag(f.name) if v else "--no-" + cli.flag(f.name)[2:])
            continue
        argv += [cli.flag(f.name), *map(str, v if isinstance(v, tuple) else (v,))]
    want = cls(**{f.name: given[f.name] for f in fields(cls)})
    assert cli.options_from_args(parser.parse_args(argv), cls) == want


def test_cli_without_prefill_flags_is_the_default_config():
    a = cli.build_parser().parse_args(["generate", "--prompt", "x"])
    assert cli.settings_from_args(a) == {}
    assert PrefillConfig(**cli.settings_from_args(a)) == PrefillConfig()
    base = PrefillConfig(tail=64, rows="none")
    b = cli.build_parser().parse_args(["generate", "--prompt", "x", "--tail", "512"])
    assert cli.settings_from_args(b) == {"tail": 512}  # given, even at the library default
    assert base.replace(**cli.settings_from_args(b)) == PrefillConfig(tail=512, rows="none")


def test_cli_flags_reach_every_field():
    a = cli.build_parser().parse_args([
        "generate", "--prompt", "x", "--split", "3", "--tail", "7", "--fill", "none",
        "--rows", "random", "--selector-options", "count=5", "seed=2", "--rescale", "keys",
        "--rescale-rows", "9", "--correction", "--precision", "int8", "--stream-maps",
        "--no-skip-unread"])
    assert PrefillConfig(**cli.settings_from_args(a)) == PrefillConfig(
        split=3, tail=7, fill="none", rows="random", selector_options={"count": 5, "seed": 2},
        rescale="keys", rescale_rows=9, correction=True, precision="int8", stream_maps=True,
        skip_unread=False)


def test_library_errors_name_parameters_and_the_cli_names_flags(capsys):
    with pytest.raises(ValueError, match=r"tail=0 must be at least 1"):
        PrefillConfig(tail=0)
    rc = cli.main(["generate", "--model", str(tiny_dir("llama", 0)), "--device", "cpu",
                   "--prompt", "abc", "--fill", "identity", "--split", "1", "--tail", "0"])
    assert rc == 2 and "--tail 0 must be at least 1" in capsys.readouterr().err


@pytest.mark.parametrize("bad, match", [
    (dict(fill="fast"), "fill='fast': choose one of"),
    (dict(rows="best"), "rows='best': choose one of"),
    (dict(split=0), "split=0 must be a layer index"),
    (dict(rescale="both"), "rescale='both'"),
    (dict(precision="fp8"), "precision='fp8'"),
    (dict(selector_options=[1, 2]), "selector_options"),
])
def test_config_refuses_bad_values(bad, match):
    with pytest.raises(ValueError, match=match):
        PrefillConfig(**bad)


# ----------------------------------------------------------------------------- guards
@pytest.fixture(scope="module")
def llama():
    from gpu_fixtures import tiny_model
    return tiny_model("llama", seed=0)


@pytest.mark.parametrize("extras,rows,match", [
    (dict(exact_rows=np.array([30])), "none", r"exact_rows must lie in the prefix 0\.\.11"),
    (dict(exact_rows=np.array([3])), "random", "exact_rows fixes the exact rows"),
    (dict(splice="keys"), "none", "needs one of .* and an exact_cache"),
    (dict(exact_rows=np.array([3]), selector=object()), "none", "either exact_rows or a selector"),
])
def test_extras_are_checked(llama, extras, rows, match):
    cfg = PrefillConfig(split=S, tail=T, fill="identity", rows=rows,
                        selector_options={"count": 2} if rows == "random" else {})
    with pytest.raises(ValueError, match=match):
        Engine(llama).prefill(token_ids(20), cfg, Extras(**extras))


@pytest.mark.parametrize("fill", ["exact", "identity"])
def test_batch_of_more_than_one_is_refused(llama, fill):
    ids = torch.cat([token_ids(20, 0), token_ids(20, 1)])
    with pytest.raises(ValueError, match=r"shape \(1, n\).*got \(2, 20\)"):
        Engine(llama).prefill(ids, PrefillConfig(split=S, tail=T, fill=fill, rows="none"))


def test_random_rows_need_a_count_and_select_exactly_it(llama):
    with pytest.raises(ValueError, match="count"):
        PrefillConfig(rows="random")
    ids = token_ids(40)
    pre = Engine(llama).prefill(ids, PrefillConfig(split=S, tail=T, fill="identity", rows="random",
                                               selector_options={"count": 5, "seed": 1}))
    assert pre.plan.exact_rows.size == 5


def test_text_selector_without_text_is_an_error(llama):
    with pytest.raises(ValueError, match="reads the prompt's text, but only ids were given"):
        Engine(llama).prefill(token_ids(40), PrefillConfig(split=S, tail=T, fill="identity"))


def test_attention_rows_without_a_global_lower_layer_is_an_error():
    from gpu.api import RidgeFill as RF
    from gpu_fixtures import tiny_model

    # tiny gemma3: layers 0, 1 slide, layer 2 is global; split 2 leaves no global layer below
    model = tiny_model("gemma3", seed=0)
    loaded = models.Loaded(model, byte_tokenizer(), "tiny-gemma3", tiny_dir("llama", 0))
    rf = RF(loaded, None, split=2, tail=T, fill="identity", rows="attention")
    with pytest.raises(ValueError, match="no global attention layer lies below split 2"):
        rf.generate("abcdefghij" * 6, max_new_tokens=1)


def test_probe_with_no_fill_needs_maps(llama):
    with pytest.raises(ValueError, match="rows='probe'.*pass maps"):
        Engine(llama).prefill(token_ids(40), PrefillConfig(split=S, tail=T, fill="none", rows="probe"))


def test_maps_missing_a_late_layer_are_refused_at_load(tmp_path, llama):
    maps = random_maps(S, seed=3)
    del maps[LAYERS - 1]
    path = save_maps(tmp_path / "m.safetensors", maps,
                     {"split": S, "fingerprint": models.fingerprint(llama), "d_in": HIDDEN,
                      "d_out": HIDDEN})
    with pytest.raises(ValueError, match=f"no map for late layers \\[{LAYERS - 1}\\]"):
        load_maps(path, llama)


def test_max_new_tokens_zero_is_a_clear_error(capsys):
    rc = cli.main(["generate", "--model", str(tiny_dir("llama", 0)), "--device", "cpu",
                   "--prompt", "abc", "--fill", "exact", "--max-new-tokens", "0"])
    err = capsys.readouterr().err
    assert rc == 2 and "max_new_tokens=0: generate at least one token" in err


def test_offline_fit_is_a_clear_error(capsys, monkeypatch, tmp_path):
    from gpu.data import corpus

    def offline(*a, **k):
        raise corpus.FetchError("cannot reach the package registry; pass --calib FOLDER")

    monkeypatch.setattr(corpus, "calibration_set", offline)
    rc = cli.main(["fit", "--model", str(tiny_dir("llama", 0)), "--device", "cpu",
                   "--splits", "1", "--out", str(tmp_path / "m.safetensors")])
    assert rc == 2 and "cannot reach the package registry" in capsys.readouterr().err


def test_mistral_sliding_window_without_layer_types_matches_stock():
    from transformers import AutoModelForCausalLM, MistralConfig

    from gpu_fixtures import _randomize

    cfg = tiny_config("llama")
    mcfg = MistralConfig(**{k: getattr(cfg, k) for k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
        "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id")}, sliding_window=6)
    assert getattr(mcfg, "layer_types", None) is None
    torch.manual_seed(0)
    model = _randomize(AutoModelForCausalLM.from_config(mcfg, dtype=torch.float32), 0).eval()
    ids = token_ids(30)
    eng = Engine(model)
    assert eng.adapter.layer_info(2).window == 6
    from transformers import DynamicCache
    with torch.inference_mode():
        stock = model(input_ids=ids).logits[0]
        cache = DynamicCache(config=model.config)
        x, _ = eng.lower(ids, S, cache)
        ours = eng.adapter.logits(every_row_exact(eng.adapter, S, x, cache))[0]
    torch.testing.assert_close(ours, stock, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- dtypes
def test_fingerprint_ignores_load_dtype_but_not_weights(llama):
    import copy

    half = copy.deepcopy(llama).to(torch.bfloat16)
    assert models.fingerprint(half) == models.fingerprint(llama)
    tuned = copy.deepcopy(llama)
    with torch.no_grad():
        tuned.model.layers[-1].mlp.down_proj.weight.mul_(1.5)  # a fine-tune of the last layer
    assert models.fingerprint(tuned) != models.fingerprint(llama)


@pytest.mark.parametrize("fit_dtype, run_dtype", [(torch.bfloat16, torch.float32),
                                                   (torch.float32, torch.bfloat16)])
def test_maps_fitted_at_one_dtype_run_at_the_other(tmp_path, fit_dtype, run_dtype):
    from gpu.maps.fit import FitOptions, fit
    from gpu_fixtures import calib_dir

    fitted = models.load(str(tiny_dir("llama", 0)), device="cpu", dtype=fit_dtype)
    out = tmp_path / "maps.safetensors"
    fit(fitted, FitOptions([S], out, str(calib_dir(3, 400)), (0.01,), doc_tokens=100),
        progress=False)
    rf = RidgeFill.load(str(tiny_dir("llama", 0)), str(out), device="cpu", dtype=run_dtype,
                        tail=T, rows="none")
    assert rf.maps.dtype == run_dtype
    r = rf.generate("abcdefghij" * 5, max_new_tokens=3)
    assert r.new_tokens == 3 and r.filled > 0
