"""Tests for rfmath.cost against §2.5 ("Compute") and Appendix H ("Exact rows and the cost model").

Oracles: exact rational arithmetic for r and the paper's reported ceilings, hand counts of a
tiny stack, statements that follow from the counting rules of §2.5 (a row that runs a layer
exactly costs at least what a filled row costs when the MLP outweighs the map), and brute
force for the break-even number of exact rows.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from rfmath.cost import (
    Arch,
    break_even_rows,
    exact_row_cost,
    exact_share,
    macs,
    speedup_ceiling,
)

FILL_ARMS = ("ridgefill", "identity", "nofill")


@given(
    st.integers(1, 64).flatmap(lambda L: st.tuples(st.just(L), st.integers(0, L))),
    st.integers(0, 5000),
    st.integers(1, 5000),
)
def test_exact_share_closed_form(layers, T, N):
    """r = S/L + (1 - S/L) T/N for T <= N, and r = 1 once the tail covers the prompt."""
    L, S = layers
    r = exact_share(S, L, T, N)
    if T >= N:
        assert r == 1.0
    else:
        expected = Fraction(S, L) + (1 - Fraction(S, L)) * Fraction(T, N)
        assert math.isclose(r, float(expected), rel_tol=1e-12)
    assert 0.0 < r <= 1.0 or (S == 0 and T == 0 and r == 0.0)


def test_exact_share_paper_flash_next_ceilings():
    """§2.5 and §5.3: L=48, S=24, T=2,048: 1/r is 1.64x at 9K, 1.78x at 16K, 1.88x at 32K;
    r is about 0.61 at 9K and 0.53 at 32K."""
    ceilings = {9 * 1024: 1.64, 16 * 1024: 1.78, 32 * 1024: 1.88}
    for N, ceiling in ceilings.items():
        assert round(1.0 / exact_share(24, 48, 2048, N), 2) == ceiling
    assert round(exact_share(24, 48, 2048, 9 * 1024), 2) == 0.61
    assert round(exact_share(24, 48, 2048, 32 * 1024), 2) == 0.53


TINY = Arch(n_layers=2, d_model=4, n_heads=2, n_kv_heads=1, head_dim=2, d_ff=8, vocab=10)
# Per attention layer and row: Q 4*4=16, K 4*2=8, V 8, O 16, MLP 3*4*8=96 -> 144 dense;
# QK^T + AV: 2 * (2 heads * 2 dims) = 8 per key.  Logits: 10 * 4 = 40 per row.


def test_macs_exact_matches_hand_count_on_tiny_arch():
    # Rows p = 0, 1, 2 attend to 1, 2, 3 keys: 8 * (1 + 2 + 3) = 48 per layer.
    per_layer = 3 * 144 + 48
    assert macs(TINY, 3) == 2 * per_layer + 40
    assert macs(TINY, 3, logit_rows=3) == 2 * per_layer + 3 * 40


def test_macs_ridgefill_identity_nofill_hand_counts():
    lower = 3 * 144 + 48  # layer 0 runs exactly for every row
    tail = 144 + 8 * 3  # row 2 in layer 1, attending to all 3 rows
    fill = 8 + 8  # K and V projections of a filled row
    the_map = 4 * 4
    assert macs(TINY, 3, S=1, T=1, arm="ridgefill") == lower + tail + 2 * (fill + the_map) + 40
    assert macs(TINY, 3, S=1, T=1, arm="identity") == lower + tail + 2 * fill + 40
    assert macs(TINY, 3, S=1, T=1, arm="nofill") == lower + (144 + 8 * 1) + 40  # tail alone
    # One exact prefix row, charged the mean context of the prefix rows (1 + 2) / 2 = 1.5 keys.
    exact_row = 144 + 8 * 1.5
    assert (
        macs(TINY, 3, S=1, T=1, E=1, arm="ridgefill")
        == lower + tail + exact_row + fill + the_map + 40
    )
    # nofill: the exact prefix row and the tail form a 2-row sequence in layer 1.
    assert macs(TINY, 3, S=1, T=1, E=1, arm="nofill") == lower + 2 * 144 + 8 * (1 + 2) + 40
    # A wider map input (as on Flash-Next, d_in > d_out) costs map_in * d per filled row.
    assert (
        macs(TINY, 3, S=1, T=1, arm="ridgefill", map_in=16)
        == lower + tail + 2 * (fill + 16 * 4) + 40
    )


def test_macs_sliding_and_gdn_hand_counts():
    sliding = Arch(
        n_layers=1,
        d_model=4,
        n_heads=2,
        n_kv_heads=1,
        head_dim=2,
        d_ff=8,
        layer_types=("sliding",),
        sliding_window=2,
    )
    # Rows 0..3 attend to min(p + 1, 2) = 1, 2, 2, 2 keys.
    assert macs(sliding, 4, logit_rows=0) == 4 * 144 + 8 * (1 + 2 + 2 + 2)
    gdn = Arch(
        n_layers=1,
        d_model=4,
        n_heads=1,
        n_kv_heads=1,
        head_dim=1,
        d_ff=8,
        layer_types=["gdn"],
        gdn_k_heads=1,
        gdn_v_heads=2,
        gdn_k_dim=2,
        gdn_v_dim=3,
    )
    assert gdn.layer_types == ("gdn",)
    # Exact row: q, k 4*2 each; v, z 4*6 each; beta, gate 4*2 each; out 6*4; state 3*(2*2*3);
    # MLP 96.
    exact_row = 8 + 8 + 24 + 24 + 8 + 8 + 24 + 36 + 96
    assert macs(gdn, 5, logit_rows=0) == 5 * exact_row
    # Filled row (S = 0, T = 2 of N = 5): k 8, v 24, beta and gate 16, state update 2*12.
    filled_row = 8 + 24 + 16 + 24
    assert macs(gdn, 5, S=0, T=2, arm="identity", logit_rows=0) == 2 * exact_row + 3 * filled_row


@st.composite
def arch(draw, *, homogeneous: str | None = None, dense_mlp: bool = False):
    """A small stack; dense_mlp keeps d_ff >= d_model (true of real LLMs), so the MLP a filled
    row skips costs more than a d x d map."""
    n_layers = draw(st.integers(1, 8))
    d_model = draw(st.integers(1, 64))
    n_kv = draw(st.integers(1, 4))
    n_heads = n_kv * draw(st.integers(1, 4))
    head_dim = draw(st.integers(1, 32))
    d_ff = draw(st.integers(d_model if dense_mlp else 1, 4 * d_model + 1))
    if homogeneous is None:
        kinds = tuple(
            draw(
                st.lists(
                    st.sampled_from(["attention", "sliding", "gdn"]),
                    min_size=n_layers,
                    max_size=n_layers,
                )
            )
        )
    else:
        kinds = (homogeneous,) * n_layers
    return Arch(
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        d_ff=d_ff,
        vocab=draw(st.integers(0, 500)),
        layer_types=kinds,
        sliding_window=draw(st.integers(1, 64)),
        gdn_k_heads=(kh := draw(st.integers(1, 4))),
        gdn_v_heads=kh * draw(st.integers(1, 3)),
        gdn_k_dim=draw(st.integers(1, 32)),
        gdn_v_dim=draw(st.integers(1, 32)),
    )


@st.composite
def plan(draw, layers: int, *, room: int = 0):
    """N, S, T, E with E <= N - min(T, N) - room."""
    N = draw(st.integers(1, 3000))
    S = draw(st.integers(0, layers))
    T = draw(st.integers(0, N + 10))
    prefix = N - min(T, N)
    assume(prefix >= room)
    E = draw(st.integers(0, prefix - room))
    return N, S, T, E


@given(arch(dense_mlp=True), st.sampled_from(FILL_ARMS), st.data())
def test_macs_more_exact_rows_cost_more(a, arm, data):
    N, S, T, E = data.draw(plan(a.n_layers, room=1))
    assume(S < a.n_layers)
    assert macs(a, N, S=S, T=T, E=E + 1, arm=arm) > macs(a, N, S=S, T=T, E=E, arm=arm)


@given(arch(dense_mlp=True), st.sampled_from(FILL_ARMS), st.data())
def test_macs_longer_tail_costs_more(a, arm, data):
    N, S, T, E = data.draw(plan(a.n_layers, room=1))
    assume(S < a.n_layers and T < N)
    assert macs(a, N, S=S, T=T + 1, E=E, arm=arm) > macs(a, N, S=S, T=T, E=E, arm=arm)


@given(arch(), st.data(), st.integers(1, 20000))
def test_macs_map_costs_map_in_times_d_per_filled_row_per_late_layer(a, data, map_in):
    """§2.2 "Size and cost": a map costs d_in d_out per filled row per layer, on top of the
    layer's own projections; nothing else differs between RidgeFill and the identity fill."""
    N, S, T, E = data.draw(plan(a.n_layers))
    filled = N - min(T, N) - E
    extra = macs(a, N, S=S, T=T, E=E, arm="ridgefill", map_in=map_in) - macs(
        a, N, S=S, T=T, E=E, arm="identity"
    )
    assert math.isclose(
        extra, (a.n_layers - S) * filled * map_in * a.d_model, rel_tol=1e-12, abs_tol=1e-6
    )


