"""Sharding under torchrun (issue 20, gpu.lab.eval.shard): two gloo ranks on the CPU each measure
a disjoint, seed-determined share of a tiny model's grid into their own journal (the maps
fitted collectively), rank 0 merges them into the one report; a merge with a missing share,
overlapping shares or another sharding's journal is refused."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from gpu.lab.eval.journal import Journal
from gpu.lab.eval.shard import Shard, merged_records
from gpu_fixtures import free_port
from gpu.lab.eval.units import Unit

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    import torch
    from gpu.core import models
    from gpu.lab.eval import harness as ev, minimodel
    from gpu.lab.eval.grid import EvalConfig
    from gpu.core.config import PrefillConfig
    from gpu.lab.eval.instruments import Arm

    torch.set_num_threads(1)
    root = Path(sys.argv[1])
    loaded = models.load(str(root / "tiny-llama"), device="cpu", dtype=torch.float32)
    cfg = EvalConfig(loaded.name, (3,), 96, {512: ("niah_single_1", "niah_multikey_1")},
                     samples=2, docs=2, loss_length=256, score_tokens=24, continuation=2,
                     answer_tokens=3, calib_tokens=3000,
                     minimum={"samples": 2, "docs": 2, "domains": 2})
    arms = [Arm("exact", PrefillConfig(fill="exact")),
            Arm("ridge@3", PrefillConfig(fill="ridge", split=3, tail=96, rows="none")),
            Arm("pop@6", PrefillConfig(fill="identity", split=6, tail=1, rows="none"))]
    fit_kw = {"lambdas": (1e-3,), "doc_tokens": 512, "heldout_docs": 1, "heldout_tokens": 256}
    rep = ev.evaluate_model(loaded, cfg, root / "out", minimodel.SyntheticTexts(), arms=arms,
                            progress=False, fit_kw=fit_kw, calib=str(root / "calib"))
    if rep is not None:
        (root / "report-counts.json").write_text(json.dumps(rep["counts"]))
''')


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    from gpu.lab.eval import minimodel

    root = tmp_path_factory.mktemp("shard")
    minimodel.build(root / "tiny-llama")
    minimodel.write_calibration(root / "calib")
    (root / "worker.py").write_text(WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
           str(root / "worker.py"), str(root)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def test_two_gloo_ranks_measure_disjoint_shares_and_merge(two_ranks):
    out = two_ranks / "out" / "tiny-llama"
    heads = [Journal(out / f"records.rank{r}-of-2.jsonl").get("shard") for r in (0, 1)]
    shares = [set(h["units"]) for h in heads]
    assert not shares[0] & shares[1] and all(shares)  # disjoint, neither empty here
    assert not (out / "records.jsonl").exists()
    counts = json.loads((two_ranks / "report-counts.json").read_text())
    assert counts["needle_samples"] == 4 and counts["documents"] == 2
    assert counts["needle_records"] == 4 * 3 and counts["loss_records"] == 2 * 3
    # every unit was measured by the rank that owns it, and only there
    for r, h in enumerate(heads):
        recs = [x for x in Journal(out / f"records.rank{r}-of-2.jsonl").records()
                if x["instrument"] in ("needle", "loss")]
        assert {f"{'needle' if x['instrument'] == 'needle' else 'doc'}|{x['unit']}"
                for x in recs} == shares[r]


def test_one_process_reports_on_the_ranks_journals_without_measuring(two_ranks):
    """Journals copied into one folder (here: the ranks' own) report from one process, which
    finds every record in them and measures nothing."""
    out = two_ranks / "out" / "tiny-llama"
    before = json.loads((two_ranks / "report-counts.json").read_text())
    (two_ranks / "report-counts.json").unlink()
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "WORLD_SIZE")}
    done = subprocess.run([sys.executable, str(two_ranks / "worker.py"), str(two_ranks)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((two_ranks / "report-counts.json").read_text()) == before
    assert not (out / "records.jsonl").exists()  # nothing measured, not even a session


def _units(ids):
    return [Unit("needle", i, None, "s", "t") for i in ids]


def test_shares_are_seed_determined_and_partition():
    units = _units([f"t/512/{i}" for i in range(40)])
    parts = [Shard(r, 3).take(units, seed=7) for r in range(3)]
    assert sorted(u.id for p in parts for u in p) == sorted(u.id for u in units)
    assert [u.id for u in Shard(1, 3).take(units, 7)] == [u.id for u in parts[1]]
    assert [u.id for u in Shard(1, 3).take(units, 8)] != [u.id for u in parts[1]]
    with pytest.raises(ValueError, match="rank 2 of world 2"):
        Shard(2, 2)


def test_merge_refuses_missing_overlapping_and_mixed_shares(two_ranks, tmp_path):
    src = two_ranks / "out" / "tiny-llama"
    units = []
    for r in (0, 1):
        for u in Journal(src / f"records.rank{r}-of-2.jsonl").get("shard")["units"]:
            kind, uid = u.split("|", 1)
            units.append(Unit(kind, uid, None, "s", "t"))
    root = tmp_path / "m"
    root.mkdir()
    for r in (0, 1):
        shutil.copy(src / f"records.rank{r}-of-2.jsonl", root)
    assert len(merged_records(root, units, 0)) > 0
    (root / "records.rank1-of-2.jsonl").rename(tmp_path / "r1.jsonl")
    with pytest.raises(ValueError, match=r"missing shares: no journal of rank\(s\) \[1\]"):
        merged_records(root, units, 0)
    shutil.copy(tmp_path / "r1.jsonl", root / "records.rank1-of-2.jsonl")
    with pytest.raises(ValueError, match="does not hold rank 0 of 2 at seed 1"):
        merged_records(root, units, 1)
    with pytest.raises(ValueError, match=r"missing shares: 1 units \(e.g. needle\|extra\)"):
        merged_records(root, units + [Unit("needle", "extra", None, "s", "t")], 0)
    rec = next(x for x in Journal(root / "records.rank0-of-2.jsonl").records()
               if x["instrument"] == "needle")
    Journal(root / "records.jsonl").add(rec)  # an unsharded run's copy of the same record
    with pytest.raises(ValueError, match="overlapping shares"):
        merged_records(root, units, 0)
    (root / "records.jsonl").unlink()
    Journal(root / "records.rank0-of-3.jsonl").add({"key": "x", "instrument": "needle"})
    with pytest.raises(ValueError, match=r"journals of \[2, 3\] ranks"):
        merged_records(root, units, 0)


def test_one_process_keeps_the_plain_journal(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    s = Shard.from_env()
    assert (s.rank, s.world, s.journal_name) == (0, 1, "records.jsonl")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert Shard.from_env().journal_name == "records.rank1-of-4.jsonl"
    assert torch.distributed.is_available()
