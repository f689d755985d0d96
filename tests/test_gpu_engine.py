"""The RidgeFill engine against the stock transformers forward (issue 4, "Fill off").

Oracles: the unmodified model's own forward (``model(input_ids)``, ``output_hidden_states``)
and closed forms (a map A = I, b = 0 is the identity fill). Tiny seeded random models of each
family run on every CI machine; the two real models are marked ``model``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from gpu.core.engine import Engine
from gpu.core.late import every_row_exact
from gpu.core.plan import Plan
from gpu_fixtures import (run_plan, DenseMaps, LAYERS, assert_lower_reuse_bitwise, every_row_through_late,
                          identity_maps, random_maps, tiny_model, token_ids)

FAMILIES = ("llama", "qwen3", "gemma3")
N = 24


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request):
    return request.param, tiny_model(request.param, seed=1)


@torch.inference_mode()
def test_fill_off_logits_bitwise_equal_stock_forward(family_model):
    """fill='exact' (and no plan) gives exactly the logits of the unmodified forward."""
    family, model = family_model
    ids = token_ids(N, seed=2)
    stock = model(input_ids=ids).logits[0]
    eng = Engine(model)
    for pre in (run_plan(eng, ids, None, "exact"),
                run_plan(eng, ids, Plan(N, 2, 8, LAYERS), "exact"),
                # a plan whose every prefix row is exact is the stock forward too
                run_plan(eng, ids, Plan(N, 2, 8, LAYERS, np.arange(N - 8)), "identity")):
        # logits are those of the rows that ran every layer (pre.rows)
        assert pre.logits.shape == (pre.rows.numel(), stock.shape[1])
        assert torch.equal(pre.logits, stock[pre.rows]), family
        assert pre.fill == "exact"
    assert torch.equal(run_plan(eng, ids, None, "exact").rows, torch.arange(N))


@torch.inference_mode()
@pytest.mark.parametrize("split", [1, 3])
def test_every_row_through_late_path_is_bitwise_exact(family_model, split):
    """Engine.lower + Engine.late with every row computed (none filled) reproduces the stock
    logits and every layer's cache entries bit for bit."""
    family, model = family_model
    ids = token_ids(N, seed=3)
    stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
    logits, cache = every_row_through_late(model, ids, split)
    assert torch.equal(logits, stock.logits[0]), family
    for l in range(LAYERS):
        assert torch.equal(cache.layers[l].keys, stock.past_key_values.layers[l].keys), (family, l)
        assert torch.equal(cache.layers[l].values, stock.past_key_values.layers[l].values)


@torch.inference_mode()
def test_lower_layers_and_x_split_equal_exact(family_model):
    """Under a fill arm, layers 0..S-1 run exactly for every row: x_S equals the stock
    hidden state and the lower caches equal an exact prefill's, bitwise; and the fill does
    change the tail's logits (so the comparison is not vacuous)."""
    family, model = family_model
    S, T = 2, 6
    ids = token_ids(N, seed=4)
    stock = model(input_ids=ids, output_hidden_states=True,
                  cache=DynamicCache(config=model.config), use_cache=True)
    eng = Engine(model, DenseMaps(S, random_maps(S, seed=5)))
    x_split, _ = eng.lower(ids, S, DynamicCache(config=model.config))
    assert torch.equal(x_split, stock.hidden_states[S])
    pre = run_plan(eng, ids, Plan(N, S, T, LAYERS, np.array([2, 9])), "ridge")
    for l in range(S):
        assert torch.equal(pre.cache.layers[l].keys, stock.past_key_values.layers[l].keys)
        assert torch.equal(pre.cache.layers[l].values, stock.past_key_values.layers[l].values)
    assert not torch.equal(pre.logits[-T:], stock.logits[0, -T:])


@torch.inference_mode()
@pytest.mark.parametrize("exact_rows", [(), (0, 5, 11)])
def test_identity_arm_equals_ridge_with_identity_maps(family_model, exact_rows):
    """The identity fill (x_hat_l = x_S) is the ridge fill with A = I, b = 0."""
    family, model = family_model
    S, T = 1, 6
    ids = token_ids(N, seed=6)
    plan = Plan(N, S, T, LAYERS, np.array(exact_rows, dtype=np.int64))
    ident = run_plan(Engine(model), ids, plan, "identity")
    ridge = run_plan(Engine(model, DenseMaps(S, identity_maps(S))), ids, plan, "ridge")
    assert torch.equal(ident.logits, ridge.logits), family
    for l in range(LAYERS):
        assert torch.equal(ident.cache.layers[l].keys, ridge.cache.layers[l].keys)
        assert torch.equal(ident.cache.layers[l].values, ridge.cache.layers[l].values)


@torch.inference_mode()
@pytest.mark.parametrize("fill, exact_rows", [("exact", None), ("exact", (3, 7)),
                                              ("ridge", (3, 7)), ("none", ())])
def test_logits_rows_are_the_last_rows_of_every_row_logits(family_model, fill, exact_rows):
    """``logits_rows=k`` gives the logits and positions of the last k rows that ran every
    layer, those of the every-row prefill (what loss scoring reads without 1 MiB per row
    of a 262K vocabulary for the whole prompt); k outside 1..computed is refused."""
    family, model = family_model
    S, T = 2, 6
    ids = token_ids(N, seed=9)
    plan = None if exact_rows is None else Plan(N, S, T, LAYERS, np.array(exact_rows, np.int64))
    eng = Engine(model, DenseMaps(S, random_maps(S, seed=10)))
    every = run_plan(eng, ids, plan, fill)
    for k in (1, 4, every.rows.numel()):
        some = run_plan(eng, ids, plan, fill, logits_rows=k)
        assert torch.equal(some.rows, every.rows[-k:]), (family, k)
        torch.testing.assert_close(some.logits, every.logits[-k:], rtol=1e-5, atol=1e-5)
        assert torch.equal(some.logits.argmax(-1), every.logits[-k:].argmax(-1))
    for bad in (0, every.rows.numel() + 1):
        with pytest.raises(ValueError, match="logits_rows"):
            run_plan(eng, ids, plan, fill, logits_rows=bad)


