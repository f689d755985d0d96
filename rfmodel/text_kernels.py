"""Numba hot loops of the row selectors and the text scan (paper 2.4, Appendix H); each
kernel names its plain NumPy twin, and, like rfmodel.kernels, all are compiled with
``cache=True`` and no ``fastmath``; integer logic, so bitwise equal to their twins.
``NUMBA_DISABLE_JIT=1`` runs the same code as plain Python."""
from __future__ import annotations

import numpy as np
from numba import njit


# --------------------------------------------------------------------------------------------
# Selector kernels (twins: rfmodel.selectors._complete_groups_reference,
# rfmodel.lexical._ngram_hits_reference); integer logic, so bitwise equal.
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def complete_groups(group, selected, max_run):
    """Mask of rows whose group holds a selected row (groups longer than max_run excluded).

    group: ``(n,)`` int64 non-decreasing group label per row (0..G-1); selected: ``(n,)``
    bool; max_run: int. Returns ``(n,)`` bool: selected, or in a group of at most max_run
    rows that has a selected row. Twin: ``rfmodel.selectors._complete_groups_reference``.
    """
    n = group.shape[0]
    n_groups = 0 if n == 0 else group[n - 1] + 1
    hit = np.zeros(n_groups, dtype=np.bool_)
    size = np.zeros(n_groups, dtype=np.int64)
    for r in range(n):
        size[group[r]] += 1
        if selected[r]:
            hit[group[r]] = True
    out = np.empty(n, dtype=np.bool_)
    for r in range(n):
        gr = group[r]
        out[r] = selected[r] or (hit[gr] and size[gr] <= max_run)
    return out


@njit(cache=True)
def ngram_hits(words, window, k):
    """For each k-gram start p of ``words``, whether ``words[p:p+k]`` occurs in ``window``.

    words: ``(n,)`` int64 word ids; window: ``(m,)`` int64; k >= 1. Returns ``(max(n-k+1,0),)``
    bool. Twin: ``rfmodel.lexical._ngram_hits_reference``.
    """
    n = words.shape[0]
    m = window.shape[0]
    n_out = max(n - k + 1, 0)
    out = np.zeros(n_out, dtype=np.bool_)
    for p in range(n_out):
        for s in range(m - k + 1):
            same = True
            for i in range(k):
                if words[p + i] != window[s + i]:
                    same = False
                    break
            if same:
                out[p] = True
                break
    return out


# --------------------------------------------------------------------------------------------
# Text scans over code points and rfmodel.charclass flags (twins: rfmodel.lexical.words /
# sentence_ids / the row rules of lexical_net, rfmodel.selectors.word_groups); integer logic.
# --------------------------------------------------------------------------------------------
_WORD, _SPACE, _ALNUM, _DECIMAL = 1, 2, 4, 8  # rfmodel.charclass


@njit(cache=True)
def _among(c, chars):
    for x in chars:
        if c == x:
            return True
    return False


@njit(cache=True)
def scan_text(cps, flags, blocked, breaks, marks):
    """Words and sentences of a text (Appendix H). cps: ``(n,)`` uint32 code points; flags:
    ``(n,)`` uint8 charclass flags; blocked: ``(n,)`` bool (special tokens' text); breaks:
    code points that always end a sentence; marks: those that end one before whitespace or
    the end of the text. Returns
    ``(starts, ends, sentence)``: word spans and each character's sentence (-1 if blocked).
    Twins: ``rfmodel.lexical.words`` and ``sentence_ids``."""
    n = cps.shape[0]
    sent = np.empty(n, dtype=np.int64)
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    nw, sid, start = 0, 0, -1
    for i in range(n):
        if blocked[i]:
            sent[i] = -1
            if i == 0 or sent[i - 1] != -1:
                sid += 1
            inside = False
        else:
            sent[i] = sid
            c = cps[i]
            if _among(c, breaks) or (_among(c, marks) and (i + 1 == n or (flags[i + 1] & _SPACE) != 0)):
                sid += 1
            inside = (flags[i] & _WORD) != 0
        if inside and start < 0:
            start = i
        elif not inside and start >= 0:
            starts[nw], ends[nw] = start, i
            nw += 1
            start = -1
    if start >= 0:
        starts[nw], ends[nw] = start, n
        nw += 1
    return starts[:nw], ends[:nw], sent


@njit(cache=True)
def _normal(cps, i):
    c = cps[i]
    return c + 32 if 65 <= c <= 90 else c  # ASCII lower-casing only


