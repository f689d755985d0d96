"""What makes two bench records the same measurement, how a resumed bench.json keeps the
records of other runs (``ridgefill bench --resume``), and which processor a record ran on."""
from __future__ import annotations

import json
import platform
from pathlib import Path

from ...core.models import cpu_info
from ...serving.settings import BF16_FLAGS

# the vector extensions that decide bf16 against fp32 speed on a CPU
SIMD = ("avx2", "avx512f", *BF16_FLAGS)


def cpu(cpuinfo: str | None = None) -> str:
    """The processor's name and which of :data:`SIMD` it has, from ``cpuinfo`` (default:
    /proc/cpuinfo); records from processors that differ here are not comparable in bf16."""
    name, flags = cpu_info(cpuinfo)
    name = name or platform.processor() or platform.machine()
    return f"{name} ({', '.join(f for f in SIMD if f in flags) or 'none of ' + '/'.join(SIMD)})"


def measurement_key(model: str, n: int, weights: str | None, split: int, tail: int,
                    repeats: int | None, chunk: int | None, arms) -> tuple:
    """What makes two records of the benchmark the same measurement (``--resume``)."""
    return (model, n, weights, split, tail, repeats, chunk, tuple(sorted(arms)))


def record_key(r: dict) -> tuple:
    return measurement_key(r["model"], r["n"], r.get("weights"), r["split"], r["tail"],
                           r.get("repeats"), r.get("chunk"), r["median_seconds"])


def prior_records(path: Path, resume: bool) -> list[dict]:
    """The records of the bench.json a resumed run starts from (none without ``resume``)."""
    return json.loads(path.read_text())["records"] if resume and path.exists() else []


def merged(prior: list[dict], records: list[dict], key=record_key) -> list[dict]:
    """This run's records after the prior file's others (other models, lengths or settings,
    by ``key``): a narrower rerun never drops a record."""
    mine = {key(r) for r in records}
    return [r for r in prior if key(r) not in mine] + records