@pytest.mark.parametrize("adopt", [False, True])
def test_reused_lower_pass_is_bitwise_a_fresh_one(family_model, adopt):
    """Arms sharing one prompt's lower layers (the evaluation's reuse) change nothing, also
    when the pass comes from the exact arm's stock forward (gemma3: its sliding-window
    layers kept every position there)."""
    family, model = family_model
    assert_lower_reuse_bitwise(model, DenseMaps(2, random_maps(2)), token_ids(N, seed=8), 2, 6,
                               adopt=adopt)


def test_prefill_rejects_maps_for_another_split():
    model = tiny_model("llama", seed=1)
    eng = Engine(model, DenseMaps(2, random_maps(2)))
    with pytest.raises(ValueError, match=r"fitted for split 2.*split 1"):
        run_plan(eng, token_ids(N), Plan(N, 1, 4, LAYERS), "ridge")
    with pytest.raises(ValueError, match="fill="):
        run_plan(eng, token_ids(N), Plan(N, 2, 4, LAYERS), "bogus")


# ------------------------------------------------------------------------------ real models
REAL = ("smollm2-135m", "gemma3-270m",
        pytest.param("qwen2.5-coder-0.5b", marks=[pytest.mark.large, pytest.mark.model]))


@pytest.fixture(scope="module", params=REAL)
def real(request):
    from gpu.core import models

    try:
        return models.load(request.param, device="cpu", dtype=torch.float32)
    except ModuleNotFoundError as e:  # the model package is not installed here
        pytest.skip(str(e))


def _prompt_ids(loaded, n=64):
    text = ("The quick brown fox jumps over the lazy dog while the committee reviews the "
            "annual budget, the river floods the valley, and a violinist tunes her instrument. ")
    ids = loaded.tokenizer(text * 6, return_tensors="pt").input_ids[:, :n]
    assert ids.shape[1] == n
    return ids


@pytest.mark.model
@torch.inference_mode()
def test_real_model_fill_off_and_late_path_bitwise(real):
    """Real models (the paper's byte-identical check): fill off equals the stock forward, and
    every row through the engine's own late-layer path equals it too, bitwise."""
    model = real.model
    ids = _prompt_ids(real)
    stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True,
                  output_hidden_states=True)
    eng = Engine(model)
    assert torch.equal(run_plan(eng, ids, None, "exact").logits, stock.logits[0]), real.name
    split = real.n_layers // 2
    cache = DynamicCache(config=model.config)
    x_split, _ = eng.lower(ids, split, cache)
    assert torch.equal(x_split, stock.hidden_states[split])
    h = every_row_exact(eng.adapter, split, x_split, cache)
    # the stock last hidden state is after the final norm; the lm_head on it gave the logits
    # checked above, so comparing it saves a second (large-vocabulary) lm_head here
    assert torch.equal(eng.adapter.inner.norm(h), stock.hidden_states[-1]), real.name
    for l in (0, split, real.n_layers - 1):
        assert torch.equal(cache.layers[l].keys, stock.past_key_values.layers[l].keys)
        assert torch.equal(cache.layers[l].values, stock.past_key_values.layers[l].values)


@pytest.mark.large
@pytest.mark.model
@torch.inference_mode()
def test_qwen2_adapter_biases_and_gqa_on_a_real_layer():
    """Qwen2.5-Coder-0.5B (qwen2: q/k/v biases, 14 query and 2 key/value heads): the adapter's
    cache entries of a real layer equal the stock forward's, bitwise, and they depend on the
    bias (zeroing it changes them), so the biases are applied, not merely present."""
    from gpu.core import models

    try:
        lm = models.load("qwen2.5-coder-0.5b", device="cpu", dtype=torch.float32)
    except ModuleNotFoundError as e:
        pytest.skip(str(e))
    model, cfg = lm.model, lm.model.config
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (14, 2)
    ids = _prompt_ids(lm, 48)
    stock = model(input_ids=ids, cache=DynamicCache(config=cfg), use_cache=True,
                  output_hidden_states=True)
    eng, layer = Engine(model), 7
    ad = eng.adapter
    attn = ad.attn(layer)
    assert all(getattr(attn, p).bias is not None for p in ("q_proj", "k_proj", "v_proj"))
    x = stock.hidden_states[layer]
    cos, sin = ad.rope(x, torch.arange(ids.shape[1])[None], layer)
    k, v = ad.keys_values(layer, ad.input_norm(layer)(x), cos, sin)
    assert k.shape == (1, 2, ids.shape[1], attn.head_dim)
    assert torch.equal(k, stock.past_key_values.layers[layer].keys)
    assert torch.equal(v, stock.past_key_values.layers[layer].values)
    saved = attn.k_proj.bias.clone()
    try:
        attn.k_proj.bias.zero_()
        k0, _ = ad.keys_values(layer, ad.input_norm(layer)(x), cos, sin)
    finally:
        attn.k_proj.bias.copy_(saved)
    assert not torch.allclose(k0, k)
