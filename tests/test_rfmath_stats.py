"""Tests for rfmath.stats against §3.3 ("Against what") and §3.4 ("With what intervals").

Oracles: brute-force enumeration of k-subsets, the binomial distribution, the paper's reported
floor at n = 138, Monte-Carlo coverage of a known mean, and strata whose differences are
constant (so resamples that keep stratum sizes cannot move the mean).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rfmath.stats import (
    Interval,
    binomial_floor,
    control_size_term,
    count_matched_expected,
    noninferior,
    paired_bootstrap,
    weighted_bootstrap,
)


@given(
    st.integers(1, 8).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=st.floats(-100.0, 100.0)), st.integers(0, n)
        )
    )
)
def test_count_matched_expectation_is_k_over_n(case):
    """A uniformly random k-subset gains, on average, k/n of the total additive benefit:
    checked against the mean over every k-subset."""
    benefits, k = case
    n = benefits.size
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(benefits[list(s)].sum() for s in subsets) / len(subsets)
    expected = count_matched_expected(benefits, k)
    assert math.isclose(expected, brute, rel_tol=1e-9, abs_tol=1e-9)
    total = benefits.sum()
    assert math.isclose(expected, k / n * total, rel_tol=1e-9, abs_tol=1e-9)


@given(
    st.integers(1, 7).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=st.floats(-100.0, 100.0)),
            st.integers(0, n),
            st.integers(0, n),
            st.floats(-500.0, 500.0),
        )
    )
)
def test_control_size_margin(case):
    """Lean control_size_margin: a selection with benefit B, set against the average random
    set of k' rows instead of k, gains (k - k')/n of the total on top of its count-matched
    margin (averages by brute force over every subset)."""
    benefits, k, k_control, selection_benefit = case
    n = benefits.size

    def average(size: int) -> float:
        subsets = list(itertools.combinations(range(n), size))
        return sum(benefits[list(s)].sum() for s in subsets) / len(subsets)

    margin_other = selection_benefit - average(k_control)
    margin_matched = selection_benefit - average(k)
    term = control_size_term(benefits, k, k_control)
    assert math.isclose(margin_other, margin_matched + term, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(term, (k - k_control) / n * benefits.sum(), rel_tol=1e-9, abs_tol=1e-9)


@given(st.integers(1, 100_000), st.floats(1e-4, 0.5))
def test_binomial_floor_is_the_failure_rate_n_successes_cannot_rule_out(n, alpha):
    """At failure rate p = -floor/100, n successes out of n has probability exactly alpha."""
    floor = binomial_floor(n, alpha)
    assert -100.0 < floor < 0.0
    p = -floor / 100.0
    assert math.isclose(scipy.stats.binom.pmf(0, n, p), alpha, rel_tol=1e-6)
    assert math.isclose(floor, -100.0 * (1.0 - alpha ** (1.0 / n)), rel_tol=1e-9)


def test_binomial_floor_paper_values():
    """§3.4: -2.15 points at n = 138; about 3/n (rule of three) for large n."""
    assert round(binomial_floor(138), 2) == -2.15
    for n in (1_000, 10_000):
        assert math.isclose(binomial_floor(n), -300.0 / n, rel_tol=0.01)
    assert binomial_floor(1) == pytest.approx(-95.0)


def test_paired_bootstrap_covers_a_known_mean_at_about_the_nominal_rate():
    """200 seeded synthetic paired samples (n = 40, mean difference 0.3): the 95% interval
    covers 0.3 in 88-99% of them."""
    rng = np.random.default_rng(12345)
    covered = 0
    for rep in range(200):
        y = rng.normal(size=40)
        x = y + 0.3 + rng.normal(size=40)  # paired: x - y ~ N(0.3, 1)
        ci = paired_bootstrap(x, y, resamples=1000, seed=rep)
        covered += ci.low <= 0.3 <= ci.high
    assert 0.88 <= covered / 200 <= 0.99


@given(
    st.lists(st.integers(1, 12), min_size=1, max_size=4),
    st.data(),
    st.integers(0, 1000),
)
def test_paired_bootstrap_strata_keep_stratum_sizes(sizes, data, seed):
    """Differences constant within each stratum: a resample that keeps every stratum's size
    has exactly the original mean, so the interval collapses to the estimate."""
    levels = data.draw(
        hnp.arrays(np.float64, len(sizes), elements=st.floats(-5.0, 5.0), unique=True)
    )
    labels = np.repeat(np.arange(len(sizes)), sizes)
    order = np.random.default_rng(seed).permutation(labels.size)  # strata need not be contiguous
    labels = labels[order]
    x = levels[labels]
    y = np.zeros_like(x)
    ci = paired_bootstrap(x, y, resamples=300, seed=seed, strata=labels.astype(str))
    assert ci.n == x.size
    assert math.isclose(ci.estimate, x.mean(), rel_tol=1e-12, abs_tol=1e-12)
    assert math.isclose(ci.low, ci.estimate, rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(ci.high, ci.estimate, rel_tol=1e-9, abs_tol=1e-9)


@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float64, n, elements=st.floats(-10.0, 10.0)),
            hnp.arrays(np.int64, n, elements=st.integers(1, 20)),
        )
    ),
    st.integers(0, 1000),
)
def test_weighted_bootstrap_estimates_the_mean_over_members(case, seed):
    """The estimate is the mean over every member of every cluster (each cluster's members
    written out one by one), and scaling every weight by the same factor changes nothing
    (only the clusters' shares count)."""
    means, sizes = case
    members = np.repeat(means, sizes)
    ci = weighted_bootstrap(means, sizes, resamples=200, seed=seed)
    assert ci.n == means.size
    assert math.isclose(ci.estimate, members.mean(), rel_tol=1e-9, abs_tol=1e-9)
    scaled = weighted_bootstrap(means, 3 * sizes, resamples=200, seed=seed)
    assert scaled.low == pytest.approx(ci.low, abs=1e-9)
    assert scaled.high == pytest.approx(ci.high, abs=1e-9)


@given(
    st.integers(1, 30).flatmap(
        lambda n: hnp.arrays(np.float64, n, elements=st.floats(-10.0, 10.0))
    ),
    st.integers(1, 9),
    st.integers(0, 1000),
)
def test_weighted_bootstrap_with_equal_weights_is_the_paired_bootstrap(means, size, seed):
    """Clusters of one size weigh the same: the same resamples give paired_bootstrap's
    interval of the cluster means against zero."""
    ci = weighted_bootstrap(means, np.full(means.size, size), resamples=300, seed=seed)
    ref = paired_bootstrap(means, np.zeros_like(means), resamples=300, seed=seed)
    assert ci.estimate == pytest.approx(ref.estimate, abs=1e-9)
    assert ci.low == pytest.approx(ref.low, abs=1e-9)
    assert ci.high == pytest.approx(ref.high, abs=1e-9)


def test_weighted_bootstrap_covers_a_clustered_mean_at_about_the_nominal_rate():
    """200 seeded synthetic sets of 30 clusters (sizes 1-15, a cluster effect shared by its
    members, true per-member mean 0.3): the 95% interval covers 0.3 in 88-99% of them."""
    rng = np.random.default_rng(2024)
    covered = 0
    for rep in range(200):
        sizes = rng.integers(1, 16, size=30)
        means = np.array([0.3 + rng.normal() + rng.normal(size=k).mean() for k in sizes])
        ci = weighted_bootstrap(means, sizes, resamples=1000, seed=rep)
        covered += ci.low <= 0.3 <= ci.high
    assert 0.88 <= covered / 200 <= 0.99


def test_weighted_bootstrap_names_bad_weights():
    with pytest.raises(ValueError, match="weights must be > 0"):
        weighted_bootstrap([1.0, 2.0], [1, 0])
    with pytest.raises(ValueError, match="same length"):
        weighted_bootstrap([1.0, 2.0], [1])


def test_paired_bootstrap_without_strata_varies_the_mix():
    x = np.array([0.0] * 10 + [1.0] * 10)
    ci = paired_bootstrap(x, np.zeros(20), resamples=2000)
    assert ci.low < 0.5 < ci.high


def test_paired_bootstrap_is_reproducible_and_supports_the_median():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=30), rng.normal(size=30)
    first = paired_bootstrap(x, y, resamples=500, seed=7, stat="median")
    assert first == paired_bootstrap(x, y, resamples=500, seed=7, stat="median")
    assert isinstance(first, Interval)
    assert first.estimate == pytest.approx(np.median(x - y))
    assert first.low <= first.estimate <= first.high


