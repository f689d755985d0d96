"""The frontier of issue 20 (gpu.lab.eval.frontier, gpu.lab.eval.frontier_report) on a tiny random
Llama: the grid (splits at 1/4, 3/8, 1/2, 5/8 and POP's, fills x tails x rows, rescales,
cuts), the run end to end with its markdown / JSON / PNG, paper 6.4's test, resume, the
dominating points, and the probe's first sweep charged in the MAC share."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpu_fixtures import MINI_FIT_KW, mini_llama

from gpu.core.config import PrefillConfig
from gpu.lab.eval import frontier as fr
from gpu.lab.eval import minimodel
from gpu.lab.eval.frontier_report import dominating, markdown, verdict_64
from gpu.lab.eval.instruments import Arm, Session, probe_sweep_macs
from gpu.lab.eval.options import FrontierOptions

pytestmark = pytest.mark.slow

FIT_KW = MINI_FIT_KW


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    yield from mini_llama(tmp_path_factory.mktemp("frontier"))


def run_tiny(tiny, out, **kw):
    opts = FrontierOptions(models=(tiny["loaded"].name,), out_dir=out, samples=1, docs=1,
                           lengths=(512,), tails=(1, 96), seed=0, timing_units=1,
                           loss_length=256)
    return fr.run(replace(opts, **kw), progress=False, loaded=tiny["loaded"],
                  texts=minimodel.SyntheticTexts(), fit_kw=FIT_KW, calib=tiny["calib"])


def test_grid_of_a_30_layer_model():
    f = fr.Frontier(30)
    assert f.splits == (8, 11, 15, 19, 20) and f.pop == 20 and f.deep == 19 and f.primary == 11
    names = [a.name for a in f.arms()]
    assert names[:2] == ["exact", "pop@20"] and len(names) == len(set(names))
    assert "identity@20/t1" not in names  # that is POP native
    assert {"ridge@19/t1", "identity+lexical@8/t1024", "ridge@11/t512/rescale-values",
            "ridge@11/t512/rescale-keys"} <= set(names)
    # + beyond the paper at 1/2, 5/8 and POP's split (15, 19, 20): 2 fills and 4 source pairs
    assert len(names) == 2 + 5 * 2 * 3 * 2 - 1 + 2 + 2 + 3 * (2 + 4)
    assert {"anchored@15/t1", "kv@19/t1", "identity.ridge-values@20/t1",
            "kv.identity-values@19/t1"} <= set(names)
    assert f.kinds == ("ridge", "anchored", "kv")
    kv = next(a for a in f.arms() if a.name == "identity.kv-values@19/t1")
    assert (kv.fill, kv.values_fill, kv.config.map_kinds) == ("identity", "kv", ("kv",))
    assert {"ridge@19/t1/splice-keys", "ridge@19/t1/splice-values"} <= set(names)
    # the fills against each other at 1/2, 5/8 and POP's split (identity at POP's is POP native)
    fp = f.fill_pairs(f.arms())
    assert ("ridge@19/t1", "identity@19/t1") in fp and ("anchored@20/t1", "ridge@20/t1") in fp
    assert ("anchored@20/t1", "identity@20/t1") not in fp and len(fp) == 3 + 3 + 1
    kept = fr.Frontier(30, keep=("ridge@{deep}/t1", "anchored@{deep}/t1")).arms()
    assert fr.Frontier(30).fill_pairs(kept) == [("anchored@19/t1", "ridge@19/t1")]
    assert f.headline == "ridge@19/t1" and (f.headline, "pop@20", 3.0) in f.tests(f.arms())
    cut = fr.Frontier(18, cut=fr.CUTS["gemma3-270m"]).arms()
    assert "pop@12" in [a.name for a in cut]
    assert not any(a.name.startswith("identity+") or a.name.startswith("identity@")
                   and a.tail == 512 for a in cut)


def test_dominating_points_and_verdict():
    pts = [("a", 0.5, 10.0), ("b", 0.6, 9.0), ("c", 0.7, 20.0), ("d", 0.7, 15.0), ("e", 0.4, 10.0)]
    assert dominating(pts) == ["e", "c"]
    ok = {"noninferior_pop": {"passed": True}, "vs_pop": {"high": 1.0}}
    assert verdict_64(ok) == "confirmed"
    assert verdict_64({"noninferior_pop": {"passed": False}, "vs_pop": {"high": -4.0}}) == "refuted"
    assert verdict_64({"noninferior_pop": {"passed": False}, "vs_pop": {"high": 1.0}}) == "inconclusive"
    assert verdict_64(None) == "not measured"


def test_probe_arm_pays_its_first_sweep(tiny):
    sess = Session(tiny["loaded"], {})
    probe = Arm("p", PrefillConfig(fill="identity", split=3, tail=16, rows="probe"))
    plain = Arm("i", PrefillConfig(fill="identity", split=3, tail=16, rows="none"))

    class Pre:  # the plan of a 200-token prompt with 20 exact prefix rows
        from gpu.core.plan import Plan
        plan = Plan(200, 3, 16, 8).with_rows(list(range(20)))

    sweep = probe_sweep_macs(sess.arch, 184, 3, 16, "identity")
    assert sweep > 0
    from rfmath import cost
    exact = cost.macs(sess.arch, 200, arm="exact")
    assert sess.macs_share(probe, Pre, 200) == pytest.approx(
        sess.macs_share(plain, Pre, 200) + sweep / exact)
    control = Arm("c", PrefillConfig(fill="identity", split=3, tail=16, rows="probe"),
                  control="random", of="p")
    assert sess.macs_share(control, Pre, 200) == sess.macs_share(plain, Pre, 200)


def test_frontier_end_to_end_and_resume(tiny, tmp_path, monkeypatch):
    out = tmp_path / "frontier"
    [s] = run_tiny(tiny, out, checks=(0.05,))
    root = out / tiny["loaded"].name
    for f in ("frontier.md", "frontier.json", "frontier.png", "report.json", "records.jsonl",
              "timing.json"):
        assert (root / f).is_file(), f
    names = {r["arm"] for r in s["rows"]}
    assert {"exact", "pop@6", "ridge@5/t1", "identity+lexical@2/t96",
            "ridge@3/t96/rescale-keys"} <= names
    by = {r["arm"]: r for r in s["rows"]}
    assert by["exact"]["macs_share"] == 1.0 and by["ridge@5/t1"]["vs_pop"] is not None
    assert by["ridge@5/t1"]["dnll_novel"] is not None and by["ridge@5/t1"]["speedup"]
    assert s["test_6_4"]["a"] == "ridge@5/t1" and s["test_6_4"]["b"] == "pop@6"
    assert s["test_6_4"]["status"] in ("confirmed", "refuted", "inconclusive")
    assert s["dominating"]["retrieval"]  # (a random tiny model has no key tokens)
    md = (root / "frontier.md").read_text()
    assert "Paper 6.4" in md and "seed 0" in md and s["command"]
    assert "filled-region needle samples" in md and "RULER" not in md
    assert "1 documents of 256 tokens" in md  # a needles-only run says so instead:
    assert "no loss documents (needles only)" in markdown({**s, "documents": 0})
    assert json.loads((root / "frontier.json").read_text())["rows"]
    # a rerun measures nothing again
    import gpu.lab.eval.instruments as ins
    monkeypatch.setattr(ins, "needles", lambda *a, **k: pytest.fail("remeasured a needle"))
    monkeypatch.setattr(ins, "loss", lambda *a, **k: pytest.fail("remeasured a document"))
    chk = by["ridge@5/t96/check-0.05"]
    assert chk["check_needles"]["steps"] >= 1 and chk["check_docs"]["steps"] >= 1
    assert chk["check_needles"]["overhead"] is not None and chk["vs_default_rows"]
    assert "Decode-time check" in md and "Which component" in md
    assert by["ridge@5/t1/splice-keys"]["vs_unspliced"]["retrieval"] is not None
    [again] = run_tiny(tiny, out, checks=(0.05,))
    assert again["rows"] == s["rows"]
    # the report written again from the journal alone (no maps, no run): the same numbers
    from gpu.lab.eval.rereport import rereport
    before = json.loads((root / "report.json").read_text())
    with open(root / "records.jsonl", "a") as f:  # a unit that not every arm measured
        f.write(json.dumps({"instrument": "needle", "arm": "exact", "unit": "x/1/0",
                            "stratum": "x/1", "score": 1.0, "seconds": 1.0}) + "\n")
    after = rereport(root)
    assert after["needles"]["arms"] == before["needles"]["arms"]
    assert after["documents"]["arms"] == before["documents"]["arms"]
    assert after["contrasts"][: len(before["contrasts"])] == before["contrasts"]


def test_a_stopped_frontier_writes_its_partial_summary(tiny, tmp_path, monkeypatch):
    """SIGTERM (SystemExit from gpu.lab.eval.harness.stop_on_sigterm) in the middle of the needles:
    the harness journals what it measured, and the frontier's summary says PARTIAL."""
    import gpu.lab.eval.harness as harness

    real = harness.run_docs

    def stop(*a, **k):
        raise SystemExit(143)

    monkeypatch.setattr(harness, "run_docs", stop)
    out = tmp_path / "frontier"
    with pytest.raises(SystemExit):
        run_tiny(tiny, out)
    root = out / tiny["loaded"].name
    md = (root / "frontier.md").read_text()
    assert "PARTIAL" in md
    summary = json.loads((root / "frontier.json").read_text())
    by = {r["arm"]: r for r in summary["rows"]}
    assert summary["partial"] and by["ridge@5/t1"]["vs_pop"] is not None  # needles are in
    assert by["ridge@5/t1"]["dnll_novel"] is None                         # documents are not
    monkeypatch.setattr(harness, "run_docs", real)
    [done] = run_tiny(tiny, out)  # the rerun resumes and measures the documents
    assert {r["arm"]: r for r in done["rows"]}["ridge@5/t1"]["dnll_novel"] is not None


