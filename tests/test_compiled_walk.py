"""The compiled late walk (issue 21, gpu.core.compiled) against the eager walk it speeds up,
on a tiny Llama (attention layers) and a tiny Qwen3-Next (gated attention output and Gated
DeltaNet layers): the same cache entries and logits within 1e-5 (fp32, inductor on the CPU),
at two prompt lengths (dynamic shapes: no graph per length), through the configuration's
``compile`` flag. Oracle: the eager walk (Engine.prefill without compile), which the equivalence
tests tie to the stock forward."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from gpu.core import compiled
from gpu.core.config import PrefillConfig
from gpu.core.engine import Engine
from gpu_fixtures import DenseMaps, random_maps
from test_batched_fill import _entries
from test_press import S, _shape, family_model

pytestmark = pytest.mark.slow
TOL = 1e-5


@pytest.mark.parametrize("family", ["llama", "qwen3_next"])
def test_compiled_walk_equals_the_eager_walk(family, monkeypatch):
    torch.manual_seed(0)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    model = family_model(family)
    L, d, vocab = _shape(model)
    eng = Engine(model, DenseMaps(S, random_maps(S, n_layers=L, d=d, seed=3)))
    calls = []
    real = compiled.compiled
    monkeypatch.setattr("gpu.core.engine.compiled_adapter",
                        lambda ad: calls.append(ad) or real(ad))
    try:
        for n in (40, 57):  # the second length reuses the graphs (dynamic shapes)
            ids = torch.randint(3, vocab - 2, (1, n), generator=torch.Generator().manual_seed(n))
            cfg = PrefillConfig(split=S, tail=8, rows="none", fill="ridge")
            eager = eng.prefill(ids, cfg)
            fast = eng.prefill(ids, cfg.replace(compile=True))
            assert calls and calls.pop() is eng.adapter
            assert torch.allclose(fast.logits, eager.logits, atol=TOL, rtol=TOL)
            for layer in range(S, L):
                for x, y in zip(_entries(fast.cache, layer), _entries(eager.cache, layer),
                                strict=True):
                    scale = float(y.abs().max()) or 1.0
                    assert float((x - y).abs().max()) <= TOL * scale, (family, n, layer)
    finally:
        torch.set_num_threads(before)
    twin = compiled.compiled(eng.adapter)
    assert twin is compiled.compiled(eng.adapter)  # built once per adapter: graphs kept
    assert twin.n_layers == eng.adapter.n_layers and twin.layers is eng.adapter.layers
    assert np.isfinite(fast.logits.numpy()).all()
