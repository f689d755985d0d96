"""Unicode character classes as flags per code point, for the Numba text scans.

The Numba kernels that find Appendix H's words and sentences (``rfmodel.lexical``) and the
words of token pieces (``rfmodel.selectors.word_groups``) read a text as an array of code
points and one flag byte per code point; the flags are exactly the Python predicates their
plain twins call:

- ``WORD``: ``unicodedata.category(c)[0] in "LN"`` (a letter or number: part of a word);
- ``SPACE``: ``c.isspace()``;
- ``ALNUM``: ``unicodedata.category(c)[0] in "LMN"`` (``selectors._kind``: letter or digit);
- ``DECIMAL``: ``c.isdecimal()``.

The table of the Basic Multilingual Plane is built once per process (about 0.1 s); code
points above it are looked up one by one (they are rare in text).
"""
from __future__ import annotations

import functools
import unicodedata

import numpy as np

__all__ = ["WORD", "SPACE", "ALNUM", "DECIMAL", "codepoints", "flags"]

WORD, SPACE, ALNUM, DECIMAL = 1, 2, 4, 8
_BMP = 0x10000


def _flags(c: str) -> int:
    cat = unicodedata.category(c)[0]
    return ((WORD if cat in "LN" else 0) | (SPACE if c.isspace() else 0)
            | (ALNUM if cat in "LMN" else 0) | (DECIMAL if c.isdecimal() else 0))


@functools.cache
def _bmp_table() -> np.ndarray:
    return np.array([_flags(chr(i)) for i in range(_BMP)], dtype=np.uint8)


def codepoints(text: str) -> np.ndarray:
    """``(len(text),)`` uint32 code points (lone surrogates included, as Python holds them)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def flags(cps: np.ndarray) -> np.ndarray:
    """``(n,)`` uint8 flags of code points ``cps`` (see the module docstring)."""
    table = _bmp_table()
    low = cps < _BMP
    if low.all():
        return table[cps]
    out = np.empty(cps.shape[0], dtype=np.uint8)
    out[low] = table[cps[low]]
    high = np.flatnonzero(~low)
    values, inverse = np.unique(cps[high], return_inverse=True)
    out[high] = np.array([_flags(chr(int(v))) for v in values], dtype=np.uint8)[inverse]
    return out
