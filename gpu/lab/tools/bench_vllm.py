"""``ridgefill bench --engine vllm``: time to first token inside vLLM's CPU build, RidgeFill
against stock vLLM, alternating in one run (paper section 2.5's ceilings beside it).

One vLLM engine per arm, all started once in this process (each its own engine process),
every one with vLLM's chunked prefill and with prefix caching off so that a repeated prompt
is prefilled again: stock vLLM as users run it, stock vLLM in one pass (no chunked prefill,
one step per prompt), RidgeFill at the model's advised configuration, and POP native
(identity fill from L - floor(L/3), one-token tail). Per
length: one untimed warm-up of each arm, then ``repeats`` rounds timing each arm once, in
order, each a one-token generation of the same prompt; medians and ratios of medians. An
idle vLLM engine busy-polls for a second after its last step, so each timing starts
``SETTLE`` seconds after the one before. Beside them, once per length after the rounds: the
project's own transformers engine, exact prefill in fp32 (its users' dtype on the CPU).
"""
from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from tqdm import tqdm

from rfmath.cost import speedup_ceiling
from rfmodel.atomic import write_json

from ...core import models, presets
from ...core.models import DTYPES
from ...core.advised import default_config
from ...core.archspec import arch_of
from ...core.config import PrefillConfig
from ...core.fills import cost_arm
from ...maps.cached import cached_maps
from ...serving.settings import default_dtype, overrides, use_engine_env
from ..eval.grid import parse_arm
from .bench_options import VLLM_ARMS, BenchOptions
from .bench_records import cpu, merged, prior_records
from .bench import prompt_ids

SETTLE = 1.5                # seconds between timings (vLLM's idle busy-poll is 1 s)
KV_CACHE_BYTES = 1 << 30    # per engine: a 16K prompt of the 1.5B needs 0.45 GiB
LENGTHS = {"qwen2.5-coder-0.5b": (2048, 4096, 8192, 16384),
           "qwen2.5-coder-1.5b": (2048, 4096, 8192)}


def configs(name: str, n_layers: int, tiered: tuple[str, ...] = ()) -> dict[str, PrefillConfig]:
    """The RidgeFill arms' configurations: the advised one, POP native and the ``tiered``
    arms by name (gpu.lab.eval.grid.parse_arm)."""
    advised = default_config(name, rows="none")
    if advised.fill == "exact":
        raise ValueError(f"{name}'s advised configuration is exact prefill: nothing to time "
                         "beside stock vLLM")
    return {"advised": advised, "pop": presets.pop(n_layers),
            **{arm: parse_arm(arm) for arm in tiered}}


def engines(name: str, folder: Path, cfgs: dict, n_max: int, dtype: str, arms) -> dict:
    """One vLLM engine per arm of ``arms`` (see the module docstring)."""
    from vllm import LLM

    common = dict(dtype=dtype, max_model_len=n_max + 64, kv_cache_memory_bytes=KV_CACHE_BYTES,
                  enable_prefix_caching=False, seed=0)
    one_pass = dict(common, max_num_batched_tokens=n_max + 64, enable_chunked_prefill=False)
    if any(cfg.rows != "none" for cfg in cfgs.values()):   # their exact rows are read back
        os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    out = {}
    if "stock" in arms:
        out["stock"] = LLM(str(folder), **common)
    if "stock-one-pass" in arms:
        out["stock-one-pass"] = LLM(str(folder), **one_pass)
    for arm, cfg in cfgs.items():
        maps = (cached_maps(name, cfg.split, cfg.map_kinds[0])
                if cfg.needs_maps else None)
        out[arm] = LLM(str(folder), hf_overrides=overrides(folder, cfg, maps), **common)
    return out


def _filled(model) -> int:
    """Run inside vLLM's worker: the prompt rows the last filling step filled."""
    return int(model.last_filled.size)


def first_token_seconds(llm, ids: list[int]) -> float:
    """Wall time of a one-token generation of ``ids`` (the prefill and one sampling step)."""
    from vllm import SamplingParams

    time.sleep(SETTLE)
    start = time.perf_counter()
    llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, temperature=0),
                 use_tqdm=False)
    return time.perf_counter() - start


def transformers_exact(name: str, ids) -> float:
    """The project's transformers engine, exact prefill in fp32, once (after a short warm-up);
    the model is loaded for it and freed after."""
    import torch

    from ...core.engine import Engine

    loaded = models.load(name, device="cpu", dtype=torch.float32)
    engine = Engine(loaded.model)
    exact = PrefillConfig(fill="exact")
    engine.prefill(ids[:, :512], exact)
    start = time.perf_counter()
    engine.prefill(ids, exact)
    seconds = time.perf_counter() - start
    del engine, loaded
    gc.collect()
    return seconds


