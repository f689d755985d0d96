"""Property tests for rfmath.gating against the statements of §2.3 and Appendix H.

The oracles are independent of the code under test: the recurrence M_t = g_t M_{t-1} + u_t run
by a Python loop, explicit matrices for the delta rule, and the theorems' inequalities.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rfmath.gating import (
    contraction_factor,
    corrected_state,
    correction_residual,
    delta_rule_step,
    filled_share,
    state_weights,
    tail_share_bound,
)

GATE = st.floats(min_value=1e-6, max_value=1.0)  # any gate in (0, 1], bounded off 0
VALUE = st.floats(min_value=-10.0, max_value=10.0)


def run_recurrence(
    gates: np.ndarray, updates: np.ndarray, start: np.ndarray | None = None
) -> np.ndarray:
    """M_t = g_t M_{t-1} + u_t by a plain loop (Appendix H, no erase term); rows on axis 0."""
    state = np.zeros(updates.shape[1:]) if start is None else np.array(start, dtype=float)
    for g, u in zip(gates, updates, strict=True):
        state = g * state + u
    return state


@st.composite
def prefix_case(draw, *, max_rows: int = 24, max_dim: int = 3):
    """Gates, per-row updates, a filled mask and a shift delta for one head."""
    n = draw(st.integers(1, max_rows))
    d_k = draw(st.integers(1, max_dim))
    d_v = draw(st.integers(1, max_dim))
    gates = draw(hnp.arrays(np.float64, n, elements=GATE))
    updates = draw(hnp.arrays(np.float64, (n, d_k, d_v), elements=VALUE))
    filled = draw(hnp.arrays(np.bool_, n))
    delta = draw(hnp.arrays(np.float64, (d_k, d_v), elements=VALUE))
    return gates, updates, filled, delta


def close(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    return bool(np.allclose(a, b, rtol=1e-9, atol=1e-9 * max(scale, 1.0)))


@given(
    st.integers(1, 3).flatmap(
        lambda h: st.integers(1, 30).flatmap(
            lambda n: st.tuples(
                hnp.arrays(np.float64, (h, n), elements=GATE),
                hnp.arrays(np.float64, (h, n, 2, 3), elements=VALUE),
            )
        )
    )
)
def test_state_weights_unroll_recurrence(case):
    """Running M_t = g_t M_{t-1} + u_t equals sum_j w_j u_j with w_j = prod_{k>j} g_k."""
    gates, updates = case  # (H, n), (H, n, d_k, d_v)
    w = state_weights(gates)  # (H, n)
    assert w.shape == gates.shape
    assert np.all(w[:, -1] == 1.0)
    for h in range(gates.shape[0]):
        by_loop = run_recurrence(gates[h], updates[h])
        unrolled = np.einsum("j,jkv->kv", w[h], updates[h])
        assert close(unrolled, by_loop, np.abs(updates).sum())


@given(prefix_case(), st.integers(0, 8), st.data())
@example(
    (np.array([0.5, 0.9]), np.zeros((2, 1, 1)), np.array([False, False]), np.ones((1, 1))), 0, None
)
def test_rho_scaled_correction_cancels_uniform_shift(case, m, data):
    """Filled rows' updates shifted by delta: adding rho * Delta_M restores the exact state,
    where Delta_M is exact minus fully-filled; it still does after m further exact rows."""
    gates, updates, filled, delta = case
    exact = run_recurrence(gates, updates)
    shifted = run_recurrence(gates, updates + filled[:, None, None] * delta)  # the fill's state
    all_filled = run_recurrence(gates, updates + delta)  # what Delta_M estimates
    delta_M = exact - all_filled
    rho = filled_share(gates, filled)
    scale = np.abs(updates).sum() + np.abs(delta).sum() * gates.size
    assert close(corrected_state(shifted, delta_M, rho), exact, scale)
    assert close(correction_residual(shifted, exact, delta_M, rho), 0.0 * exact, scale)
    if m == 0 or data is None:
        return
    tail_gates = data.draw(hnp.arrays(np.float64, m, elements=GATE))
    tail_updates = data.draw(hnp.arrays(np.float64, (m,) + delta.shape, elements=VALUE))
    scale += np.abs(tail_updates).sum()
    final_exact = run_recurrence(tail_gates, tail_updates, start=exact)
    final_corrected = run_recurrence(
        tail_gates, tail_updates, start=corrected_state(shifted, delta_M, rho)
    )
    assert close(final_corrected, final_exact, scale)
    # Uncorrected, the error fades exactly as the correction would: by the tail's gates.
    final_shifted = run_recurrence(tail_gates, tail_updates, start=shifted)
    assert close(final_shifted - final_exact, np.prod(tail_gates) * (shifted - exact), scale)


@given(prefix_case(), st.floats(min_value=-2.0, max_value=2.0))
def test_other_scale_leaves_residual(case, scale_c):
    """Any scale other than rho leaves part of the shift; the unscaled correction (scale 1)
    overshoots by the exact prefix rows' share: -delta * sum_{j exact} w_j."""
    gates, updates, filled, delta = case
    assume(np.abs(delta).max() > 1e-3)
    exact = run_recurrence(gates, updates)
    shifted = run_recurrence(gates, updates + filled[:, None, None] * delta)
    delta_M = exact - run_recurrence(gates, updates + delta)
    rho = filled_share(gates, filled)
    assume(abs(scale_c - rho) > 1e-6)
    residual = correction_residual(shifted, exact, delta_M, scale_c)
    assert np.linalg.norm(residual) > 0.0
    # Size of what is left: |c - rho| times the full-prefix offset.
    assert np.isclose(
        np.linalg.norm(residual), abs(scale_c - rho) * np.linalg.norm(delta_M), rtol=1e-7, atol=1e-9
    )
    # Unscaled: the overshoot is the state that -delta on the exact rows alone would build.
    overshoot = run_recurrence(gates, (~filled)[:, None, None] * -delta + 0.0 * updates)
    size = np.abs(updates).sum() + np.abs(delta).sum() * gates.size
    assert close(correction_residual(shifted, exact, delta_M, 1.0), overshoot, size)


