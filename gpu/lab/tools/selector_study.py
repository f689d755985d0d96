"""The selector study: which exact prefix rows keep filled-region retrieval.

``python -m gpu.lab.tools.selector_study --models smollm2-135m gemma3-270m --samples 10`` runs, through
the evaluation harness (gpu.lab.eval.harness.evaluate_model, resumable JSONL journal under
``results/selectors/<model>/records.jsonl``, maps fitted by the harness on the calibration
split and cached beside it), the needle instrument on filled-region samples (eval-role
haystacks the calibration never saw) and the loss instrument on ``--docs`` long documents
(novel-token and key-token Delta NLL, agreement) for these arms at the primary split
(3/8 of depth), tail 512:

* exact; RidgeFill alone;
* RidgeFill + each selector of gpu.core.select with span completion (attention 10%, probe,
  protected, lexical, combined at a 10% cap), each with its exact-row share recorded, and
  the paper's attention selector as it is written (10%, no span completion);
* beside each candidate default (``--controls``: lexical, combined): count-matched random
  rows, the same count added to the tail, and the question-blind variant. The default is the
  top of a ranking by a rule stated in :func:`rank_selectors`.

Then it times each arm's prefill alone (time to first token without decoding) on a few
samples of the longest length, with no lower pass shared between arms, and replays each
selector's rows through gpu.core.select.FixedRows to isolate the selector's own cost; and writes
``results/selectors/summary.{json,md}`` and ``retrieval_vs_share.png``: retrieval vs exact-row share per selector, paired bootstrap
intervals (rfmath.stats, within task) against exact, RidgeFill alone and the controls, the
binomial floor, the MAC-ceiling speedup beside the measured one, and the sample counts,
command, seed and wall time. A run that stops early is labelled partial.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from rfmath.stats import binomial_floor
from rfmodel.atomic import write_json, write_text

from ..eval import harness as ev
from ...core import models
from ..eval.grid import EvalConfig, preset_for
from ...core.config import PrefillConfig
from ..eval.instruments import Arm, Session
from ..eval.timing import time_arms
from ..eval.units import CorpusTexts, needle_units

SELECTORS = {  # name -> (gpu.core.select name, options, label)
    "attention": ("attention", (("complete", True), ("share", 0.10)),
                  "attention rows + span completion"),
    "attention-paper": ("attention", (("share", 0.10),),
                        "attention rows, no span completion (paper's reference, §2.4)"),
    "probe": ("probe", (("complete", True),), "probe rows"),
    "protected": ("protected", (("complete", True),), "protected rows"),
    "lexical": ("lexical", (("complete", True),), "lexical rows"),
    "combined": ("combined", (("cap", 0.10),), "combined rows"),
}


def arms_for(split: int, tail: int, controls: tuple[str, ...] = ("lexical", "combined"),
             selectors: tuple[str, ...] = tuple(SELECTORS)) -> list[Arm]:
    """exact, RidgeFill alone, RidgeFill + each selector; the three controls beside each
    selector named in ``controls`` (the default candidates)."""
    arms = [Arm("exact", PrefillConfig(fill="exact"), label="exact"),
            Arm(f"ridge@{split}", PrefillConfig(fill="ridge", split=split, tail=tail, rows="none"),
                label="RidgeFill")]
    for name in selectors:
        rows, opts, what = SELECTORS[name]
        base = f"ridge+{name}@{split}"
        sel = PrefillConfig(fill="ridge", split=split, tail=tail, rows=rows, selector_options=opts)
        arms.append(Arm(base, sel, label=f"RidgeFill + {what}"))
        if name in controls:
            arms += [Arm(f"{base}/random", sel, control="random", of=base,
                         label=f"  control: random rows, count of {name}"),
                     Arm(f"{base}/tail", sel, control="tail", of=base,
                         label="  control: same count added to the tail"),
                     Arm(f"{base}/blind", sel, blind=True,
                         label=f"  control: {name} rows, question hidden")]
    return arms


# ----------------------------------------------------------------------------- summary
def controls_of(con: dict, base: str, S: int, needles: dict) -> dict:
    """Paired retrieval contrasts of one selector arm against exact, RidgeFill alone and its
    controls (those it has)."""
    return {"vs_exact": needles["arms"].get(base, {}).get("vs_exact"),
            "vs_ridge": con.get((base, f"ridge@{S}")),
            **{f"vs_{c}": con.get((base, f"{base}/{c}")) for c in ("random", "tail", "blind")}}


def summarize(rep: dict, timing: dict, arms: list[Arm], meta: dict) -> dict:
    needles = rep["needles"]
    names = [a.name for a in arms]
    S = arms[1].split
    n = needles["arms"]["exact"]["n"] if "exact" in needles.get("arms", {}) else 0
    rows = []
    t_exact = timing.get("exact", {}).get("prefill")
    for a in arms:
        x = needles["arms"].get(a.name)
        if x is None:
            continue
        t = timing.get(a.name, {})
        macs = t.get("macs_share") or x.get("macs_share")
        sel_cost = (t["prefill"] - t["replay"]) if t.get("replay") is not None else None
        rows.append({
            "arm": a.name, "label": a.label.strip(), "n": x["n"], "retrieval": x["score"],
            "all_found": x["correct"], "exact_row_share": x["exact_row_share"],
            "needle_rows_exact": x["needle_rows_exact"], "macs_share": macs,
            "vs_exact": x["vs_exact"], "vs_exact_by_length": x.get("vs_exact_by_length"),
            "prefill_seconds": t.get("prefill"), "replay_seconds": t.get("replay"),
            "selector_seconds": sel_cost,
            "speedup": (t_exact / t["prefill"]) if t_exact and t.get("prefill") else None,
            "mac_ceiling": (1.0 / macs) if macs else None,
        })
    for r in rows:
        if r["speedup"] and r["mac_ceiling"]:
            r["share_of_ceiling"] = r["speedup"] / r["mac_ceiling"]
    con = {(c["a"], c["b"]): c.get("retrieval") for c in rep.get("contrasts", [])}
    controlled = sorted({a.of for a in arms if a.of})
    checks = {b: controls_of(con, b, S, needles) for b in controlled}
    per_sel = {a.name: con.get((a.name, f"ridge@{S}")) for a in arms if a.selects}
    docs = rep.get("documents") or {}
    loss = [{"arm": a.name, "label": a.label.strip(),
             **{k: docs["arms"][a.name].get(k) for k in
                ("n", "dnll_all", "dnll_novel", "dnll_key", "agreement", "kl_mean")}}
            for a in arms if a.name in docs.get("arms", {})]
    sets = rep["meta"].get("sample_sets", {})
    short = [k for k, v in sets.items() if k != "docs" and v["kept"] < meta["samples_asked"]]
    if meta.get("docs") and sets.get("docs", {}).get("kept", 0) < meta["docs"]:
        short.append("docs")
    summ = {"rows": rows, "checks": checks, "loss": loss, "timing": timing,
            "loss_tokens": {k: docs.get(k) for k in ("units", "domains", "scored_tokens",
                                                     "novel_tokens", "key_tokens")},
            "partial": bool(short), "short_cells": short, "selector_vs_ridge": per_sel,
            "binomial_floor_points": binomial_floor(n) if n else None, "samples": n,
            "by_task": {k: v for k, v in needles.get("by_stratum", {}).items() if k in names},
            **meta}
    summ["ranking"] = rank_selectors(summ)
    summ["default"] = summ["ranking"][0]["arm"] if summ["ranking"] else None
    return summ


MAX_SHARE, MARGIN = 0.10, 5.0  # at most 10% of prefix rows exact, within 5 points


def rank_selectors(summ: dict) -> list[dict]:
    """The rule that sets the default, stated before the numbers: a selector qualifies when
    its exact-row share is at most 10% (plus span completion's rounding, 1 point) and its
    retrieval is within 5 points of exact; qualified selectors rank first, then by retrieval,
    then by key-token Delta NLL (lower is better; loss instruments), then by MAC share."""
    key = {r["arm"]: (r["dnll_key"] or {}).get("estimate") for r in summ.get("loss", [])}
    out = []
    for r in summ["rows"]:
        if not r["arm"].startswith("ridge+") or "/" in r["arm"] or r["retrieval"] is None:
            continue
        gap = (r["vs_exact"] or {}).get("estimate")
        ok = ((r["exact_row_share"] or 0.0) <= MAX_SHARE + 0.01 and gap is not None
              and gap >= -MARGIN)
        out.append({"arm": r["arm"], "qualifies": bool(ok), "retrieval": r["retrieval"],
                    "dnll_key": key.get(r["arm"]), "macs_share": r["macs_share"],
                    "exact_row_share": r["exact_row_share"]})
    big = float("inf")
    out.sort(key=lambda d: (not d["qualifies"], -d["retrieval"],
                            big if d["dnll_key"] is None else d["dnll_key"],
                            d["macs_share"] or big))
    return out


def _fmt_iv(iv, spec: str = "+.1f") -> str:
    """An interval as "estimate [low, high]" (points by default; ".3f" for nats)."""
    if not iv or iv.get("low") is None:
        return "-"
    return f"{iv['estimate']:{spec}} [{iv['low']:{spec}}, {iv['high']:{spec}}]"


def _pct(x, nd=1):
    return "-" if x is None else f"{100 * x:.{nd}f}%"


def _num(x, nd=2):
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(summ: dict) -> str:
    units = summ.get("timing_units", 1)
    L = [f"# Selector study{' — PARTIAL RUN' if summ['partial'] else ''}", "",
         f"Model {summ['model']}, split {summ['split']}, tail {summ['tail']}, prompt lengths "
         f"{summ['lengths']}, tasks {summ['tasks']}, {summ['samples']} filled-region samples in "
         f"all (seed {summ['seed']}); needles from eval-role haystacks (never calibration). "
         f"Maps: {summ['maps']}.", "",
         f"Command: `{summ['command']}`  ", f"Wall time: {summ['wall_seconds']:.0f} s "
         f"(needles and documents, every session of the journal) + {summ['timing_seconds']:.0f} s "
         f"(timing: {units} sample{'s' if units != 1 else ''} per arm, best of 2 each), on {summ['device']} with "
         f"{summ['threads']} torch threads (a shared 2-core CPU: times are noisy).", "",
         f"Binomial floor for n = {summ['samples']}: {_num(summ['binomial_floor_points'], 1)} "
         "points (a paired interval cannot be tighter than this on the lower side when every "
         "sample succeeds).", "",
         "| arm | n | retrieval | vs exact (pts, 95% paired CI) | exact-row share | needle rows exact "
         "| MAC share | prefill s | selector s | speedup / MAC ceiling |",
         "|---|---|---|---|---|---|---|---|---|---|"]
    for r in summ["rows"]:
        sp = (f"{r['speedup']:.2f}x / {r['mac_ceiling']:.2f}x" if r.get("speedup") and
              r.get("mac_ceiling") else "-")
        L.append(f"| {r['label']} (`{r['arm']}`) | {r['n']} | {_num(r['retrieval'], 1)} | "
                 f"{_fmt_iv(r['vs_exact'])} | {_pct(r['exact_row_share'])} | "
                 f"{_pct(r['needle_rows_exact'], 0)} | {_pct(r['macs_share'])} | "
                 f"{_num(r['prefill_seconds'])} | {_num(r['selector_seconds'])} | {sp} |")
    L += ["", "## Candidate defaults against their controls (retrieval, points, paired 95% CI)",
          "", "| arm | vs exact | vs RidgeFill alone | vs random rows | vs rows added to the "
          "tail | vs question hidden |", "|---|---|---|---|---|---|"]
    for b, c in summ["checks"].items():
        L.append(f"| `{b}`{' (default)' if b == summ['default'] else ''} | " + " | ".join(
            _fmt_iv(c[k]) for k in ("vs_exact", "vs_ridge", "vs_random", "vs_tail", "vs_blind"))
            + " |")
    lengths = sorted({n for r in summ["rows"] for n in (r.get("vs_exact_by_length") or {})}, key=int)
    if lengths:
        L += ["", "## Retrieval vs exact by prompt length (points, paired 95% CI)", "",
              "| arm | " + " | ".join(lengths) + " |", "|---|" + "---|" * len(lengths)]
        for r in summ["rows"]:
            by = r.get("vs_exact_by_length") or {}
            if by:
                L.append(f"| `{r['arm']}` | " + " | ".join(_fmt_iv(by.get(n)) for n in lengths)
                         + " |")
    L += ["", "## Ranking by the default rule", "",
          f"A selector qualifies with at most {MAX_SHARE:.0%} of prefix rows exact and retrieval "
          f"within {MARGIN:.0f} points of exact; then: retrieval, key-token Delta NLL, MAC share.",
          "", "| rank | arm | qualifies | retrieval | key-token dNLL | exact-row share |",
          "|---|---|---|---|---|---|"]
    for i, r in enumerate(summ["ranking"], 1):
        L.append(f"| {i} | `{r['arm']}` | {'yes' if r['qualifies'] else 'no'} | "
                 f"{_num(r['retrieval'], 1)} | {_num(r['dnll_key'], 3)} | "
                 f"{_pct(r['exact_row_share'])} |")
    L += ["", "## Each selector against RidgeFill alone", ""]
    for k, iv in summ["selector_vs_ridge"].items():
        L.append(f"- `{k}`: {_fmt_iv(iv)}")
    L += ["", "## Retrieval by task", "", "| arm | " + " | ".join(summ["strata"]) + " |",
          "|---|" + "---|" * len(summ["strata"])]
    for a, d in summ["by_task"].items():
        L.append(f"| `{a}` | " + " | ".join(_num(d.get(s), 1) for s in summ["strata"]) + " |")
    L += ["", "Selector seconds = prefill with the selector minus the same prefill with its rows "
          "replayed (gpu.core.select.FixedRows): the selector's own cost in the time to first token. "
          "Speedup = exact prefill time / arm prefill time; MAC ceiling = 1 / MAC share "
          f"(rfmath.cost), timed at {summ['timing_length']} tokens with no lower pass shared "
          "between arms.", ""]
    if summ.get("loss"):
        t = summ["loss_tokens"]
        L += ["## Loss on long documents (Delta NLL vs exact, nats, 95% CI by document)", "",
              f"{t['units']} documents of {summ['loss_length']} tokens in {len(t['domains'] or [])} "
              f"domains; {t['scored_tokens']} scored tokens, of which {t['novel_tokens']} novel "
              f"and {t['key_tokens']} key tokens (exact loss rises > 2 nats with the context "
              "cut to the tail before the scored stretch). Selectors read only the rows before "
              "the scored stretch.", "",
              "| arm | n | all tokens | novel tokens | key tokens | agreement | mean KL |",
              "|---|---|---|---|---|---|---|"]
        for r in summ["loss"]:
            L.append(f"| `{r['arm']}` | {r['n']} | {_fmt_iv(r['dnll_all'], '.3f')} | "
                     f"{_fmt_iv(r['dnll_novel'], '.3f')} | {_fmt_iv(r['dnll_key'], '.3f')} | "
                     f"{_num(r['agreement'])} | {_num(r['kl_mean'], 3)} |")
        L.append("")
    if summ.get("notes"):
        L += ["## Notes", ""] + [f"- {n}" for n in summ["notes"]] + [""]
    return "\n".join(L)


def plot(summ: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    exact = next((r["retrieval"] for r in summ["rows"] if r["arm"] == "exact"), None)
    if exact is not None:
        ax.axhline(exact, ls=":", lw=1.0, color="black", label=f"exact ({exact:.1f})")
    for r in summ["rows"]:
        share, y, iv = r["exact_row_share"] or 0.0, r["retrieval"], r["vs_exact"]
        if y is None or r["arm"] == "exact":
            continue
        control = "/" in r["arm"]
        ax.scatter(100 * share, y, s=40, marker="x" if control else "o")
        if not control or y > 5:  # the controls at zero would only overlap
            ax.annotate(r["arm"].replace(f"@{summ['split']}", "").replace("ridge+", "+"),
                        (100 * share, y), fontsize=7, xytext=(4, 2), textcoords="offset points")
        if iv and iv.get("low") is not None and exact is not None:
            ax.errorbar(100 * share, y, yerr=[[y - (exact + iv["low"])], [(exact + iv["high"]) - y]],
                        fmt="none", lw=0.8, alpha=0.6)
    ax.legend(loc="center right", fontsize=7, title="x: controls (random, tail, blind)",
              title_fontsize=7)
    ax.axvline(10, ls="--", lw=0.8, color="grey")
    ax.set_xlabel("exact prefix rows (% of prefix)")
    ax.set_ylabel("filled-region retrieval (RULER score, %)")
    ax.set_title(f"{summ['model']} {summ['lengths']} tail {summ['tail']}, n={summ['samples']}"
                 f"{' (partial)' if summ['partial'] else ''}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- main
def study_config(loaded, a) -> tuple[EvalConfig, EvalConfig]:
    """(the harness preset, this study's grid): primary split, ``--tail``, needles at
    ``--lengths``, and ``--docs`` documents of ``--loss-length`` tokens for loss."""
    preset = preset_for(loaded)
    score = min(preset.score_tokens, a.tail // 2)
    cfg = replace(preset, splits=preset.splits[:1], tail=a.tail,
                  needles={n: tuple(a.tasks) for n in a.lengths}, samples=a.samples,
                  seed=a.seed, docs=a.docs, loss_length=a.loss_length, score_tokens=score,
                  instruments=("needle", "loss") if a.docs else ("needle",))
    return preset, cfg


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpu.lab.tools.selector_study", description=__doc__.split("\n")[0])
    p.add_argument("--models", nargs="+", default=list(models.SMALL))
    p.add_argument("--samples", type=int, default=10, help="per task and length")
    p.add_argument("--lengths", type=int, nargs="+", default=[2048, 4096])
    p.add_argument("--tasks", nargs="+", default=["niah_single_1", "niah_multikey_1"])
    p.add_argument("--tail", type=int, default=512)
    p.add_argument("--docs", type=int, default=8, help="documents for loss (0: needles only)")
    p.add_argument("--loss-length", type=int, default=2048)
    p.add_argument("--selectors", nargs="+", default=list(SELECTORS), choices=list(SELECTORS))
    p.add_argument("--controls", nargs="+", default=["lexical", "combined"],
                   choices=list(SELECTORS), help="selectors that get the three controls")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--timing-units", type=int, default=2, help="samples of the longest length")
    p.add_argument("--reuse-timing", action="store_true",
                   help="keep the timing of the summary already written (rebuild the rest)")
    p.add_argument("--maps", default=None, help="map file (default: fitted by the harness)")
    p.add_argument("--out-dir", type=Path, default=Path("results/selectors"))
    p.add_argument("--device", default=None)
    p.add_argument("--quiet", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    command = "python -m gpu.lab.tools.selector_study " + " ".join(sys.argv[1:] if argv is None else argv)
    from ..eval.journal import Journal
    from ...maps.files import load_maps

    for name in a.models:
        t0 = time.time()
        loaded = models.load(name, device=a.device)
        preset, cfg = study_config(loaded, a)
        S, T = cfg.splits[0], cfg.tail
        maps = None
        if a.maps:
            maps = {S: load_maps(Path(a.maps).expanduser(), fingerprint=loaded.fingerprint(),
                                 split=S, dtype=loaded.model.dtype, device=loaded.model.device)}
        maps = maps or ev.ensure_maps(loaded, cfg, a.out_dir / loaded.name, progress=not a.quiet)
        arms = arms_for(S, T, tuple(a.controls), tuple(a.selectors))
        rep = ev.evaluate_model(loaded, cfg, a.out_dir, CorpusTexts(), maps=maps,
                                command=command, progress=not a.quiet, preset=preset, arms=arms)
        if rep is None:  # a rank other than 0 under torchrun: rank 0 merged and summarizes
            continue
        sessions = [r for r in Journal(a.out_dir / loaded.name / "records.jsonl").records()
                    if r.get("instrument") == "session"]  # a resumed run counts every session
        wall = sum(r.get("wall_seconds", 0.0) for r in sessions) or time.time() - t0
        t1 = time.time()
        root = a.out_dir / loaded.name  # beside the harness's report (a model path: its folder name)
        previous = root / "summary.json"
        if a.reuse_timing:
            old = json.loads(previous.read_text()) if previous.is_file() else {}
            if "timing" not in old or "timing_command" not in old:
                raise SystemExit(f"--reuse-timing: {previous} holds no timing (or not the "
                                 "command that measured it); run without --reuse-timing")
            timing, timing_s, threads = old["timing"], old["timing_seconds"], old["threads"]
            timing_units, timing_command = old["timing_units"], old["timing_command"]
            shown = f"{timing_command}` (timing); summary rebuilt by `{command}"
        else:
            sess = Session(loaded, maps, reuse_lower=False)  # every prefill runs its own
            units = [u for u in needle_units(loaded.tokenizer, cfg, CorpusTexts(), {})
                     if u.meta["length"] == max(a.lengths)]
            timing = (time_arms(sess, units, arms, a.timing_units, not a.quiet)
                      if a.timing_units else {})
            timing_s, threads = time.time() - t1, torch.get_num_threads()
            timing_command = shown = command
            timing_units = min(a.timing_units, len(units))
        short = a.samples < 20 or (a.docs and a.docs < 24)
        meta = {"model": loaded.name, "split": S, "tail": T, "lengths": a.lengths, "tasks": a.tasks,
                "seed": a.seed, "command": shown, "timing_command": timing_command,
                "wall_seconds": wall,
                "timing_seconds": timing_s, "device": str(loaded.model.device),
                "threads": threads,
                "maps": a.maps or f"fitted by the harness (lambda {maps[S].meta.get('lambda')})",
                "samples_asked": a.samples,
                "strata": rep["needles"].get("strata", []),
                "timing_units": timing_units, "timing_length": max(a.lengths),
                "docs": a.docs, "loss_length": a.loss_length,
                "notes": [f"{a.samples} samples per task and length and {a.docs} documents (the "
                          "full study's minimum is 20 and 24): sized to a shared 2-core CPU."]
                if short else []}
        summ = summarize(rep, timing, arms, meta)
        write_json(root / "summary.json", summ)
        write_text(root / "summary.md", markdown(summ))
        plot(summ, root / "retrieval_vs_share.png")
        print(f"{loaded.name}: {summ['samples']} samples -> {root}/summary.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
