"""The tiered prefill's verdicts (gpu.lab.eval.tiered_verdicts) against the rules stated in
docs/results-quality.md before the screen, on made-up tables and journals whose answers are
known by hand."""
import json

import numpy as np
import pytest

from gpu.lab.eval.tiered_verdicts import (MINIMUM, gain_verdict, held_out, main, prediction_1,
                                          prediction_4, scores, verdicts)


def iv(est, low, high):
    return {"estimate": est, "low": low, "high": high, "n": 36}


@pytest.mark.parametrize("contrast,word", [
    (iv(6.0, 1.0, 11.0), "confirmed"), (iv(5.0, 0.5, 9.0), "confirmed"),
    (iv(6.0, -1.0, 13.0), "inconclusive"), (iv(4.0, 1.0, 7.0), "inconclusive"),
    (iv(1.0, -3.0, 4.9), "refuted"), (None, "not measured")])
def test_a_cell_of_prediction_1_follows_its_stated_rule(contrast, word):
    assert gain_verdict(contrast) == word


def row(fill, split, share, complete=True, vs_dropped=None, values_fill=None):
    return {"arm": f"{fill}+attn{int(share * 100)}{'c' if complete else ''}@{split}/t1",
            "fill": fill, "values_fill": values_fill, "split": split, "share": share,
            "complete": complete, "vs_dropped": vs_dropped}


def test_prediction_1_holds_only_when_every_cell_is_confirmed():
    good, bad = iv(8.0, 2.0, 14.0), iv(0.0, -4.0, 3.0)
    grid = [row("none", s, k) for s in (8, 12) for k in (0.1, 0.2)]
    grid += [row("none", 8, 0.1, complete=False), row("kv", 8, 0.1, False, bad)]  # not a cell
    kv = [row("kv", s, k, vs_dropped=good) for s in (8, 12) for k in (0.1, 0.2)]
    ridge = [row("ridge", s, k, vs_dropped=good) for s in (8, 12) for k in (0.1, 0.2)]
    ridge[2]["vs_dropped"] = bad
    two = [row("kv", 8, 0.1, vs_dropped=bad, values_fill="identity")]   # the advised kind
    p = prediction_1({"rows": grid + kv + ridge + two})
    assert p["kv"]["verdict"] == "holds" and len(p["kv"]["cells"]) == 4
    assert p["ridge"]["verdict"] == "fails"
    assert [c["verdict"] for c in p["ridge"]["cells"]].count("refuted") == 1
    partial = prediction_1({"rows": grid + kv[:3]})   # a cell the journal lacks
    assert partial["kv"]["verdict"] == "inconclusive"


def journal(per_arm: dict[str, list[float]], tasks=("a", "b")) -> list[dict]:
    """Needle records of each arm's scores, units spread over ``tasks`` in turn."""
    out = []
    for arm, xs in per_arm.items():
        for i, x in enumerate(xs):
            task = tasks[i % len(tasks)]
            out.append({"instrument": "needle", "arm": arm, "score": x,
                        "unit": f"{task}/4096/{i // len(tasks)}", "stratum": f"{task}/4096"})
    return out


def test_prediction_4_is_the_mean_of_t_minus_the_midpoint():
    rng = np.random.default_rng(0)
    n = MINIMUM + 2
    e = rng.integers(0, 2, n).astype(float)
    a = e * rng.integers(0, 2, n)                  # the advised fill loses some needles
    t = np.maximum(a, e * rng.integers(0, 2, n))   # the rows win some of them back
    by = scores(journal({"t": list(t), "adv": list(a), "exact": list(e)}))
    got = prediction_4(by, ["t"], "adv")["t"]
    assert got["d"]["estimate"] == pytest.approx(100 * np.mean(t - (a + e) / 2))
    assert got["advised_loss"] == pytest.approx(100 * np.mean(e - a))
    assert got["d"]["low"] <= got["d"]["estimate"] <= got["d"]["high"]
    whole = prediction_4(scores(journal({"t": list(e), "adv": list(a), "exact": list(e)})),
                         ["t"], "adv")["t"]
    none = prediction_4(scores(journal({"t": list(a), "adv": list(a), "exact": list(e)})),
                        ["t"], "adv")["t"]
    assert whole["verdict"] == "confirmed" and none["verdict"] == "refuted"
    same = prediction_4(scores(journal({"t": list(e), "adv": list(e), "exact": list(e)})),
                        ["t"], "adv")["t"]
    assert same["verdict"].startswith("not decidable")
    short = prediction_4(scores(journal({"t": list(e[:36]), "adv": list(a[:36]),
                                         "exact": list(e[:36])})), ["t"], "adv")["t"]
    assert short["verdict"].startswith("not decided") and short["d"]["n"] == 36


def test_the_held_out_samples_are_those_after_the_screens_six():
    assert not held_out("niah_single_1/4096/5") and held_out("vt/4096/6")


def test_verdicts_read_the_finalists_and_write_their_files(tmp_path, capsys):
    adv, fin = "kv.identity-values@16/t1", "kv+attn10c@12/t1"
    ni = {"passed": True, "n": MINIMUM, "bound": -2.0, "margin": 3.0}
    t = {"references": {adv: {}},
         "rows": [row("none", 12, 0.1), {**row("kv", 12, 0.1, vs_dropped=iv(9.0, 3.0, 15.0)),
                  "vs_reference": {adv: {"noninferior": ni, "retrieval": iv(-1.0, -4.0, 2.0)}},
                  "noninferior_exact": None, "vs_exact": iv(-9.0, -14.0, -4.0)}],
         "finalists": {"prediction 2": [fin], "prediction 3": [], "prediction 4": []}}
    n = 2 * 17
    records = journal({fin: [1.0] * n, adv: [1.0] * (n - 2) + [0.0, 0.0], "exact": [1.0] * n})
    v = verdicts(t, records)
    assert v["prediction 1"]["kv"]["verdict"] == "holds"
    assert v["prediction 2"]["verdict"] == "confirmed"
    assert v["prediction 3"]["verdict"] == "not stated for this model"
    held = v["held_out"][fin]["vs_advised"]   # units 6..16 of each task: 22 pairs
    assert held["n"] == 22 and held["estimate"] == pytest.approx(100 * 2 / 22)
    ni_short = {**ni, "n": 36}
    t["rows"][1]["vs_reference"][adv]["noninferior"] = ni_short
    assert verdicts(t, records)["prediction 2"]["verdict"].startswith("not decided")

    (tmp_path / "frontier.json").write_text(json.dumps({"model": "m", "tiered": t}))
    (tmp_path / "records.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert main([str(tmp_path)]) == 0
    md = (tmp_path / "verdicts.md").read_text()
    assert "**holds**" in md and fin in md
    assert json.loads((tmp_path / "verdicts.json").read_text())["advised"] == adv
    (tmp_path / "frontier.json").write_text(json.dumps({"model": "m", "tiered": None}))
    with pytest.raises(SystemExit, match="make tiered"):
        main([str(tmp_path)])
    with pytest.raises(SystemExit, match="no frontier.json"):
        main([str(tmp_path / "nowhere")])
