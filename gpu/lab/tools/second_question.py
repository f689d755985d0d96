"""A second question on the carried cache (paper Appendix D), measured.

On filled-region niah_multikey_1 samples (one queried needle among four with other keys),
the first question is prefilled with the document exactly as ``RidgeFill.generate`` does and
answered greedily until its answer holds the expected value (or 32 tokens, or the end token);
then, on the same cache, a second question asks for another needle's key (drawn per sample
from the seed), answered until it holds a seven-digit number (or 24 tokens), and is scored on
that first seven-digit number. The rows chosen
for the first question are never re-chosen: the paper's caveat is that a question-dependent
selector protects the first needle, not the second, and ``covered`` records the share of the
second needle's rows that the first question's rows already made exact.

    python -m gpu.lab.tools.second_question --models smollm2-135m gemma3-270m --samples 20

Journal and results: ``results/second_question/<model>/`` (records.jsonl, summary.md/.json).
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rfmath.stats import binomial_floor, paired_bootstrap
from rfmodel.atomic import write_json, write_text

from ...api import RidgeFill
from ...conversation import Conversation
from ...core import models
from ...core.config import PrefillConfig
from ...core.engine import Engine
from ..eval import tasks
from ..eval.grid import preset_for
from ..eval.harness import ensure_maps
from ..eval.journal import Journal
from ..eval.units import CorpusTexts, overhead, sample, sig

TASK = "niah_multikey_1"
LENGTHS = {"smollm2-135m": 2048, "gemma3-270m": 4096}
FIRST_TOKENS, SECOND_TOKENS = 32, 24
NUMBER = re.compile(r"\d{7}")


RESELECT = "ridgefill+lexical+reselect"


def arms(split: int, tail: int, reselect: bool) -> dict[str, PrefillConfig]:
    """Exact, RidgeFill alone, + the default rows (lexical), + the probe, and (where rows can
    be made exact in place: no sliding-window or GDN layer above the split) the lexical rows
    re-selected for the second question (``RESELECT``)."""
    base = PrefillConfig(split=split, tail=tail, rows="none")
    out = {"exact": PrefillConfig(fill="exact"), "ridgefill": base,
           "ridgefill+lexical": base.replace(rows="lexical"),
           "ridgefill+probe": base.replace(rows="probe")}
    if reselect:
        out[RESELECT] = base.replace(rows="lexical")
    return out


def second_needle(s: tasks.NeedleSample, seed: int) -> tasks.Needle:
    """Another key's needle than the one asked first, drawn from the sample's seed."""
    others = [n for n in s.needles if not n.queried]
    return random.Random(f"second:{seed}:{s.seed}:{s.index}").choice(others)


def first_number(answer: str) -> str | None:
    m = NUMBER.search(answer)
    return m.group(0) if m else None


def samples_for(loaded, cfg, length: int, n: int) -> list:
    """The first ``n`` seeded niah_multikey_1 samples whose needles (all four) lie before the
    exact tail, with their prompts."""
    tok, texts = loaded.tokenizer, CorpusTexts()
    hay = texts.haystack(length * 8, cfg.seed)
    reserve, out, i = overhead(tok, cfg.chat), [], 0
    while len(out) < n and i < n * cfg.max_draws:
        s, p = sample(tok, cfg, TASK, length, hay, i, reserve)
        i += 1
        shift = p.text.find(s.context)
        if p.n <= length and tasks.in_filled_region(s, p.spans, p.n, cfg.tail, shift):
            out.append((s, p, shift))
    return out


def run_sample(rf: RidgeFill, s, p, shift: int, chat: bool, answer_prefix: bool,
               reselect: bool = False) -> dict:
    """Both questions under one arm; what was asked, answered and covered."""
    conv = Conversation(rf, s.context, chat)
    prefix1 = s.answer_prefix if answer_prefix else ""
    a1 = conv.ask(s.question, FIRST_TOKENS, answer_prefix=prefix1,
                  stop=lambda text: tasks.all_found(text, s.expected))
    assert conv.ids[: p.n] == p.ids[0].tolist(), "the first turn is the study's prompt"
    second = second_needle(s, 0)
    q2 = s.question.replace(s.query, second.key)
    prefix2 = prefix1.replace(s.query, second.key)
    rows = tasks.needle_token_positions(s, p.spans, shift)[s.needles.index(second)]
    covered = _share(rows, conv)
    a2 = conv.ask(q2, SECOND_TOKENS, answer_prefix=prefix2,
                  stop=lambda text: first_number(text) is not None, reselect=reselect)
    plan = conv.prefill.plan
    return {"first": {"answer": a1.text, "score": tasks.score(prefix1 + a1.text, s.expected)},
            "second": {"question": q2, "key": second.key, "value": second.value,
                       "answer": a2.text, "score": float(first_number(a2.text) == second.value),
                       "seconds": a2.seconds, "fed_tokens": a2.new_prompt_tokens,
                       "repaired_rows": a2.repaired_rows, "repair_seconds": a2.repair_seconds,
                       "covered_after_repair": _share(rows, conv)},
            "covered": covered,
            "exact_prefix_rows": 0 if plan is None else int(plan.exact_rows.size)}


def _share(rows: list[int], conv: Conversation) -> float:
    """Share of ``rows`` whose late-layer entries are exact in the conversation's cache."""
    if conv.prefill.plan is None:
        return 1.0
    exact = set(conv.exact_rows.tolist())
    return len([r for r in rows if r in exact]) / max(len(rows), 1)


