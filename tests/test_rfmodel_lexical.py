"""Lexical net (rfmodel.lexical): the Appendix H normalization examples and the selection rule."""
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfmodel.lexical import (
    NGRAM_BACKENDS,
    lexical_net,
    normalize_word,
    sentence_ids,
    words,
)
from rfmodel import text_kernels


def _py(kernel):
    """The pure-Python source of a Numba kernel (the kernel itself under NUMBA_DISABLE_JIT=1)."""
    return getattr(kernel, "py_func", kernel)


@pytest.mark.parametrize("raw, norm", [
    ("Cats", "cat"),          # ASCII lower-cased, final s dropped (4+ chars)
    ("CATS", "cat"),
    ("glass", "glass"),       # ends in ss: kept
    ("bus", "bus"),           # 3 chars: kept
    ("is", "is"),
    ("Paris", "pari"),        # the rule is blind to proper names
    ("ÉCOLES", "École"),      # non-ASCII kept as is, ASCII lower-cased
    ("Straße", "straße"),
    ("ΛΟΓΟΣ", "ΛΟΓΟΣ"),       # no non-ASCII case folding, no s rule on Σ
    ("1990s", "1990"),
    ("東京", "東京"),
])
def test_normalize_word_appendix_h_examples(raw, norm):
    assert normalize_word(raw) == norm


@pytest.mark.parametrize("text, expect", [
    ("foo_bar", ["foo", "bar"]),                 # underscores separate
    ("nai\u0308ve", ["nai", "ve"]),              # a combining mark separates
    ("naïve", ["naïve"]),                        # the precomposed letter does not
    ("x-ray 3.14", ["x", "ray", "3", "14"]),     # punctuation separates
    ("R2D2 ½ Ⅻ", ["r2d2", "½", "Ⅻ"]),            # number characters (Nd, No, Nl) are word chars
    ("don't", ["don", "t"]),
    ("Hello,World!!", ["hello", "world"]),
])
def test_words_appendix_h_examples(text, expect):
    assert [w for w, _, _ in words(text)] == expect


@pytest.mark.parametrize("text, sentences", [
    ("Hi. There", ["Hi.", " There"]),
    ("3.14 is pi", ["3.14 is pi"]),              # "." not followed by whitespace
    ("Wow!That? Yes", ["Wow!That?", " Yes"]),
    ("end.", ["end."]),                          # "." at the end of the text
    ("一。二！三？四", ["一。", "二！", "三？", "四"]),  # CJK enders need no space
    ("a\nb\r\nc", ["a\n", "b\r", "\n", "c"]),    # each line-break character ends one
    ("e.g.\tok", ["e.g.", "\tok"]),              # only the last "." is followed by whitespace
])
def test_sentence_ids_appendix_h_examples(text, sentences):
    ids = sentence_ids(text)
    got = ["".join(c for c, s in zip(text, ids) if s == sid) for sid in dict.fromkeys(ids.tolist())]
    assert got == sentences


def test_sentence_ids_special_tokens_end_sentences():
    text = "one two<|sep|>three"
    blocked = np.zeros(len(text), bool)
    blocked[7:14] = True
    ids = sentence_ids(text, blocked)
    assert (ids[7:14] == -1).all() and ids[0] == ids[6] and ids[14] != ids[0]
    assert [w for w, _, _ in words(text, blocked)] == ["one", "two", "three"]


def tokenize(text):
    """Whitespace-attached word/punct tokens with character spans (a stand-in tokenizer)."""
    spans = [m.span() for m in re.finditer(r"\s*\w+|\s*[^\w\s]|\s+", text)]
    return np.array(spans, dtype=np.int64)


def _prompt(prefix, tail):
    text = prefix + tail
    spans = tokenize(text)
    n_prefix = int(np.searchsorted(spans[:, 0], len(prefix)))
    return text, spans, n_prefix


FILLER = "The weather was mild and the day went on as usual. " * 30


def test_lexical_net_keeps_sentence_with_rare_shared_run():
    needle = "The access code for project zebra is 7731."
    common = "The code for the report is due soon."
    text, spans, n_p = _prompt(FILLER + needle + " " + common + " " + FILLER,
                               " Question: what is the access code for project zebra?")
    rows = lexical_net(text, spans, n_p)
    picked = "".join(text[a:b] for a, b in spans[rows])
    assert picked.strip() == needle
    assert rows.size <= int(0.05 * n_p)


