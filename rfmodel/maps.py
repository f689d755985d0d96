"""Map application and storage formats: float, bf16 and int8 (paper §2.2, "Size and cost").

A map predicts a late layer's input from the split state, ``x_hat = A x_S + b``; with rows as
states this is ``x_hat = x @ A.T + b`` (:func:`apply_map`).

int8 layout (the published projector layout): ``codes`` int8 ``(d_out, d_in)`` and ``scales``
float32 ``(d_out, ceil(d_in / 128))``, one scale per group of 128 consecutive weights of a row
(the last group may be shorter). ``scale = absmax / 127`` rounded to float32; a group whose
absmax is 0 -- or so small that absmax / 127 is not a normal float32 -- gets scale 1.0 (its
codes are then 0, or round to 0). ``codes = round_half_to_even(W / scale)`` clamped to
[-127, 127], with the division done in float64 on the float32 scale. The bias stays float.

Error bound (:func:`int8_error_bound`): the code rounding leaves ``|W - codes*scale| <=
scale/2`` exactly; forming the float32 product ``codes*scale`` adds at most half a float32
ulp of a value <= 127*scale, i.e. ``127*scale*2**-24``. So ``|W - dequantize| <=
scale * (1/2 + 127 * 2**-24)`` elementwise, for W given as float32.

bf16: :func:`round_bf16` rounds float32 values to the nearest bfloat16 (ties to even on the
bit pattern, NaN stays NaN, overflow goes to inf, as ``torch.Tensor.to(torch.bfloat16)``).
"""
from __future__ import annotations

import numpy as np

from rfmodel import _validate as _v

__all__ = [
    "GROUP",
    "apply_map",
    "quantize_int8",
    "dequantize_int8",
    "int8_error_bound",
    "round_bf16",
    "float32_to_bf16_bits",
    "bf16_bits_to_float32",
]

GROUP = 128  # weights per int8 scale, along each row
_F32_TINY = np.finfo(np.float32).tiny


def apply_map(x: np.ndarray, A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Predicted late-layer inputs ``x @ A.T + b`` (§2.2).

    x: ``(n, d_in)`` split states; A: ``(d_out, d_in)``; b: ``(d_out,)``. Float32 inputs stay
    float32 if all are float32; otherwise float64. Returns ``(n, d_out)``.
    """
    xx = _v.float_array(x, "x", ndim=2)
    aa = _v.float_array(A, "A", ndim=2)
    bb = _v.float_array(b, "b", ndim=1)
    if aa.shape[1] != xx.shape[1]:
        raise ValueError(f"A must be (d_out, d_in) with d_in = x.shape[1] = {xx.shape[1]}; "
                         f"got A {aa.shape} for x {xx.shape}.")
    if bb.shape != (aa.shape[0],):
        raise ValueError(f"b must have shape ({aa.shape[0]},) to match A {aa.shape}; got {bb.shape}.")
    return xx @ aa.T + bb  # (n, d_out)


def _groups(d_in: int) -> int:
    return -(-d_in // GROUP)


def quantize_int8(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and per-128 float32 scales of a map ``W (d_out, d_in)``.

    Returns ``codes`` int8 ``(d_out, d_in)`` and ``scales`` float32
    ``(d_out, ceil(d_in/128))``; see the module docstring for the rules.
    """
    w = _v.float_array(W, "W", ndim=2).astype(np.float32)
    d_out, d_in = w.shape
    if d_out == 0 or d_in == 0:
        raise ValueError(f"W must be a non-empty (d_out, d_in) matrix; got shape {w.shape}.")
    n_groups = _groups(d_in)
    padded = np.zeros((d_out, n_groups * GROUP), dtype=np.float32)
    padded[:, :d_in] = w
    blocks = padded.reshape(d_out, n_groups, GROUP)  # (d_out, G, 128)
    absmax = np.abs(blocks).max(axis=2)  # (d_out, G), exact in float32
    scales = (absmax.astype(np.float64) / 127.0).astype(np.float32)
    scales[scales < _F32_TINY] = 1.0  # zero (or subnormal-scale) groups
    ratio = blocks.astype(np.float64) / scales.astype(np.float64)[:, :, None]
    codes = np.clip(np.rint(ratio), -127, 127).astype(np.int8)  # rint: half to even
    return codes.reshape(d_out, n_groups * GROUP)[:, :d_in].copy(), scales


def _check_codes(codes: object, scales: object) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(codes)
    if c.dtype != np.int8 or c.ndim != 2:
        raise ValueError(f"codes must be a 2-D int8 array (d_out, d_in); got {c.dtype} {c.shape}.")
    s = _v.float_array(scales, "scales", ndim=2).astype(np.float32)
    if s.shape != (c.shape[0], _groups(c.shape[1])):
        raise ValueError(f"scales must have shape (d_out, ceil(d_in/128)) = "
                         f"{(c.shape[0], _groups(c.shape[1]))} for codes {c.shape}; got {s.shape}.")
    return c, s


def dequantize_int8(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """float32 weights ``codes * scale`` (each code times its group's scale), ``(d_out, d_in)``."""
    c, s = _check_codes(codes, scales)
    per_weight = np.repeat(s, GROUP, axis=1)[:, : c.shape[1]]  # (d_out, d_in)
    return c.astype(np.float32) * per_weight


def int8_error_bound(scales: np.ndarray, d_in: int) -> np.ndarray:
    """Elementwise bound ``scale * (1/2 + 127 * 2**-24)`` on ``|W - dequantize_int8(...)|``.

    scales: ``(d_out, ceil(d_in/128))``; d_in: the map's input width. Returns float64
    ``(d_out, d_in)``: half a scale from the code rounding plus half a float32 ulp from
    forming the product (module docstring).
    """
    n = _v.integer(d_in, "d_in", minimum=1)
    s = _v.float_array(scales, "scales", ndim=2).astype(np.float64)
    if s.shape[1] != _groups(n):
        raise ValueError(f"scales must have ceil(d_in/128) = {_groups(n)} columns for d_in={n}; "
                         f"got shape {s.shape}.")
    per_weight = np.repeat(s, GROUP, axis=1)[:, :n]
    return per_weight * (0.5 + 127.0 * 2.0**-24)


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest, ties to even.

    Adds ``0x7FFF + lsb`` to the float32 bits and keeps the top 16; NaN keeps its sign and
    becomes a quiet NaN. float64 input is first rounded to float32 (so a float64 that lies
    within half a float32 ulp of a bf16 tie can round differently from a direct float64 ->
    bf16 rounding). Any shape; returns uint16 of the same shape.
    """
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    lsb = (bits >> 16) & 1
    rounded = ((bits + 0x7FFF + lsb) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16).astype(np.uint16) | np.uint16(0x0040))
    return rounded


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (uint16); exact. Any shape."""
    b = np.asarray(bits)
    if b.dtype != np.uint16:
        raise ValueError(f"bits must be uint16 bfloat16 patterns; got dtype {b.dtype}.")
    return (b.astype(np.uint32) << 16).view(np.float32)


def round_bf16(W: np.ndarray) -> np.ndarray:
    """Values of W rounded to bfloat16 (nearest, ties to even), returned as float32."""
    return bf16_bits_to_float32(float32_to_bf16_bits(W))
