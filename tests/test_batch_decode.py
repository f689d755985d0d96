"""Batched greedy decoding (gpu.lab.eval.batch_decode) against one-at-a-time ``Engine.decode``.

Oracle: ``Engine.decode`` of each prefill alone. A batched step sums in another order, so the
test asks for the same greedy tokens (random tiny models leave no near-ties at these sizes)
and the same first-step logits to rounding. The gemma3 twin's window (6) is shorter than the
prompt, so its sliding-window layers run the windowed path.
"""
from __future__ import annotations

import pytest
import torch

from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from gpu.lab.eval.batch_decode import Batch
from gpu.core.cache import full_cache
from gpu.core.engine import Engine, Feeder, Prefill
from gpu.core.plan import Plan
from gpu_fixtures import run_plan, DenseMaps, LAYERS, random_maps, tiny_model, token_ids

N, SPLIT, TAIL, STEPS = 20, 1, 3, 7


def prefills(model, ids):
    """Six caches of one prompt: exact, RidgeFill, identity fill, RidgeFill with exact keys,
    exact again in a cache whose sliding-window layers keep every position (the harness's
    exact arm, which the splice reads), and no fill (filled rows hidden from late layers)."""
    ridge = Engine(model, DenseMaps(SPLIT, random_maps(SPLIT, seed=4)))
    plan = Plan(N, SPLIT, TAIL, LAYERS)
    full = full_cache(model.config)
    out = model(input_ids=ids, cache=full, use_cache=True)
    kept = Prefill(full, out.logits[0, -1:], torch.tensor([N - 1]), None, "exact")
    return ridge, [run_plan(ridge, ids, None, "exact"), run_plan(ridge, ids, plan, "ridge"),
                   run_plan(ridge, ids, plan, "identity"),
                   run_plan(ridge, ids, plan, "ridge", splice="keys", exact_cache=full), kept,
                   run_plan(ridge, ids, plan, "none")]


@torch.inference_mode()
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_batch_equals_one_at_a_time(family):
    model = tiny_model(family, seed=5)
    ids = token_ids(N, seed=6)
    eng, pres = prefills(model, ids)
    alone = [eng.decode(p, STEPS) for p in prefills(model, ids)[1]]  # fresh caches
    assert len({tuple(a) for a in alone}) > 1  # the arms differ, so the slots matter
    assert alone[4] == alone[0]  # keeping every position changes nothing that decoding reads
    assert alone[5] != alone[0]  # hiding the filled rows matters
    batch = Batch(model, capacity=len(pres) + 2, max_new_tokens=STEPS)  # spare slots trimmed
    assert [batch.add(p) for p in pres] == [0, 1, 2, 3, 4, 5]
    first = torch.stack(batch.logits)
    assert batch.greedy() == alone
    for p, row in zip(pres, first):
        assert torch.equal(p.last_logits, row)
    # the second step's logits, batched against alone, agree to rounding
    b2 = Batch(model, len(pres) - 1, 2)
    for p in prefills(model, ids)[1][:-1]:
        b2.add(p)
    tokens = torch.stack(b2.logits).argmax(-1)
    batched = model(input_ids=tokens[:, None], cache=b2.cache, use_cache=True).logits[:, -1]
    for j, p in enumerate(prefills(model, ids)[1][:-1]):
        one = model(input_ids=tokens[j:j + 1, None], cache=p.cache, use_cache=True).logits[0, -1]
        torch.testing.assert_close(batched[j], one, rtol=1e-5, atol=1e-5)
    assert "sdpa" not in ALL_ATTENTION_FUNCTIONS._local_mapping  # the wrapper is gone again


@torch.inference_mode()
def test_stopped_slots_leave_and_the_rest_go_on():
    model = tiny_model("llama", seed=5)
    ids = token_ids(N, seed=6)
    eng, pres = prefills(model, ids)
    alone = [eng.decode(p, STEPS) for p in prefills(model, ids)[1]]
    batch = Batch(model, len(pres), STEPS)
    for p in pres:
        batch.add(p)
    seen = []

    def stop(slot, tokens):
        seen.append(slot)
        return slot in (0, 2) and len(tokens) == 3

    out = batch.greedy(stop=stop)
    assert out[0] == alone[0][:3] and out[2] == alone[2][:3]
    assert out[1] == alone[1] and out[3:] == alone[3:]
    assert seen.count(0) == 3 and seen.count(1) == STEPS - 1  # asked until it left / the cap
    # an end token ends its slot (the token is kept, as Engine.decode keeps it)
    eos = alone[1][2]
    b = Batch(model, len(pres), STEPS)
    for p in prefills(model, ids)[1]:
        b.add(p)
    got = b.greedy(eos_token_id=eos)
    assert got[1] == alone[1][: alone[1].index(eos) + 1]
    assert got == [eng.decode(p, STEPS, eos) for p in prefills(model, ids)[1]]


