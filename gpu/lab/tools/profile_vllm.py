"""Where a RidgeFill prefill inside vLLM spends its time (``python -m gpu.lab.tools.profile_vllm``):
the torch profiler of vLLM's own engine (``LLM.start_profile``) around one prefill of the
bench's prompt, for three engines of one model: stock vLLM in one pass (compiled, as
``ridgefill bench --engine vllm`` times it), the same engine eager (``enforce_eager``: what
RidgeFill's lower layers run as), and RidgeFill at the advised configuration, whose forward
labels its three stages (``ridgefill.lower``, ``ridgefill.fill``, ``ridgefill.exact_rows``;
gpu.serving.model).

Per engine: the wall time of the profiled prefill, the stages' inclusive times, and the
operators' self times (the trace's events nested per thread). From them, the two costs the
multiply-accumulate ceiling (paper section 2.5) does not count: the lower layers run eagerly
(their time times one minus stock's compiled-over-eager ratio) and everything outside the
three stages and the operators' own work. Records and the top operators go to
``results/bench/vllm/profile-<model>-<n>.json``.
"""
from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from rfmodel.atomic import write_json

from ...core.models import DTYPES
from ...serving.settings import overrides, use_engine_env

STAGES = ("ridgefill.lower", "ridgefill.fill", "ridgefill.exact_rows")
ARMS = ("stock-one-pass", "stock-eager", "advised")


def self_times(events: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """(self seconds, inclusive seconds) per event name of a chrome trace's complete events:
    per thread, each event's duration less its direct children's."""
    own, total = defaultdict(float), defaultdict(float)
    by_thread = defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            by_thread[(e["pid"], e["tid"])].append(e)
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in evs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if stack:
                own[stack[-1]["name"]] -= e["dur"] / 1e6
            own[e["name"]] += e["dur"] / 1e6
            total[e["name"]] += e["dur"] / 1e6
            stack.append(e)
    return dict(own), dict(total)


def profile_arm(folder: Path, kwargs: dict, ids: list[int], out: Path) -> dict:
    """One engine: a warm-up prefill, then one profiled; its trace read back."""
    from vllm import LLM

    from .bench_vllm import first_token_seconds

    out.mkdir(parents=True, exist_ok=True)
    llm = LLM(str(folder), profiler_config={"profiler": "torch", "torch_profiler_dir": str(out),
                                            "torch_profiler_with_stack": False,
                                            "ignore_frontend": True}, **kwargs)
    first_token_seconds(llm, ids)
    wall_unprofiled = first_token_seconds(llm, ids)
    llm.start_profile()
    wall = first_token_seconds(llm, ids)
    llm.stop_profile()
    del llm
    traces = sorted(out.glob("*.pt.trace.json*"), key=os.path.getmtime)
    if not traces:
        raise RuntimeError(f"vLLM wrote no torch trace under {out}")
    opener = gzip.open if traces[-1].suffix == ".gz" else open
    with opener(traces[-1], "rt") as f:
        events = json.load(f)["traceEvents"]
    own, total = self_times(events)
    ops = sorted(((k, v) for k, v in own.items() if k not in STAGES and k.startswith(("aten::",
                  "_C", "vllm", "torch", "_C_"))), key=lambda kv: -kv[1])
    return {"wall_seconds": wall, "wall_seconds_unprofiled": wall_unprofiled,
            "stages_seconds": {s: total.get(s, 0.0) for s in STAGES},
            "top_ops_self_seconds": dict(ops[:15]),
            "ops_self_seconds_total": sum(v for _, v in ops)}


def run(name: str, n: int, dtype: str, out: Path) -> dict:
    """The three engines one after another (module docstring); the record written. The lab's
    modules are imported here, not at the top: vLLM's spawned workers import this module
    again, and its kernel scan fails on numba's objects (gpu/__init__)."""
    from transformers import AutoConfig, AutoTokenizer

    from ...core import models
    from ...core.archspec import arch_of
    from ...maps.cached import cached_maps
    from .bench import prompt_ids
    from .bench_vllm import KV_CACHE_BYTES, configs

    _, folder = models.resolve(name)
    tok = AutoTokenizer.from_pretrained(folder)
    arch = arch_of(AutoConfig.from_pretrained(folder))
    cfg = configs(name, arch.n_layers)["advised"]
    maps = cached_maps(name, cfg.split, cfg.map_kinds[0]) if cfg.needs_maps else None
    ids = prompt_ids(models.Loaded(None, tok, name, folder), n)[0].tolist()
    one_pass = dict(dtype=dtype, max_model_len=n + 64, kv_cache_memory_bytes=KV_CACHE_BYTES,
                    seed=0, max_num_batched_tokens=n + 64, enable_prefix_caching=False,
                    enable_chunked_prefill=False)
    kwargs = {"stock-one-pass": one_pass, "stock-eager": dict(one_pass, enforce_eager=True),
              "advised": dict(one_pass, hf_overrides=overrides(folder, cfg, maps))}
    rec = {"command": "python -m gpu.lab.tools.profile_vllm " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d"), "model": name, "n": n, "dtype": dtype,
           "seed": "haystack seed 1", "advised_config": {k: getattr(cfg, k) for k in
                                                         ("fill", "values_fill", "split", "tail")}}
    with tempfile.TemporaryDirectory() as tmp:
        for arm in ARMS:
            rec[arm] = profile_arm(folder, kwargs[arm], ids, Path(tmp) / arm)
            print(f"{arm}: {rec[arm]['wall_seconds']:.2f} s", flush=True)
    rec["analysis"] = analyse(rec)
    path = out / f"profile-{name}-{n}.json"
    write_json(path, rec)
    print(json.dumps(rec["analysis"], indent=1))
    print(f"wrote {path}")
    return rec


def analyse(rec: dict) -> dict:
    """The advised arm's time split into its stages, and what compiling its lower layers
    would save at stock's compiled-over-eager ratio."""
    adv = rec["advised"]
    compiled_over_eager = rec["stock-one-pass"]["wall_seconds"] / rec["stock-eager"]["wall_seconds"]
    stages = adv["stages_seconds"]
    lower = stages["ridgefill.lower"]
    return {"advised_wall_seconds": adv["wall_seconds"],
            "stage_share": {k: v / adv["wall_seconds"] for k, v in stages.items()},
            "outside_stages_seconds": adv["wall_seconds"] - sum(stages.values()),
            "stock_compiled_over_eager": compiled_over_eager,
            "lower_if_compiled_saves_seconds": lower * (1 - compiled_over_eager),
            "speedup_measured": rec["stock-one-pass"]["wall_seconds"] / adv["wall_seconds"],
            "speedup_if_lower_compiled": rec["stock-one-pass"]["wall_seconds"]
            / (adv["wall_seconds"] - lower * (1 - compiled_over_eager))}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--length", type=int, default=4096)
    p.add_argument("--dtype", default="bf16", choices=tuple(DTYPES))
    p.add_argument("--out-dir", type=Path, default=Path("results/bench/vllm"))
    a = p.parse_args(argv)
    logging.basicConfig(format="%(message)s")  # the maps it finds or fits (gpu.maps.files)
    logging.getLogger("ridgefill").setLevel(logging.INFO)
    use_engine_env()
    run(a.model, a.length, DTYPES[a.dtype], a.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