@given(
    st.floats(min_value=0.01, max_value=0.999),
    st.integers(0, 30),
    st.integers(0, 40),
    st.data(),
)
def test_filled_share_behind_tail_within_bound(gamma, m, n_prefix, data):
    """All gates <= gamma and the last m rows exact: filled share <= gamma^m / (1 - gamma)."""
    n = n_prefix + m
    assume(n >= 1)
    fractions = data.draw(hnp.arrays(np.float64, n, elements=st.floats(1e-3, 1.0)))
    gates = gamma * fractions
    filled = np.zeros(n, dtype=bool)
    filled[:n_prefix] = data.draw(hnp.arrays(np.bool_, n_prefix))
    # Oracle share from the recurrence itself: unit updates on filled rows over unit everywhere.
    share = (
        run_recurrence(gates, filled[:, None].astype(float))[0]
        / run_recurrence(gates, np.ones((n, 1)))[0]
    )
    rho = filled_share(gates, filled)
    assert np.isclose(rho, share, rtol=1e-9, atol=1e-200)
    assert rho <= tail_share_bound(gamma, m) * (1.0 + 1e-12)


def test_filled_share_matches_paper_figure_4_and_bound_example():
    """Figure 4: 200 rows, last 50 exact: share ~0.005 at gates 0.90, ~0.65 at 0.995;
    Appendix H: gamma = 0.4, m = 16 gives 7.2e-7."""
    filled = np.arange(200) < 150
    assert round(float(filled_share(np.full(200, 0.90), filled)), 3) == 0.005
    assert round(float(filled_share(np.full(200, 0.995), filled)), 2) == 0.65
    assert f"{tail_share_bound(0.4, 16):.1e}" == "7.2e-07"


@st.composite
def delta_rule_case(draw):
    d_k = draw(st.integers(1, 4))
    d_v = draw(st.integers(1, 4))
    m = draw(st.integers(0, 8))
    gamma = draw(st.floats(min_value=0.05, max_value=0.99))
    keys = draw(hnp.arrays(np.float64, (m, d_k), elements=st.floats(-1.0, 1.0)))
    assume(m == 0 or np.linalg.norm(keys, axis=1).min() > 1e-2)
    keys = keys / np.linalg.norm(keys, axis=1, keepdims=True) if m else keys  # unit norm
    values = draw(hnp.arrays(np.float64, (m, d_v), elements=VALUE))
    betas = draw(hnp.arrays(np.float64, m, elements=st.floats(0.0, 2.0)))
    gates = gamma * draw(hnp.arrays(np.float64, m, elements=st.floats(1e-3, 1.0)))
    s1 = draw(hnp.arrays(np.float64, (d_k, d_v), elements=VALUE))
    s2 = draw(hnp.arrays(np.float64, (d_k, d_v), elements=VALUE))
    return gamma, keys, values, betas, gates, s1, s2


