"""The chunked lower pass (issue 21, Engine.lower with ``chunk``) against one pass, on a tiny
model of every family: x_S, every lower cache entry and the prefill's logits agree up to float
rounding; one pass stays the stock forward's (chunk 0, or a prompt no longer than the chunk)."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from gpu import PrefillConfig
from gpu.core.engine import Engine
from gpu_fixtures import DenseMaps, random_maps
from test_batched_fill import _entries, family  # noqa: F401  (the per-family fixture)
from test_press import N, S, T, _ids, _shape

TOL = 1e-4  # the Gated DeltaNet kernels sum chunk by chunk: 3e-5 apart at most here


def test_chunked_lower_pass_equals_one_pass(family):
    name, model = family
    L, d, vocab = _shape(model)
    eng = Engine(model)
    ids = _ids(vocab, seed=6)
    split = L - 1
    one, parts = DynamicCache(config=model.config), DynamicCache(config=model.config)
    keep = {0: slice(5, 30), split - 1: slice(None)}
    x1, k1 = eng.lower(ids, split, one, keep)
    x2, k2 = eng.lower(ids, split, parts, keep, chunk=7)   # 40 rows: 6 passes
    assert torch.allclose(x1, x2, atol=TOL, rtol=TOL), name
    assert k1.keys() == k2.keys() and all(torch.allclose(k1[i], k2[i], atol=TOL, rtol=TOL)
                                          for i in k1)
    for layer in range(split):
        a, b = _entries(one, layer), _entries(parts, layer)
        assert len(a) == len(b) > 0
        for x, y in zip(a, b):
            assert x.shape == y.shape and torch.allclose(x, y, atol=TOL, rtol=TOL), (name, layer)


def test_prefill_with_chunks_equals_one_pass(family):
    name, model = family
    L, d, vocab = _shape(model)
    eng = Engine(model, DenseMaps(S, random_maps(S, n_layers=L, d=d, seed=3)))
    ids = _ids(vocab, seed=7)
    base = PrefillConfig(split=S, tail=T, rows="none", chunk=0)
    one, parts = eng.prefill(ids, base), eng.prefill(ids, base.replace(chunk=9))
    # the late layers carry the lower layers' rounding on (1e-4 apart on the hybrids)
    assert torch.allclose(one.logits, parts.logits, atol=10 * TOL, rtol=10 * TOL), name
    # a prompt no longer than the chunk runs in one pass: bitwise chunk 0
    same = eng.prefill(ids, base.replace(chunk=N))
    assert torch.equal(same.logits, one.logits)


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_chunk_must_be_a_row_count(bad):
    with pytest.raises(ValueError, match="chunk="):
        PrefillConfig(chunk=bad)