def test_lexical_net_needs_a_rare_word_in_the_run():
    # "the day went on" is shared with the window but every word is frequent in the prefix
    text, spans, n_p = _prompt(FILLER, " Tell me whether the day went on as usual.")
    assert lexical_net(text, spans, n_p).size == 0


def test_lexical_net_needs_four_words():
    needle = "Zebra quokka lives here."
    text, spans, n_p = _prompt(FILLER + needle + " " + FILLER, " Where does zebra quokka live?")
    assert lexical_net(text, spans, n_p).size == 0  # shared run "zebra quokka" is only 2 words
    text, spans, n_p = _prompt(FILLER + needle + " " + FILLER, " Does zebra quokka lives here?")
    assert lexical_net(text, spans, n_p).size > 0  # 4-word run, normalized "live" matches


def test_lexical_net_caps_rows_per_sentence_and_total():
    long_needle = "Rare " + " ".join(f"w{i}" for i in range(150)) + "."
    text, spans, n_p = _prompt(FILLER * 3 + long_needle + " " + FILLER,
                               " " + " ".join(f"w{i}" for i in range(4)) + " please")
    rows = lexical_net(text, spans, n_p, cap_share=0.5)
    assert rows.size == 80  # the sentence's first 80 rows
    assert text[slice(*spans[rows[0]])].strip() == "Rare"
    assert lexical_net(text, spans, n_p).size == int(0.05 * n_p) < 80
    capped = lexical_net(text, spans, n_p, cap_share=0.01)
    assert capped.size == int(0.01 * n_p) and set(capped) <= set(rows)


def test_lexical_net_window_skips_special_rows():
    needle = "The vault number of gamma station is 4412."
    prefix = FILLER + needle + " " + FILLER
    tail = " vault number of gamma station<|end|><|assistant|>"
    text, spans, n_p = _prompt(prefix, tail)
    special = [r for r, (a, b) in enumerate(spans) if "<" in text[a:b] or "|" in text[a:b]
               or ">" in text[a:b] or text[a:b].strip() in ("end", "assistant")]
    rows = lexical_net(text, spans, n_p, window=6, special_rows=special)
    assert "vault" in "".join(text[a:b] for a, b in spans[rows])
    assert lexical_net(text, spans, n_p, window=2, special_rows=special).size == 0


@st.composite
def random_prompt(draw):
    vocab = ["alpha", "beta", "Gamma", "delta", "x1", "zeta", "eta", "theta", "iota", "kappa"]
    toks = draw(st.lists(st.sampled_from(vocab + [".", ",", "\n", "?"]), min_size=5, max_size=300))
    text = " ".join(toks)
    spans = tokenize(text)
    n_p = draw(st.integers(0, len(spans)))
    return text, spans, n_p, draw(st.integers(1, 64)), draw(st.floats(0, 1))


@given(random_prompt())
def test_lexical_net_rows_sorted_unique_in_prefix_and_capped(case):
    text, spans, n_p, window, cap = case
    rows = lexical_net(text, spans, n_p, window, cap_share=cap)
    assert rows.dtype == np.int64
    assert (np.diff(rows) > 0).all() and (rows >= 0).all() and (rows < max(n_p, 1)).all()
    assert rows.size <= int(np.floor(cap * n_p + 1e-9))
    np.testing.assert_array_equal(rows, lexical_net(text, spans, n_p, window, cap_share=cap,
                                                    backend="reference"))


@given(st.lists(st.integers(0, 4), max_size=60), st.lists(st.integers(0, 4), max_size=20),
       st.integers(1, 5))
def test_ngram_hits_numba_equals_reference(ws, window, k):
    a, b = np.array(ws, np.int64), np.array(window, np.int64)
    np.testing.assert_array_equal(NGRAM_BACKENDS["numba"](a, b, k), NGRAM_BACKENDS["reference"](a, b, k))
    np.testing.assert_array_equal(_py(text_kernels.ngram_hits)(a, b, k), text_kernels.ngram_hits(a, b, k))


@pytest.mark.parametrize("kwargs, arg", [
    ({"n_prefix": 10**6}, "n_prefix"),
    ({"token_char_spans": np.zeros((3, 3), np.int64)}, "token_char_spans"),
    ({"window": 0}, "window"),
    ({"cap_share": 2.0}, "cap_share"),
])
def test_lexical_net_bad_arguments_raise(kwargs, arg):
    text, spans, n_p = _prompt(FILLER, " what now?")
    base = dict(text=text, token_char_spans=spans, n_prefix=n_p)
    base.update(kwargs)
    with pytest.raises(ValueError, match=arg):
        lexical_net(**base)
