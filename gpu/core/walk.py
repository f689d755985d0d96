"""The context of one walk through the late layers split..L-1 (paper sections 2.1-2.3), in two
frozen parts: :class:`Late`, the rows and the cache the walk runs over (gpu.core.late), and
:class:`Filling`, what the filled rows write (gpu.core.late and gpu.core.batched). A walk is
built by :meth:`Late.prefill` (computed and filled rows) or :meth:`Late.step` (every new row
computed: decoding, a fed answer)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from transformers import DynamicCache

from .adapters import Adapter
from .fills import writes

Predict = Callable[[int, torch.Tensor], torch.Tensor]  # (layer, x_S rows) -> predicted input
# (layers, x_S rows) -> predicted inputs of those layers stacked (one product: the batched fill)
PredictMany = Callable[[tuple[int, ...], torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Filling:
    """What the filled rows of one walk write (paper 2.2-2.3): keys from ``keys`` (None: the
    filled rows write nothing, e.g. no fill), values from ``values`` (None: the keys' fill),
    ``sources`` {fill: predict} each map-reading fill's predictor, ``predict_many`` the keys'
    fill's stacked one (the batched fill). ``rescale`` the filled values or keys by the tail's
    norms (measured on ``rescale_rows``), ``splice`` keys / values / both from
    ``exact_cache``; ``correction`` {layer: DeltaM} the terminal-state correction on Gated
    DeltaNet layers. ``batched``: every late attention layer's filled entries in one pass
    before the walk (gpu.core.batched; not with a rescale or a splice, which read the walk's
    computed rows or another cache); None: on an accelerator only (fill_order auto)."""

    keys: str | None = None          # one of gpu.core.fills.SOURCES | None
    values: str | None = None
    sources: dict = field(default_factory=dict)
    predict_many: PredictMany | None = None
    rescale: str | None = None       # "values" | "keys"
    rescale_rows: int = 512
    splice: str | None = None        # "keys" | "values" | "both"
    exact_cache: DynamicCache | None = None
    correction: dict | None = None
    batched: bool | None = None

    def predictor(self, source: str) -> Predict:
        """``source``'s predictor, or the error that says its maps are missing."""
        predict = self.sources.get(source)
        if predict is None:
            raise ValueError(f"fill {source!r} needs maps of kind {source!r} for this walk")
        return predict


NO_FILLING = Filling()


@dataclass(frozen=True)
class Late:
    """One walk through the late layers over the new rows ``base .. base + n_new - 1``.

    ``cache=None`` writes nothing (the probe's sweep; Gated DeltaNet layers then start from an
    empty state over the computed rows only). ``visible`` hides older cache rows (the no-fill
    arm while decoding); ``received`` (n_keys,) accumulates the attention each key row receives
    from the computed rows; ``stats`` collects the correction's rho.
    """

    adapter: Adapter
    split: int
    x_split: torch.Tensor            # (1, n_new, C)
    computed: torch.Tensor           # (n_c,) row indices that run every layer
    filled: torch.Tensor             # (n_f,) row indices that only write their entry
    cache: DynamicCache | None
    filling: Filling = NO_FILLING
    base: int = 0
    tail_start: int = 0              # first tail row (the end of the prefix)
    visible: torch.Tensor | None = None
    received: torch.Tensor | None = None
    skip_unread: bool = True
    stats: dict | None = None
    # (window, n_keys) -> the attention plan of that mask: every late layer with the same
    # window reads the same rows, so its mask and block spans are built once per walk
    masks: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def prefill(cls, adapter: Adapter, split: int, x_split: torch.Tensor, computed: torch.Tensor,
                filled: torch.Tensor, cache: DynamicCache | None, filling: Filling,
                **walk) -> "Late":
        """A prefill's walk: ``computed`` rows run every layer, ``filled`` rows write what
        ``filling`` says (``walk``: base, tail_start, received, skip_unread, stats)."""
        return cls(adapter, split, x_split, computed, filled, cache, filling, **walk)

    @classmethod
    def step(cls, adapter: Adapter, split: int, x_split: torch.Tensor,
             cache: DynamicCache | None, base: int, **walk) -> "Late":
        """Every new row computed, none filled (decoding, a fed answer; ``walk``: visible,
        received)."""
        rows = torch.arange(x_split.shape[1], device=x_split.device)
        return cls(adapter, split, x_split, rows, rows[:0], cache, NO_FILLING, base=base, **walk)

    @property
    def n_new(self) -> int:
        return self.x_split.shape[1]

    @property
    def writes_filled(self) -> bool:
        return self.filling.keys is not None and self.filled.numel() > 0

    def prediction(self, layer: int, rows: torch.Tensor) -> torch.Tensor:
        """Predicted input of ``layer`` for x_S rows ``rows`` (layer S's own input is x_S)."""
        x = self.x_split[:, rows]
        if writes(self.filling.keys) == "x_split" or layer == self.split:
            return x
        return self.filling.predictor(self.filling.keys)(layer, x)
