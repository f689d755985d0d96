"""``ridgefill eval``: the evaluation harness and the reference study (paper sections 3, 6).

Instruments (gpu.lab.eval.instruments): filled-region needle retrieval (RULER-style tasks, only the
samples whose needles all lie in the prefix, one fixed sample set per model shared by every
arm), long-document loss (per-document Delta NLL against exact on novel and key tokens of
the same final stretch inside every arm's tail), agreement (greedy agreement and
KL(exact || arm) over exact's greedy continuation, fed one token at a time), splices (exact
keys / values / both) and, beside every selected-rows arm, its controls (count-matched
random rows, the same count added to the tail, the question hidden from the selector).
Intervals and the report: gpu.lab.eval.report.

Cost: a needle sample's arms share work that does not change what they measure. The exact
arm's stock forward hands its first layers to every split's engine (Engine.adopt_lower), the
arms at one split share that lower-layer pass, and all answers decode greedily as one batch
(gpu.lab.eval.batch_decode), each up to RULER's 128 new tokens, the end token, or the point where it
holds every expected value.

Every measurement is appended to ``<out>/<model>/records.jsonl`` as it finishes
(gpu.lab.eval.journal); a rerun skips what is there and only aggregates again; a stopped run still
writes its partial report. Under torchrun each rank measures a disjoint, seed-determined share
into ``records.rank<r>-of-<w>.jsonl`` and rank 0 reports on the merged shares (gpu.lab.eval.shard). Maps are fitted once with gpu.maps.fit on the built-in calibration set
and cached under ``<out>/<model>/maps`` (gpu.lab.eval.map_cache: a run loads the splits any earlier
fit with the same settings holds and fits only the rest).

``ridgefill eval study`` runs the study's grid (``make eval``); ``ridgefill eval mini``
runs every instrument once on a tiny random Llama with a tokenizer trained on synthetic text
(for CI, well under two minutes on two cores).
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch
from tqdm import tqdm

from . import instruments as ins
from . import map_cache
from ...core import models
from . import tasks
from .instruments import Arm, Session
from .grid import EvalConfig, preset_for, study_arms
from .decode_check import checked_loss
from .journal import Journal
from .shard import Shard, SharedJournal, merged_records
from .loss_masks import novel_token_mask
from .options import MiniOptions, StudyOptions
from .units import CorpusTexts, Unit, doc_units, needle_units, sig

# ----------------------------------------------------------------------------- running
def _key(unit: Unit, arm: Arm, extra) -> str:
    return f"{unit.kind}|{unit.id}|{arm.name}|{sig(arm.spec(), unit.sig, extra)}"


def run_needles(sess: Session, journal: Journal, units: list[Unit], arms: list[Arm],
                fingerprint: str, progress: bool = True) -> int:
    """Every arm on every needle sample (a sample's arms decode as one batch, so a sample is
    journaled whole); returns how many records were measured now."""
    done = 0
    bar = tqdm(total=len(units) * len(arms), desc=f"{sess.loaded.name} needles", unit="run",
               disable=not progress, dynamic_ncols=True)
    for u in units:
        finish_requested()
        keys = {a.name: _key(u, a, [fingerprint, u.max_new_tokens]) for a in arms}
        counts = {a.name: int(journal.get(k)["exact_prefix"]) for a in arms
                  if (k := keys[a.name]) in journal}
        todo = [a for a in arms if keys[a.name] not in journal]
        if todo:
            recs = ins.needles(sess, todo, u.prompt, u.expected, u.needle_rows,
                               max_new_tokens=u.max_new_tokens, counts=counts, seed=u.seed)
            for arm, r in zip(todo, recs):
                journal.add({"key": keys[arm.name], "instrument": "needle", "unit": u.id,
                             "stratum": u.stratum, "arm": arm.name, **u.meta, **r})
            done += len(todo)
        bar.update(len(arms))
    bar.close()
    return done


def run_docs(sess: Session, journal: Journal, units: list[Unit], arms: list[Arm], cfg: EvalConfig,
             fingerprint: str, progress: bool = True) -> int:
    """Loss and agreement of every arm on every document (the arms' agreement feeds one
    batch, so a document's arms are journaled together, after its exact record)."""
    done = 0
    arms = [a for a in arms if not a.blind]  # no question in a document
    bar = tqdm(total=len(units) * len(arms), desc=f"{sess.loaded.name} documents", unit="run",
               disable=not progress, dynamic_ncols=True)
    extra = [fingerprint, cfg.score_tokens, cfg.key_window, cfg.continuation]
    for u in units:
        finish_requested()
        keys = {a.name: _key(u, a, extra) for a in arms}
        if all(k in journal for k in keys.values()):
            bar.update(len(arms))
            continue
        ids, start = u.prompt.ids, u.start
        need = u.prompt.n - start + 1
        exact_key = keys["exact"]
        rec = journal.get(exact_key)
        t0 = time.perf_counter()
        pre = sess.exact(ids, need)  # the exact arm: its cache serves the splices
        engine = sess.engine(None)
        if rec is None:
            cont, ex_logits = greedy_or_empty(engine, pre, cfg.continuation)
            nll = ins.stretch_nll(pre, ids, start)
            rec = journal.add({
                "key": exact_key, "instrument": "loss", "unit": u.id, "stratum": u.stratum,
                "arm": "exact", **u.meta, "n": u.prompt.n, "start": start,
                "nll": [round(float(x), 5) for x in nll],
                "nll_cut": [round(float(x), 5) for x in ins.cut_nll(sess, ids, start, cfg.key_window)],
                "novel": novel_token_mask(ids[0], start).astype(int).tolist(),
                "continuation": cont, "filled": 0, "exact_prefix": 0, "tail": u.prompt.n,
                "macs_share": 1.0, "seconds": time.perf_counter() - t0})
            done += 1
        else:
            cont = rec["continuation"]
            ex_logits = ins.step_logits(engine, pre, cont) if cont else None
        todo = [a for a in arms if a.fill != "exact" and keys[a.name] not in journal]
        counts = {a.name: int(journal.get(keys[a.name])["exact_prefix"]) for a in arms
                  if a.fill != "exact" and keys[a.name] in journal}
        feed = ins.Agreement(sess, len(todo), cont, ex_logits) if cont else None
        recs = []
        for arm in todo:  # in run order: a selection's count is known before its controls
            if arm.check is not None:  # the stretch and the continuation decode under the check
                r, agree_pre = checked_loss(sess, arm, u.prompt, start, cont,
                                            count=counts.get(arm.of, 0), seed=u.seed)
            else:
                r, agree_pre = ins.loss(sess, arm, u.prompt, start, count=counts.get(arm.of, 0),
                                        seed=u.seed, exact_cache=pre.cache,
                                        agreement=feed is not None, native_tail=True)
            if feed is not None:
                feed.add(arm, agree_pre)
            counts[arm.name] = int(r["exact_prefix"])
            recs.append(r)
        agreed = feed.results() if feed is not None else [{}] * len(todo)
        for arm, r, a in zip(todo, recs, agreed):
            r["seconds"] += a.pop("seconds", 0.0)
            r.update(a)
            journal.add({"key": keys[arm.name], "instrument": "loss", "unit": u.id,
                         "stratum": u.stratum, "arm": arm.name, **u.meta, **r})
            done += 1
        bar.update(len(arms))
    bar.close()
    return done


def greedy_or_empty(engine, pre, steps: int):
    if steps <= 0:
        return [], None
    return ins.greedy(engine, pre, steps)


# ----------------------------------------------------------------------------- maps
def ensure_maps(loaded, cfg: EvalConfig, root: Path, calib: str = "builtin",
                progress: bool = True, kinds: tuple[str, ...] = ("ridge",), **fit_kw
                ) -> dict[int, object]:
    """Maps for every split of ``cfg``: fitted once with gpu.maps.fit, cached in ``root/maps``.
    ``kinds`` beyond ridge bring the anchored and kv maps too; then each split maps to
    {kind: map set}, else to the ridge map set. Every (split, kind) no earlier fit with the same
    settings holds is fitted, each split's missing kinds from one capture of the text."""
    from ...maps.fit import FitOptions, fit
    from ...maps.files import load_maps

    mdir = root / "maps"
    mdir.mkdir(parents=True, exist_ok=True)
    (mdir / ".gitignore").write_text("*\n")  # map files are large and rebuilt on demand
    splits = sorted(cfg.splits)
    others = ("anchored", "kv")
    extra = others if set(kinds) - {"ridge"} else ()
    want = ("ridge",) + extra
    named = (calib, cfg.calib_tokens, cfg.seed, fit_kw)  # a map file's name: these, splits, kinds
    settings = sig(*named)
    # index entries from before it named kinds: ridge and the other two took a capture each
    older = {settings: ("ridge",), sig(*named, others): others}
    stem = f"maps-{sig(splits, *named, want)}"
    if all(p.is_file() for p in map_cache.files(mdir, stem, splits, want).values()):
        map_cache.record(mdir, stem, settings, splits, want)  # its index entry was lost
    paths = map_cache.held(mdir, settings, splits, want, older)
    missing: dict[tuple[str, ...], list[int]] = {}  # {kinds a split lacks: such splits}
    for s in splits:
        lack = tuple(k for k in want if (s, k) not in paths)
        if lack:
            missing.setdefault(lack, []).append(s)
    for lack, ss in missing.items():
        stem = f"maps-{sig(ss, *named, lack)}"
        opts = FitOptions(ss, mdir / f"{stem}.safetensors", calib, max_tokens=cfg.calib_tokens,
                          seed=cfg.seed, kinds=lack, **fit_kw)
        fit(loaded, opts, progress=progress)
        map_cache.record(mdir, stem, settings, ss, lack)
        paths.update(map_cache.files(mdir, stem, ss, lack))
    maps: dict[int, dict] = {s: {} for s in splits}
    for (s, k), p in paths.items():
        try:
            maps[s][k] = load_maps(p, loaded.model, split=s)
        except ValueError as e:  # never refit silently over a file that is there
            raise ValueError(f"{e}. The harness caches maps in {mdir}: delete {p} to refit "
                             "them") from None
    return {s: m if extra else m["ridge"] for s, m in maps.items()}


def ridge_of(maps):
    """The ridge map set of one split's maps (a map set, or {kind: map set}): the records'
    keys name its lambda, so journals written before the other kinds existed still match."""
    return maps["ridge"] if isinstance(maps, dict) else maps


# ----------------------------------------------------------------------------- one model
def record_identity(model) -> str:
    """What the journals' record keys hold of the model: a hash of its config and first 64
    embedding rows at fp32 (the study runs fp32 on the CPU). Kept as the committed journals
    were keyed; map files use gpu.core.models.fingerprint, which ignores the load dtype."""
    cfg = {k: v for k, v in sorted(model.config.to_dict().items())
           if k not in models.UNTIED_KEYS}
    h = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode())
    emb = model.get_input_embeddings().weight.detach().float()
    h.update(emb[:64].contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def evaluate_model(loaded, cfg: EvalConfig, out_dir: Path, texts, *, maps=None,
                   command: str = "", progress: bool = True, fit_kw: dict | None = None,
                   calib: str = "builtin", preset: EvalConfig | None = None,
                   arms: list[Arm] | None = None, shard: Shard | None = None,
                   pairs: list | None = None, tests: list | None = None,
                   needles: list[Unit] | None = None) -> dict | None:
    """Run (or resume) one model's grid and write its report; returns the report dict.
    ``arms`` replaces the study's arms (a selector study: any gpu.core.select selector with its
    options, each followed by controls whose ``of`` names it). ``shard``: this rank's share
    under torchrun (gpu.lab.eval.shard; default from RANK / WORLD_SIZE); rank 0 merges every
    rank's journal and writes the report, the other ranks return None. ``pairs``: (a, b)
    arms to contrast beyond the study's; ``tests``: (a, b, margin) non-inferiority tests;
    ``needles``: needle units other than the filled-region set (gpu.lab.eval.ruler's)."""
    started = time.time()
    shard = shard or Shard.from_env()
    root = out_dir / loaded.name
    root.mkdir(parents=True, exist_ok=True)
    journal = SharedJournal(root / shard.journal_name)
    if maps is None:
        maps = ensure_maps(loaded, cfg, root, calib, progress, **(fit_kw or {}))
    fingerprint = sig(record_identity(loaded.model), {s: ridge_of(m).meta.get("lambda") for s, m in maps.items()},
                       cfg.chat, cfg.answer_prefix)
    arms = arms if arms is not None else study_arms(cfg, loaded.n_layers)
    sess = Session(loaded, maps, lower_splits={a.split for a in arms if a.split is not None})
    if arms[0].fill != "exact" or arms[0].name != "exact":
        raise ValueError("the first arm must be Arm('exact', PrefillConfig(fill='exact')): every measure is "
                         "paired with it")
    stats: dict = {}
    if "needle" not in cfg.instruments:
        needles = []
    elif needles is None:
        needles = needle_units(loaded.tokenizer, cfg, texts, stats)
    else:
        for s in sorted({u.stratum for u in needles}):  # every sample drawn is kept
            kept = sum(u.stratum == s for u in needles)
            stats[s] = {"kept": kept, "drawn": kept}
    docs = doc_units(loaded.tokenizer, cfg, texts, stats) if "loss" in cfg.instruments else []
    write_report = partial(_report, loaded, cfg, root, needles, docs, arms, sess, maps,
                           fingerprint, stats, texts, command, preset,
                           {"pairs": pairs or [], "tests": tests or []})
    mine_n, mine_d = shard.take(needles, cfg.seed), shard.take(docs, cfg.seed)
    shard.claim(journal, mine_n + mine_d, cfg.seed)
    before, finished = len(journal), False
    try:
        with torch.inference_mode():
            if mine_n:
                run_needles(sess, journal, mine_n, arms, fingerprint, progress)
            if mine_d:
                run_docs(sess, journal, mine_d, arms, cfg, fingerprint, progress)
        finished = True
    finally:  # an interrupted session's time counts too, and its report shows what it holds
        measured = len(journal) - before
        if measured or not finished:  # rerunning a finished grid leaves the journal as it was
            rank = f"|rank{shard.rank}" if shard.world > 1 else ""
            journal.add({"key": f"session|{started:.3f}{rank}", "instrument": "session",
                         "command": command, "started": started, "finished": finished,
                         "wall_seconds": time.time() - started, "measured": measured})
        if not finished:
            try:
                rep = write_report()
                print(f"stopped: partial report of {rep['counts']['records']} records -> "
                      f"{root}/report.md (rerun to resume)", file=sys.stderr)
            except Exception as exc:  # never hide why the run stopped
                print(f"stopped; the partial report failed too: {exc!r}", file=sys.stderr)
    shard.barrier()
    return write_report() if shard.rank == 0 else None


def _report(loaded, cfg, root, needles, docs, arms, sess, maps, fingerprint, stats,
            texts, command, preset, custom: dict) -> dict:
    """The report of what the journals hold for this grid (gpu.lab.eval.report), every rank's
    share merged (gpu.lab.eval.shard.merged_records)."""
    from . import report

    keys_now = {_key(u, a, [fingerprint, u.max_new_tokens]) for u in needles for a in arms}
    extra = [fingerprint, cfg.score_tokens, cfg.key_window, cfg.continuation]
    doc_arms = [a for a in arms if not a.blind]
    keys_now |= {_key(u, a, extra) for u in docs for a in doc_arms}
    records = [r for r in merged_records(root, needles + docs, cfg.seed)
               if r["key"] in keys_now or r["instrument"] == "session"]
    meta = {"model": loaded.name, "n_layers": loaded.n_layers, "config": cfg.to_dict(),
            "arms": [{**a.spec(), "label": a.label} for a in arms], "texts": texts.name,
            "sample_sets": stats, "command": command, "fingerprint": record_identity(loaded.model),
            "qk_norm": hasattr(sess.engine(None).adapter.attn(0), "q_norm"),
            "maps": {str(s): {"lambda": ridge_of(m).meta.get("lambda"),
                              "calibration_rows": ridge_of(m).meta.get("calibration", {}).get("rows"),
                              **({"kinds": {k: {"lambda": x.meta.get("lambda")}
                                            for k, x in m.items() if k != "ridge"}}
                                 if isinstance(m, dict) else {})}
                     for s, m in maps.items()},
            "preset": preset.to_dict() if preset is not None else None,
            "device": str(loaded.model.device), "dtype": str(loaded.model.dtype),
            "torch_threads": torch.get_num_threads(),
            "expected": {"needle_records": len(needles) * len(arms),
                         "loss_records": len(docs) * len(doc_arms)}, **custom}
    return report.write(root, records, meta)


# ----------------------------------------------------------------------------- mini
def run_mini(o: MiniOptions, progress: bool = True) -> dict:
    """``ridgefill eval mini``: every instrument once on a tiny random Llama (see
    gpu.lab.eval.minimodel), fp32."""
    from . import minimodel

    root = Path(o.out_dir)
    model_dir = minimodel.build(root / "tiny-llama")
    loaded = models.load(str(model_dir), device=o.device or "cpu", dtype=torch.float32)
    texts = minimodel.SyntheticTexts()
    calib = minimodel.write_calibration(root / "calib")
    cfg = EvalConfig(loaded.name, (3, 4), 160, {512: tasks.TASKS}, samples=1, docs=2,
                     loss_length=256, score_tokens=24, continuation=4, chat=True,
                     answer_tokens=6,
                     calib_tokens=3000, minimum={"samples": 1, "docs": 2, "domains": 2})
    fit_kw = {"lambdas": (1e-3, 1e-1), "doc_tokens": 512, "heldout_docs": 1,
              "heldout_tokens": 256}
    return evaluate_model(loaded, cfg, root, texts, command=" ".join(sys.argv),
                          progress=progress, fit_kw=fit_kw, calib=str(calib))


# ----------------------------------------------------------------------------- CLI
def _override(cfg: EvalConfig, o: StudyOptions) -> EvalConfig:
    """The preset with the command line's overrides (None: keep the preset's value)."""
    kw = {}
    if o.samples:
        kw["samples"] = o.samples
    if o.docs is not None:
        kw["docs"] = o.docs
    if o.lengths:
        keep = {n: t for n, t in cfg.needles.items() if n in o.lengths}
        kw["needles"] = keep or {n: tasks.TASKS for n in o.lengths}
    if o.tasks:
        base = kw.get("needles", cfg.needles)
        kw["needles"] = {n: tuple(t for t in ts if t in o.tasks) for n, ts in base.items()}
        kw["needles"] = {n: ts for n, ts in kw["needles"].items() if ts}
    if o.loss_length:
        kw["loss_length"] = o.loss_length
    if o.continuation is not None:
        kw["continuation"] = o.continuation
    if o.instruments:
        kw["instruments"] = tuple(o.instruments)
    if o.seed is not None:
        kw["seed"] = o.seed
    return replace(cfg, **kw)


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


FINISH = {"asked": False}   # SIGUSR1: stop once the running sample is journaled


def _finish(signum, frame):
    FINISH["asked"] = True   # a plain flag and a raw write: safe inside a signal handler
    os.write(2, b"\nSIGUSR1: stopping once the running sample is journaled (SIGTERM stops "
                b"now and loses it)\n")


def finish_requested() -> None:
    """At a sample's boundary (and before each model): stop as SIGTERM does when SIGUSR1
    asked to."""
    if FINISH["asked"]:
        FINISH["asked"] = False
        raise SystemExit(128 + signal.SIGUSR1)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit, so that a killed study records its session and writes
    its partial report on the way out, and SIGUSR1 into the same stop at the next sample's
    boundary (nothing measured is lost; main thread only)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGUSR1, _finish)


def run(o: StudyOptions, progress: bool = True) -> int:
    """``ridgefill eval study``: each of ``o.models`` on its preset with ``o``'s overrides."""
    stop_on_sigterm()  # a killed run still records its session
    command = "ridgefill " + " ".join(sys.argv[1:]) if sys.argv else "ridgefill eval study"
    for name in o.models:
        finish_requested()
        loaded = models.load(name, device=o.device)
        preset = preset_for(loaded)
        rep = evaluate_model(loaded, _override(preset, o), Path(o.out_dir), CorpusTexts(),
                             command=command, progress=progress, preset=preset)
        if rep is None:  # a rank other than 0: rank 0 merged the shares and reported
            continue
        print(f"{name}: {rep['counts']['records']} records"
              f"{' (PARTIAL)' if rep['partial'] else ''} -> {Path(o.out_dir) / name}/report.md")
    return 0
