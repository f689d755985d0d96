"""The decode-time check of paper Appendix I.4 (gpu.lab.eval.decode_check) on tiny random models.

Oracles: a threshold no row reaches leaves the fill's own decoding (the stock Feeder over the
same cache, to rounding); a repaired state is bitwise the prefill with those rows exact; with
every filled row repaired, decoding is bitwise that of exact prefill (tokens and logits)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu.core import prompt as prompts
from gpu.core.config import PrefillConfig
from gpu.core.engine import Engine, Feeder
from gpu.core.plan import Plan
from gpu.lab.eval.decode_check import CheckedFeeder, decode
from gpu_fixtures import run_plan, DenseMaps, LAYERS, load_tiny, random_maps

SPLIT, TAIL, STEPS = 1, 4, 6
TEXT = ("The river stone 48213 lay under the garden window. Morning light crossed the paper "
        "market; people carried 7 letters home. ")


def setup(family: str):
    loaded = load_tiny(family)
    engine = Engine(loaded.model, DenseMaps(SPLIT, random_maps(SPLIT, seed=4)))
    p = prompts.build(loaded.tokenizer, TEXT)
    cfg = PrefillConfig(split=SPLIT, tail=TAIL, fill="ridge", rows="none")
    return engine, p, cfg


def checked(engine, p, cfg, threshold):
    pre = engine.prefill(p.ids, cfg, prompt=p)
    return pre, CheckedFeeder(engine, pre, p, cfg, threshold)


@torch.inference_mode()
def test_threshold_flags_exactly_the_rows_over_it():
    engine, p, cfg = setup("llama")
    _, f = checked(engine, p, cfg, 0.3)
    received = torch.zeros(p.n + 1)
    rows = f.filled.numpy()
    received[rows[:3]] = torch.tensor([0.31, 0.3, 0.9])
    received[p.n - 1] = 5.0  # a tail row: exact already, never flagged
    assert f.flagged(received).tolist() == [int(rows[0]), int(rows[2])]
    with pytest.raises(ValueError, match="threshold"):
        CheckedFeeder(engine, engine.prefill(p.ids, cfg, prompt=p), p, cfg, 0.0)
    with pytest.raises(ValueError, match="fill='none' has none to check"):
        CheckedFeeder(engine, engine.prefill(p.ids, cfg.replace(fill="none"), prompt=p), p,
                      cfg.replace(fill="none"), 0.1)


@torch.inference_mode()
def test_no_row_over_the_threshold_leaves_the_fills_decoding():
    engine, p, cfg = setup("llama")
    pre, f = checked(engine, p, cfg, 1e9)
    plain = Feeder(engine, engine.prefill(p.ids, cfg, prompt=p))
    for t in (5, 9, 11):
        torch.testing.assert_close(f.push(t), plain.push(t), rtol=1e-5, atol=1e-5)
    assert f.stats["repairs"] == 0 and f.stats["steps"] == 3


@torch.inference_mode()
def test_repair_makes_the_flagged_rows_exact_with_their_spans():
    engine, p, cfg = setup("llama")
    pre, f = checked(engine, p, cfg, 0.02)
    before = set(pre.plan.exact_rows.tolist())
    tokens = decode(f, pre.last_logits, STEPS)
    assert f.stats["repairs"] >= 1 and f.stats["rows_repaired"] > 0
    exact = f.plan.exact_rows
    assert before < set(exact.tolist())
    # the repaired state is bitwise the prefill with those rows exact
    again = run_plan(engine, p.ids, Plan(p.n, SPLIT, TAIL, LAYERS).with_rows(exact), "ridge",
                           logits_rows=1)
    assert torch.equal(again.last_logits, f.pre.last_logits)
    assert len(tokens) == STEPS


@torch.inference_mode()
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_every_row_repaired_is_bitwise_exact_decoding(family):
    engine, p, cfg = setup(family)
    pre, f = checked(engine, p, cfg, 1e-30)  # every filled row receives some attention
    exact = engine.prefill(p.ids, cfg.replace(fill="exact"), prompt=p)
    ref = Feeder(engine, exact)
    logits_f, logits_e = pre.last_logits, exact.last_logits
    assert not torch.equal(logits_f, logits_e)  # the fill did change the prefill
    tokens = []
    for _ in range(STEPS):
        t = int(logits_e.argmax())
        tokens.append(t)
        logits_f, logits_e = f.push(t), ref.push(t)
        assert torch.equal(logits_f, logits_e)
    assert f.plan.filled.size == 0 and f.stats["repairs"] >= 1
    assert f.exact_rows == f.plan.n_prefix
    assert np.array_equal(f.plan.exact_rows, np.arange(f.plan.n_prefix))


@torch.inference_mode()
def test_a_repaired_digit_pulls_in_its_whole_number():
    engine, p, cfg = setup("llama")
    _, f = checked(engine, p, cfg, 1e9)
    start = p.text.index("48213")
    number = [i for i, (a, b) in enumerate(p.spans) if start <= a and b <= start + 5]
    assert len(number) == 5
    f.repair(np.array([number[2]]))
    assert set(number) <= set(f.plan.exact_rows.tolist())
    assert f.stats == {"steps": 0, "repairs": 1, "rows_repaired": 5,
                       "repair_seconds": f.stats["repair_seconds"]}


@torch.inference_mode()
def test_a_repair_replays_the_tokens_so_far_in_one_pass():
    """After a repair the decoded tokens are fed again in one pass: the next step equals the
    prefill with the repaired rows exact followed by those tokens one at a time (to rounding)."""
    engine, p, cfg = setup("llama")
    _, f = checked(engine, p, cfg, 1e9)
    history = [5, 9, 11, 7]
    for t in history:
        f.push(t)
    f.repair(f.filled[:2].numpy())
    assert f.stats["repairs"] == 1 and f.n == p.n + len(history) and f.stock is None
    again = run_plan(engine, p.ids, Plan(p.n, SPLIT, TAIL, LAYERS).with_rows(f.plan.exact_rows),
                           "ridge", logits_rows=1)
    ref = Feeder(engine, again)
    for t in history:
        ref.push(t)
    torch.testing.assert_close(f.push(13), ref.push(13), rtol=1e-5, atol=1e-5)
