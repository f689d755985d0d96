"""A built-in model's maps (paper section 9, step 1): the advised configuration's maps ship with
the package (``gpu/maps/shipped/``, each with the command, seed and checksum that produce it in
``shipped/MANIFEST.json``); any other split or kind is fitted once on the built-in calibration
text and cached (:func:`cached_path`)."""
from __future__ import annotations

import hashlib
import json
import logging
from importlib import resources
from pathlib import Path

import torch

from ..core import models
from .fit import fit
from .fit_options import FitOptions

FIT_TOKENS = 24_000  # calibration tokens of a first-use fit (what the shipped maps were fitted on)
SHIPPED = "shipped"  # gpu/maps/SHIPPED/<stem>.safetensors, listed in SHIPPED/MANIFEST.json
log = logging.getLogger("ridgefill")


def stem(model: str, split: int, kind: str = "ridge") -> str:
    """A built-in's map file name without suffix (ridge maps keep the name they had before
    kinds existed)."""
    return f"{model}-s{split}" + ("" if kind == "ridge" else f"-{kind}")


def cached_path(model: str, split: int, kind: str = "ridge") -> Path:
    """Where a built-in model's maps of ``kind`` for ``split`` are fitted and kept."""
    return models.cache_dir() / "maps" / f"{stem(model, split, kind)}.safetensors"


def manifest() -> dict:
    """{file name: its record (model, split, kind, command, seed, sha256)} of the shipped maps."""
    return json.loads(resources.files(__package__).joinpath(SHIPPED, "MANIFEST.json").read_text())


def shipped_path(model: str, split: int, kind: str = "ridge") -> Path | None:
    """The shipped maps of ``model`` at ``split`` of ``kind`` (a file of an installed wheel or
    of the checkout), or None when the package ships none."""
    name = f"{stem(model, split, kind)}.safetensors"
    if name not in manifest():
        return None
    return Path(str(resources.files(__package__).joinpath(SHIPPED, name)))


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cached_maps(name: str, split: int, kind: str = "ridge", device: str = "cpu",
                loaded: models.Loaded | None = None, max_tokens: int = FIT_TOKENS) -> Path:
    """Built-in ``name``'s maps of ``kind`` for ``split``: the shipped file, else the cached
    one, else fitted now (``ridgefill fit`` in this process, on ``loaded`` when given, with its
    progress bar) into :func:`cached_path`. Which of the three, it logs (info)."""
    shipped = shipped_path(name, split, kind)
    if shipped is not None:
        if sha256(shipped) != manifest()[shipped.name]["sha256"]:
            raise ValueError(f"the shipped maps {shipped} do not match their checksum in "
                             f"{SHIPPED}/MANIFEST.json: reinstall ridgefill")
        log.info("maps: %s (shipped with ridgefill)", shipped)
        return shipped
    path = cached_path(name, split, kind)
    if path.exists():
        log.info("maps: %s (cached)", path)
        return path
    log.info("maps: fitting %s maps for %s at split %s on the built-in calibration text (%s "
             "tokens; once, cached in %s)", kind, name, split, max_tokens, path)
    if loaded is None:
        loaded = models.load(name, device=device, dtype=torch.float32)
    fit(loaded, FitOptions(out=path, splits=(split,), max_tokens=max_tokens, kinds=(kind,)))
    return path
