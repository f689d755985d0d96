"""Serving under load and quality through the server (``python -m gpu.lab.tools.serve_load``):
``ridgefill serve`` with the advised fill against stock vLLM (``--fill exact``), one server at
a time on localhost, the same requests to both.

Each request is a needle prompt of the project's generator (niah_single_1, chat template,
seed ``--seed``; its own magic number), sent to ``/v1/completions`` with streaming so the
first chunk's arrival is the time to first token. Load: ``--requests`` prompts of
``--load-lengths`` tokens (alternating; new prompts for every level, so stock vLLM's prefix
cache never answers one) at 1 / 4 / 8 concurrent requests (a bounded thread pool): TTFT
p50 / p95, requests per minute, and every response checked complete (a finish reason, text)
and unmixed (no other request's magic number in it). Quality: ``--needles`` prompts of
``--length`` tokens at 4 concurrent requests, scored as RULER scores (every expected value in
the answer), paired between the servers (rfmath.stats.paired_bootstrap).
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rfmath.stats import paired_bootstrap
from rfmodel.atomic import write_json

from ...core import models
from ...core.prompt import build
from ...data import corpus
from ..eval import tasks

ARMS = {"stock": ["--fill", "exact"], "advised": []}   # advised: serve's own default


def needle_prompts(tokenizer, n: int, length: int, seed: int) -> list[tuple[str, list[str]]]:
    """(chat-templated prompt text, expected values) of ``n`` niah_single_1 samples."""
    hay = corpus.haystack_text(length * corpus.CHARS_PER_TOKEN * 2, seed=seed)
    out = []
    for i in range(n):
        s = tasks.make_sample("niah_single_1", length, seed, hay, tokenizer, index=i, reserve=64)
        out.append((build(tokenizer, s.context, s.question, chat=True).text, s.expected))
    return out


def ask(port: int, model: str, prompt: str, max_tokens: int) -> dict:
    """One streamed completion: time to first chunk, total time, text, finish reason."""
    return stream(port, "/v1/completions", {"model": model, "prompt": prompt,
                                            "max_tokens": max_tokens, "temperature": 0})


def stream(port: int, path: str, body: dict) -> dict:
    """POST ``body`` (streamed) to ``path`` (completions or chat completions): time to the
    first chunk, total time, text, finish reason, HTTP status, and every chunk's arrival
    (``time.perf_counter``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    start = time.perf_counter()
    conn.request("POST", path, json.dumps({**body, "stream": True}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    arrivals, text, finish = [], [], None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        arrivals.append(time.perf_counter())
        choice = json.loads(line[5:])["choices"][0]
        text.append(choice.get("text") or (choice.get("delta") or {}).get("content") or "")
        finish = choice.get("finish_reason") or finish
    conn.close()
    return {"ttft": arrivals[0] - start if arrivals else None,
            "seconds": time.perf_counter() - start, "text": "".join(text),
            "finish_reason": finish, "status": resp.status, "arrivals": arrivals}


def run_level(port: int, model: str, prompts, concurrency: int, max_tokens: int) -> dict:
    """Every prompt once, ``concurrency`` at a time: latency, throughput, completeness."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        got = list(pool.map(lambda p: ask(port, model, p[0], max_tokens), prompts))
    wall = time.perf_counter() - start
    ttft = [g["ttft"] for g in got if g["ttft"] is not None]
    numbers = [set(expected) for _, expected in prompts]
    mixed = sum(any(v in g["text"] for j, other in enumerate(numbers) if j != i for v in other)
                for i, g in enumerate(got))
    return {"concurrency": concurrency, "requests": len(prompts), "wall_seconds": wall,
            "requests_per_minute": 60 * len(prompts) / wall,
            "ttft_p50": float(np.percentile(ttft, 50)) if ttft else None,
            "ttft_p95": float(np.percentile(ttft, 95)) if ttft else None,
            "complete": sum(g["status"] == 200 and g["finish_reason"] is not None
                            and bool(g["text"]) for g in got),
            "mixed": int(mixed),
            "scores": [tasks.score(g["text"], e) for g, (_, e) in zip(got, prompts)],
            "answers": [g["text"] for g in got]}


def serve(model: str, arm: str, port: int, log: Path,
          extra: tuple[str, ...] = ()) -> subprocess.Popen:
    """``ridgefill serve`` for ``arm`` (and ``extra`` flags) in a child process, once it
    answers /health."""
    argv = [sys.executable, "-m", "gpu", "serve", "--model", model, "--port", str(port),
            *ARMS[arm], *extra]
    proc = subprocess.Popen(argv, stdout=log.open("w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 1200
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ridgefill serve ({arm}) exited with {proc.returncode}: {log}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return proc
        except OSError:
            pass
        time.sleep(5)
    proc.terminate()
    raise RuntimeError(f"ridgefill serve ({arm}) did not answer in 20 minutes: {log}")


@contextmanager
def serving(model: str, arm: str, port: int, log: Path, extra: tuple[str, ...] = ()):
    """:func:`serve` for the length of a ``with`` block, stopped after it."""
    proc = serve(model, arm, port, log, extra)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(120)


def record(out_dir: Path, model: str, filename: str, tool: str, argv: list[str] | None, /,
           **fields) -> tuple[Path, dict]:
    """(path, record so far) of a resumable serving run's JSON under ``out_dir/model``,
    stamped with the command that runs ``tool``, the date and ``fields``."""
    out = out_dir / model
    out.mkdir(parents=True, exist_ok=True)
    path = out / filename
    result = json.loads(path.read_text()) if path.exists() else {}
    result.update({"command": f"python -m gpu.lab.tools.{tool} " + " ".join(argv or sys.argv[1:]),
                   **fields, "date": time.strftime("%Y-%m-%d")})
    return path, result


def tool_args(p: argparse.ArgumentParser, port: int, servers: bool = False) -> None:
    """The serving tools' shared flags, after each tool's own: --model, --seed, --port,
    --out-dir, and with ``servers`` the flags after ``--`` that both servers get."""
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--port", type=int, default=port)
    p.add_argument("--out-dir", type=Path, default=Path("results/serving"))
    if servers:
        p.add_argument("serve_args", nargs=argparse.REMAINDER,
                       help="after --: flags for both servers (`ridgefill serve`)")


def tokenizer_of(model: str):
    """(built-in name, its tokenizer) of ``model``."""
    from transformers import AutoTokenizer

    name, folder = models.resolve(model)
    return name, AutoTokenizer.from_pretrained(folder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=16, help="prompts per load level")
    p.add_argument("--load-lengths", type=int, nargs=2, default=(2048, 4096))
    p.add_argument("--concurrency", type=int, nargs="*", default=(1, 4, 8),
                   help="load levels (none: quality only)")
    p.add_argument("--needles", type=int, default=120, help="quality prompts (0: none)")
    p.add_argument("--length", type=int, default=2048, help="quality prompts' length")
    tool_args(p, 8123)
    a = p.parse_args(argv)
    name, tok = tokenizer_of(a.model)
    short, long_ = a.load_lengths
    # every level its own prompts: stock vLLM caches prefixes, a repeated prompt would not be
    # prefilled again
    load = [[x for i in range(a.requests) for x in needle_prompts(
        tok, 1, short if i % 2 == 0 else long_, a.seed + 1000 + 100 * c + i)]
        for c in a.concurrency]
    needles = needle_prompts(tok, a.needles, a.length, a.seed) if a.needles else []
    path, result = record(a.out_dir, name, "serving.json", "serve_load", argv, seed=a.seed)
    for arm in ARMS:  # resumable: what an arm measured is kept
        rec = result.setdefault("arms", {}).setdefault(arm, {})
        todo_load = bool(a.concurrency) and "load" not in rec
        todo_quality = bool(needles) and "quality" not in rec
        if not (todo_load or todo_quality):
            continue
        with serving(name, arm, a.port, path.parent / f"serve-{arm}.log"):
            ask(a.port, name, needle_prompts(tok, 1, short, a.seed + 999)[0][0], 1)  # warm-up
            if todo_load:
                rec["load"] = [run_level(a.port, name, prompts, c, 24) for c, prompts in
                               tqdm(list(zip(a.concurrency, load)), desc=f"{arm} load",
                                    unit="level")]
                write_json(path, result)
            if todo_quality:
                rec["quality"] = run_level(a.port, name, needles, 4, 24)
                write_json(path, result)
    if needles and all("quality" in r for r in result["arms"].values()):
        s, r = (np.asarray(result["arms"][k]["quality"]["scores"]) for k in ("stock", "advised"))
        iv = paired_bootstrap(r * 100, s * 100)
        result["quality_paired"] = {"advised_minus_stock_points": iv.estimate, "low": iv.low,
                                    "high": iv.high, "n": iv.n,
                                    "stock": float(s.mean() * 100),
                                    "advised": float(r.mean() * 100)}
        write_json(path, result)
    print(json.dumps({k: v for k, v in result.items() if k != "arms"}, indent=1))
    for arm, rec in result["arms"].items():
        for lv in rec.get("load", []):
            print(f"{arm} x{lv['concurrency']}: TTFT p50 {lv['ttft_p50']:.2f} s p95 "
                  f"{lv['ttft_p95']:.2f} s, {lv['requests_per_minute']:.1f} req/min, "
                  f"{lv['complete']}/{lv['requests']} complete, {lv['mixed']} mixed")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
