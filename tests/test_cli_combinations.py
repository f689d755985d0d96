"""Every combination of built-in model, ``--maps`` and ``--fill`` through ``ridgefill generate``
either answers or stops with one line naming the problem (no traceback): no maps, maps fitted
for the model (at its advised split, or half depth), a corrupt file, maps of another model;
every fill kind and none given. A fill that needs maps the cache lacks fits them (here a
stand-in writes maps of the right shape: the fit itself is tested in test_fit_*)."""
from __future__ import annotations

import numpy as np
import pytest

from gpu import cli
from gpu.core import advised, fills, models
from gpu.maps import cached
from gpu.maps.files import save_maps

MODELS = [pytest.param(m, marks=[pytest.mark.model, pytest.mark.slow] if m in models.SMALL
                       else [pytest.mark.large]) for m in models.BUILTINS]
MAPS = ("none", "fitted", "corrupt", "other-model")


def _random_maps(loaded: models.Loaded, path, split: int, kind: str = "ridge",
                 fingerprint: str | None = None):
    """Maps of ``kind`` at ``split`` shaped for ``loaded`` (seeded, small)."""
    cfg = loaded.model.config.get_text_config()
    d = cfg.hidden_size
    head_dim = getattr(cfg, "head_dim", None) or d // cfg.num_attention_heads
    d_out = 2 * cfg.num_key_value_heads * head_dim if kind == "kv" else d
    rng = np.random.default_rng(0)
    eye = np.eye(d_out, d) if kind != "kv" else np.zeros((d_out, d))
    layers = {l: (eye + 0.01 * rng.normal(size=(d_out, d)), np.zeros(d_out))
              for l in range(split + 1, loaded.n_layers)}
    return save_maps(path, layers, {"model": loaded.name, "split": split, "kind": kind,
                                    "fingerprint": fingerprint or loaded.fingerprint(),
                                    "d_in": d, "d_out": d_out})


@pytest.mark.parametrize("model", MODELS)
def test_every_maps_and_fill_answers_or_stops_with_one_line(model, tmp_path, monkeypatch,
                                                            capsys):
    loaded = models.load(model, device="cpu")
    monkeypatch.setattr(models, "load", lambda *a, **k: loaded)  # once for the whole walk
    cache = tmp_path / "cache"
    monkeypatch.setattr(cached, "cached_path",
                        lambda name, split, kind="ridge": cache / f"{name}-s{split}-{kind}.st")
    monkeypatch.setattr(cached, "fit", lambda ld, opts: _random_maps(
        ld, opts.out, opts.splits[0], opts.kinds[0]))
    split = advised.ADVISED[model].get("split") or loaded.n_layers // 2
    files = {"none": None,
             "fitted": _random_maps(loaded, tmp_path / "fitted.safetensors", split),
             "corrupt": tmp_path / "corrupt.safetensors",
             "other-model": _random_maps(loaded, tmp_path / "other.safetensors", split,
                                         fingerprint="0" * 16)}
    files["corrupt"].write_bytes(files["fitted"].read_bytes()[:5000])
    cache.mkdir()
    outcomes = {}
    for maps in MAPS:
        for fill in (None, *fills.FILLS):
            argv = ["generate", "--model", model, "--prompt", "The cat sat on the mat. " * 4,
                    "--question", "Where did the cat sit?", "--max-new-tokens", "1", "--tail",
                    "4"]
            argv += ["--maps", str(files[maps])] if files[maps] else []
            argv += ["--fill", fill] if fill else []
            rc = cli.main(argv)  # an exception here is the traceback a user would see
            out, err = capsys.readouterr()
            errors = [l for l in err.splitlines() if "error" in l]
            if rc == 0:
                assert "prompt tokens" in err and not errors, (maps, fill, err)  # it answered
            else:
                assert rc == 2 and len(errors) == 1, (maps, fill, err)
                assert errors[0].startswith("ridgefill generate: error: "), (maps, fill, err)
            outcomes[maps, fill] = rc
    # what must answer does: exact prefill always, the maps given for their own model at
    # their split with a map-reading fill, the no-maps fills from the advice's split
    assert all(outcomes[m, "exact"] == 0 for m in ("none",))
    assert outcomes["fitted", "ridge"] == 0 and outcomes["none", "identity"] == (
        0 if advised.ADVISED[model].get("split") else 2)
    assert all(outcomes["corrupt", f] == 2 for f in fills.MAP_KINDS)
    assert all(outcomes["other-model", f] == 2 for f in fills.MAP_KINDS)


@pytest.mark.model
@pytest.mark.slow
def test_serve_refuses_maps_its_configuration_would_not_read(tmp_path):
    """`ridgefill serve` chooses its configuration as generate does: maps given to a built-in
    whose advice is exact prefill, or beside --fill exact, stop with the line that says what
    to pass instead (before vLLM starts), and with --fill ridge they are served."""
    from gpu.serving import serve

    loaded = models.load("smollm2-135m", device="cpu")
    maps = _random_maps(loaded, tmp_path / "maps.safetensors", loaded.n_layers // 2)
    with pytest.raises(ValueError, match="exact prefill.*fill='ridge'"):
        serve.command("smollm2-135m", maps=str(maps))
    with pytest.raises(ValueError, match="fill='exact' reads no maps"):
        serve.command("smollm2-135m", maps=str(maps), fill="exact")
    argv, summary = serve.command("smollm2-135m", maps=str(maps), fill="ridge", dtype="float32")
    assert "--hf-overrides" in argv and f"split {loaded.n_layers // 2}" in summary
    other = _random_maps(loaded, tmp_path / "other.safetensors", loaded.n_layers // 2,
                         fingerprint="0" * 16)
    with pytest.raises(ValueError, match="were fitted for model .* not this model"):
        serve.command("smollm2-135m", maps=str(other), fill="ridge")
