"""Run the check and print one row per manifest theorem (``python -m proofs_check``).

Usage: ``python -m proofs_check [--toolchain DIR] [--lean-dir DIR] [--manifest FILE]
[--module NAME ...] [--jobs N]``. Exit status 0 when every manifest theorem is ``proved`` and
nothing else is wrong; 1 otherwise (the problems are listed after the table).
"""

from __future__ import annotations

import argparse
import importlib
import re
import runpy
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from proofs_check import lean
from proofs_check.manifest import THEOREMS, Theorem

ALLOWED_AXIOMS = frozenset({"propext", "Classical.choice", "Quot.sound"})
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    """One printed row: a manifest theorem and what this run established about it."""

    name: str
    toolchain: str
    status: str  # "proved", "not built here", "not selected", or "failed: <first error>"
    axioms: tuple[str, ...] | None
    twins: tuple[str, ...]
    test: str


@dataclass
class CheckResult:
    """Everything one run found: the toolchain, each module, each theorem, each problem."""

    toolchain: str
    tc: lean.Toolchain | None = None
    modules: list[lean.ModuleResult] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


def _load_manifest(path: Path | None) -> tuple[Theorem, ...]:
    if path is None:
        return THEOREMS
    theorems = runpy.run_path(str(path)).get("THEOREMS")
    if not theorems:
        raise ValueError(f"manifest {path} defines no THEOREMS; define THEOREMS = (Theorem(...),)")
    return tuple(theorems)


def _twin_problem(twin: str, root: Path) -> str | None:
    module, _, attr = twin.rpartition(".")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 -- any import failure means the twin is missing
        return f"twin {twin}: cannot import {module} ({type(exc).__name__}: {exc})"
    if not callable(getattr(mod, attr, None)):
        return f"twin {twin}: {module} has no function {attr!r}"
    return None


def _test_problem(test: str, root: Path) -> str | None:
    path, sep, name = test.partition("::")
    if not sep or not name:
        return f"test {test!r} must be written 'tests/file.py::test_name'"
    file = root / path
    if not file.is_file():
        return f"test {test}: no file {path}"
    pattern = re.compile(rf"^[ \t]*(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", re.M)
    if not pattern.search(file.read_text(encoding="utf-8")):
        return f"test {test}: {path} has no 'def {name}('"
    return None


def run_check(*, root: Path = ROOT, lean_dir: Path | None = None, manifest: Path | None = None,
              toolchain: Path | None = None, modules: list[str] | None = None,
              jobs: int | None = None) -> CheckResult:
    """Check ``lean_dir`` (default ``root/lean``) against the manifest; see the module doc."""
    start = time.perf_counter()
    lean_dir = (lean_dir or root / "lean").resolve()
    theorems = _load_manifest(manifest)
    tc = lean.find_toolchain(root, toolchain, lean_dir)
    result = CheckResult(tc.describe() if tc else "none", tc)
    problems = result.problems

    # Sources: forbidden tokens, declarations, docstring tags.
    sources = lean.module_sources(lean_dir)
    decls: dict[str, lean.Declaration] = {}
    for path in sorted(lean_dir.rglob("*.lean")):
        if any(p.startswith(".") for p in path.relative_to(lean_dir).parts):
            continue
        for bad in lean.forbidden_tokens(path):
            problems.append(f"{bad.path.relative_to(lean_dir)}:{bad.line}: '{bad.token}' is not "
                            "allowed in lean/ (every statement must be proved, from no new axioms)")
    for path in sources.values():
        for d in lean.theorems(path):
            decls.setdefault(d.name, d)

    # Build.
    if tc is None:
        problems.append("no Lean toolchain found: install elan (then `lake` is on PATH), or set "
                        "RIDGEFILL_LEAN to a toolchain folder (bin/lean, lib/lean), or keep "
                        f"shared/toolchains/{lean.SHARED_TOOLCHAIN} beside the checkout")
        order, built = list(sources), {}
    elif tc.kind == "lake" and modules is None:
        order, built = lean.build_with_lake(tc, lean_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="proofs_check-") as out:
            order, built = lean.build_with_lean(
                tc, lean_dir, Path(out), set(modules) if modules else None, jobs)
    result.modules = [built[m] for m in order if m in built]
    for mod in result.modules:
        if mod.status == "failed":
            problems.append(f"module {mod.name} failed to check: {mod.detail}")
        for name, axioms in mod.axioms.items():
            extra = [a for a in axioms if a not in ALLOWED_AXIOMS]
            if extra:
                problems.append(f"{name} depends on non-standard axioms {extra} (allowed: "
                                f"{', '.join(sorted(ALLOWED_AXIOMS))})")

    # One row per manifest theorem.
    for thm in theorems:
        module = f"RidgeFill.{thm.family}"
        decl = decls.get(thm.name)
        mod = built.get(module)
        axioms = mod.axioms.get(thm.name) if mod else None
        if decl is None:
            status = "failed: not declared in lean/"
            problems.append(f"{thm.name}: listed in the manifest but no `theorem` declares it in "
                            f"lean/ (expected in lean/RidgeFill/{thm.family}.lean)")
        elif decl.path != sources.get(module):
            status = f"failed: declared in {decl.path.name}, not {thm.family}.lean"
            problems.append(f"{thm.name}: {status}")
        elif mod is None:
            status = "failed: not checked (no toolchain)" if tc is None else "failed: not checked"
        elif mod.status == "checked" and axioms is None:
            status = "failed: no #print axioms output for it"
            problems.append(f"{thm.name}: its module checked but printed no axioms for it; end "
                            f"{thm.family}.lean with `#print axioms {thm.name.split('.')[-1]}`")
        elif mod.status == "checked":
            extra = [a for a in axioms if a not in ALLOWED_AXIOMS]
            status = f"failed: non-standard axioms {extra}" if extra else "proved"
        elif mod.status == "failed":
            status = f"failed: {mod.detail}"
        else:
            status = mod.status
            if status == "not built here":
                problems.append(f"{thm.name}: not checked, {module} is not built here "
                                f"({mod.detail})")
        if decl is not None:
            if decl.python != thm.twins:
                problems.append(f"{thm.name}: docstring says Python: {', '.join(decl.python) or '-'}"
                                f"; the manifest says {', '.join(thm.twins)}")
            if decl.test != thm.test:
                problems.append(f"{thm.name}: docstring says Test: {decl.test or '-'}; the "
                                f"manifest says {thm.test}")
        problems.extend(p for p in (_twin_problem(t, root) for t in thm.twins) if p)
        if (p := _test_problem(thm.test, root)) is not None:
            problems.append(p)
        result.rows.append(Row(thm.name, result.toolchain, status, axioms, thm.twins, thm.test))
    result.seconds = time.perf_counter() - start
    return result


