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
builder builds it (gpu.serving.exact). Engine modes the classes cannot run are refused when the class is built
(gpu.serving.settings.check_engine).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.profiler import record_function
from vllm.config import CompilationMode
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
from .exact import exact_metadata, exact_rows, slots_of, step_metadata
from .settings import check_engine, read


class Projection:
    """``x @ weight.T + bias`` through vLLM's CPU GEMM dispatch (oneDNN where it is built),
    for weights vLLM does not hold as a layer: the maps and the K/V rows of ``qkv_proj``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.holder = nn.Module()
        self.holder.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
        self.holder.bias = (None if bias is None else
                            nn.Parameter(bias.contiguous(), requires_grad=False))
        dispatch_cpu_unquantized_gemm(self.holder, remove_weight=False)

    @classmethod
    def rows_of(cls, linear: nn.Module, rows: slice) -> "Projection":
        """The output ``rows`` of ``linear`` (a layer's ``qkv_proj``), weight and bias."""
        w, b = linear.weight, linear.bias
        return cls(w[rows].clone(), None if b is None else b[rows].clone())

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
            self.kv[l] = Projection.rows_of(attn.qkv_proj, slice(attn.q_size, None))

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
            self.q[l] = Projection.rows_of(attn.qkv_proj, slice(0, attn.q_size))
            self.k[l] = Projection.rows_of(attn.qkv_proj,
                                           slice(attn.q_size, attn.q_size + attn.kv_size))

    def probe(self, layer: int, h: torch.Tensor, residual: torch.Tensor | None,
              positions: torch.Tensor, window: torch.Tensor):
        """(queries of the ``window`` rows, keys of every row) at ``layer``, whose input is
        ``h + residual``."""
        attn = self.layers[layer].self_attn
        x = self.layers[layer].input_layernorm(h if residual is None else h + residual)
        k, _ = attn.rotary_emb(positions, self.k[layer](x).contiguous())
        q, _ = attn.rotary_emb(positions[window], self.q[layer](x[window]).contiguous())
        return q, k

    def scores(self, rows: tiered.Pending) -> np.ndarray:
        """Attention each of ``rows`` receives from their last queries, summed over the
        reference layers (gpu.core.select.lower_received)."""
        total = sum(tiered.received(q.unflatten(-1, (-1, self._head(l))),
                                    k.unflatten(-1, (-1, self._head(l))), rows.query_positions,
                                    rows.positions, self.layers[l].self_attn.scaling)
                    for l, q, k in zip(self.selection.layers, rows.queries, rows.keys))
        return total.numpy().astype(np.float64)

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
        self.pending: dict[str, tiered.Pending] = {}   # chunked prompts' rows, by request id
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
        step, requests = step_metadata(), step_info.current()
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
        waiting = self._waiting(requests)
        if not any(p.size for p in prefix) and not waiting:
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
        lasts = {i: r.last(self.ranker.selection.window) for i, r in requests.items()}
        window = torch.as_tensor(np.concatenate(list(lasts.values()))) if requests else None
        with record_function("ridgefill.lower"):
            h, residual, x, probes = self.lower_pass(input_ids, positions, inputs_embeds,
                                                     window)
        with record_function("ridgefill.select"):
            filled, virtual, waiting = self._choose(prefix, requests, lasts, probes, positions, x)
        # the step's tokens, then the earlier rows computed again, by request and position
        total, n = x.shape[0], int(qsl[-1])      # rows past qsl[-1]: padding, never read
        pos = positions.numpy()[:n]
        owner = np.repeat(np.arange(sl.size), np.diff(qsl))
        order = tiered.merged_order(owner, pos, virtual)
        at = np.empty_like(order)
        at[order] = np.arange(order.size)
        plan = step_rows.plan_rows(np.concatenate([owner, virtual.owner])[order],
                                   np.concatenate([pos, virtual.positions])[order],
                                   at[np.concatenate([filled, n + np.flatnonzero(~virtual.exact)])])
        if virtual.positions.size:
            o, xv = torch.as_tensor(order), virtual.x
            x, h = torch.cat([x[:n], xv])[o], torch.cat([h[:n], xv])[o]
            residual = torch.cat([residual[:n], torch.zeros_like(xv)])[o]
            positions = torch.cat([positions[:n], torch.as_tensor(virtual.positions)])[o]
        settled = plan.filled[~np.isin(order[plan.filled], waiting)]
        self.rows_filled += int(settled.size)
        c, f = torch.as_tensor(plan.computed), torch.as_tensor(plan.filled)
        self.last_filled = positions[torch.as_tensor(settled)].numpy()
        hc, rc, pos_c = h[c], residual[c], positions[c]
        with record_function("ridgefill.fill"):
            entries = self.fill_pass(x[f], positions[f])
        exact_meta = {}
        for l in range(fill.split, len(m.layers)):
            layer = m.layers[l]
            attn = layer.self_attn
            meta, attn_layer, kv_cache, slots = get_attention_context(attn.attn.layer_name)
            kv_heads, d = attn.num_kv_heads, attn.head_dim
            if id(meta) not in exact_meta:
                every = slots_of(meta, kv_cache, slots, owner, pos, virtual, order)
                exact_meta[id(meta)] = every, (exact_metadata(
                    meta, plan, attn_layer, self.ridgefill_dtype, every) if c.numel() else None)
            every, meta_c = exact_meta[id(meta)]
            with record_function("ridgefill.fill"):
                kf, vf = entries[l - fill.split]
                attn_layer.impl.do_kv_cache_update(attn_layer, kf.reshape(-1, kv_heads, d),
                                                   vf.reshape(-1, kv_heads, d), kv_cache,
                                                   every[f])
            if not c.numel():      # a chunk of filled rows only: no query runs
                continue
            with record_function("ridgefill.exact_rows"):
                hc, rc = exact_rows(layer, hc, rc, pos_c, attn_layer, kv_cache, every[c],
                                     meta_c)
        out = h.new_zeros(total, h.shape[-1])
        if c.numel():
            mine = order[plan.computed] < n       # the step's own rows (not rows computed again)
            out[torch.as_tensor(order[plan.computed][mine])] = \
                m.norm(hc, rc)[0][torch.as_tensor(mine)]
        return out

    def _choose(self, prefix, requests, lasts, probes, positions, x):
        """The step's filled rows (step-token indices), the earlier rows of chunked prompts
        that this step computes again (tiered.Virtual), and the step indices of the rows of
        prompts whose end a later step holds (filled for now, ranked then). Without a
        selection: every prefix row but the kv fill's sink rows."""
        fills = {writes(k) for k in (self.ridgefill.config.fill, self.ridgefill.config.values_fill)
                 if k}

        def sinks(xs: torch.Tensor, rows: np.ndarray) -> np.ndarray:
            return sink_rows(xs[None], rows) if "entries" in fills else rows[:0]

        if not requests:
            return (np.concatenate([np.setdiff1d(p, sinks(x, p)) for p in prefix]),
                    tiered.Virtual.none(x), np.zeros(0, np.int64))
        ids, window = step_info.current().req_ids, self.ranker.selection.window
        filled, virtual, waiting, at = [], [], [], 0
        for i, p in enumerate(prefix):
            r = requests.get(i)
            if r is None:
                filled.append(np.setdiff1d(p, sinks(x, p)))
                continue
            held = slice(r.start, r.start + min(r.new, r.prompt_len - r.first))
            q = slice(at, at + lasts[i].size)
            at = q.stop
            mine = tiered.Pending(positions[held], x[held], [k[held] for _, k in probes],
                                  [qs[q] for qs, _ in probes], positions[torch.as_tensor(lasts[i])])
            rows = mine if ids[i] not in self.pending else self.pending[ids[i]].then(mine, window)
            if not r.holds_end:     # filled for now; ranked with the rest at the prompt's end
                self.pending[ids[i]] = rows.clone()
                filled.append(np.setdiff1d(p, sinks(x, p)))
                waiting.append(np.arange(held.start, held.stop))
                continue
            self.pending.pop(ids[i], None)
            start = int(rows.positions[0])
            n_prefix = r.prompt_len - r.tail - start
            chosen = tiered.chosen(self.ranker.scores(rows), n_prefix, self.ranker.selection,
                                   self._pieces(i, start, n_prefix))
            rest = np.setdiff1d(np.arange(n_prefix), chosen)
            exact = start + np.union1d(chosen, sinks(rows.x, rest))
            filled.append(np.setdiff1d(p, r.start + exact[exact >= r.first] - r.first))
            earlier = np.arange(start, min(r.first, r.prompt_len - r.tail))
            virtual.append(tiered.Virtual(np.full(earlier.size, i), earlier,
                                          rows.x[torch.as_tensor(earlier - start)],
                                          np.isin(earlier, exact)))
        return (np.concatenate(filled), tiered.Virtual.join(virtual, x),
                np.concatenate(waiting) if waiting else np.zeros(0, np.int64))

    def _waiting(self, requests) -> bool:
        """Whether a request of this step has rows waiting for its prompt's end (a chunked
        prompt under a selection); rows of requests that left the batch are dropped."""
        if self.ranker is None or requests is None:
            return False
        self.pending = {k: v for k, v in self.pending.items() if k in requests.req_ids}
        return bool(self.pending)

    def _requests(self, step, prefix) -> dict[int, tiered.Request]:
        """The requests whose prefix rows this step fills (``prefix``), or that have rows
        waiting for their prompt's end, by index."""
        qsl, sl = step.query_start_loc.numpy(), step.seq_lens.numpy()
        info, tail = step_info.current(), self.ridgefill.config.tail
        return {i: tiered.Request(start=int(qsl[i]), first=int(sl[i] - (qsl[i + 1] - qsl[i])),
                                  new=int(qsl[i + 1] - qsl[i]), prompt_len=int(info.prompt_lens[i]),
                                  tail=tail)
                for i, p in enumerate(prefix) if p.size or info.req_ids[i] in self.pending}

    def _pieces(self, i: int, start: int, n: int) -> list[str] | None:
        """The token pieces of request ``i``'s prompt rows ``start .. start + n`` (span
        completion; None when the selection does not complete spans)."""
        if not self.ranker.selection.complete:
            return None
        ids = step_info.current().prompt_ids[i][start:start + n]
        return self.pieces([int(t) for t in ids])


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