@given(
    st.integers(5, 80).flatmap(
        lambda n: st.tuples(hnp.arrays(np.bool_, n), hnp.arrays(np.bool_, n))
    ),
    st.floats(0.5, 5.0),
    st.sampled_from([0.05, 0.025]),
)
def test_noninferior_uses_the_more_conservative_bound(case, margin, alpha):
    x, y = (a.astype(float) for a in case)
    result = noninferior(x, y, margin, resamples=400, seed=3, alpha=alpha)
    assert result.floor == pytest.approx(binomial_floor(x.size, alpha))
    assert result.bound == min(result.bootstrap_bound, result.floor)
    assert result.passed == (result.bound > -margin)
    assert result.estimate == pytest.approx(100.0 * (x - y).mean())
    # The bootstrap bound is the lower end of the two-sided (1 - 2 alpha) interval, in points.
    ci = paired_bootstrap(100.0 * x, 100.0 * y, resamples=400, seed=3, level=1.0 - 2.0 * alpha)
    assert result.bootstrap_bound == pytest.approx(ci.low)


def test_noninferior_floor_binds_when_both_arms_are_perfect():
    """§3.4: with both arms right on every sample the bootstrap bound is 0 and the floor
    binds; at n = 138 it is -2.15, so a 2-point test cannot pass, while a 3-point one can."""
    ones = np.ones(138)
    result = noninferior(ones, ones, 2.0)
    assert result.bootstrap_bound == 0.0
    assert round(result.bound, 2) == -2.15 and not result.passed
    assert noninferior(ones, ones, 3.0).passed


