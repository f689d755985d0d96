"""The Python API (gpu.api.RidgeFill): its cache is an ordinary transformers cache from which
``model.generate`` continues (issue 4), and generate() reports the plan's counts.

Oracles: ``model.generate`` from the prompt alone (the stock path) and the engine's own
full-depth prefill of the whole prompt under the equivalent plan.
"""
from __future__ import annotations

import warnings

import pytest
import torch

from gpu.core import models
from gpu.api import RidgeFill
from gpu.core.engine import Engine
from gpu.maps.files import load_maps, save_maps
from gpu.core.plan import Plan
from gpu_fixtures import run_plan, LAYERS, byte_tokenizer, random_maps, tiny_model, token_ids

N, S, T, NEW = 40, 1, 8, 6


@pytest.fixture(scope="module")
def loaded():
    return models.Loaded(tiny_model("llama", seed=11), byte_tokenizer(), "tiny-llama", None)


def _generate(model, ids, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # past_key_values is the deprecated name in 5.x
        return model.generate(ids, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                              eos_token_id=None, **kw)


def test_generate_continues_from_exact_cache(loaded):
    ids = token_ids(N, seed=1)
    rf = RidgeFill(loaded, None, fill="exact", tail=T)
    cache = rf.cache(ids)
    assert cache.get_seq_length() == N - 1   # all but the last prompt token
    ours = _generate(loaded.model, ids, past_key_values=cache)
    stock = _generate(loaded.model, ids)
    assert torch.equal(ours, stock)
    assert ours.shape[1] == N + NEW


def test_generate_continues_from_ridgefill_cache(loaded, tmp_path):
    ids = token_ids(N, seed=2)
    path = save_maps(tmp_path / "m.safetensors", random_maps(S, seed=3),
                     {"split": S, "fingerprint": "x", "d_in": 32, "d_out": 32})
    maps = load_maps(path, precision="bf16")
    rf = RidgeFill(loaded, maps, fill="ridge", tail=T, rows="none")
    cache = rf.cache(ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = loaded.model.generate(ids, past_key_values=cache, max_new_tokens=NEW,
                                    do_sample=False, pad_token_id=0, eos_token_id=None,
                                    output_logits=True, return_dict_in_generate=True)
    # oracle: the engine's prefill of the whole prompt with the same filled rows (the last
    # prompt token is then one more tail row), then full-depth greedy decoding
    eng = Engine(loaded.model, maps)
    pre = run_plan(eng, ids, Plan(N, S, T + 1, LAYERS), "ridge")
    assert torch.allclose(out.logits[0][0], pre.last_logits, atol=1e-5, rtol=1e-5)
    assert out.sequences[0, N:].tolist() == eng.decode(pre, NEW)
    # and it is a RidgeFill cache, not the exact one
    exact = _generate(loaded.model, ids, output_logits=True, return_dict_in_generate=True)
    assert not torch.allclose(out.logits[0][0], exact.logits[0][0], atol=1e-3)


def test_cache_refuses_nofill(loaded):
    rf = RidgeFill(loaded, None, fill="none", split=S, tail=T)
    with pytest.raises(ValueError, match="generate"):
        rf.cache(token_ids(N))


def test_generate_reports_counts_and_exact_short_prompt(loaded):
    rf = RidgeFill(loaded, None, fill="identity", split=S, tail=T)
    r = rf.generate("abcdefghij" * 4, max_new_tokens=3)
    assert r.prompt_tokens in (40, 41)     # 40 bytes (+ <s> where the tokenizer adds it)
    assert (r.filled, r.exact_prefix, r.tail) == (r.prompt_tokens - T, 0, T)
    assert r.new_tokens == 3 and r.fill == "identity" and r.split == S
    short = RidgeFill(loaded, None, fill="identity", split=S, tail=64).generate("abc",
                                                                               max_new_tokens=2)
    assert short.filled == 0 and short.fill == "exact"
    assert any("fits in the tail" in n and "ran exact" in n for n in short.notes)
