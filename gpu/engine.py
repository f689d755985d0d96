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
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from transformers import DynamicCache
from transformers.cache_utils import DynamicSlidingWindowLayer

from rfmath.gating import filled_share

from .adapters import Adapter, for_model
from .plan import Plan

FILLS = ("ridge", "identity", "none", "exact")
SPLICES = ("keys", "values", "both")


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

    @property
    def last_logits(self) -> torch.Tensor:
        return self.logits[-1]


@dataclass
class Selection:
    """What a row selector may read once the lower layers ran for every row (paper 2.4)."""

    engine: "Engine"
    prompt: object
    plan: Plan
    x_split: torch.Tensor
    cache: DynamicCache
    kept: dict[int, torch.Tensor]
    fill: str


@dataclass
class _LowerPass:
    """The lower layers of one prompt, kept so that other arms at the same split reuse them."""

    ids: torch.Tensor
    split: int
    x_split: torch.Tensor
    cache: DynamicCache                # layers 0..split-1 written, nothing above
    inputs: dict[int, torch.Tensor]    # every lower layer's input, all rows (for selectors)

    def matches(self, ids: torch.Tensor, split: int) -> bool:
        return self.split == split and torch.equal(self.ids, ids)  # False on another shape


class Engine:
    """RidgeFill prefill and decoding on a Hugging Face causal LM.

    ``reuse_lower``: keep the last prompt's lower-layer pass and reuse it when the next prefill
    has the same tokens and split (an evaluation runs many arms on one prompt). The lower
    layers never see the plan, so the reuse is bitwise the same as running them again; off by
    default (it holds every lower layer's input until the next prompt).
    """

    def __init__(self, model, maps: Predictor | None = None, reuse_lower: bool = False):
        self.model = model
        self.adapter: Adapter = for_model(model)
        self.maps = maps
        self.reuse_lower = reuse_lower
        self._last: _LowerPass | None = None

    # ------------------------------------------------------------------ lower layers
    @torch.inference_mode()
    def lower(self, ids: torch.Tensor, split: int, cache: DynamicCache,
              keep: dict[int, slice] | None = None) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Run layers 0..split-1 with the model's own forward; return x_split (1, n, d).

        ``keep`` asks for the inputs of chosen lower layers (rows sliced), for selectors.
        """
        box: dict = {}

        def stop(module, args, kwargs):
            box["x"] = _layer_input(args, kwargs)
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
            lower.layers[i] = _as_stock(cache.layers[i])
        self._last = _LowerPass(ids.clone(), split, inputs[split], lower,
                                {i: inputs[i] for i in range(split)})

    def _lower_prefix(self, ids: torch.Tensor, split: int, keep: dict | None
                      ) -> tuple[torch.Tensor, dict[int, torch.Tensor], DynamicCache]:
        """The lower layers of a fresh prefill into a new cache (reused, see ``reuse_lower``)."""
        if not self.reuse_lower:
            self._last = None
            cache = DynamicCache(config=self.model.config)
            x_split, kept = self.lower(ids, split, cache, keep)
            return x_split, kept, cache
        last = self._last
        if last is None or not last.matches(ids, split):
            self._last = None  # free the previous prompt's pass before running this one
            cache = DynamicCache(config=self.model.config)
            x_split, inputs = self.lower(ids, split, cache, dict.fromkeys(range(split), slice(None)))
            last = self._last = _LowerPass(ids.clone(), split, x_split, copy.deepcopy(cache), inputs)
        else:
            cache = copy.deepcopy(last.cache)
        kept = {i: last.inputs[i][:, rows] for i, rows in (keep or {}).items()}
        return last.x_split, kept, cache

    # ------------------------------------------------------------------ prefill
    @torch.inference_mode()
    def prefill(self, ids: torch.Tensor, plan: Plan | None, fill: str = "ridge", *,
                rescale: str | None = None, rescale_rows: int = 512,
                splice: str | None = None, exact_cache: DynamicCache | None = None,
                skip_unread: bool = True, selector=None, prompt=None,
                logits_rows: int | None = None, correction: bool | dict = False) -> Prefill:
        """Prefill ``ids`` (shape (1, n)) under ``plan`` with one of the arms of paper Table 3.

        fill: "exact" (stock forward), "ridge" (x_l = A_l x_S + b_l), "identity" (x_l = x_S,
        POP's fill), "none" (filled rows get no late-layer cache entry).
        rescale: None | "values" | "keys" (paper 2.3), measured on the first ``rescale_rows``
        tail rows. splice: replace filled keys/values/both by those of ``exact_cache``.
        selector: chooses exact prefix rows after the lower layers ran (gpu.select), reading
        ``prompt``; the chosen rows replace ``plan.exact_rows``. logits_rows: logits of the last
        that many computed rows (1: generation, timing; a scored stretch's length: loss),
        None: of every computed row. At a 262K vocabulary each row costs 1 MiB, so an 8K
        prompt's every-row logits alone take 8 GiB.
        correction: the terminal-state correction on Gated DeltaNet late layers (paper 2.3):
        True takes DeltaM from the maps (``ridgefill fit --correction``); a dict
        {layer: DeltaM (H_v, d_k, d_v)} gives it explicitly. Applies to the ridge fill (DeltaM
        is measured for the maps); a no-op when no row is filled into the state (exact, none).
        """
        if fill not in FILLS:
            raise ValueError(f"fill={fill!r}: choose one of {FILLS}")
        if splice is not None and (splice not in SPLICES or exact_cache is None):
            raise ValueError(f"splice={splice!r} needs one of {SPLICES} and an exact_cache")
        if fill == "ridge" and self.maps is None:
            raise ValueError("fill='ridge' needs maps: fit them with `ridgefill fit` and pass --maps")
        if fill == "ridge" and plan is not None and self.maps.split != plan.split:
            raise ValueError(f"maps were fitted for split {self.maps.split}, the plan asks for "
                             f"split {plan.split}; fit maps for this split or use --split "
                             f"{self.maps.split}")
        deltas = self._deltas(correction, fill)
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
        x_split, kept, cache = self._lower_prefix(ids, plan.split, keep)
        if selector is not None:
            ctx = Selection(self, prompt, plan, x_split, cache, kept, fill)
            plan = plan.with_rows(selector(ctx))
        computed = torch.as_tensor(plan.computed, device=ids.device)
        filled = torch.as_tensor(plan.filled, device=ids.device)
        stats: dict = {}
        h = self.late(x_split, x_split[:, computed], computed, filled, cache, fill,
                      base=0, rescale=rescale, rescale_rows=rescale_rows, plan=plan,
                      splice=splice, exact_cache=exact_cache, skip_unread=skip_unread,
                      correction=deltas, stats=stats)
        visible = None
        if fill == "none":  # filled rows have no late-layer entry; decoding must not see them
            visible = torch.zeros(n, dtype=torch.bool, device=ids.device)
            visible[computed] = True
        if logits_rows is not None:
            k = _checked_rows(logits_rows, computed.numel())
            h, computed = h[:, -k:], computed[-k:]
        logits = self.adapter.logits(h)[0]
        return Prefill(cache, logits, computed, plan, fill, visible,
                       seconds=time.perf_counter() - start, info=stats)

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

    # ------------------------------------------------------------------ late layers
    def _predict(self, layer: int, split: int, x: torch.Tensor, fill: str) -> torch.Tensor:
        if fill == "identity" or layer == split:
            return x  # layer S's own input is x_S, exactly
        return self.maps.predict(layer, x)

    def late(self, x_split: torch.Tensor, h: torch.Tensor, computed: torch.Tensor,
             filled: torch.Tensor, cache: DynamicCache | None, fill: str, *, base: int,
             rescale: str | None = None, rescale_rows: int = 512, plan: Plan | None = None,
             splice: str | None = None, exact_cache: DynamicCache | None = None,
             visible: torch.Tensor | None = None, received: torch.Tensor | None = None,
             skip_unread: bool = True, split: int | None = None,
             correction: dict[int, torch.Tensor] | None = None,
             stats: dict | None = None) -> torch.Tensor:
        """Run layers split..L-1. New rows are positions base..base+n_new-1 of which ``computed``
        run the whole layer (hidden ``h``) and ``filled`` only write their cache entry from the
        prediction of ``x_split`` (rows indexed like positions - base).

        With ``cache=None`` nothing is written (the probe's sweep; Gated DeltaNet layers then
        start from an empty state over the computed rows only). ``received`` (n_keys,)
        accumulates the attention each key row receives from the computed rows.
        ``correction`` {layer: DeltaM}: terminal-state correction on those GDN layers;
        ``stats`` receives {"rho": {layer: [per value head]}} when it is applied.
        Returns the computed rows' hidden state after the last layer.
        """
        ad = self.adapter
        split = plan.split if plan is not None else split
        n_new = x_split.shape[1]
        device = x_split.device
        pos_new = torch.arange(base, base + n_new, device=device)
        write_filled = fill != "none" and filled.numel() > 0
        tail_start = int(computed.min()) if plan is None else plan.n_prefix
        for layer in range(split, ad.n_layers):
            info = ad.layer_info(layer)
            if info.kind == "gdn":
                dM = correction.get(layer) if correction is not None else None
                h = self._gdn(layer, split, x_split, h, computed, filled,
                              cache, fill if write_filled else None, tail_start, dM, stats)
                continue
            cos, sin = ad.rope(x_split, pos_new[None], layer)
            norm = ad.input_norm(layer)
            k = x_split.new_zeros(1, ad.config.num_key_value_heads, n_new, ad.attn(layer).head_dim)
            v = torch.zeros_like(k)
            normed = norm(h)
            kc, vc = ad.keys_values(layer, normed, cos[:, computed], sin[:, computed])
            k[:, :, computed], v[:, :, computed] = kc, vc
            rows_f = filled
            if write_filled and skip_unread and info.window is not None:
                rows_f = _read_by_someone(filled, computed, n_new, info.window)
            if write_filled and rows_f.numel():
                xf = self._predict(layer, split, x_split[:, rows_f], fill)
                kf, vf = ad.keys_values(layer, norm(xf), cos[:, rows_f], sin[:, rows_f])
                if rescale is not None:
                    kf, vf = self._rescale(layer, split, rescale, rescale_rows, x_split, h,
                                           computed, tail_start, norm, cos, sin, kf, vf, fill)
                if splice is not None:
                    ek, ev = _exact_entries(exact_cache.layers[layer], rows_f)
                    if splice in ("keys", "both"):
                        kf = ek
                    if splice in ("values", "both"):
                        vf = ev
                k[:, :, rows_f], v[:, :, rows_f] = kf, vf
            if cache is not None:
                k_all, v_all = cache.update(k, v, layer)
            else:
                k_all, v_all = k, v
            n_keys = k_all.shape[2]
            key_pos = torch.arange(base + n_new - n_keys, base + n_new, device=device)
            q_pos = pos_new[computed]
            allowed = key_pos[None, :] <= q_pos[:, None]
            if info.window is not None:
                allowed &= key_pos[None, :] > q_pos[:, None] - info.window
            seen = torch.zeros(n_keys, dtype=torch.bool, device=device)
            n_old = n_keys - n_new
            seen[:n_old] = True if visible is None else visible[visible.numel() - n_old:]
            seen[n_old + computed] = True
            if write_filled:
                seen[n_old + rows_f] = True
            allowed &= seen[None, :]
            q, gate = ad.queries_gated(layer, normed, cos[:, computed], sin[:, computed])
            if received is not None:
                probs = _attention_probs(q, k_all, allowed, ad.scaling(layer))
                received[-n_keys:] += probs.sum(dim=(0, 1, 2)).float()
            out = masked_attention(q, k_all, v_all, allowed, ad.scaling(layer))
            out = out.transpose(1, 2).reshape(1, q.shape[2], -1)
            h = ad.finish(layer, h, out) if gate is None else ad.finish(layer, h, out, gate)
        return h

    def _gdn(self, layer, split, x_split, h, computed, filled, cache, fill, tail_start, dM,
             stats):
        """One Gated DeltaNet late layer (paper 2.1, 2.3). ``fill`` None: only the computed
        rows update the state (no fill, decoding, or the probe with ``cache=None``)."""
        ad = self.adapter
        if fill is None or cache is None or filled.numel() == 0:
            rows, u = computed, h
        else:
            rows = torch.cat([computed, filled]).sort().values
            u = h.new_empty(1, rows.numel(), h.shape[-1])
            u[:, torch.searchsorted(rows, computed)] = h
            u[:, torch.searchsorted(rows, filled)] = self._predict(layer, split,
                                                                   x_split[:, filled], fill)
        normed = ad.input_norm(layer)(u)
        is_filled = torch.ones(rows.numel(), dtype=torch.bool, device=rows.device)
        is_filled[torch.searchsorted(rows, computed)] = False
        cut = int((rows < tail_start).sum())  # rows present before the end of the prefix
        if dM is None or cache is None or not bool(is_filled[:cut].any()):
            mixed = ad.mix(layer, normed, cache)
        else:
            head = ad.mix(layer, normed[:, :cut], cache)
            # rho: the filled rows' share of the state weight w_j = prod_{k>j} g_k at the end of
            # the prefix, per value head, from the gates this layer computes (Appendix H)
            log_g = ad.gdn_log_gates(layer, normed[:, :cut])[0].T.double()  # (H_v, cut)
            gates = log_g.exp().clamp_min(np.finfo(np.float64).tiny).cpu().numpy()
            rho = np.asarray(filled_share(gates, is_filled[:cut].cpu().numpy()), np.float64)
            state = cache.layers[layer].recurrent_states[0]       # (1, H_v, d_k, d_v)
            rho_t = torch.as_tensor(rho, device=state.device, dtype=torch.float32)
            state.add_((rho_t[:, None, None] * dM.to(state.device, torch.float32))[None]
                       .to(state.dtype))
            if stats is not None:
                stats.setdefault("rho", {})[layer] = rho.tolist()
            parts = [head]
            if cut < rows.numel():
                parts.append(ad.mix(layer, normed[:, cut:], cache))
            mixed = torch.cat(parts, dim=1)
        if rows is not computed:
            mixed = mixed[:, ~is_filled]
        return ad.finish_mixed(layer, h, mixed)

    def _rescale(self, layer, split, which, c, x_split, h, computed, tail_start, norm, cos, sin,
                 kf, vf, fill):
        """Value/key rescale (paper 2.3): per KV head, the ratio of the exact to the predicted
        norm averaged over the first ``c`` tail rows, applied to the filled rows' entries."""
        tail_rows = computed[computed >= tail_start][:c]
        take = torch.searchsorted(computed, tail_rows)
        k_ex, v_ex = self.adapter.keys_values(layer, norm(h[:, take]), cos[:, tail_rows],
                                              sin[:, tail_rows])
        xp = self._predict(layer, split, x_split[:, tail_rows], fill)
        k_pr, v_pr = self.adapter.keys_values(layer, norm(xp), cos[:, tail_rows], sin[:, tail_rows])
        if which == "values":
            scale = (v_ex.norm(dim=-1) / v_pr.norm(dim=-1).clamp_min(1e-12)).mean(-1)
            return kf, vf * scale[..., None, None]
        scale = (k_ex.norm(dim=-1) / k_pr.norm(dim=-1).clamp_min(1e-12)).mean(-1)
        return kf * scale[..., None, None], vf

    # ------------------------------------------------------------------ decoding
    @torch.inference_mode()
    def decode(self, pre: Prefill, max_new_tokens: int, eos_token_id=None,
               stop: Callable[[list[int]], bool] | None = None) -> list[int]:
        """Greedy decoding at full depth from the prefilled cache (every step runs the whole
        model; the no-fill arm keeps its filled rows hidden from the late layers), until the
        end token, ``max_new_tokens`` or ``stop(tokens)``."""
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
    no-fill arm keeps its filled rows hidden from the late layers through ``Engine.late``'s
    visibility mask)."""

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
            one = torch.zeros(1, dtype=torch.long, device=ids.device)
            h = eng.late(x_split, x_split, one, one[:0], self.cache, "exact", base=self.n,
                         visible=self.visible, split=self.split)
            self.visible = torch.cat([self.visible, self.visible.new_ones(1)])
            logits = eng.adapter.logits(h)[0, -1]
        self.n += 1
        return logits


def _checked_rows(logits_rows: int, computed: int) -> int:
    """``logits_rows`` checked against the ``computed`` rows that ran every layer."""
    if not 1 <= logits_rows <= computed:
        raise ValueError(f"logits_rows={logits_rows}: only {computed} rows ran every layer; ask "
                         f"for 1 to {computed} (or None: all of them), e.g. the scored stretch "
                         "inside the exact tail")
    return logits_rows


def _layer_input(args, kwargs) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


@contextmanager
def layer_inputs(adapter: Adapter, rows: dict[int, slice]):
    """Collect the input of layer i (rows ``rows[i]``) into the yielded dict while a forward
    runs inside the block."""
    got: dict[int, torch.Tensor] = {}
    handles = []
    for i, r in rows.items():
        def grab(module, args, kwargs, i=i, r=r):
            got[i] = _layer_input(args, kwargs)[:, r]
        handles.append(adapter.layers[i].register_forward_pre_hook(grab, with_kwargs=True))
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def _as_stock(layer):
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


def _exact_entries(layer, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values of positions ``rows`` from an exact cache layer (which may have been
    fed further tokens since; a sliding-window layer may keep only its last columns)."""
    held = layer.keys.shape[2]
    first = getattr(layer, "cumulative_length", held) - held  # position of column 0
    if int(rows.min()) < first:
        raise ValueError(
            f"the exact cache keeps only positions from {first} on in a sliding-window layer "
            f"but the splice needs row {int(rows.min())}: prefill the exact arm into "
            "gpu.engine.full_cache(config), which keeps every position")
    return layer.keys[:, :, rows - first], layer.values[:, :, rows - first]


def _read_by_someone(filled: torch.Tensor, computed: torch.Tensor, n: int, window: int):
    """Filled rows that some later query can read in a sliding-window layer: a computed row or
    a decoding step (positions >= n) within ``window`` after them."""
    nxt = torch.cat([computed, torch.tensor([n], device=computed.device)])
    nxt = nxt.sort().values
    idx = torch.searchsorted(nxt, filled)  # first computed/decode position >= filled row
    return filled[(nxt[idx] - filled) < window]


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


def _attention_probs(q, k, allowed, scale):
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-1, -2)) * scale
    scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)