@given(delta_rule_case())
def test_delta_rule_contraction(case):
    """Same unit keys, values, beta in [0, 2], gates <= gamma: after m steps the squared
    Frobenius distance between two states is at most gamma^(2m) times the distance before."""
    gamma, keys, values, betas, gates, s1, s2 = case
    before = np.sum((s1 - s2) ** 2)
    for k, v, b, g in zip(keys, values, betas, gates, strict=True):
        s1 = delta_rule_step(s1, k, v, g, b)
        s2 = delta_rule_step(s2, k, v, g, b)
    after = np.sum((s1 - s2) ** 2)
    factor = contraction_factor(gamma, len(gates))
    assert after <= factor**2 * before * (1.0 + 1e-9) + 1e-12


@given(
    st.integers(1, 3),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 2**32 - 1),
)
def test_delta_rule_step_matches_explicit_matrices(heads, d_k, d_v, seed):
    """Batched over heads, the step equals g (I - beta k k^T) S + beta k v^T with explicit I."""
    rng = np.random.default_rng(seed)
    state = rng.normal(size=(heads, d_k, d_v))
    k, v = rng.normal(size=(heads, d_k)), rng.normal(size=(heads, d_v))
    g, beta = rng.uniform(0.01, 1.0, size=heads), rng.uniform(0.0, 2.0, size=heads)
    out = delta_rule_step(state, k, v, g, beta)
    for h in range(heads):
        erase = np.eye(d_k) - beta[h] * np.outer(k[h], k[h])
        expected = g[h] * erase @ state[h] + beta[h] * np.outer(k[h], v[h])
        assert np.allclose(out[h], expected, rtol=1e-12, atol=1e-12)


def test_state_weights_stable_for_long_sequences():
    """100k gates of 0.9999: weights stay finite, in (0, 1], and match exp((n-1-j) log g)."""
    n = 100_000
    w = state_weights(np.full(n, 0.9999))
    expected = np.exp(np.arange(n - 1, -1, -1) * np.log(0.9999))
    assert np.all(np.isfinite(w)) and w[-1] == 1.0
    assert np.allclose(w, expected, rtol=1e-9)


@given(
    st.integers(1, 3).flatmap(
        lambda h: st.integers(1, 30).flatmap(
            lambda n: st.tuples(
                hnp.arrays(np.float64, (h, n), elements=GATE), hnp.arrays(np.bool_, (h, n))
            )
        )
    )
)
def test_rho_mem_unit(case):
    """Lean rho_mem_unit: for a nonempty prompt with every gate in [0, 1] (here (0, 1], what
    filled_share accepts), the filled share of every head lies in [0, 1]."""
    gates, filled = case
    rho = filled_share(gates, filled)
    assert rho.shape == gates.shape[:1]
    assert np.all(rho >= 0.0) and np.all(rho <= 1.0)


@st.composite
def heads_case(draw, *, max_heads: int = 3, max_rows: int = 12, max_dim: int = 3):
    """Per-head gates, per-head matrix updates, a filled mask and a per-head shift delta."""
    h = draw(st.integers(1, max_heads))
    n = draw(st.integers(1, max_rows))
    d_k = draw(st.integers(1, max_dim))
    d_v = draw(st.integers(1, max_dim))
    gates = draw(hnp.arrays(np.float64, (h, n), elements=GATE))
    updates = draw(hnp.arrays(np.float64, (h, n, d_k, d_v), elements=VALUE))
    filled = draw(hnp.arrays(np.bool_, n))
    delta = draw(hnp.arrays(np.float64, (h, d_k, d_v), elements=VALUE))
    return gates, updates, filled, delta


def run_heads(gates: np.ndarray, updates: np.ndarray, start: np.ndarray | None = None):
    """run_recurrence head by head: gates (H, n), updates (H, n, d_k, d_v)."""
    return np.stack([
        run_recurrence(gates[h], updates[h], None if start is None else start[h])
        for h in range(gates.shape[0])
    ])


