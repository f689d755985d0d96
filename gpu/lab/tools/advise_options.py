"""The options of ``ridgefill advise`` (gpu.lab.tools.advise): its budget, its confirmation's
sizes, and the frozen dataclass its command-line flags are generated from (gpu.cli)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...core.config import option
from ..eval.options import TAILS

BUDGET = {"retrieval": 5.0, "key": 0.5}  # points below exact; key-token dNLL, nats
# The confirmation: needle samples per task and length (10: 40 needles at two lengths, a
# needle 2.5 points, finer than the budget), documents, how many screened configurations
# at most, the share of the retrieval allowance it must keep (a promise made on one sample
# must survive the next one's noise), and its seed offset (no default rerun uses it).
CONFIRM = {"samples": 10, "docs": 8, "tries": 4, "margin": 0.5, "seed_offset": 100}


@dataclass(frozen=True)
class AdviseOptions:
    """What one ``ridgefill advise`` run measures; the command's flags are these fields
    (gpu.cli.options_args), with these defaults."""

    lengths: tuple[int, ...] = option((2048, 4096), "prompt lengths of the synthetic needles "
                                                  "(your workload's)")
    budget: tuple[tuple[str, float], ...] = option((), "retrieval=POINTS below exact (default "
                                                     f"{BUDGET['retrieval']:g}), key=NATS of "
                                                     f"key-token dNLL (default {BUDGET['key']:g})")
    tails: tuple[int, ...] = option(TAILS, "exact tails of the frontier")
    samples: int = option(4, "needle samples per task and length")
    docs: int = option(4, "held-out documents for loss")
    calib: str = option("builtin", "'builtin' or a folder of .txt/.md files")
    seed: int = option(0, "the frontier's seed")
    out_dir: Path = option(Path("results/advise"), "where advice.json and the journals go")
    timing_units: int = option(1, "samples each arm's prefill is timed on (0: no timing)")
    confirm_samples: int = option(CONFIRM["samples"], "needle samples per task and length that "
                                "confirm a configuration the frontier passed (0: the frontier "
                                "alone decides)")
    confirm_docs: int = option(CONFIRM["docs"], "documents of the confirmation")
    confirm_tries: int = option(CONFIRM["tries"], "configurations confirmed at most, cheapest "
                              "first; none confirmed: exact prefill")
    check: bool = option(True, "rerun the recommendation on samples the advisor never saw")
    check_seed: int | None = option(None, "the rerun's seed (default: --seed + 1; any seed but "
                                        "--seed is unseen)")
    check_samples: int | None = option(None, "the rerun's needle samples per task and length "
                                           "(default: --samples)")
    check_docs: int | None = option(None, "the rerun's documents (default: --docs)")
    maps: Path | None = option(None, "also write the recommended configuration's maps to this "
                                     "file, with the advice beside it (.advice.json): "
                                     "generate, serve and RidgeFill.load given the file then "
                                     "run that configuration with no settings")

    def __post_init__(self):
        unknown = {k for k, _ in self.budget} - set(BUDGET)
        if unknown:
            raise ValueError(f"budget {sorted(unknown)}: give retrieval=POINTS and/or key=NATS")
