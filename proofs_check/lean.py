"""Lean sources, toolchains and builds: everything ``proofs_check`` needs to know about Lean.

* Sources: strip comments and strings, find ``sorry``/``admit``/``axiom`` tokens, imports,
  theorem declarations (with their namespace) and the ``Python:``/``Test:`` lines of their
  docstrings.
* Toolchains: ``lake`` on PATH, else ``RIDGEFILL_LEAN`` (a folder with ``bin/lean`` and
  ``lib/lean``), else ``shared/toolchains/lean4-*`` in the repository root or any folder above it.
* Builds: ``lake build`` where Lake exists; otherwise ``lean -o`` per module, in import order
  (independent modules in parallel), into a temporary folder of ``.olean`` files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

SHARED_TOOLCHAIN = "lean4-2021-06-26c7798"  # the one Lean 4 that builds on these machines
MODULE_TIMEOUT_S = 600

# ----------------------------------------------------------------------------------- sources

_FORBIDDEN = re.compile(r"(?<![\w.'])(sorry|admit|axiom|sorryAx)(?![\w'])")
_IMPORT = re.compile(r"^[ \t]*(?:public[ \t]+)?import[ \t]+([^\s]+)", re.M)
_SCOPE = re.compile(r"^[ \t]*(namespace|section|end)\b[ \t]*([^\s]*)", re.M)
_AXIOMS = re.compile(r"'([^']+)' depends on axioms: \[([^\]]*)\]", re.S)
_NO_AXIOMS = re.compile(r"'([^']+)' does not depend on any axioms")


def strip_comments(text: str) -> str:
    """``text`` with comments (``--``, nested ``/- -/``, docstrings) and string literals blanked.

    Newlines are kept, so line numbers still match the source.
    """
    out: list[str] = []
    i, n, depth = 0, len(text), 0
    in_string = False
    while i < n:
        c, two = text[i], text[i : i + 2]
        if depth:
            if two == "/-":
                depth, i = depth + 1, i + 2
                out.append("  ")
            elif two == "-/":
                depth, i = depth - 1, i + 2
                out.append("  ")
            else:
                out.append("\n" if c == "\n" else " ")
                i += 1
        elif in_string:
            if c == "\\" and i + 1 < n:
                out.append("  " if text[i + 1] != "\n" else " \n")
                i += 2
                continue
            in_string = c != '"'
            out.append("\n" if c == "\n" else " ")
            i += 1
        elif two == "/-":
            depth, i = 1, i + 2
            out.append("  ")
        elif two == "--":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == '"' and not (i and text[i - 1] == "'" and text[i + 1 : i + 2] == "'"):
            in_string = True
            out.append(" ")
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


@dataclass(frozen=True)
class Forbidden:
    """A ``sorry``, ``admit`` or ``axiom`` token in a Lean source."""

    path: Path
    line: int
    token: str


def forbidden_tokens(path: Path) -> list[Forbidden]:
    """Every ``sorry``/``admit``/``axiom``/``sorryAx`` token outside comments and strings."""
    code = strip_comments(path.read_text(encoding="utf-8"))
    return [
        Forbidden(path, code.count("\n", 0, m.start()) + 1, m.group(1))
        for m in _FORBIDDEN.finditer(code)
    ]


def imports(path: Path) -> list[str]:
    """The modules ``path`` imports, in order."""
    return _IMPORT.findall(strip_comments(path.read_text(encoding="utf-8")))


def module_sources(lean_dir: Path) -> dict[str, Path]:
    """Module name -> source file, for every ``.lean`` file under ``lean_dir`` but the lakefile."""
    mods: dict[str, Path] = {}
    for path in sorted(lean_dir.rglob("*.lean")):
        rel = path.relative_to(lean_dir)
        if rel.parts[0].startswith(".") or rel.name == "lakefile.lean":
            continue  # .lake/ build outputs, the Lake configuration
        mods[".".join(rel.with_suffix("").parts)] = path
    return mods


def import_order(mods: dict[str, Path]) -> tuple[list[str], dict[str, list[str]]]:
    """Modules in import order (dependencies first) and each module's local imports.

    Raises ``ValueError`` on an import cycle.
    """
    deps = {m: [i for i in imports(p) if i in mods] for m, p in mods.items()}
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(m: str, stack: tuple[str, ...]) -> None:
        if state.get(m) == 2:
            return
        if state.get(m) == 1:
            raise ValueError(f"import cycle in lean/: {' -> '.join(stack + (m,))}")
        state[m] = 1
        for d in deps[m]:
            visit(d, stack + (m,))
        state[m] = 2
        order.append(m)

    for m in sorted(mods):
        visit(m, ())
    return order, deps


@dataclass(frozen=True)
class Declaration:
    """A theorem found in a source: full name, file, line and docstring tags."""

    name: str
    path: Path
    line: int
    python: tuple[str, ...]  # the docstring's ``Python:`` names
    test: str | None  # the docstring's ``Test:`` entry


def _namespace_at(code: str, pos: int) -> str:
    stack: list[tuple[str, str]] = []
    for m in _SCOPE.finditer(code, 0, pos):
        kind, name = m.group(1), m.group(2)
        if kind in ("namespace", "section"):
            stack.append((kind, name))
        elif stack:
            stack.pop()
    return ".".join(n for k, n in stack if k == "namespace" and n)


def _docstring_before(text: str, pos: int) -> str:
    head = text[:pos].rstrip()
    while head.endswith("]") and "@[" in head:  # attributes between docstring and keyword
        head = head[: head.rfind("@[")].rstrip()
    if not head.endswith("-/"):
        return ""
    start = head.rfind("/--")
    return head[start:] if start >= 0 else ""


def theorems(path: Path) -> list[Declaration]:
    """Every ``theorem`` declared in ``path``, with its namespace-qualified name."""
    text = path.read_text(encoding="utf-8")
    code = strip_comments(text)
    found = []
    pattern = re.compile(r"^[ \t]*(?:@\[[^\]]*\][ \t]*)?(?:(?:private|protected)[ \t]+)?"
                         r"theorem[ \t]+([^\s(:{\[]+)", re.M)
    for m in pattern.finditer(code):
        ns = _namespace_at(code, m.start())
        name = f"{ns}.{m.group(1)}" if ns else m.group(1)
        doc = _docstring_before(text, m.start() + len(m.group(0)) - len(m.group(0).lstrip()))
        py = re.search(r"^\s*Python:\s*(.+?)\s*$", doc, re.M)
        test = re.search(r"^\s*Test:\s*(\S+?)\s*(?:-/)?\s*$", doc, re.M)
        found.append(Declaration(
            name, path, code.count("\n", 0, m.start()) + 1,
            tuple(t.strip() for t in py.group(1).removesuffix("-/").split(",")) if py else (),
            test.group(1).removesuffix("-/") if test else None,
        ))
    return found


def printed_axioms(output: str) -> dict[str, tuple[str, ...]]:
    """Theorem -> axioms, read from ``#print axioms`` output."""
    found = {name: () for name in _NO_AXIOMS.findall(output)}
    for name, axioms in _AXIOMS.findall(output):
        found[name] = tuple(a.strip() for a in axioms.replace("\n", " ").split(",") if a.strip())
    return found


