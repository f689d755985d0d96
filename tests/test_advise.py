"""``ridgefill advise`` (gpu.lab.tools.advise, paper 9 steps 2-5) end to end on a tiny random
Llama through the CLI, and its recommendation rule on known frontiers."""
from __future__ import annotations

import json

import pytest
import torch

from gpu.api import RidgeFill
from gpu.core.config import PrefillConfig
from gpu.lab.eval import minimodel
from gpu.maps.advice import read_advice
from gpu.lab.eval.options import FrontierOptions
from gpu.lab.tools.advise import (BUDGET, CONFIRM, HeldOutTexts, confirm_budget, held_out, keeps,
                              recommend)

pytestmark = pytest.mark.slow


def test_advise_end_to_end_on_a_tiny_model(tmp_path, capsys):
    from gpu.cli import main

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = minimodel.build(tmp_path / "tiny-llama")
        calib = minimodel.write_calibration(tmp_path / "calib", n_docs=10)
        out = tmp_path / "advise"
        assert main(["advise", "--model", str(model), "--lengths", "512", "--tails", "1", "96",
                     "--samples", "1", "--docs", "1", "--calib", str(calib), "--out-dir",
                     str(out), "--budget", "retrieval=100", "key=9", "--quiet",
                     "--confirm-samples", "1", "--confirm-docs", "1",
                     "--maps", str(tmp_path / "mine.safetensors")]) == 0
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    advice = json.loads((out / "tiny-llama" / "advice.json").read_text())
    assert (out / "tiny-llama" / "advice.png").is_file()
    assert advice["fill_off_bitwise_exact"] is True and advice["complete"] is True
    rec = advice["recommendation"]
    assert rec["keeps_budget"] and rec["budget"] == {"retrieval": 100.0, "key": 9.0}
    cheapest = min(r["macs_share"] for r in advice["frontier"] if r["arm"] != "exact")
    assert rec["macs_share"] == cheapest  # a budget everything keeps: the cheapest wins
    assert "recommended: " + rec["arm"] in printed and "MAC share" in printed
    # --maps: the recommended maps and the advice beside them (gpu.maps.advice), which a
    # load given the file alone runs; a recommendation that reads no maps writes nothing
    kinds = PrefillConfig(**rec["config"]).map_kinds
    if len(kinds) == 1:
        assert read_advice(tmp_path / "mine.safetensors")["config"] == rec["config"]
        rf = RidgeFill.load(str(model), str(tmp_path / "mine.safetensors"), device="cpu")
        assert {k: getattr(rf.config, k) for k in rec["config"]} == rec["config"]
        assert rf.maps.kind == kinds[0]
        # generate and prefill (and the presses: gpu.press.maps_config) given the file alone
        from gpu.maps.files import load_maps
        from gpu.press import maps_config

        mine = str(tmp_path / "mine.safetensors")
        assert main(["generate", "--model", str(model), "--maps", mine, "--prompt",
                     "a b c d e f g h i j k l m n o p q r s t", "--max-new-tokens", "1"]) == 0
        assert "advised for these maps" in capsys.readouterr().err  # logged, the CLI prints it
        assert maps_config(load_maps(mine)) == PrefillConfig(**rec["config"])
    else:
        assert not (tmp_path / "mine.safetensors").exists()
        assert f"--maps: {rec['arm']} reads" in printed and "nothing written" in printed
    # the paper's fills and those beyond it (anchored, kv, keys and values from two fills)
    assert {r["fill"] for r in advice["frontier"]} == {"exact", "identity", "ridge", "anchored",
                                                       "kv"}
    assert {r["values_fill"] for r in advice["frontier"]} >= {None, "ridge", "kv", "identity"}
    assert not any(r["splice"] or r["check"] for r in advice["frontier"])  # prefill configs
    assert advice["texts"] == "heldout-calibration"
    # confirmed on other held-out samples: the cheapest keeps a budget everything keeps
    [conf] = advice["confirmations"]
    assert conf["arm"] == rec["arm"] and conf["keeps_budget"] and rec["confirmation"] == conf
    assert conf["seed"] == CONFIRM["seed_offset"] and conf["samples"] == advice["samples"]
    assert (out / "confirm" / "tiny-llama" / "report.json").is_file()
    fresh = advice["fresh_check"]  # rerun beside exact on samples it never saw
    assert fresh["arm"] == rec["arm"] and fresh["seed"] == 1 and fresh["keeps_budget"]
    assert fresh["vs_exact"] is not None and "never saw" in printed
    # a larger rerun at another unseen seed: the frontier resumes, only the rerun is new
    torch.set_num_threads(1)
    try:
        assert main(["advise", "--model", str(model), "--lengths", "512", "--tails", "1", "96",
                     "--samples", "1", "--docs", "1", "--calib", str(calib), "--out-dir",
                     str(out), "--budget", "retrieval=100", "key=9", "--quiet",
                     "--confirm-samples", "1", "--confirm-docs", "1",
                     "--check-seed", "5", "--check-samples", "2", "--check-docs", "2"]) == 0
    finally:
        torch.set_num_threads(threads)
    again = json.loads((out / "tiny-llama" / "advice.json").read_text())
    assert again["recommendation"] == rec and again["frontier"] == advice["frontier"]
    bigger = again["fresh_check"]
    assert bigger["seed"] == 5 and bigger["arm"] == rec["arm"]
    assert bigger["samples"] == 2 * fresh["samples"] and bigger["documents"] == 2
    assert advice["earlier_checks"] == [] and again["earlier_checks"] == [fresh]  # kept
    assert (out / "verify-seed5" / "tiny-llama" / "report.json").is_file()
    assert main(["advise", "--model", str(model), "--budget", "speed=2"]) == 2


