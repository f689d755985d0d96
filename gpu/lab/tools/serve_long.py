"""Long prompts through the server (``python -m gpu.lab.tools.serve_long``): ``ridgefill serve``
with the advised fill against stock vLLM (``--fill exact``), both with vLLM's chunked prefill
and prefix caching (its defaults), one server at a time on localhost.

Per server: time to first token of one needle prompt per ``--lengths`` (the project's
niah_single_1 generator, seed ``--seed``, chat template; a new haystack per prompt, so no
prefix is cached), and then the interference test: a client decoding a long answer (``--decode``
tokens from a short prompt) while a ``--lengths[0]``-token prompt arrives and prefills; the
decoding client's inter-token gaps while the long prompt prefills (from its arrival to its
first token) give p50 / p95, beside the same client's gaps with nothing else running. Raw
records go to ``long.json`` (resumable per arm).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

import numpy as np
from tqdm import tqdm

from rfmodel.atomic import write_json

from ...core import models
from .serve_load import ARMS, needle_prompts, record, serving, stream, tokenizer_of, tool_args

SHORT = "Write a long story about a lighthouse keeper, at least 600 words."


def interference(port: int, model: str, prompt: str, decode: int) -> dict:
    """Gaps of a decoding client while ``prompt`` prefills, and the long prompt's TTFT."""
    got: dict = {}
    decoder = threading.Thread(target=lambda: got.update(stream(
        port, "/v1/chat/completions", {"model": model, "max_tokens": decode,
                                       "min_tokens": decode, "temperature": 0,
                                       "messages": [{"role": "user", "content": SHORT}]})))
    decoder.start()
    time.sleep(3.0)                                    # the decoder is streaming by now
    sent = time.perf_counter()
    long_ = stream(port, "/v1/completions", {"model": model, "prompt": prompt,
                                             "max_tokens": 1, "temperature": 0})
    first = sent + long_["ttft"]
    decoder.join()
    t = np.asarray(got["arrivals"])
    gaps = np.diff(t)
    during = gaps[(t[1:] > sent) & (t[:-1] < first)]
    before = gaps[t[1:] <= sent]
    return {"long_ttft": long_["ttft"], "decoded_chunks": int(t.size),
            "gaps_during": during.round(4).tolist(), "gaps_before": before.round(4).tolist(),
            "during_p50": float(np.percentile(during, 50)) if during.size else None,
            "during_p95": float(np.percentile(during, 95)) if during.size else None,
            "during_max": float(during.max()) if during.size else None,
            "before_p50": float(np.percentile(before, 50)) if before.size else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=(16384, 32768))
    p.add_argument("--decode", type=int, default=600, help="the decoding client's tokens")
    tool_args(p, 8125, servers=True)
    a = p.parse_args(argv)
    name, tok = tokenizer_of(a.model)
    path, result = record(a.out_dir, name, "long.json", "serve_long", argv, model=name,
                          seed=a.seed, processor=models.cpu_info()[0])
    extra = tuple(x for x in a.serve_args if x != "--")
    for arm in ARMS:
        rec = result.setdefault("arms", {}).setdefault(arm, {})
        if "interference" in rec and all(str(n) in rec.get("ttft", {}) for n in a.lengths):
            continue
        with serving(name, arm, a.port, path.parent / f"long-{arm}.log", extra):
            stream(a.port, "/v1/completions", {"model": name, "max_tokens": 1, "prompt":
                   needle_prompts(tok, 1, 2048, a.seed + 999)[0][0]})          # warm-up
            for i, n in enumerate(tqdm(a.lengths, desc=f"{arm} long prompts")):
                if str(n) in rec.setdefault("ttft", {}):
                    continue
                prompt, expected = needle_prompts(tok, 1, n, a.seed + 10 + i)[0]
                got = stream(a.port, "/v1/completions", {"model": name, "prompt": prompt,
                                                         "max_tokens": 24, "temperature": 0})
                rec["ttft"][str(n)] = {"seconds": got["ttft"], "answer": got["text"],
                                       "found": all(v in got["text"] for v in expected)}
                write_json(path, result)
            if "interference" not in rec:
                prompt = needle_prompts(tok, 1, a.lengths[0], a.seed + 50)[0][0]
                rec["interference"] = {"length": a.lengths[0], **interference(
                    a.port, name, prompt, a.decode)}
                write_json(path, result)
    print(json.dumps({arm: {"ttft": {n: r["seconds"] for n, r in rec.get("ttft", {}).items()},
                            **{k: v for k, v in rec.get("interference", {}).items()
                               if not k.startswith("gaps")}}
                      for arm, rec in result["arms"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
