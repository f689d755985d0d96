"""Exact-row selectors of paper §2.4; each returns a sorted unique int64 array of prefix rows.

The prefix is rows ``0 .. n_prefix-1``; no selector ever returns a tail row. Shares become
counts as ``floor(share * n + 1e-9)`` ("at most that share"); ties in a ranking go to the
earlier row, so every selector is deterministic.

- :func:`attention_ranked` -- the reference study's rows: the top ``share`` (10%) of prefix rows
  by attention received from the last W prompt rows (:func:`attention_received` sums the
  probabilities over layers, heads and those W queries).
- :func:`protected_rows` -- the rarest ``rare_share`` of the prefix tokens in four eligible
  classes (:func:`token_class`), by add-one unigram frequency ``(count + 1) / (total + V)``
  (ordering by ``count`` alone is the same ordering).
- :func:`digit_rows`, :func:`special_rows`, :func:`random_rows` (the count-matched control).
- :func:`probe_budget` / :func:`probe_rows` -- the 27B probe: the base rules only count E;
  the late-layer probe ranking fills E, lexical-net rows reserved inside it (Fig. 6).
- :func:`complete_spans` -- span completion: a selected row pulls in the rest of its word
  and its whole digit run, so a number is never half exact (a half-exact number is misread).
- :func:`combine` -- union of ranked lists under one row budget.
- :func:`lexical_net` -- re-exported from ``rfmodel.lexical``.

Token pieces: a word starts at a piece beginning with a space marker ``Ġ``, ``▁`` or ``' '``;
byte-level whitespace pieces (``Ċ`` newline, ``ĉ`` tab) and real whitespace count as space.
"""
from __future__ import annotations

import unicodedata

import numpy as np

from rfmodel import _validate as _v
from rfmodel import charclass, text_kernels
from rfmodel.lexical import lexical_net  # noqa: F401 -- re-exported

__all__ = [
    "attention_received",
    "attention_ranked",
    "token_class",
    "ELIGIBLE_CLASSES",
    "protected_rows",
    "digit_rows",
    "special_rows",
    "random_rows",
    "probe_budget",
    "probe_rows",
    "word_groups",
    "complete_spans",
    "combine",
    "combine_units",
    "lexical_net",
    "SPAN_BACKENDS",
]

_MARKERS = "Ġ▁ "
_SPACE_LIKE = _MARKERS + "Ċĉ\n\t\r"
ELIGIBLE_CLASSES = frozenset({"cap_start", "cap_piece", "lower_piece", "mixed"})


def _count(share: float, n: int) -> int:
    return int(np.floor(share * n + 1e-9))


