"""Serving under mixed traffic (``python -m gpu.lab.tools.serve_traffic``): ``ridgefill serve`` with
the advised fill against stock vLLM (``--fill exact``), both with vLLM's defaults (prefix
caching, chunked prefill), one server at a time on localhost, the same requests to both.

Each load level sends ``--conversations`` new documents (needle documents of the project's
niah_single_1 generator, lengths cycling through ``--lengths``, chat template, seed
``--seed``; new documents at every level so no level hits another's cache) and, for each, a
follow-up turn (the document, a fixed assistant reply, then the needle's question), the
follow-up queued two requests after its document, all through a bounded thread pool of
``concurrency`` clients on ``/v1/chat/completions``. Per request the raw record (kind, length,
time to first token, total time, answer, finish reason, whether the answer holds its own
needle and no other's) goes to ``traffic.json``; per level and kind TTFT p50/p95 and requests
per minute.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm import tqdm

from rfmodel.atomic import write_json

from ...core import models
from ..eval import tasks
from .serve_chat import conversations
from .serve_load import ARMS, record, serving, stream, tokenizer_of, tool_args

REPLY = "I have read the document. Ask me anything about it."


def requests(tok, n: int, lengths, seed: int) -> list[dict]:
    """``n`` new-document requests and their follow-ups, each follow-up two places after
    its document: {"kind", "length", "messages", "expected"}."""
    docs = [conversations(tok, 1, lengths[i % len(lengths)], seed + i)[0] for i in range(n)]
    new = [{"kind": "new", "length": lengths[i % len(lengths)], "expected": d["expected"],
            "messages": [{"role": "user", "content": f"{d['document']}\n\nSummarize the text "
                                                     "above in one sentence."}]}
           for i, d in enumerate(docs)]
    follow = [{"kind": "follow-up", "length": r["length"], "expected": r["expected"],
               "messages": r["messages"] + [{"role": "assistant", "content": REPLY},
                                            {"role": "user", "content": d["needle_question"]}]}
              for r, d in zip(new, docs)]
    order = []
    for i in range(n):
        order.append(new[i])
        if i >= 2:
            order.append(follow[i - 2])
    return order + follow[max(n - 2, 0):]


def run_level(port: int, model: str, reqs: list[dict], concurrency: int,
              max_tokens: int) -> dict:
    """Every request once, ``concurrency`` at a time: raw records and their summary."""
    def one(r):
        got = stream(port, "/v1/chat/completions", {"model": model, "messages": r["messages"],
                                                      "max_tokens": max_tokens,
                                                      "temperature": 0})
        return {"kind": r["kind"], "length": r["length"], **got}

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        got = list(pool.map(one, reqs))
    wall = time.perf_counter() - start
    numbers = [set(r["expected"]) for r in reqs]
    for i, (g, r) in enumerate(zip(got, reqs)):
        g["own_needle"] = tasks.score(g["text"], r["expected"]) if r["kind"] == "follow-up" \
            else None
        g["mixed"] = any(v in g["text"] for j, other in enumerate(numbers)
                         if other != numbers[i] for v in other)
    out = {"concurrency": concurrency, "requests": len(reqs), "wall_seconds": wall,
           "requests_per_minute": 60 * len(reqs) / wall,
           "complete": sum(g["status"] == 200 and g["finish_reason"] is not None
                           and bool(g["text"]) for g in got),
           "mixed": sum(g["mixed"] for g in got), "records": got}
    for kind in ("new", "follow-up"):
        t = [g["ttft"] for g in got if g["kind"] == kind and g["ttft"] is not None]
        out[kind] = {"ttft_p50": float(np.percentile(t, 50)), "ttft_p95": float(
            np.percentile(t, 95)), "n": len(t)} if t else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=8, help="new documents per level")
    p.add_argument("--lengths", type=int, nargs="+", default=(1024, 2048, 4096, 8192))
    p.add_argument("--concurrency", type=int, nargs="+", default=(1, 4, 8))
    p.add_argument("--max-tokens", type=int, default=24)
    tool_args(p, 8126)
    a = p.parse_args(argv)
    name, tok = tokenizer_of(a.model)
    levels = {c: requests(tok, a.conversations, a.lengths, a.seed + 1000 * (k + 1))
              for k, c in enumerate(a.concurrency)}
    path, result = record(a.out_dir, name, "traffic.json", "serve_traffic", argv, model=name,
                          seed=a.seed, processor=models.cpu_info()[0])
    for arm in ARMS:  # resumable per level
        rec = result.setdefault("arms", {}).setdefault(arm, {})
        todo = [c for c in a.concurrency if str(c) not in rec]
        if not todo:
            continue
        with serving(name, arm, a.port, path.parent / f"traffic-{arm}.log"):
            warm = requests(tok, 1, (1024,), a.seed + 999)[0]
            stream(a.port, "/v1/chat/completions", {"model": name, "max_tokens": 1,
                                                    "messages": warm["messages"]})
            for c in tqdm(todo, desc=f"{arm} levels"):
                rec[str(c)] = run_level(a.port, name, levels[c], c, a.max_tokens)
                write_json(path, result)
    for arm, rec in result["arms"].items():
        for c, lv in sorted(rec.items(), key=lambda kv: int(kv[0])):
            print(f"{arm} x{c}: new p50 {lv['new']['ttft_p50']:.2f} p95 "
                  f"{lv['new']['ttft_p95']:.2f} s; follow-up p50 {lv['follow-up']['ttft_p50']:.2f}"
                  f" p95 {lv['follow-up']['ttft_p95']:.2f} s; {lv['requests_per_minute']:.1f} "
                  f"req/min; {lv['complete']}/{lv['requests']} complete, {lv['mixed']} mixed")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
