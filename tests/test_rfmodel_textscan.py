"""The Numba text scans (rfmodel.charclass + rfmodel.text_kernels) against their plain twins:
the charclass flags against the Python predicates they stand for, and the lexical net and
word groups of both backends on Unicode text that exercises every rule of Appendix H
(letters of many scripts, numbers, combining marks, every line break, CJK ends, astral code
points, lone surrogates, the final-s rule)."""
import unicodedata

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfmodel import charclass, lexical, text_kernels
from rfmodel.lexical import lexical_net
from rfmodel.selectors import complete_spans, word_groups

ALPHABET = list("aAsSbcZzéÉßΣσ東京ـ0189٣𝟘𝑨\u0301_.,!?;:-'\"() \t\n\r\x0b\x0c\x1c\x85\u2028\u2029\u3000。！？😀\ud800ĠĊ▁")


@given(st.characters())
def test_flags_are_the_python_predicates(c):
    (f,) = charclass.flags(charclass.codepoints(c))
    cat = unicodedata.category(c)[0]
    assert bool(f & charclass.WORD) == (cat in "LN")
    assert bool(f & charclass.SPACE) == c.isspace()
    assert bool(f & charclass.ALNUM) == (cat in "LMN")
    assert bool(f & charclass.DECIMAL) == c.isdecimal()


def test_codepoints_keep_astral_and_lone_surrogates():
    text = "a😀\ud800b"
    cps = charclass.codepoints(text)
    assert cps.tolist() == [ord(c) for c in text] and len(cps) == len(text)


@st.composite
def unicode_prompt(draw):
    words = draw(st.lists(st.text(st.sampled_from(ALPHABET), min_size=1, max_size=6),
                          min_size=4, max_size=60))
    rare = draw(st.sampled_from(["Vaults of GLASS is", "東京 ß σσσs ٣٣"]))
    body = " ".join(words)
    text = f"{rare} {body}\n{body} {rare}."
    cuts = sorted(set(draw(st.lists(st.integers(0, len(text)), max_size=len(text) // 2))))
    bounds = [0] + cuts + [len(text)]
    spans = np.array([(a, b) for a, b in zip(bounds[:-1], bounds[1:])], dtype=np.int64)
    N = len(spans)
    special = sorted(set(draw(st.lists(st.integers(0, N - 1), max_size=3))))
    template = sorted(set(draw(st.lists(st.integers(0, N - 1), max_size=3))))
    n_p = draw(st.integers(0, N))
    kw = dict(window=draw(st.integers(1, 40)), special_rows=special, template_rows=template,
              min_run=draw(st.integers(1, 4)), max_count=draw(st.integers(1, 3)),
              rows_per_sentence=draw(st.integers(0, 10)), cap_share=draw(st.floats(0, 1)))
    return text, spans, n_p, kw


@given(unicode_prompt())
def test_lexical_net_numba_equals_reference_on_unicode(case):
    text, spans, n_p, kw = case
    np.testing.assert_array_equal(lexical_net(text, spans, n_p, backend="numba", **kw),
                                  lexical_net(text, spans, n_p, backend="reference", **kw))


@given(unicode_prompt())
def test_scans_agree_piece_by_piece(case):
    """Word spans, sentences, rows and window words of the two scans, element by element."""
    text, spans, n_p, _ = case
    blocked = np.zeros(len(text), dtype=np.bool_)
    blocked[spans[0, 0]:spans[0, 1]] = True
    skip = np.zeros(len(spans), dtype=np.bool_)
    skip[0] = True
    in_win = np.zeros(len(spans), dtype=np.bool_)
    in_win[-3:] = True
    ref = lexical._scan_reference(text, spans, blocked, skip, n_p, in_win)
    fast = lexical._scan_numba(text, spans, blocked, skip, n_p, in_win)
    for i, (a, b) in enumerate(zip(ref, fast)):
        if i == 1:  # word ids: the same partition of the words, numbered differently
            assert len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) == len(set(b.tolist()))
        else:
            np.testing.assert_array_equal(a, b)
    ws = lexical.words(text, blocked)
    starts, ends, sent = text_kernels.scan_text(charclass.codepoints(text),
                                           charclass.flags(charclass.codepoints(text)), blocked,
                                           lexical._BREAKS, lexical._MARKS)
    assert [(a, b) for _, a, b in ws] == list(zip(starts.tolist(), ends.tolist()))
    np.testing.assert_array_equal(sent, lexical.sentence_ids(text, blocked))


def test_hash_collision_falls_back_to_the_words(monkeypatch):
    """Were two different words to share a hash, the ids come from the words themselves."""
    text = "Alpha beta gamma delta epsilon. zeta eta. Alpha beta gamma delta"
    spans = np.array([(i, i + 1) for i in range(len(text))], dtype=np.int64)
    want = lexical_net(text, spans, 44, window=20, backend="reference")
    assert want.size
    real = text_kernels.word_keys
    monkeypatch.setattr(text_kernels, "word_keys",
                        lambda cps, s, e: (real(cps, s, e)[0], np.zeros(len(s), np.uint64)))
    np.testing.assert_array_equal(lexical_net(text, spans, 44, window=20, backend="numba"), want)


PIECE_ALPHABET = list("aZé0٣𝟘\u0301.,-Ġ▁ Ċĉ\n\t\r😀")


@given(st.lists(st.one_of(st.sampled_from([",", ".", "Ġ7", "7", "654", "Ġ", " "]),
                          st.text(st.sampled_from(PIECE_ALPHABET), max_size=4)), max_size=60),
       st.data())
def test_word_groups_numba_equals_reference(pieces, data):
    g = word_groups(pieces, backend="numba")
    np.testing.assert_array_equal(g, word_groups(pieces, backend="reference"))
    n_p = data.draw(st.integers(0, len(pieces)))
    rows = data.draw(st.lists(st.integers(0, max(n_p - 1, 0)), max_size=5)) if n_p else []
    np.testing.assert_array_equal(complete_spans(rows, pieces, n_p, 3, backend="numba"),
                                  complete_spans(rows, pieces, n_p, 3, backend="reference"))


def test_word_groups_bad_backend_names_the_options():
    with pytest.raises(ValueError, match="backend must be one of"):
        word_groups(["a"], backend="fast")