@torch.inference_mode()
def test_teacher_forcing_equals_feeding_each_cache_alone():
    """``Batch.feed`` (the agreement instrument) against feeding each prefill's cache one
    token at a time through the model (no fill: its slot is recomputed over visible rows)."""
    model = tiny_model("llama", seed=5)
    ids = token_ids(N, seed=6)
    eng, pres = prefills(model, ids)
    tokens = token_ids(STEPS, seed=9)[0].tolist()
    batch = Batch(model, len(pres), STEPS - 1)
    for p in pres:
        batch.add(p)
    fed = batch.feed(tokens)
    assert fed.shape == (len(pres), STEPS, model.config.vocab_size)
    for j, p in enumerate(prefills(model, ids)[1]):
        want = [p.last_logits]
        feeder = Feeder(eng, p)  # Engine.decode's step: the no-fill arm hides its filled rows
        want += [feeder.push(t) for t in tokens[:-1]]
        torch.testing.assert_close(fed[j], torch.stack(want).float(), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fed[0], fed[1])  # the slots differ
    with pytest.raises(ValueError, match="max_new_tokens"):
        Batch(model, 1, 2).feed([1, 2, 3, 4])


@torch.inference_mode()
def test_what_does_not_batch_is_refused_clearly():
    model = tiny_model("llama", seed=5)
    ids = token_ids(N, seed=6)
    eng = Engine(model, DenseMaps(SPLIT, random_maps(SPLIT, seed=4)))
    plan = Plan(N, SPLIT, TAIL, LAYERS)
    nofill = run_plan(eng, ids, plan, "none")
    model.config._attn_implementation = "eager"  # hidden rows need the sdpa wrapper
    try:
        assert not Batch(model, 2, 3).accepts(nofill)
        with pytest.raises(ValueError, match="Engine.decode"):
            Batch(model, 2, 3).add(nofill)
        assert Batch(model, 2, 3).accepts(run_plan(eng, ids, plan, "ridge"))
    finally:
        model.config._attn_implementation = "sdpa"
    b = Batch(model, 1, 3)
    b.add(run_plan(eng, ids, None, "exact"))
    with pytest.raises(ValueError, match="holds 1"):
        b.add(run_plan(eng, ids, None, "exact"))
    other = Batch(model, 2, 3)
    other.add(run_plan(eng, ids, None, "exact"))
    with pytest.raises(ValueError, match="one prompt"):
        other.add(run_plan(eng, token_ids(N + 1, seed=6), None, "exact"))
    assert Batch(model, 2, 3).greedy() == []


@torch.inference_mode()
def test_splice_needs_every_position_of_a_sliding_window_layer():
    """gemma3's stock cache keeps only a sliding layer's last window - 1 columns; a splice of
    rows before them says how to keep them, and from a full cache it writes exact entries."""
    model = tiny_model("gemma3", seed=5)
    ids = token_ids(N, seed=6)
    eng = Engine(model, DenseMaps(SPLIT, random_maps(SPLIT, seed=4)))
    plan = Plan(N, SPLIT, TAIL, LAYERS)
    stock = run_plan(eng, ids, None, "exact").cache
    with pytest.raises(ValueError, match="full_cache"):
        run_plan(eng, ids, plan, "ridge", splice="both", exact_cache=stock)
    full = full_cache(model.config)
    model(input_ids=ids, cache=full, use_cache=True)
    pre = run_plan(eng, ids, plan, "ridge", splice="both", exact_cache=full)
    fed = full_cache(model.config)  # fed two more tokens since (as agreement does): the same
    model(input_ids=torch.cat([ids, ids[:, :2]], 1), cache=fed, use_cache=True)
    again = run_plan(eng, ids, plan, "ridge", splice="both", exact_cache=fed)
    assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
               for a, b in zip(pre.cache.layers, again.cache.layers))
    for layer in range(SPLIT + 1, LAYERS):
        got, ref = pre.cache.layers[layer], full.layers[layer]
        n = got.keys.shape[2]  # a sliding layer keeps its last columns, the full one all
        f = n - TAIL  # the kept filled rows come from the exact cache as they are
        assert f > 0 and torch.equal(got.keys[:, :, :f], ref.keys[:, :, N - n:N - TAIL])
        assert torch.equal(got.values[:, :, :f], ref.values[:, :, N - n:N - TAIL])
        torch.testing.assert_close(got.keys[:, :, f:], ref.keys[:, :, N - TAIL:])


@torch.inference_mode()
@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_shared_prompt_columns_decode_like_separate_ones(family):
    """Below every arm's split the prompt columns are the same in every slot; the batch keeps
    one copy (full-attention layers) and still decodes what each arm decodes alone."""
    model = tiny_model(family, seed=5)
    ids = token_ids(N, seed=6)
    split = 3  # gemma3's full-attention layer (2) lies below it

    def arms():
        eng = Engine(model, DenseMaps(split, random_maps(split, seed=4, noise=1.0)))
        plan = Plan(N, split, TAIL, LAYERS)
        return eng, [run_plan(eng, ids, None, "exact"), run_plan(eng, ids, plan, "ridge"),
                     run_plan(eng, ids, plan, "identity"), run_plan(eng, ids, plan, "none")]

    eng, pres = arms()
    alone = [eng.decode(p, STEPS) for p in pres]
    batch = Batch(model, 4, STEPS)
    for p in arms()[1]:
        batch.add(p)
    batch._trim()
    batch._share()
    kinds = [type(layer).__name__ for layer in batch.cache.layers]
    assert kinds[2] == "_Shared" and "_Shared" not in kinds[split:], kinds
    b2 = Batch(model, 4, STEPS)
    for p in arms()[1]:
        b2.add(p)
    assert b2.greedy(stop=lambda slot, t: slot == 1 and len(t) == 2) == \
        [alone[0], alone[1][:2], alone[2], alone[3]]
