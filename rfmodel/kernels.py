"""Numba hot loops of rfmodel; each kernel names its plain NumPy twin.

The twins live beside their callers (``ridge.py``, ``gdn.py``, ``selectors.py``,
``lexical.py``) and are the readable definitions; the kernels here must agree with them:
bitwise where the arithmetic order is the same (the GDN scan, the integer selector kernels),
within a stated tolerance where it is not (the ridge accumulation: BLAS sums in its own order).

All kernels are compiled with ``cache=True`` (the compiled code lands in ``__pycache__``) and
without ``fastmath``, so LLVM neither reassociates sums nor fuses multiply-adds: each float
operation is the one written. ``NUMBA_DISABLE_JIT=1`` runs the same code as plain Python.
Parallel loops (``prange``) split work by output element or head only, so every output is
accumulated by one thread in a fixed order and results do not depend on the thread count.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

ROW_BLOCK = 64  # rows cast to float64 per block in the ridge kernels
PARALLEL_MIN_WORK = 1 << 20  # below this many multiply-adds a thread launch costs more


# --------------------------------------------------------------------------------------------
# Ridge accumulation (twin: rfmodel.ridge._accumulate_reference, which uses BLAS)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _xtx_group(out, xb, wb, m, i0, d):
    """out[i0:i0+4, i0:] += wb[:m, i0:i0+4]^T xb[:m, i0:] (rows beyond d skipped)."""
    i1, i2, i3 = i0 + 1, i0 + 2, i0 + 3
    if i3 < d:
        for r in range(m):
            a0, a1, a2, a3 = wb[r, i0], wb[r, i1], wb[r, i2], wb[r, i3]
            for j in range(i0, d):
                xj = xb[r, j]
                out[i0, j] += a0 * xj
                out[i1, j] += a1 * xj
                out[i2, j] += a2 * xj
                out[i3, j] += a3 * xj
    else:
        for i in range(i0, d):
            for r in range(m):
                a = wb[r, i]
                for j in range(i, d):
                    out[i, j] += a * xb[r, j]


@njit(cache=True)
def _cast_block(x, w, r0, m, xb, wb):
    """xb[:m] = float64(x[r0:r0+m]); wb[:m] = w[r] * xb[r] (row weights applied once)."""
    for r in range(m):
        wr = w[r0 + r]
        for j in range(x.shape[1]):
            v = np.float64(x[r0 + r, j])
            xb[r, j] = v
            wb[r, j] = wr * v


@njit(cache=True)
def _xtx_pair(out, xb, wb, m, p, groups, d):
    """Row groups p and groups-1-p (equal triangle work per pair, for balanced threads)."""
    _xtx_group(out, xb, wb, m, 4 * p, d)
    q = groups - 1 - p
    if q != p:
        _xtx_group(out, xb, wb, m, 4 * q, d)


@njit(cache=True)
def _mirror(out):
    d = out.shape[0]
    for i in range(d):
        for j in range(i + 1, d):
            out[j, i] = out[i, j]


@njit(cache=True)
def _xty_row(out, wb, yb, m, i):
    for r in range(m):
        a = wb[r, i]
        for j in range(yb.shape[1]):
            out[i, j] += a * yb[r, j]


# Each kernel exists twice, serial and threaded, with the same per-entry arithmetic; the
# threaded one only splits rows of ``out`` between threads, so both agree bitwise.
@njit(cache=True)
def _ridge_xtx_serial(x, w, out):
    """Accumulate ``out += X^T diag(w) X`` in float64; X rows are cast to float64 first.

    x: ``(n, d)`` float32 or float64, C-contiguous; w: ``(n,)`` float64; out: ``(d, d)``
    float64, updated in place (kept symmetric). Each product ``(w_r x_ri) x_rj`` is formed in
    float64 (exact for fp32 rows with w = 1) and each entry sums its rows in row order.
    Twin: ``rfmodel.ridge._accumulate_reference`` (BLAS ``X^T (w X)``), equal to a tolerance.
    """
    n, d = x.shape
    xb, wb = np.empty((ROW_BLOCK, d)), np.empty((ROW_BLOCK, d))
    groups = (d + 3) // 4
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        for p in range((groups + 1) // 2):
            _xtx_pair(out, xb, wb, m, p, groups, d)
    _mirror(out)


@njit(cache=True, parallel=True)
def _ridge_xtx_parallel(x, w, out):
    """``_ridge_xtx_serial`` with the row-group pairs split between threads."""
    n, d = x.shape
    xb, wb = np.empty((ROW_BLOCK, d)), np.empty((ROW_BLOCK, d))
    groups = (d + 3) // 4
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        for p in prange((groups + 1) // 2):
            _xtx_pair(out, xb, wb, m, p, groups, d)
    _mirror(out)


@njit(cache=True)
def _ridge_xty_serial(x, y, w, out):
    """Accumulate ``out += X^T diag(w) Y`` in float64 (rows cast to float64 first).

    x: ``(n, d_in)``, y: ``(n, d_out)`` float32/float64 C-contiguous; w: ``(n,)`` float64;
    out: ``(d_in, d_out)`` float64 updated in place; rows summed in row order.
    Twin: ``rfmodel.ridge._accumulate_reference``.
    """
    n, d_in = x.shape
    xb, wb = np.empty((ROW_BLOCK, d_in)), np.empty((ROW_BLOCK, d_in))
    yb, ones = np.empty((ROW_BLOCK, y.shape[1])), np.ones(n)
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        _cast_block(y, ones, r0, m, yb, yb)
        for i in range(d_in):
            _xty_row(out, wb, yb, m, i)


@njit(cache=True, parallel=True)
def _ridge_xty_parallel(x, y, w, out):
    """``_ridge_xty_serial`` with the rows of ``out`` split between threads."""
    n, d_in = x.shape
    xb, wb = np.empty((ROW_BLOCK, d_in)), np.empty((ROW_BLOCK, d_in))
    yb, ones = np.empty((ROW_BLOCK, y.shape[1])), np.ones(n)
    for r0 in range(0, n, ROW_BLOCK):
        m = min(ROW_BLOCK, n - r0)
        _cast_block(x, w, r0, m, xb, wb)
        _cast_block(y, ones, r0, m, yb, yb)
        for i in prange(d_in):
            _xty_row(out, wb, yb, m, i)


def ridge_xtx(x, w, out):
    """``out += X^T diag(w) X`` (``_ridge_xtx_serial``); threads only for large chunks."""
    big = x.shape[0] * x.shape[1] * x.shape[1] >= PARALLEL_MIN_WORK
    (_ridge_xtx_parallel if big else _ridge_xtx_serial)(x, w, out)


def ridge_xty(x, y, w, out):
    """``out += X^T diag(w) Y`` (``_ridge_xty_serial``); threads only for large chunks."""
    big = x.shape[0] * x.shape[1] * y.shape[1] >= PARALLEL_MIN_WORK
    (_ridge_xty_parallel if big else _ridge_xty_serial)(x, y, w, out)


# --------------------------------------------------------------------------------------------
# Gated delta rule scan (twin: rfmodel.gdn.gdn_scan_reference, same arithmetic order)
# --------------------------------------------------------------------------------------------
@njit(cache=True)
def _gdn_head(q, k, v, g, beta, s, out, h, erase):
    """One head of the scan: state s (d_k, d_v) updated in place, outputs into out[h]."""
    N, d_k = k.shape[1], k.shape[2]
    d_v = v.shape[2]
    mem = np.empty(d_v, dtype=v.dtype)
    delta = np.empty(d_v, dtype=v.dtype)
    for t in range(N):
        gt = g[h, t]
        for i in range(d_k):
            for j in range(d_v):
                s[i, j] = s[i, j] * gt
        bt = beta[h, t]
        if erase:
            for j in range(d_v):
                mem[j] = k[h, t, 0] * s[0, j]
            for i in range(1, d_k):
                ki = k[h, t, i]
                for j in range(d_v):
                    mem[j] = mem[j] + ki * s[i, j]
            for j in range(d_v):
                delta[j] = (v[h, t, j] - mem[j]) * bt
        else:
            for j in range(d_v):
                delta[j] = v[h, t, j] * bt
        for i in range(d_k):
            ki = k[h, t, i]
            for j in range(d_v):
                s[i, j] = s[i, j] + ki * delta[j]
        for j in range(d_v):
            out[h, t, j] = s[0, j] * q[h, t, 0]
        for i in range(1, d_k):
            qi = q[h, t, i]
            for j in range(d_v):
                out[h, t, j] = out[h, t, j] + s[i, j] * qi


@njit(cache=True, parallel=True)
def _gdn_scan_parallel(q, k, v, g, beta, state, erase):
    out = np.empty((k.shape[0], k.shape[1], v.shape[2]), dtype=v.dtype)
    for h in prange(k.shape[0]):
        _gdn_head(q, k, v, g, beta, state[h], out, h, erase)
    return out


@njit(cache=True)
def _gdn_scan_serial(q, k, v, g, beta, state, erase):
    out = np.empty((k.shape[0], k.shape[1], v.shape[2]), dtype=v.dtype)
    for h in range(k.shape[0]):
        _gdn_head(q, k, v, g, beta, state[h], out, h, erase)
    return out



def gdn_scan(q, k, v, g, beta, state, erase):
    """Gated delta rule over rows; bitwise equal to its NumPy twin.

    q, k: ``(H, N, d_k)``; v: ``(H, N, d_v)``; g, beta: ``(H, N)``; state: ``(H, d_k, d_v)``
    (all one float dtype, C-contiguous), updated in place to the final state; erase: bool.
    Per row and head: ``S = g S;  m = k^T S;  S = S + k (beta (v - m))^T;  o = S^T q``
    (``delta = v beta`` when erase is False) -- the order of
    ``rfmodel.gdn.gdn_scan_reference`` (and of HF ``torch_recurrent_gated_delta_rule``).
    Heads run in parallel when the problem is large (each head by one thread, so results do
    not depend on it). Returns the outputs ``(H, N, d_v)``.
    """
    H, N, d_k = k.shape
    if H > 1 and H * N * d_k * v.shape[2] >= PARALLEL_MIN_WORK:
        return _gdn_scan_parallel(q, k, v, g, beta, state, erase)
    return _gdn_scan_serial(q, k, v, g, beta, state, erase)


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
