"""The exact rows of a RidgeFill step inside vLLM (paper sections 2.1-2.2, served): one vLLM
decoder layer on those rows only, over vLLM's paged cache, through its CPU attention backend
(CPU_ATTN) with metadata built for them the way its metadata builder builds it; each run of
consecutive exact rows is an attention sequence of its own (gpu.serving.rows).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch
from vllm import _custom_ops as ops
from vllm import envs
from vllm.forward_context import get_forward_context

from . import rows as step_rows


def exact_rows(layer, h, residual, positions, attn_layer, kv_cache, slots, meta):
    """One vLLM decoder layer on the exact rows only: their entries into the paged cache,
    their queries over it (``meta``: :func:`exact_metadata`), the output projection, MLP."""
    attn, impl = layer.self_attn, attn_layer.impl
    heads, kv_heads, d = attn.num_heads, attn.num_kv_heads, attn.head_dim
    hn, residual = layer.input_layernorm(h, residual)
    qkv, _ = attn.qkv_proj(hn)
    q, k, v = qkv.split([attn.q_size, attn.kv_size, attn.kv_size], dim=-1)
    q, k = attn.rotary_emb(positions, q, k)
    k, v = k.reshape(-1, kv_heads, d), v.reshape(-1, kv_heads, d)
    impl.do_kv_cache_update(attn_layer, k, v, kv_cache, slots)
    out = q.new_empty(q.shape[0], heads, d)
    impl.forward(attn_layer, q.reshape(-1, heads, d), k, v, kv_cache, meta, output=out)
    o, _ = attn.o_proj(out.view(q.shape[0], -1))
    h, residual = layer.post_attention_layernorm(o, residual)
    return layer.mlp(h), residual


def step_metadata():
    """The CPU attention metadata of this step (any layer's: one KV cache group), or None in
    vLLM's dummy and profiling runs."""
    try:
        raw = get_forward_context().attn_metadata
    except AssertionError:
        return None
    if isinstance(raw, list):
        raw = raw[0]
    if isinstance(raw, dict):
        raw = next(iter(raw.values()), None)
    return raw if raw is not None and hasattr(raw, "scheduler_metadata") else None


def slots_of(meta, kv_cache, slots, owner, pos, virtual, order) -> torch.Tensor:
    """The cache slot of every row in ``order`` (the step's tokens, then the rows of earlier
    steps computed again, whose slots come from their request's block table: block id times
    the block size plus the offset, checked against vLLM's own slots of the step's tokens)."""
    if not virtual.positions.size:
        return slots
    size = kv_cache.size(2)
    table = meta.block_table

    def of(o, p):
        return table[torch.as_tensor(o), torch.as_tensor(p // size)].to(slots.dtype) * size + \
            torch.as_tensor(p % size, dtype=slots.dtype)

    n = pos.size
    if not torch.equal(of(owner, pos), slots[:n]):
        raise RuntimeError("vLLM's slot mapping is not block_table * block_size + offset in "
                           "this release: the tiered prefill cannot place a chunked prompt's "
                           "earlier rows; raise --max-num-batched-tokens to the longest prompt")
    return torch.cat([slots[:n], of(virtual.owner, virtual.positions)])[torch.as_tensor(order)]


def exact_metadata(meta, plan: step_rows.StepRows, attn_layer, dtype: torch.dtype,
                    slots: torch.Tensor):
    """``meta`` (the step's CPU attention metadata) for the exact rows only: one attention
    sequence per run of them (gpu.serving.rows), built as vLLM's metadata builder builds it;
    ``slots``: the cache slot of every row the plan indexes."""
    itype = meta.query_start_loc.dtype
    qsl = torch.as_tensor(plan.starts, dtype=itype)
    seq_lens = torch.as_tensor(plan.seq_lens, dtype=meta.seq_lens.dtype)
    impl = attn_layer.impl
    scheduler = ops.cpu_attn_get_scheduler_metadata(
        num_reqs=int(seq_lens.numel()), num_heads=impl.num_heads, num_kv_heads=impl.num_kv_heads,
        head_dim=impl.head_size, seq_lens=seq_lens, dtype=dtype, query_start_loc=qsl,
        causal=True, sliding_window_size=impl.sliding_window, isa=attn_layer.isa,
        enable_kv_split=envs.VLLM_CPU_ATTN_SPLIT_KV, kv_cache_dtype=impl.kv_cache_dtype)
    return dataclasses.replace(
        meta, num_actual_tokens=int(plan.computed.size),
        max_query_len=int(np.diff(plan.starts).max()), query_start_loc=qsl,
        max_seq_len=int(plan.seq_lens.max()), seq_lens=seq_lens,
        block_table=meta.block_table[torch.as_tensor(plan.owner)],
        slot_mapping=slots[torch.as_tensor(plan.computed)],
        scheduler_metadata=scheduler)