def run_model(name: str, n: int, out_dir: Path, device: str | None = None,
              progress: bool = True) -> dict:
    loaded = models.load(name, device=device)
    cfg = preset_for(loaded)
    length = LENGTHS.get(name, 2048)
    root = out_dir / loaded.name
    root.mkdir(parents=True, exist_ok=True)
    maps = ensure_maps(loaded, cfg, root, progress=progress)[cfg.splits[0]]
    journal = Journal(root / "records.jsonl")
    in_place = all(Engine(loaded.model).adapter.layer_info(l).kind == "attention"
                   for l in range(cfg.splits[0], loaded.n_layers))
    configs = arms(cfg.splits[0], cfg.tail, in_place)
    runners = {a: RidgeFill(loaded, None if c.fill == "exact" else maps, c)
               for a, c in configs.items()}
    units = samples_for(loaded, cfg, length, n)
    started = time.time()
    for s, p, shift in tqdm(units, desc=f"{name} second question", disable=not progress):
        for arm, rf in runners.items():
            key = f"{arm}|{s.index}|{sig(p.ids[0].tolist(), s.expected, loaded.fingerprint())}"
            if key in journal:
                continue
            rec = run_sample(rf, s, p, shift, cfg.chat, cfg.answer_prefix, arm == RESELECT)
            journal.add({"key": key, "arm": arm, "index": s.index, "length": length, **rec})
    summary = summarize(journal, list(configs), [s.index for s, _, _ in units], name, length,
                        cfg, time.time() - started)
    write_json(root / "summary.json", summary)
    write_text(root / "summary.md", markdown(summary))
    return summary


def summarize(journal: Journal, arm_names: list[str], indices: list[int], model: str,
              length: int, cfg, seconds: float) -> dict:
    """Scores per arm, paired intervals against exact (points), and the coverage share."""
    by = {(r["arm"], r["index"]): r for r in journal.records()}
    have = [i for i in indices if all((a, i) in by for a in arm_names)]
    out = {"model": model, "task": TASK, "length": length, "n": len(have), "seed": cfg.seed,
           "split": cfg.splits[0], "tail": cfg.tail, "binomial_floor": binomial_floor(len(have))
           if have else None, "session_seconds": seconds,
           "command": "python -m gpu.lab.tools.second_question " + " ".join(sys.argv[1:]),
           "arms": {}}
    exact = {q: np.array([by[("exact", i)][q]["score"] for i in have]) for q in ("first", "second")}
    for a in arm_names:
        row = {}
        for q in ("first", "second"):
            x = np.array([by[(a, i)][q]["score"] for i in have]) * 100
            row[q] = float(x.mean()) if have else None
            if a != "exact" and have:
                iv = paired_bootstrap(x, exact[q] * 100, seed=0)
                row[f"{q}_vs_exact"] = [iv.estimate, iv.low, iv.high]
        row["covered"] = float(np.mean([by[(a, i)]["covered"] for i in have])) if have else None
        row["covered_after_repair"] = float(np.mean(
            [by[(a, i)]["second"].get("covered_after_repair", by[(a, i)]["covered"])
             for i in have])) if have else None
        row["repaired_rows"] = float(np.mean([by[(a, i)]["second"].get("repaired_rows", 0)
                                              for i in have])) if have else None
        row["repair_seconds"] = float(np.mean([by[(a, i)]["second"].get("repair_seconds", 0.0)
                                               for i in have])) if have else None
        row["exact_prefix_rows"] = float(np.mean([by[(a, i)]["exact_prefix_rows"] for i in have])) \
            if have else None
        out["arms"][a] = row
    return out


def markdown(s: dict) -> str:
    def iv(v):
        return "-" if v is None else f"{v[0]:+.1f} [{v[1]:+.1f}, {v[2]:+.1f}]"

    lines = [f"# Second question on the carried cache: {s['model']}", "",
             f"`{s['command']}` (seed {s['seed']}; {s['task']} at {s['length']} tokens, n = "
             f"{s['n']}; split {s['split']}, tail {s['tail']}; retrieval in points, paired 95% "
             f"bootstrap intervals against exact; binomial floor {s['binomial_floor']:.1f})", "",
             "| arm | first question | vs exact | second question | vs exact | second needle "
             "exact after the first question | after re-selection | rows repaired (s) | "
             "exact prefix rows |", "|---|---|---|---|---|---|---|---|---|"]
    for a, r in s["arms"].items():
        lines.append(f"| {a} | {r['first']:.1f} | {iv(r.get('first_vs_exact'))} | "
                     f"{r['second']:.1f} | {iv(r.get('second_vs_exact'))} | "
                     f"{100 * r['covered']:.0f}% | {100 * r['covered_after_repair']:.0f}% | "
                     f"{r['repaired_rows']:.1f} ({r['repair_seconds']:.2f}) | "
                     f"{r['exact_prefix_rows']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(LENGTHS))
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--out-dir", type=Path, default=Path("results/second_question"))
    ap.add_argument("--device", default=None)
    a = ap.parse_args(argv)
    for name in a.models:
        s = run_model(name, a.samples, a.out_dir, a.device)
        print(markdown(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
