"""When a step's new rows are worth filling (``python -m gpu.lab.tools.fill_threshold``): the
measurement behind gpu.serving.rows.MIN_FILL_ROWS.

In one vLLM engine with the RidgeFill class (the model's advised configuration, the dtype
vLLM is fast in here), a ``--prefix``-token document is prefilled once and stays in vLLM's
prefix cache; then prompts that continue it with ``n`` new tokens (a follow-up turn) are
prefilled with the fill on (threshold 1) and off (threshold above every n: the stock
forward), alternating in the same process, ``--repeats`` times each, every prompt's new
tokens its own so only the shared document is cached. The record is the median time to the
first token per (n, arm) and their ratio.
"""
from __future__ import annotations

import argparse
import os
from operator import methodcaller
import sys
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rfmodel.atomic import write_json

from ...core import models
from ...core.advised import default_config
from ...data import corpus
from ...serving.serve import served_maps
from ...serving.settings import default_dtype, overrides, use_engine_env

OFF = 1 << 30          # a threshold no step reaches: every row exact, vLLM's own forward


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--prefix", type=int, default=4096, help="the cached document's tokens")
    p.add_argument("--new", type=int, nargs="+", default=(32, 64, 128, 256, 512, 1024, 2048))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("results/serving/fill_threshold.json"))
    a = p.parse_args(argv)
    use_engine_env()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model pickles
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    name, folder = models.resolve(a.model)
    config, maps = served_maps(name, folder, default_config(name, None, rows="none"), None)
    dtype = default_dtype()
    tok = AutoTokenizer.from_pretrained(folder)
    need = a.prefix + 2 * a.repeats * sum(a.new) + 1024
    words = tok(corpus.haystack_text(need * corpus.CHARS_PER_TOKEN * 2, seed=0)).input_ids
    document, rest = words[:a.prefix], words[a.prefix:]
    llm = LLM(str(folder), dtype=dtype, seed=0, max_model_len=a.prefix + max(a.new) + 64,
              hf_overrides=overrides(folder, config, maps))
    once = SamplingParams(temperature=0, max_tokens=1)
    llm.generate([TokensPrompt(prompt_token_ids=document)], once)      # into the cache
    times: dict[str, dict[int, list[float]]] = {"filled": {}, "exact": {}}
    at = 0
    for _ in tqdm(range(a.repeats), desc="rounds"):
        for n in a.new:
            for arm, rows in (("filled", 1), ("exact", OFF)):
                prompt = document + rest[at:at + n]
                at += n
                llm.apply_model(methodcaller("__setattr__", "min_fill_rows", rows))
                start = time.perf_counter()
                (out,) = llm.generate([TokensPrompt(prompt_token_ids=prompt)], once,
                                      use_tqdm=False)
                times[arm].setdefault(n, []).append(time.perf_counter() - start)
                assert out.num_cached_tokens >= a.prefix - 128, out.num_cached_tokens
    rows = [{"new_tokens": n, "filled_s": float(np.median(times["filled"][n])),
             "exact_s": float(np.median(times["exact"][n])),
             "speedup": float(np.median(times["exact"][n]) / np.median(times["filled"][n]))}
            for n in a.new]
    write_json(a.out, {"command": "python -m gpu.lab.tools.fill_threshold " + " ".join(
        argv or sys.argv[1:]), "model": name, "dtype": dtype, "prefix": a.prefix,
        "repeats": a.repeats, "processor": models.cpu_info()[0],
        "config": f"keys {config.fill} / values {config.values_fill or config.fill}, split "
                  f"{config.split}, tail {config.tail}", "date": time.strftime("%Y-%m-%d"),
        "rows": rows, "raw": {arm: {str(n): v for n, v in t.items()}
                              for arm, t in times.items()}})
    for r in rows:
        print(f"{r['new_tokens']:5d} new after {a.prefix} cached: exact {r['exact_s']:.3f} s, "
              f"filled {r['filled_s']:.3f} s, {r['speedup']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