def row(arm, macs, retrieval, drop, key, rescale=None):
    return {"arm": arm, "macs_share": macs, "retrieval": retrieval, "split": 3, "tail": 1,
            "fill": "ridge", "rows": "none", "mac_ceiling": 1 / macs, "speedup": None,
            "rescale": rescale,
            "vs_exact": {"estimate": drop}, "dnll_key": None if key is None else {"estimate": key}}


def test_rule_cheapest_within_budget_else_exact():
    s = {"rows": [{"arm": "exact", "macs_share": 1.0, "vs_exact": None},
                  row("a", 0.5, 60.0, -40.0, 0.1), row("b", 0.6, 98.0, -2.0, 0.7),
                  row("c", 0.7, 97.0, -3.0, 0.2), row("d", 0.8, 100.0, 0.0, 0.0)]}
    rec = recommend(s, BUDGET)
    assert rec["arm"] == "c" and rec["flags"] == "--split 3 --tail 1 --fill ridge --rows none"
    assert recommend(s, {"retrieval": 50.0, "key": 0.5})["arm"] == "a"
    s["rows"].append(row("e", 0.65, 99.0, -1.0, 0.1, rescale="values"))
    assert recommend(s, BUDGET)["flags"].endswith("--rows none --rescale values")
    none = recommend(s, {"retrieval": 0.0, "key": -1.0})
    assert none["arm"] == "exact" and not none["keeps_budget"]


def test_rule_confirms_the_screened_configurations_cheapest_first():
    s = {"rows": [{"arm": "exact", "macs_share": 1.0, "vs_exact": None},
                  row("a", 0.5, 60.0, -40.0, 0.1), row("c", 0.7, 97.0, -3.0, 0.2),
                  row("d", 0.8, 100.0, 0.0, 0.0), row("f", 0.9, 100.0, 0.0, 0.0)]}
    half = confirm_budget(BUDGET)
    assert half == {"retrieval": BUDGET["retrieval"] * CONFIRM["margin"], "key": BUDGET["key"]}

    def conf(arm, drop, key=0.0):
        r = {"arm": arm, "vs_exact": {"estimate": drop}, "dnll_key": {"estimate": key}}
        return {**r, "keeps_budget": keeps(r, half)}

    # c kept the budget on the frontier (-3 points) but not the halved one on its
    # confirmation (-3.75 < -2.5): d, the next cheapest, is confirmed and wins
    confirmed = {"c": conf("c", -3.75), "d": conf("d", -2.5)}
    assert not confirmed["c"]["keeps_budget"] and confirmed["d"]["keeps_budget"]
    rec = recommend(s, BUDGET, confirmed)
    assert rec["arm"] == "d" and rec["confirmation"] == confirmed["d"]
    # a confirmation over the key-token budget fails too
    assert recommend(s, BUDGET, {"c": conf("c", 0.0, key=0.6), "d": conf("d", 0.0)})["arm"] == "d"
    # the search stops at the first configuration not confirmed (tries spent): exact
    out = recommend(s, BUDGET, {"c": conf("c", -5.0)})
    assert out["arm"] == "exact" and not out["keeps_budget"] and "confirmation" in out["why"]
    assert recommend(s, BUDGET)["arm"] == "c"  # no confirmation: the screen alone decides


def test_held_out_text_is_what_the_fit_never_captures(tmp_path):
    calib = minimodel.write_calibration(tmp_path / "c", n_docs=10)
    texts = held_out(str(calib), heldout_docs=2)
    assert [d.doc_id.rsplit("/", 1)[-1] for d in texts.docs] == ["calib8.txt", "calib9.txt"]
    with pytest.raises(ValueError, match="add documents to --calib"):
        texts.haystack(10 ** 7, 0)
    with pytest.raises(ValueError, match="at least two"):
        HeldOutTexts([])


def test_confirmation_maps_hold_every_kind_the_grid_reads(monkeypatch, tmp_path):
    """The confirmation and the rerun load the maps of every kind the screen's arms read (an
    anchored or kv candidate would otherwise find only ridge maps)."""
    from types import SimpleNamespace

    from gpu.lab.tools import advise

    seen = {}
    monkeypatch.setattr(advise, "ensure_maps", lambda *a, **k: seen.update(k) or {})
    monkeypatch.setattr(advise.frontier, "frontier_config", lambda lm, g: (
        None, advise.frontier.Frontier(lm.n_layers, tails=g.tails, fills=g.fills, cut=g.cut)))
    lm = SimpleNamespace(name="m", n_layers=24)
    grid = FrontierOptions(samples=1, docs=1, lengths=(512,), tails=(1, 96), seed=0,
                           loss_length=256, fills=("ridge",), checks=(), cut=advise.DIAGNOSTICS)
    _, arms, _ = advise.grid_arms_maps(lm, grid, tmp_path, "builtin", None, False)
    assert {"anchored@15/t1", "kv@16/t1"} <= set(arms)
    assert set(seen["kinds"]) == {"ridge", "anchored", "kv"}
