"""The lexical net (paper §2.4) with the exact word and sentence rules of Appendix H.

Appendix H, "Lexical-net normalization", implemented literally:

- words are runs of Unicode letters and number characters (general categories L* and N*);
  punctuation, underscores, combining marks (M*) and everything else separate them;
- ASCII letters are lower-cased; every other character is kept as it is;
- a final ``s`` is dropped from words of four or more characters unless the word ends in
  ``ss`` (after lower-casing: ``Cats -> cat``, ``glass -> glass``, ``bus -> bus``);
- a sentence ends at a line break (``\\n``, ``\\r``, ``\\v``, ``\\f``, U+001C-U+001E, U+0085,
  U+2028, U+2029: the characters ``str.splitlines`` breaks on); at ``.``, ``!`` or ``?``
  followed by whitespace or the end of the text; at the CJK ``。``, ``！``, ``？``; and at
  special tokens (control, user-defined, unknown and unused tokens), whose own text is no
  part of any word or sentence.

Selection (§2.4, "Lexical-net rows"): the window is the last ``window`` (64) content tokens of
the prompt (content = not special, not chat template). A prefix sentence is kept if it shares
a run of ``min_run`` (4) or more consecutive words with the window and that run contains a word
occurring at most ``max_count`` (2) times in the whole prefix; a run of four or more holds such
a word iff one of its 4-word sub-runs does, so 4-grams are matched. Of each kept sentence the
first ``rows_per_sentence`` (80) prefix rows are kept; kept sentences are taken in prefix
order until ``floor(cap_share * n_prefix)`` rows (5%), the last one possibly cut short.
A row belongs to the sentence of its first non-whitespace character (whitespace-only rows to
that of their first character); a word to the row of its first character.
"""
from __future__ import annotations

import unicodedata

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from rfmodel import _validate as _v
from rfmodel import charclass, text_kernels

__all__ = ["normalize_word", "words", "sentence_ids", "lexical_net", "NGRAM_BACKENDS"]

_LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
_CJK_ENDS = frozenset("。！？")
_ASCII_ENDS = frozenset(".!?")


def _is_word_char(c: str) -> bool:
    return unicodedata.category(c)[0] in "LN"


def normalize_word(word: str) -> str:
    """ASCII lower-casing, then drop a final s from words of >= 4 characters not ending in ss."""
    w = "".join(c.lower() if "A" <= c <= "Z" else c for c in word)
    if len(w) >= 4 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    return w


def words(text: str, blocked: np.ndarray | None = None) -> list[tuple[str, int, int]]:
    """Normalized words of ``text`` as ``(word, start, end)`` character spans, in order.

    blocked: optional ``(len(text),)`` bool; blocked characters (special tokens' text) separate
    words like punctuation does.
    """
    out = []
    start = None
    for i, c in enumerate(text):
        inside = _is_word_char(c) and not (blocked is not None and blocked[i])
        if inside and start is None:
            start = i
        elif not inside and start is not None:
            out.append((normalize_word(text[start:i]), start, i))
            start = None
    if start is not None:
        out.append((normalize_word(text[start:]), start, len(text)))
    return out


def sentence_ids(text: str, blocked: np.ndarray | None = None) -> np.ndarray:
    """Sentence number of every character, ``(len(text),)`` int64; -1 on blocked characters.

    A terminator belongs to the sentence it ends; blocked characters end the current sentence.
    """
    n = len(text)
    ids = np.empty(n, dtype=np.int64)
    sid, i = 0, 0
    for i, c in enumerate(text):
        if blocked is not None and blocked[i]:
            ids[i] = -1
            if i == 0 or ids[i - 1] != -1:
                sid += 1
            continue
        ids[i] = sid
        ends = (c in _LINE_BREAKS or c in _CJK_ENDS
                or (c in _ASCII_ENDS and (i + 1 == n or text[i + 1].isspace())))
        if ends:
            sid += 1
    return ids


def _ngram_hits_reference(words_arr: np.ndarray, window: np.ndarray, k: int) -> np.ndarray:
    """NumPy twin of ``text_kernels.ngram_hits``: does each k-gram of words occur in window?"""
    n_out = max(words_arr.shape[0] - k + 1, 0)
    if n_out == 0 or window.shape[0] < k:
        return np.zeros(n_out, dtype=np.bool_)
    grams = sliding_window_view(words_arr, k)  # (n_out, k)
    wgrams = sliding_window_view(window, k)  # (m_out, k)
    return (grams[:, None, :] == wgrams[None, :, :]).all(axis=-1).any(axis=-1)


NGRAM_BACKENDS = {"reference": _ngram_hits_reference, "numba": text_kernels.ngram_hits}


def _row_of_chars(spans: np.ndarray, n_chars: int) -> np.ndarray:
    row = np.full(n_chars, -1, dtype=np.int64)
    for r, (a, b) in enumerate(spans):
        row[a:b] = r
    return row


