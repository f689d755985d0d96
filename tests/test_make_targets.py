"""The Makefile's study targets run commands the CLI accepts: ``make -n`` prints each target's
``ridgefill eval frontier`` lines, and each parses into FrontierOptions (a renamed or mistyped
flag fails here, not hours into a run); the tiered finalists' resume is its screen's command
with only the sample count and the kept arms changed, so it resumes the screen's journal."""
from __future__ import annotations

import shlex
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from gpu import cli
from gpu.lab.eval.options import FrontierOptions
from gpu.lab.eval.tiered import finalist_keep

ROOT = Path(__file__).resolve().parents[1]
KEEP = ["kv+attn20c@12/t1", "kv.identity-values@16/t1"]  # what `$keep` holds at run time


def frontier_runs(target: str) -> list[FrontierOptions]:
    """The options of every ``ridgefill eval frontier`` line ``make -n target`` prints."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", "-s", target], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.replace("\\\n", " ")
    parser, runs = cli.build_parser(), []
    for line in out.splitlines():
        if "ridgefill eval frontier" not in line:
            continue
        words = shlex.split(line.split("&&")[-1])
        argv = words[words.index("eval"):]
        argv = [w for a in argv for w in (KEEP if a == "$keep" else [a])]
        runs.append(cli.options_from_args(parser.parse_args(argv), FrontierOptions))
    return runs


@pytest.mark.parametrize("target", ["frontier", "frontier-large", "power", "power-8k", "ruler",
                                    "tiered", "tiered-finalists"])
def test_study_targets_parse(target):
    runs = frontier_runs(target)
    assert runs and all(isinstance(o, FrontierOptions) for o in runs)


def test_tiered_finalists_resume_the_screens_journals():
    screen, final = frontier_runs("tiered"), frontier_runs("tiered-finalists")
    assert [o.models for o in final] == [o.models for o in screen] == [
        ("qwen2.5-coder-0.5b",), ("qwen2.5-coder-1.5b",)]
    for s, f in zip(screen, final):
        assert f.samples > s.samples and f.keep == tuple(KEEP)
        assert replace(f, samples=s.samples, keep=s.keep) == s


def test_the_finalists_keep_is_the_committed_resumes(tmp_path):
    """The 0.5B's finalists were resumed by hand before the target existed: the keep list the
    target reads from finalists.json is that run's (the command its frontier.md records)."""
    root = ROOT / "results" / "tiered" / "qwen2.5-coder-0.5b"
    command = (root / "frontier.md").read_text().split("Command: `", 1)[1].split("`", 1)[0]
    words = shlex.split(command)
    assert finalist_keep(root) == words[words.index("--keep") + 1:]
    with pytest.raises(SystemExit, match="make tiered"):
        finalist_keep(tmp_path)
