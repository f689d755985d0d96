"""The torch engine on Gated DeltaNet hybrids (qwen3_next, qwen3_5 text), paper 2.1 and 2.3.

Tiny seeded random models of both families (4 layers, hidden 64: GDN, attention, GDN, GDN;
qwen3_next with MoE blocks on odd layers) run on the CPU through transformers' reference
PyTorch delta-rule kernels. Oracles: the unmodified transformers forward, the stock GDN
module (``layer.linear_attn``) called directly on inputs the test builds itself, the stock
module's own projections for the gates, and rfmath's closed forms (filled share rho).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, DynamicCache, Qwen3_5TextConfig, Qwen3NextConfig

from gpu.api import RidgeFill
from gpu.cli import build_parser
from gpu.core.engine import Engine
from gpu.core.late import every_row_exact
from gpu.maps.fit import FitOptions, documents, fit
from gpu.maps.files import load_maps
from gpu.core.models import Loaded
from gpu.core.plan import Plan
from gpu_fixtures import (run_plan, DenseMaps, assert_lower_reuse_bitwise, byte_tokenizer, calib_dir,
                          every_row_through_late, tiny_model)
from rfmath.gating import filled_share

FAMILIES = ("qwen3_next", "qwen3_5")
LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
L, D, N, VOCAB = 4, 64, 40, 259
HV, DK, DV = 4, 8, 8                 # GDN value heads, key and value head dims


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny matrices: one thread is far faster than two on a busy CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def hybrid_config(family: str):
    common = dict(vocab_size=VOCAB, hidden_size=D, intermediate_size=96, num_hidden_layers=L,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                  max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0, linear_conv_kernel_dim=4,
                  linear_key_head_dim=DK, linear_value_head_dim=DV, linear_num_key_heads=2,
                  linear_num_value_heads=HV, layer_types=LAYER_TYPES,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 0.5})
    if family == "qwen3_next":
        cfg = Qwen3NextConfig(**common, num_experts=4, num_experts_per_tok=2,
                              moe_intermediate_size=32, shared_expert_intermediate_size=32,
                              decoder_sparse_step=2)
    else:
        cfg = Qwen3_5TextConfig(**common)
    cfg._attn_implementation = "sdpa"
    return cfg


def hybrid_model(family: str, seed: int = 0):
    """Seeded fp32 weights: (1 + w) norms near gain 1, fan-in scaled matrices, and decay
    rates A spread from 0.01 (gates near 1: a layer that remembers) to 2 (forgets fast)."""
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hybrid_config(family), dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.logspace(-2, np.log10(2.0), p.numel())))
            elif "norm" in name:
                p.copy_(0.2 * torch.randn(p.shape, generator=g) + (1.0 if "linear_attn.norm" in name
                                                                   else 0.0))
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / p.shape[-1] ** 0.5)
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request):
    return request.param, hybrid_model(request.param, seed=1)


def ids_for(n: int, seed: int) -> torch.Tensor:
    return torch.randint(3, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def near_identity_maps(split: int, seed: int = 0, noise: float = 0.3):
    rng = np.random.default_rng(seed)
    return {l: (np.eye(D) + noise * rng.standard_normal((D, D)) / np.sqrt(D),
                0.1 * rng.standard_normal(D)) for l in range(split + 1, L)}


def eye_maps(split: int):
    return {l: (np.eye(D), np.zeros(D)) for l in range(split + 1, L)}


def same_cache(a: DynamicCache, b: DynamicCache) -> bool:
    for la, lb in zip(a.layers, b.layers):
        if hasattr(la, "recurrent_states"):
            if not (torch.equal(la.recurrent_states[0], lb.recurrent_states[0])
                    and torch.equal(la.conv_states[0], lb.conv_states[0])):
                return False
        elif not (torch.equal(la.keys, lb.keys) and torch.equal(la.values, lb.values)):
            return False
    return True


def stock_states(model, layer: int, x: torch.Tensor) -> DynamicCache:
    """The stock GDN module of ``layer`` run over input rows ``x`` (1, n, d) from an empty
    state, in one call (the oracle for what the engine folds into the state)."""
    cache = DynamicCache(config=model.config)
    lay = model.model.layers[layer]
    lay.linear_attn(hidden_states=lay.input_layernorm(x), cache=cache, attention_mask=None)
    return cache.layers[layer]


def stock_log_gates(model, layer: int, x: torch.Tensor) -> torch.Tensor:
    """log g (n, H_v) from the stock module's own projections and its decay formula."""
    lay = model.model.layers[layer]
    m, normed = lay.linear_attn, lay.input_layernorm(x)
    if hasattr(m, "in_proj_a"):
        a = m.in_proj_a(normed)
    else:
        a = m.fix_query_key_value_ordering(m.in_proj_qkvz(normed), m.in_proj_ba(normed))[5]
    return (-m.A_log.float().exp() * torch.nn.functional.softplus(a.float() + m.dt_bias))[0]


