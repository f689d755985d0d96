"""The frontier: quality against cost over splits, fills, tails and rows (paper
6.1's split curve, 6.4's comparison with POP, 2.3's rescales), on the evaluation harness.

``ridgefill eval frontier`` (``make frontier``) runs, per model, through
gpu.lab.eval.harness.evaluate_model (the same instruments, resumable journal, shared lower
passes and batched decoding as ``make eval``; sharded under torchrun by gpu.lab.eval.shard):

* exact, and POP native (identity fill from POP's split L - floor(L/3), one-token tail);
* at 1/4, 3/8, 1/2 and 5/8 depth and at POP's split: the ridge and identity fills, each
  with tails {1, 512, 1024} tokens and with no exact rows or the default rows
  (gpu.core.config.DEFAULT_ROWS), less the arms a model's preset cuts to fit its time;
* the value rescale and the key rescale at the primary split (3/8 depth); at paper 6.4's
  arm (5/8 depth, one-token tail) exact keys and exact values spliced in (paper 6.6: which
  component carries its error);
* the decode-time check of Appendix I.4 (gpu.lab.eval.decode_check) at 5/8 depth, the middle
  tail, at each of ``CHECKS`` (``--checks``), against the default rows there;
* beyond the paper, at 1/2, 5/8 and POP's split with a one-token tail and no rows: the
  anchored and the direct cache-entry (kv) fills, and keys from one fill with values from
  another (:data:`SOURCE_PAIRS`);
* only when asked (``--tiered``, issue 57): the tiered prefill's arms and pairs
  (gpu.lab.eval.tiered: attention-selected rows exact, the other prefix rows filled or dropped).
  ``cut`` (the models' :data:`CUTS`, stated for the paper's grid, or ``--cut``) leaves them
  alone; ``keep`` narrows them like any arm.

``--suite ruler`` runs the same grid on RULER's samples from lm-eval (gpu.lab.eval.ruler) instead
of the project's filled-region needles; ``--maps-from`` reuses another run's fitted maps.

Every arm is paired with exact and with POP native (retrieval, novel- and key-token dNLL);
paper 6.4's test (RidgeFill at 5/8 depth vs POP native, non-inferiority on filled-region
retrieval at a 3-point margin) is stated confirmed / refuted / inconclusive. Each arm's
prefill is also timed alone (measured speedup beside the MAC ceiling). Results:
``results/frontier/<model>/frontier.{md,json,png}`` beside the harness's report.
"""
from __future__ import annotations

import fnmatch
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from rfmodel.atomic import write_json

from ...core import models
from ...core import presets
from ...core.config import DEFAULT_ROWS, RESCALES, PrefillConfig, pop_split
from ...core.fills import MAP_KINDS
from . import harness as ev
from .frontier_report import summarize, write as write_summary
from .grid import EvalConfig, arm_name, depth, preset_for
from .instruments import Arm, Session
from . import ruler
from .options import TAILS, TASKS, TIERED_FILLS, FrontierOptions
from .report import MARGIN_POP
from .shard import Shard
from ...core.fills import pair
from .tiered import TieredArms
from .timing import time_arms
from .units import CorpusTexts, needle_units, sig

FRACTIONS = (1 / 4, 3 / 8, 1 / 2, 5 / 8)
LENGTHS = {"gemma3-270m": (4096, 8192)}  # filled-region needles; others: 2K, 4K
# arms each model's frontier leaves out, stated before its first run (the costs that chose
# them: docs/results-quality.md): on the Qwen models no exact rows, the one-token tail, the
# splits 1/2, 5/8 and POP's
_QWEN_CUT = ("*+*", "*/t512", "*/t1024", "*/rescale-*", "*/check-*")
CUTS = {"gemma3-270m": ("identity@*/t512", "identity+*", "ridge+*/t1", "ridge+*/t512"),
        "qwen2.5-coder-0.5b": (*_QWEN_CUT, "*@6/*", "*@9/*"),
        "qwen2.5-coder-1.5b": (*_QWEN_CUT, "*@7/*", "*@10/*", "*/splice-*",
                               # the new fills at 5/8 and POP's split only, no source pairs
                               "*.*-values@*", "anchored@14/*", "kv@14/*")}