@given(arch(), st.data())
def test_macs_arm_order_nofill_identity_exact(a, data):
    """No fill <= identity fill <= exact, in every configuration."""
    N, S, T, E = data.draw(plan(a.n_layers))
    nofill = macs(a, N, S=S, T=T, E=E, arm="nofill")
    identity = macs(a, N, S=S, T=T, E=E, arm="identity")
    assert nofill <= identity * (1 + 1e-12) <= macs(a, N) * (1 + 1e-12)


@given(arch(), st.sampled_from(FILL_ARMS), st.integers(1, 3000), st.data())
def test_macs_nothing_filled_equals_exact(a, arm, N, data):
    """With the split at the top (S = L) or a tail covering the prompt, every arm is exact."""
    exact = macs(a, N)
    assert math.isclose(
        macs(a, N, S=a.n_layers, T=data.draw(st.integers(0, N)), arm=arm), exact, rel_tol=1e-12
    )
    assert math.isclose(
        macs(
            a,
            N,
            S=data.draw(st.integers(0, a.n_layers)),
            T=data.draw(st.integers(N, N + 5)),
            arm=arm,
        ),
        exact,
        rel_tol=1e-12,
    )


@given(
    st.sampled_from(["attention", "sliding", "gdn"]).flatmap(lambda k: arch(homogeneous=k)),
    st.sampled_from(["ridgefill", "identity"]),
    st.data(),
)
def test_speedup_ceiling_at_most_inverse_r_on_uniform_stacks(a, arm, data):
    """§2.5: with every layer of one type, the multiply-accumulate ceiling never exceeds 1/r:
    filled rows still pay K and V (and the map), and the tail rows skipped by nobody are the
    ones with the longest attention context."""
    N, S, T, E = data.draw(plan(a.n_layers))
    ceiling = speedup_ceiling(a, N, S, T, E, arm)
    assert ceiling * exact_share(S, a.n_layers, T, N) <= 1.0 + 1e-12  # r = 0 when S = T = 0


