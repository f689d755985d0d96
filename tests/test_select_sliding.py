"""Lower-layer attention on sliding-window models (gemma3): when the reference layer below the
split is a sliding layer, whose cache keeps only the last window-1 keys, the selector reads
the global layer below the split instead (regression: it used to fail on a shape mismatch)."""
from __future__ import annotations

import numpy as np
import torch

from gpu.core import prompt as prompts
from gpu.core import select
from gpu.core.engine import Engine
from gpu.core.plan import Plan

from gpu_fixtures import run_plan, byte_tokenizer, tiny_model

BODY = "One of the special magic numbers for rough-harbor is: 7432657. " + "Calm sea. " * 30
TYPES = ["full_attention", "sliding_attention", "sliding_attention", "sliding_attention"]


def test_attention_rows_fall_back_to_the_global_layer(monkeypatch):
    torch.set_num_threads(1)
    model = tiny_model("gemma3", layer_types=TYPES)
    window, split = model.config.sliding_window, 2
    assert select.lower_layers(split) == [1]          # a sliding layer
    p = prompts.build(byte_tokenizer(), BODY, "What is the number for rough-harbor?")
    assert p.n > 4 * window                            # its cache dropped most keys
    plan = Plan(p.n, split, 64, model.config.num_hidden_layers)
    seen = {}
    real = select.lower_received
    monkeypatch.setattr(select, "lower_received",
                        lambda ctx, rows, layers: seen.setdefault("r", real(ctx, rows, layers)))
    pre = run_plan(Engine(model, None), p.ids, plan, "identity",
                                      selector=select.AttentionRows(share=0.10), prompt=p)
    rows = pre.plan.exact_rows
    assert rows.size == int(0.10 * plan.n_prefix) and rows.max() < plan.n_prefix
    received = seen["r"]
    assert np.isfinite(received).all()
    # attention reaches rows far outside every sliding window: it came from global layer 0
    assert received[: plan.n_prefix - 2 * window].sum() > 0
