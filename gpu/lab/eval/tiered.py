"""The tiered prefill study (issue 57, ``ridgefill eval frontier --tiered``): the rows an
attention selector picks run exact to the top, every other prefix row is filled or dropped.

At 1/3, 1/2 and 7/12 depth and POP's split, the shortest tail (one token): an exact share k of
10/20/30% of the prefix chosen by the ``attention`` selector (lower-layer attention from the
last 64 rows, gpu.core.select.AttentionRows), with and without span completion, every other
prefix row filled (``kv``, ``ridge``, or keys and values from two fills, ``kv.identity``) or
dropped (``none``: FastKV's / GemFilter's analogue with the same selection). Named
``<fill>+attn<k%>[c]@<split>/t<tail>`` (gpu.lab.eval.grid.arm_name; ``c``: whole spans), e.g.
``kv+attn20c@12/t1``, ``none+attn10@16/t1``, ``kv.identity-values+attn20c@16/t1``.

Each filled arm is paired with its dropped twin (prediction 1); each arm is tested against the
run's other arms at POP's split (the advised fill) at the 3-point margin (prediction 2) and
against exact at :data:`MARGIN_TIERED_EXACT` (prediction 3). :class:`TieredArms` is
gpu.lab.eval.frontier.Frontier's part that makes these arms and pairs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ...core.config import PrefillConfig
from ...core.fills import pair
from .grid import SHARE_ROWS, arm_name, depth, parse_arm
from .instruments import Arm
from .report import MARGIN_POP

TIERED_FRACTIONS = (1 / 3, 1 / 2, 7 / 12)  # of depth; POP's split joins them
TIERED_SHARES = (0.10, 0.20, 0.30)
TIERED_ROWS = SHARE_ROWS
MARGIN_TIERED_EXACT = 5.0  # points: issue 57's moonshot, "within 5 RULER points of exact"
# the finalist rule, stated in docs/results-quality.md before the screen: per prediction, how
# many arms, and the ceiling they need (prediction 2: against POP's measured ceiling)
FASTER_THAN_POP, FAST = 1.05, 1.8
FINALISTS = {"prediction 2": 3, "prediction 3": 2}
MOONSHOT = "qwen2.5-coder-1.5b"   # the model prediction 3 is stated for
STATED_MODELS = ("qwen2.5-coder-0.5b", MOONSHOT)  # prediction 2's "on both Qwen models"
FINALISTS_FILE = "finalists.json"  # beside the journal: the screen's finalists, never rewritten


class TieredArms:
    """The tiered arms of a frontier grid (mixed into gpu.lab.eval.frontier.Frontier, whose
    ``n_layers``, ``tails``, ``tiered``, ``tiered_fills``, ``pop`` and ``pop_native`` they
    read)."""

    @property
    def third(self) -> int:
        return depth(1 / 3, self.n_layers)

    @property
    def seven12(self) -> int:
        return depth(7 / 12, self.n_layers)

    @property
    def tiered_splits(self) -> tuple[int, ...]:
        """The tiered arms' splits: 1/3, 1/2 and 7/12 of depth and POP's."""
        return tuple(sorted({depth(f, self.n_layers) for f in TIERED_FRACTIONS} | {self.pop}))

    def tiered_arms(self) -> list[Arm]:
        """Issue 57's grid: split x fill x exact share x span completion, the shortest tail."""
        t1, out = min(self.tails), []
        for s in self.tiered_splits:
            for fill in self.tiered_fills:
                keys, values = pair(fill)
                for k in TIERED_SHARES:
                    for c in (False, True):
                        cfg = PrefillConfig(fill=keys, values_fill=values, split=s, tail=t1,
                                            rows=TIERED_ROWS,
                                            selector_options={"share": k, "complete": c})
                        out.append(Arm(arm_name(keys, s, t1, TIERED_ROWS, values, k, c), cfg,
                                       label=f"{fill}, split {s}, tail {t1}, {k:.0%} attention "
                                             f"rows{', whole spans' if c else ''}"))
        return out

    def is_tiered(self, arm: Arm) -> bool:
        """True for one of issue 57's tiered arms (attention rows at a share, no splice)."""
        return (self.tiered and arm.rows == TIERED_ROWS and "share" in dict(arm.options)
                and arm.splice is None and arm.check is None and arm.control is None)

    def dropped_twin(self, arm: Arm) -> str:
        """The name of a tiered arm's twin with its other prefix rows dropped (fill none)."""
        o = dict(arm.options)
        return arm_name("none", arm.split, arm.tail, TIERED_ROWS, share=o["share"],
                        complete=bool(o.get("complete")))

    def references(self, arms: list[Arm]) -> list[str]:
        """What the tiered arms are tested against: every other arm of the run at POP's split
        with the shortest tail and no rows, POP native aside (in the screen: the advised fill)."""
        t1 = min(self.tails)
        return [a.name for a in arms if not self.is_tiered(a) and a.split == self.pop
                and a.tail == t1 and a.rows == "none" and a.name != self.pop_native
                and a.splice is None and a.check is None and a.rescale is None]

    def tiered_pairs(self, arms: list[Arm]) -> list[tuple[str, str]]:
        """Each filled tiered arm against its dropped twin (issue 57's prediction 1), and each
        tiered arm against each of :meth:`references` (prediction 2)."""
        names, refs = {a.name for a in arms}, self.references(arms)
        out = []
        for a in arms:
            if not self.is_tiered(a):
                continue
            twin = self.dropped_twin(a)
            if a.fill != "none" and twin in names:
                out.append((a.name, twin))
            out += [(a.name, r) for r in refs]
        return out

    def tiered_tests(self, arms: list[Arm]) -> list[tuple[str, str, float]]:
        """Each tiered arm non-inferior to each reference at the 3-point margin (issue 57's
        prediction 2), and to exact at :data:`MARGIN_TIERED_EXACT` (prediction 3)."""
        refs = set(self.references(arms))
        return ([(a, b, MARGIN_POP) for a, b in self.tiered_pairs(arms) if b in refs]
                + [(a.name, "exact", MARGIN_TIERED_EXACT) for a in arms if self.is_tiered(a)])


