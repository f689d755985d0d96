"""The late layers split..L-1 of one prefill or decoding step (paper sections 2.1-2.3).

New rows are positions ``base .. base + n_new - 1``. ``computed`` rows run the whole layer
(hidden ``h``); ``filled`` rows only write their cache entry, from the map's prediction of
``x_split`` (rows indexed like positions - base). Everything a layer needs sits in one frozen
:class:`Late` context; :func:`run` walks the layers, :func:`attention_layer` and
:func:`gdn_layer` are one layer each.
"""
from __future__ import annotations

import numpy as np
import torch
from transformers import DynamicCache

from rfmath.gating import filled_share

from . import attention, batched
from .adapters import Adapter
from .attention import attention_probs, masked_attention
from .cache import exact_entries, read_by_someone
from .config import batched_by_default
from .walk import Late
from .fills import INPUT_FILLS, writes

# A direct cache-entry map (kv) writes keys and values with no norm after it, so a row whose
# x_S is far outside the calibration rows' scale (an attention sink; measured in
# docs/results-quality.md) gets entries far too large that every later query reads; such rows
# (norm above SINK_RATIO x the filled rows' median) run exact instead.
SINK_RATIO = 8.0


def sink_rows(x_split: torch.Tensor, filled) -> np.ndarray:
    """The filled rows (indices into the prompt) whose x_S norm exceeds SINK_RATIO times the
    median norm of the filled rows: the rows a kv fill keeps exact."""
    filled = np.asarray(filled, np.int64)
    if filled.size == 0:
        return filled
    norms = x_split[0, torch.as_tensor(filled, device=x_split.device)].float().norm(dim=-1)
    return filled[(norms > SINK_RATIO * norms.median()).cpu().numpy()]


def run(ctx: Late, h: torch.Tensor) -> torch.Tensor:
    """Layers split..L-1; returns the computed rows' hidden state after the last layer."""
    f = ctx.filling
    on = batched_by_default(ctx.x_split.device) if f.batched is None else f.batched
    ready = (batched.entries(ctx) if on and ctx.writes_filled and f.rescale is None
             and f.splice is None and f.keys in INPUT_FILLS and f.values is None else {})
    for layer in range(ctx.split, ctx.adapter.n_layers):
        if ctx.adapter.layer_info(layer).kind == "gdn":
            h = gdn_layer(ctx, layer, h)
        else:
            h = attention_layer(ctx, layer, h, ready.pop(layer, None))
    return h


