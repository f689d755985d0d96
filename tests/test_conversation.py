"""Several questions over one prefilled document (issue 19, paper Appendix D), and one row
choice whatever entry point asks. Oracles: stock greedy ``generate`` on the whole
conversation's ids (fill exact), and the rows ``RidgeFill.prefill`` picks."""
from __future__ import annotations

import warnings

import pytest
import torch

from gpu import PrefillConfig, RidgeFill, RidgeFillPress
from gpu.core import models
from gpu.core import prompt as prompts
from gpu.lab.eval import minimodel
from gpu_fixtures import run_plan, load_tiny, scratch

DOC = minimodel.prose(400, seed=3)


@pytest.fixture(scope="module")
def chat_model():
    path = minimodel.build(scratch("conv") / "tiny-llama", family="llama")
    return models.load(str(path), device="cpu", dtype=torch.float32)


def _stock_greedy(model, ids: list[int], n: int) -> list[int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False,
                             pad_token_id=0, eos_token_id=None)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("chat", [True, False])
def test_second_question_on_the_carried_cache_equals_a_fresh_exact_prefill(chat_model, chat):
    rf = RidgeFill(chat_model, None, PrefillConfig(fill="exact"))
    conv = rf.chat(DOC, chat=chat)
    assert conv.chat is chat
    first = conv.ask("what comes after the river?", max_new_tokens=6)
    assert len(first.tokens) >= 1
    before = list(conv.ids)
    second = conv.ask("and before the hill?", max_new_tokens=6)
    fed = conv.ids[: len(before) + second.new_prompt_tokens]
    assert fed[: len(before)] == before and second.new_prompt_tokens > 0
    # eos_token_id=None above: compare the tokens up to the first end token
    want = _stock_greedy(chat_model.model, fed, len(second.tokens))
    assert second.tokens == want


def test_conversation_prefills_the_document_once_with_ridgefill(chat_model):
    L = chat_model.n_layers
    rf = RidgeFill(chat_model, None, PrefillConfig(fill="identity", split=3, tail=16, rows="none"))
    conv = rf.chat(DOC)
    first = conv.ask("what comes after the river?", max_new_tokens=3)
    counts = conv.prefill.plan.counts()
    assert counts["filled"] > 0 and counts["tail"] == 16 and L == 8
    assert counts["prompt_tokens"] == first.new_prompt_tokens
    n = len(conv.ids)
    a = conv.ask("and before the hill?", max_new_tokens=3)
    assert len(conv.ids) == n + a.new_prompt_tokens + len(a.tokens) - 1
    assert conv.cache.get_seq_length() == len(conv.ids)
    assert conv.prefill.plan.counts() == counts  # rows are not re-chosen


def test_cache_prefill_and_press_select_the_same_rows(chat_model):
    needle = "The special magic number for quiet-lantern is 4821937."
    doc = DOC[:600] + " " + needle + " " + DOC[600:]
    question = "What is the special magic number for quiet-lantern?"
    rf = RidgeFill(chat_model, None, PrefillConfig(fill="identity", split=3, tail=16))
    assert rf.config.rows == "lexical"
    p = rf.prompt(doc, question, chat=True)
    by_prompt = rf.prefill(p).plan.exact_rows
    assert by_prompt.size > 0
    ids_only = prompts.from_ids(chat_model.tokenizer, p.ids)
    assert ids_only.text == p.text
    by_ids = rf.engine.prefill(p.ids, rf.config, prompt=ids_only).plan.exact_rows
    press = RidgeFillPress(None, rf.config, chat_model.tokenizer)
    with press(chat_model.model), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chat_model.model.generate(p.ids, max_new_tokens=1, do_sample=False, pad_token_id=0)
    assert by_ids.tolist() == by_prompt.tolist() == press.last.plan.exact_rows.tolist()


def test_raw_ids_without_a_tokenizer_refuse_text_selectors():
    loaded = load_tiny("llama", 0)
    rf = RidgeFill(loaded, None, PrefillConfig(fill="identity", split=1, tail=8))
    loaded_no_tok = models.Loaded(loaded.model, None, loaded.name, loaded.path)
    rf_no_tok = RidgeFill(loaded_no_tok, None, rf.config)
    ids = rf.prompt("abcdefghij" * 5).ids
    with pytest.raises(ValueError, match="pass the tokenizer"):
        rf_no_tok.cache(ids)
    assert rf.cache(ids).get_seq_length() == ids.shape[1] - 1


def test_repair_rows_writes_what_a_prefill_with_those_rows_exact_writes():
    """Oracle: Engine.prefill with the same rows exact. Each repaired entry (late layers)
    matches it; every other prefix entry is untouched."""
    from gpu.core.engine import Engine
    from gpu.core.late import repair_rows
    from gpu.core.plan import Plan
    from gpu_fixtures import LAYERS, tiny_model, token_ids

    model = tiny_model("llama", seed=4)
    ids = token_ids(48, seed=4)
    eng = Engine(model)
    split, tail = 1, 8
    base = run_plan(eng, ids, Plan(48, split, tail, LAYERS), "identity", keep_x_split=True)
    rows = torch.tensor([3, 4, 17, 30])
    want = run_plan(eng, ids, Plan(48, split, tail, LAYERS, rows.numpy()), "identity")
    before = [layer.keys.clone() for layer in base.cache.layers]
    repair_rows(eng.adapter, split, base.x_split[:, rows], rows, base.cache)
    others = torch.tensor([r for r in range(40) if r not in rows.tolist()])
    for layer in range(split, LAYERS):
        got, ref = base.cache.layers[layer], want.cache.layers[layer]
        torch.testing.assert_close(got.keys[:, :, rows], ref.keys[:, :, rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.values[:, :, rows], ref.values[:, :, rows], rtol=1e-5, atol=1e-5)
        assert torch.equal(got.keys[:, :, others], before[layer][:, :, others])


def test_reselect_repairs_the_second_questions_needle(chat_model):
    needle2 = "The secret code of the amber kettle is 7301552."
    doc = DOC[:500] + " The special magic number for quiet-lantern is 4821937. " + DOC[500:900] \
        + " " + needle2 + " " + DOC[900:]
    rf = RidgeFill(chat_model, None, PrefillConfig(fill="identity", split=3, tail=16))
    conv = rf.chat(doc, chat=True)
    conv.ask("What is the special magic number for quiet-lantern?", max_new_tokens=4)
    first = conv.exact_rows.copy()
    a = conv.ask("What is the secret code of the amber kettle?", max_new_tokens=4,
                 reselect=True)
    assert a.repaired_rows > 0 and conv.exact_rows.size == first.size + a.repaired_rows
    p = rf.prompt(doc, "x", chat=True)
    start = p.text.index(needle2)
    needle_rows = [i for i, (a0, b0) in enumerate(p.spans) if a0 < start + len(needle2) and b0 > start]
    assert not set(needle_rows) & set(first.tolist())          # the first question missed it
    assert set(needle_rows) & set(conv.exact_rows.tolist())    # the second one's rows hold it
    with pytest.raises(ValueError, match="reselect=True runs the lexical net"):
        probe = RidgeFill(chat_model, None, PrefillConfig(fill="identity", split=3, tail=16,
                                                          rows="attention"))
        c = probe.chat(doc, chat=True)
        c.ask("What is the special magic number for quiet-lantern?", max_new_tokens=2)
        c.ask("And for amber-kettle?", max_new_tokens=2, reselect=True)
