"""Gated DeltaNet scan (rfmodel.gdn): Numba == NumPy, rfmath twins, the rho-scaled correction
(Appendix H, StCorrection) and the gamma^m contraction (GdnContraction)."""
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rfmath.gating import contraction_factor, delta_rule_step, state_weights, tail_share_bound
from rfmodel import kernels
from rfmodel.gdn import (
    filled_share_from_gates,
    gdn_prefill_scan,
    gdn_scan,
    terminal_correction,
)


def _py(kernel):
    """The pure-Python source of a Numba kernel (the kernel itself under NUMBA_DISABLE_JIT=1)."""
    return getattr(kernel, "py_func", kernel)


def _inputs(seed, H, N, d_k, d_v, dtype=np.float64, g_lo=0.3, g_hi=1.0, unit_k=True):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((H, N, d_k))
    k = rng.standard_normal((H, N, d_k))
    if unit_k:
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((H, N, d_v))
    g = rng.uniform(g_lo, g_hi, (H, N))
    beta = rng.uniform(0.0, 1.0, (H, N))
    s0 = rng.standard_normal((H, d_k, d_v))
    return [a.astype(dtype) for a in (q, k, v, g, beta, s0)]


scan_shapes = st.tuples(st.integers(1, 3), st.integers(0, 20), st.integers(1, 6), st.integers(1, 6))


@given(scan_shapes, st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float64]), st.booleans())
@example((1, 1, 1, 1), 0, np.float64, True)  # T=1, one-dimensional heads
def test_gdn_scan_numba_equals_reference_bitwise(shape, seed, dtype, erase):
    q, k, v, g, beta, s0 = _inputs(seed, *shape, dtype=dtype)
    o_ref, s_ref = gdn_scan(q, k, v, g, beta, s0, erase=erase, backend="reference")
    o_nb, s_nb = gdn_scan(q, k, v, g, beta, s0, erase=erase, backend="numba")
    assert o_nb.dtype == o_ref.dtype == dtype and o_nb.shape == o_ref.shape == shape[:2] + (shape[3],)
    np.testing.assert_array_equal(o_nb, o_ref)
    np.testing.assert_array_equal(s_nb, s_ref)


def test_gdn_scan_serial_parallel_and_py_func_agree_bitwise():
    q, k, v, g, beta, s0 = _inputs(5, 3, 9, 3, 4)
    runs = (kernels._gdn_scan_serial, kernels._gdn_scan_parallel, _py(kernels._gdn_scan_serial))
    states = [s0.copy() for _ in runs]
    outs = [run(q, k, v, g, beta, s, True) for run, s in zip(runs, states)]
    for out, state in zip(outs[1:], states[1:]):
        np.testing.assert_array_equal(out, outs[0])
        np.testing.assert_array_equal(state, states[0])
    s_py = s0.copy()
    out_py = np.empty_like(outs[0])
    for h in range(3):
        _py(kernels._gdn_head)(q, k, v, g, beta, s_py[h], out_py, h, True)
    np.testing.assert_array_equal(out_py, outs[0])
    np.testing.assert_array_equal(s_py, states[0])


