"""What makes two bench records the same measurement, and how a resumed bench.json keeps the
records of other runs (``ridgefill bench --resume``)."""
from __future__ import annotations

import json
from pathlib import Path


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


def merged(prior: list[dict], records: list[dict]) -> list[dict]:
    """This run's records after the prior file's others (other models, lengths or settings):
    a narrower rerun never drops a record."""
    mine = {record_key(r) for r in records}
    return [r for r in prior if record_key(r) not in mine] + records
