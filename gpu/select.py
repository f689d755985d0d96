"""Exact prefix rows on a real model (paper section 2.4 and Appendix H): the selectors of
rfmodel fed with what the engine measures (lower-layer attention, the late-layer probe).

A selector is called after the lower layers ran for every row, with the engine, the prompt,
the plan, x_S and the lower layers' cache; it returns the exact prefix rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rfmodel import selectors as rs

from .engine import Selection as Context
from .engine import _attention_probs
from .plan import Plan
from .prompt import Prompt

REFERENCE_LAYERS = (3, 7, 11, 15)
ROWS = ("none", "attention", "probe", "protected", "lexical", "random")


def lower_layers(split: int) -> list[int]:
    """The reference layers 3, 7, 11, 15 that lie below the split (else the layer below it)."""
    return [l for l in REFERENCE_LAYERS if l < split] or [split - 1]


def query_window(prompt: Prompt, window: int, blind: bool) -> slice:
    """The last ``window`` prompt rows, or (question-blind) those just before the question."""
    end = prompt.question_row if blind else prompt.n
    return slice(max(end - window, 0), end)


def lower_received(ctx: Context, rows: slice, layers: list[int]) -> np.ndarray:
    """Attention each row receives from the query ``rows`` in the chosen lower layers,
    summed over heads (paper 2.4, reference selector). Gated DeltaNet layers (hybrids) have
    no attention to read and are left out (all zeros when no attention layer remains)."""
    ad = ctx.engine.adapter
    total = torch.zeros(ctx.plan.n, dtype=torch.float32)
    pos = torch.arange(rows.start, rows.stop)
    for layer in layers:
        if ad.layer_info(layer).kind == "gdn":
            continue
        h = ctx.kept[layer]
        cos, sin = ad.rope(h, pos[None], layer)
        q = ad.queries(layer, ad.input_norm(layer)(h), cos, sin)
        k = ctx.cache.layers[layer].keys
        key_pos = torch.arange(k.shape[2])
        allowed = key_pos[None, :] <= pos[:, None]
        info = ad.layer_info(layer)
        if info.window is not None:
            allowed &= key_pos[None, :] > pos[:, None] - info.window
        total += _attention_probs(q, k, allowed, ad.scaling(layer)).sum(dim=(0, 1, 2)).float().cpu()
    return total.numpy().astype(np.float64)


@dataclass
class Selector:
    """Base: which lower-layer inputs the selector needs kept during the lower pass."""

    window: int = 64
    blind: bool = False      # hide the question from the selector (control, paper 6.5)
    complete: bool = False   # span completion: selected rows pull in their whole word / number

    def keep(self, prompt: Prompt, plan: Plan) -> dict[int, slice]:
        return {}

    def rows(self, ctx: Context) -> np.ndarray:
        raise NotImplementedError

    def __call__(self, ctx: Context) -> np.ndarray:
        rows = self.rows(ctx)
        if self.complete and rows.size:
            rows = rs.complete_spans(rows, ctx.prompt.pieces, ctx.plan.n_prefix)
        return rows


@dataclass
class AttentionRows(Selector):
    """Top ``share`` of prefix rows by attention from the last 64 rows in layers 3/7/11/15."""

    share: float = 0.10

    def keep(self, prompt, plan):
        return {l: query_window(prompt, self.window, self.blind) for l in lower_layers(plan.split)}

    def rows(self, ctx):
        received = lower_received(ctx, query_window(ctx.prompt, self.window, self.blind),
                                  lower_layers(ctx.plan.split))
        return rs.attention_ranked(received, ctx.plan.n_prefix, self.share)


@dataclass
class ProtectedRows(Selector):
    """Rarest quarter of the eligible token classes by calibration unigram counts."""

    rare_share: float = 0.25

    def rows(self, ctx):
        unigram = getattr(ctx.engine.maps, "unigram", None)
        if unigram is None:
            raise ValueError("--rows protected needs unigram counts: refit the maps with "
                             "`ridgefill fit` (they are stored in the map file)")
        return rs.protected_rows(ctx.prompt.pieces, ctx.prompt.ids[0].numpy(), unigram,
                                 ctx.plan.n_prefix, self.rare_share)


@dataclass
class LexicalRows(Selector):
    """Lexical-net sentences sharing a rare 4-word run with the prompt's last 64 tokens."""

    def rows(self, ctx):
        p = ctx.prompt
        n = p.question_row if self.blind else p.n
        return rs.lexical_net(p.text, p.spans[:n], min(ctx.plan.n_prefix, n), self.window,
                              special_rows=p.special[p.special < n])


