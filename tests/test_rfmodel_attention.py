"""Attention over a mixed cache (rfmodel.attention): RoPE, RMSNorm, causal GQA, the §2.4
influence bounds from rfmath, rescales and splices."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rfmath.attention import logit_change_bound, value_change_effect
from rfmodel.attention import (
    attend,
    key_rescale,
    rescale_factors,
    rms_norm,
    rope,
    splice,
    value_rescale,
)


@st.composite
def attention_case(draw):
    """GQA attention over a cache whose rows sit at arbitrary increasing positions."""
    hkv = draw(st.integers(1, 3))
    H = hkv * draw(st.integers(1, 3))
    D = 2 * draw(st.integers(1, 4))
    n_k = draw(st.integers(1, 12))
    k_pos = np.sort(np.random.default_rng(draw(st.integers(0, 999))).choice(40, n_k, replace=False))
    n_q = draw(st.integers(1, n_k))
    q_pos = k_pos[-n_q:]  # queries are the last cached rows (each sees itself)
    window = draw(st.one_of(st.none(), st.integers(1, 40)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    q, k, v = rng.standard_normal((H, n_q, D)), rng.standard_normal((hkv, n_k, D)), rng.standard_normal((hkv, n_k, D))
    return q, k, v, q_pos, k_pos, window


def _naive(q, k, v, q_pos, k_pos, window):
    H, n_q, D = q.shape
    rep = H // k.shape[0]
    out = np.zeros((H, n_q, v.shape[2]))
    for h in range(H):
        for i in range(n_q):
            vis = [j for j in range(len(k_pos)) if k_pos[j] <= q_pos[i]
                   and (window is None or k_pos[j] > q_pos[i] - window)]
            s = np.array([q[h, i] @ k[h // rep, j] / np.sqrt(D) for j in vis])
            p = np.exp(s - s.max())
            out[h, i] = (p / p.sum()) @ v[h // rep, vis]
    return out


@given(attention_case())
def test_attend_matches_naive_loop(case):
    q, k, v, q_pos, k_pos, window = case
    np.testing.assert_allclose(attend(q, k, v, q_pos, k_pos, window), _naive(*case), rtol=1e-10, atol=1e-12)


@given(attention_case())
def test_attend_gqa_equals_repeated_kv(case):
    q, k, v, q_pos, k_pos, window = case
    rep = q.shape[0] // k.shape[0]
    np.testing.assert_array_equal(
        attend(q, k, v, q_pos, k_pos, window),
        attend(q, np.repeat(k, rep, axis=0), np.repeat(v, rep, axis=0), q_pos, k_pos, window))


@given(attention_case(), st.data())
def test_attend_value_change_is_a_ij_delta(case, data):
    """§2.4: moving row j's value by delta moves query i's output by exactly a_ij * delta."""
    q, k, v, q_pos, k_pos, window = case
    j = data.draw(st.integers(0, k.shape[1] - 1))
    delta = np.random.default_rng(j).standard_normal(v.shape[2])
    out, probs = attend(q, k, v, q_pos, k_pos, window, return_probs=True)
    v2 = v.copy()
    v2[:, j] += delta
    rep = q.shape[0] // k.shape[0]
    change = attend(q, k, v2, q_pos, k_pos, window) - out
    np.testing.assert_allclose(change, value_change_effect(probs[:, :, j], np.broadcast_to(delta, out.shape)),
                               rtol=1e-9, atol=1e-12)
    assert rep >= 1


@given(attention_case(), st.data(), st.floats(-3, 3))
def test_attend_key_change_obeys_logit_bound(case, data, size):
    """§2.4: a change eps in row j's logit moves the output by at most 2 V a_ij (e^|eps| - 1)."""
    q, k, v, q_pos, k_pos, window = case
    j = data.draw(st.integers(0, k.shape[1] - 1))
    dk = size * np.random.default_rng(j + 1).standard_normal(k.shape[2])
    out, probs = attend(q, k, v, q_pos, k_pos, window, return_probs=True)
    k2 = k.copy()
    k2[:, j] += dk
    change = np.linalg.norm(attend(q, k2, v, q_pos, k_pos, window) - out, axis=-1)  # (H, n_q)
    rep = q.shape[0] // k.shape[0]
    eps = (q @ dk) / np.sqrt(q.shape[2])  # (H, n_q): the logit change of row j
    vnorm = np.linalg.norm(v, axis=-1)  # (Hkv, n_k)
    visible = probs > 0
    v_max = np.max(np.where(visible, np.repeat(vnorm, rep, axis=0)[:, None, :], 0.0), axis=-1)
    bound = logit_change_bound(probs[:, :, j], eps, v_max)
    assert (change <= bound * (1 + 1e-9) + 1e-12).all()


