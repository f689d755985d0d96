"""The built-in models' defaults (gpu.core.advised) against the advisor's committed output, and
where they apply: RidgeFill.load / the constructor, ``ridgefill generate`` and ``ridgefill
fit``. Oracle for the table: gpu.lab.tools.advise.recommend run again on the committed frontier
(results/advise/<model>/advice.json)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu import cli
from gpu.api import RidgeFill
from gpu.core import advised, models
from gpu.core.config import PrefillConfig
from gpu.lab.tools.advise import BUDGET, recommend
from gpu_fixtures import DenseMaps, load_tiny, random_maps

RESULTS = Path(__file__).resolve().parents[1] / "results" / "advise"


def _maps(loaded, split: int):
    d = loaded.model.config.hidden_size
    return DenseMaps(split, random_maps(split, n_layers=loaded.n_layers, d=d, seed=1))


def _advice(model: str) -> dict:
    return json.loads((RESULTS / model / "advice.json").read_text())


def test_every_committed_advice_of_a_builtin_model_is_its_default():
    committed = {p.parent.name for p in RESULTS.glob("*/advice.json")} & set(models.BUILTINS)
    assert committed == set(advised.ADVISED) != set()


@pytest.mark.parametrize("model", sorted(advised.ADVISED))
def test_the_table_is_the_rule_applied_to_the_committed_frontier(model):
    advice = _advice(model)
    assert advice["model"] == model and advice["complete"]
    rec = advice["recommendation"]
    assert rec["budget"] == BUDGET  # the advisor's default budget, as the module states
    confirmed = (None if advice.get("confirmations") is None else
                 {c["arm"]: c for c in advice["confirmations"]})
    again = recommend({"rows": advice["frontier"]}, BUDGET, confirmed)
    assert again["arm"] == rec["arm"]
    expected = ({"fill": "exact"} if not again["keeps_budget"] else
                {k: v for k, v in again["config"].items() if k in advised.ADVISABLE})
    assert advised.ADVISED[model] == expected
    if again["keeps_budget"]:  # the promise was checked on samples the advisor never saw
        assert advice["fresh_check"]["arm"] == rec["arm"]


def test_defaults_apply_under_what_the_caller_gives(monkeypatch):
    tiny = load_tiny("llama")
    monkeypatch.setitem(advised.ADVISED, tiny.name, {"split": 2, "tail": 7, "fill": "identity",
                                                     "rows": "none"})
    rf = RidgeFill(tiny)
    assert (rf.config.split, rf.config.tail, rf.config.fill, rf.config.rows) == (2, 7, "identity",
                                                                                 "none")
    assert RidgeFill(tiny, tail=3).config.tail == 3 and RidgeFill(tiny, tail=3).config.split == 2
    explicit = PrefillConfig(split=1, fill="identity")
    assert RidgeFill(tiny, config=explicit).config == explicit  # a whole config is taken as is
    assert advised.default_split(tiny.name, tiny.n_layers) == 2
    # the advised bundle keeps its split for a ridge fill too: maps fitted at another split
    # are refused by name (fit at the advised split, or pass split=)
    monkeypatch.setitem(advised.ADVISED, tiny.name, {"split": 2, "tail": 7, "fill": "ridge"})
    assert advised.default_config(tiny.name) == PrefillConfig(split=2, tail=7, fill="ridge")
    with pytest.raises(ValueError, match="maps were fitted for split 1, the configuration asks "
                                         "for split 2"):
        RidgeFill(tiny, _maps(tiny, split=1))
    assert RidgeFill(tiny, _maps(tiny, split=1), split=1).config.tail == 7


def test_unlisted_models_get_the_library_defaults():
    assert advised.default_config("some/local-folder") == PrefillConfig()
    assert advised.default_split("some/local-folder", 30) == 11  # 3/8 of depth (paper 2.1)
    assert advised.default_split("some/local-folder", 2) == 1


def test_generate_applies_only_the_flags_given(monkeypatch, capsys):
    tiny = load_tiny("llama")
    seen = {}

    def fake_generate(self, body, question="", **kw):
        seen["config"] = self.config
        raise SystemExit(0)

    monkeypatch.setitem(advised.ADVISED, tiny.name, {"split": 2, "tail": 7, "fill": "identity",
                                                     "rows": "none"})
    monkeypatch.setattr(RidgeFill, "generate", fake_generate)
    with pytest.raises(SystemExit):
        cli.main(["generate", "--model", str(tiny.path), "--device", "cpu", "--prompt", "abc",
                  "--tail", "5"])
    assert seen["config"] == PrefillConfig(split=2, tail=5, fill="identity", rows="none")


@pytest.mark.parametrize("model", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_a_fill_flag_alone_takes_its_values_from_the_same_fill(model, monkeypatch, capsys):
    """A built-in advised a two-source fill (keys and values from different fills): a caller's
    ``fill`` without ``values_fill`` runs that fill for both (``--fill exact`` is exact
    prefill, not the error a values source without filled keys is); a ``values_fill`` given
    with it, or alone on the advised keys, is kept."""
    tiny = load_tiny("llama")
    entry = advised.ADVISED[model] | {"split": 2}        # the tiny model has 4 layers
    assert entry["values_fill"] not in (None, entry["fill"])
    monkeypatch.setitem(advised.ADVISED, tiny.name, entry)
    for fill in ("exact", "ridge", "identity", "kv"):
        c = advised.default_config(tiny.name, fill=fill)
        assert (c.fill, c.values_fill, c.split, c.tail) == (fill, None, 2, 1)
    assert advised.default_config(tiny.name, fill="ridge", values_fill="identity").values_fill \
        == "identity"
    assert advised.default_config(tiny.name, values_fill="ridge").fill == entry["fill"]
    assert RidgeFill(tiny, fill="exact").config.fill == "exact"
    seen = {}

    def fake_generate(self, body, question="", **kw):
        seen["config"] = self.config
        raise SystemExit(0)

    monkeypatch.setattr(RidgeFill, "generate", fake_generate)
    with pytest.raises(SystemExit):
        cli.main(["generate", "--model", str(tiny.path), "--device", "cpu", "--prompt", "abc",
                  "--fill", "exact"])
    assert (seen["config"].fill, seen["config"].values_fill) == ("exact", None)


def test_an_exact_advice_refuses_maps_by_name_and_the_demo_says_what_it_shows(monkeypatch):
    """Where the advisor advises exact prefill, maps given without fill='ridge' would be
    ignored: they are refused with the fix; the demo shows the ridge fill at POP native's
    split and says the advice is exact."""
    from gpu.core.config import pop_split
    from gpu.lab.tools.demo import showcase

    tiny = load_tiny("llama")
    monkeypatch.setitem(advised.ADVISED, tiny.name, {"fill": "exact"})
    assert RidgeFill(tiny).config.fill == "exact"
    maps = _maps(tiny, split=1)
    with pytest.raises(ValueError, match="maps were given, but the configuration of .* is "
                                         "exact prefill.*pass fill='ridge'"):
        RidgeFill(tiny, maps)
    assert RidgeFill(tiny, maps, fill="ridge").config.split == 1  # the maps' split
    split, cfg, note = showcase(tiny)
    assert split == pop_split(tiny.n_layers) and cfg == PrefillConfig(split=split, tail=1,
                                                                      fill="ridge", rows="none")
    assert "advises exact prefill" in note
    monkeypatch.setitem(advised.ADVISED, tiny.name, {"split": 2, "tail": 7, "fill": "identity",
                                                     "rows": "none"})
    assert showcase(tiny) == (2, advised.default_config(tiny.name), "")


def test_the_demo_fits_the_kind_of_maps_its_configuration_reads(monkeypatch, tmp_path, caplog,
                                                              capsys):
    """An advised kv (or anchored) fill makes the demo fit maps of that kind (in this process,
    a call into gpu.maps.fit on the model already loaded), cached under a name that says the
    kind (the ridge maps keep their old name); what it does is logged, nothing printed."""
    from gpu.core import models
    from gpu.maps import cached

    calls = []
    caplog.set_level("INFO", logger="ridgefill")
    monkeypatch.setattr(models, "cache_dir", lambda: tmp_path)
    monkeypatch.setattr(cached, "fit", lambda loaded, opts: calls.append((loaded, opts)))
    tiny = load_tiny("llama")
    kv = cached.cached_maps(tiny.name, 2, "kv", loaded=tiny)
    assert kv.name == f"{tiny.name}-s2-kv.safetensors"
    assert cached.cached_maps(tiny.name, 2, loaded=tiny).name == f"{tiny.name}-s2.safetensors"
    assert [(o.kinds, o.splits, o.out.name) for _, o in calls] == [
        (("kv",), (2,), kv.name), (("ridge",), (2,), f"{tiny.name}-s2.safetensors")]
    assert all(loaded is tiny for loaded, _ in calls)
    assert "maps: fitting kv maps for" in caplog.text and capsys.readouterr().out == ""


def test_the_demo_runs_a_built_in_whose_advice_is_a_confirmed_fill():
    """`ridgefill demo` (and `make demo`) default to DEMO_MODEL, whose advised configuration
    reads maps (a fill the advisor confirmed, not exact prefill or POP's identity fill), and the
    demo shows that configuration unchanged (issue 31)."""
    from gpu.core.models import BUILTINS

    assert advised.DEMO_MODEL in BUILTINS
    assert cli.build_parser().parse_args(["demo"]).model == advised.DEMO_MODEL
    assert advised.default_config(advised.DEMO_MODEL).needs_maps


def test_a_builtin_without_maps_runs_its_advice_from_the_cached_maps(monkeypatch, tmp_path,
                                                                       capsys):
    """RidgeFill.load of a built-in whose advice reads maps, given none: the cached maps of
    the advised kind and split (gpu.maps.cached.cached_maps finds or fits them), loaded and
    checked; ``ridgefill generate`` names the configuration it runs."""
    import numpy as np

    import gpu.api
    from gpu.maps.files import save_maps

    tiny = load_tiny("llama")
    cfg = tiny.model.config
    d_out = 2 * cfg.num_key_value_heads * cfg.head_dim
    rng = np.random.default_rng(0)
    path = save_maps(tmp_path / "kv.safetensors",
                     {3: (rng.normal(size=(d_out, cfg.hidden_size)) * 0.1, np.zeros(d_out))},
                     {"split": 2, "kind": "kv", "fingerprint": tiny.fingerprint(),
                      "d_in": cfg.hidden_size, "d_out": d_out})
    asked = []
    monkeypatch.setitem(models.BUILTINS, tiny.name, None)
    monkeypatch.setitem(advised.ADVISED, tiny.name, {"split": 2, "tail": 1, "fill": "kv",
                                                     "values_fill": "identity", "rows": "none"})
    monkeypatch.setattr(gpu.api, "cached_maps",
                        lambda name, split, kind, loaded: asked.append(
                            (name, split, kind)) or path)
    monkeypatch.setattr(models, "resolve", lambda name: (tiny.name, tiny.path))
    rf = RidgeFill.load(tiny.name, device="cpu")
    assert asked == [(tiny.name, 2, "kv")]
    assert (rf.config.fill, rf.config.values_fill, rf.maps.kind) == ("kv", "identity", "kv")

    def fake_generate(self, body, question="", **kw):
        raise SystemExit(0)

    monkeypatch.setattr(RidgeFill, "generate", fake_generate)
    with pytest.raises(SystemExit):
        cli.main(["generate", "--model", tiny.name, "--device", "cpu", "--prompt", "abc"])
    line = capsys.readouterr().err
    assert "keys kv, values identity, split 2, tail 1, rows none; advised: " in line
    with pytest.raises(SystemExit):  # a setting of the user's own: not the advice any more
        cli.main(["generate", "--model", tiny.name, "--device", "cpu", "--prompt", "abc",
                  "--tail", "2"])
    line = capsys.readouterr().err
    assert "tail 2, rows none]" in line and "advised" not in line
