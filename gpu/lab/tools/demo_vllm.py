"""``ridgefill demo`` where vLLM has its fast path: stock vLLM against RidgeFill inside vLLM
(``ridgefill serve``'s model class, the advised configuration) on the same needle prompt,
the comparison a user makes before switching engines.

Both engines start once in this process with vLLM's defaults for a single prompt (chunked
prefill on, prefix caching off so the repeated prompt is prefilled again); one untimed
warm-up each, then ``requests`` one-token requests alternating in ABBA order (paper section
2.5's timing rule), medians; then each engine's answer. Runs where vLLM is installed and the
CPU has bf16 kernels (avx512_bf16 / amx_bf16: gpu.serving.settings.default_dtype), vLLM's
CPU path users run; elsewhere the demo runs the project's engine (gpu.lab.tools.demo).
"""
from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

from tqdm import tqdm

from rfmodel.atomic import write_json

from ...core import models
from ...core.advised import default_config
from ...serving.settings import check, default_dtype, use_engine_env
from .bench_vllm import engines, first_token_seconds

ARMS = ("stock", "advised")


def unavailable() -> str | None:
    """Why the vLLM demo cannot run on this machine, or None when it can."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (the vllm extra: make venv installs it)"
    if default_dtype() != "bfloat16":
        return ("this CPU has no bf16 kernels (avx512_bf16 or amx_bf16), where vLLM's CPU build "
                "is slower than the project's fp32 engine")
    return None


def run(model: str, out: Path, requests: int, prompt, answer_tokens: int) -> dict:
    """Time and answer ``prompt`` (a needle Prompt built with the model's tokenizer) with stock
    vLLM and with RidgeFill in vLLM; print both and return the record."""
    from vllm import SamplingParams

    name, folder = models.resolve(model)
    cfg = default_config(name, rows="none")
    if cfg.fill == "exact":
        raise ValueError(f"{name}'s advice is exact prefill: in vLLM that is stock vLLM; "
                         "run the demo on qwen2.5-coder-0.5b")
    check(cfg)
    use_engine_env()  # as `ridgefill serve` runs vLLM
    ids = prompt.ids[0].tolist()
    llms = engines(name, folder, {"advised": cfg}, len(ids) + answer_tokens, "bfloat16", ARMS)
    for llm in llms.values():  # warm-up, untimed
        first_token_seconds(llm, ids)
    ttft: dict[str, list[float]] = {k: [] for k in ARMS}
    for i in tqdm(range(requests), desc="alternating requests (vLLM)", unit="pair"):
        for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
            ttft[arm].append(first_token_seconds(llms[arm], ids))
    greedy = SamplingParams(max_tokens=answer_tokens, temperature=0)
    answers = {arm: llms[arm].generate([{"prompt_token_ids": ids}], greedy,
                                       use_tqdm=False)[0].outputs[0].text for arm in ARMS}
    med = {k: statistics.median(v) for k, v in ttft.items()}
    values = cfg.values_fill or cfg.fill
    return {"engine": "vllm", "dtype": "bfloat16", "model": name, "split": cfg.split,
            "tail": cfg.tail, "fill": cfg.fill, "values_fill": values, "requests": requests,
            "ttft_seconds": ttft, "median_seconds": med, "speedup": med["stock"] / med["advised"],
            "answers": answers, "prompt_tokens": len(ids)}


def report(record: dict, expected: str, out: Path) -> None:
    """Print the side-by-side lines and write ``demo-vllm.json``."""
    found = {k: expected in v for k, v in record["answers"].items()}
    print(f"engine: vLLM (CPU build, bf16, chunked prefill on) - stock vLLM against RidgeFill "
          f"inside vLLM (keys {record['fill']}, values {record['values_fill']}, split "
          f"{record['split']}, tail {record['tail']}); {record['prompt_tokens']} prompt tokens")
    for arm, label in (("stock", "stock vLLM"), ("advised", "RidgeFill")):
        print(f"{label + ' answer:':20}{' '.join(record['answers'][arm].split())}")
    print(f"{'':22}{'stock vLLM':>20}  {'RidgeFill in vLLM':>20}")
    print(f"{'needle found':22}{str(found['stock']):>20}  {str(found['advised']):>20}")
    med = record["median_seconds"]
    print(f"{'time to first token':22}{med['stock']:>19.2f}s  {med['advised']:>19.2f}s")
    print(f"speedup over stock vLLM {record['speedup']:.2f}x (median of {record['requests']} "
          "alternating requests after a warm-up)")
    write_json(out / "demo-vllm.json", {**record, "expected": expected, "found": found})
    print(f"wrote {out / 'demo-vllm.json'}")
