"""Sharding an evaluation across processes and machines under torchrun.

Each rank measures a disjoint, seed-determined share of the units (a unit belongs to rank
``hash(seed, unit) mod world``) and appends to its own journal,
``records.rank<r>-of-<w>.jsonl``, whose first record names the share. The report merges the
journals (journals copied from other machines into one folder too: a rerun with one
process measures nothing they hold and reports) and refuses a merge whose shares overlap (a unit, or a record, in two journals),
whose sharding differs between journals, or that misses a rank's journal: every number of a
report then comes from exactly one measurement of each (unit, arm).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from .journal import Journal
from .units import Unit, sig

SHARDED = re.compile(r"records\.rank(\d+)-of-(\d+)\.jsonl$")
BARRIER_TIMEOUT = timedelta(hours=48)  # ranks finish their shares hours apart


@dataclass(frozen=True)
class Shard:
    """This process's share: ``rank`` of ``world`` (world 1: every unit, ``records.jsonl``)."""

    rank: int = 0
    world: int = 1

    def __post_init__(self):
        if not 0 <= self.rank < self.world:
            raise ValueError(f"rank {self.rank} of world {self.world}: the rank must lie in "
                             f"0..{self.world - 1} (torchrun sets RANK and WORLD_SIZE)")

    @classmethod
    def from_env(cls) -> "Shard":
        """The share torchrun assigns (RANK, WORLD_SIZE), else the whole grid."""
        return cls(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")))

    @property
    def journal_name(self) -> str:
        return "records.jsonl" if self.world == 1 else f"records.rank{self.rank}-of-{self.world}.jsonl"

    def owner(self, unit: Unit, seed: int) -> int:
        """The rank that measures ``unit``: fixed by the seed and the unit alone."""
        return int(sig(seed, unit.kind, unit.id), 16) % self.world

    def take(self, units: list[Unit], seed: int) -> list[Unit]:
        return [u for u in units if self.owner(u, seed) == self.rank]

    def claim(self, journal: Journal, units: list[Unit], seed: int) -> None:
        """Write the share's header (the units this rank owns) once."""
        if self.world == 1:
            return
        head = {"key": "shard", "instrument": "shard", "rank": self.rank, "world": self.world,
                "seed": seed, "units": sorted(_uid(u) for u in units)}
        if journal.get("shard") != head:
            journal.add(head)

    def barrier(self) -> None:
        """Wait for every rank (gloo: CPU tensors on any machine); a no-op for one process."""
        if self.world == 1:
            return
        import torch.distributed as dist
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=BARRIER_TIMEOUT)
        dist.barrier()


class SharedJournal(Journal):
    """This process's journal, which also finds the records of every other journal in its
    folder (read-only: other ranks' shares, or journals copied from other machines), so a
    rerun measures nothing twice and a single process can report on copied shares."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.others: dict[str, dict] = {}
        for p in sorted(self.path.parent.glob("records*.jsonl")):
            if p != self.path:
                self.others.update((r["key"], r) for r in Journal(p, readonly=True).records())

    def __contains__(self, key: str) -> bool:
        return super().__contains__(key) or key in self.others

    def get(self, key: str) -> dict | None:
        return super().get(key) or self.others.get(key)


def _uid(u: Unit) -> str:
    return f"{u.kind}|{u.id}"


def merged_records(root: Path, units: list[Unit], seed: int) -> list[dict]:
    """Every record of ``root``'s journals, after checking that the shards are disjoint and
    complete for ``units`` under ``seed``; raises ValueError naming what is wrong and the fix."""
    plain = root / "records.jsonl"
    paths = sorted(p for p in root.glob("records.rank*-of-*.jsonl") if SHARDED.search(p.name))
    worlds = {int(SHARDED.search(p.name).group(2)) for p in paths}
    if len(worlds) > 1:
        raise ValueError(f"{root} holds journals of {sorted(worlds)} ranks: a report merges one "
                         "sharding; move the other journals away or rerun with the same "
                         "--nproc-per-node")
    journals = [Journal(plain, readonly=True)] if plain.is_file() else []
    if worlds:
        world = worlds.pop()
        ranks = {int(SHARDED.search(p.name).group(1)): p for p in paths}
        missing = sorted(set(range(world)) - set(ranks))
        if missing:
            raise ValueError(f"missing shares: no journal of rank(s) {missing} of {world} in "
                             f"{root}; run those ranks (torchrun --nproc-per-node {world}) "
                             "before the report")
        expected = {_uid(u): Shard(0, world).owner(u, seed) for u in units}
        claimed: dict[str, int] = {}
        for r, p in sorted(ranks.items()):
            j = Journal(p, readonly=True)
            head = j.get("shard")
            if head is None or head["world"] != world or head["rank"] != r or head["seed"] != seed:
                raise ValueError(f"{p} does not hold rank {r} of {world} at seed {seed}: delete "
                                 "it and rerun that rank")
            for u in head["units"]:
                if u in claimed:
                    raise ValueError(f"overlapping shares: {u} is in the journals of ranks "
                                     f"{claimed[u]} and {r}; delete one of them and rerun it")
                if expected.get(u, r) != r:
                    raise ValueError(f"{p} claims {u}, which rank {expected[u]} owns at seed "
                                     f"{seed}: the journal is from another grid; delete it")
                claimed[u] = r
            journals.append(j)
        lost = sorted(set(expected) - set(claimed))
        if lost:
            raise ValueError(f"missing shares: {len(lost)} units (e.g. {lost[0]}) are in no "
                             "rank's journal; rerun the ranks that own them")
    out: dict[str, dict] = {}
    for j in journals:
        for rec in j.records():
            if rec["instrument"] == "shard":
                continue
            if rec["key"] in out:
                raise ValueError(f"overlapping shares: record {rec['key']!r} is in two journals "
                                 f"of {root}; keep one sharding (delete records.jsonl or the "
                                 "rank journals) and rerun")
            out[rec["key"]] = rec
    return list(out.values())