@dataclass
class RandomRows(Selector):
    """Count-matched random control: ``count`` prefix rows drawn with ``seed``."""

    count: int = 0
    seed: int = 0

    def rows(self, ctx):
        return rs.random_rows(ctx.plan.n_prefix, min(self.count, ctx.plan.n_prefix), self.seed)


@dataclass
class FixedRows(Selector):
    """Given rows (e.g. another selector's choice replayed, or a needle's own rows)."""

    given: np.ndarray = None

    def rows(self, ctx):
        return np.asarray(self.given, np.int64)


@dataclass
class ProbeRows(Selector):
    """The two-sweep probe (paper 2.4, Fig. 5-6): E from the base rules, filled by the rows
    that receive the most late-layer attention from the last ``probe_window`` rows over the
    filled cache; lexical-net rows reserved inside E; special tokens on top."""

    probe_window: int = 256
    factor: float = 1.0

    def keep(self, prompt, plan):
        return {l: query_window(prompt, self.window, self.blind) for l in lower_layers(plan.split)}

    def budget(self, ctx) -> int:
        p, n_p = ctx.prompt, ctx.plan.n_prefix
        unigram = getattr(ctx.engine.maps, "unigram", None)
        protected = (rs.protected_rows(p.pieces, p.ids[0].numpy(), unigram, n_p, 0.5)
                     if unigram is not None else np.zeros(0, np.int64))
        lower = rs.attention_ranked(lower_received(ctx, query_window(p, self.window, self.blind),
                                                   lower_layers(ctx.plan.split)), n_p, 0.20)
        return rs.probe_budget(n_p, protected, rs.digit_rows(p.pieces, n_p), lower, self.factor)

    def late_received(self, ctx) -> np.ndarray:
        n, n_p = ctx.plan.n, ctx.plan.n_prefix
        end = ctx.prompt.question_row if self.blind else n
        probe = torch.arange(max(end - self.probe_window, n_p), end)
        received = torch.zeros(n)
        ctx.engine.late(ctx.x_split, ctx.x_split[:, probe], probe, torch.arange(n_p), None,
                        ctx.fill if ctx.fill != "none" else "ridge", base=0, split=ctx.plan.split,
                        received=received)
        return received.numpy().astype(np.float64)

    def rows(self, ctx):
        n_p = ctx.plan.n_prefix
        E = self.budget(ctx)
        lexical = LexicalRows(window=self.window, blind=self.blind).rows(ctx)
        lexical = lexical[: int(0.05 * n_p)]
        rows = rs.probe_rows(self.late_received(ctx), n_p, E, reserved=lexical)
        special = ctx.prompt.special[ctx.prompt.special < n_p]
        return np.union1d(rows, special).astype(np.int64)


def make(name: str, **kw) -> Selector | None:
    """A selector by its CLI name (``--rows``)."""
    table = {"attention": AttentionRows, "probe": ProbeRows, "protected": ProtectedRows,
             "lexical": LexicalRows, "random": RandomRows}
    if name == "none":
        return None
    if name not in table:
        raise ValueError(f"--rows {name!r}: choose one of {ROWS}")
    return table[name](**kw)