# ------------------------------------------------------------------ equivalence with stock
@torch.inference_mode()
def test_fill_off_bitwise_equals_stock_forward(family_model):
    family, model = family_model
    ids = ids_for(N, 2)
    stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
    eng = Engine(model, DenseMaps(2, near_identity_maps(2)))
    for pre in (run_plan(eng, ids, None, "exact"), run_plan(eng, ids, Plan(N, 2, 8, L), "exact"),
                run_plan(eng, ids, Plan(N, 2, 8, L, np.arange(N - 8)), "ridge")):
        assert pre.fill == "exact"
        assert torch.equal(pre.logits, stock.logits[0][pre.rows]), family
        assert same_cache(pre.cache, stock.past_key_values)


@torch.inference_mode()
@pytest.mark.parametrize("split", [1, 2, 3])
def test_late_path_with_every_row_exact_is_bitwise_stock(family_model, split):
    """Engine.lower + Engine.late with every row computed: the GDN layers run their own mixer
    over all rows in one call (the chunked kernel, as the stock prefill does), the gated
    attention layers go through the adapter; logits, key/value caches and conv/recurrent
    states equal the stock forward bit for bit."""
    family, model = family_model
    ids = ids_for(N, 3)
    stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
    logits, cache = every_row_through_late(model, ids, split)
    assert torch.equal(logits, stock.logits[0]), family
    assert same_cache(cache, stock.past_key_values)


@torch.inference_mode()
def test_identity_arm_equals_ridge_with_eye(family_model):
    family, model = family_model
    ids = ids_for(N, 4)
    plan = Plan(N, 1, 8, L, np.array([3, 11, 20]))
    ident = run_plan(Engine(model), ids, plan, "identity")
    eye = run_plan(Engine(model, DenseMaps(1, eye_maps(1))), ids, plan, "ridge")
    assert torch.equal(ident.logits, eye.logits)
    assert same_cache(ident.cache, eye.cache)
    stock = model(input_ids=ids).logits[0][ident.rows]
    assert (ident.logits - stock).abs().max() > 1e-3  # the fill does change the tail


@pytest.mark.parametrize("split, adopt", [(1, False), (2, False), (2, True)])
def test_reused_lower_pass_is_bitwise_a_fresh_one(family_model, split, adopt):
    """The evaluation's shared lower pass, with GDN states below and above the split (also
    handed on by a stock forward)."""
    family, model = family_model
    maps = DenseMaps(split, near_identity_maps(split))
    assert_lower_reuse_bitwise(model, maps, ids_for(N, 9), split, 8, n_layers=L, adopt=adopt)


