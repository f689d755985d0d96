"""The tiered prefill's verdicts (gpu.lab.eval.tiered_verdicts) against the rules stated in
docs/results-quality.md before the screen, on made-up journals whose answers are known by
hand; the screen's finalists frozen once (gpu.lab.eval.frontier_report.write)."""
import json

import numpy as np
import pytest

from gpu.lab.eval.tiered_verdicts import (MINIMUM, gain_verdict, held_out, journal, main,
                                          prediction_1, prediction_4, screen_per_task,
                                          verdicts)


def iv(est, low, high):
    return {"estimate": est, "low": low, "high": high, "n": 36}


@pytest.mark.parametrize("contrast,word", [
    (iv(6.0, 1.0, 11.0), "confirmed"), (iv(5.0, 0.5, 9.0), "confirmed"),
    (iv(6.0, -1.0, 13.0), "inconclusive"), (iv(4.0, 1.0, 7.0), "inconclusive"),
    (iv(1.0, -3.0, 4.9), "refuted"), (None, "not measured")])
def test_a_cell_of_prediction_1_follows_its_stated_rule(contrast, word):
    assert gain_verdict(contrast) == word


def records(per_arm: dict[str, list[float]], tasks=("a", "b")) -> list[dict]:
    """Needle records of each arm's scores, sample i of task tasks[i % len(tasks)]."""
    out = []
    for arm, xs in per_arm.items():
        for i, x in enumerate(xs):
            task, unit = tasks[i % len(tasks)], f"{tasks[i % len(tasks)]}/4096/{i // len(tasks)}"
            out.append({"instrument": "needle", "arm": arm, "score": x, "unit": unit,
                        "stratum": f"{task}/4096", "key": f"needle|{unit}|{arm}|0"})
    return out


def scores_of(recs: list[dict], tmp_path) -> dict:
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    by, stale = journal(tmp_path)
    assert stale == 0
    return by


def test_prediction_1_holds_only_when_every_cell_of_the_grid_is_confirmed(tmp_path):
    n, rng = 40, np.random.default_rng(1)
    dropped = list(rng.integers(0, 2, n) * 0.5)
    better = [min(x + 0.5, 1.0) for x in dropped]            # about +37 points
    arms = {f"none+attn{k}c@{s}/t1": dropped for s in (8, 12) for k in (10, 20)}
    arms |= {f"kv+attn{k}c@{s}/t1": better for s in (8, 12) for k in (10, 20)}
    arms |= {f"ridge+attn{k}c@{s}/t1": better for s in (8, 12) for k in (10, 20)}
    arms["ridge+attn20c@12/t1"] = dropped                     # ties its twin: refuted
    arms["kv+attn10@8/t1"] = dropped                          # no whole spans: not a cell
    arms["kv.identity-values+attn10c@8/t1"] = dropped         # two sources: not read
    arms["exact"] = [1.0] * n
    by = scores_of(records(arms), tmp_path)
    p = prediction_1(by, [8, 12], [0.1, 0.2])
    assert set(p) == {"kv", "ridge"}
    assert p["kv"]["verdict"] == "holds" and len(p["kv"]["cells"]) == 4
    got = p["kv"]["cells"][0]["vs_dropped"]["estimate"]
    assert got == pytest.approx(100 * np.mean(np.array(better) - np.array(dropped)))
    assert p["ridge"]["verdict"] == "fails"
    assert [c["verdict"] for c in p["ridge"]["cells"]].count("refuted") == 1
    wider = prediction_1(by, [8, 12, 16], [0.1, 0.2])         # cells the journal lacks
    assert wider["kv"]["verdict"] == "inconclusive"
    assert [c["verdict"] for c in wider["kv"]["cells"]].count("not measured") == 2


def test_prediction_4_is_the_mean_of_t_minus_the_midpoint(tmp_path):
    rng = np.random.default_rng(0)
    n = MINIMUM + 2
    e = rng.integers(0, 2, n).astype(float)
    a = e * rng.integers(0, 2, n)                  # the advised fill loses some needles
    t = np.maximum(a, e * rng.integers(0, 2, n))   # the rows win some of them back

    def p4(tt, aa, ee, sub):
        d = tmp_path / sub
        d.mkdir()
        return prediction_4(scores_of(records({"t": list(tt), "adv": list(aa),
                                               "exact": list(ee)}), d), ["t"], "adv")["t"]

    got = p4(t, a, e, "mixed")
    assert got["d"]["estimate"] == pytest.approx(100 * np.mean(t - (a + e) / 2))
    assert got["advised_loss"] == pytest.approx(100 * np.mean(e - a))
    assert got["d"]["low"] <= got["d"]["estimate"] <= got["d"]["high"]
    assert p4(e, a, e, "whole")["verdict"] == "confirmed"
    assert p4(a, a, e, "none")["verdict"] == "refuted"
    assert p4(e, e, e, "same")["verdict"].startswith("not decidable")
    short = p4(e[:36], a[:36], e[:36], "short")
    assert short["verdict"].startswith("not decided") and short["d"]["n"] == 36


