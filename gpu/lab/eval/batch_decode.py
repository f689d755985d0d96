"""Greedy decoding of several prefills of one prompt in one batch (the evaluation harness).

Every arm of a needle sample leaves an ordinary cache of the same length (paper 2.1: filled
rows keep their cache entry), so the caches stack along the batch dimension and one decoding
step answers every arm. On a CPU a step of a small model is bound by reading the weights;
a batch reads them once for all arms (smollm2-135m at 4K tokens: 75 ms per step alone, 21 ms
per arm in a batch of 17). The caches live in preallocated buffers, so a step writes one
column instead of copying the cache (``DynamicLayer`` concatenates).

Layers below every arm's split hold the same prompt columns in every slot; the batch keeps
one copy of those and each slot's decoded columns apart, and attends over both in one
softmax, so a step reads the shared columns once (about a third of smollm2's cache at its
3/8 split).

The no-fill arm's filled rows have no late-layer entry (paper 3: they stay hidden from the
late layers). Its slot joins the batch all the same: while the batch decodes, the model's
``sdpa`` attention is wrapped so that in each late layer that slot's row is recomputed over
its visible columns only (one row of attention per layer; the rest of the batch is unchanged).

Each row stops at an end token or when ``stop`` says so; finished rows leave the batch.
``Batch.feed`` feeds one given token sequence to every slot instead (teacher forcing). The
arithmetic of a batched step is not the single-row order, so logits agree with
``Engine.decode`` to rounding (tests/test_batch_decode.py), not bitwise.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from ...core.engine import Prefill


class _Slots(DynamicLayer):
    """A full-attention cache layer in a preallocated buffer (batch, heads, capacity, dim)."""

    def __init__(self, first: DynamicLayer, batch: int, extra: int):
        super().__init__()
        self._alloc(first, batch, extra)

    def _alloc(self, first: DynamicLayer, batch: int, extra: int) -> None:
        k = first.keys
        self.length = self._initial(first)
        shape = (batch, k.shape[1], self.length + extra, k.shape[3])
        self.kbuf, self.vbuf = k.new_empty(shape), first.values.new_empty(shape)
        self.device, self.is_initialized = k.device, True
        self._views()

    def _initial(self, layer) -> int:
        return layer.keys.shape[2]

    def put(self, slot: int, layer: DynamicLayer) -> None:
        k = layer.keys
        if k.shape[2] < self.length or k.shape[1] != self.kbuf.shape[1] or (
                not self.is_sliding and k.shape[2] != self.length):
            raise ValueError(f"cache layer of shape {tuple(k.shape)} does not stack with "
                             f"length {self.length}: batch only prefills of one prompt")
        self.kbuf[slot, :, : self.length] = k[0, :, k.shape[2] - self.length:]
        self.vbuf[slot, :, : self.length] = layer.values[0, :, k.shape[2] - self.length:]

    def keep(self, rows: torch.Tensor) -> None:
        self.kbuf, self.vbuf = self.kbuf[rows], self.vbuf[rows]
        self._views()

    def _views(self) -> None:
        self.keys = self.kbuf[:, :, : self.length]
        self.values = self.vbuf[:, :, : self.length]

    def columns(self) -> tuple[int, int]:
        """Positions ``[first, end)`` of the columns the last update returned."""
        return 0, self.length

    def _write(self, key_states: torch.Tensor, value_states: torch.Tensor) -> int:
        m = key_states.shape[-2]
        self.kbuf[:, :, self.length: self.length + m] = key_states
        self.vbuf[:, :, self.length: self.length + m] = value_states
        self.length += m
        self._views()
        return m

    def update(self, key_states, value_states, *args, **kwargs):
        self._write(key_states, value_states)
        return self.keys, self.values


class _SlidingSlots(_Slots, DynamicSlidingWindowLayer):
    """A sliding-window layer: the buffer keeps every column; a step attends to the last
    ``window - 1`` cached columns and the new ones, as ``DynamicSlidingWindowLayer`` does."""

    def __init__(self, first: DynamicSlidingWindowLayer, batch: int, extra: int):
        DynamicSlidingWindowLayer.__init__(self, first.sliding_window)
        self.cumulative_length = first.cumulative_length
        self._alloc(first, batch, extra)
        self._sliding_window_tensor = self._sliding_window_tensor.to(self.device)

    def _initial(self, layer) -> int:
        return min(self.cumulative_length, self.sliding_window - 1)  # what decoding reads

    def put(self, slot: int, layer: DynamicSlidingWindowLayer) -> None:
        if layer.cumulative_length != self.cumulative_length:
            raise ValueError("sliding-window layers of different lengths do not stack: "
                             "batch only prefills of one prompt")
        super().put(slot, layer)

    def update(self, key_states, value_states, *args, **kwargs):
        m = self._write(key_states, value_states)
        self.cumulative_length += m
        self.start = max(self.length - m - (self.sliding_window - 1), 0)
        return self.kbuf[:, :, self.start: self.length], self.vbuf[:, :, self.start: self.length]

    def columns(self) -> tuple[int, int]:
        shift = self.cumulative_length - self.length  # positions before the buffer's column 0
        return self.start + shift, self.cumulative_length

    def get_seq_length(self) -> int:
        return self.cumulative_length


class _Shared(_Slots):
    """A full-attention layer whose prompt columns are the same in every slot (the layers
    below every arm's split): one copy of them (``pk``, ``pv``), and the slot buffers hold
    decoded tokens only. ``update`` returns the decoded columns; the wrapped attention adds
    the shared ones."""

    def __init__(self, slots: _Slots, extra: int):
        DynamicLayer.__init__(self)
        self.n = slots.length
        self.pk, self.pv = slots.kbuf[:1, :, : self.n].clone(), slots.vbuf[:1, :, : self.n].clone()
        b, h, _, d = slots.kbuf.shape
        self.kbuf, self.vbuf = slots.kbuf.new_empty(b, h, extra, d), slots.vbuf.new_empty(b, h, extra, d)
        self.length = 0
        self.device, self.is_initialized = slots.device, True
        self._views()

    def get_seq_length(self) -> int:
        return self.n + self.length

    def attend(self, query, key, value, attention_mask, scaling) -> torch.Tensor:
        """Attention of one new token per slot over the shared prompt columns and the slot's
        own decoded ones (a softmax over both); returns (batch, 1, heads, dim)."""
        b, heads, q, d = query.shape
        kv = self.pk.shape[1]
        qg = query.reshape(b, kv, heads // kv * q, d) * scaling
        s_pre = torch.matmul(qg.transpose(0, 1).reshape(kv, -1, d), self.pk[0].transpose(1, 2))
        s_pre = s_pre.reshape(kv, b, -1, self.n).transpose(0, 1)   # (b, kv, g, n)
        s_new = torch.matmul(qg, key.transpose(-1, -2))             # (b, kv, g, decoded)
        if attention_mask is not None:
            mask = attention_mask[:, :1, -1:, :]
            add = torch.zeros_like(mask, dtype=s_pre.dtype).masked_fill(~mask, float("-inf")) \
                if mask.dtype == torch.bool else mask.to(s_pre.dtype)
            s_pre, s_new = s_pre + add[..., : self.n], s_new + add[..., self.n:]
        top = torch.maximum(s_pre.amax(-1, keepdim=True), s_new.amax(-1, keepdim=True))
        p_pre, p_new = torch.exp(s_pre - top), torch.exp(s_new - top)
        z = p_pre.sum(-1, keepdim=True) + p_new.sum(-1, keepdim=True)
        o_pre = torch.matmul(p_pre.transpose(0, 1).reshape(kv, -1, self.n), self.pv[0])
        o = o_pre.reshape(kv, b, -1, d).transpose(0, 1) + torch.matmul(p_new, value)
        return (o / z).reshape(b, heads, q, d).transpose(1, 2)


def _plain(pre: Prefill) -> bool:
    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer) for layer in pre.cache.layers)


class Batch:
    """Up to ``capacity`` prefills of one prompt, copied into one batched cache as they
    arrive (each prefill's own cache may then be dropped), decoded greedily together."""

    def __init__(self, model, capacity: int, max_new_tokens: int):
        self.model, self.capacity, self.max_new_tokens = model, capacity, max_new_tokens
        self.cache: DynamicCache | None = None
        self.logits: list[torch.Tensor] = []
        self.hidden: dict[int, tuple[int, torch.Tensor]] = {}  # slot -> (split, visible rows)
        self._active: list[int] = []

    def __len__(self) -> int:
        return len(self.logits)

    def accepts(self, pre: Prefill) -> bool:
        """Whether ``pre`` can join: a plain attention cache (not a hybrid's recurrent state),
        and hidden rows (the no-fill arm) only where the model attends through ``sdpa``."""
        return _plain(pre) and (pre.visible is None or
                                self.model.config._attn_implementation == "sdpa")

    def add(self, pre: Prefill) -> int:
        """Copy ``pre``'s cache into the next slot; returns the slot."""
        if not self.accepts(pre):
            raise ValueError("this prefill does not batch (see Batch.accepts): decode it alone "
                             "with Engine.decode")
        if len(self) == self.capacity:
            raise ValueError(f"the batch holds {self.capacity} prefills; make a larger Batch")
        if self.cache is None:
            self.cache = DynamicCache(config=self.model.config)
            self.cache.layers = [
                (_SlidingSlots if type(layer) is DynamicSlidingWindowLayer else _Slots)(
                    layer, self.capacity, self.max_new_tokens)
                for layer in pre.cache.layers]
        elif len(pre.cache.layers) != len(self.cache.layers):
            raise ValueError("prefills of different models do not stack")
        slot = len(self)
        for mine, theirs in zip(self.cache.layers, pre.cache.layers):
            mine.put(slot, theirs)
        if pre.visible is not None:
            self.hidden[slot] = (pre.plan.split, pre.visible)
        self.logits.append(pre.last_logits)
        return slot

    @torch.inference_mode()
    def greedy(self, eos_token_id=None,
               stop: Callable[[int, list[int]], bool] | None = None) -> list[list[int]]:
        """Greedy tokens of every slot (at most ``max_new_tokens`` each, the end token
        included); ``stop(slot, tokens)`` ends a slot early. Consumes the batch."""
        eos = set(eos_token_id if isinstance(eos_token_id, (list, tuple)) else
                  [eos_token_id] if eos_token_id is not None else [])
        out: list[list[int]] = [[] for _ in range(len(self))]
        if not out:
            return out
        with self._decoding() as logits:
            self._steps(logits, self._active, out, eos, stop)
        return out

    @torch.inference_mode()
    def feed(self, tokens: list[int]) -> torch.Tensor:
        """Teacher forcing: logits (slots, len(tokens), vocab) predicting each of ``tokens``
        in every slot, the prefill's last row first, then after feeding each token but the
        last (the agreement instrument feeds the exact arm's greedy continuation). Consumes
        the batch."""
        if len(tokens) - 1 > self.max_new_tokens:
            raise ValueError(f"feeding {len(tokens)} tokens needs max_new_tokens >= "
                             f"{len(tokens) - 1}; make the Batch with room for them")
        if not self.logits:
            return torch.empty(0, len(tokens), 0)
        with self._decoding() as first:
            out = [first]
            for t in tokens[:-1]:
                ids = torch.full((len(self), 1), int(t), dtype=torch.long, device=first.device)
                out.append(self.model(input_ids=ids, cache=self.cache, use_cache=True).logits[:, -1])
        return torch.stack(out, 1).float()

    @contextmanager
    def _decoding(self):
        """Ready the batch for decoding steps (spare slots trimmed, shared prompt columns
        kept once, attention wrapped); yields the first step's logits (slots, vocab) and
        consumes the batch on the way out."""
        self._trim()
        self._share()
        self._active = list(range(len(self)))
        try:
            with self._attention():
                yield torch.stack(self.logits)
        finally:
            self.cache, self.logits, self.hidden = None, [], {}

    def _steps(self, logits, active, out, eos, stop) -> None:
        for step in range(self.max_new_tokens):
            tokens = logits.argmax(-1)
            going = []
            for j, slot in enumerate(active):
                t = int(tokens[j])
                out[slot].append(t)
                if not (t in eos or step == self.max_new_tokens - 1 or
                        (stop is not None and stop(slot, out[slot]))):
                    going.append(j)
            if not going:
                break
            if len(going) < len(active):
                rows = torch.tensor(going, device=tokens.device)
                for layer in self.cache.layers:
                    layer.keep(rows)
                tokens, active = tokens[rows], [active[j] for j in going]
                self._active = active
            logits = self.model(input_ids=tokens[:, None], cache=self.cache,
                                use_cache=True).logits[:, -1]

    def _share(self) -> None:
        """Full-attention layers whose prompt columns agree in every slot (bitwise) keep
        one copy of them (``_Shared``): a step then reads them once, not once per slot."""
        if len(self) < 2 or self.model.config._attn_implementation != "sdpa":
            return
        for i, layer in enumerate(self.cache.layers):
            if type(layer) is _Slots and all(
                    torch.equal(layer.kbuf[0, :, : layer.length], layer.kbuf[j, :, : layer.length])
                    and torch.equal(layer.vbuf[0, :, : layer.length], layer.vbuf[j, :, : layer.length])
                    for j in range(1, len(self))):
                self.cache.layers[i] = _Shared(layer, self.max_new_tokens)

    @contextmanager
    def _attention(self):
        """While decoding, wrap ``sdpa``: a shared layer attends over its shared prompt
        columns and each slot's decoded ones; a hidden-row slot (no fill) is recomputed in
        its late layers over its visible columns (prompt rows that ran the layer, and every
        decoded token)."""
        shared = any(type(layer) is _Shared for layer in self.cache.layers)
        if not self.hidden and not shared:
            yield
            return
        sdpa = ALL_ATTENTION_FUNCTIONS["sdpa"]
        n = int(next(iter(self.hidden.values()))[1].numel()) if self.hidden else 0

        def attend(module, query, key, value, attention_mask, **kwargs):
            layer = module.layer_idx
            cached = self.cache.layers[layer]
            if type(cached) is _Shared:
                if kwargs.get("softcap") is not None:
                    raise ValueError("shared prompt columns do not implement logit soft-capping")
                scaling = kwargs.get("scaling") or query.shape[-1] ** -0.5
                return cached.attend(query, key, value, attention_mask, scaling), None
            out, weights = sdpa(module, query, key, value, attention_mask, **kwargs)
            for row, slot in enumerate(self._active):
                split, visible = self.hidden.get(slot, (None, None))
                if split is None or layer < split:
                    continue
                first, end = cached.columns()
                pos = torch.arange(first, end, device=visible.device)
                keep = (pos >= n) | visible[pos.clamp(max=n - 1)]
                cols = torch.nonzero(keep).flatten()
                one, _ = sdpa(module, query[row:row + 1], key[row:row + 1, :, cols],
                              value[row:row + 1, :, cols], None, **kwargs)
                out[row] = one[0]
            return out, weights

        local = ALL_ATTENTION_FUNCTIONS._local_mapping
        before = local.get("sdpa")
        local["sdpa"] = attend
        try:
            yield
        finally:
            if before is None:
                del local["sdpa"]
            else:
                local["sdpa"] = before

    def _trim(self) -> None:
        if len(self) < self.capacity:
            rows = torch.arange(len(self), device=self.logits[0].device)
            for layer in self.cache.layers:
                layer.keep(rows)
