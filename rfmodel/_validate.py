"""Argument checks for rfmodel's public entry points.

Public functions validate once, here, and raise ``ValueError`` naming the argument, showing the
bad value or shape, and saying how to fix it (STYLE.md, "Errors"). Inner workers trust inputs.
"""
from __future__ import annotations

import numbers

import numpy as np


def show(x: object) -> str:
    """A short repr of a bad value for an error message."""
    text = np.array2string(np.asarray(x), threshold=6, precision=6) if np.ndim(x) else repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def float_array(
    x: object,
    name: str,
    *,
    ndim: int | None = None,
    dtype: type | None = None,
    shape: tuple[int | None, ...] | None = None,
) -> np.ndarray:
    """``x`` as a finite floating array (keeping float32/float64 unless ``dtype`` is given).

    ``shape`` entries of None match any size. Raises ValueError naming ``name`` on a wrong
    number of axes, a wrong shape, or any NaN/inf entry.
    """
    try:
        arr = np.asarray(x)
        if dtype is not None:
            arr = arr.astype(dtype, copy=False)
        elif arr.dtype not in (np.float32, np.float64):
            arr = arr.astype(np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be an array of real numbers; got {show(x)} ({err}).") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} axes; got shape {arr.shape}.")
    if shape is not None:
        ok = arr.ndim == len(shape) and all(s is None or s == a for s, a in zip(shape, arr.shape))
        if not ok:
            want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} must have shape {want}; got {arr.shape}.")
    if arr.size and not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise ValueError(
            f"{name} must be finite (no NaN or inf); got {bad} non-finite entries in an array "
            f"of shape {arr.shape}."
        )
    return arr


def integer(x: object, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``x`` as a Python int in [minimum, maximum]."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise ValueError(f"{name} must be an integer; got {show(x)}.")
    val = int(x)
    if (minimum is not None and val < minimum) or (maximum is not None and val > maximum):
        lo = "-inf" if minimum is None else str(minimum)
        hi = "inf" if maximum is None else str(maximum)
        raise ValueError(f"{name} must lie in [{lo}, {hi}]; got {val}.")
    return val


def index_array(x: object, name: str, *, n: int) -> np.ndarray:
    """``x`` as a sorted unique int64 array of row indices in [0, n)."""
    if x is None:
        return np.zeros(0, dtype=np.int64)
    if isinstance(x, (set, frozenset)):
        x = sorted(x)
    arr = np.asarray(x)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be integer row indices; got dtype {arr.dtype}.")
    arr = arr.astype(np.int64).ravel()
    if arr.min() < 0 or arr.max() >= n:
        raise ValueError(
            f"{name} must hold row indices in [0, {n}); got min {arr.min()}, max {arr.max()}."
        )
    return np.unique(arr)


def choice(x: object, name: str, options: tuple) -> object:
    """One of a fixed set of options."""
    if x not in options:
        raise ValueError(f"{name} must be one of {options}; got {x!r}.")
    return x


def unit_share(x: object, name: str) -> float:
    """A finite float in [0, 1]."""
    if isinstance(x, (bool, np.bool_)) or np.ndim(x) != 0:
        raise ValueError(f"{name} must be a real number in [0, 1]; got {show(x)}.")
    val = float(x)  # type: ignore[arg-type]
    if not (0.0 <= val <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1]; got {val}.")
    return val
