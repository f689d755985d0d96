"""The options of ``ridgefill bench`` (gpu.lab.tools.bench): the frozen dataclass its command-line
flags are generated from (gpu.cli), kept free of torch so the CLI starts fast."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...core.config import option
from ...core.models import DTYPES, SMALL

VLLM_ARMS = ("stock", "stock-one-pass", "advised", "pop")   # gpu.lab.tools.bench_vllm's engines


@dataclass(frozen=True)
class BenchOptions:
    """What one ``ridgefill bench`` run times (paper section 2.5's ceilings beside it)."""

    models: tuple[str, ...] = option(SMALL, "built-in names or local model folders")
    lengths: tuple[int, ...] | None = option(None, "prompt lengths (default per model: "
                                                 "gpu.lab.tools.bench.SETTINGS)")
    repeats: int = option(5, "alternating rounds after one warm-up of each arm")
    split: int | None = option(None, "split of the study's speed configuration (default per "
                                   "model); the advised configuration is timed beside it")
    tail: int | None = option(None, "exact tail of that configuration (default per model)")
    out_dir: Path = option(Path("results/bench"), "where bench.json and bench.png go (under "
                                               "the device's name)")
    device: str | None = option(None, "cpu or cuda (default: cuda when present)")
    chunk: int | None = option(None, "rows per lower-layer pass of the RidgeFill / POP arms and "
                                   "of exact in passes (default PrefillConfig's; 0: one pass, "
                                   "no exact-in-passes arm)")
    kernels: bool = option(False, "also the Numba-vs-NumPy kernels")
    rows_probe: bool = option(True, "the exact-row cost (sigma) arms: three RidgeFill runs a "
                                  "round")
    compile: bool = option(False, "also RidgeFill with the late walk under torch.compile "
                                "(gpu.core.compiled; its warm-up pays the compilation)")
    other_order: bool = option(True, "the arm with the fill order the device's default does not "
                                   "use (batched on the CPU): one RidgeFill run a round")
    resume: bool = option(False, "keep the records of OUT_DIR's bench.json measured with the "
                               "same settings and time only the rest")
    engine: str = option("transformers", "transformers: the project's engine (every arm "
                                         "below); vllm: stock vLLM, RidgeFill and POP inside "
                                         "vLLM's CPU build (gpu.lab.tools.bench_vllm)",
                         choices=("transformers", "vllm"))
    dtype: str | None = option(None, "--engine vllm: vLLM's dtype (default: bf16 on a CPU "
                                     "with avx512_bf16 or amx_bf16, else fp32)",
                               choices=tuple(DTYPES))
    arms: tuple[str, ...] = option(VLLM_ARMS, "--engine vllm: the engines to start and time "
                                   "(fewer where four of the model do not fit in memory)",
                                   choices=VLLM_ARMS)
    tiered: tuple[str, ...] = option((), "--engine vllm: also RidgeFill under these "
                                     "configurations, named as the study's arms (e.g. "
                                     "kv+attn20c@12/t1: gpu.lab.eval.grid.parse_arm)")
    reference: bool = option(True, "--engine vllm: also the project's transformers engine, "
                                   "exact prefill in fp32, once per length")
    random_weights: bool = option(False, "the built-in architectures with random weights "
                                       "(timing where the model packages are not installed)")
