"""RidgeFill variants of vLLM's own model classes (paper sections 2.1-2.2, served).

``RidgeFillQwen2ForCausalLM`` / ``RidgeFillLlamaForCausalLM`` subclass vLLM's classes and
change one thing, the forward of a step that holds prompt-prefix rows to fill (a whole prompt,
a chunk of one, or the rest of one whose start was cached: gpu.serving.rows):

- layers 0..S-1 run vLLM's own decoder layers on every token;
- from x_S, each late layer writes the filled rows' keys and values into vLLM's paged cache
  (the same fill as gpu.core.late: the layer's own norm and K/V projections of the map's
  prediction, of x_S for identity, or the direct kv map) and runs queries, attention, output
  projection and MLP only for the exact rows (the tail, the kv fill's sink rows, every
  decoding token of the batch), each run of them an attention sequence of its own over the
  paged cache (gpu.serving.rows);
- the filled rows' hidden states are never read (a step's logits come from each request's
  last token, which is in the tail), so they are zeros;
- with ``rows='attention'`` (the tiered prefill) the lower pass also projects, at the
  reference layers, every row's keys and the prompt's last rows' queries (:class:`Ranker`),
  and the rows they attend to most run exact with the tail (gpu.serving.tiered).

Every other step (decoding, prompts that fit the tail, short continuations) is vLLM's own
compiled forward. The attention calls go to vLLM's CPU attention backend (CPU_ATTN): its
cache write and its kernel, with metadata for the exact rows built the way its metadata
builder builds it. Engine modes the classes cannot run are refused when the class is built
(gpu.serving.settings.check_engine).
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function
from vllm import _custom_ops as ops
from vllm import envs
from vllm.config import CompilationMode
from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.attention.attention import get_attention_context
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
from vllm.model_executor.models.llama import LlamaForCausalLM
from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM

from ..core.config import kind_of
from ..core.fills import writes
from ..core.late import sink_rows
from ..maps.files import load_maps
from . import rows as step_rows
from . import step as step_info
from . import tiered
from .settings import check_engine, read

log = logging.getLogger("ridgefill")


class Projection:
    """``x @ weight.T + bias`` through vLLM's CPU GEMM dispatch (oneDNN where it is built),
    for weights vLLM does not hold as a layer: the maps and the K/V rows of ``qkv_proj``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.holder = nn.Module()
        self.holder.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
        self.holder.bias = (None if bias is None else
                            nn.Parameter(bias.contiguous(), requires_grad=False))
        dispatch_cpu_unquantized_gemm(self.holder, remove_weight=False)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.holder.cpu_linear(x, self.holder.weight, self.holder.bias)