# ---------------------------------------------------------------------------------- toolchains


@dataclass(frozen=True)
class Toolchain:
    """A Lean toolchain: ``kind`` is ``"lake"`` (``lake build``) or ``"lean"`` (``lean -o``)."""

    kind: str
    lean: Path
    folder: Path | None  # holds bin/lean and lib/lean (kind "lean")
    lake: Path | None = None
    version: str = "unknown"
    commit: str | None = None
    commit_source: str = ""

    def describe(self) -> str:
        commit = f", commit {self.commit}" if self.commit else ", commit unknown"
        return f"Lean {self.version}{commit}"

    def env(self, out_dir: Path | None = None) -> dict[str, str]:
        """The environment for ``lean``: ``LEAN_PATH`` = core library, then ``out_dir``.

        (A toolchain installed by elan finds its own core library; the 2021 one only through
        ``LEAN_PATH``.)"""
        env = dict(os.environ)
        paths = [str(self.folder / "lib" / "lean")] if self.folder is not None else []
        paths += [str(out_dir)] if out_dir is not None else []
        if paths:
            env["LEAN_PATH"] = os.pathsep.join(paths)
        return env


def _is_toolchain(folder: Path) -> bool:
    return (folder / "bin" / "lean").is_file() and (folder / "lib" / "lean").is_dir()