def lexical_net(text: str, token_char_spans: np.ndarray, n_prefix: int, window: int = 64, *,
                special_rows=(), template_rows=(), min_run: int = 4, max_count: int = 2,
                rows_per_sentence: int = 80, cap_share: float = 0.05,
                backend: str = "numba") -> np.ndarray:
    """Lexical-net rows of the prefix: sorted unique int64 indices in [0, n_prefix).

    text: the prompt's text; token_char_spans: ``(N, 2)`` int ``[start, end)`` of each token in
    text (non-overlapping, in order; empty for tokens with no text); n_prefix: rows
    0..n_prefix-1 are the prefix; special_rows: control/user-defined/unknown/unused tokens
    (sentence boundaries, never content); template_rows: chat-template rows (not content).
    """
    spans = np.asarray(token_char_spans)
    if spans.ndim != 2 or spans.shape[1] != 2 or spans.dtype.kind not in "iu":
        raise ValueError(f"token_char_spans must be an (N, 2) integer array; got {spans.dtype} "
                         f"{spans.shape}.")
    N = spans.shape[0]
    if N and (spans.min() < 0 or spans.max() > len(text) or (spans[:, 1] < spans[:, 0]).any()):
        raise ValueError(f"token_char_spans must hold 0 <= start <= end <= len(text) = {len(text)}.")
    n_p = _v.integer(n_prefix, "n_prefix", minimum=0, maximum=N)
    win = _v.integer(window, "window", minimum=1)
    special = _v.index_array(special_rows, "special_rows", n=max(N, 1))
    template = _v.index_array(template_rows, "template_rows", n=max(N, 1))
    k = _v.integer(min_run, "min_run", minimum=1)
    per_sentence = _v.integer(rows_per_sentence, "rows_per_sentence", minimum=0)
    cap = int(np.floor(_v.unit_share(cap_share, "cap_share") * n_p + 1e-9))
    _v.choice(backend, "backend", tuple(NGRAM_BACKENDS))
    if n_p == 0 or cap == 0:
        return np.zeros(0, dtype=np.int64)

    blocked = np.zeros(len(text), dtype=np.bool_)
    for r in special:
        blocked[spans[r, 0]:spans[r, 1]] = True
    skip = np.zeros(N, dtype=np.bool_)
    skip[special] = True
    # window: words touching the last `win` content rows
    content = ~skip
    content[template] = False
    in_win = np.zeros(N, dtype=np.bool_)
    in_win[np.flatnonzero(content)[-win:]] = True
    starts, word_id, sent, char_row, row_sent, touching = _SCANS[backend](
        text, spans, blocked, skip, n_p, in_win)
    win_words = word_id[touching]

    word_row = char_row[starts]
    pre = (word_row >= 0) & (word_row < n_p)
    p_ids = word_id[pre]
    p_sent = sent[starts[pre]]
    counts = np.bincount(p_ids, minlength=int(word_id.max(initial=-1)) + 1)
    hits = NGRAM_BACKENDS[backend](np.ascontiguousarray(p_ids), np.ascontiguousarray(win_words), k)
    kept = set()
    for p in np.flatnonzero(hits):
        run = slice(p, p + k)
        if p_sent[p] == p_sent[p + k - 1] and counts[p_ids[run]].min() <= max_count:
            kept.add(int(p_sent[p]))
    rows: list[int] = []
    for s in sorted(kept):
        rows.extend(np.flatnonzero(row_sent == s)[:per_sentence].tolist())
    return np.array(sorted(rows[:cap]), dtype=np.int64)


def _scan_reference(text, spans, blocked, skip, n_p, in_win):
    """Word starts and ids, each character's sentence and row, each prefix row's sentence
    (-2: skipped or empty) and which words touch a window row, in plain Python: the
    definitions above, literally."""
    ws = words(text, blocked)
    vocab: dict[str, int] = {}
    word_id = np.array([vocab.setdefault(w, len(vocab)) for w, _, _ in ws], dtype=np.int64)
    starts = np.array([a for _, a, _ in ws], dtype=np.int64)
    sent = sentence_ids(text, blocked)
    char_row = _row_of_chars(spans, len(text))
    touching = np.array([any(in_win[r] for r in char_row[a:b] if r >= 0) for _, a, b in ws],
                        dtype=np.bool_)
    row_sent = np.full(n_p, -2, dtype=np.int64)
    for r in range(n_p):
        a, b = spans[r]
        if skip[r] or a == b:
            continue
        off = next((i for i, c in enumerate(text[a:b]) if not c.isspace()), 0)
        row_sent[r] = sent[a + off]
    return starts, word_id, sent, char_row, row_sent, touching


_BREAKS = charclass.codepoints("".join(sorted(_LINE_BREAKS | _CJK_ENDS)))
_MARKS = charclass.codepoints("".join(sorted(_ASCII_ENDS)))


def _scan_numba(text, spans, blocked, skip, n_p, in_win):
    """``_scan_reference`` with Numba kernels over code points and charclass flags; words
    are numbered by a hash of their normalized form, checked against the words themselves
    (on a collision the ids come from the plain dictionary instead)."""
    cps = charclass.codepoints(text)
    flags = charclass.flags(cps)
    starts, ends, sent = text_kernels.scan_text(cps, flags, blocked, _BREAKS, _MARKS)
    length, key = text_kernels.word_keys(cps, starts, ends)
    _, first, word_id = np.unique(key, return_index=True, return_inverse=True)
    word_id = word_id.astype(np.int64).reshape(-1)
    if not text_kernels.same_words(cps, starts, length, word_id, first):
        vocab: dict[str, int] = {}
        word_id = np.array([vocab.setdefault(normalize_word(text[a:b]), len(vocab))
                            for a, b in zip(starts.tolist(), ends.tolist())], dtype=np.int64)
    spans = spans.astype(np.int64)
    char_row = text_kernels.rows_of_chars(spans, len(text))
    row_sent = text_kernels.row_sentences(spans, sent, flags, skip, n_p)
    return starts, word_id, sent, char_row, row_sent, text_kernels.words_touching(starts, ends, char_row, in_win)


_SCANS = {"reference": _scan_reference, "numba": _scan_numba}
