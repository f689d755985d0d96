"""Where the harness keeps its fitted maps (gpu.lab.eval.harness.ensure_maps).

Each fit writes one file per split and kind under ``root/maps``, named for the split set, the
kinds and the settings it was asked for. ``fits.json`` beside them records which splits and
kinds each fit holds and the settings it was fitted with, so a run whose (split, kind) pairs
earlier fits already hold loads their files, and a run that needs more fits only the pairs no
fit holds, every kind a split lacks from one capture of the calibration text. That is safe
because a split's maps do not depend on the splits or kinds fitted beside it: its moments are
sums over its own layer inputs and lambda is chosen per split and kind on held-out text
(gpu.maps.fit; tests/test_map_cache.py checks it bitwise).
"""
from __future__ import annotations

import json
from pathlib import Path

from rfmodel.atomic import write_json

from ...maps.fit import output_path

INDEX = "fits.json"


def read_index(mdir: Path) -> dict[str, dict]:
    """{file stem: {"settings": signature, "splits": [split, ...], "kinds": [kind, ...]}};
    {} when none."""
    path = mdir / INDEX
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); delete it (the map files stay and "
                         "are indexed again by the next run that asks for their splits)") from None


def files(mdir: Path, stem: str, splits: list[int], kinds: tuple[str, ...]
          ) -> dict[tuple[int, str], Path]:
    """The map file of every (split, kind) of the fit ``stem`` of ``splits`` and ``kinds``."""
    out = mdir / f"{stem}.safetensors"
    return {(s, k): output_path(out, s, len(splits), k, kinds) for s in splits for k in kinds}


def record(mdir: Path, stem: str, settings: str, splits: list[int], kinds: tuple[str, ...]
           ) -> None:
    """Enter the fit ``stem`` (its files all written) in the index, atomically."""
    index = read_index(mdir)
    entry = {"settings": settings, "splits": sorted(splits), "kinds": list(kinds)}
    if index.get(stem) != entry:
        write_json(mdir / INDEX, {**index, stem: entry})


def held(mdir: Path, settings: str, splits: list[int], kinds: tuple[str, ...],
         older: dict[str, tuple[str, ...]] | None = None) -> dict[tuple[int, str], Path]:
    """The file of every (split, kind) asked for that an indexed fit with the same ``settings``
    holds and has on disk (the first such fit in the index). ``older``: {signature: kinds} of
    entries written before the index named kinds (one signature per capture they took)."""
    found: dict[tuple[int, str], Path] = {}
    for stem, entry in read_index(mdir).items():
        if "kinds" in entry:
            fit_kinds = tuple(entry["kinds"]) if entry["settings"] == settings else ()
        else:
            fit_kinds = (older or {}).get(entry["settings"], ())
        paths = files(mdir, stem, entry["splits"], fit_kinds)
        for s in set(splits) & set(entry["splits"]):
            for k in set(kinds) & set(fit_kinds):
                if (s, k) not in found and paths[(s, k)].is_file():
                    found[(s, k)] = paths[(s, k)]
    return found
