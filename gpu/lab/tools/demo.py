"""``ridgefill demo`` (``make demo``): the method on a real model in a few minutes.

Builds a long prompt with a needle in the filled region and answers it both ways, side by side
with the time to first token and the speedup. Where vLLM has its fast path (installed, and a
CPU with bf16 kernels) the two ways are stock vLLM and RidgeFill inside vLLM
(gpu.lab.tools.demo_vllm), the engine a user would otherwise run; elsewhere the project's
engine, exact prefill against RidgeFill in fp32, with the rows and a PNG of where they went
and of the speedup against the ceilings (paper section 2.5). It says which it ran. The 0.5B's
advised maps ship with the package; other maps are fitted on first use and cached.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from tqdm import tqdm

from rfmath.cost import exact_share, speedup_ceiling
from rfmodel.atomic import atomic_path, write_json

from ...data import corpus
from ...core import models, presets
from ...core import prompt as prompts
from ..eval import tasks
from ...core.fills import cost_arm
from ...api import RidgeFill
from ...core.advised import DEMO_MODEL, default_config, default_split
from ...core.config import PrefillConfig
from ...core.archspec import arch_of
from ...maps.cached import cached_maps
from ...maps.files import load_maps
from . import demo_vllm

LENGTH = 2048
REQUESTS = 5        # timed requests per arm, alternating, after one untimed warm-up each
ANSWER_TOKENS = 24


def needle_prompt(tok, tail: int, length: int, seed: int = 0):
    """A niah_single_1 chat prompt whose needle lies in the filled prefix (``tail`` rows exact)."""
    hay = corpus.haystack_text(length * corpus.CHARS_PER_TOKEN * 2, seed=seed)
    for index in range(40):
        s = tasks.make_sample("niah_single_1", length, seed, hay, tok, index=index, reserve=64)
        p = prompts.build(tok, s.context, s.question, chat=True)
        shift = p.text.find(s.context)
        if tasks.in_filled_region(s, p.spans, p.n, tail, char_shift=shift):
            return s, p
    raise RuntimeError("no sample with its needle in the filled region; lengthen the prompt")


def plot(out: Path, counts: dict, n: int, rows, measured: float, ceilings: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colors = np.zeros(n, int)                 # 0 filled, 1 exact prefix, 2 tail
    colors[rows] = 1
    colors[n - counts["tail"]:] = 2
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 4.2), gridspec_kw={"height_ratios": [1, 2]})
    cmap = matplotlib.colors.ListedColormap(["#d9b38c", "#c0392b", "#2e86c1"])
    a.imshow(colors[None], aspect="auto", cmap=cmap, vmin=0, vmax=2, interpolation="nearest")
    a.set_yticks([])
    a.set_xlabel("prompt row")
    a.set_title(f"rows: {counts['filled']} filled (tan), {counts['exact_prefix']} exact prefix "
                f"(red), {counts['tail']} tail (blue)")
    names = ["measured", "MAC ceiling", "1/r"]
    vals = [measured, ceilings["macs"], ceilings["one_over_r"]]
    b.barh(names, vals, color=["#2e86c1", "#95a5a6", "#bdc3c7"])
    for i, v in enumerate(vals):
        b.text(v, i, f" {v:.2f}x", va="center")
    b.axvline(1.0, color="k", lw=0.8)
    b.set_xlabel("speedup of time to first token over exact prefill")
    fig.tight_layout()
    path = out / "demo.png"
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def run(model: str = DEMO_MODEL, device: str | None = None,
        out_dir: Path = Path("out/demo"), requests: int = REQUESTS, engine: str = "auto") -> int:
    """Answer one needle prompt both ways (module docstring; ``engine`` auto, vllm or
    transformers): both warmed up untimed (the first call pays one-time compilation and
    allocation), then ``requests`` requests each, alternating in ABBA order so slow drift of a
    shared machine cancels; the median time to first token of each is reported."""
    out = Path(out_dir)
    why = demo_vllm.unavailable() if device in (None, "cpu") else "vLLM's CPU demo runs on the CPU"
    if engine == "vllm" and why:
        raise ValueError(f"--engine vllm: {why}; use --engine transformers")
    if engine == "vllm" or (engine == "auto" and why is None):
        from transformers import AutoTokenizer

        name, folder = models.resolve(model)
        sample, p = needle_prompt(AutoTokenizer.from_pretrained(folder),
                                  default_config(name).tail, LENGTH)
        record = demo_vllm.run(model, out, requests, p, ANSWER_TOKENS)
        demo_vllm.report(record, sample.expected[0], out)
        return 0
    print("engine: the project's transformers engine, fp32, exact prefill against RidgeFill"
          + (f" (not vLLM: {why})" if engine == "auto" else ""))
    loaded = models.load(model, device=device)
    split, cfg, note = showcase(loaded)
    maps = ({k: load_maps(cached_maps(loaded.name, split, k, loaded=loaded), loaded.model,
                          split=split)
             for k in cfg.map_kinds} if cfg.needs_maps else None)
    exact = RidgeFill(loaded, None, PrefillConfig(fill="exact"))
    rf = RidgeFill(loaded, maps, cfg)
    sample, p = needle_prompt(loaded.tokenizer, rf.config.tail, LENGTH)
    runners = {"exact": exact, "ridgefill": rf}

    def ask(runner: RidgeFill, new_tokens: int):
        return runner.generate(sample.context, sample.question, chat=True,
                               max_new_tokens=new_tokens)

    for runner in runners.values():  # warm-up, untimed
        ask(runner, 1)
    ttft: dict[str, list[float]] = {k: [] for k in runners}
    results = {}
    for i in tqdm(range(requests), desc="alternating requests", unit="pair"):
        order = list(runners.items())
        for name, runner in order if i % 2 == 0 else order[::-1]:  # ABBA: drift cancels
            results[name] = ask(runner, ANSWER_TOKENS)
            ttft[name].append(results[name].ttft_seconds)
    med = {k: statistics.median(v) for k, v in ttft.items()}
    pre = rf.prefill(p)
    rows = pre.plan.exact_rows
    counts = pre.plan.counts()
    arch = arch_of(loaded.model.config)
    ceilings = {"one_over_r": 1 / exact_share(split, loaded.n_layers, cfg.tail, p.n),
                "macs": speedup_ceiling(arch, p.n, split, cfg.tail, E=len(rows),
                                        arm=cost_arm(cfg.fill, cfg.values_fill))}
    speedup = med["exact"] / med["ridgefill"]
    ex, rr = results["exact"], results["ridgefill"]
    expected = sample.expected[0]
    print()
    if note:
        print(note)
    print(f"model {loaded.name} ({loaded.n_layers} layers), split {split}, tail {cfg.tail}, "
          f"fill {cfg.fill}, rows {cfg.rows}; needle {expected!r} at token {_needle_row(sample, p)} of {p.n}")
    print(f"exact answer:     {_one_line(ex.text)}")
    print(f"RidgeFill answer: {_one_line(rr.text)}")
    print(f"{'':22}{'exact':>28}  {'RidgeFill':>28}")
    print(f"{'needle found':22}{str(expected in ex.text):>28}  {str(expected in rr.text):>28}")
    print(f"{'prompt tokens':22}{ex.prompt_tokens:>28}  {rr.prompt_tokens:>28}")
    print(f"{'filled / exact rows':22}{'0 / ' + str(p.n):>28}  "
          f"{f'{rr.filled} / {rr.exact_prefix} + {rr.tail} tail':>28}")
    print(f"{'time to first token':22}{med['exact']:>27.2f}s  {med['ridgefill']:>27.2f}s")
    print(f"speedup {speedup:.2f}x (median of {requests} alternating requests after a warm-up; "
          f"ceilings: multiply-accumulate {ceilings['macs']:.2f}x, 1/r "
          f"{ceilings['one_over_r']:.2f}x)")
    png = plot(out, counts, p.n, rows, speedup, ceilings)
    write_json(out / "demo.json", {"model": loaded.name, "split": split, "tail": cfg.tail,
                                   "fill": cfg.fill, "rows": cfg.rows, "expected": expected, "speedup": speedup,
                                   "requests": requests, "ttft_seconds": ttft,
                                   "ceilings": ceilings, "counts": counts,
                                   "exact": ex.to_dict(), "ridgefill": rr.to_dict()})
    print(f"wrote {png} and {out / 'demo.json'}")
    print("\nGo further:")
    flags = f" --fill ridge --split {split} --tail 1 --rows none" if note else ""
    if cfg.needs_maps:
        print(f"  ridgefill fit --model {loaded.name} --splits {split} --kinds "
              f"{' '.join(cfg.map_kinds)} --out maps-s{split}.safetensors")
        flags = f" --maps maps-s{split}.safetensors" + flags
    print(f"  ridgefill generate --model {loaded.name}{flags} --chat --prompt-file doc.txt "
          "--question '...'")
    print("  make eval     # needles, long-document loss, agreement, controls (hours)")
    print("  make bench    # time to first token, exact vs RidgeFill, against the ceilings")
    return 0


def showcase(loaded: models.Loaded) -> tuple[int, PrefillConfig, str]:
    """(split, configuration, note) the demo runs: the model's advised configuration; where
    the advisor advises exact prefill (no configuration kept its budget), the ridge fill at
    POP native's split with a one-token tail, and a note that says so."""
    advised = default_config(loaded.name)
    if advised.fill != "exact":
        split = default_split(loaded.name, loaded.n_layers)
        return split, advised.replace(split=split), ""
    config = presets.pop(loaded.n_layers).replace(fill="ridge")
    split = config.split
    return split, config, (
        f"note: the advisor advises exact prefill for {loaded.name} (no configuration kept its "
        f"budget, gpu/core/advised.py); the demo shows the ridge fill at POP native's split "
        f"{split} with a one-token tail, which does not keep that budget")


def _needle_row(sample, p) -> int:
    shift = p.text.find(sample.context)
    return tasks.needle_token_positions(sample, p.spans, shift)[0][0]


def _one_line(text: str) -> str:
    """The whole answer on one line."""
    return " ".join(text.split())
