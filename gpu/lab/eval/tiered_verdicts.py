"""The tiered prefill's four predictions judged by the rules stated before the screen
(docs/results-quality.md), from a run's ``frontier.json`` (its ``tiered`` part) and journal:
``python -m gpu.lab.eval.tiered_verdicts results/tiered/<model>`` writes ``verdicts.json`` and
``verdicts.md`` beside them. Measures nothing; reads only what the run recorded.

1. filled beats dropped by >= :data:`GAIN` points at every (split, share) with whole spans;
2. a finalist faster than POP non-inferior to the advised fill (3 points), at >= :data:`MINIMUM`;
3. on the 1.5B a finalist at >= 1.8x within 5 points of exact, at >= :data:`MINIMUM`;
4. at POP's split, 10% rows recover half the advised fill's loss: d = t - (a + e) / 2 >= 0.
"""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from rfmodel.atomic import write_json, write_text

from .report import MARGIN_POP
from .report_intervals import interval
from .tiered import MARGIN_TIERED_EXACT

GAIN = 5.0       # points: prediction 1's "beats the dropped one by at least 5"
MINIMUM = 102    # samples an arm before predictions 2-4 are decided (binomial floor -2.9)
SCREEN = 6       # samples a task in the screen: a finalist's later samples are held out


def gain_verdict(iv: dict | None) -> str:
    """Prediction 1's cell: confirmed when the estimate is >= GAIN and the interval's low end
    above 0, refuted when its high end is below GAIN, inconclusive otherwise."""
    if not iv or iv.get("low") is None:
        return "not measured"
    if iv["estimate"] >= GAIN and iv["low"] > 0:
        return "confirmed"
    return "refuted" if iv["high"] < GAIN else "inconclusive"


def prediction_1(t: dict) -> dict:
    """Per filled kind, its whole-span cells against their dropped twins; a kind holds when
    every cell the grid has is confirmed and fails when any is refuted. The prediction reads
    ``kv`` (the first look's fill); the others are reported beside it."""
    cells = {(r["split"], r["share"]) for r in t["rows"] if r["fill"] == "none" and r["complete"]}
    out = {}
    for r in sorted(t["rows"], key=lambda r: (r["split"], r["share"])):
        if r["fill"] == "none" or not r["complete"] or r["values_fill"]:
            continue
        kind = out.setdefault(r["fill"], {"cells": []})
        kind["cells"].append({"arm": r["arm"], "split": r["split"], "share": r["share"],
                              "vs_dropped": r["vs_dropped"],
                              "verdict": gain_verdict(r["vs_dropped"])})
    for kind in out.values():
        words = [c["verdict"] for c in kind["cells"]]
        kind["verdict"] = ("fails" if "refuted" in words else "holds"
                           if len(words) == len(cells) and set(words) == {"confirmed"}
                           else "inconclusive")
    return out


def _finalist_verdict(tests: list[dict | None], ivs: list[dict | None], margin: float) -> str:
    """Confirmed when a finalist passes at >= MINIMUM samples; refuted when every finalist's
    interval lies below -margin there; not decided under MINIMUM; inconclusive otherwise."""
    if not tests or any(t is None or t["n"] < MINIMUM for t in tests):
        return f"not decided (under {MINIMUM} samples an arm)"
    if any(t["passed"] for t in tests):
        return "confirmed"
    return "refuted" if all(iv and iv["high"] < -margin for iv in ivs) else "inconclusive"


def scores(records: list[dict]) -> dict[str, dict[str, tuple[float, str]]]:
    """arm -> unit -> (RULER score x100, task stratum); a unit measured twice: the later."""
    out: dict[str, dict[str, tuple[float, str]]] = defaultdict(dict)
    for r in records:
        if r.get("instrument") == "needle":
            out[r["arm"]][r["unit"]] = (100.0 * r["score"], r["stratum"])
    return out


def _aligned(by: dict, arms: list[str], keep=lambda unit: True):
    """The arms' score vectors on the units all of them measured (and ``keep`` admits)."""
    units = sorted(set.intersection(*(set(by.get(a, {})) for a in arms)))
    units = [u for u in units if keep(u)]
    vecs = [np.array([by[a][u][0] for u in units]) for a in arms]
    return vecs, np.array([by[arms[0]][u][1] for u in units])


def held_out(unit: str) -> bool:
    """A unit the screen did not see (its index within the task is SCREEN or more)."""
    return int(unit.rsplit("/", 1)[1]) >= SCREEN


def _held_out(by: dict, a: str, b: str) -> dict | None:
    """a - b on the samples the screen did not see (a finalist picked on the others)."""
    (x, y), st = _aligned(by, [a, b], held_out)
    return interval(x, y, st) if len(x) else None


