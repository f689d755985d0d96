"""``ridgefill advise``: paper section 9's recipe (steps 2-5) automated for one model.

1. Step 4 first: the engine with the fill switched off must reproduce the stock forward
   bitwise, so every difference measured after is the fill's.
2. Steps 2-3: one capture fits maps for every split of a small frontier (1/4, 3/8, 1/2, 5/8
   depth and POP's split; gpu.maps.fit), and the RidgeFill fill runs at each with the
   ``--tails`` and with no rows or the default rows, beside POP native and exact
   (gpu.lab.eval.frontier on the harness: resumable, paired intervals).
3. Step 5: each configuration's filled-region retrieval on synthetic needles at the user's
   ``--lengths`` and its key-token dNLL on documents, both on held-out calibration text:
   documents of the calibration source the capture never read (the built-in set's lambda
   role, or the last fifth of a ``--calib`` folder, which only scores lambda).
4. The recommendation follows :func:`recommend`'s rule, stated before any number: the
   frontier screens, then the configurations that keep the budget there are confirmed one
   at a time, cheapest first, on more held-out needles at another seed (:func:`confirm`);
   the MAC ceiling (1 / MAC share) and the measured prefill speedup are printed beside it;
   then it is rerun beside exact on samples the advisor never saw (:func:`verify`).

Writes ``<out>/<model>/advice.json`` and ``advice.png`` beside the frontier's files.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path

import torch

from rfmodel.atomic import atomic_path, write_json

from ...core import advised, models
from ...core.models import BUILTINS
from ...core.config import PrefillConfig
from ...core.engine import Engine
from ...data import corpus
from ..eval import frontier
from ..eval.options import FrontierOptions
from ..eval.frontier_report import interval, plot
from ..eval.harness import ensure_maps, evaluate_model
from ..eval.instruments import Arm
from ..eval.units import CorpusTexts
from ...maps.advice import write_advice
from .advise_options import BUDGET, CONFIRM, AdviseOptions

DIAGNOSTICS = ("*/splice-*",)  # the frontier's arms no user can run (they read exact's cache)


class HeldOutTexts:
    """Haystacks and documents from held-out calibration documents (never captured)."""

    name = "heldout-calibration"

    def __init__(self, docs: list):
        if not docs:
            raise ValueError("no held-out calibration documents: give --calib a folder of at "
                             "least two .txt/.md files (its last fifth is held out)")
        self.docs = docs

    def haystack(self, min_chars: int, seed: int) -> str:
        ordered = sorted(self.docs, key=lambda d: hashlib.sha256(f"{seed}:{d.doc_id}".encode())
                         .hexdigest())
        text = "\n\n".join(d.text.strip() for d in ordered)
        if len(text) < min_chars:
            raise ValueError(f"the held-out calibration text holds {len(text)} characters; "
                             f"needles at these lengths need {min_chars}: add documents to "
                             "--calib or ask for shorter --lengths")
        return text

    def documents(self, min_chars: int) -> list:
        return [d for d in self.docs if len(d.text) >= min_chars]


def held_out(calib: str, heldout_docs: int = 2, seed: int = 0) -> HeldOutTexts:
    """The calibration documents gpu.maps.fit does not capture (its lambda documents and,
    for the built-in set, the rest of the lambda role)."""
    if calib == "builtin":
        return HeldOutTexts(corpus.lambda_set(seed=seed))
    docs = corpus.read_folder(calib)
    n_held = min(heldout_docs, max(len(docs) // 5, 1)) if len(docs) > 1 else 0
    return HeldOutTexts(docs[len(docs) - n_held:] if n_held else [])


@torch.inference_mode()
def fill_off_is_exact(loaded, n: int = 64) -> bool:
    """Paper 9 step 4: the engine with the fill switched off gives the stock forward's
    logits bitwise."""
    ids = torch.arange(n)[None] % loaded.model.config.get_text_config().vocab_size
    ids = ids.to(loaded.model.device)
    ours = Engine(loaded.model).prefill(ids, PrefillConfig(fill="exact"), logits_rows=n).logits
    stock = loaded.model(input_ids=ids).logits[0]
    return bool(torch.equal(ours, stock))


def keeps(row: dict, budget: dict) -> bool:
    """Retrieval at most ``budget['retrieval']`` points below exact and key-token dNLL at most
    ``budget['key']`` nats (point estimates; no key tokens: retrieval alone)."""
    if not row.get("vs_exact") or row["vs_exact"].get("estimate") is None:
        return False
    key = (row.get("dnll_key") or {}).get("estimate")
    return row["vs_exact"]["estimate"] >= -budget["retrieval"] and (key is None or key <= budget["key"])


def grid_arms_maps(lm, grid: FrontierOptions, out_dir: Path, calib: str, fit_kw: dict | None,
                   progress: bool) -> tuple:
    """(the frontier's harness config, its arms by name, its maps) of the advisor's ``grid``:
    what the confirmation and the rerun start from."""
    cfg, fr = frontier.frontier_config(lm, grid)
    maps = ensure_maps(lm, cfg, out_dir / lm.name, calib, progress, kinds=fr.kinds,
                       **(fit_kw or {}))
    return cfg, {a.name: a for a in fr.arms()}, maps


def beside_exact(lm, cfg, where: Path, texts, maps, arm: Arm, budget: dict,
                 progress: bool) -> dict:
    """``arm`` run beside exact on ``cfg``'s samples (a resumable journal in ``where``): its
    paired retrieval and key-token dNLL against exact, and whether they keep ``budget``."""
    rep = evaluate_model(lm, cfg, where, texts, maps=maps,
                         arms=[Arm("exact", PrefillConfig(fill="exact")), arm],
                         progress=progress, command="ridgefill " + " ".join(sys.argv[1:]))
    row = {"vs_exact": rep["needles"]["arms"][arm.name]["vs_exact"],
           "dnll_key": rep.get("documents", {}).get("arms", {}).get(arm.name, {}).get("dnll_key")}
    return {**row, "arm": arm.name, "seed": cfg.seed, "samples": rep["counts"]["needle_samples"],
            "documents": rep["counts"]["documents"], "keeps_budget": keeps(row, budget)}


def confirm(lm, candidates: list[dict], budget: dict, grid: FrontierOptions, out_dir: Path, texts,
            calib: str, fit_kw: dict | None, progress: bool, samples: int = CONFIRM["samples"],
            docs: int = CONFIRM["docs"], tries: int = CONFIRM["tries"]) -> dict[str, dict]:
    """The rule's second step: the configurations that kept the budget on the frontier
    (``candidates``, in :func:`screened`'s order), each rerun beside exact on ``samples`` needles per
    task and length and ``docs`` documents of the same held-out text at seed + 100, until one
    keeps the budget with its retrieval allowance scaled by CONFIRM['margin'] or ``tries``
    have been run. Written to ``<out>/confirm/<model>`` (resumable)."""
    cfg, by_name, maps = grid_arms_maps(lm, grid, out_dir, calib, fit_kw, progress)
    cfg = replace(cfg, seed=grid.seed + CONFIRM["seed_offset"], samples=samples, docs=docs,
                  instruments=("needle", "loss") if docs else ("needle",),
                  minimum={"samples": samples, "docs": docs, "domains": min(4, docs)})
    done: dict[str, dict] = {}
    for r in candidates[:tries]:
        done[r["arm"]] = {**beside_exact(lm, cfg, out_dir / "confirm", texts, maps,
                                         by_name[r["arm"]], confirm_budget(budget), progress),
                          "texts": texts.name}
        if done[r["arm"]]["keeps_budget"]:
            break
    return done


def confirm_budget(budget: dict) -> dict:
    """The budget a confirmation must keep: the retrieval allowance times CONFIRM['margin']."""
    return {**budget, "retrieval": budget["retrieval"] * CONFIRM["margin"]}


def verify(lm, arm_name: str, budget: dict, grid: FrontierOptions, out_dir: Path, calib: str,
           fit_kw: dict | None, progress: bool, seed: int | None = None,
           samples: int | None = None, docs: int | None = None) -> dict:
    """Issue 20's target: the recommendation rerun beside exact on samples the advisor never
    saw (evaluation-role text of the built-in corpus; ``seed``, default the advisor's next)
    keeps the budget. ``samples`` (per task and length) / ``docs``: the rerun's size, by
    default the advisor's own; at 4 samples per cell a needle is 6.25 points, coarser than
    a 5-point budget, so a larger rerun resolves it. Written to ``<out>/verify`` (the next
    seed) or ``<out>/verify-seed<S>``."""
    seed = grid.seed + 1 if seed is None else seed
    cfg, by_name, maps = grid_arms_maps(lm, grid, out_dir, calib, fit_kw, progress)
    size = {k: v for k, v in (("samples", samples), ("docs", docs)) if v is not None}
    where = out_dir / ("verify" if seed == grid.seed + 1 else f"verify-seed{seed}")
    row = beside_exact(lm, replace(cfg, seed=seed, **size), where, CorpusTexts(), maps,
                       by_name[arm_name], budget, progress)
    return {**row, "texts": "builtin eval role"}


def earlier_checks(advice_path: Path, arm: str, fresh: dict | None) -> list[dict]:
    """The unseen-sample reruns of the same recommendation that an earlier advice.json holds
    (another seed or size than ``fresh``), kept beside the new one rather than overwritten."""
    if not advice_path.is_file():
        return []
    old = json.loads(advice_path.read_text())
    checks = old.get("earlier_checks", []) + ([old["fresh_check"]] if old.get("fresh_check") else [])
    size = ("seed", "samples", "documents")
    new = tuple(fresh[k] for k in size) if fresh else None
    return [c for c in checks if c["arm"] == arm and tuple(c[k] for k in size) != new]


def measured_all(report_path: Path) -> bool:
    """Whether the frontier measured every record it planned (the frontier's own "partial"
    flag also counts documents in fewer domains than asked, which a user's calibration
    folder may not have)."""
    rep = json.loads(report_path.read_text())
    want = rep["meta"].get("expected", {})
    return bool(want) and all(rep["counts"].get(k, 0) >= v for k, v in want.items())


def screened(summary: dict, budget: dict) -> list[dict]:
    """The frontier's configurations that keep ``budget`` (point estimates, :func:`keeps`), in
    the rule's order: lowest MAC share, then higher retrieval, then lower key-token dNLL."""
    ok = [r for r in summary["rows"]
          if r["arm"] != "exact" and r["macs_share"] is not None and keeps(r, budget)]
    return sorted(ok, key=lambda r: (r["macs_share"], -r["retrieval"],
                                     (r["dnll_key"] or {}).get("estimate") or 0.0))


def recommend(summary: dict, budget: dict, confirmed: dict[str, dict] | None = None) -> dict:
    """The rule, stated before any number. Screen: a configuration keeps the budget when its
    retrieval is at most ``budget['retrieval']`` points below exact (point estimate of the
    paired difference) and its key-token dNLL against exact is at most ``budget['key']``
    nats (point estimate; a run with no key tokens is judged on retrieval alone); those are
    ordered by :func:`screened`. Confirm (``confirmed``: arm -> :func:`confirm`'s rerun): the
    first, in that order, whose confirmation keeps the budget with the retrieval allowance
    scaled by CONFIRM['margin'] wins; one not confirmed stops the search. Without
    ``confirmed`` the screen's first wins. When none wins, the advice is exact prefill."""
    r = None
    for row in screened(summary, budget):
        tried = None if confirmed is None else confirmed.get(row["arm"])
        if confirmed is not None and tried is None:
            break  # not confirmed (the tries were spent): the search stops
        if tried is None or tried["keeps_budget"]:
            r = row
            break
    if r is None:
        why = ("no configuration keeps the budget" if confirmed is None else
               "no configuration keeps the budget on the frontier and then on its confirmation")
        return {"arm": "exact", "keeps_budget": False, "budget": budget,
                "why": why + ": use exact prefill (--fill exact)"}
    flags = {"split": r["split"], "tail": r["tail"], "fill": r["fill"], "rows": r["rows"],
             **({"rescale": r["rescale"]} if r["rescale"] else {}),
             **({"values_fill": r["values_fill"]} if r.get("values_fill") else {})}
    return {"arm": r["arm"], "keeps_budget": True, "budget": budget, "config": flags,
            "flags": " ".join(f"--{k.replace('_', '-')} {v}" for k, v in flags.items()),
            "retrieval": r["retrieval"], "vs_exact": r["vs_exact"], "dnll_key": r["dnll_key"],
            "macs_share": r["macs_share"], "mac_ceiling": r["mac_ceiling"],
            "speedup": r["speedup"], "confirmation": (confirmed or {}).get(r["arm"])}


def with_maps(path: Path, rec: dict, maps: dict, advice: dict, advice_json: Path) -> str:
    """``--maps``: the recommended configuration's map file (from the advisor's own ``maps``,
    {split: map set or {kind: map set}}) copied to ``path`` with the recommendation and its
    evidence beside it (gpu.maps.advice); a recommendation that reads no maps, or two map
    files, writes nothing and says what to run instead. Returns the line to print."""
    if not rec["keeps_budget"]:
        return f"--maps: the advice is exact prefill, which reads no maps; nothing written to {path}"
    config = PrefillConfig(**rec["config"])
    if len(config.map_kinds) != 1:
        reads = "no maps" if not config.map_kinds else f"two map files ({', '.join(config.map_kinds)})"
        return (f"--maps: {rec['arm']} reads {reads}; nothing written to {path}: run it with "
                f"{rec['flags']}" + (" and --maps FILE of each kind (`ridgefill fit --kinds`)"
                                     if config.map_kinds else ""))
    at_split = maps[config.split]
    found = at_split[config.map_kinds[0]] if isinstance(at_split, dict) else at_split
    evidence = {k: rec[k] for k in ("budget", "vs_exact", "dnll_key", "confirmation",
                                    "macs_share", "mac_ceiling")}
    evidence |= {k: advice[k] for k in ("model", "command", "seed", "samples", "documents",
                                        "fresh_check", "calib")}
    where = write_advice(path, found.path, rec, {**evidence, "advice_json": str(advice_json)})
    return f"--maps: {path} holds the maps of {rec['arm']}; its advice: {where}"


def table(summary: dict) -> str:
    """The frontier as a plain-text table, by MAC share."""
    out = [f"{'configuration':34} {'MAC share':>9} {'ceiling':>8} {'speedup':>8} "
           f"{'retrieval':>9} {'vs exact':>9} {'key dNLL':>9}"]
    for r in sorted(summary["rows"], key=lambda r: r["macs_share"] or 9.0):
        key = (r["dnll_key"] or {}).get("estimate")
        drop = (r["vs_exact"] or {}).get("estimate")
        cells = [r["macs_share"], r["mac_ceiling"], r["speedup"], r["retrieval"], drop, key]
        fmt = ["{:9.3f}", "{:7.2f}x", "{:7.2f}x", "{:9.1f}", "{:+9.1f}", "{:+9.3f}"]
        out.append(f"{r['arm']:34} " + " ".join("-".rjust(len(f.format(0))) if v is None
                                              else f.format(v) for v, f in zip(cells, fmt)))
    return "\n".join(out)


def ship(model: str, out_dir: Path, record: Path) -> Path | None:
    """A built-in model's advice written into the repository's record (``results/advise`` of
    this checkout) is copied, byte for byte, to the package's copy that the defaults read
    (gpu/core/advice/<model>.json): the command rewrites both, nothing by hand. Elsewhere (an
    installed package, another out dir) nothing is copied; the path copied to, or None."""
    checkout = Path(advised.__file__).resolve().parents[2]
    if model not in BUILTINS or Path(out_dir).resolve() != (checkout / advised.RECORD).resolve():
        return None
    target = Path(advised.__file__).parent / advised.SHIPPED / f"{model}.json"
    with atomic_path(target) as tmp:
        shutil.copyfile(record, tmp)
    return target


def run(model: str, opts: AdviseOptions = AdviseOptions(), *, device: str | None = None,
        dtype=None, progress: bool = True, loaded=None, fit_kw: dict | None = None,
        loss_length: int | None = None) -> dict:
    """Run the advisor on ``model`` (or an already ``loaded`` one) as ``opts`` says; returns
    the advice dict. The rule's confirmation: :func:`confirm` (``confirm_samples=0``: the
    screen alone decides); ``check``: the rerun on samples the advisor never saw
    (:func:`verify`)."""
    o = opts
    budget = {**BUDGET, **{k: float(v) for k, v in o.budget}}
    out_dir, samples, docs, seed, calib = o.out_dir, o.samples, o.docs, o.seed, o.calib
    lm = loaded if loaded is not None else models.load(model, device=device, dtype=dtype)
    lengths = sorted(o.lengths)
    tails = o.tails
    exact_ok = fill_off_is_exact(lm)
    texts = held_out(calib, (fit_kw or {}).get("heldout_docs", 2), seed)
    grid = FrontierOptions(models=(lm.name,), out_dir=out_dir, samples=samples, docs=docs,
                           lengths=tuple(lengths), tails=tuple(tails), seed=seed,
                           loss_length=loss_length or min(lengths), fills=("ridge",),
                           checks=(), cut=DIAGNOSTICS,  # prefill configurations only
                           timing_units=o.timing_units)
    [summary] = frontier.run(grid, progress=progress, loaded=lm, texts=texts, fit_kw=fit_kw,
                             calib=calib)
    complete = measured_all(out_dir / lm.name / "report.json")
    confirmed = (confirm(lm, screened(summary, budget), budget, grid, out_dir, texts, calib,
                         fit_kw, progress, o.confirm_samples, o.confirm_docs, o.confirm_tries)
                 if o.confirm_samples and complete else None)
    rec = recommend(summary, budget, confirmed)
    fresh = (verify(lm, rec["arm"], budget, grid, out_dir, calib, fit_kw, progress,
                    o.check_seed, o.check_samples, o.check_docs)
             if o.check and rec["keeps_budget"] else None)
    root = out_dir / lm.name
    advice = {"model": lm.name, "lengths": lengths, "calib": calib, "texts": texts.name,
              "seed": seed, "command": "ridgefill " + " ".join(sys.argv[1:]),
              "fill_off_bitwise_exact": exact_ok, "recommendation": rec,
              "confirmations": None if confirmed is None else list(confirmed.values()),
              "fresh_check": fresh,
              "earlier_checks": earlier_checks(root / "advice.json", rec["arm"], fresh),
              "complete": complete, "study_size_notes": summary["partial_reasons"],
              "frontier": summary["rows"],
              "samples": summary["samples"], "documents": summary["documents"]}
    write_json(root / "advice.json", advice)
    ship(lm.name, out_dir, root / "advice.json")
    plot(summary, root / "advice.png")
    if o.maps is not None:
        maps = grid_arms_maps(lm, grid, out_dir, calib, fit_kw, progress)[2]
        print(with_maps(o.maps, rec, maps, advice, root / "advice.json"))
    print(table(summary))
    if not complete:
        print("the run stopped before every record was measured: rerun the command to resume")
    print(f"\nbudget: retrieval within {budget['retrieval']:g} points of exact, key-token dNLL "
          f"<= {budget['key']:g} nats; fill off reproduces exact bitwise: {exact_ok}")
    for c in advice["confirmations"] or []:
        print(f"confirmation of {c['arm']} on {c['samples']} held-out needles and "
              f"{c['documents']} documents (seed {c['seed']}): retrieval "
              f"{interval(c['vs_exact'])} points vs exact, key-token dNLL "
              f"{interval(c['dnll_key'], '+.3f')} nats; keeps the budget with "
              f"{CONFIRM['margin']:g} of the retrieval allowance: {c['keeps_budget']}")
    if rec["keeps_budget"]:
        print(f"recommended: {rec['arm']} ({rec['flags']}): MAC share {rec['macs_share']:.3f} "
              f"(ceiling {rec['mac_ceiling']:.2f}x), measured speedup "
              f"{rec['speedup'] or float('nan'):.2f}x -> {root}/advice.json")
    else:
        print(f"recommended: exact prefill ({rec['why']}) -> {root}/advice.json")
    for c in advice["earlier_checks"]:
        print(f"earlier rerun on {c['samples']} needle samples and {c['documents']} documents "
              f"(seed {c['seed']}): retrieval {interval(c['vs_exact'])} points vs exact; keeps "
              f"the budget: {c['keeps_budget']}")
    if fresh is not None:
        print(f"rerun on {fresh['samples']} needle samples and {fresh['documents']} documents it "
              f"never saw (seed {fresh['seed']}): retrieval {interval(fresh['vs_exact'])} points "
              f"vs exact, key-token dNLL {interval(fresh['dnll_key'], '+.3f')} nats; keeps the "
              f"budget: {fresh['keeps_budget']}")
    return advice