def test_speedup_ceiling_can_exceed_inverse_r():
    """1/r is not a bound in general: with no fill the tail attends only to itself, and in a
    hybrid whose late layers cost more per row than its lower ones the skipped share is larger
    than r counts. (The paper's 1/r assumes equal layers, §8 "Scope".)"""
    a = Arch(n_layers=2, d_model=8, n_heads=2, n_kv_heads=1, head_dim=4, d_ff=8)
    r = exact_share(1, 2, 64, 4096)
    assert speedup_ceiling(a, 4096, 1, 64, arm="nofill") > 1.0 / r
    hybrid = Arch(
        n_layers=2,
        d_model=8,
        n_heads=2,
        n_kv_heads=1,
        head_dim=4,
        d_ff=8,
        layer_types=("sliding", "attention"),
        sliding_window=4,
    )
    assert speedup_ceiling(hybrid, 4096, 1, 64, arm="identity") > 1.0 / r


def test_speedup_ceiling_is_infinite_when_the_arm_costs_nothing():
    assert speedup_ceiling(TINY, 3, 0, 0, arm="nofill", logit_rows=0) == math.inf


def test_macs_smollm2_ceiling_matches_design_note():
    """The design example: SmolLM2-135M at 8K, split 15, tail 1,024: the MAC ceiling is
    about 1.60x while 1/r is 1.78x (attention over the context is over half the exact cost)."""
    smollm2 = Arch(
        n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, head_dim=64, d_ff=1536, vocab=49152
    )
    assert round(1.0 / exact_share(15, 30, 1024, 8192), 2) == 1.78
    assert abs(speedup_ceiling(smollm2, 8192, 15, 1024) - 1.60) < 0.02


