"""Exact prefix rows on a real model (paper section 2.4 and Appendix H): the selectors of
rfmodel fed with what the engine measures (lower-layer attention, the late-layer probe).

A selector is called after the lower layers ran for every row, with the engine, the prompt,
the plan, x_S and the lower layers' cache; it returns the exact prefix rows.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import DynamicCache

from rfmodel import selectors as rs

from . import late
from .walk import Filling, Late
from .attention import attention_probs
from .config import ROWS
from .plan import Plan
from .prompt import Prompt


@dataclass
class Context:
    """What a row selector may read once the lower layers ran for every row (paper 2.4):
    ``engine`` is the gpu.core.engine.Engine that ran them (its adapter, maps and
    predictors)."""

    engine: Any
    prompt: object
    plan: Plan
    x_split: torch.Tensor
    cache: DynamicCache
    kept: dict[int, torch.Tensor]
    fill: str

REFERENCE_LAYERS = (3, 7, 11, 15)


def lower_layers(split: int) -> list[int]:
    """The reference layers 3, 7, 11, 15 that lie below the split (else the layer below it)."""
    return [l for l in REFERENCE_LAYERS if l < split] or [split - 1]


def query_window(prompt: Prompt, window: int, blind: bool) -> slice:
    """The last ``window`` prompt rows, or (question-blind) those just before the question."""
    end = prompt.question_row if blind else prompt.n
    return slice(max(end - window, 0), end)


def keep_lower(prompt: Prompt, plan: Plan, window: int, blind: bool) -> dict[int, slice]:
    """The query rows' inputs of every layer below the split (a few KB each), so that
    lower_received can fall back to a global layer the reference set lacks."""
    return {l: query_window(prompt, window, blind) for l in range(plan.split)}


def lower_received(ctx: Context, rows: slice, layers: list[int],
                   required: bool = True) -> np.ndarray | None:
    """Attention each row receives from the query ``rows`` in the chosen lower layers,
    summed over heads (paper 2.4, reference selector). Gated DeltaNet layers (hybrids) have
    no attention to read, and sliding-window layers (gemma3) neither reach the prefix from the
    last rows nor keep the keys they dropped: both are left out, and when none of ``layers``
    remains the global attention layer just below the split is read instead. When there is
    none: a ValueError, or None when the ranking is not ``required`` (the probe's budget)."""
    ad = ctx.engine.adapter
    device = ctx.x_split.device
    total = torch.zeros(ctx.plan.n, dtype=torch.float32)
    pos = torch.arange(rows.start, rows.stop, device=device)
    usable = [l for l in layers if ad.layer_info(l).kind == "attention"]
    if not usable:
        below = [l for l in range(ctx.plan.split) if ad.layer_info(l).kind == "attention"]
        usable = below[-1:]
    if not usable and not required:
        return None
    if not usable:
        raise ValueError(
            f"the attention ranking reads lower-layer attention, but no global attention layer "
            f"lies below split {ctx.plan.split} (its layers are sliding-window or Gated "
            "DeltaNet): choose rows='lexical' or 'none', or a deeper split")
    for layer in usable:
        h = ctx.kept[layer]
        cos, sin = ad.rope(h, pos[None], layer)
        q = ad.queries(layer, ad.input_norm(layer)(h), cos, sin)
        k = ctx.cache.layers[layer].keys
        key_pos = torch.arange(k.shape[2], device=device)
        allowed = key_pos[None, :] <= pos[:, None]
        info = ad.layer_info(layer)
        if info.window is not None:
            allowed &= key_pos[None, :] > pos[:, None] - info.window
        total += attention_probs(q, k, allowed, ad.scaling(layer)).sum(dim=(0, 1, 2)).float().cpu()
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

    def completed(self, rows: np.ndarray, pieces: list[str] | None,
                  n_prefix: int) -> np.ndarray:
        """``rows`` completed to whole spans of ``pieces`` when the selector asks."""
        return rs.complete_spans(rows, pieces, n_prefix) if self.complete and rows.size else rows

    def __call__(self, ctx: Context) -> np.ndarray:
        rows = self.rows(ctx)
        return self.completed(rows, ctx.prompt.pieces, ctx.plan.n_prefix) if self.complete else rows


@dataclass
class AttentionRows(Selector):
    """Top ``share`` of prefix rows by attention from the last 64 rows in layers 3/7/11/15."""

    share: float = 0.10

    def keep(self, prompt, plan):
        return keep_lower(prompt, plan, self.window, self.blind)

    def ranked(self, received: np.ndarray, n_prefix: int) -> np.ndarray:
        """The top ``share`` of the ``n_prefix`` prefix rows by the attention they received."""
        return rs.attention_ranked(received, n_prefix, self.share)

    def rows(self, ctx):
        received = lower_received(ctx, query_window(ctx.prompt, self.window, self.blind),
                                  lower_layers(ctx.plan.split))
        return self.ranked(received, ctx.plan.n_prefix)


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
        return keep_lower(prompt, plan, self.window, self.blind)

    def budget(self, ctx) -> int:
        p, n_p = ctx.prompt, ctx.plan.n_prefix
        unigram = getattr(ctx.engine.maps, "unigram", None)
        protected = (rs.protected_rows(p.pieces, p.ids[0].numpy(), unigram, n_p, 0.5)
                     if unigram is not None else np.zeros(0, np.int64))
        received = lower_received(ctx, query_window(p, self.window, self.blind),
                                  lower_layers(ctx.plan.split), required=False)
        lower = (np.zeros(0, np.int64) if received is None  # no attention layer below the split
                 else rs.attention_ranked(received, n_p, 0.20))
        return rs.probe_budget(n_p, protected, rs.digit_rows(p.pieces, n_p), lower, self.factor)

    def late_received(self, ctx) -> np.ndarray:
        n, n_p = ctx.plan.n, ctx.plan.n_prefix
        end = ctx.prompt.question_row if self.blind else n
        device = ctx.x_split.device
        received = torch.zeros(n, device=device)
        if end <= n_p:  # blind, question longer than the tail: no probe row before it
            return received.cpu().numpy().astype(np.float64)
        probe = torch.arange(max(end - self.probe_window, n_p), end, device=device)
        keys = "identity" if ctx.fill == "identity" else "ridge"
        filling = Filling(keys=keys, sources={"ridge": ctx.engine.predict_input},
                          predict_many=ctx.engine.predict_inputs)
        sweep = Late.prefill(ctx.engine.adapter, ctx.plan.split, ctx.x_split, probe,
                             torch.arange(n_p, device=device), None, filling,
                             tail_start=int(probe.min()), received=received)
        late.run(sweep, ctx.x_split[:, probe])
        return received.cpu().numpy().astype(np.float64)

    def rows(self, ctx):
        n_p = ctx.plan.n_prefix
        E = self.budget(ctx)
        lexical = LexicalRows(window=self.window, blind=self.blind).rows(ctx)
        lexical = lexical[: int(0.05 * n_p)]
        rows = rs.probe_rows(self.late_received(ctx), n_p, E, reserved=lexical)
        special = ctx.prompt.special[ctx.prompt.special < n_p]
        return np.union1d(rows, special).astype(np.int64)


def _runs(rows: np.ndarray) -> list[np.ndarray]:
    """Sorted rows cut into runs of consecutive rows."""
    if rows.size == 0:
        return []
    return np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1)


