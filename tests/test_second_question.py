"""The Appendix D instrument (issue 19) on a tiny chat model: the second question asks for
another needle's key, the first question's prompt is the study's own, and the coverage share
counts the second needle's rows the first question's rows made exact."""
from __future__ import annotations

import torch

from gpu import PrefillConfig, RidgeFill
from gpu.core import models, prompt as prompts
from gpu.lab.eval import minimodel, tasks
from gpu.lab.tools import second_question as sq
from gpu_fixtures import scratch


def _setup():
    path = minimodel.build(scratch("sq") / "tiny-llama", family="llama")
    loaded = models.load(str(path), device="cpu", dtype=torch.float32)
    hay = minimodel.prose(900, seed=5)
    s = tasks.make_sample(sq.TASK, 500, 0, hay, loaded.tokenizer, index=1, reserve=40)
    p = prompts.build(loaded.tokenizer, s.context, s.question, chat=True,
                      answer_prefix=s.answer_prefix)
    return loaded, s, p, p.text.find(s.context)


def test_second_needle_is_another_key_and_fixed_by_the_seed():
    _, s, _, _ = _setup()
    n = sq.second_needle(s, 0)
    assert not n.queried and n.key != s.query and n is sq.second_needle(s, 0)
    assert sq.first_number("it is 1234567.") == "1234567" and sq.first_number("none") is None


def test_run_sample_records_both_questions_and_the_coverage():
    loaded, s, p, shift = _setup()
    exact = sq.run_sample(RidgeFill(loaded, None, PrefillConfig(fill="exact")), s, p, shift,
                          chat=True, answer_prefix=True)
    assert exact["covered"] == 1.0 and exact["exact_prefix_rows"] == 0
    assert exact["second"]["key"] in exact["second"]["question"]
    assert exact["second"]["score"] in (0.0, 1.0) and exact["second"]["fed_tokens"] > 0
    filled = sq.run_sample(RidgeFill(loaded, None, PrefillConfig(fill="identity", split=3,
                                                                  tail=16, rows="none")),
                           s, p, shift, chat=True, answer_prefix=True)
    second = s.needles.index(sq.second_needle(s, 0))
    rows = tasks.needle_token_positions(s, p.spans, shift)[second]
    assert max(rows) < p.n - 16        # the second needle lies in the filled region here
    assert filled["covered"] == 0.0    # no exact rows: none of it is exact


def test_reselect_arm_records_its_repair():
    loaded, s, p, shift = _setup()
    rf = RidgeFill(loaded, None, PrefillConfig(fill="identity", split=3, tail=16))
    rec = sq.run_sample(rf, s, p, shift, chat=True, answer_prefix=True, reselect=True)
    assert rec["second"]["covered_after_repair"] >= rec["covered"]
    assert rec["second"]["repaired_rows"] >= 0 and rec["second"]["repair_seconds"] >= 0
    assert set(sq.arms(3, 16, True)) - set(sq.arms(3, 16, False)) == {sq.RESELECT}
