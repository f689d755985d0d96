"""The tiered prefill's four predictions judged by the rules stated before the screen
(docs/results-quality.md), from a run's journal and the finalists its screen froze
(``finalists.json``, gpu.lab.eval.tiered.freeze): ``python -m gpu.lab.eval.tiered_verdicts
results/tiered/<model>`` writes ``verdicts.json`` and ``verdicts.md`` beside them. Measures
nothing; every interval is computed here from the journal's per-sample scores (paired within
task, as the report's), so the verdicts do not depend on which arms a later run kept.

1. filled beats dropped by >= :data:`GAIN` points at every (split, share) with whole spans;
2. a finalist faster than POP non-inferior to the advised fill (3 points), at >= :data:`MINIMUM`;
3. on the 1.5B a finalist at >= 1.8x within 5 points of exact, at >= :data:`MINIMUM`;
4. at POP's split, 10% rows recover half the advised fill's loss: d = t - (a + e) / 2 >= 0.

Given several models' directories it also writes ``verdicts.md`` / ``.json`` in their common
parent: prediction 2 across the models it is stated for (:func:`across_models`).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Callable

import numpy as np

from rfmodel.atomic import write_json, write_text

from .grid import SHARE_ROWS, arm_name, parse_arm
from .journal import Journal
from .report import MARGIN_POP, ni_test
from .report_intervals import interval
from .tiered import FINALISTS_FILE, MARGIN_TIERED_EXACT, MOONSHOT, STATED_MODELS

GAIN = 5.0       # points: prediction 1's "beats the dropped one by at least 5"
MINIMUM = 102    # samples an arm before predictions 2-4 are decided (binomial floor -2.9)
UNDECIDED = f"not decided (under {MINIMUM} samples an arm)"
NO_FINALIST = "no finalist (no arm met the ceiling the rule asks)"


def journal(root: Path) -> tuple[dict[str, dict[str, tuple[float, str]]], int]:
    """arm -> unit -> (RULER score x100, task stratum) from ``root``'s journals (a sharded
    run's too), and how many (arm, unit) pairs were recorded under more than one key (a
    configuration changed between runs: the later record is used)."""
    by: dict[str, dict[str, tuple[float, str]]] = {}
    keys: dict[tuple[str, str], set] = {}
    for path in sorted(root.glob("records*.jsonl")):
        for r in Journal(path, readonly=True).records():   # torn or damaged lines skipped
            if r.get("instrument") == "needle":
                by.setdefault(r["arm"], {})[r["unit"]] = (100.0 * r["score"], r["stratum"])
                keys.setdefault((r["arm"], r["unit"]), set()).add(r["key"])
    return by, sum(len(k) > 1 for k in keys.values())


def held_out(per_task: int) -> Callable[[str], bool]:
    """``keep(unit)``: whether the screen did not see the unit (its index within its task is
    ``per_task`` or more: the screen's samples a task, read from finalists.json)."""
    return lambda unit: int(unit.rsplit("/", 1)[1]) >= per_task


def screen_per_task(frozen: dict, by: dict) -> int:
    """The screen's samples a task: finalists.json's ``screen_samples`` over the journal's tasks
    (the screen deals its samples evenly over the tasks, so they divide)."""
    tasks = {stratum for units in by.values() for _, stratum in units.values()}
    per_task, rest = divmod(frozen["screen_samples"], max(len(tasks), 1))
    if rest:
        raise ValueError(f"the screen's {frozen['screen_samples']} samples do not divide over "
                         f"the journal's {len(tasks)} tasks: a run with other tasks shares this "
                         "journal; judge each screen from its own directory")
    return per_task


def aligned(by: dict, arms: list[str], keep=lambda unit: True):
    """The arms' score vectors on the units all of them measured (and ``keep`` admits), and
    the units' tasks."""
    units = sorted(set.intersection(*(set(by.get(a, {})) for a in arms)))
    units = [u for u in units if keep(u)]
    return [np.array([by[a][u][0] for u in units]) for a in arms], \
        np.array([by[arms[0]][u][1] for u in units])


def contrast(by: dict, a: str, b: str, margin: float | None = None, keep=lambda u: True) -> dict:
    """a - b paired within task (interval) and, with a ``margin``, the non-inferiority test
    (the one-sided bound, the lower of the bootstrap's and the binomial floor)."""
    (x, y), st = aligned(by, [a, b], keep)
    out = {"interval": interval(x, y, st) if len(x) else None, "n": len(x)}
    if margin is not None:
        out["test"] = ni_test(x, y, st, margin) if len(x) else None
    return out


def gain_verdict(iv: dict | None) -> str:
    """Prediction 1's cell: confirmed when the estimate is >= GAIN and the interval's low end
    above 0, refuted when its high end is below GAIN, inconclusive otherwise."""
    if not iv or iv.get("low") is None:
        return "not measured"
    if iv["estimate"] >= GAIN and iv["low"] > 0:
        return "confirmed"
    return "refuted" if iv["high"] < GAIN else "inconclusive"


def prediction_1(by: dict, splits: list[int], shares: list[float]) -> dict:
    """Per one-source filled kind, each whole-span cell of the screen's grid (every split x
    share) against its dropped twin at the largest n both reached; a kind holds when every
    cell is confirmed and fails when any is refuted. The prediction reads ``kv`` (the first
    look's fill); ``ridge`` is reported beside it."""
    out = {}
    for name in sorted(n for n in by if "+attn" in n):
        cfg = parse_arm(name)
        o = dict(cfg.selector_options or ())
        if cfg.rows != SHARE_ROWS or not o.get("complete") or cfg.fill == "none" \
                or cfg.values_fill:
            continue
        twin = arm_name("none", cfg.split, cfg.tail, SHARE_ROWS, share=o["share"], complete=True)
        c = contrast(by, name, twin)
        out.setdefault(cfg.fill, {})[(cfg.split, o["share"])] = {
            "arm": name, "split": cfg.split, "share": o["share"], "vs_dropped": c["interval"],
            "verdict": gain_verdict(c["interval"])}
    verdicts = {}
    for fill, got in out.items():
        cells = [got.get((s, k)) or {"arm": None, "split": s, "share": k, "vs_dropped": None,
                                     "verdict": "not measured"} for s in splits for k in shares]
        words = [c["verdict"] for c in cells]
        verdicts[fill] = {"cells": cells, "verdict": "fails" if "refuted" in words else
                          "holds" if set(words) == {"confirmed"} else "inconclusive"}
    return verdicts


def finalist_verdict(results: dict[str, dict], margin: float) -> str:
    """Confirmed when a finalist at >= MINIMUM samples passes; refuted when every finalist is
    there and its interval lies below -margin; not decided while one is short; inconclusive
    otherwise."""
    if not results:
        return NO_FINALIST
    if any(r["n"] >= MINIMUM and r["test"] and r["test"]["passed"] for r in results.values()):
        return "confirmed"
    if any(r["n"] < MINIMUM for r in results.values()):
        return UNDECIDED
    return ("refuted" if all(r["interval"]["high"] < -margin for r in results.values())
            else "inconclusive")


def prediction_4(by: dict, arms: list[str], advised: str) -> dict:
    """Each arm's d = t - (a + e) / 2 against the advised fill a and exact e, paired within
    task; confirmed when the low end is >= 0, refuted when the high end is below 0 (at
    MINIMUM samples); not decidable where the advised fill loses nothing to exact."""
    out = {}
    for arm in arms:
        (t, a, e), st = aligned(by, [arm, advised, "exact"])
        iv = interval(t, (a + e) / 2, st) if len(t) else None
        if iv is None or len(t) < MINIMUM:
            word = UNDECIDED
        elif (e - a).mean() <= 0:
            word = "not decidable (the advised fill loses nothing to exact here)"
        else:
            word = "confirmed" if iv["low"] >= 0 else "refuted" if iv["high"] < 0 else "inconclusive"
        out[arm] = {"d": iv, "advised_loss": float((e - a).mean()) if len(t) else None,
                    "verdict": word}
    return out


def verdicts(frozen: dict, by: dict) -> dict:
    """The four predictions from the screen's frozen finalists and the journal's scores."""
    fin, advised = frozen["finalists"], frozen["advised"]
    p2 = {a: contrast(by, a, advised, MARGIN_POP) for a in fin.get("prediction 2", [])}
    p3 = {a: contrast(by, a, "exact", MARGIN_TIERED_EXACT) for a in fin.get("prediction 3", [])}
    per_task = screen_per_task(frozen, by)
    unseen_only = held_out(per_task)
    unseen = {**{a: contrast(by, a, advised, MARGIN_POP, unseen_only) for a in p2},
              **{f"{a} vs exact": contrast(by, a, "exact", MARGIN_TIERED_EXACT, unseen_only)
                 for a in p3}}
    return {
        "model": frozen["model"], "advised": advised, "minimum": MINIMUM,
        "prediction 1": prediction_1(by, frozen["splits"], frozen["shares"]),
        "prediction 2": {"finalists": p2, "verdict": finalist_verdict(p2, MARGIN_POP)},
        "prediction 3": {"finalists": p3,
                         "verdict": finalist_verdict(p3, MARGIN_TIERED_EXACT)
                         if frozen["model"] == MOONSHOT else "not stated for this model"},
        "prediction 4": prediction_4(by, fin.get("prediction 4", []), advised),
        "held_out": unseen, "screen_per_task": per_task}


def across_models(judged: dict[str, dict]) -> dict:
    """Prediction 2 ("on both Qwen models") from each model's verdicts: refuted when it is
    refuted on any stated model or no arm there met the ceiling (no finalist), confirmed when
    confirmed on every stated model, otherwise not decided while a stated model is unjudged or
    short of samples, inconclusive when all are judged."""
    words = {m: judged[m]["prediction 2"]["verdict"] if m in judged else "not judged yet"
             for m in STATED_MODELS}
    if any(w in ("refuted", NO_FINALIST) for w in words.values()):
        word = "refuted"
    elif all(w == "confirmed" for w in words.values()):
        word = "confirmed"
    elif any(w in ("not judged yet", UNDECIDED) for w in words.values()):
        word = "not decided"
    else:
        word = "inconclusive"
    return {"prediction 2": {"models": words, "verdict": word},
            "per_model": {m: {"prediction 1": {f: k["verdict"]
                                               for f, k in v["prediction 1"].items()},
                              "prediction 3": v["prediction 3"]["verdict"]}
                          for m, v in judged.items()}}


def across_markdown(a: dict) -> str:
    L = ["# Tiered prefill verdicts across models", "",
         "Each model's own verdicts.md holds its intervals; this file combines them.", "",
         f"Prediction 2 (some configuration >= 5% above POP's ceiling non-inferior to the advised "
         f"fill at 3 points, on both Qwen models): **{a['prediction 2']['verdict']}**", ""]
    L += [f"- {m}: {w}" for m, w in a["prediction 2"]["models"].items()]
    L += ["", "| model | prediction 1 | prediction 3 |", "|---|---|---|"]
    L += [f"| {m} | {', '.join(f'{f} {w}' for f, w in v['prediction 1'].items())} | "
          f"{v['prediction 3']} |" for m, v in a["per_model"].items()]
    return "\n".join(L) + "\n"


def _iv(iv: dict | None) -> str:
    return "-" if not iv or iv.get("low") is None else \
        f"{iv['estimate']:+.1f} [{iv['low']:+.1f}, {iv['high']:+.1f}] (n={iv['n']})"


def _test(t: dict | None) -> str:
    return "-" if not t else (f"{'passes' if t['passed'] else 'fails'} at {t['margin']:g} "
                              f"(bound {t['bound']:+.1f})")


def markdown(v: dict) -> str:
    L = [f"# Tiered prefill verdicts: {v['model']}", "",
         f"By the rules stated before the screen (docs/results-quality.md), from the journal; "
         f"reference: the advised fill `{v['advised']}`; predictions 2-4 are decided at "
         f"{v['minimum']} samples an arm. RULER points, paired within task, 95% bootstrap "
         "intervals; NI: the one-sided bound (the lower of the bootstrap's and the binomial "
         "floor) against the margin.", "",
         "## Prediction 1: filled minus dropped, whole spans (the prediction reads `kv`)", "",
         "| fill | split | share | filled - dropped | cell |", "|---|---|---|---|---|"]
    for fill, kind in v["prediction 1"].items():
        L += [f"| {fill} | {c['split']} | {c['share']:.0%} | {_iv(c['vs_dropped'])} | "
              f"{c['verdict']} |" for c in kind["cells"]]
    L += [""] + [f"- `{fill}`: **{kind['verdict']}**" for fill, kind in v["prediction 1"].items()]
    for p, against in (("prediction 2", "the advised fill"), ("prediction 3", "exact")):
        L += ["", f"## {p.capitalize()}: finalists against {against}", "",
              f"Verdict: **{v[p]['verdict']}**.", ""]
        L += [f"- `{a}`: {_iv(r['interval'])}, NI {_test(r['test'])}"
              for a, r in v[p]["finalists"].items()]
    L += ["", "## Prediction 4: d = t - (a + e) / 2 (the prediction reads the `c` arm)", "",
          "| arm | d | advised fill's loss to exact | verdict |", "|---|---|---|---|"]
    for a, r in v["prediction 4"].items():
        loss = "-" if r["advised_loss"] is None else f"{r['advised_loss']:.1f}"
        L.append(f"| `{a}` | {_iv(r['d'])} | {loss} | {r['verdict']} |")
    if v["held_out"]:
        L += ["", "## Finalists on the samples the screen did not see (from the "
              f"{v['screen_per_task'] + 1}th a task)", ""]
        L += [f"- `{a}`{'' if 'vs exact' in a else ' vs advised'}: {_iv(r['interval'])}, NI "
              f"{_test(r['test'])}" for a, r in v["held_out"].items()]
    return "\n".join(L) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpu.lab.eval.tiered_verdicts",
                                description="Judge the tiered prefill's four predictions "
                                "(docs/results-quality.md) from a whole screen's journal.")
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                   help="a model's results/tiered/<model> (journal and finalists.json); with "
                   "several, those whose screen is not whole are named and left out of the "
                   "combined verdict")
    dirs, judged = p.parse_args(argv).dirs, {}
    whole = [d for d in dirs if (d / FINALISTS_FILE).is_file()]
    for d in sorted(set(dirs) - set(whole)):
        print(f"{d}: not judged (its screen is not whole yet)")
    if not whole:
        raise SystemExit(f"{', '.join(map(str, dirs))}: no {FINALISTS_FILE}: the screen names "
                         "its finalists when it is whole; run `make tiered` (or its line for "
                         "this model) to the end first")
    for d in whole:
        frozen = json.loads((d / FINALISTS_FILE).read_text())
        by, stale = journal(d)
        v = {**verdicts(frozen, by), "pairs_recorded_twice": stale}
        write_json(d / "verdicts.json", v)
        write_text(d / "verdicts.md", markdown(v))
        judged[v["model"]] = v
        print(f"{d}: prediction 1 (kv) {v['prediction 1'].get('kv', {}).get('verdict')}"
              f"{f'; {stale} (arm, sample) pairs recorded under two keys' if stale else ''} "
              f"-> {d}/verdicts.md")
    if len(dirs) > 1:
        parent, a = Path(os.path.commonpath([d.resolve() for d in dirs])), across_models(judged)
        write_json(parent / "verdicts.json", a)
        write_text(parent / "verdicts.md", across_markdown(a))
        print(f"prediction 2 across models: {a['prediction 2']['verdict']} -> "
              f"{parent}/verdicts.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
