"""One frozen configuration of a RidgeFill prefill (paper sections 2.1-2.4).

Every entry point (the Python API, the ``ridgefill`` CLI, the evaluation's arms, the
benchmark) builds a :class:`PrefillConfig` and hands it to the engine; the CLI's prefill flags
are derived from its fields (``--`` + the field name with ``_`` as ``-``, same default), so
the two cannot drift apart. The configuration is checked once, here; what depends on the
model or the maps (the split against the depth, the maps' split) is checked where those are
known (:meth:`PrefillConfig.resolve`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from .fills import FILLS, MAP_KINDS, SOURCES, describe

ROWS = ("none", "attention", "probe", "protected", "lexical", "combined", "random")
# chosen by measurement: top of gpu.lab.tools.selector_study's stated ranking on both
# built-in models, results/selectors/<model>/summary.md
DEFAULT_ROWS = "lexical"
RESCALES = ("values", "keys")
PRECISIONS = ("bf16", "int8")
FILL_ORDERS = ("auto", "batched", "layer")
# selectors that read the prompt's text (its words, pieces or question): raw ids need a tokenizer
TEXT_ROWS = ("lexical", "protected", "probe", "combined", "attention")


@dataclass(frozen=True)
class PrefillConfig:
    """How the late layers treat the prompt; ``split=None`` takes the maps' split.

    ``selector_options`` are keyword options of the ``rows`` selector (gpu.core.select), e.g.
    ``{"complete": True}`` (span completion) or ``{"count": 50, "seed": 0}`` for
    ``rows="random"``; a dict is accepted and stored as a sorted tuple of pairs.
    """

    split: int | None = field(default=None, metadata={
        "help": "split layer S (default: the maps' split)"})
    tail: int = field(default=512, metadata={
        "help": "exact tail length T in tokens (paper default 4096; 512 on the small models)"})
    fill: str = field(default="ridge", metadata={
        "choices": FILLS, "help": describe()})
    values_fill: str | None = field(default=None, metadata={
        "choices": SOURCES, "help": "the fill the filled rows' values come from (keys from "
                                    "--fill; default: the same fill)"})
    rows: str = field(default=DEFAULT_ROWS, metadata={
        "choices": ROWS, "help": f"exact prefix rows selector (default {DEFAULT_ROWS}, chosen "
                                 "by the selector study in results/selectors/)"})
    selector_options: tuple[tuple[str, Any], ...] = field(default=(), metadata={
        "help": "selector option KEY=VALUE (repeatable), e.g. complete=true, count=50"})
    rescale: str | None = field(default=None, metadata={
        "choices": RESCALES, "help": "rescale the filled values or keys (paper 2.3)"})
    rescale_rows: int = field(default=512, metadata={
        "help": "tail rows the rescale is measured on"})
    correction: bool = field(default=False, metadata={
        "help": "terminal-state correction on Gated DeltaNet layers (paper 2.3)"})
    precision: str = field(default="bf16", metadata={
        "choices": PRECISIONS, "help": "which stored map to use"})
    stream_maps: bool = field(default=False, metadata={
        "help": "convert maps one layer at a time instead of keeping them resident"})
    skip_unread: bool = field(default=True, metadata={
        "help": "give no entry to filled rows no later query can read (sliding windows)"})
    chunk: int = field(default=8192, metadata={
        "help": "rows per pass of the lower layers for longer prompts (bounds the memory that "
                "grows with length; 0: one pass, bitwise the stock forward's lower layers)"})
    fill_order: str = field(default="auto", metadata={
        "choices": FILL_ORDERS,
        "help": "batched: every late attention layer's filled entries in one stacked pass on "
                "x_S before the walk (gpu.core.batched); layer: layer by layer; auto: batched "
                "on an accelerator, layer by layer on the CPU (where `ridgefill bench` measured "
                "no gain from batching and a higher peak)"})
    compile: bool = field(default=False, metadata={
        "help": "run the late layers' dense work (norms, projections, RoPE, MLP) under "
                "torch.compile (gpu.core.compiled); the first prompt pays the compilation"})

    def __post_init__(self):
        opts = self.selector_options
        if isinstance(opts, dict):
            opts = tuple(sorted(opts.items()))
            object.__setattr__(self, "selector_options", opts)
        if not isinstance(opts, tuple) or not all(
                isinstance(o, tuple) and len(o) == 2 and isinstance(o[0], str) for o in opts):
            raise ValueError(f"selector_options={self.selector_options!r}: give a dict of "
                             "keyword options, e.g. {'complete': True}")
        _choice("fill", self.fill, FILLS)
        if self.values_fill is not None:
            _choice("values_fill", self.values_fill, SOURCES)
            if self.fill not in SOURCES:
                raise ValueError(f"values_fill={self.values_fill!r} with fill={self.fill!r}: the "
                                 "values of filled rows come from another fill only when keys "
                                 f"are filled too (fill one of {', '.join(SOURCES)})")
            if self.values_fill == self.fill:
                object.__setattr__(self, "values_fill", None)
        _choice("rows", self.rows, ROWS)
        _choice("precision", self.precision, PRECISIONS)
        _choice("fill_order", self.fill_order, FILL_ORDERS)
        if self.rescale is not None:
            _choice("rescale", self.rescale, RESCALES)
        for name in ("tail", "rescale_rows"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be at least 1 (an integer): the last "
                                 "rows of the prompt run exactly (e.g. tail=512)")
        if isinstance(self.chunk, bool) or not isinstance(self.chunk, int) or self.chunk < 0:
            raise ValueError(f"chunk={self.chunk!r} must be a row count >= 1, or 0 for one pass "
                             "of the lower layers (e.g. chunk=8192)")
        if self.split is not None and (isinstance(self.split, bool) or
                                       not isinstance(self.split, int) or self.split < 1):
            raise ValueError(f"split={self.split!r} must be a layer index >= 1 (paper default: "
                             "3/8 of depth), or None for the maps' split")
        if self.rows == "random" and int(dict(opts).get("count", 0)) < 1:
            raise ValueError("rows='random' selects a count of rows: give "
                             "selector_options={'count': N} with N >= 1 (CLI: --selector-options "
                             "count=N)")
        if self.rows != "none" and self.fill == "exact":
            object.__setattr__(self, "rows", "none")  # every row is exact: nothing to select
        if self.correction and self.fill == "identity":
            raise ValueError("correction=True with fill='identity': DeltaM is measured for the "
                             "ridge maps; use fill='ridge' or correction=False")

    # ------------------------------------------------------------------ derived
    @property
    def options(self) -> dict[str, Any]:
        """The selector's keyword options as a dict."""
        return dict(self.selector_options)

    @property
    def map_kinds(self) -> tuple[str, ...]:
        """The map kinds this configuration reads (gpu.core.fills.MAP_KINDS), keys' fill first."""
        return tuple(k for k in dict.fromkeys((self.fill, self.values_fill)) if k in MAP_KINDS)

    @property
    def needs_maps(self) -> bool:
        return bool(self.map_kinds)

    @property
    def needs_text(self) -> bool:
        """True when the row selector reads the prompt's text, not only its ids."""
        return self.rows in TEXT_ROWS

    def batched_on(self, device) -> bool:
        """Whether the filled entries are written in one batched pass on ``device``."""
        return self.fill_order == "batched" or (self.fill_order == "auto"
                                                 and batched_by_default(device))

    def replace(self, **changes) -> "PrefillConfig":
        """A copy with ``changes`` applied (and checked again)."""
        return replace(self, **changes)

    def resolve(self, n_layers: int, maps=None) -> "PrefillConfig":
        """This configuration checked against a model of ``n_layers`` and its ``maps`` (one map
        set, or {kind: map set}), with ``split=None`` replaced by the maps' split."""
        sets = [kind_of(maps, k) for k in self.map_kinds]
        given = list(maps.values()) if isinstance(maps, dict) else [] if maps is None else [maps]
        first = sets[0] if sets else given[0] if given else None  # the maps carry a split
        split = self.split if self.split is not None else getattr(first, "split", None)
        if self.fill != "exact" and split is None:
            raise ValueError(f"fill={self.fill!r} needs a split: pass split=S or maps")
        if split is not None and not 1 <= split <= n_layers - 1:
            raise ValueError(f"split={split} is outside 1..{n_layers - 1} for a {n_layers}-layer "
                             "model; choose a layer between the first and the last (paper "
                             "default: 3/8 of depth)")
        for m in sets:
            if m.split != split:
                raise ValueError(f"maps were fitted for split {m.split}, the configuration asks "
                                 f"for split {split}; fit maps for this split or use split="
                                 f"{m.split}")
            if hasattr(m, "layers"):
                missing = sorted(set(range(split + 1, n_layers)) - set(m.layers))
                if missing:
                    raise ValueError(f"the maps hold no map for late layers {missing} of this "
                                     f"{n_layers}-layer model: they were fitted for another model "
                                     "or the file is incomplete; refit with `ridgefill fit`")
        return self if split == self.split else replace(self, split=split)