@njit(cache=True)
def word_keys(cps, starts, ends):
    """Normalized length and a 64-bit FNV-1a hash of each normalized word (ASCII lower-cased,
    final s dropped from words of >= 4 characters not ending in ss; ``lexical.normalize_word``).
    Equal words get equal keys; ``same_words`` checks that unequal ones did not collide."""
    n = starts.shape[0]
    length = np.empty(n, dtype=np.int64)
    key = np.empty(n, dtype=np.uint64)
    for w in range(n):
        a, b = starts[w], ends[w]
        m = b - a
        if m >= 4 and _normal(cps, b - 1) == 115 and _normal(cps, b - 2) != 115:
            m -= 1
        h = np.uint64(14695981039346656037)
        for i in range(a, a + m):
            h = (h ^ np.uint64(_normal(cps, i))) * np.uint64(1099511628211)
        length[w], key[w] = m, h ^ np.uint64(m)
    return length, key


@njit(cache=True)
def same_words(cps, starts, length, label, first):
    """True iff every word equals the first word of its label, after normalization (the hash
    labels then number the distinct words exactly)."""
    for w in range(starts.shape[0]):
        r = first[label[w]]
        if length[w] != length[r]:
            return False
        for i in range(length[w]):
            if _normal(cps, starts[w] + i) != _normal(cps, starts[r] + i):
                return False
    return True


@njit(cache=True)
def rows_of_chars(spans, n_chars):
    """The row of each character (-1 where no token covers it)."""
    row = np.full(n_chars, -1, dtype=np.int64)
    for r in range(spans.shape[0]):
        for i in range(spans[r, 0], spans[r, 1]):
            row[i] = r
    return row


@njit(cache=True)
def words_touching(starts, ends, char_row, rows):
    """Whether each word has a character in one of ``rows`` (``(n_rows,)`` bool mask)."""
    out = np.zeros(starts.shape[0], dtype=np.bool_)
    for w in range(starts.shape[0]):
        for i in range(starts[w], ends[w]):
            r = char_row[i]
            if r >= 0 and rows[r]:
                out[w] = True
                break
    return out


@njit(cache=True)
def row_sentences(spans, sent, flags, skip, n_rows):
    """Sentence of each of the first ``n_rows`` rows: that of its first non-whitespace
    character (of its first character if all are whitespace); -2 for skipped or empty rows."""
    out = np.full(n_rows, -2, dtype=np.int64)
    for r in range(n_rows):
        a, b = spans[r, 0], spans[r, 1]
        if skip[r] or a == b:
            continue
        i = a
        while i < b and (flags[i] & _SPACE) != 0:
            i += 1
        out[r] = sent[i if i < b else a]
    return out


@njit(cache=True)
def piece_word_starts(cps, flags, offsets, markers, space_like):
    """Where a new word starts among token pieces (piece i is ``cps[offsets[i]:offsets[i+1]]``;
    markers: word-start markers; space_like: what a piece's body is stripped of).
    Twin: the start rules of ``rfmodel.selectors.word_groups``."""
    n = offsets.shape[0] - 1
    alnum_first = np.zeros(n, dtype=np.bool_)
    alnum_last = np.zeros(n, dtype=np.bool_)
    digit_first = np.zeros(n, dtype=np.bool_)
    digit_last = np.zeros(n, dtype=np.bool_)
    sep = np.zeros(n, dtype=np.bool_)
    for p in range(n):
        a, b = offsets[p], offsets[p + 1]
        j = a
        while j < b and _among(cps[j], space_like):
            j += 1
        marked = j > a and _among(cps[a], markers)
        if j < b:
            alnum_first[p] = (not marked) and (flags[j] & _ALNUM) != 0
            digit_first[p] = (not marked) and (flags[j] & _DECIMAL) != 0
            alnum_last[p] = (flags[b - 1] & _ALNUM) != 0
            digit_last[p] = (flags[b - 1] & _DECIMAL) != 0
        sep[p] = b - a == 1 and (cps[a] == 44 or cps[a] == 46)
    starts = np.ones(n, dtype=np.bool_)
    for i in range(1, n):
        if alnum_first[i] and alnum_last[i - 1]:
            starts[i] = False
        elif sep[i] and digit_last[i - 1] and i + 1 < n and digit_first[i + 1]:
            starts[i] = False
        elif digit_first[i] and sep[i - 1] and i >= 2 and digit_last[i - 2]:
            starts[i] = False
    return starts
