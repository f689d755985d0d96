"""Map formats (rfmodel.maps): int8 with one scale per 128 weights of a row, bf16, apply_map."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rfmodel.maps import (
    GROUP,
    apply_map,
    bf16_bits_to_float32,
    dequantize_int8,
    float32_to_bf16_bits,
    int8_error_bound,
    quantize_int8,
    round_bf16,
)

finite32 = st.floats(-1e4, 1e4, width=32, allow_nan=False, allow_infinity=False)


@st.composite
def weight_matrix(draw, *, max_out=4, max_in=300):
    d_out = draw(st.integers(1, max_out))
    d_in = draw(st.sampled_from([1, 5, 127, 128, 129, 256, 257, draw(st.integers(1, max_in))]))
    return draw(arrays(np.float32, (d_out, d_in), elements=finite32))


@given(weight_matrix())
def test_quantize_int8_round_trip_within_bound(w):
    codes, scales = quantize_int8(w)
    assert codes.dtype == np.int8 and codes.shape == w.shape
    assert scales.dtype == np.float32 and scales.shape == (w.shape[0], -(-w.shape[1] // GROUP))
    assert np.abs(codes.astype(int)).max() <= 127
    deq = dequantize_int8(codes, scales)
    assert deq.dtype == np.float32 and deq.shape == w.shape
    err = np.abs(w.astype(np.float64) - deq.astype(np.float64))
    assert (err <= int8_error_bound(scales, w.shape[1])).all()


@given(weight_matrix())
def test_quantize_int8_scale_is_absmax_over_127(w):
    _, scales = quantize_int8(w)
    for g in range(scales.shape[1]):
        absmax = np.abs(w[:, g * GROUP:(g + 1) * GROUP]).max(axis=1).astype(np.float64)
        expect = np.where(absmax == 0, 1.0, (absmax / 127).astype(np.float32))
        normal = (absmax / 127) >= np.finfo(np.float32).tiny
        np.testing.assert_array_equal(scales[normal, g], expect[normal])
        np.testing.assert_array_equal(scales[~normal, g], 1.0)


def test_quantize_int8_ties_round_half_to_even():
    w = np.zeros((1, 128), np.float32)
    w[0, :8] = [127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]  # scale = 127/127 = 1 exactly
    codes, scales = quantize_int8(w)
    assert scales[0, 0] == 1.0
    assert codes[0, :8].tolist() == [127, 0, 2, 2, 0, -2, -2, 126]


def test_quantize_int8_zero_group_has_scale_one():
    w = np.zeros((2, 300), np.float32)
    w[1, 130] = 3.0  # only group 1 of row 1 is non-zero
    codes, scales = quantize_int8(w)
    assert scales.tolist() == [[1.0, 1.0, 1.0], [1.0, np.float32(3 / 127), 1.0]]
    assert codes[0].tolist() == [0] * 300 and codes[1, 130] == 127


def test_quantize_int8_codes_reach_127_at_absmax():
    w = np.linspace(-2.0, 5.0, 256, dtype=np.float32)[None]
    codes, _ = quantize_int8(w)
    assert codes[0, -1] == 127 and codes.min() >= -127


@pytest.mark.parametrize("bad, arg", [(np.full((2, 3), np.nan), "W"), (np.ones(3), "W"),
                                      (np.ones((2, 0)), "W")])
def test_quantize_int8_bad_input_raises(bad, arg):
    with pytest.raises(ValueError, match=arg):
        quantize_int8(bad)


def test_dequantize_int8_bad_shapes_raise():
    codes, scales = quantize_int8(np.ones((2, 200), np.float32))
    with pytest.raises(ValueError, match="scales"):
        dequantize_int8(codes, scales[:, :1])
    with pytest.raises(ValueError, match="codes"):
        dequantize_int8(codes.astype(np.int16), scales)


def test_round_bf16_ties_to_even_and_specials():
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF], np.uint32)
    out = float32_to_bf16_bits(bits.view(np.float32))
    assert out.tolist() == [0x3F80, 0x3F82, 0x3F81, 0x3F80]
    special = np.array([np.inf, -np.inf, np.nan, np.finfo(np.float32).max, 0.0, -0.0], np.float32)
    r = round_bf16(special)
    assert r[0] == np.inf and r[1] == -np.inf and np.isnan(r[2]) and r[3] == np.inf
    assert float32_to_bf16_bits(special[4:]).tolist() == [0x0000, 0x8000]


@given(arrays(np.float32, st.integers(1, 50), elements=finite32))
def test_round_bf16_is_nearest_representable(x):
    r = round_bf16(x)
    assert np.array_equal(round_bf16(r), r)  # idempotent: r is a bf16 value
    bits = float32_to_bf16_bits(x).astype(np.int32)
    for step in (-1, 1):  # neighbours on the bf16 grid are no closer
        nb = bf16_bits_to_float32(((bits + step) & 0xFFFF).astype(np.uint16)).astype(np.float64)
        ok = np.isnan(nb) | (np.abs(x - r.astype(np.float64)) <= np.abs(x - nb))
        assert ok.all()


@given(st.integers(1, 6), st.integers(1, 7), st.integers(1, 5), st.integers(0, 1000))
def test_apply_map_is_affine_rows(n, d_in, d_out, seed):
    rng = np.random.default_rng(seed)
    x, A, b = rng.standard_normal((n, d_in)), rng.standard_normal((d_out, d_in)), rng.standard_normal(d_out)
    out = apply_map(x, A, b)
    for i in range(n):
        np.testing.assert_allclose(out[i], A @ x[i] + b, rtol=1e-12, atol=1e-12)


def test_apply_map_identity_is_exact():
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_array_equal(apply_map(x, np.eye(8, dtype=np.float32), np.zeros(8, np.float32)), x)


@pytest.mark.parametrize("shapes, arg", [(((3, 4), (5, 3), (5,)), "A"), (((3, 4), (5, 4), (4,)), "b"),
                                         (((4,), (5, 4), (5,)), "x")])
def test_apply_map_bad_shapes_raise(shapes, arg):
    with pytest.raises(ValueError, match=arg):
        apply_map(*(np.ones(s) for s in shapes))