# fills beyond the paper (gpu.core.fills.MAP_KINDS) at 1/2, 5/8 and POP's split, one-token tail, no
# rows; and keys from one fill with values from another (keys, values)
BEYOND_FILLS = ("anchored", "kv")
SOURCE_PAIRS = (("identity", "ridge"), ("ridge", "identity"), ("identity", "kv"),
                ("kv", "identity"))


@dataclass(frozen=True)
class Frontier(TieredArms):
    """One model's frontier grid; ``primary`` (3/8 depth) carries the rescales, ``deep``
    (5/8 depth) paper 6.4's test and the decode-time checks; its tiered arms (``tiered``)
    and their pairs come from :class:`gpu.lab.eval.tiered.TieredArms`."""

    n_layers: int
    tails: tuple[int, ...] = TAILS
    rows: tuple[str, ...] = ("none", DEFAULT_ROWS)
    fills: tuple[str, ...] = ("ridge", "identity")
    checks: tuple[float, ...] = ()    # decode-time check thresholds (gpu.lab.eval.decode_check)
    cut: tuple[str, ...] = ()         # fnmatch patterns of arm names left out
    keep: tuple[str, ...] = ()        # fnmatch patterns: only these arms (and exact, POP);
    #                                   {third}, {half}, {seven12}, {deep}, {pop} stand for
    #                                   those splits (1/3, 1/2, 7/12, 5/8 depth, POP's)
    beyond: tuple[str, ...] = BEYOND_FILLS                   # fills beyond the paper
    sources: tuple[tuple[str, str], ...] = SOURCE_PAIRS      # (keys' fill, values' fill)
    tiered: bool = False              # issue 57's tiered arms (opt-in; ``cut`` leaves
    tiered_fills: tuple[str, ...] = TIERED_FILLS  # them alone, ``keep`` narrows them)

    def __post_init__(self):
        for f in self.tiered_fills:
            pair(f)

    @property
    def pop(self) -> int:
        return pop_split(self.n_layers)

    @property
    def primary(self) -> int:
        return depth(3 / 8, self.n_layers)

    @property
    def deep(self) -> int:
        return depth(5 / 8, self.n_layers)

    @property
    def splits(self) -> tuple[int, ...]:
        return tuple(sorted({depth(f, self.n_layers) for f in FRACTIONS} | {self.pop}))

    @property
    def half(self) -> int:
        return depth(1 / 2, self.n_layers)

    def placeholders(self) -> dict[str, int]:
        """What ``keep`` patterns' {third}, {half}, {seven12}, {deep}, {pop} stand for."""
        return {"third": self.third, "half": self.half, "seven12": self.seven12,
                "deep": self.deep, "pop": self.pop}

    @property
    def kinds(self) -> tuple[str, ...]:
        """The map kinds the grid's arms read (gpu.core.fills.MAP_KINDS)."""
        used = {k for a in self.arms() if a.fill != "exact" for k in a.config.map_kinds}
        return tuple(k for k in MAP_KINDS if k in used)

    @property
    def mid_tail(self) -> int:
        return self.tails[len(self.tails) // 2]

    @property
    def pop_native(self) -> str:
        return f"pop@{self.pop}"

    @property
    def headline(self) -> str:
        """Paper 6.4's RidgeFill arm: 5/8 depth, the shortest tail, no exact rows."""
        return arm_name("ridge", self.deep, min(self.tails))

    def arms(self) -> list[Arm]:
        """exact, POP native, then every split x fill x tail x rows arm, the rescales and the
        checks; an arm named by a ``cut`` pattern is left out (never exact or POP native)."""
        def at(fill: str, split: int, tail: int, rows: str = "none", **more) -> PrefillConfig:
            return PrefillConfig(fill=fill, split=split, tail=tail, rows=rows, **more)

        out = [Arm("exact", PrefillConfig(fill="exact"), label="exact"),
               Arm(self.pop_native, presets.pop(self.n_layers), label="POP native")]
        for s in self.splits:
            for fill in self.fills:
                for t in self.tails:
                    for rows in self.rows:
                        if at(fill, s, t, rows) == presets.pop(self.n_layers):
                            continue  # POP native itself
                        out.append(Arm(arm_name(fill, s, t, rows), at(fill, s, t, rows),
                                       label=f"{fill}, split {s}, tail {t}, rows {rows}"))
        t1 = min(self.tails)
        for s in sorted({self.half, self.deep, self.pop}):
            out += [Arm(arm_name(f, s, t1), at(f, s, t1), label=f"{f}, split {s}, tail {t1}")
                    for f in self.beyond]
            out += [Arm(arm_name(k, s, t1, values=v), at(k, s, t1, values_fill=v),
                        label=f"keys {k}, values {v}, split {s}, tail {t1}")
                    for k, v in self.sources]
        p, t = self.primary, self.mid_tail
        out += [Arm(f"{arm_name('ridge', p, t)}/rescale-{w}", at("ridge", p, t, rescale=w),
                    label=f"ridge, split {p}, tail {t}, {w} rescaled") for w in RESCALES]
        h = self.headline
        out += [Arm(f"{h}/splice-{w}", at("ridge", self.deep, t1), splice=w,
                    label=f"ridge, split {self.deep}, tail {t1}, exact {w}")
                for w in ("keys", "values")]
        out += [Arm(f"{arm_name('ridge', self.deep, t)}/check-{c:g}", at("ridge", self.deep, t),
                    check=c, label=f"ridge, split {self.deep}, tail {t}, decode check {c:g}")
                for c in self.checks]
        tiered = self.tiered_arms() if self.tiered else []
        out += tiered
        exempt = {a.name for a in tiered}  # the cuts were stated for the paper's grid
        keep = [k.format(**self.placeholders()) for k in self.keep]
        return [a for a in out if a.name in ("exact", self.pop_native)
                or ((a.name in exempt or not any(fnmatch.fnmatchcase(a.name, c) for c in self.cut))
                    and (not self.keep or any(fnmatch.fnmatchcase(a.name, k) for k in keep)))]

    def pairs(self, arms: list[Arm]) -> list[tuple[str, str]]:
        """Every arm against POP native (against exact the harness pairs already)."""
        return [(a.name, self.pop_native) for a in arms if a.name not in ("exact", self.pop_native)]

    def fill_pairs(self, arms: list[Arm]) -> list[tuple[str, str]]:
        """The fills against each other where both ran (one-token tail, no rows): ridge against
        identity (the size prediction), anchored against ridge and identity (its prediction); at
        POP's split the identity fill is POP native, paired already."""
        names, t1, out = {a.name for a in arms}, min(self.tails), []
        for s in sorted({self.half, self.deep, self.pop}):
            r, i, an = (arm_name(f, s, t1) for f in ("ridge", "identity", "anchored"))
            out += [(a, b) for a, b in ((r, i), (an, r), (an, i)) if a in names and b in names]
        return out

    def check_pairs(self, arms: list[Arm]) -> list[tuple[str, str]]:
        """Each decode-check arm against the default rows at its split and tail."""
        return [(a.name, arm_name("ridge", a.split, a.tail, DEFAULT_ROWS)) for a in arms
                if a.check is not None]

    def component_pairs(self, arms: list[Arm]) -> list[tuple[str, str]]:
        """Paper 6.6 at the headline arm: its exact keys / exact values splices against it."""
        return [(a.name, self.headline) for a in arms if a.splice is not None]

    def tests(self, arms: list[Arm]) -> list[tuple[str, str, float]]:
        """Every arm vs POP native at paper 3.4's 3-point retrieval margin; the one of paper
        6.4 (RidgeFill at 5/8 depth, :attr:`headline`) is the registered test, the rest
        describe the frontier."""
        return [(a, self.pop_native, MARGIN_POP) for a, _ in self.pairs(arms)]


def frontier_config(loaded, o: FrontierOptions) -> tuple[EvalConfig, Frontier]:
    """(the harness's grid, the frontier) of a loaded model under ``o``: ``samples`` per task
    and length (two tasks, two lengths: 40), ``docs`` documents; ``cut``: arm-name patterns
    left out (default: the model's entry in CUTS); ``instruments``: which to run now (the
    journal keeps both; the report shows what it holds)."""
    preset = preset_for(loaded)
    fr = Frontier(loaded.n_layers, tails=tuple(sorted(o.tails)), fills=o.fills, checks=o.checks,
                  cut=o.cut if o.cut is not None else CUTS.get(loaded.name, ()), keep=o.keep,
                  tiered=o.tiered, tiered_fills=o.tiered_fills)
    lengths = tuple(o.lengths or LENGTHS.get(loaded.name, (2048, 4096)))
    samples, docs, loss_length = o.samples, o.docs, o.loss_length
    # maps only where the grid's arms run (before ``keep``: a narrower rerun reuses its maps)
    used = {a.split for a in replace(fr, keep=()).arms() if a.split is not None}
    primary = fr.primary if fr.primary in used else min(used)
    rest = sorted(used - {primary})  # the paper grid's splits (and the tiered arms' when asked)
    tail = max(fr.tails)  # needles lie before every arm's tail; key tokens see no prefix
    if tail < 2 or loss_length <= tail:
        raise ValueError(f"tails {fr.tails}: the longest must be at least 2 tokens (it holds "
                         f"the scored stretch) and shorter than the documents ({loss_length}); "
                         "pass other --tails or --loss-length")
    cfg = replace(preset, splits=(primary, *rest), tail=tail,
                  needles={n: tuple(task_names(o)) for n in lengths}, samples=samples, docs=docs,
                  loss_length=loss_length, seed=o.seed,
                  score_tokens=min(preset.score_tokens, tail // 2),
                  instruments=tuple(i for i in ("needle", "loss")
                                    if i in o.instruments and (i == "needle" or docs)),
                  minimum={"samples": samples, "docs": docs, "domains": min(4, docs)})
    return cfg, fr


def task_names(o: FrontierOptions) -> tuple[str, ...]:
    """The needle tasks of a run: ``o.tasks``, else the suite's."""
    return tuple(o.tasks or (ruler.OFFLINE if o.suite == "ruler" else TASKS))


def suite_units(loaded, cfg: EvalConfig, o: FrontierOptions):
    """RULER's samples (gpu.lab.eval.ruler) for ``--suite ruler``; None: the harness's own."""
    if o.suite != "ruler":
        return None
    return [u for n, names in sorted(cfg.needles.items())
            for u in ruler.units(loaded.tokenizer, names, n, cfg.samples, cfg.seed, cfg.chat)]


def timed(loaded, cfg: EvalConfig, maps, arms: list[Arm], root: Path, units: int,
          texts, progress: bool = True) -> dict:
    """Each arm's prefill alone on ``units`` samples of the longest length (kept in
    ``timing.json`` and reused while the arms and samples are the same)."""
    path = root / "timing.json"
    key = sig([a.spec() for a in arms], cfg.to_dict(), units, str(loaded.model.device))
    if path.is_file() and (old := json.loads(path.read_text())).get("key") == key:
        return old
    t0 = time.time()
    sess = Session(loaded, maps, reuse_lower=False)
    longest = max(cfg.needles)
    pool = [u for u in needle_units(loaded.tokenizer, cfg, texts, {})
            if u.meta["length"] == longest]
    # a check costs at decoding, not at prefill; a splice is a diagnostic (it reads exact's cache)
    arms = [a for a in arms if a.check is None and a.splice is None]
    out = {"key": key, "arms": time_arms(sess, pool, arms, units, progress, replay=False),
           "length": longest,
           "units": min(units, len(pool)), "seconds": time.time() - t0,
           "threads": torch.get_num_threads()}
    write_json(path, out)
    return out


def run(o: FrontierOptions, *, progress: bool = True, loaded=None, texts=None,
        fit_kw: dict | None = None, calib: str = "builtin") -> list[dict]:
    """``ridgefill eval frontier``: each of ``o.models``' grid (resumable), its timing and
    summary. ``loaded`` / ``texts`` / ``fit_kw`` / ``calib``: a model, texts and fit settings
    other than the built-in ones (the tests' tiny model, the advisor). Returns the summaries
    (rank 0)."""
    command = "ridgefill " + " ".join(sys.argv[1:]) if sys.argv else "ridgefill eval frontier"
    shard, out = Shard.from_env(), []
    for name in o.models:
        ev.finish_requested()
        lm = loaded if loaded is not None else models.load(name, device=o.device)
        cfg, fr = frontier_config(lm, o)
        arms = fr.arms()
        # the grid with every instrument: a run of one of them reports itself partial
        whole = replace(cfg, instruments=("needle", "loss") if o.docs else ("needle",))
        root = o.out_dir / lm.name
        maps = ev.ensure_maps(lm, cfg, (o.maps_from or o.out_dir) / lm.name, calib, progress,
                              kinds=fr.kinds, **(fit_kw or {}))
        texts = texts or CorpusTexts()
        try:
            rep = ev.evaluate_model(lm, cfg, o.out_dir, texts, maps=maps,
                                    command=command, progress=progress, arms=arms, shard=shard,
                                    pairs=fr.pairs(arms) + fr.fill_pairs(arms)
                                    + fr.check_pairs(arms) + fr.component_pairs(arms)
                                    + fr.tiered_pairs(arms),
                                    tests=fr.tests(arms) + fr.tiered_tests(arms), preset=whole,
                                    needles=suite_units(lm, cfg, o))
        except (KeyboardInterrupt, SystemExit):  # stopped: the harness wrote a partial report
            if shard.rank == 0 and (root / "report.json").is_file():
                partial = json.loads((root / "report.json").read_text())
                write_summary(root, summarize(partial, fr, arms, {}, {"command": command, "seed": o.seed,
                                                                   "suite": o.suite}))
                if o.suite == "ruler":
                    ruler.write(root, partial, fr.pop_native, command)
                print(f"stopped: partial frontier -> {root}/frontier.md (rerun to resume)",
                      file=sys.stderr)
            raise
        if rep is None:  # a rank other than 0: rank 0 merged the shares
            continue
        # prefill time depends on the length alone: timed on the project's own needles
        on = replace(cfg, needles={n: TASKS for n in cfg.needles}) if o.suite == "ruler" else cfg
        stop = ev.FINISH["asked"]  # SIGUSR1 in the last sample: the summary, not the timing
        timing = (timed(lm, on, maps, arms, root, o.timing_units, texts, progress)
                  if o.timing_units and not stop else {})
        summ = summarize(rep, fr, arms, timing,
                         {"command": command, "seed": o.seed, "suite": o.suite})
        write_summary(root, summ)
        if o.suite == "ruler":
            ruler.write(root, rep, fr.pop_native, command)
        print(f"{lm.name}: {rep['counts']['records']} records{' (PARTIAL)' if summ['partial'] else ''}"
              f" -> {root}/frontier.md")
        out.append(summ)
    return out
