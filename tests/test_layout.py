"""The layout shows the architecture (docs/architecture.md): packages depend one way
(gpu -> rfmodel -> rfmath; nothing imports proofs_check), imports inside gpu/ point one way
(tools/eval -> maps/data -> core), no module imports itself back through others (no cycle,
function-level imports included), no package reaches into another's private names, and no
module of rfmath, rfmodel or gpu outgrows a screenful of concepts."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU = ROOT / "gpu"
MAX_LINES = 450  # "no module over ~400 lines"
# what each part of gpu/ may not import (prefixes of absolute module names)
FORBIDDEN = {
    "gpu.core": ("gpu.maps", "gpu.data", "gpu.lab", "gpu.api", "gpu.cli"),
    "gpu.maps": ("gpu.lab", "gpu.api", "gpu.cli"),
    "gpu.data": ("gpu.core", "gpu.maps", "gpu.lab", "gpu.api", "gpu.cli"),
    "gpu.lab.eval": ("gpu.lab.tools", "gpu.cli"),
    # the vLLM plugin is product: it reads the engine's configuration and maps, never the lab
    "gpu.serving": ("gpu.data", "gpu.lab", "gpu.api", "gpu.cli"),
}
# the product (what a user imports) never imports the lab (gpu.lab: the studies,
# benchmarks and advisor); only the CLI, which dispatches to both, may
PRODUCT = ("gpu", "gpu.core", "gpu.maps", "gpu.data", "gpu.serving", "gpu.api", "gpu.press",
           "gpu.kvpress_press", "gpu.conversation", "gpu.version")
LAB = ("gpu.lab",)
PACKAGES = ("rfmath", "rfmodel", "gpu", "proofs_check")


def _module(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _main_guard(node: ast.AST) -> bool:
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)


def imports(path: Path, run_time: bool = False):
    """(imported module, names, line) of every import outside ``if __name__ == ...`` blocks,
    as absolute module names (``from . import x`` gives module.x); ``run_time``: also without
    the ``if TYPE_CHECKING:`` blocks (annotations only)."""
    module = _module(path)
    tree = ast.parse(path.read_text())
    skip = {id(n) for top in ast.walk(tree)
            if _main_guard(top) or (run_time and _type_checking(top)) for n in ast.walk(top)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, [], node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, path.name == "__init__.py", node)
            names = [a.name for a in node.names]
            yield target, names, node.lineno
            for n in names:  # "from gpu import core" imports the module gpu.core
                yield f"{target}.{n}", [], node.lineno


def _owner(module: str) -> str:
    """The unit whose privates are its own: gpu's subpackages, or a top-level package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "gpu" and len(parts) > 2 else parts[0]


GPU_FILES = sorted(GPU.rglob("*.py"))
SIZED_FILES = [p for pkg in ("rfmath", "rfmodel", "gpu") for p in sorted((ROOT / pkg).rglob("*.py"))]
# what each package may not import
PACKAGE_FORBIDDEN = {"rfmath": ("rfmodel", "gpu", "proofs_check"),
                     "rfmodel": ("gpu", "proofs_check"), "gpu": ("proofs_check",)}
ALL_FILES = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]


@pytest.mark.parametrize("path", GPU_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_gpu_imports_point_one_way(path):
    module = _module(path)
    part = _part(path)
    for target, _, line in imports(path):
        for bad in FORBIDDEN.get(part, ()):
            assert not (target == bad or target.startswith(bad + ".")), (
                f"{module} imports {target} (line {line}): {part} may not import {bad}")


def _part(path: Path) -> str:
    """The part of gpu/ a file belongs to: gpu.core, gpu.api, ... (gpu itself for __init__)."""
    return ".".join(_module(path).split(".")[:2])


def test_every_gpu_module_is_product_lab_or_the_cli():
    parts = {_part(p) for p in GPU_FILES}
    assert parts <= set(PRODUCT) | set(LAB) | {"gpu.cli", "gpu.__main__"}, parts - set(PRODUCT)


@pytest.mark.parametrize("path", [p for p in GPU_FILES if _part(p) in PRODUCT],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_product_never_imports_the_lab(path):
    for target, _, line in imports(path):
        assert not any(target == lab or target.startswith(lab + ".") for lab in LAB), (
            f"{_module(path)} imports {target} (line {line}): the product never imports the lab")


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_names_across_packages(path):
    module = _module(path)
    mine = _owner(module)
    aliases: dict[str, str] = {}
    for target, names, line in imports(path):
        if target.split(".")[0] not in PACKAGES:
            continue
        for n in names:
            if n.startswith("_") and not n.startswith("__") and _owner(target) != mine:
                pytest.fail(f"{module} imports private {target}.{n} (line {line})")
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _absolute(module, path.name == "__init__.py", node)
            for a in node.names:
                aliases[a.asname or a.name] = f"{target}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            target = aliases.get(node.value.id)
            if target and target.split(".")[0] in PACKAGES and _owner(target) != mine:
                pytest.fail(f"{module} reads private {target}.{node.attr} (line {node.lineno})")


def test_core_does_not_import_the_harness_at_run_time():
    """The same rule, checked on what Python actually loads (gpu/__init__ itself loads the
    public face, gpu.maps.files among it, so only the harness side is checked here)."""
    import subprocess
    import sys

    code = ("import sys, gpu.core.engine, gpu.core.select, gpu.core.config, gpu.core.models;"
            "print(sorted(m for m in sys.modules if m.startswith(('gpu.maps.fit', 'gpu.data', "
            "'gpu.lab.eval', 'gpu.lab.tools'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_packages_depend_one_way(path):
    module = _module(path)
    for target, _, line in imports(path):
        for bad in PACKAGE_FORBIDDEN.get(module.split(".")[0], ()):
            assert not (target == bad or target.startswith(bad + ".")), (
                f"{module} imports {target} (line {line}): {module.split('.')[0]} may not "
                f"import {bad}")


def test_no_import_cycles():
    """No module reaches itself again through the modules it imports, counting imports inside
    functions (which hide a cycle from Python's import machinery, not from the design).
    Package __init__ modules are namespaces here (``from .. import __version__``), and
    annotations-only imports (``if TYPE_CHECKING:``) are no dependency."""
    files = {_module(p): p for p in ALL_FILES}
    modules = {m for m, p in files.items() if p.name != "__init__.py"}
    graph = {m: {t for t, _, _ in imports(files[m], run_time=True) if t in modules and t != m}
             for m in modules}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycle = path[path.index(t):] + [t] if t in path else [m, t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(modules):
        if m not in state:
            visit(m, [m])


@pytest.mark.parametrize("path", SIZED_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_modules_stay_small(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines; split it by concept"
