"""The torch engine against rfmodel's TinyModel on the same weights (issue 4).

The HF tiny model's state_dict goes to numpy and into ``rfmodel.model.TinyModel`` (float64,
HF Llama/Qwen3 weight names); every arm (exact, nofill, identity, ridgefill), with and
without exact prefix rows, value/key rescale and the three splices must agree with the torch
engine (float32) on the tail logits, on every layer's cache entries and on full-depth decoding.

Tolerance: float32 against float64 on a 4-layer model whose logits are O(1-5): relative error
(max abs difference over max abs reference) below 1e-4 (measured ~1e-6).

Conventions mapped between the two (not differences of behaviour):
- rfmodel's ridgefill wants a map for layer S too; the engine feeds layer S its true input x_S
  (the map would be the identity there), so the reference gets ``maps[S] = (I, 0)``.
- the rescale is rfmodel's default ``rescale_mode="mean_ratio"``: per KV head, the ratio of
  the exact to the predicted norm averaged over the first c tail rows (paper 2.3).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu.core.engine import Engine
from gpu.core.plan import Plan
from gpu_fixtures import run_plan, DenseMaps, HIDDEN, LAYERS, random_maps, tiny_model, to_tiny_model, token_ids

RTOL = 1e-4
N, S, T = 24, 2, 8
ARMS = {"exact": "exact", "nofill": "none", "identity": "identity", "ridgefill": "ridge"}


@pytest.fixture(scope="module", params=["llama", "qwen3"])
def pair(request):
    model = tiny_model(request.param, seed=7)
    return request.param, model, to_tiny_model(model)


def rel(a, b) -> float:
    a = a.detach().double().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def ref_maps(maps):
    return {S: (np.eye(HIDDEN), np.zeros(HIDDEN)), **maps}


def check_cache(pre, rc, arm):
    for l in range(LAYERS):
        k, v = pre.cache.layers[l].keys[0], pre.cache.layers[l].values[0]
        ref = rc.layers[l]
        if arm == "nofill" and l >= S:
            # the engine keeps a slot per row; filled rows have no entry there (zeros) and
            # are hidden from decoding by pre.visible, which must equal rfmodel's row set
            assert pre.visible is not None
            assert np.array_equal(np.flatnonzero(pre.visible.numpy()), ref.pos)
            hidden = ~pre.visible
            assert not k[:, hidden].any() and not v[:, hidden].any()
            k, v = k[:, ref.pos], v[:, ref.pos]
        else:
            assert np.array_equal(ref.pos, np.arange(N))
        assert k.shape == ref.k.shape
        assert rel(k, ref.k) < RTOL, (arm, l)
        assert rel(v, ref.v) < RTOL, (arm, l)


@torch.inference_mode()
@pytest.mark.parametrize("arm", list(ARMS))
@pytest.mark.parametrize("exact_rows", [(), (1, 4, 9, 15)])
def test_every_arm_matches_tinymodel(pair, arm, exact_rows):
    family, model, tm = pair
    ids = token_ids(N, seed=8)
    maps = random_maps(S, seed=9)
    eng = Engine(model, DenseMaps(S, maps))
    plan = Plan(N, S, T, LAYERS, np.array(exact_rows, np.int64))
    pre = run_plan(eng, ids, plan, ARMS[arm])
    ref_logits, ref_cache = tm.prefill(ids[0].numpy(), arm, S, T, exact_rows=exact_rows,
                                       maps=ref_maps(maps) if arm == "ridgefill" else None)
    assert rel(pre.logits[-T:], ref_logits) < RTOL, (family, arm)
    check_cache(pre, ref_cache, arm)
    # rows that ran every layer: the exact prefix rows then the tail (exact: every row)
    want = np.arange(N) if arm == "exact" else np.concatenate([exact_rows, np.arange(N - T, N)])
    assert np.array_equal(pre.rows.numpy(), want)

    # full-depth decoding from both caches: same greedy tokens, same logits
    tokens = eng.decode(pre, 3)
    ref_tokens, logits = [], ref_logits[-1]
    for step in range(3):
        top2 = np.sort(logits)[-2:]
        assert top2[1] - top2[0] > 1e-3, "near tie: pick another seed"
        ref_tokens.append(int(np.argmax(logits)))
        logits = tm.decode_step(ref_tokens[-1], ref_cache)
    assert tokens == ref_tokens, (family, arm)


@torch.inference_mode()
def test_arms_differ_on_tinymodel(pair):
    """The arms are not interchangeable here (so the agreement above means something)."""
    family, model, tm = pair
    ids = token_ids(N, seed=8)
    maps = random_maps(S, seed=9)
    eng = Engine(model, DenseMaps(S, maps))
    plan = Plan(N, S, T, LAYERS)
    tails = {arm: run_plan(eng, ids, plan, fill).logits[-T:] for arm, fill in ARMS.items()}
    names = list(tails)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert rel(tails[a], tails[b].double().numpy()) > 1e-3, (a, b)


@torch.inference_mode()
@pytest.mark.parametrize("arm", ["identity", "ridgefill"])
@pytest.mark.parametrize("rescale", ["values", "keys"])
def test_rescale_matches_tinymodel(pair, arm, rescale):
    family, model, tm = pair
    ids = token_ids(N, seed=10)
    maps = random_maps(S, seed=11, noise=0.5)
    eng = Engine(model, DenseMaps(S, maps))
    c = 5
    pre = run_plan(eng, ids, Plan(N, S, T, LAYERS, np.array([2, 6])), ARMS[arm],
                      rescale=rescale, rescale_rows=c)
    ref_logits, ref_cache = tm.prefill(ids[0].numpy(), arm, S, T, exact_rows=[2, 6],
                                       maps=ref_maps(maps) if arm == "ridgefill" else None,
                                       rescale=rescale, c=c)
    assert rel(pre.logits[-T:], ref_logits) < RTOL
    check_cache(pre, ref_cache, arm)
    plain = run_plan(eng, ids, Plan(N, S, T, LAYERS, np.array([2, 6])), ARMS[arm])
    assert rel(plain.logits[-T:], ref_logits) > 1e-4  # the rescale did change something


@torch.inference_mode()
@pytest.mark.parametrize("splice", ["keys", "values", "both"])
def test_splices_match_tinymodel(pair, splice):
    family, model, tm = pair
    ids = token_ids(N, seed=12)
    maps = random_maps(S, seed=13, noise=0.5)
    eng = Engine(model, DenseMaps(S, maps))
    exact = run_plan(eng, ids, None, "exact")
    plan = Plan(N, S, T, LAYERS, np.array([5]))
    pre = run_plan(eng, ids, plan, "ridge", splice=splice, exact_cache=exact.cache)
    ref_logits, ref_cache = tm.prefill(ids[0].numpy(), "ridgefill", S, T, exact_rows=[5],
                                       maps=ref_maps(maps), splice=splice)
    assert rel(pre.logits[-T:], ref_logits) < RTOL
    check_cache(pre, ref_cache, "ridgefill")
    if splice == "both":  # exact keys and values everywhere: the exact tail, bitwise-close
        assert rel(pre.logits[-T:], exact.logits[-T:].double().numpy()) < 1e-5