def _top(scores: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """The k candidates with the largest scores (earlier row on ties), sorted by row."""
    if k <= 0 or candidates.size == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort((candidates, -scores[candidates]))  # by score desc, then row asc
    return np.sort(candidates[order[:k]]).astype(np.int64)


def _prefix(n_prefix: object) -> int:
    return _v.integer(n_prefix, "n_prefix", minimum=0)


def attention_received(attn_probs: list[np.ndarray], window: int) -> np.ndarray:
    """Attention each key row receives from the last ``window`` query rows, summed over the
    given layers and heads. attn_probs: list of ``(H, n_q, n_k)`` (same n_k; queries are the
    last n_q rows). Returns ``(n_k,)`` float64."""
    if not isinstance(attn_probs, (list, tuple)) or not attn_probs:
        raise ValueError("attn_probs must be a non-empty list of (H, n_q, n_k) arrays.")
    w = _v.integer(window, "window", minimum=1)
    arrays = [_v.float_array(p, f"attn_probs[{i}]", ndim=3) for i, p in enumerate(attn_probs)]
    n_k = arrays[0].shape[2]
    total = np.zeros(n_k)
    for i, p in enumerate(arrays):
        if p.shape[2] != n_k:
            raise ValueError(f"attn_probs[{i}] has {p.shape[2]} keys; attn_probs[0] has {n_k}.")
        total += p[:, -w:, :].sum(axis=(0, 1), dtype=np.float64)
    return total


def attention_ranked(received: np.ndarray, n_prefix: int, share: float = 0.10) -> np.ndarray:
    """Top ``floor(share * n_prefix)`` prefix rows by attention received (§2.4)."""
    n_p = _prefix(n_prefix)
    r = _v.float_array(received, "received", ndim=1, dtype=np.float64)
    if r.shape[0] < n_p:
        raise ValueError(f"received must cover the prefix: {r.shape[0]} rows < n_prefix={n_p}.")
    return _top(r, np.arange(n_p), _count(_v.unit_share(share, "share"), n_p))


def _split_piece(piece: str) -> tuple[bool, str]:
    body = piece.lstrip(_SPACE_LIKE)
    return len(body) != len(piece) and piece[0] in _MARKERS, body


def _kind(c: str) -> str:
    cat = unicodedata.category(c)[0]
    return {"L": "letter", "M": "letter", "N": "digit", "Z": "space"}.get(cat, "punct")


def token_class(piece: str) -> str:
    """Class of a token piece (§2.4, "Protected-token rows").

    Eligible: ``cap_start`` (word start, letters, first upper-case), ``cap_piece`` (word
    continuation, letters, first upper-case), ``lower_piece`` (continuation, letters, first not
    upper-case), ``mixed`` (not all letters, not all punctuation, not digits with punctuation).
    Not eligible: ``lower_start``, ``number`` (digits, possibly with punctuation), ``punct``,
    ``space`` (empty after the marker, or whitespace).
    """
    start, body = _split_piece(piece)
    kinds = {_kind(c) for c in body}
    if not body or kinds == {"space"}:
        return "space"
    if kinds == {"letter"}:
        upper = body[0].isupper()
        if start:
            return "cap_start" if upper else "lower_start"
        return "cap_piece" if upper else "lower_piece"
    if kinds <= {"punct", "space"}:
        return "punct"
    if "digit" in kinds and kinds <= {"digit", "punct", "space"}:
        return "number"
    return "mixed"


def _pieces(pieces: object, n_prefix: int) -> list[str]:
    if not isinstance(pieces, (list, tuple)) or not all(isinstance(p, str) for p in pieces):
        raise ValueError("pieces must be a list of token strings (one per row).")
    if len(pieces) < n_prefix:
        raise ValueError(f"pieces must cover the prefix: {len(pieces)} < n_prefix={n_prefix}.")
    return list(pieces)


def protected_rows(pieces: list[str], ids: np.ndarray, unigram_counts, n_prefix: int,
                   rare_share: float = 0.25) -> np.ndarray:
    """The rarest ``rare_share`` of the prefix rows in the eligible classes (§2.4).

    pieces: token strings, one per row; ids: ``(N,)`` token ids; unigram_counts: dict
    ``{id: count}`` or array indexed by id (calibration counts; missing ids count 0).
    Rarity is the add-one frequency; ``floor(rare_share * n_eligible)`` rows are kept.
    """
    n_p = _prefix(n_prefix)
    ps = _pieces(pieces, n_p)
    ids_arr = np.asarray(ids)
    if ids_arr.ndim != 1 or ids_arr.shape[0] < n_p or (ids_arr.size and ids_arr.dtype.kind not in "iu"):
        raise ValueError(f"ids must be (N,) integers covering the prefix; got {ids_arr.dtype} {ids_arr.shape}.")
    share = _v.unit_share(rare_share, "rare_share")
    eligible = np.array([r for r in range(n_p) if token_class(ps[r]) in ELIGIBLE_CLASSES], dtype=np.int64)
    if isinstance(unigram_counts, dict):
        counts = np.array([unigram_counts.get(int(ids_arr[r]), 0) for r in eligible], dtype=np.float64)
    else:
        table = np.asarray(unigram_counts)
        counts = np.array([table[ids_arr[r]] if ids_arr[r] < table.shape[0] else 0 for r in eligible],
                          dtype=np.float64)
    rarity = np.zeros(n_p)
    rarity[eligible] = -(counts + 1.0)  # larger = rarer (add-one count, negated)
    return _top(rarity, eligible, _count(share, eligible.size))


def digit_rows(pieces: list[str], n_prefix: int) -> np.ndarray:
    """Prefix rows whose piece contains a decimal digit."""
    n_p = _prefix(n_prefix)
    ps = _pieces(pieces, n_p)
    return np.array([r for r in range(n_p) if any(c.isdecimal() for c in ps[r])], dtype=np.int64)


def special_rows(ids: np.ndarray, special_ids, n_prefix: int | None = None) -> np.ndarray:
    """Rows whose id is a special token id (control, unknown, user-defined); all rows, or only
    the prefix when n_prefix is given. No cap (§2.4)."""
    ids_arr = np.asarray(ids)
    if ids_arr.ndim != 1:
        raise ValueError(f"ids must be a 1-D array of token ids; got shape {ids_arr.shape}.")
    n = ids_arr.shape[0] if n_prefix is None else min(_prefix(n_prefix), ids_arr.shape[0])
    mask = np.isin(ids_arr[:n], np.asarray(list(special_ids), dtype=np.int64))
    return np.flatnonzero(mask).astype(np.int64)


def random_rows(n_prefix: int, k: int, seed: int, exclude=None) -> np.ndarray:
    """The count-matched random control: k prefix rows drawn without replacement (not in
    ``exclude``) by ``numpy.random.default_rng(seed)``; the same seed gives the same rows."""
    n_p = _prefix(n_prefix)
    kk = _v.integer(k, "k", minimum=0)
    s = _v.integer(seed, "seed", minimum=0)
    ex = _v.index_array(exclude, "exclude", n=max(n_p, 1)) if exclude is not None else np.zeros(0, np.int64)
    candidates = np.setdiff1d(np.arange(n_p), ex)
    if kk > candidates.size:
        raise ValueError(f"k={kk} exceeds the {candidates.size} prefix rows available "
                         f"(n_prefix={n_p}, {ex.size} excluded).")
    return np.sort(np.random.default_rng(s).choice(candidates, size=kk, replace=False)).astype(np.int64)


def probe_budget(n_prefix: int, protected_rows, digit_rows, lower_attention_ranked,
                 factor: float = 1.0) -> int:
    """E: the number of rows the base rules select (§2.4, Fig. 6), times ``factor``.

    protected_rows: the rarer half of the protected-class matches
    (``protected_rows(..., rare_share=0.5)``); digit_rows: every digit token; and
    lower_attention_ranked: ``attention_ranked(received_lower, n_prefix, 0.20)``. Returns
    ``min(n_prefix, floor(factor * |union|))``.
    """
    n_p = _prefix(n_prefix)
    f = float(factor)
    if not np.isfinite(f) or f < 0:
        raise ValueError(f"factor must be a finite number >= 0; got {factor!r}.")
    union = np.union1d(np.union1d(_v.index_array(protected_rows, "protected_rows", n=max(n_p, 1)),
                                  _v.index_array(digit_rows, "digit_rows", n=max(n_p, 1))),
                       _v.index_array(lower_attention_ranked, "lower_attention_ranked", n=max(n_p, 1)))
    return min(n_p, int(np.floor(f * union.size + 1e-9)))


def probe_rows(received_late: np.ndarray, n_prefix: int, E: int, reserved=()) -> np.ndarray:
    """The probe's E rows: ``reserved`` (lexical-net rows, inside E) first, then the prefix rows
    with the most late-layer attention from the probe rows. If reserved has more than E rows,
    its E best by late attention are kept."""
    n_p = _prefix(n_prefix)
    r = _v.float_array(received_late, "received_late", ndim=1, dtype=np.float64)
    if r.shape[0] < n_p:
        raise ValueError(f"received_late must cover the prefix: {r.shape[0]} < n_prefix={n_p}.")
    e = _v.integer(E, "E", minimum=0, maximum=n_p)
    res = _v.index_array(reserved, "reserved", n=max(n_p, 1))
    if res.size >= e:
        return _top(r, res, e)
    rest = np.setdiff1d(np.arange(n_p), res)
    return np.union1d(res, _top(r, rest, e - res.size)).astype(np.int64)


def word_groups(pieces: list[str], *, backend: str = "numba") -> np.ndarray:
    """Word label per row ``(n,)`` int64, non-decreasing from 0.

    A new word starts at a piece with a space marker or whitespace, at a piece whose first
    character is not a letter/digit, and after a piece whose last character is not one; a
    digit run continues through a lone ``,`` or ``.`` piece between digits (``7``, ``,``,
    ``654`` is one number). backend: ``"numba"`` scans the joined pieces' code points
    (``text_kernels.piece_word_starts``), ``"reference"`` the pieces as strings; both agree.
    """
    return (np.cumsum(_WORD_STARTS[_v.choice(backend, "backend", tuple(_WORD_STARTS))](pieces))
            - 1).astype(np.int64)


def _word_starts_reference(pieces: list[str]) -> np.ndarray:
    n = len(pieces)
    parts = [_split_piece(p) for p in pieces]
    alnum_first = [bool(b) and not s and _kind(b[0]) in ("letter", "digit") for s, b in parts]
    alnum_last = [bool(b) and _kind(b[-1]) in ("letter", "digit") for _, b in parts]
    digit_first = [bool(b) and not s and b[0].isdecimal() for s, b in parts]
    digit_last = [bool(b) and b[-1].isdecimal() for _, b in parts]
    sep = [p in (",", ".") for p in pieces]
    starts = np.ones(n, dtype=np.bool_)
    for i in range(1, n):
        if alnum_first[i] and alnum_last[i - 1]:
            starts[i] = False
        elif sep[i] and digit_last[i - 1] and i + 1 < n and digit_first[i + 1]:
            starts[i] = False  # "7" "," -> same number
        elif digit_first[i] and sep[i - 1] and i >= 2 and digit_last[i - 2]:
            starts[i] = False  # "," "654" -> same number
    return starts


_MARKER_CPS = charclass.codepoints(_MARKERS)
_SPACE_LIKE_CPS = charclass.codepoints(_SPACE_LIKE)


def _word_starts_numba(pieces: list[str]) -> np.ndarray:
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)), out=offsets[1:])
    cps = charclass.codepoints("".join(pieces))
    return text_kernels.piece_word_starts(cps, charclass.flags(cps), offsets, _MARKER_CPS,
                                     _SPACE_LIKE_CPS)


