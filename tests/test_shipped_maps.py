"""The advised maps shipped with the package (gpu.maps.cached): each file is what its manifest
says (model, split, kind, fingerprint, checksum), a built-in's advised configuration finds it
without fitting, a damaged copy is refused, and the manifest's command reproduces it."""
from __future__ import annotations

import json
import pytest
import torch
from safetensors import safe_open

from gpu.core import advised, models
from gpu.maps import cached
from gpu.maps.files import load_maps

ENTRIES = sorted(cached.manifest().items())


def _meta(path) -> dict:
    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata()["ridgefill"])


@pytest.mark.parametrize("name,entry", ENTRIES)
def test_each_shipped_file_is_what_its_manifest_says(name, entry):
    path = cached.shipped_path(entry["model"], entry["split"], entry["kind"])
    assert path is not None and path.name == name
    assert cached.sha256(path) == entry["sha256"]
    meta = _meta(path)
    assert (meta["model"], meta["split"], meta.get("kind", "ridge"), meta["fingerprint"]) == (
        entry["model"], entry["split"], entry["kind"], entry["fingerprint"])
    assert f"--seed {entry['seed']}" in entry["command"] and f"--kinds {entry['kind']}" in \
        entry["command"] and f"--splits {entry['split']}" in entry["command"]
    # the configuration it ships for: the built-in's advice reads maps of this split and kind
    config = advised.default_config(entry["model"])
    assert config.split == entry["split"] and entry["kind"] in config.map_kinds
    assert meta["calibration"]["rows"] == entry["max_tokens"]


@pytest.mark.parametrize("name,entry", ENTRIES)
def test_an_advised_builtin_finds_its_shipped_maps_without_fitting(monkeypatch, tmp_path,
                                                                  caplog, name, entry):
    monkeypatch.setattr(models, "cache_dir", lambda: tmp_path)  # an empty cache
    monkeypatch.setattr(cached, "fit", lambda *a, **k: pytest.fail("fitted"))
    caplog.set_level("INFO", logger="ridgefill")
    got = cached.cached_maps(entry["model"], entry["split"], entry["kind"])
    assert got == cached.shipped_path(entry["model"], entry["split"], entry["kind"])
    assert "shipped with ridgefill" in caplog.text


def test_a_damaged_shipped_file_is_refused(monkeypatch):
    name, entry = ENTRIES[0]
    monkeypatch.setattr(cached, "manifest", lambda: {name: {**entry, "sha256": "0" * 64}})
    with pytest.raises(ValueError, match="do not match their checksum.*reinstall"):
        cached.cached_maps(entry["model"], entry["split"], entry["kind"])


@pytest.mark.large
@pytest.mark.slow
@pytest.mark.parametrize("name,entry", ENTRIES[:1])
def test_the_manifest_command_refits_the_shipped_maps(tmp_path, name, entry):
    """The manifest's fit, rerun here (about 6 minutes on 2 cores for the 0.5B): the same
    lambda per layer, and every late layer's map within 2% of the shipped one (relative
    Frobenius norm; bf16 storage and the thread count's summation order differ)."""
    from gpu.maps.fit import fit
    from gpu.maps.fit_options import FitOptions

    loaded = models.load(entry["model"], device="cpu", dtype=torch.float32)
    out = tmp_path / name
    fit(loaded, FitOptions(out=out, splits=(entry["split"],), kinds=(entry["kind"],),
                           max_tokens=entry["max_tokens"], seed=entry["seed"]), progress=False)
    shipped = load_maps(cached.shipped_path(entry["model"], entry["split"], entry["kind"]),
                        loaded.model)
    refit = load_maps(out, loaded.model)
    assert refit.meta["lambda"] == shipped.meta["lambda"]
    for layer in shipped.meta["layers"]:
        a, b = (m.matrix(layer)[0].float() for m in (shipped, refit))
        assert float((a - b).norm() / a.norm()) < 0.02, layer


@pytest.mark.parametrize("model", sorted(models.BUILTINS))
def test_every_builtin_whose_advice_reads_maps_ships_them(model):
    """A newcomer's first generate or serve of any built-in starts without fitting."""
    config = advised.default_config(model)
    for kind in config.map_kinds:
        assert cached.shipped_path(model, config.split, kind) is not None, (model, kind)