def test_the_held_out_samples_are_those_after_the_screens_share_a_task():
    by = {"exact": {f"{t}/4096/{i}": (1.0, t) for t in ("vt", "cwe", "fwe") for i in range(9)}}
    per_task = screen_per_task({"screen_samples": 18}, by)          # 18 over 3 tasks
    assert per_task == 6
    assert not held_out(per_task)("niah_single_1/4096/5") and held_out(per_task)("vt/4096/6")


def frozen(**finalists):
    return {"model": "m", "advised": "kv.identity-values@16/t1", "pop_split": 16,
            "splits": [12], "shares": [0.1], "screen_samples": 12,
            "finalists": {"prediction 2": [], "prediction 3": [], "prediction 4": [],
                          **finalists}}


def test_the_finalists_are_judged_on_the_journal_at_102_samples(tmp_path):
    adv, fin = "kv.identity-values@16/t1", "kv+attn10c@12/t1"
    n = 2 * 17
    same = {fin: [1.0] * (n - 2) + [0.0, 0.0], "none+attn10c@12/t1": [0.0] * n,
            adv: [1.0] * n, "exact": [1.0] * n}
    by = scores_of(records(same), tmp_path)
    v = verdicts(frozen(**{"prediction 2": [fin]}), by)
    assert v["prediction 1"]["kv"]["verdict"] == "holds"
    assert v["prediction 2"]["verdict"].startswith("not decided")      # 34 < 102 samples
    assert v["prediction 3"]["verdict"] == "not stated for this model"
    held = v["held_out"][fin]["interval"]     # samples 6..16 of each task: 22 pairs
    assert held["n"] == 22 and held["estimate"] == pytest.approx(-100 * 2 / 22)
    many = {**{a: x * 4 for a, x in same.items()}, fin: [1.0] * 4 * n}  # 136 an arm, tied
    big = scores_of(records(many), tmp_path)
    v = verdicts(frozen(**{"prediction 2": [fin]}), big)
    assert v["prediction 2"]["finalists"][fin]["test"]["passed"]
    assert v["prediction 2"]["verdict"] == "confirmed"
    low = {**many, fin: [0.0] * len(many[fin])}                        # -100 points
    v = verdicts({**frozen(**{"prediction 3": [fin]}), "model": "qwen2.5-coder-1.5b"},
                 scores_of(records(low), tmp_path))
    assert v["prediction 3"]["verdict"] == "refuted"
    assert verdicts(frozen(), big)["prediction 2"]["verdict"].startswith("no finalist")


def test_verdicts_write_their_files_and_refuse_before_the_screen_is_whole(tmp_path):
    fin = "kv+attn10c@12/t1"
    recs = records({fin: [1.0] * 8, "none+attn10c@12/t1": [0.0] * 8,
                    "kv.identity-values@16/t1": [1.0] * 8, "exact": [1.0] * 8})
    recs.append({**recs[0], "key": "needle|a/4096/0|kv+attn10c@12/t1|old"})   # a rerun's
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    with pytest.raises(SystemExit, match="make tiered"):
        main([str(tmp_path)])
    (tmp_path / "finalists.json").write_text(json.dumps(frozen(**{"prediction 2": [fin]})))
    assert main([str(tmp_path)]) == 0
    md = (tmp_path / "verdicts.md").read_text()
    assert "**holds**" in md and fin in md
    v = json.loads((tmp_path / "verdicts.json").read_text())
    assert v["pairs_recorded_twice"] == 1