@torch.inference_mode()
@pytest.mark.parametrize("fill,S", [("ridge", 1), ("none", 2), ("identity", 2)])
def test_gdn_state_folds_predicted_filled_rows_and_true_exact_rows(family_model, fill, S):
    """GDN layer 2, where the computed rows' inputs are still exact (with split 1 the split
    layer reads every filled row's x_S, so it is exact for computed rows; with split 2 it is the
    split layer): the engine's state equals the stock GDN module run over the rows in order,
    true input on exact rows and the tail and A x_S + b on filled rows (ridge), the computed
    rows alone (no fill: filled rows skipped entirely), or every row's true input (identity at
    the split layer, whose input is x_S itself)."""
    family, model = family_model
    layer = 2
    ids = ids_for(N, 5)
    plan = Plan(N, S, 8, L, np.array([0, 7, 8, 19]))
    maps = DenseMaps(S, near_identity_maps(S, seed=3))
    pre = run_plan(Engine(model, maps), ids, plan, fill)
    hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    x_true, x_s = hs[layer].clone(), hs[S]
    computed, filled = torch.as_tensor(plan.computed), torch.as_tensor(plan.filled)
    if fill == "ridge":
        x_true[:, filled] = maps.predict(layer, x_s[:, filled])
        ref = stock_states(model, layer, x_true)
    elif fill == "none":
        ref = stock_states(model, layer, x_true[:, computed])
    else:
        ref = stock_states(model, layer, x_true)
    got = pre.cache.layers[layer]
    torch.testing.assert_close(got.recurrent_states[0], ref.recurrent_states[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(got.conv_states[0], ref.conv_states[0], rtol=0, atol=1e-6)


# ------------------------------------------------------------------ decoding
@torch.inference_mode()
def test_decoding_after_engine_prefill(family_model):
    """The stock forward decodes from the engine's cache: with every row exact, greedy
    tokens and logits equal decoding after a stock prefill (bitwise); after a RidgeFill
    prefill (ridge and no-fill arms) decoding runs at full depth, and model.generate
    continues from the cache."""
    family, model = family_model
    ids = ids_for(N, 6)

    def greedy(cache, logits, k=5):
        toks, outs = [], []
        for _ in range(k):
            t = int(logits.argmax())
            toks.append(t)
            logits = model(input_ids=torch.tensor([[t]]), cache=cache, use_cache=True).logits[0, -1]
            outs.append(logits)
        return toks, torch.stack(outs)

    stock = model(input_ids=ids, cache=DynamicCache(config=model.config), use_cache=True)
    ref_toks, ref_logits = greedy(stock.past_key_values, stock.logits[0, -1])
    eng = Engine(model)
    cache = DynamicCache(config=model.config)
    x_split, _ = eng.lower(ids, 1, cache)
    h = every_row_exact(eng.adapter, 1, x_split, cache)
    toks, logits = greedy(cache, eng.adapter.logits(h)[0, -1])
    assert toks == ref_toks
    assert torch.equal(logits, ref_logits), family

    eng = Engine(model, DenseMaps(1, near_identity_maps(1)))
    plan = Plan(N, 1, 8, L, np.array([2, 9]))
    for fill in ("ridge", "none"):
        pre = run_plan(eng, ids, plan, fill)
        out = eng.decode(pre, 4)
        assert len(out) == 4 and all(0 <= t < VOCAB for t in out)
    pre = run_plan(eng, ids[:, :-1], Plan(N - 1, 1, 8, L), "ridge")
    gen = model.generate(ids, cache=pre.cache, max_new_tokens=3, do_sample=False)
    assert gen.shape == (1, N + 3)


# ------------------------------------------------------------------ terminal-state correction
@torch.inference_mode()
@pytest.mark.parametrize("exact_rows", [[], [1, 5, 6]])
def test_correction_rho_and_restores_exact_state(family_model, exact_rows):
    """Paper 2.3 / Appendix H on the real layer: with DeltaM the true (exact - filled) state
    difference of a fully filled prefix, adding rho * DeltaM at the end of the prefix brings
    the layer's final state (after the exact tail) closer to the exact one than no correction,
    and rho is the filled rows' share of the gate weight: in [0, 1], 1 with no exact prefix
    row, and equal to rfmath's filled_share on the gates the layer computes."""
    family, model = family_model
    S, layer, T = 1, 2, 6
    ids = ids_for(N, 7)
    n_p = N - T
    hs = model(input_ids=ids, output_hidden_states=True).hidden_states
    maps = DenseMaps(S, near_identity_maps(S, seed=4, noise=0.6))
    x_true, x_hat = hs[layer], maps.predict(layer, hs[S])
    dM = (stock_states(model, layer, x_true[:, :n_p]).recurrent_states[0]
          - stock_states(model, layer, x_hat[:, :n_p]).recurrent_states[0])[0]
    exact_state = stock_states(model, layer, x_true).recurrent_states[0]

    plan = Plan(N, S, T, L, np.array(exact_rows, np.int64))
    eng = Engine(model, maps)
    plain = run_plan(eng, ids, plan, "ridge")
    fixed = run_plan(eng, ids, plan, "ridge", deltas={layer: dM})
    err_plain = (plain.cache.layers[layer].recurrent_states[0] - exact_state).norm()
    err_fixed = (fixed.cache.layers[layer].recurrent_states[0] - exact_state).norm()
    assert err_plain > 1e-3
    assert err_fixed < 0.5 * err_plain, (family, float(err_fixed), float(err_plain))

    rho = np.array(fixed.info["rho"][layer])
    assert rho.shape == (HV,) and np.all((rho >= 0) & (rho <= 1))
    u = x_true.clone()
    u[:, torch.as_tensor(plan.filled)] = x_hat[:, torch.as_tensor(plan.filled)]
    gates = stock_log_gates(model, layer, u[:, :n_p]).double().exp().T.numpy()
    mask = np.ones(n_p, bool)
    mask[plan.exact_rows] = False
    np.testing.assert_allclose(rho, filled_share(gates, mask), rtol=1e-9, atol=1e-12)
    if not exact_rows:
        np.testing.assert_array_equal(rho, 1.0)
    else:
        assert rho.min() < 1.0
    # a zero DeltaM changes nothing but the split of the scan at the prefix end (rounding)
    zero = run_plan(eng, ids, plan, "ridge", deltas={layer: torch.zeros_like(dM)})
    torch.testing.assert_close(zero.logits, plain.logits, rtol=0, atol=1e-4)


# ------------------------------------------------------------------ fit, map file, API, CLI
def _loaded(model, name, path):
    return Loaded(model, byte_tokenizer(), name, path)


def test_fit_with_correction_writes_delta_M_and_generate_applies_it(tmp_path):
    """`fit(correction=True)` stores DeltaM per GDN layer above the split (layers.{l}.delta_M,
    with metadata); it equals the mean exact-minus-filled state of the held-out document at
    every ``correction_every`` rows, recomputed here with the stock model and the stored bf16
    maps; RidgeFill(correction=True) then applies it (rho reported per layer)."""
    model = hybrid_model("qwen3_5", seed=2)
    loaded = _loaded(model, "tiny-qwen3_5", tmp_path)
    opts = FitOptions([1], tmp_path / "maps.safetensors", str(calib_dir(5, 400)),
                      lambdas=(1e-3, 1e-1), max_tokens=1200, doc_tokens=300, heldout_docs=1,
                      heldout_tokens=300, correction=True, correction_every=100)
    path = fit(loaded, opts, progress=False)[1]
    maps = load_maps(path, fingerprint=loaded.fingerprint())
    assert sorted(maps.delta_M) == [2, 3]
    meta = json.loads(path.with_suffix(".json").read_text())["correction"]
    assert meta["layers"] == [2, 3] and meta["states_per_layer"] == 3 and meta["every"] == 100
    assert len(meta["documents"]) == 1

    doc = documents(opts)[1][0]
    assert meta["documents"] == [doc.doc_id]
    with torch.inference_mode():
        ids = loaded.tokenizer(doc.text, return_tensors="pt").input_ids[:, :300]
        hs = model(input_ids=ids, output_hidden_states=True).hidden_states
        for layer in (2, 3):
            x_hat = maps.predict(layer, hs[1])
            diffs = [stock_states(model, layer, hs[layer][:, :e]).recurrent_states[0][0]
                     - stock_states(model, layer, x_hat[:, :e]).recurrent_states[0][0]
                     for e in (100, 200, 300)]
            ref = torch.stack(diffs).mean(0)
            got = maps.delta_M[layer]
            assert got.shape == (HV, DK, DV) and got.dtype == torch.float32
            assert ref.norm() > 1e-3
            torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)

    rf = RidgeFill(loaded, maps, tail=16, correction=True)
    prompt = rf.prompt(doc.text[:120])
    pre = rf.prefill(prompt)
    assert sorted(pre.info["rho"]) == [2, 3]
    assert rf.generate(doc.text[:120], max_new_tokens=3).new_tokens == 3
    plain = RidgeFill(loaded, maps, tail=16).prefill(prompt)
    assert "rho" not in plain.info
    assert not torch.equal(pre.last_logits, plain.last_logits)
    # the two-sweep probe: GDN layers start from an empty state over the probe rows; the
    # lower-layer attention budget skips GDN layers (layer 0 here)
    probe = RidgeFill(loaded, maps, tail=16, rows="probe", correction=True)
    r = probe.generate(doc.text[:120], max_new_tokens=2)
    assert r.exact_prefix > 0 and r.filled > 0 and r.new_tokens == 2


def test_correction_errors(tmp_path):
    """Clear errors: --correction without DeltaM in the maps, with the identity fill, on a
    model without GDN layers above the split (fit and generate)."""
    hybrid = _loaded(hybrid_model("qwen3_next", seed=3), "tiny-qwen3_next", tmp_path)
    no_delta = DenseMaps(1, near_identity_maps(1))
    no_delta.delta_M = {}  # maps fitted without --correction
    with pytest.raises(ValueError, match="refit the maps with `ridgefill fit --correction`"):
        RidgeFill(hybrid, no_delta, tail=8, correction=True)
    with pytest.raises(ValueError, match="fill='identity'"):
        RidgeFill(hybrid, None, split=1, fill="identity", tail=8, correction=True)
    with pytest.raises(ValueError, match="refit the maps"):
        run_plan(Engine(hybrid.model, no_delta), ids_for(20, 0), Plan(20, 1, 4, L), "ridge",
                 correction=True)
    llama = _loaded(tiny_model("llama"), "tiny-llama", tmp_path)
    with pytest.raises(ValueError, match="has none"):
        RidgeFill(llama, None, split=1, fill="none", tail=8, correction=True)
    with pytest.raises(ValueError, match="has none above split 1"):
        fit(llama, FitOptions([1], tmp_path / "m.safetensors", str(tmp_path), correction=True))
    a = build_parser().parse_args(["fit", "--splits", "1", "--out", "m.st", "--correction"])
    assert a.correction is True