@given(scan_shapes, st.integers(0, 2**32 - 1))
def test_gdn_scan_matches_rfmath_delta_rule_step(shape, seed):
    q, k, v, g, beta, s0 = _inputs(seed, *shape)
    out, state = gdn_scan(q, k, v, g, beta, s0)
    s = s0.copy()
    for t in range(shape[1]):
        s = delta_rule_step(s, k[:, t], v[:, t], g[:, t], beta[:, t])
        np.testing.assert_allclose(out[:, t], np.einsum("hkv,hk->hv", s, q[:, t]), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(state, s, rtol=1e-10, atol=1e-12)


@st.composite
def shifted_fill(draw):
    """Prefix of n rows, some exact; filled rows share k0, beta0 so a shift e of their values
    shifts every filled update by the same matrix beta0 k0 e^T (Appendix H's idealization)."""
    H, d_k, d_v = draw(st.integers(1, 3)), draw(st.integers(1, 4)), draw(st.integers(1, 4))
    n = draw(st.integers(1, 25))
    T = draw(st.integers(0, 6))
    filled = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    seed = draw(st.integers(0, 2**32 - 1))
    q, k, v, g, beta, _ = _inputs(seed, H, n + T, d_k, d_v, g_lo=draw(st.floats(0.05, 0.95)))
    rng = np.random.default_rng(seed + 1)
    k0 = rng.standard_normal((H, d_k))
    beta0 = rng.uniform(0.1, 1.0, H)
    k[:, :n][:, filled] = k0[:, None, :]
    beta[:, :n][:, filled] = beta0[:, None]
    shift = rng.standard_normal((H, d_v))
    return q, k, v, g, beta, n, filled, shift


def _fill(v, n, rows, shift):
    vf = v.copy()
    vf[:, :n][:, rows] += shift[:, None, :]
    return vf


def _full_fill_delta(k, beta, g, n, filled, shift):
    """delta_M of a fully filled prefix: exact minus filled = -(sum_j w_j) beta0 k0 shift^T."""
    w_all = state_weights(g[:, :n]).sum(-1)
    first = int(np.argmax(filled)) if filled.any() else 0
    k0, b0 = k[:, first], beta[:, first]
    return -(w_all * b0)[:, None, None] * k0[:, :, None] * shift[:, None, :]


@given(shifted_fill())
def test_gdn_rho_correction_restores_exact_final_state(case):
    q, k, v, g, beta, n, filled, shift = case
    delta_M = _full_fill_delta(k, beta, g, n, filled, shift)
    out_x, s_x, _ = gdn_prefill_scan(q, k, v, g, beta, n, filled, erase=False)
    out_f, s_f, rho = gdn_prefill_scan(q, k, _fill(v, n, filled, shift), g, beta, n, filled,
                                       delta_M=delta_M, erase=False)
    scale = 1 + np.abs(s_x).max() + np.abs(delta_M).max()
    # the theorem: the state the tail ends with is the exact one, and so are the tail outputs
    np.testing.assert_allclose(s_f, s_x, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(out_f[:, n:], out_x[:, n:], rtol=0, atol=1e-11 * scale)
    w = state_weights(g[:, :n])
    np.testing.assert_allclose(rho, (w * filled).sum(-1) / w.sum(-1), rtol=1e-12, atol=1e-300)


@given(shifted_fill())
def test_gdn_unscaled_correction_overshoots_by_exact_share(case):
    q, k, v, g, beta, n, filled, shift = case
    qn, kn, vn, gn, bn = (a[:, :n] for a in (q, k, v, g, beta))
    delta_M = _full_fill_delta(k, beta, g, n, filled, shift)
    _, s_x, _ = gdn_prefill_scan(qn, kn, vn, gn, bn, n, filled, erase=False)
    _, s_u, rho = gdn_prefill_scan(qn, kn, _fill(vn, n, filled, shift), gn, bn, n, filled,
                                   delta_M=delta_M, correction="unscaled", erase=False)
    # overshoot = (1 - rho) delta_M: the exact prefix rows' share of the full-fill shift
    np.testing.assert_allclose(s_u - s_x, (1.0 - rho)[:, None, None] * delta_M, rtol=0,
                               atol=1e-11 * (1 + np.abs(s_x).max() + np.abs(delta_M).max()))


@given(st.integers(1, 3), st.integers(1, 5), st.integers(1, 5), st.integers(0, 30),
       st.floats(0.05, 0.99), st.integers(0, 2**32 - 1))
def test_gdn_state_difference_contracts_as_gamma_m(H, d_k, d_v, m, gamma, seed):
    """Two runs fed the same m rows (unit keys, beta in [0, 1], gates <= gamma) end at most
    gamma^m times as far apart as they started (Frobenius, per head)."""
    q, k, v, g, beta, s_a = _inputs(seed, H, m, d_k, d_v, g_lo=0.0, g_hi=gamma)
    s_b = s_a + np.random.default_rng(seed + 3).standard_normal(s_a.shape)
    _, end_a = gdn_scan(q, k, v, g, beta, s_a)
    _, end_b = gdn_scan(q, k, v, g, beta, s_b)
    before = np.linalg.norm(s_a - s_b, axis=(1, 2))
    after = np.linalg.norm(end_a - end_b, axis=(1, 2))
    assert (after <= contraction_factor(gamma, m) * before * (1 + 1e-9) + 1e-12).all()


@given(st.integers(1, 40), st.integers(0, 40), st.floats(0.05, 0.99), st.integers(0, 2**32 - 1))
def test_filled_share_behind_exact_tail_obeys_bound(n_filled, m, gamma, seed):
    g = np.random.default_rng(seed).uniform(0.01, gamma, (2, n_filled + m))
    filled = np.r_[np.ones(n_filled, bool), np.zeros(m, bool)]
    assert (filled_share_from_gates(g, filled) <= tail_share_bound(gamma, m) * (1 + 1e-12)).all()


def test_filled_share_from_gates_extremes():
    g = np.full((2, 4), 0.5)
    np.testing.assert_array_equal(filled_share_from_gates(g, np.ones(4, bool)), [1.0, 1.0])
    np.testing.assert_array_equal(filled_share_from_gates(g, np.zeros(4, bool)), [0.0, 0.0])
    # weights 1/8, 1/4, 1/2, 1: the first row's share is (1/8) / (15/8)
    np.testing.assert_allclose(filled_share_from_gates(g, np.array([1, 0, 0, 0], bool)), 1 / 15)


def test_terminal_correction_adds_rho_times_delta():
    s = np.ones((2, 3, 4), np.float32)
    d = np.full((2, 3, 4), 2.0, np.float32)
    out = terminal_correction(s, d, np.array([0.25, 0.5]))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[0], 1.5)
    np.testing.assert_array_equal(out[1], 2.0)


@pytest.mark.parametrize("mutate, arg", [
    (lambda a: a.__setitem__(0, a[0] * np.nan), "q"),
    (lambda a: a.__setitem__(2, a[2][:, :-1]), "v"),
    (lambda a: a.__setitem__(3, a[3] + 2.0), "g"),
    (lambda a: a.__setitem__(4, a[4][:1]), "beta"),
    (lambda a: a.__setitem__(5, a[5][:, :1]), "state0"),
])
def test_gdn_scan_bad_inputs_raise(mutate, arg):
    args = _inputs(0, 2, 5, 3, 3)
    mutate(args)
    with pytest.raises(ValueError, match=arg):
        gdn_scan(*args)


def test_gdn_prefill_scan_bad_arguments_raise():
    q, k, v, g, beta, _ = _inputs(0, 2, 5, 3, 3)
    with pytest.raises(ValueError, match="n_prefix"):
        gdn_prefill_scan(q, k, v, g, beta, 6, np.ones(6, bool))
    with pytest.raises(ValueError, match="filled"):
        gdn_prefill_scan(q, k, v, g, beta, 3, np.ones(2, bool))
    with pytest.raises(ValueError, match="correction"):
        gdn_prefill_scan(q, k, v, g, beta, 3, np.ones(3, bool), correction="half")