def test_the_screens_finalists_are_frozen_for_every_later_summary(tmp_path, monkeypatch):
    """frontier_report.write keeps the first whole run's finalists: the finalists' own
    resumed run (which ranks only them) names the screen's."""
    from gpu.lab.eval.frontier_report import write

    def summary(names):
        rows = [{"arm": a, "split": 12, "share": 0.1, "fill": "kv", "values_fill": None,
                 "complete": True, "exact_row_share": 0.1, "macs_share": 0.5, "mac_ceiling": 2.0,
                 "retrieval": 90.0, "n": 36, "vs_exact": None, "vs_dropped": None,
                 "vs_reference": {}, "noninferior_exact": None} for a in names]
        return {"model": "m", "samples": 36, "command": "c", "partial": False,
                "tiered": {"references": {"adv": {}}, "pop_split": 16, "rows": rows,
                           "pop": {"mac_ceiling": 1.5, "retrieval": 80.0, "vs_exact": None},
                           "finalists": {"prediction 2": names[:1], "prediction 3": [],
                                         "prediction 4": []}}}

    import gpu.lab.eval.frontier_report as fr_report
    monkeypatch.setattr(fr_report, "markdown", lambda s: "md")   # the summary is a sketch
    monkeypatch.setattr(fr_report, "plot", lambda s, p: None)
    write(tmp_path, summary(["kv+attn10c@12/t1", "kv+attn20c@12/t1"]))
    write(tmp_path, summary(["kv+attn20c@12/t1"]))   # a later run names another
    kept = json.loads((tmp_path / "finalists.json").read_text())
    assert kept["finalists"]["prediction 2"] == ["kv+attn10c@12/t1"]
    assert kept["advised"] == "adv" and kept["splits"] == [12] and kept["shares"] == [0.1]
    now = json.loads((tmp_path / "frontier.json").read_text())
    assert now["tiered"]["finalists"]["prediction 2"] == ["kv+attn10c@12/t1"]


def test_a_screen_that_does_not_divide_over_the_tasks_is_refused():
    by = {"exact": {f"{t}/4096/0": (1.0, t) for t in ("vt", "cwe", "fwe", "cwe2")}}
    with pytest.raises(ValueError, match="do not divide"):
        screen_per_task({"screen_samples": 18}, by)


def test_prediction_2_across_models_needs_both_and_falls_with_either():
    from gpu.lab.eval.tiered import STATED_MODELS
    from gpu.lab.eval.tiered_verdicts import NO_FINALIST, UNDECIDED, across_models

    def judged(**words):
        return {m: {"prediction 1": {"kv": {"verdict": "fails"}}, "prediction 2": {"verdict": w},
                    "prediction 3": {"verdict": "-"}} for m, w in words.items()}

    small, large = STATED_MODELS
    word = lambda **w: across_models(judged(**w))["prediction 2"]["verdict"]  # noqa: E731
    assert word(**{small: "refuted"}) == "refuted"            # one model settles a refusal
    assert word(**{small: "confirmed"}) == "not decided"      # the other is not judged yet
    assert word(**{small: "confirmed", large: "confirmed"}) == "confirmed"
    assert word(**{small: "confirmed", large: NO_FINALIST}) == "refuted"
    assert word(**{small: "confirmed", large: UNDECIDED}) == "not decided"
    assert word(**{small: "confirmed", large: "inconclusive"}) == "inconclusive"
    assert word(**{"other": "confirmed", small: "confirmed", large: "confirmed"}) == "confirmed"


def test_several_directories_write_the_combined_verdict_in_their_parent(tmp_path):
    from gpu.lab.eval.tiered import STATED_MODELS
    fin = "kv+attn10c@12/t1"
    for m in STATED_MODELS:
        d = tmp_path / m
        d.mkdir()
        recs = records({fin: [1.0] * 8, "none+attn10c@12/t1": [0.0] * 8,
                        "kv.identity-values@16/t1": [1.0] * 8, "exact": [1.0] * 8})
        (d / "records.jsonl").write_text("\n".join(json.dumps(r) for r in recs) + "\n")
        (d / "finalists.json").write_text(json.dumps({**frozen(), "model": m}))
    assert main([str(tmp_path / m) for m in STATED_MODELS]) == 0
    a = json.loads((tmp_path / "verdicts.json").read_text())
    assert a["prediction 2"]["verdict"] == "refuted"     # no finalist on either model
    assert set(a["per_model"]) == set(STATED_MODELS)
    assert "**refuted**" in (tmp_path / "verdicts.md").read_text()
    (tmp_path / STATED_MODELS[1] / "finalists.json").unlink()       # its screen still runs
    assert main([str(tmp_path / m) for m in STATED_MODELS]) == 0
    a = json.loads((tmp_path / "verdicts.json").read_text())
    assert a["prediction 2"]["models"][STATED_MODELS[1]] == "not judged yet"
    assert a["prediction 2"]["verdict"] == "refuted"     # the small model alone refutes it