@given(st.integers(1, 4), st.integers(1, 6), st.integers(0, 99), st.integers(0, 2**32 - 1))
def test_rope_is_pairwise_rotation_relative_in_position(half, n, shift, seed):
    rng = np.random.default_rng(seed)
    D = 2 * half
    pos = np.sort(rng.choice(50, n, replace=False))
    q, k = rng.standard_normal((2, n, D)), rng.standard_normal((2, n, D))
    rq = rope(q, pos, 10000.0)
    np.testing.assert_allclose(np.linalg.norm(rq, axis=-1), np.linalg.norm(q, axis=-1), rtol=1e-12)
    inv = 10000.0 ** (-np.arange(0, D, 2) / D)
    ang = pos[:, None] * inv
    z = (q[..., :half] + 1j * q[..., half:]) * np.exp(1j * ang)  # rotate (x_i, x_{i+D/2})
    np.testing.assert_allclose(rq, np.concatenate([z.real, z.imag], axis=-1), rtol=1e-10, atol=1e-12)
    # scores depend only on the position difference
    a = rope(q, pos, 10000.0)[0] @ rope(k, pos, 10000.0)[0].T
    b = rope(q, pos + shift, 10000.0)[0] @ rope(k, pos + shift, 10000.0)[0].T
    np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-9)


def test_rms_norm_formula():
    x = np.array([[3.0, 4.0], [0.0, 0.0]])
    out = rms_norm(x, np.array([1.0, 2.0]), 1e-6)
    np.testing.assert_allclose(out[0], np.array([3.0, 8.0]) / np.sqrt(12.5 + 1e-6))
    np.testing.assert_array_equal(out[1], 0.0)
    assert rms_norm(x.astype(np.float32), np.ones(2, np.float32), 1e-6).dtype == np.float32


@given(st.integers(1, 3), st.integers(1, 6), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_rescale_factors_recover_known_scale(hkv, c, D, seed):
    rng = np.random.default_rng(seed)
    pred = rng.standard_normal((hkv, c, D))
    s = rng.uniform(0.2, 3.0, hkv)
    exact = pred * s[:, None, None]
    for mode in ("mean_ratio", "ratio_of_means"):
        np.testing.assert_allclose(rescale_factors(exact, pred, mode), s, rtol=1e-12)
    filled = rng.standard_normal((hkv, 4, D))
    np.testing.assert_allclose(value_rescale(filled, exact, pred), filled * s[:, None, None], rtol=1e-12)
    np.testing.assert_allclose(key_rescale(filled, exact, pred), filled * s[:, None, None], rtol=1e-12)


def test_rescale_factors_modes_differ_as_stated():
    exact = np.array([[[1.0, 0.0], [4.0, 0.0]]])  # norms 1, 4
    pred = np.array([[[1.0, 0.0], [1.0, 0.0]]])  # norms 1, 1
    assert rescale_factors(exact, pred, "mean_ratio")[0] == pytest.approx(2.5)  # (1/1 + 4/1) / 2
    pred = np.array([[[2.0, 0.0], [1.0, 0.0]]])  # norms 2, 1
    assert rescale_factors(exact, pred, "mean_ratio")[0] == pytest.approx((0.5 + 4.0) / 2)
    assert rescale_factors(exact, pred, "ratio_of_means")[0] == pytest.approx(2.5 / 1.5)


def test_splice_replaces_what_it_names():
    fk, fv, ek, ev = (np.full((1, 2, 2), x) for x in (1.0, 2.0, 3.0, 4.0))
    assert [a[0, 0, 0] for a in splice(fk, fv, ek, ev, "keys")] == [3.0, 2.0]
    assert [a[0, 0, 0] for a in splice(fk, fv, ek, ev, "values")] == [1.0, 4.0]
    assert [a[0, 0, 0] for a in splice(fk, fv, ek, ev, "both")] == [3.0, 4.0]
    with pytest.raises(ValueError, match="which"):
        splice(fk, fv, ek, ev, "neither")


@pytest.mark.parametrize("kwargs, arg", [
    ({"q": np.full((2, 1, 4), np.nan)}, "q"),
    ({"k": np.ones((3, 3, 4)), "v": np.ones((3, 3, 4))}, "KV heads"),
    ({"v": np.ones((1, 2, 4))}, "v"),
    ({"q_pos": np.array([2.0])}, "q_pos"),
    ({"k_pos": np.array([0, 1])}, "k_pos"),
    ({"q_pos": np.array([-1])}, "sees no key"),
    ({"window": 0}, "window"),
])
def test_attend_bad_inputs_raise(kwargs, arg):
    base = dict(q=np.ones((2, 1, 4)), k=np.ones((1, 3, 4)), v=np.ones((1, 3, 4)),
                q_pos=np.array([2]), k_pos=np.array([0, 1, 2]))
    base.update(kwargs)
    with pytest.raises(ValueError, match=arg):
        attend(**base)
