"""The report's estimate of the whole preset grid's wall time from the seconds measured
(gpu.lab.eval.report; paper section 6's study sizes)."""
from __future__ import annotations

import math
from collections import defaultdict

import numpy as np


def estimate_hours(needles_recs, doc_recs, meta) -> dict | None:
    """Wall time of the whole preset grid from the seconds measured here (per record, by
    prompt length; unmeasured lengths scaled by (length ratio)^1.3)."""
    preset = meta.get("preset")
    if not preset:
        return None
    per_len = defaultdict(list)
    for r in needles_recs:
        per_len[r["length"]].append(r["seconds"])
    if not per_len and not doc_recs:
        return None
    mean = {k: float(np.mean(v)) for k, v in per_len.items()}
    arms = meta["arms"]
    n_arms, n_doc_arms = len(arms), len([a for a in arms if not a["blind"]])
    total, rows = 0.0, {}
    for length, tasks_ in preset["needles"].items():
        length = int(length)
        if mean:
            ref = min(mean, key=lambda k: abs(math.log(k / length)))
            sec = mean[ref] * (length / ref) ** 1.3
            n = len(tasks_) * preset["minimum"]["samples"] * n_arms
            rows[str(length)] = {"records": n, "seconds_per_record": sec,
                                 "measured": ref == length}
            total += n * sec
    if doc_recs:
        sec = float(np.mean([r["seconds"] for r in doc_recs]))
        ref = meta["config"]["loss_length"]
        sec *= (preset["loss_length"] / ref) ** 1.3
        n = preset["minimum"]["docs"] * n_doc_arms
        rows["loss"] = {"records": n, "seconds_per_record": sec,
                        "measured": ref == preset["loss_length"]}
        total += n * sec
    return {"hours": total / 3600, "rows": rows}