_WORD_STARTS = {"reference": _word_starts_reference, "numba": _word_starts_numba}


def _complete_groups_reference(group: np.ndarray, selected: np.ndarray, max_run: int) -> np.ndarray:
    """NumPy twin of ``text_kernels.complete_groups``."""
    if group.size == 0:
        return selected.copy()
    size = np.bincount(group)
    hit = np.zeros(size.shape[0], dtype=np.bool_)
    hit[group[selected]] = True
    return selected | (hit & (size <= max_run))[group]


SPAN_BACKENDS = {"reference": _complete_groups_reference, "numba": text_kernels.complete_groups}


def complete_spans(rows, pieces: list[str], n_prefix: int, max_run: int = 32, *,
                   backend: str = "numba") -> np.ndarray:
    """Rows plus the rest of each selected row's word and digit run (:func:`word_groups`),
    within the prefix. Words longer than ``max_run`` rows (data blobs, not names or numbers)
    are not completed. Returns sorted unique int64 rows, a superset of ``rows``."""
    n_p = _prefix(n_prefix)
    ps = _pieces(pieces, n_p)[:n_p]
    sel_rows = _v.index_array(rows, "rows", n=max(n_p, 1))
    m = _v.integer(max_run, "max_run", minimum=1)
    _v.choice(backend, "backend", tuple(SPAN_BACKENDS))
    selected = np.zeros(n_p, dtype=np.bool_)
    selected[sel_rows] = True
    return np.flatnonzero(SPAN_BACKENDS[backend](word_groups(ps, backend=backend), selected, m)).astype(np.int64)


