"""Fitting maps (gpu.maps.fit) on a tiny random llama saved as a local HF folder and a small
calibration folder: the kept moments solve to exactly rfmath.ridge.solve on the captured rows,
the map file holds those maps, and a document with non-finite activations is skipped with a
warning, recorded, and the fit goes on (issues 4 and 7).

Oracle for the captured rows: the stock transformers forward with ``output_hidden_states``
(hidden_states[l] is the input of layer l), on the same token ids; the ridge solve is
rfmath.ridge.solve (closed form on the stacked rows).
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gpu import cli
from gpu.data import corpus
from gpu.core import models
from gpu.maps.fit import FitOptions, fit, moments_path
from gpu.maps.files import load_maps
from gpu_fixtures import byte_tokenizer, calib_dir, scratch, tiny_dir, tiny_model
from rfmath.ridge import solve
from rfmodel.ridge import RidgeMoments

S, LAM, DOC_TOKENS = 1, 0.01, 200


def captured_rows(model, tokenizer, texts, doc_tokens, layers):
    """x_S and the late-layer inputs of every row of ``texts``, from the stock forward."""
    xs = {l: [] for l in layers}
    with torch.inference_mode():
        for text in texts:
            ids = tokenizer(text, return_tensors="pt").input_ids[:, :doc_tokens]
            hs = model(input_ids=ids, output_hidden_states=True).hidden_states
            for l in layers:
                xs[l].append(hs[l][0].double().numpy())
    return {l: np.concatenate(v) for l, v in xs.items()}


def load_moments(out):
    with np.load(moments_path(out)) as z:
        state = {k: z[k] for k in z.files}
    return state, RidgeMoments.from_state_dict(
        {k.split("/", 1)[1]: v for k, v in state.items() if k.startswith(f"s{S}/")})


def test_fit_maps_equal_closed_form_ridge_on_captured_rows():
    calib = calib_dir(n_docs=4, chars=900)
    loaded = models.load(str(tiny_dir("llama", 0)), device="cpu", dtype=torch.float32)
    out = scratch("fit") / "m.safetensors"
    written = fit(loaded, FitOptions([S], out, str(calib), (LAM,), max_tokens=100_000,
                                     doc_tokens=DOC_TOKENS), progress=False)
    assert written == {S: out}
    meta = json.loads(out.with_suffix(".json").read_text())
    docs = corpus.read_folder(calib)
    fit_docs = [d for d in docs if d.doc_id in meta["calibration"]["documents"]]
    held = meta["heldout"]["documents"]
    assert len(fit_docs) == 3 and held == [docs[-1].doc_id]   # held-out text is not fitted on
    L = loaded.n_layers
    rows = captured_rows(loaded.model, loaded.tokenizer, [d.text for d in fit_docs], DOC_TOKENS,
                         range(S, L))
    n_rows = rows[S].shape[0]
    assert meta["calibration"]["rows"] == n_rows == sum(meta["calibration"]["documents"].values())
    assert meta["lambda"] == LAM and meta["split"] == S and meta["fingerprint"] == loaded.fingerprint()

    _, moments = load_moments(out)
    assert moments.count == n_rows
    ours = moments.solve(LAM)
    assert sorted(ours) == list(range(S + 1, L))
    maps = load_maps(out, fingerprint=loaded.fingerprint(), split=S, resident=False)
    for l in range(S + 1, L):
        A_ref, b_ref = solve(rows[S], rows[l], LAM)
        A, b = ours[l]
        # the capture sums float32 block products (rfmodel.ridge "blocked": within gamma_257
        # = 1.5e-5 of the terms' magnitudes, tests/test_rfmodel_ridge.py); the solve carries
        # that to the maps (measured 7e-6 here), far below the bf16 the file stores
        tol = 1e-4
        assert np.abs(A - A_ref).max() / np.abs(A_ref).max() < tol
        assert np.abs(b - b_ref).max() / np.abs(b_ref).max() < tol
        # the file's bf16 copy is A rounded to bf16 (relative 2**-8), the bias is float32
        A16 = maps.tensors[f"layers.{l}.weight_bf16"].double().numpy()
        assert (np.abs(A16 - A) <= 2.0 ** -8 * np.abs(A) + 1e-30).all()
        b32 = maps.tensors[f"layers.{l}.bias"].double().numpy()
        assert np.allclose(b32, b, rtol=1e-6, atol=1e-6 * np.abs(b).max())
    # per-layer held-out cosines are recorded and sensible (keys and values in [-1, 1])
    cos = meta["heldout"]["cosine"]
    assert sorted(int(k) for k in cos) == list(range(S + 1, L))
    assert all(-1 <= v["keys"] <= 1 and -1 <= v["values"] <= 1 for v in cos.values())


def test_nonfinite_document_is_skipped_recorded_and_fit_goes_on(capsys):
    """A calibration document whose activations are not finite (here: a token whose
    embedding row is inf) is skipped with a warning, recorded in the map metadata, and the
    fit finishes on the other documents."""
    calib = calib_dir(n_docs=4, chars=600)
    docs = sorted(calib.glob("*.txt"))
    texts = "".join(p.read_text() for p in docs)
    bad_char = next(c for c in "^`|~#%" if c not in texts)
    docs[1].write_text(docs[1].read_text()[:100] + bad_char + docs[1].read_text()[100:])
    tok = byte_tokenizer()
    bad_id = tok(bad_char).input_ids
    assert len(bad_id) == 1
    model = tiny_model("llama", seed=5)
    with torch.no_grad():
        model.model.embed_tokens.weight[bad_id[0]] = float("inf")
    folder = scratch("inf-model")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    out = scratch("fit-inf") / "m.safetensors"
    with pytest.warns(UserWarning, match="non-finite activations; skipped"):
        rc = cli.main(["fit", "--model", str(folder), "--splits", str(S), "--calib", str(calib),
                       "--out", str(out), "--lambdas", str(LAM), "--doc-tokens", "200",
                       "--device", "cpu"])
    assert rc == 0
    meta = json.loads(out.with_suffix(".json").read_text())
    # the id the fit gives the document (its folder name made safe: a temporary name may end in "_")
    bad_doc = next(d.doc_id for d in corpus.read_folder(calib) if d.doc_id.endswith("/" + docs[1].name))
    assert meta["calibration"]["skipped"] == {bad_doc: "non-finite activations"}
    assert bad_doc not in meta["calibration"]["documents"]
    assert len(meta["calibration"]["documents"]) == 2
    ms = load_maps(out, split=S)
    x = torch.randn(1, 3, 32)
    assert all(torch.isfinite(ms.predict(l, x)).all() for l in ms.layers)
    assert f"split {S} (ridge): lambda" in capsys.readouterr().out


def test_fit_kinds_from_one_capture_equal_their_closed_forms():
    """--kinds ridge anchored kv: one capture, three files that say their kind; the anchored
    maps are rfmath.ridge.solve_anchored and the kv maps the ridge map of the normed inputs
    composed with the layer's K/V projections (rfmath.ridge.compose), each at its own
    per-layer lambda, on the rows the stock forward gives."""
    from gpu.maps.fit import output_path
    from rfmath.ridge import compose, solve_anchored

    calib = calib_dir(n_docs=4, chars=900)
    loaded = models.load(str(tiny_dir("llama", 0)), device="cpu", dtype=torch.float32)
    out = scratch("fit-kinds") / "m.safetensors"
    kinds = ("ridge", "anchored", "kv")
    fit(loaded, FitOptions([S], out, str(calib), (LAM, 0.3), max_tokens=100_000,
                           doc_tokens=DOC_TOKENS, kinds=kinds), progress=False)
    docs = [d for d in corpus.read_folder(calib)][:-1]  # the last one is held out
    model, L = loaded.model, loaded.n_layers
    rows = captured_rows(model, loaded.tokenizer, [d.text for d in docs], DOC_TOKENS,
                         range(S, L))
    for kind in kinds:
        path = output_path(out, S, 1, kind, kinds)
        maps = load_maps(path, model, split=S)
        assert maps.kind == kind and maps.meta["kind"] == kind
        meta = json.loads(path.with_suffix(".json").read_text())
        assert set(meta["lambda_by_weighted_keys"]) == {str(l) for l in range(S + 1, L)}
        for l in range(S + 1, L):
            lam = meta["lambda"] if kind == "ridge" else meta["lambda"][str(l)]
            if kind == "ridge":
                A, b = solve(rows[S], rows[l], lam)
            elif kind == "anchored":
                A, b = solve_anchored(rows[S], rows[l], lam)
            else:
                layer = model.model.layers[l]
                with torch.no_grad():
                    normed = layer.input_layernorm(torch.from_numpy(rows[l]).float()).double().numpy()
                attn = layer.self_attn
                W = torch.cat([attn.k_proj.weight, attn.v_proj.weight]).detach().double().numpy()
                A, b = compose(W, np.zeros(W.shape[0]), *solve(rows[S], normed, lam))
            pred = maps.predict(l, torch.from_numpy(rows[S][:5]).float()).double().numpy()
            want = rows[S][:5] @ A.T + b
            np.testing.assert_allclose(pred, want, atol=0.05 * np.abs(want).max(), rtol=0.02)


def test_an_old_map_file_without_a_kind_loads_as_ridge(tmp_path):
    from gpu.maps.files import save_maps
    rng = np.random.default_rng(0)
    path = save_maps(tmp_path / "old.safetensors",
                     {2: (rng.normal(size=(4, 4)), rng.normal(size=4))},
                     {"split": 1, "d_in": 4, "d_out": 4})
    assert load_maps(path).kind == "ridge"