def test_noninferior_on_continuous_measures_has_no_floor():
    rng = np.random.default_rng(1)
    y = rng.normal(size=50)
    result = noninferior(y + 0.01, y, 0.1, accuracy=False, resamples=500)
    assert result.floor is None
    assert result.bound == result.bootstrap_bound == pytest.approx(0.01)
    assert result.passed


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: binomial_floor(0), "n"),
        (lambda: binomial_floor(10, alpha=1.0), "alpha"),
        (lambda: paired_bootstrap(np.zeros(0), np.zeros(0)), "n = 0"),
        (lambda: paired_bootstrap(np.zeros(3), np.zeros(4)), "x and y"),
        (lambda: paired_bootstrap(np.array([1.0, np.nan]), np.zeros(2)), "x"),
        (lambda: paired_bootstrap(np.zeros(3), np.zeros(3), stat="mode"), "stat"),
        (lambda: paired_bootstrap(np.zeros(3), np.zeros(3), level=1.5), "level"),
        (lambda: paired_bootstrap(np.zeros(3), np.zeros(3), resamples=0), "resamples"),
        (lambda: paired_bootstrap(np.zeros(3), np.zeros(3), strata=[0, 1]), "strata"),
        (lambda: noninferior(np.zeros(3), np.zeros(3), 0.0), "margin"),
        (lambda: noninferior(np.zeros(3), np.zeros(3), 2.0, alpha=0.0), "alpha"),
        (lambda: noninferior(np.full(3, 0.5), np.zeros(3), 2.0), "accuracy"),
        (lambda: count_matched_expected(np.ones(3), 4), "k"),
        (lambda: control_size_term(np.ones(3), 1, 4), "k_control"),
        (lambda: count_matched_expected(np.ones(0), 0), "benefits"),
        (lambda: count_matched_expected(np.array([1.0, np.nan]), 1), "benefits"),
    ],
)
def test_stats_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
