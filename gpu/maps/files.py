"""RidgeFill map files (paper section 2.2, "Size and cost"): safetensors holding, per late
layer, the map in bf16 and in int8 with one scale per 128 weights of each row (the published
projector layout), the bias in fp32, and a metadata block that ties the maps to one model and
one split."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from rfmodel.atomic import atomic_path
from rfmodel.maps import quantize_int8

from ..version import __version__
from ..core.fills import MAP_KINDS
from ..core.models import fingerprint as model_fingerprint
from .advice import read_advice

FORMAT = "ridgefill-maps/1"
GROUP = 128


def save_maps(path: str | Path, maps: dict[int, tuple[np.ndarray, np.ndarray]], meta: dict,
              unigram: np.ndarray | None = None,
              delta_M: dict[int, np.ndarray] | None = None) -> Path:
    """Write ``{layer: (A (d_out, d_in), b)}`` with bf16 and int8 copies; atomically.
    ``delta_M`` {GDN layer: (H_v, d_k, d_v)}: the terminal-state correction (paper 2.3), fp32."""
    tensors: dict[str, torch.Tensor] = {}
    for layer, (A, b) in sorted(maps.items()):
        A32 = np.ascontiguousarray(A, dtype=np.float32)
        tensors[f"layers.{layer}.weight_bf16"] = torch.from_numpy(A32).to(torch.bfloat16)
        codes, scales = quantize_int8(A32)
        tensors[f"layers.{layer}.weight_int8"] = torch.from_numpy(np.ascontiguousarray(codes))
        tensors[f"layers.{layer}.scales"] = torch.from_numpy(np.ascontiguousarray(scales, np.float32))
        tensors[f"layers.{layer}.bias"] = torch.from_numpy(np.ascontiguousarray(b, np.float32))
    if unigram is not None:
        tensors["unigram_counts"] = torch.from_numpy(np.asarray(unigram, np.int64))
    for layer, d in sorted((delta_M or {}).items()):
        tensors[f"layers.{layer}.delta_M"] = torch.from_numpy(np.ascontiguousarray(d, np.float32))
    if delta_M:
        meta = {**meta, "delta_M_layers": sorted(int(k) for k in delta_M)}
    meta = {**meta, "format": FORMAT, "software": f"ridgefill {__version__}",
            "layers": sorted(int(k) for k in maps), "sha256": _digest(tensors)}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={"ridgefill": json.dumps(meta, sort_keys=True)})
    return Path(path)


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name and bytes: safetensors itself has no checksum."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def dequantize(codes: torch.Tensor, scales: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """int8 codes times their per-128 group scale (same arithmetic as rfmodel.maps)."""
    d_in = codes.shape[1]
    return (codes.to(torch.float32) * scales.repeat_interleave(GROUP, dim=1)[:, :d_in]).to(dtype)


@dataclass
class MapSet:
    """Loaded maps; ``predict(layer, x_split)`` is x_hat_l = A_l x_S + b_l (paper 2.2).

    precision "bf16" or "int8"; ``resident=False`` keeps only the stored tensors and converts
    one layer at a time on the fly (identical outputs, less memory).
    """

    split: int
    meta: dict
    tensors: dict[str, torch.Tensor]
    precision: str = "bf16"
    resident: bool = True
    dtype: torch.dtype = torch.float32
    device: torch.device = torch.device("cpu")
    unigram: np.ndarray | None = None     # token counts of the calibration text (rarity)
    delta_M: dict[int, torch.Tensor] = field(default_factory=dict)  # GDN layer -> DeltaM (2.3)
    advice: dict | None = None            # the configuration advised for them (gpu.maps.advice)
    path: Path | None = None              # the file they were loaded from
    _ready: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    _stack: tuple[torch.Tensor, torch.Tensor] | None = None

    def __post_init__(self):
        if self.precision not in ("bf16", "int8"):
            raise ValueError(f"precision={self.precision!r}: choose 'bf16' or 'int8'")
        if self.resident:  # one stack (layers in order) that every layer's map is a view of
            A, b = zip(*(self._weights(l) for l in self.layers))
            self._stack = (torch.cat(A), torch.cat(b))
            d = A[0].shape[0]
            self._ready = {l: (self._stack[0][i * d:(i + 1) * d], self._stack[1][i * d:(i + 1) * d])
                           for i, l in enumerate(self.layers)}
            self.tensors = {}

    @property
    def layers(self) -> list[int]:
        return list(self.meta["layers"])

    @property
    def kind(self) -> str:
        """What the maps predict (gpu.core.fills.MAP_KINDS); files written before kinds are "ridge"."""
        return self.meta.get("kind", "ridge")

    def _weights(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = self.tensors
        if self.precision == "bf16":
            A = t[f"layers.{layer}.weight_bf16"].to(self.dtype)
        else:
            A = dequantize(t[f"layers.{layer}.weight_int8"], t[f"layers.{layer}.scales"], self.dtype)
        return A.to(self.device), t[f"layers.{layer}.bias"].to(self.device, self.dtype)

    def matrix(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``layer``'s map (A, b) at this set's precision, dtype and device."""
        return self._ready[layer] if self.resident else self._weights(layer)

    def predict(self, layer: int, x_split: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x_split, *self.matrix(layer))

    def predict_stacked(self, layers: tuple[int, ...], x_split: torch.Tensor) -> torch.Tensor:
        """``predict`` for several layers in one matrix product (the batched fill):
        (len(layers), *x_split.shape). Resident maps are stored stacked, so a run of
        consecutive layers multiplies a view of that stack; other sets are gathered."""
        if not self.resident:
            return torch.stack([self.predict(l, x_split) for l in layers])
        first = self.layers.index(layers[0])
        if tuple(self.layers[first:first + len(layers)]) == tuple(layers):
            d = self._stack[0].shape[0] // len(self.layers)
            A, b = (t[first * d:(first + len(layers)) * d] for t in self._stack)
        else:
            A = torch.cat([self._ready[l][0] for l in layers])
            b = torch.cat([self._ready[l][1] for l in layers])
        y = torch.nn.functional.linear(x_split, A, b)                 # (..., n_layers * d)
        return y.unflatten(-1, (len(layers), -1)).movedim(-2, 0)

    def nbytes(self) -> int:
        """Size of the maps as stored at this precision (what a deployment keeps)."""
        per = 2 if self.precision == "bf16" else 1
        n = 0
        for layer in self.layers:
            d_out, d_in = self.meta["d_out"], self.meta["d_in"]
            n += d_out * d_in * per + d_out * 4
            if self.precision == "int8":
                n += d_out * -(-d_in // GROUP) * 4
        return n


def load_maps(path: str | Path, model: torch.nn.Module | None = None, *,
              split: int | None = None, precision: str = "bf16", resident: bool = True,
              fingerprint: str | None = None, dtype: torch.dtype | None = None,
              device=None) -> MapSet:
    """Load a map file for ``model`` (a stock transformers causal LM): check that it was fitted
    for this model's weights (gpu.core.models.fingerprint: at any load dtype or device), for
    ``split`` when given, and that it holds a map for every late layer; the maps then run at
    the model's dtype on its device. Without ``model``, ``fingerprint``/``dtype``/``device``
    say the same explicitly (default: no fingerprint check, fp32 on the CPU)."""
    path = Path(path)
    n_layers = None
    if model is not None:
        fingerprint = model_fingerprint(model) if fingerprint is None else fingerprint
        dtype = model.dtype if dtype is None else dtype
        device = model.device if device is None else device
        n_layers = int(model.config.get_text_config().num_hidden_layers)
    dtype = torch.float32 if dtype is None else dtype
    device = "cpu" if device is None else device
    fix = "refit with `ridgefill fit --model M --splits S --out FILE`"
    if not path.is_file():
        raise FileNotFoundError(f"map file {path} does not exist; {fix}")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open
        with safe_open(str(path), "pt") as f:
            raw = (f.metadata() or {}).get("ridgefill")
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise ValueError(f"map file {path} is truncated or corrupted ({e}); {fix}") from None
    if raw is None:
        raise ValueError(f"{path} is a safetensors file but not a RidgeFill map file; {fix}")
    meta = json.loads(raw)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path} has format {meta.get('format')!r}, expected {FORMAT}; {fix}")
    if meta.get("kind", "ridge") not in MAP_KINDS:
        raise ValueError(f"{path} holds maps of kind {meta.get('kind')!r}, which this version "
                         f"does not know ({', '.join(MAP_KINDS)}); upgrade ridgefill or {fix}")
    if meta.get("sha256") not in (None, _digest(tensors)):
        raise ValueError(f"map file {path} is corrupted (its tensors do not match the checksum "
                         f"written with them); {fix}")
    missing = [l for l in meta["layers"] if f"layers.{l}.bias" not in tensors]
    missing += [l for l in meta.get("delta_M_layers", []) if f"layers.{l}.delta_M" not in tensors]
    if missing:
        raise ValueError(f"map file {path} lacks layers {missing}: it is corrupted; {fix}")
    if fingerprint is not None and meta.get("fingerprint") != fingerprint:
        raise ValueError(
            f"maps in {path} were fitted for model {meta.get('model')!r} "
            f"(fingerprint {meta.get('fingerprint')}), not this model ({fingerprint}); "
            f"fit maps for this model with `ridgefill fit --model ...`")
    if split is not None and int(meta["split"]) != int(split):
        raise ValueError(f"maps in {path} are for split {meta['split']}, not {split}; "
                         f"use --split {meta['split']} or fit maps for split {split}")
    if n_layers is not None:
        uncovered = sorted(set(range(int(meta["split"]) + 1, n_layers)) - set(meta["layers"]))
        if uncovered:
            raise ValueError(f"map file {path} holds no map for late layers {uncovered} of this "
                             f"{n_layers}-layer model; {fix}")
    unigram = tensors.pop("unigram_counts", None)
    delta_M = {int(l): tensors.pop(f"layers.{l}.delta_M").to(device)
               for l in meta.get("delta_M_layers", [])}
    return MapSet(int(meta["split"]), meta, tensors, precision, resident, dtype,
                  torch.device(device), None if unigram is None else unigram.numpy(),
                  delta_M, read_advice(path), path)
