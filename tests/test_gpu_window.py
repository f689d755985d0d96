"""Sliding-window layers (gemma3): a filled row that no later query can read needs no cache
entry. Skipping it (skip_unread=True) must give the same prefill and the same decoding as
filling it (issue 4), and it must really skip (fewer rows through the maps).

Oracle: the same prefill with skip_unread=False; and which rows are read follows from the
window rule (key visible to query q iff q - window < key <= q) in closed form.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu.core.engine import Engine
from gpu.core.plan import Plan
from gpu_fixtures import run_plan, LAYERS, WINDOW, DenseMaps, random_maps, tiny_model, token_ids

N, S, T = 40, 1, 8
EXACT = np.array([10, 20, 21])


class CountingMaps(DenseMaps):
    """Counts the rows each late layer's map is asked to predict."""

    def __init__(self, *a):
        super().__init__(*a)
        self.rows: dict[int, int] = {}

    def predict(self, layer, x):
        self.rows[layer] = self.rows.get(layer, 0) + x.shape[1]
        return super().predict(layer, x)


def read_rows(plan: Plan, window: int) -> np.ndarray:
    """Filled rows some computed row or decoding step (positions >= n) reads: closed form."""
    readers = np.concatenate([plan.computed, [plan.n]])
    return np.array([f for f in plan.filled
                     if ((readers >= f) & (readers - f < window)).any()], np.int64)


@pytest.fixture(scope="module")
def gemma():
    model = tiny_model("gemma3", seed=2)
    types = model.config.layer_types
    assert types[S] == "sliding_attention" and "full_attention" in types[S + 1:]
    assert model.config.sliding_window == WINDOW
    return model


@torch.inference_mode()
@pytest.mark.parametrize("fill", ["ridge", "identity"])
def test_skip_unread_equals_filling_every_row(gemma, fill):
    maps = random_maps(S, seed=3)
    plan = Plan(N, S, T, LAYERS, EXACT)
    ids = token_ids(N, seed=4)
    runs = {}
    for skip in (True, False):
        m = CountingMaps(S, maps)
        runs[skip] = (run_plan(Engine(gemma, m), ids, plan, fill, skip_unread=skip), m)
    (on, m_on), (off, m_off) = runs[True], runs[False]

    if fill == "ridge":
        want = read_rows(plan, WINDOW).size
        assert 0 < want < plan.filled.size
        for l in range(S + 1, LAYERS):  # layers above the split go through the maps
            sliding = gemma.config.layer_types[l] == "sliding_attention"
            assert m_off.rows[l] == plan.filled.size
            assert m_on.rows[l] == (want if sliding else plan.filled.size), l
    # same logits and cache; SDPA reduces over the same keys in the same order -> bitwise
    assert torch.equal(on.logits, off.logits)
    for l in range(LAYERS):
        assert torch.equal(on.cache.layers[l].keys, off.cache.layers[l].keys), l
        assert torch.equal(on.cache.layers[l].values, off.cache.layers[l].values), l

    # decoding continues identically: the same greedy tokens and the same logits per step
    tok = int(on.last_logits.argmax())
    for step in range(4):
        step_ids = torch.tensor([[tok]])
        a = gemma(input_ids=step_ids, cache=on.cache, use_cache=True).logits[0, -1]
        b = gemma(input_ids=step_ids, cache=off.cache, use_cache=True).logits[0, -1]
        assert torch.equal(a, b), step
        tok = int(a.argmax())


@torch.inference_mode()
def test_skip_unread_decode_matches_with_engine_decode(gemma):
    """Through Engine.decode too, and the skipped rows never changed the tail (window > 0)."""
    maps = random_maps(S, seed=5)
    plan = Plan(N, S, T, LAYERS, EXACT)
    ids = token_ids(N, seed=6)
    eng = Engine(gemma, DenseMaps(S, maps))
    a = eng.decode(run_plan(eng, ids, plan, "ridge", skip_unread=True), 5)
    b = eng.decode(run_plan(eng, ids, plan, "ridge", skip_unread=False), 5)
    assert a == b and len(a) == 5


@torch.inference_mode()
@pytest.mark.parametrize("fill", ["none", "ridge"])
def test_decoding_continues_the_prefill(gemma, fill):
    """Each decoded token is the argmax of the same row when the prompt plus the tokens
    before it is prefilled in one go with the same filled rows (decode steps run
    full depth over the mixed cache, the no-fill arm keeping filled rows hidden, sliding
    layers keeping only their window)."""
    maps = random_maps(S, seed=7)
    eng = Engine(gemma, DenseMaps(S, maps))
    ids = token_ids(N, seed=8)
    tokens = eng.decode(run_plan(eng, ids, Plan(N, S, T, LAYERS, EXACT), fill), 4)
    longer = torch.cat([ids, torch.tensor([tokens[:3]])], dim=1)
    again = run_plan(eng, longer, Plan(N + 3, S, T + 3, LAYERS, EXACT), fill)
    assert again.logits[-4:].argmax(-1).tolist() == tokens


# ------------------------------------------------- attention over the columns a block may read
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from gpu.core.attention import masked_attention  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(n_old=st.integers(0, 300), n_new=st.integers(1, 300), window=st.sampled_from([None, 4, 32, 100]),
       block=st.sampled_from([1, 7, 64, 512]), hidden=st.floats(0.0, 0.9), seed=st.integers(0, 2**16))
def test_masked_attention_equals_one_masked_sdpa(n_old, n_new, window, block, hidden, seed):
    """The per-block column spans give what one masked ``scaled_dot_product_attention`` over
    the whole cache gives (float rounding only), for the masks ``Engine.late`` builds: causal,
    optionally windowed, some old or new columns hidden, queries a sorted subset of new rows."""
    g = torch.Generator().manual_seed(seed)
    n_keys = n_old + n_new
    rows = torch.nonzero(torch.rand(n_new, generator=g) < 0.6).flatten()
    rows = torch.cat([rows, torch.tensor([n_new - 1])]).unique()  # sorted, the last row computed
    q_pos, key_pos = n_old + rows, torch.arange(n_keys)
    allowed = key_pos[None, :] <= q_pos[:, None]
    if window is not None:
        allowed &= key_pos[None, :] > q_pos[:, None] - window
    seen = torch.rand(n_keys, generator=g) >= hidden
    seen[n_old + rows] = True  # a computed row always sees itself
    allowed &= seen[None, :]
    q = torch.randn(1, 4, rows.numel(), 8, generator=g)
    k, v = torch.randn(1, 2, n_keys, 8, generator=g), torch.randn(1, 2, n_keys, 8, generator=g)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                                            scale=0.3, enable_gqa=True)
    got = masked_attention(q, k, v, allowed, 0.3, block=block)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_masked_attention_reads_only_the_window(monkeypatch):
    """A 1,024-row tail under a 32-wide window: each block of 128 queries reads its own 159
    columns, not the 1,024 of the cache (one call per block), with the same result."""
    n, window, block = 1024, 32, 128
    pos = torch.arange(n)
    allowed = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 8, generator=g) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=0.3)
    widths = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        widths.append(k.shape[2])
        return real(q, k, v, **kw)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    got = masked_attention(q, k, v, allowed, 0.3, block=block)
    assert widths == [block] + [block + window - 1] * (n // block - 1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
