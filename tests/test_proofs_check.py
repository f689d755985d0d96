"""proofs_check re-checks every Lean proof with the shared toolchain, and catches what it must.

The positive test is the CI check itself (``python -m proofs_check`` with the shared 2021
toolchain). The negative tests break a temporary copy of ``lean/`` or of the manifest and check
only ``RidgeFill.OrderedField`` (``--module``), so each takes seconds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proofs_check import lean, run_check
from proofs_check.manifest import THEOREMS

ROOT = Path(__file__).resolve().parent.parent
TOOLCHAIN = (Path(os.environ["RIDGEFILL_LEAN"]) if os.environ.get("RIDGEFILL_LEAN")
             else lean.shared_toolchain(ROOT))
needs_toolchain = pytest.mark.skipif(
    TOOLCHAIN is None,
    reason=f"no shared/toolchains/{lean.SHARED_TOOLCHAIN} beside the checkout and no "
    "RIDGEFILL_LEAN",
)
SMALL = ["RidgeFill.OrderedField"]  # one module without imports: a build of a few seconds


def _rows(stdout: str) -> dict[str, list[str]]:
    """Theorem name -> its columns, from the printed table."""
    return {cols[0]: cols for line in stdout.splitlines()
            if line.startswith("RidgeFill.") and len(cols := re.split(r"\s{2,}", line)) == 6}


@pytest.fixture
def lean_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "lean"
    shutil.copytree(ROOT / "lean", dst, ignore=shutil.ignore_patterns(".lake", "*.olean"))
    return dst


@pytest.mark.slow
@needs_toolchain
def test_proofs_check_proves_every_manifest_theorem_with_the_shared_toolchain():
    proc = subprocess.run(
        [sys.executable, "-m", "proofs_check", "--toolchain", str(TOOLCHAIN)],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _rows(proc.stdout)
    for thm in THEOREMS:
        name, toolchain, status, axioms, twins, test = rows[thm.name]
        assert status == "proved", rows[thm.name]
        assert toolchain.startswith("Lean 4.") and "commit" in toolchain
        assert set(axioms.split(", ")) <= {"none", "propext", "Classical.choice", "Quot.sound"}
        assert (twins, test) == (", ".join(thm.twins), thm.test)
    assert re.search(r"not built here\s+RatCheck", proc.stdout)


@needs_toolchain
def test_proofs_check_detects_a_sorry(lean_copy: Path):
    src = lean_copy / "RidgeFill" / "OrderedField.lean"
    text = src.read_text()
    proof = "theorem natCast_zero : (natCast 0 : α) = 0 := rfl"
    assert proof in text
    src.write_text(text.replace(proof, proof.replace(":= rfl", ":= sorry")))
    result = run_check(lean_dir=lean_copy, toolchain=TOOLCHAIN, modules=SMALL)
    assert not result.ok
    assert any("OrderedField.lean" in p and "'sorry'" in p for p in result.problems)
    assert any(p.startswith("module RidgeFill.OrderedField failed") for p in result.problems)


@needs_toolchain
def test_proofs_check_detects_an_extra_axiom(lean_copy: Path):
    src = lean_copy / "RidgeFill" / "OrderedField.lean"
    src.write_text(src.read_text() + (
        "\naxiom extra_axiom : (0 : Nat) = 1\n"
        "theorem uses_extra_axiom : (0 : Nat) = 1 := extra_axiom\n"
        "#print axioms uses_extra_axiom\n"
    ))
    result = run_check(lean_dir=lean_copy, toolchain=TOOLCHAIN, modules=SMALL)
    assert not result.ok
    assert any("'axiom' is not allowed" in p for p in result.problems)
    assert any("uses_extra_axiom depends on non-standard axioms ['extra_axiom']" in p
               for p in result.problems)


@needs_toolchain
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("test", "tests/test_rfmath_gating.py::test_no_such_property",
         "has no 'def test_no_such_property('"),
        ("twins", ("rfmath.gating.no_such_function",), "has no function 'no_such_function'"),
        ("name", "RidgeFill.no_such_theorem", "no `theorem` declares it"),
    ],
)
def test_proofs_check_detects_a_broken_manifest_entry(tmp_path: Path, field, value, message):
    manifest = tmp_path / "manifest.py"
    manifest.write_text(
        "import dataclasses\n"
        "from proofs_check.manifest import THEOREMS as BASE, Theorem\n"
        f"THEOREMS = (dataclasses.replace(BASE[0], {field}={value!r}),) + BASE[1:]\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "proofs_check", "--toolchain", str(TOOLCHAIN),
         "--manifest", str(manifest), "--module", SMALL[0]],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert message in proc.stdout


def test_comments_docstrings_and_strings_hide_forbidden_words(tmp_path: Path):
    src = tmp_path / "Clean.lean"
    src.write_text(
        '/-! no sorry here -/\n-- nor admit here\n/-- nor an axiom /- nested sorry -/ -/\n'
        'def s : String := "sorry"\n#print axioms s\ntheorem t : True := trivial\n'
    )
    assert lean.forbidden_tokens(src) == []
    src.write_text(src.read_text() + "theorem u : False := sorry\n")
    assert [(b.line, b.token) for b in lean.forbidden_tokens(src)] == [(7, "sorry")]


def test_manifest_names_match_the_lean_docstrings():
    decls = {d.name: d for path in (ROOT / "lean" / "RidgeFill").glob("*.lean")
             for d in lean.theorems(path)}
    for thm in THEOREMS:
        assert decls[thm.name].python == thm.twins
        assert decls[thm.name].test == thm.test


def test_lake_builds_every_module_and_ratcheck_is_not_a_default_target():
    """`lake build` builds the default target RidgeFill, which must reach every module under
    RidgeFill/; RatCheck is a library of its own that only `lake build RatCheck` builds."""
    lean_dir = ROOT / "lean"
    lakefile = lean.strip_comments((lean_dir / "lakefile.lean").read_text(encoding="utf-8"))
    libs = re.findall(r"(@\[default_target\]\s*)?lean_lib\s+(\w+)", lakefile)
    assert {name: bool(attr) for attr, name in libs} == {"RidgeFill": True, "RatCheck": False}
    mods = lean.module_sources(lean_dir)
    _, deps = lean.import_order(mods)
    reached, todo = set(), ["RidgeFill"]
    while todo:
        m = todo.pop()
        if m not in reached:
            reached.add(m)
            todo.extend(deps[m])
    assert reached == {m for m in mods if m.startswith("RidgeFill")}


def test_ratcheck_computes_no_rat_arithmetic_and_numerals_are_scoped():
    """RatCheck only instantiates NonVacuous: no native_decide, and its one `decide` compares the
    integer numerators of 0 and 1. The package's OfNat instances are scoped to RidgeFill."""
    ratcheck = lean.strip_comments((ROOT / "lean" / "RatCheck.lean").read_text(encoding="utf-8"))
    assert "native_decide" not in ratcheck
    assert re.findall(r"\bdecide\b", ratcheck) == ["decide"]
    assert "absurd (congrArg Rat.num h) (by decide)" in ratcheck
    assert not re.search(r"^\s*(namespace|open)\s+RidgeFill\b", ratcheck, re.M)
    ordered = lean.strip_comments(
        (ROOT / "lean" / "RidgeFill" / "OrderedField.lean").read_text(encoding="utf-8"))
    instances = re.findall(r"^.*\binstance\b.*$", ordered, re.M)
    assert len(instances) == 3
    assert all(line.startswith("scoped instance (priority := low)") for line in instances)