def format_result(result: CheckResult, toolchain_note: str = "") -> str:
    """The report: toolchain, modules in import order, one row per theorem, problems."""
    lines = [f"proofs_check: toolchain {result.toolchain}{toolchain_note}", "", "modules:"]
    for m in result.modules:
        took = f"{m.seconds:5.1f} s" if m.status == "checked" and m.seconds else ""
        lines.append(f"  {m.status:<15} {m.name:<32} {took} {m.detail}".rstrip())
    lines += ["", "theorems:"]
    header = ("LEAN NAME", "TOOLCHAIN", "STATUS", "AXIOMS", "TWIN", "TEST")
    table = [header] + [
        (r.name, r.toolchain, r.status,
         "-" if r.axioms is None else ("none" if not r.axioms else ", ".join(r.axioms)),
         ", ".join(r.twins), r.test)
        for r in result.rows
    ]
    widths = [min(max(len(row[i]) for row in table), 60) for i in range(len(header))]
    for row in table:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    proved = sum(r.status == "proved" for r in result.rows)
    lines += ["", f"{proved} of {len(result.rows)} manifest theorems proved; "
              f"{len(result.problems)} problem(s); {result.seconds:.1f} s"]
    lines += [f"PROBLEM: {p}" for p in result.problems]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m proofs_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--toolchain", type=Path, default=None,
                        help="toolchain folder with bin/lean and lib/lean (default: lake on PATH, "
                             "else $RIDGEFILL_LEAN, else shared/toolchains beside the checkout)")
    parser.add_argument("--lean-dir", type=Path, default=None, help="default: <repo>/lean")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="a Python file defining THEOREMS (default: proofs_check/manifest.py)")
    parser.add_argument("--module", action="append", default=None, metavar="NAME",
                        help="check only this module and its imports (repeatable)")
    parser.add_argument("--jobs", type=int, default=None, help="parallel lean processes")
    args = parser.parse_args(argv)
    try:
        result = run_check(lean_dir=args.lean_dir, manifest=args.manifest,
                           toolchain=args.toolchain, modules=args.module, jobs=args.jobs)
    except ValueError as exc:
        print(f"proofs_check: {exc}", file=sys.stderr)
        return 2
    tc = result.tc
    note = ""
    if tc is not None:
        where = tc.folder if tc.folder is not None else tc.lake
        how = "lake build" if tc.kind == "lake" and not args.module else "lean -o per module"
        src = f"; commit from {tc.commit_source}" if tc.commit_source else ""
        note = f" at {where} [{how}{src}]"
    print(format_result(result, note))
    return 0 if result.ok else 1
