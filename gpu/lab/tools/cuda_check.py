"""Equivalence checks of the engine on an accelerator (run where a CUDA device is lent):
``python -m gpu.lab.tools.cuda_check --out DIR``. Each check compares against the stock transformers
forward on tiny seeded models of every family, in fp32 and bf16; results go to DIR/cuda_check.json.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from transformers import (DynamicCache, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM)

from ...core.config import PrefillConfig
from ...core.engine import Engine
from ...core.extras import Extras
from ...core.late import every_row_exact

SMALL = dict(vocab_size=101, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
             num_attention_heads=4, num_key_value_heads=2, head_dim=16)
FAMILIES = {
    "llama": (LlamaForCausalLM, LlamaConfig(**SMALL)),
    "qwen3": (Qwen3ForCausalLM, Qwen3Config(**SMALL)),
    "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(
        **SMALL, sliding_window=8,
        layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"])),
}


class Identity:
    """Maps A = I, b = 0 as a Predictor, for the identity-arm check."""

    def __init__(self, split: int, d: int, device, dtype):
        self.split = split
        self.A = torch.eye(d, device=device, dtype=dtype)
        self.b = torch.zeros(d, device=device, dtype=dtype)

    def predict(self, layer, x):
        return torch.nn.functional.linear(x, self.A, self.b)


def check_family(name: str, device: str, dtype: torch.dtype, n: int = 48, split: int = 2,
                 tail: int = 8) -> dict:
    cls, cfg = FAMILIES[name]
    torch.manual_seed(0)
    model = cls(cfg).to(device, dtype).eval()
    d = cfg.hidden_size
    eng = Engine(model, Identity(split, d, device, dtype))
    ids = torch.randint(0, cfg.vocab_size, (1, n), device=device)
    with torch.inference_mode():
        ref = model(input_ids=ids).logits[0]
        off = eng.prefill(ids, PrefillConfig(fill="exact"), logits_rows=None).logits
        cache = DynamicCache(config=model.config)
        x, _ = eng.lower(ids, split, cache)
        h = every_row_exact(eng.adapter, split, x, cache)
        all_exact = eng.adapter.logits(h)[0]
        base = PrefillConfig(split=split, tail=tail, rows="none")
        rows = Extras(exact_rows=np.arange(0, n - tail, 3))

        def run(**changes):
            return eng.prefill(ids, base.replace(**changes), rows, logits_rows=None)

        ident = run(fill="identity").logits
        ridge_eye = run(fill="ridge").logits
        skip = run(fill="identity", skip_unread=True)
        noskip = run(fill="identity", skip_unread=False)
        tok_skip = eng.decode(skip, 6)
        tok_noskip = eng.decode(noskip, 6)
        layered = run(fill_order="layer").logits
        stacked = run(fill_order="batched").logits
        compiled = run(compile=True).logits
    return {
        "family": name, "device": device, "dtype": str(dtype),
        "fill_off_bitwise": bool(torch.equal(off, ref)),
        "all_rows_exact_max_abs": float((all_exact - ref).abs().max()),
        "identity_equals_ridge_A_eye_bitwise": bool(torch.equal(ident, ridge_eye)),
        "sliding_skip_max_abs": float((skip.logits - noskip.logits).abs().max()),
        "sliding_skip_same_decode": tok_skip == tok_noskip,
        "batched_fill_max_abs": float((stacked - layered).abs().max()),
        "compiled_walk_max_abs": float((compiled - ridge_eye).abs().max()),
    }


def check_selectors(device: str, n: int = 96, split: int = 2, tail: int = 16) -> dict:
    """The row selectors run on the device and choose the rows they choose on the CPU."""
    from ...core import select
    from ...core.prompt import Prompt

    cls, cfg = FAMILIES["llama"]
    torch.manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (1, n))
    pieces = [f"\u0120w{int(t)}" if i % 3 else str(int(t) % 10) for i, t in enumerate(ids[0])]
    text = "".join(p.replace("\u0120", " ") for p in pieces)
    ends = np.cumsum([len(p) for p in pieces])
    spans = np.stack([ends - [len(p) for p in pieces], ends], 1).astype(np.int64)
    prompt = Prompt(ids, text, spans, pieces, np.zeros(0, np.int64), n - 8)
    out = {}
    for name, sel in {"attention": select.AttentionRows(), "probe": select.ProbeRows(),
                      "combined": select.CombinedRows(), "attention_blind":
                      select.AttentionRows(blind=True)}.items():
        rows = {}
        for dev in ("cpu", device):
            model = cls(cfg).to(dev, torch.float32).eval()
            eng = Engine(model, Identity(split, cfg.hidden_size, dev, torch.float32))
            config = PrefillConfig(split=split, tail=tail, fill="identity", rows="none")
            rows[dev] = eng.prefill(ids, config, Extras(selector=sel), prompt=prompt).plan.exact_rows
        out[name] = {"ran": True, "same_rows_as_cpu": bool(np.array_equal(rows["cpu"], rows[device])),
                     "rows": int(rows[device].size)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = [check_family(f, device, dt) for f in FAMILIES
               for dt in (torch.float32, torch.bfloat16)]
    ok = all(r["fill_off_bitwise"] and r["identity_equals_ridge_A_eye_bitwise"]
             and r["sliding_skip_same_decode"]
             and r["all_rows_exact_max_abs"] < (1e-4 if "float32" in r["dtype"] else 5e-2)
             for r in results)
    selectors = check_selectors(device)
    a.out.mkdir(parents=True, exist_ok=True)
    info = {"torch": torch.__version__, "device_name": torch.cuda.get_device_name() if
            device == "cuda" else "cpu", "ok": ok, "results": results, "selectors": selectors}
    (a.out / "cuda_check.json").write_text(json.dumps(info, indent=2))
    print(json.dumps(info, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
