"""The options of ``ridgefill fit`` (gpu.maps.fit): the dataclass its command-line flags are
generated from (gpu.cli), kept free of transformers so the CLI starts fast."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.config import option
from ..core.fills import MAP_KINDS

DEFAULT_LAMBDAS = tuple(float(x) for x in np.logspace(-4, 0, 9))
# map kinds (gpu.core.fills.MAP_KINDS): the paper's ridge map of each late layer's input (one
# lambda per split), the anchored map shrunk toward the identity and the direct cache-entry
# map (one lambda per layer each, from the same capture)


@dataclass
class FitOptions:
    """What one ``ridgefill fit`` captures and solves; the command's flags are these fields
    (gpu.cli.options_args), with these defaults."""

    splits: tuple[int, ...] = option((), "split layers to fit (default: the built-in model's "
                                         "advised split, gpu.core.advised; else 3/8 of depth)")
    out: Path = option(None, "map file (.safetensors)", required=True)
    calib: str = option("builtin", "'builtin' or a folder of .txt/.md files")
    lambdas: tuple[float, ...] = option(DEFAULT_LAMBDAS, "lambda grid")
    max_tokens: int = option(40_000, "calibration tokens captured in all")
    doc_tokens: int = option(4096, "tokens per document at most (documents are cut, never "
                                   "padded)")
    heldout_docs: int = option(2, "held-out documents that choose lambda")
    heldout_tokens: int = option(2048, "tokens per held-out document")
    checkpoint_every: int = option(4, "documents between checkpoints of the capture")
    seed: int = option(0, "calibration document order")
    correction: bool = option(False, "also measure DeltaM of the terminal-state correction "
                                     "(Gated DeltaNet layers above the split; paper 2.3) on "
                                     "the held-out documents")
    correction_every: int = option(512, "held-out tokens per state difference of the "
                                        "correction")
    kinds: tuple[str, ...] = option(("ridge",), "map kinds from the one capture: ridge (the "
                                    "paper's), anchored (shrunk toward the identity), kv "
                                    "(direct key/value maps); several: every kind but ridge "
                                    "adds -KIND to the file name", choices=MAP_KINDS)
    log: list[str] = field(default_factory=list)  # what the fit did (no flag)