def _estimate(contrast: dict | None) -> float | None:
    return None if not contrast or contrast.get("estimate") is None else contrast["estimate"]


def _best(rows: list[dict], score, k: int) -> list[str]:
    """The ``k`` arms with the highest ``score`` (ties: the higher ceiling, then the name)."""
    scored = [(s, r["mac_ceiling"], r["arm"]) for r in rows if (s := score(r)) is not None]
    return [arm for *_, arm in sorted(scored, key=lambda x: (-x[0], -x[1], x[2]))[:k]]


def finalists(t: dict, moonshot: bool = True) -> dict[str, list[str]]:
    """The screen's finalists by the rule stated before it ran (docs/results-quality.md), from
    a frontier summary's ``tiered`` part (gpu.lab.eval.frontier_report.tiered): prediction 2,
    the :data:`FINALISTS` arms with the highest estimate against the advised fill among those
    whose measured MAC ceiling is at least :data:`FASTER_THAN_POP` times POP native's;
    prediction 3, those with the highest estimate against exact among those at :data:`FAST`
    or more (only on the model it is stated for: ``moonshot``); prediction 4, the advised
    kind's two 10% arms at POP's split."""
    if len(t["references"]) != 1:
        raise ValueError(f"the finalist rule reads one reference arm (the advised fill at POP's "
                         f"split); this run has {sorted(t['references'])}")
    (advised,) = t["references"]
    pop = t["pop"]["mac_ceiling"]
    rows = [r for r in t["rows"] if r["mac_ceiling"]]
    kind = parse_arm(advised)
    keys, values = kind.fill, kind.values_fill
    return {
        "prediction 2": _best(
            [r for r in rows if pop and r["mac_ceiling"] >= FASTER_THAN_POP * pop],
            lambda r: _estimate((r["vs_reference"].get(advised) or {}).get("retrieval")),
            FINALISTS["prediction 2"]),
        "prediction 3": _best([r for r in rows if moonshot and r["mac_ceiling"] >= FAST],
                              lambda r: _estimate(r["vs_exact"]), FINALISTS["prediction 3"]),
        "prediction 4": sorted(r["arm"] for r in t["rows"]
                               if (r["fill"], r["values_fill"], r["share"]) == (keys, values, 0.1)
                               and r["split"] == t["pop_split"])}



def freeze(summary: dict) -> dict:
    """What the screen fixes for the verdicts (gpu.lab.eval.tiered_verdicts): its finalists,
    the advised fill, and the grid's splits and shares (prediction 1's cells)."""
    t = summary["tiered"]
    (advised,) = t["references"]
    return {"model": summary["model"], "finalists": t["finalists"], "advised": advised,
            "pop_split": t["pop_split"], "splits": sorted({r["split"] for r in t["rows"]}),
            "shares": sorted({r["share"] for r in t["rows"]}), "screen_samples": summary["samples"],
            "command": summary.get("command")}


def resume_keep(finalists: dict[str, list[str]], advised: str) -> list[str]:
    """The ``--keep`` of the finalists' resume (``make tiered-finalists``): every finalist and
    the advised fill (exact and POP native always run)."""
    return sorted({a for arms in finalists.values() for a in arms}) + [advised]


def finalist_keep(root: Path) -> list[str]:
    """:func:`resume_keep` of the screen in ``root`` (its finalists.json)."""
    path = root / FINALISTS_FILE
    if not path.is_file():
        raise SystemExit(f"{path}: missing. The screen names its finalists when it is whole: run "
                         "`make tiered` (or its line for this model) to the end first")
    frozen = json.loads(path.read_text())
    return resume_keep(frozen["finalists"], frozen["advised"])


if __name__ == "__main__":  # python -m gpu.lab.eval.tiered results/tiered/<model>
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m gpu.lab.eval.tiered results/tiered/<model>: prints the "
                         "--keep patterns of that screen's finalists")
    print(" ".join(finalist_keep(Path(sys.argv[1]))))
