"""The context of one walk through the late layers split..L-1 (paper sections 2.1-2.3): what
gpu.core.late runs and gpu.core.batched writes the filled entries from, in one frozen
:class:`Late`."""
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
class Late:
    """One walk through the late layers.

    ``cache=None`` writes nothing (the probe's sweep; Gated DeltaNet layers then start from an
    empty state over the computed rows only). ``fill`` None: filled rows write nothing (no
    fill, decoding). ``visible`` hides older cache rows (the no-fill arm while decoding);
    ``received`` (n_keys,) accumulates the attention each key row receives from the computed
    rows; ``values_fill``: the filled rows' values come from that fill (keys from ``fill``),
    ``sources`` {fill: predict} the map-reading fills' predictors; ``correction`` {layer: DeltaM} is the terminal-state correction on those GDN layers,
    whose rho goes to ``stats["rho"]``. ``batched``: the filled entries of every late
    attention layer are written in one pass before the walk (gpu.core.batched; not with a
    rescale or a splice, which read the walk's computed rows or another cache).
    """

    adapter: Adapter
    predict: Predict
    split: int
    x_split: torch.Tensor            # (1, n_new, C)
    computed: torch.Tensor           # (n_c,) row indices that run every layer
    filled: torch.Tensor             # (n_f,) row indices that only write their entry
    cache: DynamicCache | None
    fill: str | None                 # one of gpu.core.fills.SOURCES | None (filled rows write nothing)
    base: int = 0
    tail_start: int = 0              # first tail row (the end of the prefix)
    rescale: str | None = None       # "values" | "keys" (paper 2.3)
    rescale_rows: int = 512
    splice: str | None = None        # "keys" | "values" | "both" from ``exact_cache``
    exact_cache: DynamicCache | None = None
    visible: torch.Tensor | None = None
    received: torch.Tensor | None = None
    skip_unread: bool = True
    correction: dict | None = None
    stats: dict | None = None
    batched: bool | None = None      # None: batched on an accelerator only (fill_order auto)
    predict_many: PredictMany | None = None
    values_fill: str | None = None   # values from this fill (keys from ``fill``); None: ``fill``
    sources: dict = field(default_factory=dict)  # fill -> its maps' predict (ridge, anchored, kv)
    # (window, n_keys) -> the attention plan of that mask: every late layer with the same
    # window reads the same rows, so its mask and block spans are built once per walk
    masks: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def n_new(self) -> int:
        return self.x_split.shape[1]

    @property
    def writes_filled(self) -> bool:
        return self.fill is not None and self.filled.numel() > 0

    def prediction(self, layer: int, rows: torch.Tensor) -> torch.Tensor:
        """Predicted input of ``layer`` for x_S rows ``rows`` (layer S's own input is x_S)."""
        x = self.x_split[:, rows]
        if writes(self.fill) == "x_split" or layer == self.split:
            return x
        return self.predict(layer, x)