@dataclass
class CombinedRows(Selector):
    """Every base rule under one row budget: ``floor(cap * n_prefix)`` rows at most,
    filled in priority order by whole units, each completed to its words and digit runs
    (``complete``) and skipped when it no longer fits, so the cap always holds and no number is
    ever half exact:

    1. special tokens of the prefix;
    2. lexical-net runs (sentences sharing a rare 4-word run with the last ``window`` rows),
       best ranked first;
    3. digit runs, best ranked first, each with the ``lead`` rows before it (the clause that
       names the number: "the special magic number for X is:");
    4. protected rare tokens (rarest ``rare_share`` of the eligible classes), best ranked first;
    5. the remaining budget by the ranking alone.

    The ranking is lower-layer attention from the last ``window`` rows (``rank="attention"``,
    nearly free) or the two-sweep probe's late-layer attention (``rank="probe"``: one more
    late sweep of ``probe_window`` rows). ``blind`` hides the question from every part.
    """

    cap: float = 0.10
    rank: str = "attention"
    lead: int = 12
    rare_share: float = 0.25
    max_run: int = 32
    probe_window: int = 256
    complete: bool = True
    parts: tuple = ("special", "lexical", "digits", "protected", "ranked")

    def keep(self, prompt, plan):
        return keep_lower(prompt, plan, self.window, self.blind)

    def scores(self, ctx) -> np.ndarray:
        if self.rank == "probe":
            return ProbeRows(window=self.window, blind=self.blind,
                             probe_window=self.probe_window).late_received(ctx)
        if self.rank != "attention":
            raise ValueError(f"CombinedRows rank {self.rank!r}: choose 'attention' or 'probe'")
        return lower_received(ctx, query_window(ctx.prompt, self.window, self.blind),
                              lower_layers(ctx.plan.split))

    def units(self, ctx, score: np.ndarray) -> list[np.ndarray]:
        """Candidate units (row arrays) in priority order."""
        p, n_p = ctx.prompt, ctx.plan.n_prefix
        n_q = p.question_row if self.blind else p.n
        sc = score[:n_p]

        def best_first(units):
            return sorted(units, key=lambda u: (-float(sc[u].max()), int(u[0])))

        out: list[np.ndarray] = []
        for part in self.parts:
            if part == "special":
                out += [np.array([r], np.int64) for r in p.special[p.special < n_p].tolist()]
            elif part == "lexical":
                lex = rs.lexical_net(p.text, p.spans[:n_q], min(n_p, n_q), self.window,
                                     special_rows=p.special[p.special < n_q],
                                     cap_share=self.cap)
                out += best_first(_runs(lex[lex < n_p]))
            elif part == "digits":
                group = rs.word_groups(list(p.pieces[:n_p]))
                digits = rs.digit_rows(p.pieces, n_p)
                runs = []
                for g in np.unique(group[digits]):
                    members = np.flatnonzero(group == g)
                    runs.append(np.arange(max(int(members[0]) - self.lead, 0),
                                          int(members[-1]) + 1, dtype=np.int64))
                out += best_first(runs)
            elif part == "protected":
                unigram = getattr(ctx.engine.maps, "unigram", None)
                if unigram is not None:
                    prot = rs.protected_rows(p.pieces, p.ids[0].numpy(), unigram, n_p,
                                             self.rare_share)
                    out += best_first([np.array([r], np.int64) for r in prot.tolist()])
            elif part == "ranked":
                order = np.lexsort((np.arange(n_p), -sc))
                out += [np.array([r], np.int64) for r in order.tolist()]
            else:
                raise ValueError(f"CombinedRows part {part!r}: choose from special, lexical, "
                                 "digits, protected, ranked")
        return out

    def rows(self, ctx):
        n_p = ctx.plan.n_prefix
        budget = rs.row_budget(self.cap, n_p)
        if budget == 0:
            return np.zeros(0, np.int64)
        units = self.units(ctx, self.scores(ctx))
        return rs.combine_units(budget, units, ctx.prompt.pieces if self.complete else None,
                                n_p, self.max_run)

    def __call__(self, ctx):
        return self.rows(ctx)  # completion happens unit by unit, inside the budget


def make(name: str, **kw) -> Selector | None:
    """A selector by its CLI name (``--rows``)."""
    table = {"attention": AttentionRows, "probe": ProbeRows, "protected": ProtectedRows,
             "lexical": LexicalRows, "combined": CombinedRows, "random": RandomRows}
    if name == "none":
        return None
    if name not in table:
        raise ValueError(f"--rows {name!r}: choose one of {ROWS}")
    return table[name](**kw)
