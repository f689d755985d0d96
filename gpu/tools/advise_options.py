"""The options of ``ridgefill advise`` (gpu.tools.advise): its budget, its confirmation's
sizes, and the frozen dataclass its command-line flags are generated from (gpu.cli)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

BUDGET = {"retrieval": 5.0, "key": 0.5}  # points below exact; key-token dNLL, nats
# The confirmation: needle samples per task and length (10: 40 needles at two lengths, a
# needle 2.5 points, finer than the budget), documents, how many screened configurations
# at most, the share of the retrieval allowance it must keep (a promise made on one sample
# must survive the next one's noise), and its seed offset (no default rerun uses it).
CONFIRM = {"samples": 10, "docs": 8, "tries": 4, "margin": 0.5, "seed_offset": 100}


def _opt(default, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class AdviseOptions:
    """What one ``ridgefill advise`` run measures; the command's flags are these fields
    (gpu.cli.options_args), with these defaults."""

    lengths: tuple[int, ...] = _opt((2048, 4096), "prompt lengths of the synthetic needles "
                                                  "(your workload's)")
    budget: tuple[tuple[str, float], ...] = _opt((), "retrieval=POINTS below exact (default "
                                                     f"{BUDGET['retrieval']:g}), key=NATS of "
                                                     f"key-token dNLL (default {BUDGET['key']:g})")
    tails: tuple[int, ...] = _opt((1, 512, 1024), "exact tails of the frontier")
    samples: int = _opt(4, "needle samples per task and length")
    docs: int = _opt(4, "held-out documents for loss")
    calib: str = _opt("builtin", "'builtin' or a folder of .txt/.md files")
    seed: int = _opt(0, "the frontier's seed")
    out_dir: Path = _opt(Path("results/advise"), "where advice.json and the journals go")
    timing_units: int = _opt(1, "samples each arm's prefill is timed on (0: no timing)")
    confirm_samples: int = _opt(CONFIRM["samples"], "needle samples per task and length that "
                                "confirm a configuration the frontier passed (0: the frontier "
                                "alone decides)")
    confirm_docs: int = _opt(CONFIRM["docs"], "documents of the confirmation")
    confirm_tries: int = _opt(CONFIRM["tries"], "configurations confirmed at most, cheapest "
                              "first; none confirmed: exact prefill")
    check: bool = _opt(True, "rerun the recommendation on samples the advisor never saw")
    check_seed: int | None = _opt(None, "the rerun's seed (default: --seed + 1; any seed but "
                                        "--seed is unseen)")
    check_samples: int | None = _opt(None, "the rerun's needle samples per task and length "
                                           "(default: --samples)")
    check_docs: int | None = _opt(None, "the rerun's documents (default: --docs)")

    def __post_init__(self):
        unknown = {k for k, _ in self.budget} - set(BUDGET)
        if unknown:
            raise ValueError(f"budget {sorted(unknown)}: give retrieval=POINTS and/or key=NATS")
