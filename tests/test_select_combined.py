"""Property tests of the exact-row selectors on a tiny random Llama (issue 9): budgets
respected, spans complete (no digit run half selected), seeds reproducible, question-blind
really blind, and the combined selector (gpu.core.select.CombinedRows) within its cap.

Each selector runs inside ``Engine.prefill`` (identity fill, no maps needed) on prompts of a
byte-level tokenizer, where every digit is its own row, so a half-selected number shows.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gpu.core import prompt as prompts
from gpu.core import select
from gpu.core.engine import Engine
from gpu.core.plan import Plan
from rfmodel import selectors as rs

from gpu_fixtures import run_plan, VOCAB, byte_tokenizer, load_tiny

SPLIT, TAIL = 2, 96
BODY = ("The harbor was quiet that spring. Ships came and went without much notice. "
        "One of the special magic numbers for rough-harbor is: 7432657. "
        "The council met twice, in 1973 and again later, and wrote 12,500 pages. "
        "Nothing else of note happened along the coast that year, said Maria Lindqvist. ")
QUESTIONS = ("What is the special magic number for rough-harbor mentioned above?",
             "What is the special magic number for quiet-lanter mentioned above?")


@pytest.fixture(scope="module")
def engine():
    torch.set_num_threads(1)
    loaded = load_tiny("llama")
    eng = Engine(loaded.model, None)
    # calibration counts for the protected classes: a deterministic stand-in table
    eng.maps = SimpleNamespace(unigram=(np.arange(VOCAB) * 7919) % 101, split=SPLIT)
    return eng


def prompt_of(question: str):
    return prompts.build(byte_tokenizer(), BODY * 2, question)


def select_rows(engine, selector, question: str = QUESTIONS[0]) -> tuple[np.ndarray, int]:
    p = prompt_of(question)
    plan = Plan(p.n, SPLIT, TAIL, engine.model.config.num_hidden_layers)
    seen = {}

    def rec(ctx):
        seen["rows"] = selector(ctx)
        return seen["rows"]

    rec.keep = selector.keep
    with torch.inference_mode():
        run_plan(engine, p.ids, plan, "identity", selector=rec, prompt=p, logits_rows=1)
    return seen["rows"], plan.n_prefix


def digit_runs(pieces, n_p):
    group = rs.word_groups(list(pieces[:n_p]))
    digits = rs.digit_rows(pieces, n_p)
    return [np.flatnonzero(group == g) for g in np.unique(group[digits])]


SELECTORS = {
    "attention": lambda **kw: select.AttentionRows(share=0.10, **kw),
    "probe": lambda **kw: select.ProbeRows(probe_window=16, **kw),
    "protected": lambda **kw: select.ProtectedRows(**kw),
    "lexical": lambda **kw: select.LexicalRows(**kw),
    "combined": lambda **kw: select.CombinedRows(**kw),
    "combined-probe": lambda **kw: select.CombinedRows(rank="probe", probe_window=16, **kw),
}


@pytest.mark.parametrize("name", sorted(SELECTORS))
def test_spans_complete_and_prefix_only(engine, name):
    kw = {} if name.startswith("combined") else {"complete": True}
    rows, n_p = select_rows(engine, SELECTORS[name](**kw))
    assert rows.dtype == np.int64 and np.all(np.diff(rows) > 0)
    assert rows.size == 0 or (rows.min() >= 0 and rows.max() < n_p)
    chosen = set(rows.tolist())
    pieces = prompt_of(QUESTIONS[0]).pieces
    for run in digit_runs(pieces, n_p):
        hit = [r in chosen for r in run]
        assert all(hit) or not any(hit), (name, run, hit)


@pytest.mark.parametrize("cap", [0.02, 0.05, 0.10, 0.25])
def test_combined_respects_its_cap(engine, cap):
    rows, n_p = select_rows(engine, select.CombinedRows(cap=cap))
    budget = int(np.floor(cap * n_p + 1e-9))
    assert rows.size <= budget
    assert rows.size >= budget - 8  # the budget is (nearly) used: units are short here


def test_combined_takes_the_needle_number_whole(engine):
    rows, n_p = select_rows(engine, select.CombinedRows(cap=0.25))
    p = prompt_of(QUESTIONS[0])
    start = p.text.find("7432657")
    needle = [i for i, (a, b) in enumerate(p.spans.tolist()) if a >= start and b <= start + 7
              and b > a]
    assert len(needle) == 7 and max(needle) < n_p
    assert set(needle) <= set(rows.tolist())


def test_attention_share_respected_without_completion(engine):
    rows, n_p = select_rows(engine, select.AttentionRows(share=0.10))
    assert rows.size == int(np.floor(0.10 * n_p + 1e-9))


@pytest.mark.parametrize("name", ["attention", "probe", "lexical", "combined", "combined-probe"])
def test_question_blind_is_blind(engine, name):
    assert len(QUESTIONS[0]) == len(QUESTIONS[1])  # same length: the same prefix
    a, _ = select_rows(engine, SELECTORS[name](blind=True), QUESTIONS[0])
    b, _ = select_rows(engine, SELECTORS[name](blind=True), QUESTIONS[1])
    np.testing.assert_array_equal(a, b)


def test_selectors_deterministic_and_seeds_reproducible(engine):
    for name in ("combined", "attention"):
        a, _ = select_rows(engine, SELECTORS[name]())
        b, _ = select_rows(engine, SELECTORS[name]())
        np.testing.assert_array_equal(a, b)
    r1, n_p = select_rows(engine, select.RandomRows(count=20, seed=3))
    r2, _ = select_rows(engine, select.RandomRows(count=20, seed=3))
    r3, _ = select_rows(engine, select.RandomRows(count=20, seed=4))
    np.testing.assert_array_equal(r1, r2)
    assert r1.size == 20 and not np.array_equal(r1, r3)


def test_combine_units_budget_and_completion():
    pieces = ["a", "Ġthe", "Ġ7", "4", "3", ",", "2", "Ġis", "Ġgo", "od", "."]
    # one unit touching the middle of the number pulls in all of it, if it fits
    assert rs.combine_units(10, [np.array([3])], pieces, 11).tolist() == [2, 3, 4, 5, 6]
    # a unit that no longer fits is skipped whole; a later one that fits is taken
    out = rs.combine_units(3, [np.array([0]), np.array([3]), np.array([9])], pieces, 11)
    assert out.tolist() == [0, 8, 9]
    assert rs.combine_units(0, [np.array([1])], pieces, 11).size == 0
    assert rs.combine_units(2, [np.array([3, 4])], None, 11).tolist() == [3, 4]
    with pytest.raises(ValueError):
        rs.combine_units(2, [np.array([[1]])], pieces, 11)


def test_make_and_rows_list():
    assert "combined" in select.ROWS
    assert isinstance(select.make("combined", cap=0.05), select.CombinedRows)
    with pytest.raises(ValueError):
        select.make("nonsense")
