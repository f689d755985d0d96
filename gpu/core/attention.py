"""Attention over a cache that mixes filled and exact rows (paper section 2.1): the masked
kernel the late layers use, and the attention probabilities the selectors read (2.4)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

Span = tuple[int, int, int, int]  # query rows lo..hi-1 read key columns a..b-1
# the CPU flash kernel returns its log-sum-exp and reads grouped K/V heads from torch 2.9 on
# (pytorch#157893); before that every block runs under its mask
CPU_MERGE = torch.__version__ >= "2.9"


@dataclass(frozen=True)
class Blocks:
    """How :func:`attend` runs attention under one mask (built once per mask: the late layers
    without a window share theirs). ``whole``: one masked call over the whole cache; else
    ``fast`` spans run as prefix + causal square (CPU), ``masked`` spans under their mask."""

    allowed: torch.Tensor            # (n_q, n_k) bool
    fast: tuple[Span, ...]
    masked: tuple[Span, ...]
    whole: bool


def blocks(allowed: torch.Tensor, device: torch.device, block: int = 512) -> Blocks:
    """The column span of each block of ``block`` queries (first to last allowed column);
    one masked call instead when no block is fast and the spans save less than a quarter."""
    n_q, n_k = allowed.shape
    spans = []
    for lo in range(0, n_q, block):
        cols = torch.nonzero(allowed[lo:lo + block].any(0)).flatten()
        a, b = (int(cols[0]), int(cols[-1]) + 1) if cols.numel() else (0, 1)
        spans.append((lo, min(lo + block, n_q), a, b))
    on = device.type == "cpu" and CPU_MERGE
    fast = tuple(s for s in spans if causal_after_prefix(allowed, s)) if on else ()
    rest = tuple(s for s in spans if s not in fast)
    work = sum((hi - lo) * (b - a) for lo, hi, a, b in rest)
    return Blocks(allowed, fast, rest, not fast and work > 0.75 * n_q * n_k)


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                     scale: float, block: int = 512) -> torch.Tensor:
    """``scaled_dot_product_attention(q, k, v, attn_mask=allowed)`` (GQA), computed over only
    the key columns each block of ``block`` queries may read: the span from its first to its
    last allowed column. A sliding window (paper 2.1, Gemma-3), hidden rows of the no-fill arm
    and causality make that span much shorter than the cache; masked columns add nothing, so
    only the summation order can differ (float rounding). Falls back to one call when the
    spans save less than a quarter of the work.

    A block of consecutive queries that reads every column of its span before the last
    ``hi - lo`` and those causally (the exact tail over a filled prefix) runs on the CPU as
    two unmasked kernels, the prefix and the causal square, merged by their log-sum-exp
    (:func:`prefix_then_causal`): a mask costs the CPU kernel about a third more per score
    and keeps it from skipping the square's upper half."""
    return attend(blocks(allowed, q.device, block), q, k, v, scale)


def attend(plan: Blocks, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           scale: float) -> torch.Tensor:
    """Attention of ``q`` (1, H, n_q, D) over ``k``, ``v`` (1, Hkv, n_k, D) as ``plan`` says."""
    if plan.whole:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=plan.allowed, scale=scale,
                                              enable_gqa=True)
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for lo, hi, a, b in plan.fast:
        out[:, :, lo:hi] = prefix_then_causal(q[:, :, lo:hi], k[:, :, a:b], v[:, :, a:b], scale)
    for lo, hi, a, b in plan.masked:
        out[:, :, lo:hi] = F.scaled_dot_product_attention(
            q[:, :, lo:hi], k[:, :, a:b], v[:, :, a:b], attn_mask=plan.allowed[lo:hi, a:b],
            scale=scale, enable_gqa=True)
    return out


def causal_after_prefix(allowed: torch.Tensor, span: Span) -> bool:
    """Whether queries lo..hi-1 read every column a..b-m-1 and the last m = hi - lo columns
    causally (query i reads up to column b-m+i): the exact tail's pattern."""
    lo, hi, a, b = span
    m = hi - lo
    if b - a < m:
        return False
    block = allowed[lo:hi, a:b]
    square = torch.ones(m, m, dtype=torch.bool, device=allowed.device).tril()
    return bool(block[:, :b - a - m].all()) and torch.equal(block[:, b - a - m:], square)


def prefix_then_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       scale: float) -> torch.Tensor:
    """Attention of queries ``q`` (1, H, m, D) over keys ``k`` (1, Hkv, c + m, D) where every
    query reads the first c keys and the last m causally: the CPU flash kernel on each part
    (no mask; the causal one skips its upper half), merged exactly by the parts' log-sum-exp
    (softmax over the union = the parts' outputs weighted by their shares of the mass)."""
    kernel = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    c = k.shape[2] - q.shape[2]
    out, lse = kernel(q, k[:, :, c:], v[:, :, c:], 0.0, True, scale=scale)
    if c == 0:
        return out
    out_prefix, lse_prefix = kernel(q, k[:, :, :c], v[:, :, :c], 0.0, False, scale=scale)
    share = torch.sigmoid(lse_prefix - lse)[..., None]           # (1, H, m, 1) float32
    return (out.float() + share * (out_prefix.float() - out.float())).to(q.dtype)


def attention_probs(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """Softmax attention probabilities (B, H, T, S) of queries ``q`` (B, H, T, D) over keys
    ``k`` (B, Hkv, S, D) where ``allowed`` (T, S); eager, for the selectors."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)
