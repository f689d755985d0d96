"""``ridgefill bench`` (``make bench``): time to first token, exact vs RidgeFill, alternating in
one process on the same prompts, against the ceilings of paper section 2.5.

Per model and prompt length: one warm-up of each arm (on the prompt's first ``WARMUP_TOKENS``
tokens: a 32K warm-up would cost as much as a timed round), then ``repeats`` rounds of (exact,
RidgeFill, RidgeFill with the other fill order than the device's default (its filled entries
in one batched pass, gpu.core.batched, or layer by layer), POP native (identity fill from L - floor(L/3), one-token tail),
RidgeFill with 2.5% / 5% / 10% random exact prefix rows (``rows_probe``), and above the
lower pass's chunk the stock forward in passes of that many rows (chunked exact prefill,
:func:`exact_in_passes`, the baseline a serving stack runs)) timed back to back;
the median of each and the ratio of medians. Beside it, 1/r and the multiply-accumulate ceilings of RidgeFill and POP
(rfmath.cost), the peak resident memory of each arm over its baseline, the maps' size, and the
cost of one exact prefix row (sigma and kappa of Appendix H: the slope over the row counts,
with its range over the repeats; "not resolved" unless every repeat's slope is positive) with
the break-even row count.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import DynamicCache

from rfmath.cost import break_even_rows, exact_share, speedup_ceiling
from rfmodel.atomic import atomic_path, write_json

from ...data import corpus
from ...core import models, presets
from ...core.models import default_device
from ...core.archspec import arch_of
from ...maps.cached import cached_path, shipped_path
from ...maps.files import MapSet, load_maps
from ...core.config import PrefillConfig, paper_split
from .bench_records import cpu, measurement_key, merged, prior_records, record_key
from .bench_options import BenchOptions
from .peak_memory import PeakMemory
from ...core.advised import ADVISABLE, ADVISED, default_config
from ...core.engine import Engine
from ...core.prompt import from_ids
from ..eval.frontier import arm_name
from ...core.fills import cost_arm

SETTINGS = {  # model -> (split, tail, default lengths) of the study speed configuration
    "smollm2-135m": (15, 1024, (2048, 4096, 8192)),
    "gemma3-270m": (7, 1024, (4096, 8192, 16384, 32768)),  # 32K: ~20 min a round on 2 cores
    # the larger models at their advised split (POP's) with a one-token tail, up to 16K / 8K
    "qwen2.5-coder-0.5b": (ADVISED["qwen2.5-coder-0.5b"]["split"], 1, (2048, 4096, 8192, 16384)),
    "qwen2.5-coder-1.5b": (ADVISED["qwen2.5-coder-1.5b"]["split"], 1, (2048, 4096, 8192)),
}
ROW_SHARES = (0.025, 0.05, 0.10)   # exact prefix rows for the sigma / kappa measurement
WARMUP_TOKENS = 8192               # the warm-up prompt's length cap (also one lower-layer chunk)


def fitted_or_shaped_maps(loaded: models.Loaded, split: int, kind: str = "ridge"
                          ) -> tuple[MapSet, str]:
    """The shipped or cached fitted maps of ``kind`` for (model, split) if any, else random maps of the
    same shape: timing does not depend on the maps' values (said so in the output). A kv map
    predicts each layer's key and value projections (2 n_kv d_head columns), the others its
    input (d)."""
    path = shipped_path(loaded.name, split, kind) or cached_path(loaded.name, split, kind)
    kw = dict(dtype=loaded.model.dtype, device=loaded.model.device)
    if path.exists() and loaded.tokenizer is not None:
        return load_maps(path, loaded.model, split=split), str(path)
    cfg = loaded.model.config
    d = cfg.hidden_size
    head_dim = getattr(cfg, "head_dim", None) or d // cfg.num_attention_heads
    d_out = 2 * cfg.num_key_value_heads * head_dim if kind == "kv" else d
    g = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(split + 1, loaded.n_layers):
        tensors[f"layers.{layer}.weight_bf16"] = (torch.randn(d_out, d, generator=g)
                                                  / d**0.5).bfloat16()
        tensors[f"layers.{layer}.bias"] = torch.zeros(d_out)
    meta = {"layers": list(range(split + 1, loaded.n_layers)), "d_in": d, "d_out": d_out,
            "kind": kind}
    return MapSet(split, meta, tensors, **kw), "random maps of the fitted shape (timing only)"


def advised_arm(name: str, ridgefill: PrefillConfig, pop: PrefillConfig
                ) -> tuple[PrefillConfig | None, str | None]:
    """The model's advised configuration (gpu.core.advised) as its own bench arm, or None with
    the arm it coincides with ("pop", "ridgefill") or "exact" when the advice is exact prefill
    (nothing to time beside exact) or there is no advice."""
    if name not in ADVISED:
        return None, None
    a = default_config(name)
    if a.fill == "exact":
        return None, "exact"
    fields = ("fill", "values_fill", "split", "tail", "rows")
    for other, label in ((pop, "pop"), (ridgefill, "ridgefill")):
        if all(getattr(a, f) == getattr(other, f) for f in fields):
            return None, label
    return a, None


QUALITY = (Path("results/power"), Path("results/frontier"))  # committed frontier summaries


def measured_retrieval(model: str, split: int, tail: int, roots=QUALITY) -> dict | None:
    """The filled-region retrieval the committed frontier measured for the RidgeFill arm the
    bench times (ridge fill, ``split``, ``tail``, no exact rows; the largest sample among
    ``roots``), so a speed is never read apart from what the configuration keeps; None where
    no frontier ran it."""
    best = None
    for root in roots:
        path = Path(root) / model / "frontier.json"
        if not path.is_file():
            continue
        row = {r["arm"]: r for r in json.loads(path.read_text())["rows"]}.get(f"ridge@{split}/t{tail}")
        if row and row.get("retrieval") is not None and (best is None or row["n"] > best["n"]):
            best = {"retrieval": row["retrieval"], "n": row["n"], "source": str(path)}
    return best


def prompt_ids(loaded: models.Loaded, n: int) -> torch.Tensor:
    if loaded.tokenizer is None:  # random weights: random tokens
        g = torch.Generator().manual_seed(n)
        return torch.randint(0, loaded.model.config.vocab_size, (1, n), generator=g)
    text = corpus.haystack_text(n * corpus.CHARS_PER_TOKEN * 2, seed=1)
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids[:, :n]
    if ids.shape[1] < n:
        raise RuntimeError(f"haystack too short for {n} tokens")
    return ids


class _Last:
    """What the timed arms return: the logits of the last row (the first token)."""

    def __init__(self, logits: torch.Tensor):
        self.last_logits = logits


@torch.inference_mode()
def exact_in_passes(model, ids: torch.Tensor, chunk: int) -> _Last:
    """Exact prefill as the stock forward in passes of ``chunk`` rows over one cache (each
    pass's masks and activations chunk x n rather than n x n; the same cache as one pass up
    to float rounding): the exact baseline RidgeFill's own chunked lower pass is fair to."""
    cache = DynamicCache(config=model.config)
    for a in range(0, ids.shape[1], chunk):
        out = model(input_ids=ids[:, a:a + chunk], cache=cache, use_cache=True,
                    logits_to_keep=1)
    return _Last(out.logits[0, -1])


