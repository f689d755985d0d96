"""The harness's map cache (gpu.lab.eval.map_cache through harness.ensure_maps) on a tiny random
Llama: a split's maps do not depend on the splits or kinds fitted beside it (the oracle: a fit of
that split alone, or of that kind alone, bitwise), so a run whose splits an earlier fit holds fits
nothing, a run that needs one more split fits only that one, every kind from one capture, and a
split that lacks some kinds is fitted only those."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from gpu.core import models
from gpu.lab.eval import grid, map_cache, minimodel, units
from gpu.lab.eval import harness as ev
import gpu.maps.fit as fit_mod

pytestmark = pytest.mark.slow

ALL = ("ridge", "anchored", "kv")
FIT_KW = {"lambdas": (1e-3, 1e-1), "doc_tokens": 256, "heldout_docs": 1, "heldout_tokens": 128}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("map_cache")
    loaded = models.load(str(minimodel.build(root / "tiny-llama", layers=6)), device="cpu",
                         dtype=torch.float32)
    cfg = grid.EvalConfig(loaded.name, (2,), 160, {}, calib_tokens=1200)
    yield {"root": root, "loaded": loaded, "cfg": cfg,
           "calib": str(minimodel.write_calibration(root / "calib", n_docs=4))}
    torch.set_num_threads(threads)


@pytest.fixture
def fits(monkeypatch) -> list:
    """(splits, kinds) of every fit the harness runs, in order."""
    seen: list = []
    real = fit_mod.fit
    monkeypatch.setattr(fit_mod, "fit", lambda loaded, opts, progress=True: (
        seen.append((tuple(opts.splits), opts.kinds)), real(loaded, opts, progress))[1])
    return seen


def _maps(t, out, splits, kinds=("ridge",)):
    return ev.ensure_maps(t["loaded"], replace(t["cfg"], splits=splits), out, t["calib"],
                          progress=False, kinds=kinds, **FIT_KW)


def _same(a, b) -> None:
    assert a.layers == b.layers and a.meta["lambda"] == b.meta["lambda"]
    for l in a.layers:
        for x, y in zip(a.matrix(l), b.matrix(l)):
            assert torch.equal(x, y), f"layer {l}"


def test_subset_and_superset_runs_reuse_earlier_fits(tiny, tmp_path, fits):
    t = tiny
    kinds = ("ridge", "kv")
    both = _maps(t, tmp_path / "a", (2, 4), kinds)
    assert fits == [((2, 4), ALL)]  # every kind from one capture
    alone = _maps(t, tmp_path / "b", (4,), kinds)
    for k in ALL:  # the oracle: split 4 fitted by itself
        _same(both[4][k], alone[4][k])
    _same(both[4]["ridge"], _maps(t, tmp_path / "c", (4,))[4])  # ... and ridge by itself
    fits.clear()
    sub = _maps(t, tmp_path / "a", (4,), kinds)
    assert fits == [] and set(sub) == {4}
    for k in ALL:
        _same(sub[4][k], alone[4][k])
    more = _maps(t, tmp_path / "a", (2, 3, 4), kinds)
    assert fits == [((3,), ALL)]  # only the new split
    _same(more[2]["kv"], both[2]["kv"])
    fits.clear()
    assert set(_maps(t, tmp_path / "a", (3, 4), kinds)) == {3, 4} and fits == []
    index = map_cache.read_index(tmp_path / "a" / "maps")
    assert sorted(e["splits"] for e in index.values()) == [[2, 4], [3]]
    # other fit settings never share files
    assert _maps(t, tmp_path / "a", (4,)) and fits == []  # ridge alone: held
    _maps({**t, "cfg": replace(t["cfg"], calib_tokens=1000)}, tmp_path / "a", (4,))
    assert fits == [((4,), ("ridge",))]
    _maps({**t, "cfg": replace(t["cfg"], seed=1)}, tmp_path / "a", (4,))
    assert fits == [((4,), ("ridge",))] * 2  # another seed: other settings (it draws the built-in text)
    index = map_cache.read_index(tmp_path / "a" / "maps")
    assert len(index) == 4 and len({e["settings"] for e in index.values()}) == 3


def test_only_the_kinds_a_split_lacks_are_fitted_and_older_entries_are_read(tiny, tmp_path,
                                                                             fits):
    t = tiny
    ridge = _maps(t, tmp_path, (2, 4))
    assert fits == [((2, 4), ("ridge",))]
    _maps(t, tmp_path, (2,), ("ridge", "kv"))
    assert fits[1:] == [((2,), ("anchored", "kv"))]  # ridge held: the other two alone
    # the index as runs wrote it before it named kinds: one entry per capture, the second's
    # settings signed with its kinds
    mdir = tmp_path / "maps"
    index = map_cache.read_index(mdir)
    c = t["cfg"]
    for entry in index.values():
        tag = () if entry.pop("kinds") == ["ridge"] else (("anchored", "kv"),)
        entry["settings"] = units.sig(t["calib"], c.calib_tokens, c.seed, FIT_KW, *tag)
    (mdir / map_cache.INDEX).write_text(json.dumps(index))
    fits.clear()
    old = _maps(t, tmp_path, (2, 4), ("ridge", "kv"))
    assert fits == [((4,), ("anchored", "kv"))]  # split 2 held whole, split 4's ridge held
    _same(old[4]["ridge"], ridge[4])
    _same(old[4]["kv"], _maps(t, tmp_path / "b", (4,), ("ridge", "kv"))[4]["kv"])


def test_a_fit_from_before_the_index_is_indexed_and_reused(tiny, tmp_path, fits):
    t = tiny
    first = _maps(t, tmp_path, (2, 4))
    (tmp_path / "maps" / map_cache.INDEX).unlink()  # as a cache written before the index
    fits.clear()
    assert _maps(t, tmp_path, (4,)) and fits == [((4,), ("ridge",))]
    again = _maps(t, tmp_path, (2, 4))  # its own split set and kinds: found by name
    assert fits == [((4,), ("ridge",))]
    _same(again[2], first[2])
    (tmp_path / "maps" / map_cache.INDEX).write_text("{not json")
    with pytest.raises(ValueError, match="delete it"):
        _maps(t, tmp_path, (2,))
