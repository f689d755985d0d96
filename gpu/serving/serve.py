"""``ridgefill serve``: vLLM's OpenAI-compatible server whose prefill is RidgeFill.

Everything is checked before vLLM starts (the configuration, the model family, the maps
against the model's weights), so a bad setting is one clear error and no server; then this
process becomes ``vllm serve`` with the settings in ``--hf-overrides`` (gpu.serving.settings)
and vLLM's own defaults (prefix caching and chunked prefill on, as stock). ``--fill exact``
is stock vLLM.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ..core import models
from ..maps.advice import choose_config
from ..maps.cached import cached_maps
from ..maps.files import load_maps
from .settings import check, default_dtype, engine_env, model_type, overrides, ranks_of

# the KV cache's size when the caller gives neither --kv-cache-memory-bytes nor
# --gpu-memory-utilization (on the CPU the latter reserves 92% of the machine's memory and
# refuses to start when other processes hold more than 8%)
KV_CACHE_BYTES = 4 << 30


def command(model: str, maps: str | None = None, port: int = 8000, host: str = "127.0.0.1",
            dtype: str | None = None, max_model_len: int | None = None,
            extra: tuple[str, ...] = (),
            **settings) -> tuple[list[str], str]:
    """(the ``vllm serve`` argv, a one-line summary) for ``model`` (a built-in name or a
    local folder) under its advised configuration (the one written beside ``maps``, else the
    built-in's: gpu.maps.advice) with ``settings`` on top; ``dtype`` None: the processor's
    fast one (gpu.serving.settings.default_dtype)."""
    name, folder = models.resolve(model)
    dtype = dtype or default_dtype()
    config = choose_config(name, maps, **{"rows": "none", **settings})
    check(config)
    served = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
              "--served-model-name", name, "--dtype", dtype, "--port", str(port), "--host", host]
    if max_model_len is not None:
        served += ["--max-model-len", str(max_model_len)]
    if not any(a.startswith(("--kv-cache-memory-bytes", "--gpu-memory-utilization"))
               for a in extra):
        served += ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
    if config.fill == "exact":
        return served + list(extra), f"{name}: stock vLLM (fill exact), {dtype}"
    model_type(folder)
    config, maps = served_maps(name, folder, config, maps)
    served += ["--hf-overrides", json.dumps(overrides(folder, config, maps)), *extra]
    values = config.values_fill or config.fill
    rows = config.rows + "".join(f" {k}={v}" for k, v in config.options.items())
    return served, (f"{name}: RidgeFill keys {config.fill} / values {values}, split "
                    f"{config.split}, tail {config.tail}, rows {rows}, {dtype}"
                    + (f", maps {maps}" if maps else ""))


def served_maps(name: str, folder: Path, config, maps):
    """The configuration with its split resolved and the maps it reads, checked against the
    model's weights (their fingerprint read from the folder's safetensors, not by loading the
    model, which vLLM then does): the given file, or a built-in's shipped or cached maps
    (fitted once if missing)."""
    if not config.needs_maps:
        return config.resolve(_n_layers(folder)), maps
    if maps is None:
        if config.split is None or name not in models.BUILTINS:
            raise ValueError(f"fill={config.fill!r} needs maps: give --maps FILE (fit them "
                             f"with `ridgefill fit --model {name}`)")
        (kind,) = config.map_kinds
        maps = cached_maps(name, config.split, kind)
    fingerprint = models.folder_fingerprint(folder)
    if fingerprint is None:  # tensors named otherwise: build the model to read its weights
        fingerprint = models.load(str(folder), device="cpu").fingerprint()
    found = load_maps(maps, split=config.split, fingerprint=fingerprint)
    return config.resolve(_n_layers(folder), found), str(Path(maps).resolve())


def _n_layers(folder: Path) -> int:
    from transformers import AutoConfig
    return int(AutoConfig.from_pretrained(folder).get_text_config().num_hidden_layers)


def become_vllm(argv: list[str], extra: tuple[str, ...]) -> None:
    """Replace this process with ``vllm serve`` ``argv`` (from :func:`command`; no return),
    one core group bound per tensor-parallel rank of ``extra``."""
    os.execve(argv[0], argv, {**engine_env(ranks_of(extra)), **os.environ})
