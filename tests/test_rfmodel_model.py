"""The tiny reference model (rfmodel.model): every arm, the invariants of issue 3."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfmodel.gdn import filled_share_from_gates
from rfmodel.model import Cache, GdnCache, TinyConfig, TinyModel
from rfmodel.ridge import RidgeMoments

PATTERNS = [("attention", "attention"), ("attention", "gdn", "attention"),
            ("gdn", "attention", "gdn", "attention"), ("attention", "attention", "gdn")]


def small_config(pattern, qk_norm=False, kv=1, tie=False):
    return TinyConfig(vocab=32, hidden=16, n_layers=len(pattern), n_heads=2, n_kv_heads=kv,
                      head_dim=4, intermediate=24, qk_norm=qk_norm, layer_types=pattern,
                      gdn_heads=2, gdn_k_dim=4, gdn_v_dim=3, tie_embeddings=tie)


@st.composite
def prompt_case(draw, *, max_n=18):
    """A random tiny model and a prompt with a split S, tail T and some exact prefix rows."""
    pattern = draw(st.sampled_from(PATTERNS))
    cfg = small_config(pattern, draw(st.booleans()), draw(st.sampled_from([1, 2])), draw(st.booleans()))
    model = TinyModel.random(cfg, draw(st.integers(0, 1000)))
    n = draw(st.integers(2, max_n))
    ids = np.array(draw(st.lists(st.integers(0, 31), min_size=n, max_size=n)), dtype=np.int64)
    S = draw(st.integers(1, cfg.n_layers - 1))
    T = draw(st.integers(1, n))
    exact = sorted(draw(st.sets(st.integers(0, n - T - 1), max_size=n - T))) if n > T else []
    return model, ids, S, T, np.array(exact, dtype=np.int64)


def random_maps(model, S, seed, scale=0.3):
    rng = np.random.default_rng(seed)
    C = model.config.hidden
    return {l: (np.eye(C) + scale * rng.standard_normal((C, C)) / np.sqrt(C), 0.1 * rng.standard_normal(C))
            for l in range(S, model.config.n_layers)}


def assert_cache_equal(a, b, layers):
    for i in layers:
        la, lb = a.layers[i], b.layers[i]
        if isinstance(la, GdnCache):
            np.testing.assert_array_equal(la.state, lb.state)
        else:
            for name in ("k", "v", "pos"):
                np.testing.assert_array_equal(getattr(la, name), getattr(lb, name))


@given(prompt_case())
def test_prefill_exact_arm_equals_forward_exact_bitwise(case):
    model, ids, S, T, _ = case
    logits, cache = model.forward_exact(ids)
    tail, c2 = model.prefill(ids, "exact", S, T)
    np.testing.assert_array_equal(tail, logits[-T:])
    assert_cache_equal(c2, cache, range(model.config.n_layers))


@given(prompt_case(), st.sampled_from(["nofill", "identity", "ridgefill"]))
def test_prefill_every_prefix_row_exact_equals_exact_bitwise(case, arm):
    model, ids, S, T, _ = case
    logits, cache = model.forward_exact(ids)
    every = np.arange(len(ids) - T)
    tail, c2 = model.prefill(ids, arm, S, T, exact_rows=every, maps=random_maps(model, S, 1))
    np.testing.assert_array_equal(tail, logits[-T:])
    assert_cache_equal(c2, cache, range(model.config.n_layers))


@given(prompt_case(), st.sampled_from(["nofill", "identity", "ridgefill"]))
def test_prefill_lower_layers_equal_exact(case, arm):
    """Layers 0..S-1 run exactly for every row in every arm (their caches and x_S)."""
    model, ids, S, T, exact = case
    _, cache = model.forward_exact(ids)
    _, c2 = model.prefill(ids, arm, S, T, exact_rows=exact, maps=random_maps(model, S, 2))
    assert_cache_equal(c2, cache, range(S))
    x_s, late = model.capture(ids, S, [S])
    np.testing.assert_array_equal(c2.info["x_split"], x_s)  # every row's x_S, the tail's too
    np.testing.assert_array_equal(late[S], x_s)


@given(prompt_case())
def test_prefill_identity_equals_ridgefill_with_identity_maps(case):
    model, ids, S, T, exact = case
    C = model.config.hidden
    eye = {l: (np.eye(C), np.zeros(C)) for l in range(S, model.config.n_layers)}
    a, ca = model.prefill(ids, "identity", S, T, exact_rows=exact)
    b, cb = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=eye)
    np.testing.assert_array_equal(a, b)
    assert_cache_equal(ca, cb, range(model.config.n_layers))


@given(prompt_case(), st.sampled_from(["nofill", "identity", "ridgefill"]))
def test_prefill_cache_rows_by_arm(case, arm):
    """nofill leaves non-exact prefix rows out of the late attention caches; fills mark them."""
    model, ids, S, T, exact = case
    n_p = len(ids) - T
    _, cache = model.prefill(ids, arm, S, T, exact_rows=exact, maps=random_maps(model, S, 3))
    filled = np.setdiff1d(np.arange(n_p), exact)
    for i in range(S, model.config.n_layers):
        layer = cache.layers[i]
        if isinstance(layer, GdnCache):
            expect = 0.0 if arm == "nofill" or filled.size == 0 else None
            if expect is not None:
                np.testing.assert_array_equal(layer.rho, expect)
            if arm != "nofill" and exact.size == 0 and filled.size:
                np.testing.assert_allclose(layer.rho, 1.0)
            continue
        want = np.union1d(exact, np.arange(n_p, len(ids))) if arm == "nofill" else np.arange(len(ids))
        np.testing.assert_array_equal(layer.pos, want)
        np.testing.assert_array_equal(layer.filled, np.isin(layer.pos, filled) if arm != "nofill" else False)


@settings(max_examples=30)
@given(prompt_case(), st.sampled_from(["exact", "nofill", "identity", "ridgefill"]), st.integers(0, 31))
def test_decode_step_equals_one_more_tail_row(case, arm, token):
    """Decoding after a prefill reads the same (filled) cache as a prefill with the token in
    its tail: ordinary decoding, full depth, over the filled cache."""
    model, ids, S, T, exact = case
    maps = random_maps(model, S, 4)
    _, cache = model.prefill(ids, arm, S, T, exact_rows=exact, maps=maps)
    step = model.decode_step(token, cache)
    longer, _ = model.prefill(np.r_[ids, token], arm, S, T + 1, exact_rows=exact, maps=maps)
    np.testing.assert_allclose(step, longer[-1], rtol=1e-9, atol=1e-9)
    assert cache.length == len(ids) + 1


@settings(max_examples=25)
@given(prompt_case())
def test_splice_both_restores_exact_tail_without_gdn(case):
    model, ids, S, T, exact = case
    maps = random_maps(model, S, 5)
    logits, _ = model.forward_exact(ids)
    tail, _ = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps, splice="both")
    if all(t == "attention" for t in model.config.layer_types[S:]):
        np.testing.assert_allclose(tail, logits[-T:], rtol=1e-9, atol=1e-9)
    keys, _ = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps, splice="keys")
    assert np.isfinite(keys).all()


@settings(max_examples=25)
@given(prompt_case(), st.sampled_from(["values", "keys"]))
def test_rescale_scales_filled_rows_per_kv_head(case, which):
    model, ids, S, T, exact = case
    maps = random_maps(model, S, 6)
    _, plain = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps)
    _, scaled = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps, rescale=which, c=T)
    name = "v" if which == "values" else "k"
    for i in range(S, model.config.n_layers):
        a, b = plain.layers[i], scaled.layers[i]
        if isinstance(a, GdnCache) or not a.filled.any():
            continue
        fa, fb = getattr(a, name)[:, a.filled], getattr(b, name)[:, b.filled]
        other = "k" if name == "v" else "v"  # filled rows' other half comes from x_hat alone
        np.testing.assert_array_equal(getattr(a, other)[:, a.filled], getattr(b, other)[:, b.filled])
        ratio = np.linalg.norm(fb, axis=-1) / np.maximum(np.linalg.norm(fa, axis=-1), 1e-300)
        np.testing.assert_allclose(ratio, ratio[:, :1] * np.ones_like(ratio), rtol=1e-9)


def test_gdn_correction_uses_rho_from_the_fill_gates():
    cfg = small_config(("attention", "gdn", "gdn"))
    model = TinyModel.random(cfg, 3)
    ids = np.arange(20) % 32
    S, T, exact = 1, 5, np.array([2, 7])
    maps = random_maps(model, S, 7)
    _, base = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps)
    zero = {l: np.zeros((2, 4, 3)) for l in (1, 2)}
    _, same = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps, correction=zero)
    assert_cache_equal(same, base, range(3))
    # rho recomputed from the gates the fill used, for the first late GDN layer
    x_s, _ = model.capture(ids, S, [])
    q, k, v, g, beta = model._gdn_inputs(1, x_s)  # noqa: SLF001 -- inputs = x_s at layer S
    x_hat = x_s @ maps[1][0].T + maps[1][1]
    g_hat = model._gdn_inputs(1, x_hat)[3]  # noqa: SLF001
    filled = ~np.isin(np.arange(15), exact)
    g_mix = np.where(filled, g_hat[:, :15], g[:, :15])
    np.testing.assert_allclose(base.layers[1].rho, filled_share_from_gates(g_mix, filled), rtol=1e-12)
    delta = {1: np.ones((2, 4, 3))}
    _, corr = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps, correction=delta)
    assert not np.array_equal(corr.layers[1].state, base.layers[1].state)
    _, unsc = model.prefill(ids, "ridgefill", S, T, exact_rows=exact, maps=maps, correction=delta,
                            correction_mode="unscaled")
    assert not np.array_equal(unsc.layers[1].state, corr.layers[1].state)


def test_capture_feeds_ridge_which_beats_identity_in_sample():
    cfg = small_config(("attention", "gdn", "attention", "attention"), qk_norm=True)
    model = TinyModel.random(cfg, 11)
    rng = np.random.default_rng(0)
    acc = RidgeMoments(16, {l: 16 for l in (2, 3)})
    docs = [rng.integers(0, 32, 40) for _ in range(4)]
    for doc in docs:
        x_s, xs = model.capture(doc, 2, [2, 3])
        acc.update(x_s.astype(np.float32), {l: x.astype(np.float32) for l, x in xs.items()})
    maps = acc.solve(1e-4)
    for doc in docs:
        x_s, xs = model.capture(doc, 2, [3])
        assert np.mean((x_s @ maps[3][0].T + maps[3][1] - xs[3]) ** 2) < np.mean((x_s - xs[3]) ** 2)
    logits, _ = model.forward_exact(docs[0])
    err = {arm: np.abs(model.prefill(docs[0], arm, 2, 8, maps=maps)[0] - logits[-8:]).mean()
           for arm in ("identity", "ridgefill")}
    assert err["ridgefill"] < err["identity"]


@settings(max_examples=20)
@given(prompt_case(max_n=24), st.data())
def test_probe_prefill_keeps_E_rows_then_runs_ridgefill(case, data):
    model, ids, S, T, _ = case
    n_p = len(ids) - T
    maps = random_maps(model, S, 8)
    E = data.draw(st.integers(0, n_p))
    special = data.draw(st.sets(st.integers(0, max(n_p - 1, 0)), max_size=2)) if n_p else set()
    window = data.draw(st.integers(1, len(ids)))
    logits, cache, info = model.probe_prefill(ids, S, T, maps, E=E, window=window, special=sorted(special))
    probe = cache.info["probe_rows"]
    assert probe.size == E and (np.diff(info["rows"]) > 0).all()
    np.testing.assert_array_equal(info["rows"], np.union1d(probe, sorted(special)))
    again, _ = model.prefill(ids, "ridgefill", S, T, exact_rows=info["rows"], maps=maps)
    np.testing.assert_array_equal(logits, again)
    if n_p:
        assert info["received"][:n_p].min() >= 0


def test_forward_exact_probs_and_lower_attention():
    model = TinyModel.random(small_config(("attention", "gdn", "attention")), 0)
    ids = np.arange(12)
    _, _, probs = model.forward_exact(ids, return_probs=True)
    assert set(probs) == {0, 2} and probs[0].shape == (2, 12, 12)
    np.testing.assert_allclose(probs[0].sum(-1), 1.0)
    assert np.triu(probs[0][0], 1).max() == 0.0  # causal
    received = model.lower_attention(ids, [0], window=4)
    np.testing.assert_allclose(received, probs[0][:, -4:].sum(axis=(0, 1)))
    np.testing.assert_allclose(received.sum(), 2 * 4)


def test_float32_model_stays_float32():
    model = TinyModel.random(small_config(("attention", "gdn")), 0, dtype=np.float32)
    logits, cache = model.forward_exact(np.arange(6))
    assert logits.dtype == np.float32 and cache.layers[0].k.dtype == np.float32
    assert cache.layers[1].state.dtype == np.float32


@pytest.mark.parametrize("kwargs, arg", [
    ({"S": 0}, "S"), ({"S": 3}, "S"), ({"T": 0}, "T"), ({"T": 11}, "T"),
    ({"arm": "pop"}, "arm"), ({"exact_rows": [8]}, "exact_rows"),
    ({"ids": np.array([0, 99])}, "ids"), ({"ids": np.zeros((2, 2), np.int64)}, "ids"),
    ({"maps": None}, "maps"), ({"maps": "nan"}, "maps"), ({"maps": "shape"}, "maps"),
    ({"arm": "exact", "rescale": "values"}, "rescale"), ({"rescale": "values", "c": 5}, "c"),
    ({"correction": {1: np.zeros((2, 4, 3))}}, "correction"), ({"splice": "all"}, "splice"),
])
def test_prefill_bad_arguments_raise(kwargs, arg):
    model = TinyModel.random(small_config(("attention", "attention", "gdn")), 0)
    args = dict(ids=np.arange(10), arm="ridgefill", S=1, T=3, maps=random_maps(model, 1, 0))
    if kwargs.get("maps") == "nan":
        kwargs["maps"] = {l: (np.full((16, 16), np.nan), np.zeros(16)) for l in (1, 2)}
    elif kwargs.get("maps") == "shape":
        kwargs["maps"] = {l: (np.eye(15), np.zeros(15)) for l in (1, 2)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=arg):
        model.prefill(args.pop("ids"), args.pop("arm"), args.pop("S"), args.pop("T"), **args)


def test_model_construction_errors_name_the_problem():
    cfg = small_config(("attention", "gdn"))
    good = TinyModel.random(cfg, 0).w
    with pytest.raises(ValueError, match="missing"):
        TinyModel(cfg, {k: v for k, v in good.items() if "q_proj" not in k})
    bad = dict(good)
    bad["model.norm.weight"] = np.ones(3)
    with pytest.raises(ValueError, match="model.norm.weight"):
        TinyModel(cfg, bad)
    with pytest.raises(ValueError, match="n_kv_heads"):
        TinyConfig(n_heads=3, n_kv_heads=2)
    with pytest.raises(ValueError, match="layer_types"):
        TinyConfig(n_layers=2, layer_types=("attention", "mamba"))
    with pytest.raises(ValueError, match="cache"):
        TinyModel.random(cfg, 0).decode_step(1, Cache([], 0))
