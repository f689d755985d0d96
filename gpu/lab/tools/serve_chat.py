"""Multi-turn chat through the server (``python -m gpu.lab.tools.serve_chat``): ``ridgefill serve``
with the advised fill against stock vLLM (``--fill exact``), both with vLLM's defaults
(prefix caching and chunked prefill on), one server at a time on localhost.

Each conversation is a document of about ``--length`` tokens with a needle (the project's
niah_single_1 generator, seed ``--seed``, its own magic number) and ``--turns`` questions
asked one after another on ``/v1/chat/completions``, each answer carried into the next
request as a chat client does. The needle's question is turn 3. Per turn: time to first
token (streamed) and the whole answer's time; per conversation: the sums. Raw per-turn
records go to ``chat.json`` (resumable per arm), the per-turn medians to ``chat.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from rfmodel.atomic import write_json

from ...core import models
from ...data import corpus
from ..eval import tasks
from .serve_load import ARMS, record, serving, stream, tokenizer_of, tool_args

QUESTIONS = ("Summarize the text above in two sentences.",
             "Which places or people does the text mention? Name three.",
             None,                                     # the needle's own question
             "Write one question a reader might ask about the text.")


def conversations(tokenizer, n: int, length: int, seed: int) -> list[dict]:
    """``n`` documents with a needle each: {"document", "needle_question", "expected"}."""
    hay = corpus.haystack_text(length * corpus.CHARS_PER_TOKEN * 2, seed=seed)
    out = []
    for i in range(n):
        s = tasks.make_sample("niah_single_1", length, seed, hay, tokenizer, index=i,
                              reserve=256)
        out.append({"document": s.context, "needle_question": s.question,
                    "expected": list(s.expected)})
    return out


def converse(port: int, model: str, conv: dict, turns: int, max_tokens: int) -> list[dict]:
    """Ask the conversation's questions in order; one record per turn."""
    messages, records = [], []
    for t in range(turns):
        question = QUESTIONS[t % len(QUESTIONS)] or conv["needle_question"]
        content = f"{conv['document']}\n\n{question}" if t == 0 else question
        messages.append({"role": "user", "content": content})
        got = stream(port, "/v1/chat/completions",
                     {"model": model, "messages": messages, "max_tokens": max_tokens,
                      "temperature": 0})
        messages.append({"role": "assistant", "content": got["text"]})
        records.append({"turn": t + 1, "ttft": got["ttft"], "seconds": got["seconds"],
                        "answer": got["text"], "finish_reason": got["finish_reason"],
                        "needle": QUESTIONS[t % len(QUESTIONS)] is None,
                        "found": (tasks.score(got["text"], conv["expected"])
                                  if QUESTIONS[t % len(QUESTIONS)] is None else None)})
    return records


def summary(result: dict) -> dict:
    """Per arm: median TTFT per turn, median conversation total, needles read."""
    out = {}
    for arm, rec in result["arms"].items():
        convs = rec.get("conversations", [])
        if not convs:
            continue
        ttft = np.array([[t["ttft"] for t in c] for c in convs])
        wall = np.array([[t["seconds"] for t in c] for c in convs])
        out[arm] = {"conversations": len(convs),
                    "ttft_median_by_turn": np.median(ttft, axis=0).round(3).tolist(),
                    "total_median": float(np.median(ttft.sum(axis=1))),
                    "wall_median": float(np.median(wall.sum(axis=1))),
                    "needles_read": int(sum(t["found"] or 0 for c in convs for t in c
                                            if t["needle"]))}
    if {"stock", "advised"} <= out.keys():
        s, r = out["stock"], out["advised"]
        out["advised_vs_stock"] = {
            "first_turn_speedup": s["ttft_median_by_turn"][0] / r["ttft_median_by_turn"][0],
            "follow_up_ratio_max": max(b / a for a, b in zip(s["ttft_median_by_turn"][1:],
                                                             r["ttft_median_by_turn"][1:])),
            "total_ratio": r["total_median"] / s["total_median"],
            "wall_ratio": r["wall_median"] / s["wall_median"]}
    return out


def plot(result: dict, path: Path) -> None:
    """Median TTFT per turn, one bar per arm."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    arms = [a for a in ARMS if a in result["summary"]]
    for i, arm in enumerate(arms):
        med = result["summary"][arm]["ttft_median_by_turn"]
        ax.bar(np.arange(len(med)) + 0.4 * i, med, 0.4, label=arm)
    ax.set_xticks(np.arange(len(med)) + 0.2, [f"turn {t + 1}" for t in range(len(med))])
    ax.set_ylabel("time to first token, median (s)")
    ax.set_title(f"{result['model']}: {result['length']}-token document, chat")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=5)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--length", type=int, default=4096, help="the document's tokens")
    p.add_argument("--max-tokens", type=int, default=32, help="each answer's length cap")
    tool_args(p, 8124, servers=True)
    a = p.parse_args(argv)
    name, tok = tokenizer_of(a.model)
    convs = conversations(tok, a.conversations, a.length, a.seed)
    warm = conversations(tok, 1, a.length, a.seed + 999)[0]  # a document no conversation uses
    path, result = record(a.out_dir, name, "chat.json", "serve_chat", argv, model=name,
                          seed=a.seed, length=a.length, turns=a.turns,
                          processor=models.cpu_info()[0],
                          ld_preload=os.environ.get("LD_PRELOAD", ""))
    extra = tuple(x for x in a.serve_args if x != "--")
    for arm in ARMS:  # resumable: an arm's finished conversations are kept
        rec = result.setdefault("arms", {}).setdefault(arm, {"conversations": []})
        if len(rec["conversations"]) >= a.conversations:
            continue
        with serving(name, arm, a.port, path.parent / f"chat-{arm}.log", extra):
            converse(a.port, name, warm, 1, 1)      # warm-up: compiles, first-call costs
            for conv in tqdm(convs[len(rec["conversations"]):], desc=f"{arm} chats",
                             unit="conversation"):
                rec["conversations"].append(converse(a.port, name, conv, a.turns,
                                                     a.max_tokens))
                write_json(path, result)
    result["summary"] = summary(result)
    write_json(path, result)
    plot(result, path.parent / "chat.png")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    sys.exit(main())
