"""The fill kinds: what a filled prompt row writes into each late layer (paper sections 2.1-2.2,
6.4), listed once. The configuration's choices, the late-layer walk, the map files, the lab's
grids and the vLLM model all read this table, so a new kind is one row here.

``writes`` says where a filled row's key and value come from:

- ``input``: the layer's own norm and key/value projections of a predicted layer input,
  A_l x_S + b_l (``ridge``; ``anchored``, the same map shrunk toward the identity);
- ``entries``: a direct map to the key and value projections, with only the key norm and RoPE
  left to apply (``kv``);
- ``x_split``: the layer's norm and projections of x_S itself (``identity``, POP's fill);
- ``nothing``: no late-layer entry, the row hidden from later queries (``none``, the drop arm);
- ``exact``: no row is filled, the stock forward.

At the split layer itself every writing fill takes x_S (its true input). ``cost`` is the arm of
rfmath.cost that prices the fill.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Fill:
    name: str
    writes: str      # input | entries | x_split | nothing | exact
    maps: bool       # reads a map file of its own kind (gpu.maps.files)
    cost: str        # rfmath.cost's arm
    help: str


REGISTRY: dict[str, Fill] = {f.name: f for f in (
    Fill("ridge", "input", True, "ridgefill", "A_l x_S + b_l"),
    Fill("anchored", "input", True, "ridgefill", "the ridge map shrunk toward the identity"),
    Fill("kv", "entries", True, "kv", "direct key/value maps"),
    Fill("identity", "x_split", False, "identity", "POP's x_S"),
    Fill("none", "nothing", False, "nofill", "no late entry"),
    Fill("exact", "exact", False, "exact", "the stock forward"),
)}

FILLS = tuple(REGISTRY)  # every kind a configuration may name
MAP_KINDS = tuple(n for n, f in REGISTRY.items() if f.maps)  # kinds a map file holds
# kinds a filled row's keys or values may come from (keys and values from two of them)
SOURCES = tuple(n for n, f in REGISTRY.items() if f.writes in ("input", "entries", "x_split"))
# kinds whose filled rows feed a layer input to the layer (the batched fill, GDN layers)
INPUT_FILLS = tuple(n for n, f in REGISTRY.items() if f.writes in ("input", "x_split"))


def writes(name: str) -> str:
    """Where fill ``name``'s filled entries come from (see the module docstring)."""
    return REGISTRY[name].writes


def describe() -> str:
    """One help line naming every kind and what it writes."""
    return "; ".join(f"{f.name}: {f.help}" for f in REGISTRY.values())


def cost_arm(fill: str, values_fill: str | None = None) -> str:
    """rfmath.cost's arm of a fill (keys and values from two fills: an input map's price when
    either reads one, else the projections' price, which kv and identity share)."""
    if values_fill is None or values_fill == fill:
        return REGISTRY[fill].cost
    return ("ridgefill" if "ridgefill" in (REGISTRY[fill].cost, REGISTRY[values_fill].cost)
            else "identity")


def pair(text: str) -> tuple[str, str | None]:
    """(keys' fill, values' fill or None) of a fill written ``kind`` or ``keys.values`` (two
    different sources, e.g. ``kv.identity``: the lab's spelling of ``values_fill``)."""
    keys, _, values = text.partition(".")
    if values:
        if keys not in SOURCES or values not in SOURCES or keys == values:
            raise ValueError(f"fill {text!r}: keys.values from two of {', '.join(SOURCES)} "
                             "(e.g. kv.identity)")
        return keys, values
    if keys not in FILLS or keys == "exact":
        raise ValueError(f"fill {text!r}: choose from "
                         f"{', '.join(f for f in FILLS if f != 'exact')}, or keys.values from "
                         f"two of {', '.join(SOURCES)} (e.g. kv.identity)")
    return keys, None
