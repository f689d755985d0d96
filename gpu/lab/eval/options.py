"""The options of ``ridgefill eval study|mini|frontier`` (paper section 6): frozen dataclasses
whose fields gpu.cli turns into the commands' flags, with these defaults (free of torch)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...core.config import option
from ...core.fills import pair
from ...core.models import SMALL

TAILS = (1, 512, 1024)
TASKS = ("niah_single_1", "niah_multikey_1")
# decode-time check thresholds (paper I.4): the bound on the attention a filled row receives,
# summed over the late layers' heads
CHECKS = (0.5,)
INSTRUMENTS = ("needle", "loss")
TIERED_FILLS = ("kv", "ridge", "none")  # issue 57's grid: the first look's fill, ridge, dropped
SUITES = ("needles", "ruler")  # the project's filled-region needles; RULER via lm-eval


@dataclass(frozen=True)
class StudyOptions:
    """``ridgefill eval study``: the model's preset (gpu.lab.eval.grid.preset_for) with what is
    given here overriding it (None: the preset's value)."""

    models: tuple[str, ...] = option(SMALL, "built-in names or local model folders")
    out_dir: Path = option(Path("results"), "where each model's journal and report go")
    device: str | None = option(None, "cpu or cuda (default: cuda when present)")
    samples: int | None = option(None, "filled-region samples per task and length")
    docs: int | None = option(None, "long documents for loss and agreement")
    lengths: tuple[int, ...] | None = option(None, "needle prompt lengths to run")
    tasks: tuple[str, ...] | None = option(None, "needle tasks to run")
    loss_length: int | None = option(None, "tokens of each document")
    continuation: int | None = option(None, "exact greedy tokens for agreement / KL")
    instruments: tuple[str, ...] | None = option(None, "instruments to run", choices=INSTRUMENTS)
    seed: int | None = option(None, "the samples' seed")


@dataclass(frozen=True)
class MiniOptions:
    """``ridgefill eval mini``: the whole harness on a tiny random model, in seconds."""

    out_dir: Path = option(Path("out/eval-mini"), "where the journal and report go")
    device: str | None = option(None, "cpu or cuda (default: cuda when present)")


@dataclass(frozen=True)
class FrontierOptions:
    """``ridgefill eval frontier``: each model's grid of split x tail x rows x fill
    (gpu.lab.eval.frontier.Frontier), sized like the selector study."""

    models: tuple[str, ...] = option(SMALL, "built-in names or local model folders")
    out_dir: Path = option(Path("results/frontier"), "where each model's journal and summary go")
    device: str | None = option(None, "cpu or cuda (default: cuda when present)")
    samples: int = option(10, "filled-region samples per task and length")
    docs: int = option(8, "long documents for the key-token loss")
    lengths: tuple[int, ...] | None = option(None, "needle prompt lengths (default per model: "
                                                   "gpu.lab.eval.frontier.LENGTHS, else 2K and 4K)")
    tasks: tuple[str, ...] | None = option(None, "needle tasks (default: niah_single_1 "
                                                  "niah_multikey_1; --suite ruler: every RULER "
                                                  "task that generates offline)")
    suite: str = option("needles", "needles: the project's filled-region samples; ruler: "
                                   "RULER's samples from lm-eval (gpu.lab.eval.ruler)", choices=SUITES)
    maps_from: Path | None = option(None, "a results folder whose <model>/maps to reuse (e.g. "
                                          "results/power; default: --out-dir)")
    loss_length: int = option(4096, "tokens of each document")
    instruments: tuple[str, ...] = option(INSTRUMENTS, "which to run now (the journal keeps "
                                                       "both)", choices=INSTRUMENTS)
    seed: int = option(0, "the samples' seed")
    tails: tuple[int, ...] = option(TAILS, "exact tails")
    fills: tuple[str, ...] = option(("ridge", "identity"), "the fills of the grid")
    cut: tuple[str, ...] | None = option(None, "arm-name patterns left out (fnmatch; default: "
                                               "the model's cuts in gpu.lab.eval.frontier.CUTS)")
    keep: tuple[str, ...] = option((), "only the arms these patterns name (fnmatch), with exact "
                                        "and POP native (e.g. the n >= 120 comparison); "
                                        "{third} {half} {seven12} {deep} {pop} stand for the "
                                        "splits at 1/3, 1/2, 7/12, 5/8 depth and POP's")
    tiered: bool = option(False, "add issue 57's tiered arms: at 1/3, 1/2, 7/12 depth and "
                                 "POP's split, 10, 20 or 30 percent of the prefix exact by the "
                                 "attention selector, with and without whole spans (c), the "
                                 "other rows filled or dropped (none), one-token tail; named "
                                 "e.g. kv+attn20c@12/t1; --cut leaves them alone, --keep "
                                 "narrows them")
    tiered_fills: tuple[str, ...] = option(TIERED_FILLS, "the tiered arms' fills: "
                                           "kv, ridge, anchored, identity, none, or keys.values "
                                           "from two fills (e.g. kv.identity, the 0.5B's advised "
                                           "kind)")
    checks: tuple[float, ...] = option(CHECKS, "decode-time check thresholds at 5/8 depth "
                                               "(paper I.4)")
    timing_units: int = option(1, "samples each arm's prefill is timed on (0: no timing)")

    def __post_init__(self):
        if not self.instruments or set(self.instruments) - set(INSTRUMENTS):
            raise ValueError(f"instruments {self.instruments}: choose from 'needle' and 'loss'")
        for f in self.tiered_fills:
            pair(f)
