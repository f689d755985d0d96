"""Argument checks shared by the public functions of rfmath.

Every public function validates its inputs once, here, and raises ``ValueError`` with a message
that names the argument, repeats the bad value and says how to fix it (STYLE.md, "Errors").
The private workers after the checks trust their inputs.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np


def _show(x: Any) -> str:
    """A short repr of a bad value for an error message."""
    text = np.array2string(np.asarray(x), threshold=6, precision=6) if np.ndim(x) else repr(x)
    return text if len(text) <= 80 else text[:77] + "..."


def float_array(x: object, name: str, *, min_ndim: int = 0) -> np.ndarray:
    """``x`` as a finite float64 array with at least ``min_ndim`` axes."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"{name} must be an array of real numbers; got {_show(x)} ({err})."
        ) from None
    if arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have at least {min_ndim} axes; got shape {arr.shape}. "
            f"Pass an array with {min_ndim} or more axes."
        )
    bad = ~np.isfinite(arr)
    if bad.any():
        raise ValueError(
            f"{name} must be finite (no NaN or inf); got {int(bad.sum())} non-finite "
            f"entries in an array of shape {arr.shape}. Remove or impute them first."
        )
    return arr


def finite_scalar(x: Any, name: str) -> float:
    """``x`` as a finite Python float."""
    if isinstance(x, (bool, np.bool_)) or np.ndim(x) != 0:
        raise ValueError(f"{name} must be a real scalar; got {_show(x)}.")
    try:
        val = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real scalar; got {_show(x)}.") from None
    if not np.isfinite(val):
        raise ValueError(f"{name} must be finite; got {val}. Pass a finite number.")
    return val


def integer(x: object, name: str, *, minimum: int = 0) -> int:
    """``x`` as a Python int that is at least ``minimum``."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        if isinstance(x, (float, np.floating)) and float(x).is_integer():
            x = int(x)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}; got {_show(x)}.")
    val = int(x)
    if val < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {val}.")
    return val


def gates(g: object, name: str = "gates", *, min_ndim: int = 1) -> np.ndarray:
    """Gates as a float64 array with every entry in (0, 1]."""
    arr = float_array(g, name, min_ndim=min_ndim)
    if min_ndim >= 1 and arr.shape[-1] == 0:
        raise ValueError(
            f"{name} must have at least one row on its last axis; got shape {arr.shape}."
        )
    bad = (arr <= 0.0) | (arr > 1.0)
    if bad.any():
        raise ValueError(
            f"{name} must lie in (0, 1]; got {int(bad.sum())} entries outside it "
            f"(min {arr.min():.6g}, max {arr.max():.6g}). Pass gates after the sigmoid/exp, "
            "not log-gates or logits."
        )
    return arr


def gamma(x: object, name: str = "gamma") -> float:
    """A gate bound strictly between 0 and 1."""
    val = finite_scalar(x, name)
    if not 0.0 < val < 1.0:
        raise ValueError(
            f"{name} must satisfy 0 < {name} < 1; got {val}. The bound needs gates strictly "
            "below 1 (a gate of 1 never forgets)."
        )
    return val


def positive(x: object, name: str) -> float:
    """A finite scalar > 0."""
    val = finite_scalar(x, name)
    if val <= 0.0:
        raise ValueError(f"{name} must be > 0; got {val}. Pass a positive number.")
    return val


def unit_interval(
    x: object, name: str, *, open_left: bool = False, open_right: bool = False
) -> float:
    """A finite scalar in [0, 1] (ends optionally open)."""
    val = finite_scalar(x, name)
    lo_ok = val > 0.0 if open_left else val >= 0.0
    hi_ok = val < 1.0 if open_right else val <= 1.0
    if not (lo_ok and hi_ok):
        lo, hi = "(" if open_left else "[", ")" if open_right else "]"
        raise ValueError(f"{name} must lie in {lo}0, 1{hi}; got {val}.")
    return val


def choice(x: object, name: str, options: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if x not in options:
        raise ValueError(f"{name} must be one of {options}; got {x!r}.")
    return str(x)
