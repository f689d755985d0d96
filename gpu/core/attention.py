"""Attention over a cache that mixes filled and exact rows (paper section 2.1): the masked
kernel the late layers use, and the attention probabilities the selectors read (2.4)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def masked_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor,
                     scale: float, block: int = 512) -> torch.Tensor:
    """``scaled_dot_product_attention(q, k, v, attn_mask=allowed)`` (GQA), computed over only
    the key columns each block of ``block`` queries may read: the span from its first to its
    last allowed column. A sliding window (paper 2.1, Gemma-3), hidden rows of the no-fill arm
    and causality make that span much shorter than the cache; masked columns add nothing, so
    only the summation order can differ (float rounding). Falls back to one call when the
    spans save less than a quarter of the work."""
    n_q, n_k = allowed.shape
    spans = []
    for lo in range(0, n_q, block):
        cols = torch.nonzero(allowed[lo:lo + block].any(0)).flatten()
        a, b = (int(cols[0]), int(cols[-1]) + 1) if cols.numel() else (0, 1)
        spans.append((lo, min(lo + block, n_q), a, b))
    work = sum((hi - lo) * (b - a) for lo, hi, a, b in spans)
    if work > 0.75 * n_q * n_k:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale,
                                              enable_gqa=True)
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for lo, hi, a, b in spans:
        out[:, :, lo:hi] = F.scaled_dot_product_attention(
            q[:, :, lo:hi], k[:, :, a:b], v[:, :, a:b], attn_mask=allowed[lo:hi, a:b],
            scale=scale, enable_gqa=True)
    return out


def attention_probs(q: torch.Tensor, k: torch.Tensor, allowed: torch.Tensor,
                    scale: float) -> torch.Tensor:
    """Softmax attention probabilities (B, H, T, S) of queries ``q`` (B, H, T, D) over keys
    ``k`` (B, Hkv, S, D) where ``allowed`` (T, S); eager, for the selectors."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)