def _timed(fn, device) -> tuple[float, float]:
    with PeakMemory(device) as mem:
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        pre = fn()
        int(pre.last_logits.argmax())            # the first token
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t
    return seconds, mem.extra


def bench_model(name: str, lengths, repeats: int, device=None, random_weights=False,
                split: int | None = None, tail: int | None = None,
                rows_probe: bool = True, compile: bool = False, other_order: bool = True,
                done: dict | None = None, chunk: int | None = None):
    """Yield one record per prompt length; a length whose record is in ``done`` (by
    ``record_key``) is yielded from there without being timed again. ``chunk``: rows per
    lower-layer pass of every RidgeFill / POP arm and of the chunked exact arm (default
    PrefillConfig's)."""
    base = PrefillConfig() if chunk is None else PrefillConfig(chunk=chunk)
    chunk = base.chunk
    loaded = (models.random_model(name, device) if random_weights
              else models.load(name, device=device))
    split0, tail0, default_lengths = SETTINGS.get(name, (paper_split(loaded.n_layers), 1024,
                                                         (4096,)))
    split = split0 if split is None else split
    tail = tail0 if tail is None else tail
    loaded.name = name
    pop_config = presets.pop(loaded.n_layers, base)
    pop = pop_config.split
    advised, advised_as = advised_arm(name, base.replace(split=split, tail=tail, rows="none"),
                                      pop_config)
    maps, maps_source = fitted_or_shaped_maps(loaded, split)
    kinds = {"ridge": maps}
    for k in advised.map_kinds if advised is not None else ():
        if k not in kinds or advised.split != split:
            kinds[k], _ = fitted_or_shaped_maps(loaded, advised.split, k)
    arch = arch_of(loaded.model.config)
    L = loaded.n_layers
    engine = Engine(loaded.model, maps)
    engine_advised = Engine(loaded.model, kinds) if advised is not None else None
    weights = "random (timing only)" if loaded.tokenizer is None else "real"
    todo = list(lengths or default_lengths)
    bar = tqdm(total=len(todo) * (repeats + 1), desc=f"bench {name}", unit="round")
    for n in todo:
        counts = [int(share * max(n - tail, 0)) for share in ROW_SHARES] if rows_probe else []
        default_batched = PrefillConfig().batched_on(loaded.model.device)
        other = "layer" if default_batched else "batched"
        configs = {
            "exact": base.replace(fill="exact"),
            "ridgefill": base.replace(split=split, tail=tail, rows="none"),
            # the fill order the default does not use on this device (auto: gpu.core.config)
            **({"ridgefill-other-order": base.replace(split=split, tail=tail, rows="none",
                                                      fill_order=other)} if other_order else {}),
            "pop": pop_config,
            # the late walk under torch.compile (gpu.core.compiled); warm-up pays compilation
            **({"ridgefill-compiled": base.replace(split=split, tail=tail, rows="none",
                                                   compile=True)} if compile else {}),
            # random rows: the time of E exact rows whatever picks them (Appendix H)
            **{f"ridgefill+{e}rows": base.replace(split=split, tail=tail, rows="random",
                                                  selector_options={"count": e, "seed": 0})
               for e in counts if e > 0},
        }
        if advised is not None:  # the model's advised configuration (gpu.core.advised)
            configs["advised"] = advised
        passes = ["exact-chunked"] if 0 < chunk < n else []
        key = measurement_key(name, n, weights, split, tail, repeats, chunk,
                              [*configs, *passes])
        if done and key in done:
            kept = {**done[key], "retrieval": measured_retrieval(name, split, tail)}
            tqdm.write(f"kept from the earlier run: {_line(kept)}")
            bar.update(repeats + 1)
            yield kept
            continue
        ids = prompt_ids(loaded, n)
        arms = {k: (lambda x, c=c: engine.prefill(x, c)) for k, c in configs.items()}
        if advised is not None:
            text = advised.needs_text and advised.rows != "none"
            arms["advised"] = lambda x: engine_advised.prefill(
                x, advised, prompt=from_ids(loaded.tokenizer, x) if text else None)
        if passes:
            arms["exact-chunked"] = lambda x: exact_in_passes(loaded.model, x, chunk)
        for fn in arms.values():                 # one warm-up each
            fn(ids[:, :WARMUP_TOKENS])
        bar.update()
        times = {k: [] for k in arms}
        mem = {k: [] for k in arms}
        for _ in range(repeats):                 # alternate in the same process
            for k, fn in arms.items():
                t, m = _timed(lambda: fn(ids), loaded.model.device)
                times[k].append(t)
                mem[k].append(m)
            bar.update()
        med = {k: statistics.median(v) for k, v in times.items()}
        rows = row_cost(times, {0: "ridgefill", **{e: f"ridgefill+{e}rows" for e in counts if e}})
        late_row = med["exact"] * (L - split) / L / n     # an exact row's late-layer time
        e_mid = counts[len(counts) // 2] if counts else 0
        rec = {
            "model": name, "weights": weights, "device": str(loaded.model.device),
            "dtype": str(loaded.model.dtype),
            "n": n, "split": split, "tail": tail, "chunk": chunk, "exact_prefix_rows": 0,
            "repeats": repeats,
            "maps": maps_source, "maps_bytes": maps.nbytes(),
            "retrieval": measured_retrieval(name, split, tail),
            "median_seconds": med, "seconds": times,
            "speedup": med["exact"] / med["ridgefill"],
            "ceiling_one_over_r": 1 / exact_share(split, L, tail, n),
            "ceiling_macs": speedup_ceiling(arch, n, split, tail, E=0, arm="ridgefill"),
            "pop": {"split": pop, "tail": pop_config.tail, "speedup": med["exact"] / med["pop"],
                    "ceiling_macs": speedup_ceiling(arch, n, pop, pop_config.tail, E=0,
                                                    arm="identity"),
                    "ridgefill_over_pop": med["pop"] / med["ridgefill"]},
            "fill_order": {"default": "batched" if default_batched else "layer",
                           "other_order_speedup": med["exact"] / med["ridgefill-other-order"],
                           "batched_over_per_layer": (
                               (med["ridgefill-other-order"] / med["ridgefill"]) if default_batched
                               else (med["ridgefill"] / med["ridgefill-other-order"]))}
            if other_order else None,
            "exact_chunked": {"chunk": chunk,
                              "speedup": med["exact-chunked"] / med["ridgefill"],
                              "pop_speedup": med["exact-chunked"] / med["pop"],
                              "over_one_pass": med["exact"] / med["exact-chunked"]}
            if passes else None,
            "compiled": {"speedup": med["exact"] / med["ridgefill-compiled"],
                         "over_eager": med["ridgefill"] / med["ridgefill-compiled"]}
            if compile else None,
            "advised": ({"config": {k: getattr(advised, k) for k in ADVISABLE},
                         "speedup": med["exact"] / med["advised"],
                         "ceiling_macs": speedup_ceiling(
                             arch, n, advised.split, advised.tail, E=0,
                             arm=cost_arm(advised.fill, advised.values_fill)),
                         "over_pop": med["pop"] / med["advised"]}
                        if advised is not None else {"same_as": advised_as}),
            "peak_extra_bytes": {k: int(max(v)) for k, v in mem.items()},
            "rows_probe": {**rows, "kappa": rows["sigma_seconds"] / late_row
                           if rows["resolved"] else None,
                           "break_even_rows": max(break_even_rows(
                               med["exact"], med["ridgefill"], rows["sigma_seconds"]), 0)
                           if rows["resolved"] and med["exact"] > med["ridgefill"] else None,
                           "speedup_with_rows": med["exact"] / med[f"ridgefill+{e_mid}rows"]
                           if e_mid else None,
                           "ceiling_macs_with_rows": speedup_ceiling(arch, n, split, tail,
                                                                     E=e_mid, arm="ridgefill")},
        }
        rec["share_of_mac_ceiling"] = rec["speedup"] / rec["ceiling_macs"]
        rec["pop"]["share_of_mac_ceiling"] = rec["pop"]["speedup"] / rec["pop"]["ceiling_macs"]
        if passes:
            ch = rec["exact_chunked"]
            ch["share_of_mac_ceiling"] = ch["speedup"] / rec["ceiling_macs"]
            ch["pop_share_of_mac_ceiling"] = ch["pop_speedup"] / rec["pop"]["ceiling_macs"]
        tqdm.write(_line(rec))
        yield rec
    bar.close()


def row_cost(times: dict[str, list[float]], arms_by_rows: dict[int, str]) -> dict:
    """sigma, the time one exact prefix row adds (Appendix H), as the least-squares slope of
    time against the row count, fitted per repeat: the median slope and the range over the
    repeats. It is resolved only when every repeat's slope is positive (a noise-level or
    negative sigma is reported as not resolved, never as break-even 0)."""
    counts = sorted(arms_by_rows)
    if len(counts) < 2:
        return {"rows": counts, "sigma_seconds": None, "range": None, "resolved": False}
    slopes = [float(np.polyfit(counts, [times[arms_by_rows[e]][r] for e in counts], 1)[0])
              for r in range(len(times[arms_by_rows[0]]))]
    resolved = min(slopes) > 0
    return {"rows": counts, "sigma_seconds": float(np.median(slopes)) if resolved else None,
            "range": [min(slopes), max(slopes)], "resolved": resolved}


def _line(r: dict) -> str:
    mb = 1 / 2**20
    rp, pop = r["rows_probe"], r["pop"]
    sigma = (f"sigma {1e3 * rp['sigma_seconds']:.2f} ms (per-repeat {1e3 * rp['range'][0]:.2f}"
             f"-{1e3 * rp['range'][1]:.2f}), break-even {rp['break_even_rows']}"
             if rp["resolved"] else "sigma not resolved" + (
                 f" (per-repeat slopes {1e3 * rp['range'][0]:.2f}-{1e3 * rp['range'][1]:.2f} ms)"
                 if rp["range"] else ""))
    q = r.get("retrieval")
    kept = (f" (retrieval {q['retrieval']:.1f}% of {q['n']} filled-region needles)" if q
            else " (retrieval not measured)")
    return (f"{r['model']:13} N={r['n']:5} S={r['split']} T={r['tail']} E=0{kept}: exact "
            f"{r['median_seconds']['exact']:.2f}s RidgeFill {r['median_seconds']['ridgefill']:.2f}s "
            f"-> {r['speedup']:.2f}x (MAC ceiling {r['ceiling_macs']:.2f}x = "
            f"{100 * r['share_of_mac_ceiling']:.0f}%, 1/r {r['ceiling_one_over_r']:.2f}x); "
            + (f"vs exact in passes of {r['exact_chunked']['chunk']} "
               f"({r['median_seconds']['exact-chunked']:.2f}s): {r['exact_chunked']['speedup']:.2f}x "
               f"= {100 * r['exact_chunked']['share_of_mac_ceiling']:.0f}%, POP "
               f"{r['exact_chunked']['pop_speedup']:.2f}x; " if r.get("exact_chunked") else "")
            + (f"compiled walk {r['median_seconds']['ridgefill-compiled']:.2f}s "
               f"{r['compiled']['speedup']:.2f}x = "
               f"{100 * r['compiled']['speedup'] / r['ceiling_macs']:.0f}%; "
               if r.get("compiled") else "")
            + (f"batched fill {r['fill_order']['batched_over_per_layer']:.2f}x the per-layer one "
               f"(default {r['fill_order']['default']}); " if r.get("fill_order") else "") +
            f"POP {r['median_seconds']['pop']:.2f}s {pop['speedup']:.2f}x (ceiling "
            f"{pop['ceiling_macs']:.2f}x), RidgeFill/POP {pop['ridgefill_over_pop']:.2f}x; "
            + _advised_line(r) + f"peak +{r['peak_extra_bytes']['ridgefill'] * mb:.0f} MiB vs exact "
            f"+{r['peak_extra_bytes']['exact'] * mb:.0f} MiB, maps {r['maps_bytes'] * mb:.0f} MiB; "
            f"rows {rp['rows']}: {sigma}")


def _advised_line(r: dict) -> str:
    a = r.get("advised") or {}
    if "speedup" not in a:
        return f"advised = {a['same_as']}; " if a.get("same_as") else ""
    c = a["config"]
    name = arm_name(c["fill"], c["split"], c["tail"], c["rows"], c.get("values_fill"))
    return (f"advised {name} {r['median_seconds']['advised']:.2f}s "
            f"{a['speedup']:.2f}x (ceiling {a['ceiling_macs']:.2f}x), POP/advised "
            f"{a['over_pop']:.2f}x; ")


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['model']}\n{r['n'] // 1024}K" + (
        f"\nRidgeFill keeps {q['retrieval']:.0f}%" if (q := r.get("retrieval")) else "")
        for r in records]
    x = np.arange(len(records))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(records)), 4))
    bars = [("RidgeFill measured (median)", [r["speedup"] for r in records]),
            ("RidgeFill MAC ceiling", [r["ceiling_macs"] for r in records]),
            ("POP native measured", [r["pop"]["speedup"] for r in records]),
            ("POP native MAC ceiling", [r["pop"]["ceiling_macs"] for r in records])]
    if any(r.get("exact_chunked") for r in records):
        bars.insert(1, ("RidgeFill vs exact in passes (long prompts)",
                        [(r.get("exact_chunked") or {}).get("speedup", 0) for r in records]))
    w = 0.8 / len(bars)
    for i, (label, heights) in enumerate(bars):
        ax.bar(x + (i - (len(bars) - 1) / 2) * w, heights, w, label=label)
    ax.axhline(1, color="k", lw=0.8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("speedup of time to first token")
    ax.set_title(f"RidgeFill vs exact prefill ({records[0]['device']}, no exact prefix rows)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)


def run(opts: BenchOptions = BenchOptions()) -> int:
    """``ridgefill bench``: every model at its lengths (or ``opts.lengths``), then the kernels.
    bench.json is rewritten after every record (``complete`` false until the last), so a
    stopped run keeps what it measured and ``resume`` goes on from there."""
    o = opts
    models, device, kernels, resume = list(o.models), o.device, o.kernels, o.resume
    if kernels:
        from rfmodel.bench import run_kernel_bench
        run_kernel_bench()
    dev = torch.device(device).type if device else default_device().type
    out = Path(o.out_dir) / dev
    prior = prior_records(out / "bench.json", resume)
    done = {record_key(r): r for r in prior}
    records, load_before = [], os.getloadavg()
    info = {"command": "ridgefill " + " ".join(sys.argv[1:]) if sys.argv[1:]
            else "ridgefill bench " + " ".join(models), "machine": platform.platform(),
            "seeds": {"prompt": "haystack seed 1 (random weights: token ids seeded with the length)",
                      "row_arms": "rows=random seed 0"},
            "load_average_before": load_before,
            "processor": cpu(),
            "threads": torch.get_num_threads(), "date": time.strftime("%Y-%m-%d"),
            "complete": False}

    def snapshot(complete: bool) -> dict:
        """Each record names the command, the day and the machine that measured it (a kept
        record's seconds may come from another machine: compare ratios across them)."""
        return {**info, "complete": complete, "records": merged(prior, records),
                "load_average_after": os.getloadavg()}

    for name in models:
        for rec in bench_model(name, o.lengths, o.repeats, device, o.random_weights, o.split,
                               o.tail, o.rows_probe, o.compile, o.other_order, done,
                               o.chunk):
            records.append({k: info[k] for k in ("command", "date", "machine")} | rec)
            write_json(out / "bench.json", snapshot(False))
    final = snapshot(True)
    write_json(out / "bench.json", final)
    plot(final["records"], out / "bench.png")
    print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return 0
