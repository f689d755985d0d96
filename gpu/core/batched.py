"""The batched fill (paper 2.2): the filled rows' cache entries of every late
attention layer from one pass over x_S, before the layers are walked in order.

A filled row's entry in layer l depends only on x_S: the prediction A_l x_S + b_l, then the
layer's own input norm, K/V projections and RoPE at the row's position. So the late attention
layers that share a window and a shape are stacked: one matrix product predicts all their
inputs (the maps' stacked weights, gpu.maps.files.MapSet.predict_stacked) and one vmapped
writer (torch.func over the layers' stacked norm and K/V weights) turns them into keys and
values. Rows go in chunks of at most ``ELEMENTS`` predicted values (16 MiB in fp32 on the
CPU, 256 MiB on an accelerator, where fewer larger products pay) to bound the stacked
prediction's memory. The walk (gpu.core.late.run) then only writes the computed rows' entries
of each layer.
"""
from __future__ import annotations

import weakref

import torch
from torch.func import functional_call, vmap

from .adapters import Adapter
from .cache import read_by_someone
from .fills import writes
from .walk import Late

ELEMENTS = {"cpu": 2 ** 22}  # predicted values per stacked pass, (layers, rows, d), by device
ELEMENTS_ACCELERATOR = 2 ** 26
Entries = dict[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]  # layer -> (rows, k, v)

# stacked writer weights per model, rebuilt when any weight changes (its version counter)
_STACKS: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def groups(adapter: Adapter, split: int) -> list[tuple[int | None, tuple[int, ...]]]:
    """The late attention layers (split..L-1) grouped by window and writer shape, in order:
    [(window, layers)]; Gated DeltaNet layers have no key/value entry and are left out."""
    out: dict[tuple, list[int]] = {}
    for layer in range(split, adapter.n_layers):
        info = adapter.layer_info(layer)
        if info.kind == "gdn":
            continue
        shape = tuple((name, tuple(p.shape), p.dtype)
                      for name, p in adapter.writer(layer).named_parameters())
        out.setdefault((info.window, shape), []).append(layer)
    return [(key[0], tuple(layers)) for key, layers in out.items()]


@torch.inference_mode()
def entries(ctx: Late, elements: int | None = None) -> Entries:
    """Every late attention layer's filled entries {layer: (rows, k, v)}, k and v of shape
    (1, Hkv, len(rows), D); in a sliding-window layer only the rows someone can read
    (``ctx.skip_unread``). Equal to gpu.core.late.filled_entries layer by layer up to float
    rounding (the same modules, batched)."""
    ad, out = ctx.adapter, {}
    device = ctx.x_split.device
    elements = elements or ELEMENTS.get(device.type, ELEMENTS_ACCELERATOR)
    positions = torch.arange(ctx.base, ctx.base + ctx.n_new, device=device)
    for window, layers in groups(ad, ctx.split):
        rows = ctx.filled
        if window is not None and ctx.skip_unread:
            rows = read_by_someone(rows, ctx.computed, ctx.n_new, window)
        if rows.numel() == 0:
            continue
        params = _stacked(ad, layers)
        template = ad.writer(layers[0])
        run = vmap(lambda p, x, c, s: functional_call(template, p, (x, c, s)))
        chunk = max(16, elements // (len(layers) * ctx.x_split.shape[-1]))
        ks: list[torch.Tensor] = []   # one buffer per layer: the walk frees each as it goes
        vs: list[torch.Tensor] = []
        for lo in range(0, rows.numel(), chunk):
            r = rows[lo:lo + chunk]
            cs = [ad.rope(ctx.x_split, positions[r][None], l) for l in layers]
            cos = torch.stack([c for c, _ in cs])                 # (layers, 1, m, rot)
            sin = torch.stack([s for _, s in cs])
            k, v = run(params, predictions(ctx, layers, r), cos, sin)  # (layers, 1, Hkv, m, D)
            if not ks:
                ks = [k.new_empty(*k.shape[1:-2], rows.numel(), k.shape[-1]) for _ in layers]
                vs = [v.new_empty(*v.shape[1:-2], rows.numel(), v.shape[-1]) for _ in layers]
            for i in range(len(layers)):
                ks[i][..., lo:lo + r.numel(), :] = k[i]
                vs[i][..., lo:lo + r.numel(), :] = v[i]
        out.update({l: (rows, ks[i], vs[i]) for i, l in enumerate(layers)})
    return out


def predictions(ctx: Late, layers: tuple[int, ...], rows: torch.Tensor) -> torch.Tensor:
    """Predicted inputs (len(layers), 1, m, C) of ``layers`` for x_S rows ``rows``: x_S itself
    for the identity fill and for layer S, one stacked product for the rest."""
    x = ctx.x_split[:, rows]
    mapped = tuple(l for l in layers if l != ctx.split)
    f = ctx.filling
    if writes(f.keys) == "x_split" or not mapped:
        return x.expand(len(layers), *x.shape)
    pred = (f.predict_many(mapped, x) if f.predict_many is not None
            else torch.stack([f.predictor(f.keys)(l, x) for l in mapped]))
    return pred if len(mapped) == len(layers) else torch.cat([x[None], pred])


def _stacked(adapter: Adapter, layers: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The writers' weights of ``layers`` stacked (cached per model while no weight changes;
    weights made under inference mode carry no version counter and are stacked every time)."""
    named = [dict(adapter.writer(l).named_parameters()) for l in layers]
    weights = [p for n in named for p in n.values()]

    def stack() -> dict[str, torch.Tensor]:
        return {k: torch.stack([n[k].detach() for n in named]) for k in named[0]}

    if any(p.is_inference() for p in weights):  # no version counter: never cached
        return stack()
    version = tuple((p.data_ptr(), p._version) for p in weights)
    cache = _STACKS.setdefault(adapter.model, {})
    hit = cache.get(layers)
    if hit is None or hit[0] != version:
        cache[layers] = hit = (version, stack())
    return hit[1]