@given(st.floats(0.0, 1e3), st.floats(1e-3, 1e2), st.integers(1, 10_000))
def test_exact_row_cost_recovers_sigma_of_a_line(tau0, sigma, e1):
    """tau(E) = tau0 + E sigma: two timings fix sigma = (tau(E1) - tau0) / E1."""
    assert math.isclose(exact_row_cost(tau0, tau0 + e1 * sigma, e1), sigma, rel_tol=1e-6)


def affordable(k: int, tau_exact: float, tau0: float, sigma: float) -> bool:
    """tau(k) = tau0 + k sigma <= tau_exact, in exact rational arithmetic on the given floats."""
    return Fraction(tau0) + k * Fraction(sigma) <= Fraction(tau_exact)


@given(st.floats(0.0, 100.0), st.floats(1e-2, 10.0), st.floats(-50.0, 200.0))
def test_break_even_rows_is_the_largest_affordable_count(tau0, sigma, gap):
    """RidgeFill with E exact rows is no slower than exact while tau0 + E sigma <= tau_exact;
    tau(E) grows with E, so the largest such E is affordable and E + 1 is not."""
    tau_exact = tau0 + gap
    e = break_even_rows(tau_exact, tau0, sigma)
    assert affordable(e, tau_exact, tau0, sigma)
    assert not affordable(e + 1, tau_exact, tau0, sigma)


@given(
    st.floats(0.0, 100.0), st.floats(-50.0, 200.0), st.floats(1e-2, 10.0), st.integers(-60, 30_000)
)
def test_break_even_iff(tau0, gap, sigma, e):
    """Lean break_even_iff: tau0 + E sigma <= tau_exact exactly when E <= (tau_exact - tau0)/sigma
    (exact rationals on the given floats), so exactly when E <= break_even_rows(...)."""
    tau_exact = tau0 + gap
    fits = affordable(e, tau_exact, tau0, sigma)
    ratio = (Fraction(tau_exact) - Fraction(tau0)) / Fraction(sigma)
    assert fits == (e <= ratio)
    assert fits == (e <= break_even_rows(tau_exact, tau0, sigma))


@given(
    st.floats(0.0, 100.0), st.floats(-50.0, 200.0), st.floats(1e-2, 10.0), st.integers(-60, 30_000)
)
def test_break_even_floor(tau0, gap, sigma, e):
    """Lean break_even_floor: the m that break_even_rows returns is the floor of
    x = (tau_exact - tau0)/sigma (m <= x < m + 1); m rows fit, m + 1 do not, and any count that
    fits is below m + 1."""
    tau_exact = tau0 + gap
    m = break_even_rows(tau_exact, tau0, sigma)
    x = (Fraction(tau_exact) - Fraction(tau0)) / Fraction(sigma)
    assert m <= x < m + 1
    assert affordable(m, tau_exact, tau0, sigma)
    assert not affordable(m + 1, tau_exact, tau0, sigma)
    if affordable(e, tau_exact, tau0, sigma):
        assert e < m + 1


@pytest.mark.parametrize("k", [0, 1, 7, 1000])
def test_break_even_rows_on_the_boundary(k):
    """Exactly on the line (binary fractions, no rounding): E = k rows break even."""
    assert break_even_rows(0.25 + k * 0.125, 0.25, 0.125) == k