def combine(budget: int, *ranked_lists) -> np.ndarray:
    """Union of row lists under one budget: lists in priority order, each in its own order
    (most important first); stops at ``budget`` rows. Returns sorted unique int64 rows."""
    b = _v.integer(budget, "budget", minimum=0)
    chosen: dict[int, None] = {}
    for i, lst in enumerate(ranked_lists):
        arr = np.asarray(lst)
        if arr.size and (arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.min() < 0):
            raise ValueError(f"ranked_lists[{i}] must be a 1-D list of non-negative row indices.")
        for r in arr.tolist():
            if len(chosen) >= b:
                break
            chosen.setdefault(int(r), None)
    return np.array(sorted(chosen), dtype=np.int64)


def row_budget(share: float, n_prefix: int) -> int:
    """``floor(share * n_prefix)`` rows: the budget of a selector capped at ``share`` of the
    prefix (the combined selector), robust to the float rounding of ``share * n``."""
    return int(np.floor(_v.unit_share(share, "share") * _prefix(n_prefix) + 1e-9))


def combine_units(budget: int, units, pieces: list[str] | None, n_prefix: int,
                  max_run: int = 32) -> np.ndarray:
    """Union of row units (arrays, in priority order) under one budget, each unit completed to
    its words and digit runs (:func:`word_groups`, words up to ``max_run`` rows) when
    ``pieces`` is given. A unit whose completed new rows no longer fit is skipped whole (a
    later, smaller one may still fit), so the result never exceeds ``budget`` and never holds
    part of a completed word. Returns sorted unique int64 prefix rows."""
    b = _v.integer(budget, "budget", minimum=0)
    n_p = _prefix(n_prefix)
    m = _v.integer(max_run, "max_run", minimum=1)
    chosen = np.zeros(n_p, dtype=np.bool_)
    total = 0
    if pieces is not None:
        group = word_groups(_pieces(pieces, n_p)[:n_p])
        size = np.bincount(group) if n_p else np.zeros(0, np.int64)
        first = np.searchsorted(group, np.arange(size.shape[0]))
    for i, unit in enumerate(units):
        if total >= b:
            break
        u = np.asarray(unit)
        if u.size and (u.ndim != 1 or u.dtype.kind not in "iu" or u.min() < 0):
            raise ValueError(f"units[{i}] must be a 1-D array of non-negative row indices.")
        u = u[u < n_p]
        if pieces is not None and u.size:
            parts = [u]
            for g in np.unique(group[u]):
                if size[g] <= m:
                    parts.append(np.arange(first[g], first[g] + size[g]))
            u = np.concatenate(parts)
        new = np.unique(u[~chosen[u]]) if u.size else u
        if new.size == 0 or total + new.size > b:
            continue
        chosen[new] = True
        total += new.size
    return np.flatnonzero(chosen).astype(np.int64)
