"""Row selectors (rfmodel.selectors): budgets, sorted unique in-range rows, complete spans,
reproducible random controls, and the probe budget of §2.4 Fig. 6."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfmodel import text_kernels
from rfmodel.selectors import (
    ELIGIBLE_CLASSES,
    SPAN_BACKENDS,
    attention_ranked,
    attention_received,
    combine,
    complete_spans,
    digit_rows,
    probe_budget,
    probe_rows,
    protected_rows,
    random_rows,
    special_rows,
    token_class,
    word_groups,
)


def _py(kernel):
    """The pure-Python source of a Numba kernel (the kernel itself under NUMBA_DISABLE_JIT=1)."""
    return getattr(kernel, "py_func", kernel)

PIECES = ["ĠThe", "Ġcode", "Ġis", "Ġ7", "7", "3", "1", ",", "Ġsaid", "ĠMc", "Donald", "x",
          "Ġin", "ĠPar", "is", ".", "Ċ", "Ġ12", ",", "345", "Ġa", "-", "b", "Ġ", "\u2581Zeta", "3rd"]


def assert_rows(rows, n_prefix):
    assert rows.dtype == np.int64 and rows.ndim == 1
    assert (np.diff(rows) > 0).all()
    assert rows.size == 0 or (rows.min() >= 0 and rows.max() < n_prefix)


@st.composite
def scores(draw):
    n = draw(st.integers(0, 80))
    n_prefix = draw(st.integers(0, n))
    vals = draw(st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0, 2.0, 3.5]), min_size=n, max_size=n))
    return np.array(vals, dtype=np.float64), n_prefix


@given(scores(), st.floats(0, 1))
def test_attention_ranked_top_share_of_prefix(case, share):
    received, n_prefix = case
    rows = attention_ranked(received, n_prefix, share)
    assert_rows(rows, n_prefix)
    assert rows.size == int(np.floor(share * n_prefix + 1e-9))
    rest = np.setdiff1d(np.arange(n_prefix), rows)
    if rows.size and rest.size:
        assert received[rows].min() >= received[rest].max()


def test_attention_received_sums_layers_heads_last_queries():
    p1 = np.zeros((2, 5, 6))
    p1[0, 4, 1] = 1.0
    p1[1, 0, 2] = 7.0  # outside the window of the last 2 queries
    p2 = np.zeros((1, 3, 6))
    p2[0, 2, 1] = 0.5
    p2[0, 1, 3] = 0.25
    np.testing.assert_array_equal(attention_received([p1, p2], 2), [0, 1.5, 0, 0.25, 0, 0])
    with pytest.raises(ValueError, match="keys"):
        attention_received([p1, np.zeros((1, 3, 5))], 2)


@pytest.mark.parametrize("piece, cls", [
    ("ĠParis", "cap_start"), ("\u2581Zeta", "cap_start"), (" Alice", "cap_start"),
    ("Donald", "cap_piece"), ("is", "lower_piece"), ("Ġsaid", "lower_start"),
    ("x2", "mixed"), ("Ġa-b", "mixed"), ("3rd", "mixed"), ("Ġ7", "number"), ("12,345", "number"),
    (",", "punct"), ("Ġ", "space"), ("Ċ", "space"), ("ĠCOVID", "cap_start"),
])
def test_token_class_examples(piece, cls):
    assert token_class(piece) == cls


@st.composite
def token_rows(draw):
    pool = PIECES + ["Ġzebra", "ĠZ", "q9", "ĠOK", "abc"]
    pieces = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=60))
    ids = np.array([pool.index(p) for p in pieces], dtype=np.int64)
    counts = {i: draw(st.integers(0, 5)) for i in range(len(pool))}
    return pieces, ids, counts, draw(st.integers(0, len(pieces)))


@given(token_rows(), st.floats(0, 1))
def test_protected_rows_rarest_share_of_eligible(case, share):
    pieces, ids, counts, n_prefix = case
    rows = protected_rows(pieces, ids, counts, n_prefix, share)
    assert_rows(rows, n_prefix)
    eligible = [r for r in range(n_prefix) if token_class(pieces[r]) in ELIGIBLE_CLASSES]
    assert set(rows) <= set(eligible)
    assert rows.size == int(np.floor(share * len(eligible) + 1e-9))
    rest = sorted(set(eligible) - set(rows))
    if rows.size and rest:
        assert max(counts[ids[r]] for r in rows) <= min(counts[ids[r]] for r in rest)
    table = np.array([counts[i] for i in range(len(counts))])
    np.testing.assert_array_equal(protected_rows(pieces, ids, table, n_prefix, share), rows)


def test_digit_rows_and_special_rows():
    assert digit_rows(PIECES, 8).tolist() == [3, 4, 5, 6]
    assert special_rows(np.array([5, 1, 2, 1, 9]), {1, 9}).tolist() == [1, 3, 4]
    assert special_rows(np.array([5, 1, 2, 1, 9]), [1, 9], n_prefix=4).tolist() == [1, 3]


def test_probe_budget_counts_union_times_factor():
    assert probe_budget(100, [1, 2, 3], [3, 4], [4, 5, 6]) == 6
    assert probe_budget(100, [1, 2, 3], [3, 4], [4, 5, 6], factor=0.5) == 3
    assert probe_budget(4, [0, 1, 2], [3], [], factor=2.0) == 4  # never more than the prefix
    with pytest.raises(ValueError, match="digit_rows"):
        probe_budget(4, [0], [9], [])


@given(scores(), st.data())
def test_probe_rows_fill_budget_with_reserved_first(case, data):
    received, n_prefix = case
    E = data.draw(st.integers(0, n_prefix))
    reserved = data.draw(st.lists(st.integers(0, max(n_prefix - 1, 0)), max_size=5)) if n_prefix else []
    rows = probe_rows(received, n_prefix, E, reserved)
    assert_rows(rows, n_prefix)
    assert rows.size == E
    res = set(reserved)
    if len(res) <= E:
        assert res <= set(rows)
        others = sorted(set(rows) - res)
        rest = sorted(set(range(n_prefix)) - set(rows))
        if others and rest:
            assert received[others].min() >= received[rest].max()


@given(st.integers(0, 200), st.data(), st.integers(0, 2**31 - 1))
def test_random_rows_reproducible_count_matched(n_prefix, data, seed):
    exclude = data.draw(st.lists(st.integers(0, max(n_prefix - 1, 0)), max_size=10)) if n_prefix else []
    k = data.draw(st.integers(0, n_prefix - len(set(exclude))))
    rows = random_rows(n_prefix, k, seed, exclude)
    assert_rows(rows, n_prefix)
    assert rows.size == k and not set(rows) & set(exclude)
    np.testing.assert_array_equal(rows, random_rows(n_prefix, k, seed, exclude))


def test_random_rows_seeds_differ_and_too_many_raise():
    assert not np.array_equal(random_rows(1000, 50, 1), random_rows(1000, 50, 2))
    with pytest.raises(ValueError, match="k=11"):
        random_rows(10, 11, 0)


def test_word_groups_join_words_and_numbers():
    g = word_groups(PIECES)
    same = lambda *rows: len({g[r] for r in rows}) == 1  # noqa: E731
    assert same(3, 4, 5, 6)  # " 7731"
    assert not same(6, 7)  # trailing comma is not part of the number
    assert same(9, 10, 11)  # " McDonaldx"
    assert same(13, 14) and not same(14, 15)  # " Paris" then "."
    assert same(17, 18, 19)  # " 12,345"
    assert not same(20, 21) and not same(21, 22)  # "a - b" are three groups


@st.composite
def span_case(draw):
    pieces = draw(st.lists(st.sampled_from(PIECES), min_size=0, max_size=80))
    n_prefix = draw(st.integers(0, len(pieces)))
    rows = draw(st.lists(st.integers(0, max(n_prefix - 1, 0)), max_size=10)) if n_prefix else []
    return pieces, n_prefix, rows, draw(st.integers(1, 8))


@given(span_case())
def test_complete_spans_never_half_a_word_or_number(case):
    pieces, n_prefix, rows, max_run = case
    out = complete_spans(rows, pieces, n_prefix, max_run)
    assert_rows(out, n_prefix)
    assert set(rows) <= set(out)
    g = word_groups(pieces[:n_prefix])
    for label in np.unique(g):
        members = set(np.flatnonzero(g == label))
        if len(members) <= max_run:
            assert members <= set(out) or not members & set(out)
    np.testing.assert_array_equal(out, complete_spans(rows, pieces, n_prefix, max_run, backend="reference"))


@given(st.lists(st.integers(0, 3), max_size=50), st.data(), st.integers(1, 5))
def test_complete_groups_numba_equals_reference(steps, data, max_run):
    group = np.cumsum(np.array([1] + steps[1:], dtype=np.int64) > 0).astype(np.int64) - 1 if steps else np.zeros(0, np.int64)
    sel = np.array(data.draw(st.lists(st.booleans(), min_size=group.size, max_size=group.size)), dtype=bool)
    ref = SPAN_BACKENDS["reference"](group, sel, max_run)
    np.testing.assert_array_equal(text_kernels.complete_groups(group, sel, max_run), ref)
    np.testing.assert_array_equal(_py(text_kernels.complete_groups)(group, sel, max_run), ref)


@given(st.integers(0, 30), st.lists(st.lists(st.integers(0, 40), max_size=20), max_size=4))
def test_combine_respects_budget_and_priority(budget, lists):
    rows = combine(budget, *lists)
    union = set().union(*map(set, lists)) if lists else set()
    assert_rows(rows, 41)
    assert rows.size == min(budget, len(union)) and set(rows) <= union
    if lists and lists[0]:
        first = list(dict.fromkeys(lists[0]))[:budget]
        assert set(first) <= set(rows)


@pytest.mark.parametrize("call, arg", [
    (lambda: attention_ranked(np.ones(3), 5), "received"),
    (lambda: attention_ranked(np.array([1.0, np.nan]), 2), "received"),
    (lambda: attention_ranked(np.ones(3), 3, share=1.5), "share"),
    (lambda: attention_ranked(np.ones(3), -1), "n_prefix"),
    (lambda: protected_rows(PIECES[:3], np.array([0, 1]), {}, 3), "ids"),
    (lambda: protected_rows(PIECES[:2], np.arange(3), {}, 3), "pieces"),
    (lambda: probe_rows(np.ones(5), 5, 6), "E"),
    (lambda: complete_spans([7], PIECES, 5), "rows"),
    (lambda: combine(-1, [1]), "budget"),
    (lambda: random_rows(5, 2, 0, exclude=[9]), "exclude"),
])
def test_selectors_bad_arguments_raise(call, arg):
    with pytest.raises(ValueError, match=arg):
        call()


@given(share=st.floats(0, 1), n=st.integers(0, 5000))
def test_row_budget_is_the_floor_of_the_share(share, n):
    from fractions import Fraction

    from rfmodel.selectors import row_budget

    got = row_budget(share, n)
    exact = Fraction(share) * n
    assert 0 <= got <= n
    # floor(share * n), allowing the 1e-9 guard against float rounding just below an integer
    assert got == int(exact) or (got == int(exact) + 1 and int(exact) + 1 - exact <= Fraction(1, 10**9))