def test_break_even_rows_uses_the_floats_exact_ratio():
    assert break_even_rows(10.0, 4.0, 2.0) == 3
    # As doubles, (0.3 - 0.1) / 0.1 is just below 2 (0.1 is stored slightly high): 1 row.
    assert break_even_rows(0.3, 0.1, 0.1) == 1


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: exact_share(5, 4, 0, 10), "S"),
        (lambda: exact_share(1, 4, 0, 0), "N"),
        (lambda: exact_share(1, 4, -1, 10), "T"),
        (lambda: exact_share(1, 0, 0, 10), "L"),
        (lambda: Arch(0, 4, 2, 1, 2, 8), "n_layers"),
        (lambda: Arch(2, 4, 1, 2, 2, 8), "n_kv_heads"),
        (lambda: Arch(2, 4, 2, 1, 2, 8, layer_types=("attention",)), "layer_types"),
        (lambda: Arch(1, 4, 2, 1, 2, 8, layer_types=("mamba",)), "layer_types"),
        (lambda: Arch(1, 4, 2, 1, 2, 8, layer_types="attention"), "layer_types"),
        (lambda: Arch(1, 4, 2, 1, 2, 8, layer_types=("sliding",)), "sliding_window"),
        (lambda: Arch(1, 4, 2, 1, 2, 8, layer_types=("gdn",)), "gdn_k_heads"),
        (lambda: macs(TINY, 0), "N"),
        (lambda: macs(TINY, 3, arm="fast"), "arm"),
        (lambda: macs(TINY, 3, arm="ridgefill"), "S"),
        (lambda: macs(TINY, 3, S=3, arm="ridgefill"), "S"),
        (lambda: macs(TINY, 3, S=1, T=1, E=3, arm="ridgefill"), "E"),
        (lambda: macs(TINY, 3, S=1, map_in=0, arm="ridgefill"), "map_in"),
        (lambda: macs(TINY, 3, logit_rows=4), "logit_rows"),
        (lambda: macs("llama", 3), "arch"),
        (lambda: exact_row_cost(1.0, 2.0, 0), "E1"),
        (lambda: exact_row_cost(float("nan"), 2.0, 1), "tau0"),
        (lambda: break_even_rows(10.0, 4.0, 0.0), "sigma"),
        (lambda: break_even_rows(10.0, 4.0, -1.0), "sigma"),
    ],
)
def test_cost_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()


@given(st.integers(1, 6), st.integers(1, 64), st.integers(1, 4), st.data())
def test_kv_arm_costs_the_identity_fill_and_less_than_ridgefill(L, d, heads, data):
    """The direct cache-entry map (beyond the paper) replaces a filled row's K and V
    projections by one map of the same shape: its MACs equal the identity fill's at every
    split, tail and exact-row count, and undercut the ridge fill's by the d x d map per filled
    row per late layer (hand count: filled rows * late layers * d^2)."""
    kv_heads = data.draw(st.integers(1, heads))
    a = Arch(n_layers=L, d_model=d, n_heads=heads, n_kv_heads=kv_heads, head_dim=4, d_ff=2 * d)
    N = data.draw(st.integers(1, 300))
    S = data.draw(st.integers(0, L))
    T = data.draw(st.integers(0, N))
    E = data.draw(st.integers(0, N - min(T, N)))
    kv = macs(a, N, S=S, T=T, E=E, arm="kv")
    assert kv == macs(a, N, S=S, T=T, E=E, arm="identity")
    filled = N - min(T, N) - E
    assert macs(a, N, S=S, T=T, E=E, arm="ridgefill") - kv == filled * (L - S) * d * d


def test_kv_arm_refuses_gdn_layers():
    hybrid = Arch(n_layers=2, d_model=4, n_heads=2, n_kv_heads=1, head_dim=2, d_ff=8,
                  layer_types=("attention", "gdn"), gdn_k_heads=1, gdn_v_heads=1,
                  gdn_k_dim=2, gdn_v_dim=2)
    with pytest.raises(ValueError, match="gdn"):
        macs(hybrid, 10, S=1, T=2, arm="kv")
    assert macs(hybrid, 10, S=2, T=2, arm="kv") > 0  # no gdn layer at or above the split
