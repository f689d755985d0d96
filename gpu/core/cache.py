"""Cache helpers of the engine: copies of cache layers as the stock forward leaves them, a
cache that keeps every position, exact entries read back for splices, which filled rows a
sliding window lets anyone read, and the hook that collects layer inputs."""
from __future__ import annotations

import copy
from contextlib import contextmanager

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicSlidingWindowLayer

from .adapters import Adapter


def layer_input(args, kwargs) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextmanager
def layer_inputs(adapter: Adapter, rows: dict[int, slice]):
    """Collect the input of layer i (rows ``rows[i]``) into the yielded dict while a forward
    runs inside the block."""
    got: dict[int, torch.Tensor] = {}
    handles = []
    for i, r in rows.items():
        def grab(module, args, kwargs, i=i, r=r):
            got[i] = layer_input(args, kwargs)[:, r]
        handles.append(adapter.layers[i].register_forward_pre_hook(grab, with_kwargs=True))
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def as_stock(layer):
    """A copy of a cache layer as a stock forward leaves it (a sliding-window layer that kept
    every position keeps only its last ``window - 1`` columns again)."""
    if not getattr(layer, "record_past", False):
        return copy.deepcopy(layer)
    out = copy.copy(layer)
    w = layer.sliding_window - 1
    out.keys, out.values = layer.keys[:, :, -w:].clone(), layer.values[:, :, -w:].clone()
    out.record_past = False
    return out


def full_cache(config) -> DynamicCache:
    """An empty cache whose sliding-window layers keep every position (decoding from it
    still reads only the window): the exact arm's cache when a splice reads from it."""
    cache = DynamicCache(config=config)
    for layer in cache.layers:
        if isinstance(layer, DynamicSlidingWindowLayer):
            layer.activate_past_recording()
    return cache


def exact_entries(layer, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of positions ``rows`` from an exact cache layer (which may have been
    fed further tokens since; a sliding-window layer may keep only its last columns)."""
    held = layer.keys.shape[2]
    first = getattr(layer, "cumulative_length", held) - held  # position of column 0
    if int(rows.min()) < first:
        raise ValueError(
            f"the exact cache keeps only positions from {first} on in a sliding-window layer "
            f"but the splice needs row {int(rows.min())}: prefill the exact arm into "
            "gpu.core.cache.full_cache(config), which keeps every position")
    return layer.keys[:, :, rows - first], layer.values[:, :, rows - first]


def read_by_someone(filled: torch.Tensor, computed: torch.Tensor, n: int, window: int):
    """Filled rows that some later query can read in a sliding-window layer: a computed row or
    a decoding step (positions >= n) within ``window`` after them."""
    nxt = torch.cat([computed, torch.tensor([n], device=computed.device)])
    nxt = nxt.sort().values
    idx = torch.searchsorted(nxt, filled)  # first computed/decode position >= filled row
    return filled[(nxt[idx] - filled) < window]


def outside_inference(cache: DynamicCache) -> DynamicCache:
    """``cache`` with every tensor a layer holds cloned outside inference mode, so stock code
    that updates states in place (a Gated DeltaNet layer during ``generate``) may do so. The
    engine runs under ``torch.inference_mode``, whose tensors refuse in-place updates later."""
    with torch.inference_mode(False):
        for layer in cache.layers:
            for name, value in vars(layer).items():
                setattr(layer, name, _cloned(value))
    return cache


def _cloned(value):
    """Tensors (also inside lists, tuples and dicts: GDN states) cloned, the rest as is."""
    if isinstance(value, torch.Tensor):
        return value.clone() if value.is_inference() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cloned(v) for v in value)
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    return value
