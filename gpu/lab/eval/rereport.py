"""``python -m gpu.lab.eval.rereport DIR ...``: a frontier directory's report (and a RULER run's
ruler.md) written again from its
journal with the frontier's current pairs (gpu.lab.eval.frontier.Frontier.fill_pairs added to
those the run stored), with no maps and no run: the records of the units on which every arm of
the report was measured (a journal that several commands wrote holds other units too)."""
from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

from . import ruler
from .frontier import Frontier
from .report import write


def complete_records(records: list[dict], arms: set[str]) -> list[dict]:
    """The sessions, and the needle and document records of the units every arm measured:
    of an arm measured twice on a unit (a rerun after a fix), the later record alone."""
    have: dict[str, set] = defaultdict(set)
    last: dict[tuple, int] = {}
    for i, r in enumerate(records):
        if r["instrument"] != "session" and r["arm"] in arms:
            have[r["unit"]].add(r["arm"])
            last[(r["instrument"], r["unit"], r["arm"])] = i
    full = {u for u, a in have.items() if a >= arms}
    return [r for i, r in enumerate(records) if r["instrument"] == "session"
            or (r["arm"] in arms and r["unit"] in full
                and last[(r["instrument"], r["unit"], r["arm"])] == i)]


def rereport(root: Path) -> dict:
    """Rewrite ``root``'s report.json / report.md; returns the new report."""
    meta = json.loads((root / "report.json").read_text())["meta"]
    lines = (root / "records.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines if x.strip()]
    names = {a["name"] for a in meta["arms"]}
    fr = Frontier(meta["n_layers"])  # the fills are paired at the one-token tail
    pairs = [tuple(p) for p in meta.get("pairs", ())]
    pairs += [p for p in fr.fill_pairs([SimpleNamespace(name=n) for n in names])
              if p not in pairs]
    return write(root, complete_records(records, names), {**meta, "pairs": pairs})


def main(argv: list[str] | None = None) -> int:
    for d in argv if argv is not None else sys.argv[1:]:
        rep = rereport(Path(d))
        if (Path(d) / "ruler.md").is_file():  # a --suite ruler run: its table too
            ruler.write(Path(d), rep, Frontier(rep["meta"]["n_layers"]).pop_native,
                        rep["meta"]["command"])
        print(f"{d}: {rep['counts']['needle_samples']} needle samples, "
              f"{rep['counts']['documents']} documents, {len(rep['contrasts'])} contrasts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
