"""The late walk's dense per-layer work under ``torch.compile`` (paper 2.1).

The computed rows (the tail and the exact rows) walk the late layers one at a time; on an
accelerator each layer is a string of small kernels: input norm, Q/K/V projections, key/query
norms, RoPE, output projection, residual, MLP. :func:`compiled` gives the adapter whose
``keys_values``, ``queries_gated``, ``finish`` and ``finish_mixed`` (the Gated DeltaNet
layer's residual and MLP) are compiled, so each fuses into a few kernels. The attention over
the mixed cache (its span logic reads the mask) and the Gated DeltaNet mixers stay eager.

Shapes are dynamic (one graph per layer and function serves every prompt length); the layer
index is a Python int, so each late layer compiles once: the first prompt pays that, and the
recompile limit is raised to the late layers' count while the walk runs. Opt-in through
``PrefillConfig.compile`` (CLI ``--compile``); the result equals the eager walk up to float
rounding (tests/test_compiled_walk.py).
"""
from __future__ import annotations

import weakref

import torch
import torch._dynamo

from .adapters import Adapter

COMPILED = ("keys_values", "queries_gated", "finish", "finish_mixed")
_CACHE: "weakref.WeakKeyDictionary[Adapter, CompiledAdapter]" = weakref.WeakKeyDictionary()


class CompiledAdapter:
    """``adapter`` with :data:`COMPILED` methods under ``torch.compile``; every other attribute
    is the adapter's own."""

    def __init__(self, adapter: Adapter):
        self._adapter = adapter
        self._limit = max(torch._dynamo.config.recompile_limit, 2 * adapter.n_layers)
        for name in COMPILED:
            setattr(self, name, self._wrap(torch.compile(getattr(adapter, name), dynamic=True)))

    def _wrap(self, fn):
        def call(*args, **kwargs):
            with torch._dynamo.config.patch(recompile_limit=self._limit):
                return fn(*args, **kwargs)
        return call

    def __getattr__(self, name: str):
        return getattr(self._adapter, name)


def compiled(adapter: Adapter) -> CompiledAdapter:
    """The compiled twin of ``adapter``, built once per adapter (its graphs are kept)."""
    twin = _CACHE.get(adapter)
    if twin is None:
        twin = _CACHE[adapter] = CompiledAdapter(adapter)
    return twin