@given(heads_case())
def test_matrix_corrected_state_eq_exact(case):
    """Lean matrix_corrected_state_eq_exact: matrix states, one gate and one rho per head;
    filled rows' updates shifted by the matrix delta; state + rho (delta sum_j w_j) is the
    exact state in every entry."""
    gates, updates, filled, delta = case
    exact = run_heads(gates, updates)
    shift = filled[None, :, None, None] * delta[:, None]  # mask(filled) delta, per head
    shifted = run_heads(gates, updates - shift)
    total = state_weights(gates).sum(axis=-1)  # sum_j w_j per head
    delta_M = delta * total[:, None, None]
    rho = filled_share(gates, filled)  # one per head
    scale = np.abs(updates).sum() + np.abs(delta).sum() * gates.size
    assert close(corrected_state(shifted, delta_M, rho), exact, scale)


@given(heads_case(), st.integers(0, 6), st.data())
def test_matrix_correction_cancels_after_tail(case, m, data):
    """Lean matrix_correction_cancels_after_tail: after m more rows (any gates and updates),
    the correction rho (delta sum_j w_j), faded by the tail's gates, still restores the exact
    final matrix state of every head."""
    gates, updates, filled, delta = case
    h, _, d_k, d_v = updates.shape
    tail_gates = data.draw(hnp.arrays(np.float64, (h, m), elements=GATE))
    tail_updates = data.draw(hnp.arrays(np.float64, (h, m, d_k, d_v), elements=VALUE))
    shift = filled[None, :, None, None] * delta[:, None]
    final_exact = run_heads(tail_gates, tail_updates, start=run_heads(gates, updates))
    final_shifted = run_heads(tail_gates, tail_updates, start=run_heads(gates, updates - shift))
    delta_M = delta * state_weights(gates).sum(axis=-1)[:, None, None]
    faded = np.prod(tail_gates, axis=-1)[:, None, None] * delta_M  # gateProd tail * Delta_M
    rho = filled_share(gates, filled)
    scale = np.abs(updates).sum() + np.abs(tail_updates).sum() + np.abs(delta).sum() * gates.size
    assert close(corrected_state(final_shifted, faded, rho), final_exact, scale)


def test_filled_share_broadcasts_mask_over_heads():
    gates = np.array([[0.5, 0.5, 1.0], [1.0, 1.0, 1.0]])
    rho = filled_share(gates, np.array([True, False, False]))
    assert rho.shape == (2,)
    assert np.allclose(rho, [0.5 / 2.5, 1.0 / 3.0])  # w = (0.5, 1, 1) and (1, 1, 1)


def test_corrected_state_broadcasts_rho_per_head():
    state = np.zeros((2, 3, 4))
    out = corrected_state(state, np.ones((3, 4)), np.array([0.25, 0.5]))
    assert np.allclose(out[0], 0.25) and np.allclose(out[1], 0.5)


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda: state_weights([0.5, 0.0]), "gates"),
        (lambda: state_weights([0.5, 1.5]), "gates"),
        (lambda: state_weights([0.5, np.nan]), "gates"),
        (lambda: state_weights(np.zeros((2, 0))), "gates"),
        (lambda: filled_share([0.5, 0.5], [1, 0]), "filled"),
        (lambda: filled_share([0.5, 0.5], [True]), "filled"),
        (lambda: corrected_state(np.zeros((2, 3, 3)), np.zeros((3, 3)), np.ones(3)), "rho"),
        (lambda: corrected_state(np.zeros((3, 3)), np.zeros((2, 3)), 0.5), "delta_M"),
        (lambda: corrected_state(np.zeros((3, 3)), np.zeros((3, 3)), np.nan), "rho"),
        (lambda: correction_residual(np.zeros((3, 3)), np.zeros((2, 3)), 0.0, 0.5), "state_filled"),
        (lambda: tail_share_bound(1.0, 3), "gamma"),
        (lambda: tail_share_bound(0.0, 3), "gamma"),
        (lambda: tail_share_bound(0.5, -1), "m"),
        (lambda: contraction_factor(1.2, 3), "gamma"),
        (lambda: contraction_factor(0.5, 2.5), "m"),
        (lambda: delta_rule_step(np.zeros((2, 3)), np.ones(3), np.ones(3), 0.5, 1.0), "k"),
        (lambda: delta_rule_step(np.zeros((2, 3)), np.ones(2), np.ones(2), 0.5, 1.0), "v"),
        (lambda: delta_rule_step(np.zeros((2, 3)), np.ones(2), np.ones(3), 0.0, 1.0), "g"),
        (lambda: delta_rule_step(np.zeros((2, 2, 3)), np.ones((3, 2)), np.ones(3), 0.5, 1.0), "k"),
    ],
)
def test_gating_bad_arguments_raise_value_error_naming_them(call, argument):
    with pytest.raises(ValueError, match=argument):
        call()