def shared_toolchain(root: Path) -> Path | None:
    """``shared/toolchains/lean4-*`` in ``root`` or the nearest folder above it holding one."""
    for d in (root, *root.parents):
        tc = d / "shared" / "toolchains"
        if not tc.is_dir():
            continue
        preferred = tc / SHARED_TOOLCHAIN
        if _is_toolchain(preferred):
            return preferred
        for cand in sorted(tc.glob("lean4-*")):
            if _is_toolchain(cand):
                return cand
    return None


def _run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _identify(tc: Toolchain, cwd: Path | None) -> Toolchain:
    """Fill in version and commit from ``lean --version`` (and ``--githash``, the folder name).

    ``cwd`` is the Lake package, so that elan picks the toolchain its ``lean-toolchain`` pins.
    """
    cmd = [str(tc.lake), "env", "lean"] if tc.kind == "lake" else [str(tc.lean)]
    try:
        out = _run(cmd + ["--version"], cwd=cwd, env=tc.env()).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    version = re.search(r"version ([^,)\s]+)", out)
    commit = re.search(r"commit ([0-9a-f]{7,40})", out)
    source = "lean --version"
    if not commit:
        try:
            githash = _run(cmd + ["--githash"], cwd=cwd, env=tc.env()).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            githash = ""
        commit = re.fullmatch(r"([0-9a-f]{7,40})", githash)
        source = "lean --githash"
    if not commit and tc.folder is not None:
        commit = re.search(r"([0-9a-f]{7,40})$", tc.folder.name)
        source = "toolchain folder name (the binary reports no commit)"
    return Toolchain(tc.kind, tc.lean, tc.folder, tc.lake,
                     version.group(1) if version else "unknown",
                     commit.group(1) if commit else None, source if commit else "")


def find_toolchain(root: Path, folder: Path | None = None,
                   lean_dir: Path | None = None) -> Toolchain | None:
    """The toolchain to check with: ``folder`` if given, else ``lake`` on PATH, else
    ``RIDGEFILL_LEAN``, else the shared 2021 toolchain beside the checkout (``root`` or any
    folder above it holding ``shared/toolchains``)."""
    lean_dir = lean_dir if lean_dir is not None else root / "lean"
    if folder is None:
        lake = shutil.which("lake")
        if lake:
            lean = shutil.which("lean")
            return _identify(Toolchain("lake", Path(lean or "lean"), None, Path(lake)),
                             lean_dir if lean_dir.is_dir() else None)
        env = os.environ.get("RIDGEFILL_LEAN")
        folder = Path(env) if env else shared_toolchain(root)
    if folder is None:
        return None
    if not _is_toolchain(folder):
        raise ValueError(
            f"{folder} is not a Lean toolchain folder: it needs bin/lean and lib/lean. Point "
            "RIDGEFILL_LEAN (or --toolchain) at a folder laid out like "
            f"shared/toolchains/{SHARED_TOOLCHAIN}."
        )
    return _identify(Toolchain("lean", folder / "bin" / "lean", folder), None)


# -------------------------------------------------------------------------------------- builds


@dataclass
class ModuleResult:
    """How one module fared: ``checked``, ``failed``, ``not built here`` or ``not selected``."""

    name: str
    status: str
    detail: str = ""
    output: str = ""
    seconds: float = 0.0
    axioms: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if ": error" in line or "declaration uses 'sorry'" in line:
            return line.strip()
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    return lines[0] if lines else "no output"


def _missing_core(tc: Toolchain, path: Path, mods: dict[str, Path]) -> list[str]:
    """Imports of ``path`` that are neither local nor in the toolchain's core library."""
    if tc.folder is None:
        return []
    lib = tc.folder / "lib" / "lean"
    return [i for i in imports(path) if i not in mods
            and not (lib / Path(*i.split("."))).with_suffix(".olean").is_file()]


