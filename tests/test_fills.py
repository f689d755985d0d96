"""The fill kinds are listed once (gpu.core.fills): every consumer reads that table, and no other
module spells a list of them."""
import ast
from dataclasses import fields
from pathlib import Path

import pytest

from gpu.core import fills
from gpu.core.config import PrefillConfig
from gpu.maps.fit_options import FitOptions
from rfmath import cost

ROOT = Path(__file__).resolve().parents[1]


def test_consumers_read_the_registry():
    meta = {f.name: f.metadata for f in fields(PrefillConfig)}
    assert meta["fill"]["choices"] == fills.FILLS
    assert meta["values_fill"]["choices"] == fills.SOURCES
    kinds = {f.name: f.metadata for f in fields(FitOptions)}["kinds"]["choices"]
    assert kinds == fills.MAP_KINDS
    for name, f in fills.REGISTRY.items():
        assert PrefillConfig(fill=name).map_kinds == ((name,) if f.maps else ())
        assert f.cost in cost.ARMS, f  # rfmath.cost prices every kind


@pytest.mark.parametrize("keys", fills.SOURCES)
@pytest.mark.parametrize("values", fills.SOURCES)
def test_two_source_cost(keys, values):
    """Two sources cost an input map's price when either reads one (the ridge-style fills run
    a full d x d map), else the projections' price."""
    arm = fills.cost_arm(keys, values)
    if keys == values:
        assert arm == fills.REGISTRY[keys].cost
    elif {fills.writes(keys), fills.writes(values)} & {"input"} and (
            fills.REGISTRY[keys].maps or fills.REGISTRY[values].maps):
        assert arm == "ridgefill"
    else:
        assert arm == "identity"


def test_pair_spelling():
    assert fills.pair("kv") == ("kv", None)
    assert fills.pair("kv.identity") == ("kv", "identity")
    for bad in ("exact", "kv.kv", "kv.none", "bogus", "none.kv"):
        with pytest.raises(ValueError, match="keys.values"):
            fills.pair(bad)


def _kind_lists(tree: ast.AST):
    """Tuple/list/set literals that restate one of the registry's lists (every kind, the map
    kinds, the sources); a grid's choice of a few fills is not a list of the kinds."""
    lists = [set(fills.FILLS), set(fills.MAP_KINDS), set(fills.SOURCES)]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            found = {e.value for e in node.elts if isinstance(e, ast.Constant)
                     and isinstance(e.value, str)}
            if any(found >= kinds for kinds in lists):
                yield node.lineno, sorted(found)


def test_one_definition():
    """grep-able promise of the issue: the kinds are listed in gpu/core/fills.py only."""
    hits = [(str(p.relative_to(ROOT)), line, found)
            for p in sorted((ROOT / "gpu").rglob("*.py")) if p.name != "fills.py"
            for line, found in _kind_lists(ast.parse(p.read_text()))]
    assert not hits, hits