class Filler:
    """What the filled rows of one model write, layer by layer (gpu.core.late.source_entries
    on vLLM's modules): keys from ``config.fill``, values from ``config.values_fill``."""

    def __init__(self, model: nn.Module, config, maps: dict):
        self.config, self.layers, self.split = config, model.layers, config.split
        late = range(self.split + 1, len(self.layers))
        self.maps = {k: {l: Projection(*(self._shard(l, *m.matrix(l)) if writes(k) == "entries"
                                         else m.matrix(l))) for l in late}
                     for k, m in maps.items()}
        self.kv = {}  # layer -> the K/V rows of its qkv_proj, taken before vLLM packs them

    def _shard(self, layer: int, weight: torch.Tensor, bias: torch.Tensor | None):
        """A kv map's rows for this tensor-parallel rank's key/value heads (the map writes
        [keys of every head; values of every head]; the rank holds ``num_kv_heads`` of them,
        starting where vLLM's QKVParallelLinear starts its shard)."""
        qkv = self.layers[layer].self_attn.qkv_proj
        if qkv.tp_size == 1:
            return weight, bias
        kv_local = qkv.num_kv_heads * qkv.head_size
        first = (qkv.tp_rank // qkv.num_kv_head_replicas) * kv_local
        full = qkv.total_num_kv_heads * qkv.head_size
        rows = torch.cat([torch.arange(first, first + kv_local),
                          torch.arange(full + first, full + first + kv_local)])
        return weight[rows], None if bias is None else bias[rows]

    def take_kv_weights(self) -> None:
        """Keep each late layer's K/V projection (call after the weights are loaded)."""
        for l in range(self.split, len(self.layers)):
            attn = self.layers[l].self_attn
            w, b = attn.qkv_proj.weight, attn.qkv_proj.bias
            self.kv[l] = Projection(w[attn.q_size:].clone(),
                                    None if b is None else b[attn.q_size:].clone())

    def all_entries(self, x: torch.Tensor, positions: torch.Tensor) -> list:
        """:meth:`entries` of every late layer, split first (one graph when compiled)."""
        return [self.entries(l, x, positions) for l in range(self.split, len(self.layers))]

    def entries(self, layer: int, x: torch.Tensor, positions: torch.Tensor):
        """Keys and values (n, kv_size) the filled rows with x_S ``x`` write into ``layer``."""
        k = self._source(self.config.fill, layer, x, positions, keys=True)
        values = self.config.values_fill or self.config.fill
        if values == self.config.fill:
            return k
        return k[0], self._source(values, layer, x, positions, keys=False)[1]

    def _source(self, source: str, layer: int, x: torch.Tensor, positions: torch.Tensor,
                keys: bool):
        attn = self.layers[layer].self_attn
        if writes(source) == "entries" and layer > self.split:
            kv = self.maps[source][layer](x)
        else:
            u = x if writes(source) == "x_split" or layer == self.split else self.maps[source][layer](x)
            kv = self.kv[layer](self.layers[layer].input_layernorm(u))
        k, v = kv.split([attn.kv_size, attn.kv_size], dim=-1)
        if keys:
            k, _ = attn.rotary_emb(positions, k.contiguous())
        return k, v


class Ranker:
    """The tiered selection's scores inside the lower pass (gpu.serving.tiered): at each
    reference layer, the keys of every row and the queries of the window rows, projected from
    the layer's input with the layer's own norm, Q/K rows of ``qkv_proj`` and rotary."""

    def __init__(self, model: nn.Module, selection: tiered.Selection):
        self.selection, self.layers = selection, model.layers
        self.q, self.k = {}, {}

    def take_weights(self) -> None:
        """Keep each reference layer's Q and K projections (after the weights are loaded)."""
        for l in self.selection.layers:
            attn = self.layers[l].self_attn
            w, b = attn.qkv_proj.weight, attn.qkv_proj.bias
            parts = {"q": slice(0, attn.q_size), "k": slice(attn.q_size, attn.q_size + attn.kv_size)}
            for name, rows in parts.items():
                getattr(self, name)[l] = Projection(w[rows].clone(),
                                                    None if b is None else b[rows].clone())

    def probe(self, layer: int, h: torch.Tensor, residual: torch.Tensor | None,
              positions: torch.Tensor, window: torch.Tensor):
        """(queries of the ``window`` rows, keys of every row) at ``layer``, whose input is
        ``h + residual``."""
        attn = self.layers[layer].self_attn
        x = self.layers[layer].input_layernorm(h if residual is None else h + residual)
        k, _ = attn.rotary_emb(positions, self.k[layer](x).contiguous())
        q, _ = attn.rotary_emb(positions[window], self.q[layer](x[window]).contiguous())
        return q, k

    def exact_rows(self, probes: list, requests: dict, positions: torch.Tensor,
                   pieces_of) -> np.ndarray:
        """Step-token indices of the rows the selection makes exact: per tiered.Request of
        ``requests`` (by index; each holds its prompt's end, and the probes' queries hold
        their windows in this order), its chosen rows among its new prefix rows."""
        out, at = [], 0
        for i, r in requests.items():
            window = r.window(self.selection.window)
            queries, at = slice(at, at + window.size), at + window.size
            keys = slice(r.start, r.start + r.prompt_len - r.first)
            q_pos = positions[torch.as_tensor(window)]
            scores = sum(tiered.received(q[queries].unflatten(-1, (-1, self._head(l))),
                                         k[keys].unflatten(-1, (-1, self._head(l))),
                                         q_pos, positions[keys], self.layers[l].self_attn.scaling)
                         for l, (q, k) in zip(self.selection.layers, probes))
            pieces = pieces_of(i, r) if self.selection.complete else None
            out.append(r.start + tiered.chosen(scores.numpy().astype(np.float64), r.n_prefix,
                                               self.selection, pieces))
        return np.concatenate(out) if out else np.zeros(0, np.int64)

    def _head(self, layer: int) -> int:
        return self.layers[layer].self_attn.head_dim


class RidgeFillMixin:
    """The RidgeFill forward on top of a vLLM ``*ForCausalLM`` (``self.model`` its decoder)."""

    def _setup_ridgefill(self, vllm_config) -> None:
        check_engine(vllm_config)
        step_info.install()
        config, path, self.min_fill_rows = read(vllm_config.model_config.hf_config)
        self.rows_filled = 0       # prompt rows this engine has filled so far (a counter)
        self.last_filled = np.zeros(0, np.int64)   # positions the last filling step filled
        self.warned_chunks = False
        dtype = vllm_config.model_config.dtype
        loaded = load_maps(path, dtype=dtype) if config.needs_maps else None
        config = config.resolve(len(self.model.layers), loaded)
        maps = {kind: kind_of({loaded.kind: loaded}, kind) for kind in config.map_kinds}
        self.ridgefill = Filler(self.model, config, maps)
        self.ridgefill_dtype = dtype
        selection = tiered.Selection.of(config)
        self.ranker = None if selection is None else Ranker(self.model, selection)
        self.pieces = None
        if selection is not None and vllm_config.parallel_config.tensor_parallel_size > 1:
            raise ValueError("rows='attention' ranks rows over every attention head, which "
                             "tensor parallelism shards: use --tensor-parallel-size 1 or "
                             "--rows none")
        if selection is not None and selection.complete:
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
            self.pieces = tokenizer.convert_ids_to_tokens
        # the passes over every prompt row, compiled unless vLLM runs eagerly: under
        # compilation vLLM's norms, rotary and activation are plain torch ops that only a
        # compiler fuses (vllm.model_executor.custom_op)
        compiled = vllm_config.compilation_config.mode != CompilationMode.NONE
        self.lower_pass = torch.compile(self._lower, dynamic=True) if compiled else self._lower
        self.fill_pass = (torch.compile(self.ridgefill.all_entries, dynamic=True) if compiled
                          else self.ridgefill.all_entries)

    def load_weights(self, weights):
        loaded = super().load_weights(weights)
        self.ridgefill.take_kv_weights()
        if self.ranker is not None:
            self.ranker.take_weights()
        return loaded

    def forward(self, input_ids, positions, intermediate_tensors=None, inputs_embeds=None):
        step, requests = _step_metadata(), step_info.current()
        if step is not None and requests is not None and \
                requests.prompt_lens.size != step.seq_lens.numel():
            raise RuntimeError(f"vLLM's step holds {step.seq_lens.numel()} requests and its "
                               f"input batch {requests.prompt_lens.size}: this vLLM pads or "
                               "reorders requests in a way gpu.serving.step does not read")
        prefix = [] if step is None or requests is None else step_rows.prefix_rows(
            step.query_start_loc.numpy(), step.seq_lens.numpy(), requests.prompt_lens,
            # a request that reads prompt logprobs needs every row: none left to fill
            np.where(requests.exact, requests.prompt_lens, requests.started),
            self.ridgefill.config.tail, self.min_fill_rows)
        if self.ranker is not None and any(p.size for p in prefix):
            # the ranking reads the prompt's last rows: a prompt whose end a later step
            # holds (a chunk) runs exact here
            ends = self._requests(step, prefix)
            held = [p if i in ends and ends[i].holds_end else p[:0] for i, p in enumerate(prefix)]
            if not self.warned_chunks and sum(map(len, held)) < sum(map(len, prefix)):
                self.warned_chunks = True
                log.warning("rows='attention': a prompt longer than the step budget runs its "
                            "earlier chunks exact; raise --max-num-batched-tokens to the "
                            "longest prompt to fill them")
            prefix = held
        if not any(p.size for p in prefix):
            return super().forward(input_ids, positions, intermediate_tensors, inputs_embeds)
        return self._ridgefill_forward(input_ids, positions, inputs_embeds, step, prefix)

    def _lower(self, input_ids, positions, inputs_embeds, window=None):
        """Layers 0..S-1 on every row: (h, residual, x_S = h + residual, probes), ``probes``
        the selection's (queries of the ``window`` rows, keys of every row) at each reference
        layer (:class:`Ranker`; none without a window)."""
        m = self.model
        h = m.embed_input_ids(input_ids) if inputs_embeds is None else inputs_embeds
        residual, probes = None, []
        reference = () if window is None else self.ranker.selection.layers
        for l, layer in enumerate(m.layers[:self.ridgefill.split]):
            if l in reference:
                probes.append(self.ranker.probe(l, h, residual, positions, window))
            h, residual = layer(positions, h, residual)
        return h, residual, h + residual, probes

    @torch.inference_mode()
    def _ridgefill_forward(self, input_ids, positions, inputs_embeds, step, prefix):
        m, fill = self.model, self.ridgefill
        qsl, sl = step.query_start_loc.numpy(), step.seq_lens.numpy()
        requests = {} if self.ranker is None else self._requests(step, prefix)
        window = (torch.as_tensor(np.concatenate([r.window(self.ranker.selection.window)
                                                  for r in requests.values()]))
                  if requests else None)
        with record_function("ridgefill.lower"):
            h, residual, x, probes = self.lower_pass(input_ids, positions, inputs_embeds,
                                                     window)
        if requests:
            with record_function("ridgefill.select"):
                exact = self.ranker.exact_rows(probes, requests, positions, self._pieces)
            prefix = [np.setdiff1d(p, exact) for p in prefix]
        if "entries" in {writes(k) for k in (fill.config.fill, fill.config.values_fill) if k}:
            prefix = [np.setdiff1d(p, sink_rows(x[None], p)) for p in prefix]
        plan = step_rows.plan_step(qsl, sl, np.concatenate(prefix))
        self.rows_filled += int(plan.filled.size)
        c, f = torch.as_tensor(plan.computed), torch.as_tensor(plan.filled)
        self.last_filled = positions[f].numpy()
        hc, rc, pos_c = h[c], residual[c], positions[c]
        with record_function("ridgefill.fill"):
            entries = self.fill_pass(x[f], positions[f])
        exact_meta = {}
        for l in range(fill.split, len(m.layers)):
            layer = m.layers[l]
            attn = layer.self_attn
            meta, attn_layer, kv_cache, slots = get_attention_context(attn.attn.layer_name)
            kv_heads, d = attn.num_kv_heads, attn.head_dim
            with record_function("ridgefill.fill"):
                kf, vf = entries[l - fill.split]
                attn_layer.impl.do_kv_cache_update(attn_layer, kf.reshape(-1, kv_heads, d),
                                                   vf.reshape(-1, kv_heads, d), kv_cache,
                                                   slots[f])
            if not c.numel():      # a chunk of filled rows only: no query runs
                continue
            if id(meta) not in exact_meta:
                exact_meta[id(meta)] = _exact_metadata(meta, plan, attn_layer,
                                                       self.ridgefill_dtype)
            with record_function("ridgefill.exact_rows"):
                hc, rc = _exact_rows(layer, hc, rc, pos_c, attn_layer, kv_cache, slots[c],
                                     exact_meta[id(meta)])
        out = h.new_zeros(h.shape[0], h.shape[-1])
        if c.numel():
            out[c] = m.norm(hc, rc)[0]
        return out

    def _requests(self, step, prefix) -> dict[int, tiered.Request]:
        """The requests whose prefix rows this step fills (``prefix``), by index."""
        qsl, sl = step.query_start_loc.numpy(), step.seq_lens.numpy()
        lens, tail = step_info.current().prompt_lens, self.ridgefill.config.tail
        return {i: tiered.Request(start=int(qsl[i]), first=int(sl[i] - (qsl[i + 1] - qsl[i])),
                                  new=int(qsl[i + 1] - qsl[i]), prompt_len=int(lens[i]),
                                  tail=tail)
                for i, p in enumerate(prefix) if p.size}

    def _pieces(self, i: int, r: tiered.Request) -> list[str]:
        """The token pieces of request ``i``'s new prefix rows (span completion)."""
        ids = step_info.current().prompt_ids[i][r.first:r.first + r.n_prefix]
        return self.pieces([int(t) for t in ids])


def _exact_rows(layer, h, residual, positions, attn_layer, kv_cache, slots, meta):
    """One vLLM decoder layer on the exact rows only: their entries into the paged cache,
    their queries over it (``meta``: :func:`_exact_metadata`), the output projection, MLP."""
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


def _step_metadata():
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


def _exact_metadata(meta, plan: step_rows.StepRows, attn_layer, dtype: torch.dtype):
    """``meta`` (the step's CPU attention metadata) for the exact rows only: one attention
    sequence per run of them (gpu.serving.rows), built as vLLM's metadata builder builds it."""
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
        slot_mapping=meta.slot_mapping[torch.as_tensor(plan.computed)],
        scheduler_metadata=scheduler)


class RidgeFillQwen2ForCausalLM(RidgeFillMixin, Qwen2ForCausalLM):
    """vLLM's Qwen2ForCausalLM with a RidgeFill prefill."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self._setup_ridgefill(vllm_config)


class RidgeFillLlamaForCausalLM(RidgeFillMixin, LlamaForCausalLM):
    """vLLM's LlamaForCausalLM with a RidgeFill prefill."""

    def __init__(self, *, vllm_config, prefix: str = ""):
        super().__init__(vllm_config=vllm_config, prefix=prefix)
        self._setup_ridgefill(vllm_config)