def build_with_lean(tc: Toolchain, lean_dir: Path, out_dir: Path,
                    selected: set[str] | None = None, jobs: int | None = None,
                    ) -> tuple[list[str], dict[str, ModuleResult]]:
    """Check every module with ``lean -o`` in import order, independent modules in parallel."""
    mods = module_sources(lean_dir)
    order, deps = import_order(mods)
    if selected is not None:
        need: set[str] = set()
        todo = [m for m in selected if m in mods]
        while todo:
            m = todo.pop()
            if m not in need:
                need.add(m)
                todo.extend(deps[m])
    else:
        need = set(mods)
    results: dict[str, ModuleResult] = {}
    for m in order:
        if m not in need:
            results[m] = ModuleResult(m, "not selected", "outside --module")
        elif missing := _missing_core(tc, mods[m], mods):
            results[m] = ModuleResult(m, "not built here", f"imports {', '.join(missing)}, which "
                                      f"this toolchain's core library (Lean {tc.version}) lacks")

    def compile_one(m: str) -> ModuleResult:
        rel = mods[m].relative_to(lean_dir)
        olean = out_dir.joinpath(*m.split(".")).with_suffix(".olean")
        olean.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        try:
            proc = _run([str(tc.lean), "-o", str(olean), str(rel)], cwd=lean_dir,
                        env=tc.env(out_dir), timeout=MODULE_TIMEOUT_S)
            output, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            output, rc = f"timed out after {MODULE_TIMEOUT_S} s", -1
        seconds = time.perf_counter() - start
        bad = rc != 0 or "declaration uses 'sorry'" in output
        return ModuleResult(m, "failed" if bad else "checked",
                            _first_error(output) if bad else "", output, seconds,
                            printed_axioms(output))

    running: dict[Future[ModuleResult], str] = {}
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        while len(results) < len(order):
            for m in order:
                if m in results or m in running.values():
                    continue
                blocked = [d for d in deps[m] if d in results and results[d].status != "checked"]
                if blocked:
                    d = results[blocked[0]]
                    status = "not built here" if d.status == "not built here" else "failed"
                    results[m] = ModuleResult(m, status, f"imports {d.name}, which is {d.status}")
                elif all(d in results for d in deps[m]):
                    running[pool.submit(compile_one, m)] = m
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    results[running.pop(fut)] = fut.result()
    return order, results


def build_with_lake(tc: Toolchain, lean_dir: Path) -> tuple[list[str], dict[str, ModuleResult]]:
    """``lake build <lib>`` for each library (``RidgeFill``, ``RatCheck``: the top-level modules),
    so that one library's failure does not hide the other's result; then ``lake env lean`` on
    each module that prints axioms, to read its ``#print axioms`` output."""
    mods = module_sources(lean_dir)
    order, _ = import_order(mods)
    libs = [m for m in order if "." not in m]
    lib_of = {m: next((lib for lib in libs if m == lib or m.startswith(lib + ".")), m)
              for m in order}
    lib_result: dict[str, tuple[str, str, str, float]] = {}
    for lib in libs:
        start = time.perf_counter()
        try:
            proc = _run([str(tc.lake), "build", lib], cwd=lean_dir, env=tc.env(), timeout=3600)
            output, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired:
            output, rc = "lake build timed out after 3600 s", -1
        seconds = time.perf_counter() - start
        if rc == 0:
            lib_result[lib] = ("checked", f"by lake build {lib}", output, seconds)
        else:
            lib_result[lib] = ("failed", f"lake build {lib}: {_first_error(output)}", output,
                               seconds)
    results: dict[str, ModuleResult] = {}
    for m in order:
        status, detail, output, seconds = lib_result.get(lib_of[m], ("failed", "no library",
                                                                     "", 0.0))
        results[m] = ModuleResult(m, status, detail, output, seconds if m == lib_of[m] else 0.0)
        if status == "checked" and "#print axioms" in mods[m].read_text(encoding="utf-8"):
            rel = mods[m].relative_to(lean_dir)
            proc = _run([str(tc.lake), "env", "lean", str(rel)], cwd=lean_dir, env=tc.env(),
                        timeout=MODULE_TIMEOUT_S)
            out = proc.stdout + proc.stderr
            results[m].output, results[m].axioms = out, printed_axioms(out)
            if proc.returncode != 0:
                results[m].status, results[m].detail = "failed", _first_error(out)
    return order, results
