"""The built-in models' advice ships as package data (gpu/core/advice/<model>.json, read through
importlib.resources by gpu.core.advised): each copy is the advisor's committed record
(results/advise/<model>/advice.json) byte for byte, and a built wheel carries every one and runs
it where the repository's results/ is out of reach."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpu.core import advised
from gpu.core.models import BUILTINS
from gpu.maps.cached import SHIPPED, manifest

ROOT = Path(__file__).resolve().parents[1]


def _record(model: str) -> Path:
    return ROOT / advised.RECORD / model / "advice.json"


def _settings_in_the_record() -> dict[str, dict]:
    return {m: advised.settings_of(json.loads(_record(m).read_text())["recommendation"])
            for m in BUILTINS}


@pytest.mark.parametrize("model", sorted(BUILTINS))
def test_the_shipped_advice_is_the_committed_record(model):
    shipped = advised.shipped_advice(model)
    assert shipped.is_file(), f"{model} has no shipped advice"
    assert shipped.read_bytes() == _record(model).read_bytes(), (
        f"the shipped advice of {model} drifted from the advisor's record: "
        f"cp {advised.RECORD}/{model}/advice.json gpu/core/{advised.SHIPPED}/{model}.json")


def test_the_advised_defaults_are_the_records():
    assert advised.ADVISED == _settings_in_the_record()


@pytest.mark.slow
def test_a_built_wheel_carries_and_runs_every_builtin_advice(tmp_path):
    """(And the shipped maps, gpu.maps.cached.) Build the wheel from a copy of the sources (no network: the venv's setuptools), check
    every built-in's advice is in it, then import gpu.core.advised from the wheel itself (a
    zip: only importlib.resources reads from it, and no results/ is near it)."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    src.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / item, src / item)
    for package in ("gpu", "rfmodel", "rfmath", "proofs_check"):
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(out)], check=True,
                   capture_output=True, cwd=tmp_path)
    (wheel,) = out.glob("ridgefill-*.whl")
    with zipfile.ZipFile(wheel) as z:
        for model in BUILTINS:
            name = f"gpu/core/{advised.SHIPPED}/{model}.json"
            assert name in z.namelist(), f"{wheel.name} lacks {name}"
            assert z.read(name) == _record(model).read_bytes()
        for name in [*manifest(), "MANIFEST.json"]:  # the advised maps ship beside the advice
            member = f"gpu/maps/{SHIPPED}/{name}"
            assert z.read(member) == (ROOT / member).read_bytes(), member
    probe = ("import json, gpu.core.advised as a; "
             "print(json.dumps({'file': a.__file__, 'advised': a.ADVISED}))")
    env = {**os.environ, "PYTHONPATH": str(wheel)}
    run = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["file"].startswith(str(wheel))  # imported from the wheel, not the checkout
    assert got["advised"] == _settings_in_the_record()


def test_the_advisor_rewrites_the_package_copy_in_a_checkout(tmp_path, monkeypatch):
    """`ridgefill advise` on a built-in, writing the repository's record, rewrites the shipped
    copy byte for byte; into another out dir (or for a local model) it copies nothing. (A
    checkout laid out in tmp_path: gpu/core/advised.py's place decides where the copy goes.)"""
    from gpu.lab.tools import advise

    model = sorted(BUILTINS)[0]
    core = tmp_path / "gpu" / "core"
    (core / advised.SHIPPED).mkdir(parents=True)
    monkeypatch.setattr(advised, "__file__", str(core / "advised.py"))
    shipped = core / advised.SHIPPED / f"{model}.json"
    shipped.write_text("old\n")
    record = tmp_path / advised.RECORD / model / "advice.json"
    record.parent.mkdir(parents=True)
    record.write_text('{"recommendation": {"keeps_budget": false}}\n')
    assert advise.ship(model, tmp_path / "elsewhere", record) is None
    assert advise.ship("a-local-model", tmp_path / advised.RECORD, record) is None
    assert shipped.read_text() == "old\n"
    assert advise.ship(model, tmp_path / advised.RECORD, record) == shipped
    assert shipped.read_bytes() == record.read_bytes()
