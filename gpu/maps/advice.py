"""Advice that travels with the maps (paper section 9, step 5): ``ridgefill advise --maps
FILE`` writes the recommended configuration's maps to FILE and the recommendation beside it
(``FILE`` with ``.advice.json`` for ``.safetensors``); every entry point that is given FILE
and no setting (``ridgefill generate`` / ``serve``, ``RidgeFill.load``, ``prefill``, the
presses) starts from that configuration and says so in one line (logged: the ``ridgefill``
logger at info level, which ``ridgefill`` prints to stderr)."""
from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from rfmodel.atomic import atomic_path, write_json

from ..core.advised import ADVISED, advice_source, default_config
from ..core.config import PrefillConfig

SUFFIX = ".advice.json"
log = logging.getLogger("ridgefill")


def advice_path(maps: str | Path) -> Path:
    """The advice file beside the map file ``maps``."""
    return Path(maps).with_suffix(SUFFIX)


def read_advice(maps: str | Path | None) -> dict | None:
    """The advice written beside ``maps``, or None when there is none (or no maps)."""
    if maps is None or not advice_path(maps).is_file():
        return None
    advice = json.loads(advice_path(maps).read_text())
    PrefillConfig(**advice["config"])  # a file that does not describe a configuration fails here
    return {**advice, "source": str(advice_path(maps))}


def advice_of(maps) -> dict | None:
    """The advice loaded map sets carry (a map set, or {kind: map set}; gpu.maps.files), if
    any."""
    sets = maps.values() if isinstance(maps, dict) else [maps]
    return next((m.advice for m in sets if getattr(m, "advice", None)), None)


def advice_for(maps) -> dict | None:
    """The advice to run ``maps`` with (a map set, or {kind: map set}): the advice they carry,
    else their built-in model's committed advice (gpu.core.advised) when they are maps of its
    advised split and kinds, else None."""
    advice = advice_of(maps)
    if advice is not None or maps is None:
        return advice
    sets = list(maps.values()) if isinstance(maps, dict) else [maps]
    model = getattr(sets[0], "meta", {}).get("model")
    settings = ADVISED.get(model)
    if not settings or settings.get("fill") == "exact":
        return None
    config = PrefillConfig(**settings)
    if config.split != sets[0].split or not set(config.map_kinds) <= {m.kind for m in sets}:
        return None
    return {"config": settings, "source": advice_source(model)}


def announce(advice: dict) -> None:
    """The one line an entry point logs (info) when it runs a map file's advice."""
    flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in advice["config"].items())
    log.info("config: %s (advised for these maps: %s)", flags, advice["source"])


def choose_config(model: str = "", maps=None, config: PrefillConfig | None = None,
                  **settings) -> PrefillConfig:
    """The configuration a prefill runs, for every entry point (``RidgeFill``, ``ridgefill
    generate`` / ``serve``, ``prefill``, both presses): ``config`` as given; else the advice
    ``maps`` carry (a path: the advice file beside it; loaded map sets: theirs, or their
    built-in model's when they are maps of its advised split and kinds), else built-in
    ``model``'s advice (gpu.core.advised), else the library's defaults, with ``settings`` on
    top. Advice that applies is said in one line (logged). Maps given to a configuration of
    exact prefill would be silently unused: that is one error saying what to pass instead."""
    if config is not None and settings:
        raise ValueError(f"pass either config=PrefillConfig(...) or its fields as keywords, not "
                         f"both (got config and {sorted(settings)})")
    chosen = config is not None or settings.get("fill") == "exact"
    if config is None:
        advice = read_advice(maps) if isinstance(maps, (str, Path)) else advice_for(maps)
        if advice is not None:
            announce(advice)
        config = default_config(model, advice, **settings)
    if maps is not None and config.fill == "exact":
        if chosen:
            raise ValueError("fill='exact' reads no maps: leave them out (CLI: drop --maps), or "
                             "choose a fill that reads them (e.g. fill='ridge')")
        raise ValueError(
            f"maps were given, but the configuration{f' of {model}' if model else ''} is exact "
            "prefill (fill='exact'; for a built-in model, its advice when no fill kept the "
            "advisor's budget: gpu/core/advised.py), which reads no maps: pass fill='ridge' to "
            "fill from them (at their split, or give split=S), or leave them out for exact "
            "prefill (CLI: drop --maps)")
    return config


def write_advice(maps: Path, source: Path, recommendation: dict, evidence: dict) -> Path:
    """Copy the advisor's map file ``source`` (the recommended split and kind) to ``maps``
    atomically, and write the recommendation and its ``evidence`` beside it. A different
    map file already at ``maps`` is refused, never overwritten."""
    maps = Path(maps)
    if maps.exists() and maps.read_bytes() != Path(source).read_bytes():
        raise ValueError(f"{maps} already holds other maps; give --maps a new path (the "
                         "advisor's own copy stays in its out dir)")
    if not maps.exists():
        with atomic_path(maps) as tmp:
            shutil.copyfile(source, tmp)
    where = advice_path(maps)
    write_json(where, {"config": recommendation["config"], "arm": recommendation["arm"],
                       **evidence})
    return where