def test_sigusr1_stops_the_frontier_once_the_running_sample_is_journaled(tiny, tmp_path,
                                                                          monkeypatch):
    """SIGUSR1 (gpu.lab.eval.harness.stop_on_sigterm) while a sample's arms are measured: that
    sample is journaled whole, no other is started, the summary says PARTIAL, and the rerun
    measures only what is left."""
    import os
    import signal

    import gpu.lab.eval.harness as harness
    import gpu.lab.eval.instruments as ins

    real, calls = ins.needles, []

    def signalled(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGUSR1)
        return real(*a, **k)

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        harness.stop_on_sigterm()
        monkeypatch.setattr(ins, "needles", signalled)
        out = tmp_path / "frontier"
        with pytest.raises(SystemExit) as stopped:
            run_tiny(tiny, out, timing_units=0)
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        asked, harness.FINISH["asked"] = harness.FINISH["asked"], False
    assert not asked      # the stop consumed the request
    assert stopped.value.code == 128 + signal.SIGUSR1 and len(calls) == 1
    root = out / tiny["loaded"].name
    recs = [json.loads(x) for x in (root / "records.jsonl").read_text().splitlines()]
    needles = [r for r in recs if r["instrument"] == "needle"]
    assert len({r["unit"] for r in needles}) == 1 and needles   # the first sample, whole
    assert len(needles) == len({r["arm"] for r in needles})
    assert json.loads((root / "frontier.json").read_text())["partial"]
    [done] = run_tiny(tiny, out, timing_units=0)
    assert not done["partial"] and len(calls) > 1


def test_one_instrument_at_a_time_then_the_whole_grid(tiny, tmp_path, monkeypatch):
    """``--instruments loss`` journals only documents and says the grid is partial; the
    whole grid afterwards measures only the needles (the documents are reused) and is
    complete at the frontier's own size (samples and documents asked, not the study's)."""
    import gpu.lab.eval.instruments as ins

    out = tmp_path / "frontier"
    [first] = run_tiny(tiny, out, instruments=("loss",), timing_units=0)
    root = out / tiny["loaded"].name
    kinds = {json.loads(line)["instrument"] for line in (root / "records.jsonl").open()}
    assert kinds == {"loss", "session"}
    assert first["partial"] and any("instruments" in r for r in first["partial_reasons"])
    monkeypatch.setattr(ins, "loss", lambda *a, **k: pytest.fail("remeasured a document"))
    [whole] = run_tiny(tiny, out, timing_units=0)
    assert not whole["partial"], whole["partial_reasons"]
    assert {r["arm"]: r for r in whole["rows"]}["ridge@5/t1"]["dnll_novel"] is not None
    with pytest.raises(ValueError, match="instruments"):
        FrontierOptions(instruments=("speed",))
