"""gpu.selector_study without a model: its arms (controls beside the default only, every
selector with span completion) and its summary / markdown / plot on a synthetic report."""
from __future__ import annotations

import json

from gpu import selector_study as st


def test_arms_and_controls():
    arms = st.arms_for(11, 512, "combined")
    names = [a.name for a in arms]
    assert names[:2] == ["exact", "ridge@11"]
    assert {"ridge+attention@11", "ridge+probe@11", "ridge+protected@11", "ridge+lexical@11",
            "ridge+combined@11", "ridge+combined@11/random", "ridge+combined@11/tail",
            "ridge+combined@11/blind"} == set(names[2:])
    for a in arms:
        if a.rows not in ("none", "combined"):
            assert dict(a.options)["complete"] is True
        if a.control:
            assert a.of == "ridge+combined@11" and names.index(a.of) < names.index(a.name)


def test_summary_markdown_plot(tmp_path):
    arms = st.arms_for(11, 512, "combined", ("attention", "combined"))
    iv = {"estimate": -5.0, "low": -10.0, "high": 0.0, "n": 8}
    needles = {"strata": ["t/2048"], "by_stratum": {a.name: {"t/2048": 50.0} for a in arms},
               "arms": {a.name: {"n": 8, "score": 50.0, "correct": 0.5,
                                 "exact_row_share": 0.1 if a.rows != "none" else 0.0,
                                 "needle_rows_exact": 0.5, "macs_share": 0.6,
                                 "vs_exact": None if a.name == "exact" else iv} for a in arms}}
    rep = {"needles": needles, "contrasts": [{"a": "ridge+combined@11", "b": "ridge@11",
                                              "retrieval": iv}]}
    timing = {a.name: {"prefill": 1.0, "replay": 0.9 if a.selects else None,
                       "macs_share": 0.6} for a in arms}
    meta = {"model": "m", "split": 11, "tail": 512, "lengths": [2048], "tasks": ["t"],
            "seed": 0, "command": "c", "wall_seconds": 1.0, "timing_seconds": 1.0,
            "device": "cpu", "threads": 1, "maps": "x", "partial": True, "strata": ["t/2048"],
            "timing_units": 1, "notes": []}
    summ = st.summarize(rep, timing, arms, "combined", meta)
    json.dumps(summ)
    assert summ["checks"]["default_vs_ridge"] == iv and summ["samples"] == 8
    md = st.markdown(summ)
    assert "PARTIAL" in md and "ridge+combined@11/random" in md
    st.plot(summ, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000