def bench_model(name: str, lengths, repeats: int, dtype: str, reference: bool,
                arms=VLLM_ARMS, tiered: tuple[str, ...] = ()):
    """Yield one record per prompt length (module docstring); ``arms`` must hold stock, the
    base of every ratio; ``tiered``: the selecting arms' names, whose ceilings count the rows
    each left exact in its last timed prefill."""
    if "stock" not in arms:
        raise ValueError("--arms must include stock: every speedup is over stock vLLM")
    from transformers import AutoConfig, AutoTokenizer

    _, folder = models.resolve(name)
    tok = AutoTokenizer.from_pretrained(folder)
    arch = arch_of(AutoConfig.from_pretrained(folder))
    cfgs = configs(name, arch.n_layers, tiered)
    cfgs = {arm: cfg for arm, cfg in cfgs.items() if arm in arms or arm in tiered}
    llms = engines(name, folder, cfgs, max(lengths), dtype, arms)
    for n in lengths:
        ids = prompt_ids(models.Loaded(None, tok, name, folder), n)
        for arm in llms:                       # warm-up: each arm once, untimed
            first_token_seconds(llms[arm], ids[0].tolist())
        times = {arm: [] for arm in llms}
        for _ in tqdm(range(repeats), desc=f"{name} {n} tokens", unit="round"):
            for arm in llms:
                times[arm].append(first_token_seconds(llms[arm], ids[0].tolist()))
        med = {arm: statistics.median(t) for arm, t in times.items()}
        rec = {"model": name, "n": n, "dtype": dtype, "repeats": repeats, "engine": "vllm",
               "tiered": list(tiered), "seconds": times, "median_seconds": med}
        for arm, cfg in cfgs.items():
            exact = 0 if cfg.rows == "none" else n - cfg.tail - llms[arm].apply_model(_filled)[0]
            ceiling = speedup_ceiling(arch, n, cfg.split, cfg.tail, E=exact,
                                      arm=cost_arm(cfg.fill, cfg.values_fill))
            rec[arm] = {"config": {k: getattr(cfg, k) for k in
                                   ("fill", "values_fill", "split", "tail", "rows")}
                        | {"selector_options": cfg.options, "exact_prefix_rows": exact},
                        "speedup": med["stock"] / med[arm],
                        "ceiling_macs": ceiling,
                        "share_of_mac_ceiling": med["stock"] / med[arm] / ceiling}
            if "stock-one-pass" in med:
                rec[arm]["speedup_over_one_pass"] = med["stock-one-pass"] / med[arm]
        if reference:
            rec["transformers_exact_fp32_seconds"] = transformers_exact(name, ids)
        print(_line(rec), flush=True)
        yield rec


def _line(r: dict) -> str:
    med, ref = r["median_seconds"], r.get("transformers_exact_fp32_seconds")
    parts = [f"{r['model']} {r['n']} tokens ({r['dtype']}): stock vLLM {med['stock']:.2f} s"]
    if "stock-one-pass" in med:
        parts.append(f"stock in one pass {med['stock-one-pass']:.2f} s")
    for arm, a in r.items():
        if isinstance(a, dict) and "speedup" in a:
            parts.append(f"{arm} {a['speedup']:.2f}x ({a['share_of_mac_ceiling']:.0%} of its "
                         f"{a['ceiling_macs']:.2f}x ceiling)")
    if ref:
        parts.append(f"transformers exact fp32 {ref:.2f} s")
    return "; ".join(parts)


def _key(r: dict) -> tuple:
    """What makes two records the same measurement: model, length, repeats, processor (bf16
    speed depends on the processor's extensions, gpu.lab.tools.bench_records.cpu) and the
    tiered arms timed beside."""
    return r["model"], r["n"], r["repeats"], r.get("cpu"), tuple(r.get("tiered", ()))


def run(opts: BenchOptions) -> int:
    """Every model at its lengths; bench.json rewritten after every record (resumable)."""
    use_engine_env()
    dtype = DTYPES[opts.dtype] if opts.dtype else default_dtype()
    out = Path(opts.out_dir) / "vllm"
    path = out / f"bench-{dtype}.json"
    prior = prior_records(path, opts.resume)
    done = {_key(r) for r in prior}
    info = {"command": "ridgefill " + " ".join(sys.argv[1:]), "machine": platform.platform(),
            "cpu": cpu(), "date": time.strftime("%Y-%m-%d"), "seed": "haystack seed 1",
            "load_average_before": os.getloadavg()}
    records = []

    for name in opts.models:
        lengths = [n for n in (opts.lengths or LENGTHS.get(name, (2048, 4096)))
                   if _key({"model": name, "n": n, "repeats": opts.repeats,
                            "cpu": info["cpu"], "tiered": opts.tiered}) not in done]
        if not lengths:
            continue
        for rec in bench_model(name, lengths, opts.repeats, dtype, opts.reference,
                               opts.arms, opts.tiered):
            records.append({k: info[k] for k in ("command", "date", "machine", "cpu")} | rec)
            write_json(path, {**info, "complete": False, "records": merged(prior, records, _key)})
    write_json(path, {**info, "complete": True, "records": merged(prior, records, _key),
                      "load_average_after": os.getloadavg()})
    print(f"wrote {path}")
    return 0
