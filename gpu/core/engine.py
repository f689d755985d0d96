"""The RidgeFill prefill engine (paper sections 2.1-2.4), family-agnostic.

A prefill, as data: tokens -> plan -> lower layers 0..S-1 for every row (the model's own
code, so they are bitwise the stock forward) -> x_S -> per late layer: the map predicts the
filled rows' input, which goes through that layer's own norm and K/V projections (RoPE at the
rows' own positions) -> exact rows and tail run the whole layer over the mixed cache -> one
ordinary transformers cache -> ordinary decoding at full depth.

A Gated DeltaNet late layer (hybrids, paper 2.3) carries its state through the prompt in
order: the layer's own mixer runs over the rows present, filled rows from their predicted
input and exact rows and the tail from their true input; only the computed rows go on to the
residual and MLP. With the terminal-state correction, rho * DeltaM is added to the recurrent
state once, at the end of the prefix (rho: the filled rows' share of the gate weight).
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import torch
from transformers import DynamicCache

from . import late, select
from .adapters import Adapter, for_model
from .cache import as_stock, layer_input, layer_inputs
from .compiled import compiled as compiled_adapter
from .config import PrefillConfig, kind_of
from .fills import SOURCES
from .walk import Filling, Late
from .extras import NONE, Extras
from .plan import Plan


class Predictor(Protocol):
    split: int

    def predict(self, layer: int, x_split: torch.Tensor) -> torch.Tensor: ...


class _StopAtSplit(Exception):
    pass


@dataclass
class Prefill:
    """What a prefill returns: an ordinary cache plus what the caller may want to report."""

    cache: DynamicCache
    logits: torch.Tensor          # (n_computed, vocab): logits of the rows that ran every layer
    rows: torch.Tensor            # positions of those rows (exact prefix rows, then the tail)
    plan: Plan | None
    fill: str
    visible: torch.Tensor | None = None   # late-layer key mask when filled rows have no entry
    seconds: float = 0.0
    received: torch.Tensor | None = None  # attention received per prefix row (probe), if asked
    info: dict = field(default_factory=dict)
    x_split: torch.Tensor | None = None   # (1, n, C) layer S's input, when asked to keep it

    @property
    def last_logits(self) -> torch.Tensor:
        return self.logits[-1]


@dataclass
class _LowerPass:
    """The lower layers of one prompt, kept so that other arms at the same split reuse them."""

    ids: torch.Tensor
    split: int
    x_split: torch.Tensor
    cache: DynamicCache                # layers 0..split-1 written, nothing above
    inputs: dict[int, torch.Tensor]    # every lower layer's input, all rows (for selectors)
    chunk: int = 0                     # rows per pass (0: one pass, as the stock forward)

    def matches(self, ids: torch.Tensor, split: int, chunk: int = 0) -> bool:
        return (self.split == split and self.chunk == chunk
                and torch.equal(self.ids, ids))  # False on another shape


class Engine:
    """RidgeFill prefill and decoding on a Hugging Face causal LM.

    ``reuse_lower``: keep the last prompt's lower-layer pass and reuse it when the next prefill
    has the same tokens and split (an evaluation runs many arms on one prompt). The lower
    layers never see the plan, so the reuse is bitwise the same as running them again; off by
    default (it holds every lower layer's input until the next prompt).
    ``maps``: one map set, or {kind: map set} of one split (gpu.core.fills.MAP_KINDS) for the
    fills beyond the paper and for keys and values from different fills.
    """

    def __init__(self, model, maps: Predictor | dict | None = None, reuse_lower: bool = False):
        self.model = model
        self.adapter: Adapter = for_model(model)
        self.kinds: dict[str, Predictor] = (
            dict(maps) if isinstance(maps, dict) else
            {} if maps is None else {getattr(maps, "kind", "ridge"): maps})
        # the map set the probe's sweep and the correction read: ridge where given
        self.maps = self.kinds.get("ridge", next(iter(self.kinds.values()), None))
        self.reuse_lower = reuse_lower
        self._last: _LowerPass | None = None

    # ------------------------------------------------------------------ lower layers
    @torch.inference_mode()
    def lower(self, ids: torch.Tensor, split: int, cache: DynamicCache,
              keep: dict[int, slice] | None = None, chunk: int = 0
              ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Run layers 0..split-1 with the model's own forward; return x_split (1, n, d).

        ``keep`` asks for the inputs of chosen lower layers (rows sliced), for selectors.
        ``chunk``: with a cache, a prompt longer than ``chunk`` rows goes through in passes of
        that many rows, each over the cache the earlier ones wrote (the model's own chunked
        prefill), so what grows with length (masks, activations) stays chunk x n instead of
        n x n; equal to one pass up to float rounding. 0: one pass (bitwise the stock forward).
        """
        n = ids.shape[1]
        if chunk and cache is not None and n > chunk:
            xs, parts = [], {}
            for a in range(0, n, chunk):
                x, kept = self._lower_pass(ids[:, a:a + chunk], split, cache,
                                           dict.fromkeys(keep or {}, slice(None)))
                xs.append(x)
                for i, t in kept.items():
                    parts.setdefault(i, []).append(t)
            return torch.cat(xs, 1), {i: torch.cat(parts[i], 1)[:, r] for i, r in (keep or {}).items()}
        return self._lower_pass(ids, split, cache, keep)

    def _lower_pass(self, ids: torch.Tensor, split: int, cache: DynamicCache | None,
                    keep: dict[int, slice] | None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """One forward of the model stopped at layer ``split``'s input."""
        box: dict = {}

        def stop(module, args, kwargs):
            box["x"] = layer_input(args, kwargs)
            raise _StopAtSplit

        handle = self.adapter.layers[split].register_forward_pre_hook(stop, with_kwargs=True)
        try:
            with layer_inputs(self.adapter, keep or {}) as kept:
                self.adapter.inner(input_ids=ids, cache=cache, use_cache=cache is not None)
        except _StopAtSplit:
            pass
        finally:
            handle.remove()
        return box["x"], kept

    def adopt_lower(self, ids: torch.Tensor, split: int, inputs: dict[int, torch.Tensor],
                    cache: DynamicCache) -> None:
        """Take this prompt's lower-layer pass from a stock forward that ran it anyway (the
        exact arm): ``inputs`` holds the input of every layer up to ``split`` (all rows),
        ``cache`` at least layers 0..split-1. Those layers ran the same code on the same
        inputs, so this is bitwise the pass ``prefill`` would run (``reuse_lower`` only)."""
        if not self.reuse_lower:
            return
        lower = DynamicCache(config=self.model.config)
        for i in range(split):
            lower.layers[i] = as_stock(cache.layers[i])
        self._last = _LowerPass(ids.clone(), split, inputs[split], lower,
                                {i: inputs[i] for i in range(split)})

    def _lower_prefix(self, ids: torch.Tensor, split: int, keep: dict | None, chunk: int = 0
                      ) -> tuple[torch.Tensor, dict[int, torch.Tensor], DynamicCache]:
        """The lower layers of a fresh prefill into a new cache (reused, see ``reuse_lower``)."""
        chunk = chunk if ids.shape[1] > chunk else 0  # 0: one pass
        if not self.reuse_lower:
            self._last = None
            cache = DynamicCache(config=self.model.config)
            x_split, kept = self.lower(ids, split, cache, keep, chunk)
            return x_split, kept, cache
        last = self._last
        if last is None or not last.matches(ids, split, chunk):
            self._last = None  # free the previous prompt's pass before running this one
            cache = DynamicCache(config=self.model.config)
            x_split, inputs = self.lower(ids, split, cache, dict.fromkeys(range(split), slice(None)),
                                         chunk)
            last = self._last = _LowerPass(ids.clone(), split, x_split, copy.deepcopy(cache), inputs,
                                           chunk)
        else:
            cache = copy.deepcopy(last.cache)
        kept = {i: last.inputs[i][:, rows] for i, rows in (keep or {}).items()}
        return last.x_split, kept, cache

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, config: PrefillConfig, extras: Extras = NONE, *,
                prompt=None, logits_rows: int | None = 1, keep_x_split: bool = False) -> Prefill:
        """Prefill ``ids`` (1, n) under ``config``: the one entry point of the API, the CLI, the
        evaluation's arms and the benchmark. The plan and the selector come from the
        configuration; ``extras`` holds what only an evaluation adds (gpu.core.extras).
        ``prompt`` (gpu.core.prompt.Prompt) carries the text that text-reading selectors need.
        logits_rows: logits of the last that many computed rows (None: every one; 1 MiB a row
        at a 262K vocabulary). keep_x_split: keep layer S's input in the result (rows made
        exact later without a new prefill: gpu.core.late.repair_rows). What was adjusted (a
        prompt that fits the tail, a prefix too short to select from) is listed in
        ``Prefill.info["notes"]``."""
        cfg = self.resolve(config)
        _check_ids(ids)
        n = ids.shape[1]
        notes: list[str] = []
        if extras.exact_rows is not None and cfg.rows != "none":
            raise ValueError(f"exact_rows fixes the exact rows and rows={cfg.rows!r} selects "
                             "them: use rows='none' with exact_rows")
        plan = None if cfg.fill == "exact" else Plan(n, cfg.split, cfg.tail, self.adapter.n_layers)
        if plan is not None and extras.exact_rows is not None:
            plan = plan.with_rows(extras.exact_rows)
        if plan is not None and plan.n_prefix == 0:
            notes.append(f"prompt of {n} tokens fits in the tail of {cfg.tail}: ran exact")
        selector = extras.selector
        if selector is None and plan is not None and cfg.rows != "none":
            if prompt is None and cfg.needs_text:
                raise ValueError(f"rows={cfg.rows!r} reads the prompt's text, but only ids were "
                                 "given: pass the tokenizer (gpu.prefill(..., tokenizer=tok)) or "
                                 "a Prompt, or use rows='none'")
            selector = select.make(cfg.rows, **cfg.options)
        if selector is not None and plan is not None and plan.n_prefix < 2:
            if plan.n_prefix:
                notes.append(f"rows={cfg.rows}: the prefix has {plan.n_prefix} rows, too short "
                             "to select from; fell back to rows=none")
            selector = None
        pre = self._walk(ids, plan, cfg, extras, selector, prompt, logits_rows, keep_x_split)
        pre.info["notes"] = notes
        return pre

    def resolve(self, config: PrefillConfig) -> PrefillConfig:
        """``config`` checked against this model and its maps (PrefillConfig.resolve), plus
        what only the engine knows: a correction needs Gated DeltaNet layers above the split
        and DeltaM in the maps; the probe with fill none needs maps to fill its sweep."""
        cfg = config.resolve(self.adapter.n_layers, self.kinds or None)
        if cfg.correction and cfg.fill != "exact" and not any(
                self.adapter.layer_info(l).kind == "gdn"
                for l in range(cfg.split, self.adapter.n_layers)):
            raise ValueError("correction=True applies to Gated DeltaNet layers above the "
                             "split; this model has none there (use correction=False)")
        if "kv" in (cfg.fill, cfg.values_fill) and any(
                self.adapter.layer_info(l).kind == "gdn"
                for l in range(cfg.split + 1, self.adapter.n_layers)):
            raise ValueError("fill='kv' writes attention cache entries; this model has Gated "
                             "DeltaNet layers above the split: use fill='ridge' or 'anchored'")
        if cfg.correction and cfg.fill == "ridge":
            self._deltas(True, cfg.fill)  # DeltaM in the maps, or the error that says refit
        if cfg.rows == "probe" and cfg.fill == "none" and self.maps is None:
            raise ValueError("rows='probe' sweeps the late layers over a filled cache, which "
                             "fill='none' builds from the ridge maps: pass maps, or use "
                             "fill='identity' or another rows selector")
        return cfg

    def _walk(self, ids: torch.Tensor, plan: Plan | None, cfg: PrefillConfig, extras: Extras,
              selector, prompt, logits_rows: int | None, keep_x_split: bool) -> Prefill:
        """One prefill of paper Table 3's arms (``Engine.prefill`` checked its arguments): the
        stock forward when every row is exact, else the lower layers, the selection and the
        late walk over the mixed cache."""
        fill, values_fill = cfg.fill, cfg.values_fill
        sources = {kind: kind_of(self.kinds or None, kind) for kind in cfg.map_kinds}
        deltas = self._deltas(cfg.correction if extras.deltas is None else extras.deltas, fill)
        start = time.perf_counter()
        ids = ids.to(self.model.device)
        n = ids.shape[1]
        if fill == "exact" or plan is None or plan.all_exact:
            rows = torch.arange(n, device=ids.device) if plan is None else torch.as_tensor(
                plan.computed, device=ids.device)
            if logits_rows is not None:
                rows = rows[-_checked_rows(logits_rows, rows.numel()):]
            first = int(rows[0])  # the stock forward computes the logits of rows first..n-1
            out = self.model(input_ids=ids, cache=DynamicCache(config=self.model.config),
                             use_cache=True, logits_to_keep=n - first)
            return Prefill(out.cache, out.logits[0, rows - first], rows, plan, "exact",
                           seconds=time.perf_counter() - start)

        keep = selector.keep(prompt, plan) if selector is not None else None
        x_split, kept, cache = self._lower_prefix(ids, plan.split, keep, cfg.chunk)
        if selector is not None:
            ctx = select.Context(self, prompt, plan, x_split, cache, kept, fill)
            plan = plan.with_rows(selector(ctx))
        if "kv" in (fill, values_fill):
            plan = plan.with_rows(np.union1d(plan.exact_rows, late.sink_rows(x_split, plan.filled)))
        computed = torch.as_tensor(plan.computed, device=ids.device)
        filled = torch.as_tensor(plan.filled, device=ids.device)
        stats: dict = {}
        adapter = compiled_adapter(self.adapter) if cfg.compile else self.adapter
        main = sources.get(fill)  # None: identity (x_S itself) or no fill
        filling = Filling(keys=fill if fill in SOURCES else None,
                          values=values_fill if values_fill != fill else None,
                          sources={k: m.predict for k, m in sources.items()},
                          predict_many=getattr(main, "predict_stacked", None),
                          rescale=cfg.rescale, rescale_rows=cfg.rescale_rows,
                          splice=extras.splice, exact_cache=extras.exact_cache,
                          correction=deltas, batched=cfg.batched_on(self.model.device))
        ctx = Late.prefill(adapter, plan.split, x_split, computed, filled, cache, filling,
                           tail_start=plan.n_prefix, skip_unread=cfg.skip_unread, stats=stats)
        h = late.run(ctx, x_split[:, computed])
        visible = None
        if fill == "none":  # filled rows have no late-layer entry; decoding must not see them
            visible = torch.zeros(n, dtype=torch.bool, device=ids.device)
            visible[computed] = True
        if logits_rows is not None:
            k = _checked_rows(logits_rows, computed.numel())
            h, computed = h[:, -k:], computed[-k:]
        logits = self.adapter.logits(h)[0]
        return Prefill(cache, logits, computed, plan, fill, visible,
                       seconds=time.perf_counter() - start, info=stats,
                       x_split=x_split if keep_x_split else None)

    def _deltas(self, correction, fill: str) -> dict[int, torch.Tensor] | None:
        """DeltaM per GDN late layer for the terminal-state correction, or None."""
        if correction is False or correction is None:
            return None
        if isinstance(correction, dict):
            return correction
        if fill in ("exact", "none"):
            return None  # no filled row updates a state
        if fill != "ridge":
            raise ValueError(f"--correction with --fill {fill}: DeltaM is measured for the ridge "
                             "maps; use --fill ridge or drop --correction")
        deltas = getattr(self.maps, "delta_M", None)
        if not deltas:
            raise ValueError("--correction needs DeltaM in the map file: refit the maps with "
                             "`ridgefill fit --correction`")
        return deltas

    def predict_input(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """The maps' prediction of ``layer``'s input from x_S rows ``x`` (paper 2.2)."""
        return self.maps.predict(layer, x)

    def predict_inputs(self, layers: tuple[int, ...], x: torch.Tensor) -> torch.Tensor:
        """``predict_input`` of several layers stacked (len(layers), *x.shape): one matrix
        product when the maps keep their weights stacked (the batched fill)."""
        stacked = getattr(self.maps, "predict_stacked", None)
        if stacked is not None:
            return stacked(layers, x)
        return torch.stack([self.maps.predict(l, x) for l in layers])

    # ------------------------------------------------------------------ decoding
    @torch.inference_mode()
    def decode(self, pre: Prefill, max_new_tokens: int, eos_token_id=None,
               stop: Callable[[list[int]], bool] | None = None) -> list[int]:
        """Greedy decoding at full depth from the prefilled cache (every step runs the whole
        model; the no-fill arm keeps its filled rows hidden from the late layers), until the
        end token, ``max_new_tokens`` or ``stop(tokens)``."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}: generate at least one token "
                             "(the first comes from the prefill's own logits)")
        eos = set(eos_token_id if isinstance(eos_token_id, (list, tuple)) else
                  [eos_token_id] if eos_token_id is not None else [])
        feeder, logits = Feeder(self, pre), pre.last_logits
        out: list[int] = []
        for step in range(max_new_tokens):
            token = int(logits.argmax())
            out.append(token)
            if token in eos or step == max_new_tokens - 1 or (stop is not None and stop(out)):
                break
            logits = feeder.push(token)
        return out


class Feeder:
    """Feeds tokens through a prefilled cache one at a time, every step at full depth (the
    no-fill arm keeps its filled rows hidden from the late layers through the late walk's
    ``visible`` mask)."""

    def __init__(self, engine: Engine, pre: Prefill):
        self.engine, self.cache, self.visible = engine, pre.cache, pre.visible
        self.split = pre.plan.split if pre.plan is not None else None
        self.n = int(pre.rows[-1]) + 1

    @torch.inference_mode()
    def push(self, token: int) -> torch.Tensor:
        """Logits (vocab,) after feeding ``token``."""
        eng = self.engine
        ids = torch.tensor([[token]], device=eng.model.device)
        if self.visible is None:
            logits = eng.model(input_ids=ids, cache=self.cache, use_cache=True).logits[0, -1]
        else:
            x_split, _ = eng.lower(ids, self.split, self.cache)
            ctx = Late.step(eng.adapter, self.split, x_split, self.cache, base=self.n,
                            visible=self.visible)
            h = late.run(ctx, x_split)
            self.visible = torch.cat([self.visible, self.visible.new_ones(1)])
            logits = eng.adapter.logits(h)[0, -1]
        self.n += 1
        return logits


def _check_ids(ids: torch.Tensor) -> None:
    """One sequence of token ids, shape (1, n) with n >= 1."""
    if not isinstance(ids, torch.Tensor) or ids.ndim != 2 or ids.shape[0] != 1 or ids.shape[1] < 1:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"input_ids must have shape (1, n) with n >= 1, got {shape}: RidgeFill "
                         "prefills one sequence at a time; loop over a batch (or pass ids[None] "
                         "for a 1-D tensor)")


def _checked_rows(logits_rows: int, computed: int) -> int:
    """``logits_rows`` checked against the ``computed`` rows that ran every layer."""
    if not 1 <= logits_rows <= computed:
        raise ValueError(f"logits_rows={logits_rows}: only {computed} rows ran every layer; ask "
                         f"for 1 to {computed} (or None: all of them), e.g. the scored stretch "
                         "inside the exact tail")
    return logits_rows