def filled_entries(ctx: Late, layer: int, rows: torch.Tensor, h: torch.Tensor, norm, cos, sin
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (1, Hkv, n_rows, D) the filled ``rows`` write into ``layer``: the
    layer's own norm and K/V projections of the prediction, then a rescale or a splice."""
    f = ctx.filling
    kf, vf = source_entries(ctx, f.keys, layer, rows, norm, cos[:, rows], sin[:, rows])
    if f.values is not None:  # per-component sources: values from another fill
        _, vf = source_entries(ctx, f.values, layer, rows, norm, cos[:, rows], sin[:, rows])
    if f.rescale is not None:
        kf, vf = rescaled(ctx, layer, h, norm, cos, sin, kf, vf)
    if f.splice is not None:
        ek, ev = exact_entries(f.exact_cache.layers[layer], rows)
        if f.splice in ("keys", "both"):
            kf = ek
        if f.splice in ("values", "both"):
            vf = ev
    return kf, vf


def source_entries(ctx: Late, source: str, layer: int, rows: torch.Tensor, norm, cos, sin
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values (1, Hkv, n_rows, D) that one fill writes for the filled ``rows``
    (``cos``/``sin`` at those rows): the layer's own norm and K/V projections of the predicted
    input (ridge, anchored) or of x_S (identity; and layer S itself, whose input is x_S), or
    the direct map's projections with only the key norm and RoPE left (kv)."""
    x = ctx.x_split[:, rows]
    if writes(source) == "x_split" or layer == ctx.split:
        return ctx.adapter.keys_values(layer, norm(x), cos, sin)
    predict = ctx.filling.predictor(source)
    if writes(source) == "entries":
        return ctx.adapter.project_entries(layer, predict(layer, x), cos, sin)
    return ctx.adapter.keys_values(layer, norm(predict(layer, x)), cos, sin)


def attention_layer(ctx: Late, layer: int, h: torch.Tensor,
                    ready: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
                    ) -> torch.Tensor:
    """One attention layer: every new row's cache entry, then the computed rows' attention
    over the mixed cache (causal, within the layer's window, over visible rows only).
    ``ready``: the filled rows' (rows, keys, values), written by the batched fill."""
    ad, computed, device = ctx.adapter, ctx.computed, ctx.x_split.device
    info = ad.layer_info(layer)
    n_new = ctx.n_new
    pos_new = torch.arange(ctx.base, ctx.base + n_new, device=device)
    cos, sin = ad.rope(ctx.x_split, pos_new[None], layer)
    norm = ad.input_norm(layer)
    k = ctx.x_split.new_zeros(1, ad.config.num_key_value_heads, n_new, ad.attn(layer).head_dim)
    v = torch.zeros_like(k)                                          # (1, Hkv, n_new, D)
    normed = norm(h)
    k[:, :, computed], v[:, :, computed] = ad.keys_values(layer, normed, cos[:, computed],
                                                          sin[:, computed])
    rows_f = ctx.filled
    if ready is not None:
        rows_f, kf, vf = ready
        k[:, :, rows_f], v[:, :, rows_f] = kf, vf
    else:
        if ctx.writes_filled and ctx.skip_unread and info.window is not None:
            rows_f = read_by_someone(rows_f, computed, n_new, info.window)
        if ctx.writes_filled and rows_f.numel():
            k[:, :, rows_f], v[:, :, rows_f] = filled_entries(ctx, layer, rows_f, h, norm, cos, sin)
    k_all, v_all = (k, v) if ctx.cache is None else ctx.cache.update(k, v, layer)
    n_keys = k_all.shape[2]
    plan = ctx.masks.get((info.window, n_keys))
    if plan is None:
        plan = ctx.masks[info.window, n_keys] = attention.blocks(
            allowed_keys(ctx, pos_new[computed], n_keys, info.window, rows_f), device)
    q, gate = ad.queries_gated(layer, normed, cos[:, computed], sin[:, computed])
    if ctx.received is not None:
        probs = attention_probs(q, k_all, plan.allowed, ad.scaling(layer))
        ctx.received[-n_keys:] += probs.sum(dim=(0, 1, 2)).float()
    out = attention.attend(plan, q, k_all, v_all, ad.scaling(layer))  # (1, H, n_c, D)
    out = out.transpose(1, 2).reshape(1, q.shape[2], -1)               # (1, n_c, H*D)
    return ad.finish(layer, h, out) if gate is None else ad.finish(layer, h, out, gate)


def allowed_keys(ctx: Late, q_pos: torch.Tensor, n_keys: int, window: int | None,
                 rows_f: torch.Tensor) -> torch.Tensor:
    """(n_c, n_keys) which cache columns each computed row reads: causal, within ``window``,
    over the visible older rows, the computed rows and the filled rows ``rows_f`` written."""
    device = q_pos.device
    key_pos = torch.arange(ctx.base + ctx.n_new - n_keys, ctx.base + ctx.n_new, device=device)
    allowed = key_pos[None, :] <= q_pos[:, None]
    if window is not None:
        allowed &= key_pos[None, :] > q_pos[:, None] - window
    seen = torch.zeros(n_keys, dtype=torch.bool, device=device)
    n_old = n_keys - ctx.n_new
    seen[:n_old] = True if ctx.visible is None else ctx.visible[ctx.visible.numel() - n_old:]
    seen[n_old + ctx.computed] = True
    if ctx.writes_filled:
        seen[n_old + rows_f] = True
    return allowed & seen[None, :]


def gdn_layer(ctx: Late, layer: int, h: torch.Tensor) -> torch.Tensor:
    """One Gated DeltaNet layer (paper 2.1, 2.3): the layer's own mixer over the rows present,
    in order (filled rows from their prediction), then residual and MLP for the computed rows;
    with a correction, rho * DeltaM is added to the state once, at the end of the prefix."""
    ad, computed, filled, cache = ctx.adapter, ctx.computed, ctx.filled, ctx.cache
    if not ctx.writes_filled or cache is None:
        rows, u = computed, h
    else:
        rows = torch.cat([computed, filled]).sort().values
        u = h.new_empty(1, rows.numel(), h.shape[-1])
        u[:, torch.searchsorted(rows, computed)] = h
        u[:, torch.searchsorted(rows, filled)] = ctx.prediction(layer, filled)
    normed = ad.input_norm(layer)(u)
    is_filled = torch.ones(rows.numel(), dtype=torch.bool, device=rows.device)
    is_filled[torch.searchsorted(rows, computed)] = False
    cut = int((rows < ctx.tail_start).sum())  # rows present before the end of the prefix
    dM = ctx.filling.correction.get(layer) if ctx.filling.correction is not None else None
    if dM is None or cache is None or not bool(is_filled[:cut].any()):
        mixed = ad.mix(layer, normed, cache)
    else:
        parts = [ad.mix(layer, normed[:, :cut], cache)]
        correct_state(ctx, layer, normed[:, :cut], is_filled[:cut], dM)
        if cut < rows.numel():
            parts.append(ad.mix(layer, normed[:, cut:], cache))
        mixed = torch.cat(parts, dim=1)
    if rows is not computed:
        mixed = mixed[:, ~is_filled]
    return ad.finish_mixed(layer, h, mixed)


def correct_state(ctx: Late, layer: int, normed: torch.Tensor, is_filled: torch.Tensor,
                  dM: torch.Tensor) -> None:
    """Add rho * DeltaM to ``layer``'s recurrent state (paper 2.3; Appendix H): rho is the
    filled rows' share of the state weight w_j = prod_{k>j} g_k at the end of the prefix,
    per value head, from the gates this layer computes over the prefix rows ``normed``."""
    log_g = ctx.adapter.gdn_log_gates(layer, normed)[0].T.double()  # (H_v, cut)
    gates = log_g.exp().clamp_min(np.finfo(np.float64).tiny).cpu().numpy()
    rho = np.asarray(filled_share(gates, is_filled.cpu().numpy()), np.float64)
    state = ctx.cache.layers[layer].recurrent_states[0]            # (1, H_v, d_k, d_v)
    rho_t = torch.as_tensor(rho, device=state.device, dtype=torch.float32)
    state.add_((rho_t[:, None, None] * dM.to(state.device, torch.float32))[None].to(state.dtype))
    if ctx.stats is not None:
        ctx.stats.setdefault("rho", {})[layer] = rho.tolist()


def rescaled(ctx: Late, layer: int, h: torch.Tensor, norm, cos, sin, kf: torch.Tensor,
             vf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Value/key rescale (paper 2.3): per KV head, the ratio of the exact to the predicted
    norm averaged over the first ``rescale_rows`` tail rows, applied to the filled entries."""
    ad, computed = ctx.adapter, ctx.computed
    f = ctx.filling
    tail_rows = computed[computed >= ctx.tail_start][:f.rescale_rows]
    take = torch.searchsorted(computed, tail_rows)
    k_ex, v_ex = ad.keys_values(layer, norm(h[:, take]), cos[:, tail_rows], sin[:, tail_rows])
    k_pr, _ = source_entries(ctx, f.keys, layer, tail_rows, norm, cos[:, tail_rows],
                             sin[:, tail_rows])
    _, v_pr = source_entries(ctx, f.values or f.keys, layer, tail_rows, norm,
                             cos[:, tail_rows], sin[:, tail_rows])
    if f.rescale == "values":
        scale = (v_ex.norm(dim=-1) / v_pr.norm(dim=-1).clamp_min(1e-12)).mean(-1)
        return kf, vf * scale[..., None, None]
    scale = (k_ex.norm(dim=-1) / k_pr.norm(dim=-1).clamp_min(1e-12)).mean(-1)
    return kf * scale[..., None, None], vf


@torch.inference_mode()
def repair_rows(adapter: Adapter, split: int, x_rows: torch.Tensor, rows: torch.Tensor,
                cache: DynamicCache) -> None:
    """Make filled prefix ``rows`` exact in a finished cache without a new prefill (the
    re-selection refinement of paper Appendix D): the rows walk the late layers from their
    x_S ``x_rows`` (1, m, C), each attending over the cache's entries at positions up to its
    own, and their entries are overwritten in place. Every earlier row's entry is what the
    prefill wrote, so each repaired entry is the one a prefill with these rows exact would
    have written; rows after them keep entries computed over the filled ones (the cost of
    not prefilling again). Attention layers without a sliding window only."""
    rows = rows.to(x_rows.device)
    h = x_rows
    for layer in range(split, adapter.n_layers):
        info = adapter.layer_info(layer)
        if info.kind != "attention":
            raise ValueError(f"rows cannot be made exact in place on {info.kind} layer {layer} "
                             "(a Gated DeltaNet state or a sliding window's dropped columns): "
                             "prefill again with these rows exact instead")
        cos, sin = adapter.rope(h, rows[None], layer)
        normed = adapter.input_norm(layer)(h)
        k, v = adapter.keys_values(layer, normed, cos, sin)             # (1, Hkv, m, D)
        entry = cache.layers[layer]
        entry.keys[:, :, rows], entry.values[:, :, rows] = k, v
        key_pos = torch.arange(entry.keys.shape[2], device=rows.device)
        allowed = key_pos[None, :] <= rows[:, None]                    # (m, S)
        q, gate = adapter.queries_gated(layer, normed, cos, sin)
        out = masked_attention(q, entry.keys, entry.values, allowed, adapter.scaling(layer))
        out = out.transpose(1, 2).reshape(1, rows.numel(), -1)         # (1, m, H*D)
        h = adapter.finish(layer, h, out) if gate is None else adapter.finish(layer, h, out, gate)


def every_row_exact(adapter: Adapter, split: int, x_split: torch.Tensor,
                    cache: DynamicCache | None) -> torch.Tensor:
    """The late walk with every row of ``x_split`` (1, n, C) computed and none filled: the
    engine's own late path, which must match the stock forward (the equivalence tests)."""
    return run(Late.step(adapter, split, x_split, cache, base=0), x_split)