def option(default, help: str, **meta):
    """A field of a frozen options dataclass whose command-line flag gpu.cli generates (its
    help and, in ``meta``, e.g. its choices), as PrefillConfig's fields carry theirs."""
    return field(default=default, metadata={"help": help, **meta})


def kind_of(maps, kind: str):
    """The map set of ``kind`` among ``maps`` (one set, or {kind: set}), or the error that
    says how to fit it."""
    fix = (f"fit them with `ridgefill fit --model M --splits S --kinds {kind} --out "
           "maps.safetensors` and pass them (CLI: --maps)")
    if maps is None:
        raise ValueError(f"fill={kind!r} needs maps: {fix}")
    found = maps.get(kind) if isinstance(maps, dict) else (
        maps if getattr(maps, "kind", "ridge") == kind else None)
    if found is None:
        have = sorted(maps) if isinstance(maps, dict) else [getattr(maps, "kind", "ridge")]
        raise ValueError(f"fill={kind!r} needs maps of kind {kind!r}, these are "
                         f"{', '.join(map(repr, have))}: {fix}")
    return found


def paper_split(n_layers: int) -> int:
    """The paper's default split, 3/8 of depth (section 2.1), at least layer 1."""
    return max(1, round(3 * n_layers / 8))


def pop_split(n_layers: int) -> int:
    """POP native's split (the paper's baseline, section 6.4): identity fill of the last
    floor(L/3) layers, from L - floor(L/3)."""
    return n_layers - n_layers // 3


def batched_by_default(device) -> bool:
    """``fill_order='auto'``: batched on an accelerator, layer by layer on the CPU (torch is
    imported here so that the configuration loads without it)."""
    import torch
    return torch.device(device).type != "cpu"


def _choice(name: str, value, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r}: choose one of {', '.join(map(repr, allowed))}")