def prediction_4(by: dict, arms: list[str], advised: str) -> dict:
    """Each arm's d = t - (a + e) / 2 against the advised fill a and exact e, paired within
    task; confirmed when the low end is >= 0, refuted when the high end is below 0 (at
    MINIMUM samples); not decidable where the advised fill loses nothing to exact."""
    out = {}
    for arm in arms:
        (t, a, e), st = _aligned(by, [arm, advised, "exact"])
        iv = interval(t, (a + e) / 2, st) if len(t) else None
        if iv is None or len(t) < MINIMUM:
            word = f"not decided (under {MINIMUM} samples an arm)"
        elif (e - a).mean() <= 0:
            word = "not decidable (the advised fill loses nothing to exact here)"
        else:
            word = "confirmed" if iv["low"] >= 0 else "refuted" if iv["high"] < 0 else "inconclusive"
        out[arm] = {"d": iv, "advised_loss": float((e - a).mean()) if len(t) else None,
                    "verdict": word}
    return out


def verdicts(t: dict, records: list[dict]) -> dict:
    """The four predictions from a frontier summary's ``tiered`` part and its journal."""
    (advised,) = t["references"]
    by, rows = scores(records), {r["arm"]: r for r in t["rows"]}
    fin = t.get("finalists") or {}
    p2, p3 = fin.get("prediction 2", []), fin.get("prediction 3", [])
    unseen = {a: {"vs_advised": _held_out(by, a, advised), "vs_exact": _held_out(by, a, "exact")}
              for a in sorted(set(p2) | set(p3))}
    return {
        "advised": advised, "minimum": MINIMUM,
        "prediction 1": prediction_1(t),
        "prediction 2": {"finalists": p2, "verdict": _finalist_verdict(
            [rows[a]["vs_reference"][advised]["noninferior"] for a in p2],
            [rows[a]["vs_reference"][advised]["retrieval"] for a in p2], MARGIN_POP)},
        "prediction 3": {"finalists": p3, "verdict": _finalist_verdict(
            [rows[a]["noninferior_exact"] for a in p3], [rows[a]["vs_exact"] for a in p3],
            MARGIN_TIERED_EXACT) if p3 else "not stated for this model"},
        "prediction 4": prediction_4(by, fin.get("prediction 4", []), advised),
        "held_out": unseen}


def _iv(iv: dict | None) -> str:
    return "-" if not iv or iv.get("low") is None else \
        f"{iv['estimate']:+.1f} [{iv['low']:+.1f}, {iv['high']:+.1f}] (n={iv['n']})"


def markdown(v: dict, model: str) -> str:
    L = [f"# Tiered prefill verdicts: {model}", "",
         f"By the rules stated before the screen (docs/results-quality.md); reference: the "
         f"advised fill `{v['advised']}`; predictions 2-4 are decided at {v['minimum']} samples "
         "an arm. Points, paired within task, 95% bootstrap intervals.", "",
         "## Prediction 1: filled minus dropped, whole spans", "",
         "| fill | split | share | filled - dropped | cell |", "|---|---|---|---|---|"]
    for fill, kind in v["prediction 1"].items():
        L += [f"| {fill} | {c['split']} | {c['share']:.0%} | {_iv(c['vs_dropped'])} | "
              f"{c['verdict']} |" for c in kind["cells"]]
    L += [""] + [f"- `{fill}`: **{kind['verdict']}**" for fill, kind in v["prediction 1"].items()]
    for p in ("prediction 2", "prediction 3"):
        L += ["", f"## {p.capitalize()}", "", f"Finalists: {', '.join(v[p]['finalists']) or 'none'}; "
              f"verdict: **{v[p]['verdict']}**."]
    L += ["", "## Prediction 4: d = t - (a + e) / 2", "", "| arm | d | advised loss | verdict |",
          "|---|---|---|---|"]
    for a, r in v["prediction 4"].items():
        loss = "-" if r["advised_loss"] is None else f"{r['advised_loss']:.1f}"
        L.append(f"| `{a}` | {_iv(r['d'])} | {loss} | {r['verdict']} |")
    if v["held_out"]:
        L += ["", "## Finalists on the samples the screen did not see", "",
              "| arm | vs advised | vs exact |", "|---|---|---|"]
        L += [f"| `{a}` | {_iv(r['vs_advised'])} | {_iv(r['vs_exact'])} |"
              for a, r in v["held_out"].items()]
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    for d in map(Path, argv if argv is not None else sys.argv[1:]):
        if not (d / "frontier.json").is_file():
            raise SystemExit(f"{d} holds no frontier.json: run `ridgefill eval frontier "
                             "--tiered` (make tiered) into it first")
        summary = json.loads((d / "frontier.json").read_text())
        if not summary.get("tiered"):
            raise SystemExit(f"{d}/frontier.json has no tiered arms: run `ridgefill eval "
                             "frontier --tiered` (make tiered) first")
        records = [json.loads(x) for x in (d / "records.jsonl").read_text().splitlines() if x]
        v = verdicts(summary["tiered"], records)
        write_json(d / "verdicts.json", v)
        write_text(d / "verdicts.md", markdown(v, summary["model"]))
        print(f"{d}: prediction 1 (kv) {v['prediction 1'].get('kv', {}).get('verdict')} -> "
              f"{d}/verdicts.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
