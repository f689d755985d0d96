"""The evaluation harness (gpu.lab.eval.harness, gpu.lab.eval.instruments, gpu.lab.eval.report) on a tiny random Llama:
the filled-region filter, the novel / key token masks as wired, the scorers, the paired
intervals on known data, resume after an interruption, and the miniature eval end to end.

One module fixture runs ``ridgefill eval mini`` (tiny model, synthetic texts, maps fitted
with gpu.maps.fit); the other tests reuse its model and maps.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from gpu.core.config import PrefillConfig
from gpu.lab.eval import grid
from gpu.lab.eval import units as eu
from gpu.lab.eval import harness as ev
from gpu.lab.eval import instruments as ins
from gpu.core import models
from gpu.lab.eval import report, report_intervals
from gpu.lab.eval import tasks
from gpu.lab.eval.journal import Journal
from gpu.lab.eval.loss_masks import key_token_mask, novel_token_mask
from gpu.lab.eval.minimodel import SyntheticTexts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: one thread is fastest, above all on a busy CPU
    out = tmp_path_factory.mktemp("mini")
    from gpu.cli import main

    assert main(["eval", "mini", "--out-dir", str(out), "--quiet"]) == 0
    root = out / "tiny-llama"
    loaded = models.load(str(root), device="cpu", dtype=torch.float32)
    from gpu.maps.files import load_maps

    maps = {}
    for p in sorted((root / "maps").glob("*.safetensors")):
        m = load_maps(p, fingerprint=loaded.fingerprint())
        maps[m.split] = m
    yield {"out": out, "root": root, "loaded": loaded, "maps": maps,
           "report": json.loads((root / "report.json").read_text())}
    torch.set_num_threads(threads)


def small_cfg(loaded, **kw):
    base = grid.EvalConfig(loaded.name, (3,), 160, {512: ("niah_single_1",)}, samples=1, docs=1,
                         loss_length=256, score_tokens=24, continuation=3,
                         answer_tokens=3, minimum={"samples": 1, "docs": 1, "domains": 1})
    return replace(base, **kw)


# ----------------------------------------------------------------------------- end to end
def test_mini_eval_end_to_end(mini):
    rep, root = mini["report"], mini["root"]
    for f in ("report.json", "report.md", "records.jsonl", "split_curve.png", "arms.png",
              "splices.png"):
        assert (root / f).is_file(), f
    assert set(rep) >= {"needles", "documents", "contrasts", "noninferiority", "splices",
                        "findings", "counts", "commands", "wall_seconds", "partial"}
    arms = [a["name"] for a in rep["meta"]["arms"]]
    assert arms[:5] == ["exact", "nofill@3", "identity@3", "pop@6", "ridge@3"]
    assert {"ridge+attention@3", "ridge+attention@3/random", "ridge+attention@3/tail",
            "ridge+attention@3/blind", "ridge+probe@3", "ridge@3/splice-keys",
            "identity@4", "ridge@4"} <= set(arms)
    n_s, n_d = rep["counts"]["needle_samples"], rep["counts"]["documents"]
    assert n_s == 4 and n_d == 2  # one sample per task, one document per domain
    assert set(rep["needles"]["arms"]) == set(arms)
    assert rep["counts"]["needle_records"] == n_s * len(arms)
    doc_arms = [a for a in rep["meta"]["arms"] if not a["blind"]]
    assert rep["counts"]["loss_records"] == n_d * len(doc_arms)
    ex = rep["documents"]["arms"]["exact"]
    assert ex["dnll_all"]["estimate"] == 0 and ex["agreement"] == 1 and ex["kl_mean"] == 0
    for name, a in rep["documents"]["arms"].items():
        assert a["kl_mean"] is not None and a["kl_mean"] >= 0 and 0 <= a["agreement"] <= 1
    # controls copy their selection's count; the tail control moves it into the tail
    recs = [json.loads(l) for l in (root / "records.jsonl").read_text().splitlines()]
    needle = {(r["unit"], r["arm"]): r for r in recs if r["instrument"] == "needle"}
    for unit in {u for u, _ in needle}:
        sel = needle[(unit, "ridge+attention@3")]
        assert sel["exact_prefix"] > 0
        assert needle[(unit, "ridge+attention@3/random")]["exact_prefix"] == sel["exact_prefix"]
        tail = needle[(unit, "ridge+attention@3/tail")]
        assert tail["exact_prefix"] == 0 and tail["tail"] == 160 + sel["exact_prefix"]
        assert needle[(unit, "pop@6")]["tail"] == 1
    measured = [r["seconds"] for r in recs if r["instrument"] in ("needle", "loss")]
    assert rep["record_seconds"] == pytest.approx(sum(measured))
    assert 0 < rep["record_seconds"] <= rep["wall_seconds"]
    assert {f["status"] for f in rep["findings"]} <= {"confirmed", "refuted", "inconclusive",
                                                      "not measured"}
    assert "PARTIAL" not in (root / "report.md").read_text().split("## Setup")[0]


# ----------------------------------------------------------------------------- filter
def test_filled_region_filter_and_fixed_set(mini):
    loaded = mini["loaded"]
    tok = loaded.tokenizer
    cfg = small_cfg(loaded, samples=3, needles={512: ("niah_multivalue", "niah_multiquery")})
    stats: dict = {}
    units = eu.needle_units(tok, cfg, SyntheticTexts(), stats)
    again = eu.needle_units(tok, cfg, SyntheticTexts(), {})
    assert [u.prompt.ids.tolist() for u in units] == [u.prompt.ids.tolist() for u in again]
    n_prefix_rows = 0
    for u in units:
        assert u.prompt.n <= 512
        assert u.needle_rows and max(u.needle_rows) < u.prompt.n - cfg.tail
        n_prefix_rows += len(u.needle_rows)
    assert n_prefix_rows > 0
    # the samples drawn but not kept have a needle in the tail
    hay = SyntheticTexts().haystack(512 * 8, cfg.seed)
    kept = {u.id for u in units}
    rejected = 0
    for task in ("niah_multivalue", "niah_multiquery"):
        assert stats[f"{task}/512"]["kept"] == 3
        for i in range(stats[f"{task}/512"]["drawn"]):
            s, p = eu.sample(tok, cfg, task, 512, hay, i, eu.overhead(tok, cfg.chat))
            inside = tasks.in_filled_region(s, p.spans, p.n, cfg.tail, p.text.find(s.context))
            assert inside == (f"{task}/512/{i}" in kept)
            rejected += not inside
    assert rejected > 0  # four needles at 512 tokens: some land in the tail


# ----------------------------------------------------------------------------- masks, scorer
def test_loss_masks_and_scorer_wiring(mini, tmp_path):
    loaded, maps = mini["loaded"], mini["maps"]
    cfg = small_cfg(loaded)
    sess = ins.Session(loaded, maps)
    units = eu.doc_units(loaded.tokenizer, cfg, SyntheticTexts(), {})
    u = units[0]
    names = ("exact", "nofill@3", "ridge@3", "pop@6")
    arms = [a for a in grid.study_arms(cfg, loaded.n_layers) if a.name in names]
    j = Journal(tmp_path / "r.jsonl")
    ev.run_docs(sess, j, [u], arms, cfg, "fp", progress=False)
    recs = {r["arm"]: r for r in j.records()}
    ids, start = u.prompt.ids, u.start
    # novel tokens: the mask of gpu.lab.eval.loss_masks over the scored stretch
    assert recs["exact"]["novel"] == novel_token_mask(ids[0], start).astype(int).tolist()
    # the scorer: exact NLL equals a plain full forward's
    with torch.inference_mode():
        logp = torch.log_softmax(loaded.model(ids).logits[0].double(), -1)
    want = -logp[start - 1:-1].gather(1, ids[0, start:, None])[:, 0].numpy()
    np.testing.assert_allclose(recs["exact"]["nll"], want, atol=1e-4)
    # key tokens: the cut context keeps the last W tokens before the stretch (and BOS)
    W = cfg.key_window
    has_bos = int(ids[0, 0]) == loaded.tokenizer.bos_token_id
    body = torch.cat([ids[:, :1], ids[:, start - W:]], 1) if has_bos else ids[:, start - W:]
    with torch.inference_mode():
        lp = torch.log_softmax(loaded.model(body).logits[0].double(), -1)
    cut = -lp[-(ids.shape[1] - start) - 1:-1].gather(1, ids[0, start:, None])[:, 0].numpy()
    np.testing.assert_allclose(recs["exact"]["nll_cut"], cut, atol=1e-4)
    key = key_token_mask(recs["exact"]["nll"], recs["exact"]["nll_cut"])
    docs = report._docs(list(j.records()), [{"name": a.name, "label": ""} for a in arms])
    assert docs["key_tokens"] == int(key.sum())
    # every arm is scored on the same stretch; POP's one-token tail is widened to cover it
    assert len(recs["pop@6"]["nll"]) == len(recs["exact"]["nll"]) == cfg.score_tokens
    assert recs["pop@6"]["tail"] == cfg.score_tokens + 1 and recs["ridge@3"]["tail"] == cfg.tail
    d = np.array(recs["ridge@3"]["nll"]) - np.array(recs["exact"]["nll"])
    m = np.array(recs["exact"]["novel"], bool)
    got = docs["arms"]["ridge@3"]["dnll_novel"]["estimate"]
    assert got == pytest.approx(d[m].mean() if m.any() else np.nan, abs=1e-9)
    assert len(recs["ridge@3"]["kl"]) == len(recs["exact"]["continuation"]) == cfg.continuation
    # agreement fed as one batch equals each arm's cache fed alone (Feeder, one token a step)
    cont = recs["exact"]["continuation"]
    ex = ins.step_logits(sess.engine(None), sess.exact(ids, 1), cont)
    for arm in arms[1:]:
        _, pre = ins.loss(sess, arm, u.prompt, start, seed=u.seed, agreement=True,
                          native_tail=True)
        kl, agree = ins.kl_and_agreement(ex, ins.step_logits(sess.engine(arm.split), pre, cont),
                                         cont)
        assert recs[arm.name]["agree"] == agree, arm.name
        np.testing.assert_allclose(recs[arm.name]["kl"], kl, rtol=1e-4, atol=1e-6)
    assert recs["pop@6"]["agree"] != recs["ridge@3"]["agree"] or \
        recs["pop@6"]["kl"] != recs["ridge@3"]["kl"]  # the arms' slots differ


def test_kl_agreement_and_needle_score():
    e = torch.tensor([[2.0, 0.0, -1.0], [0.0, 3.0, 0.0]])
    kl, agree = ins.kl_and_agreement(e, e, [0, 1])
    assert kl == pytest.approx([0, 0], abs=1e-12) and agree == [1, 1]
    a = torch.tensor([[0.0, 0.0, 0.0], [0.0, 3.0, 0.0]])
    kl, agree = ins.kl_and_agreement(e, a, [0, 1])
    p = torch.softmax(e[0].double(), -1)
    assert kl[0] == pytest.approx(float((p * (p.log() + np.log(3))).sum()), rel=1e-9)
    assert agree == [1, 1] and kl[1] == pytest.approx(0, abs=1e-12)
    b = torch.tensor([[0.0, 1.0, 0.0], [0.0, 3.0, 0.0]])
    assert ins.kl_and_agreement(e, b, [0, 1])[1] == [0, 1]
    # RULER's all-values rule as the needle instrument records it
    assert tasks.score(" 1234567 and 7654321.", ["1234567", "7654321"]) == 1.0
    assert tasks.score("1234567", ["1234567", "7654321"]) == 0.5


def test_needle_instrument_scores_the_decoded_answers(mini, monkeypatch):
    """Each arm's record scores its own slot of the batch (the no-fill arm's too), and the
    controls copy the count their selection recorded."""
    loaded, maps = mini["loaded"], mini["maps"]
    cfg = small_cfg(loaded)
    sess = ins.Session(loaded, maps)
    u = eu.needle_units(loaded.tokenizer, cfg, SyntheticTexts(), {})[0]
    value = u.expected[0]
    answer = loaded.tokenizer(" " + value, add_special_tokens=False).input_ids
    wrong = loaded.tokenizer(" no idea", add_special_tokens=False).input_ids
    by_name = {a.name: a for a in grid.study_arms(cfg, loaded.n_layers)}
    arms = [by_name[n] for n in ("exact", "nofill@3", "ridge+attention@3",
                                 "ridge+attention@3/random")]
    monkeypatch.setattr(ins.Batch, "greedy",  # slots: exact, no fill, selection, control
                        lambda self, eos=None, stop=None: [answer, wrong, wrong, answer])

    def alone(*a, **k):
        raise AssertionError("every arm of a plain-attention model decodes in the batch")

    monkeypatch.setattr(ins.Engine, "decode", alone)
    counts: dict = {}
    recs = ins.needles(sess, arms, u.prompt, u.expected, u.needle_rows, max_new_tokens=4,
                       counts=counts)
    assert [r["correct"] for r in recs] == [1, 0, 0, 1]
    assert [r["score"] for r in recs] == [1.0, 0.0, 0.0, 1.0]
    assert recs[0]["answer"] == " " + value and recs[1]["answer"] == " no idea"
    sel, ctl = recs[2], recs[3]
    assert counts["ridge+attention@3"] == sel["exact_prefix"] == ctl["exact_prefix"] > 0
    assert recs[0]["macs_share"] == 1.0 and 0 < sel["macs_share"] < 1
    assert all(r["seconds"] == pytest.approx(r["prefill_seconds"] + r["decode_seconds"])
               for r in recs)
    pre = sess.prefill(arms[2], u.prompt)  # the selection again, alone
    exact = set(pre.plan.exact_rows.tolist())
    assert sel["needle_rows_exact"] == pytest.approx(
        sum(r in exact for r in u.needle_rows) / len(u.needle_rows))


def test_needle_answers_stop_once_every_value_is_found(mini):
    """An answer stops when it holds every expected value (the score is final then): the
    exact arm's answer on a real batch is a prefix of its answer with no early stop."""
    loaded, maps = mini["loaded"], mini["maps"]
    sess = ins.Session(loaded, maps)
    u = eu.needle_units(loaded.tokenizer, small_cfg(loaded), SyntheticTexts(), {})[0]
    arm = ins.Arm("exact", PrefillConfig(fill="exact"))
    pre = sess.prefill(arm, u.prompt)
    free = sess.engine(None).decode(pre, 12, loaded.tokenizer.eos_token_id)
    text = loaded.tokenizer.decode(free, skip_special_tokens=True)
    (rec,) = ins.needles(sess, [arm], u.prompt, [text[1:4]], [], max_new_tokens=12, counts={})
    assert text.startswith(rec["answer"]) and text[1:4] in rec["answer"]
    assert rec["new_tokens"] < len(free) or rec["answer"] == text


# ----------------------------------------------------------------------------- intervals
def test_bootstrap_and_noninferiority_on_known_data():
    x = np.array([1.0, 2, 3, 4, 5, 6])
    iv = report_intervals.interval(x + 0.5, x, ["a"] * 3 + ["b"] * 3)
    assert iv == {"estimate": 0.5, "low": 0.5, "high": 0.5, "n": 6, "stratified": True}
    iv = report_intervals.interval([1.0, 5, 2], [0.0, 0, 0], ["a", "b", "c"])  # singleton strata: pooled
    assert iv["stratified"] is False and iv["low"] < iv["estimate"] < iv["high"]
    assert json.loads(json.dumps(iv, default=str))["stratified"] is False  # a JSON bool, not "False"
    iv = report_intervals.interval([1.0, np.nan, 3], [0.0, 0.0, np.nan], ["a", "a", "a"])
    assert iv["n"] == 1 and iv["estimate"] == 1.0  # only complete pairs count
    rng = np.random.default_rng(0)
    d = rng.normal(1.0, 1.0, 400)
    iv = report_intervals.interval(d, np.zeros_like(d), ["s"] * 400)
    se = d.std() / np.sqrt(400)
    assert iv["low"] == pytest.approx(d.mean() - 1.96 * se, abs=0.03)
    assert iv["high"] == pytest.approx(d.mean() + 1.96 * se, abs=0.03)
    assert report._verdict(iv) == "confirmed" and report._verdict(iv, -1) == "refuted"
    assert report._verdict({"estimate": 0, "low": -1, "high": 1, "n": 3}) == "inconclusive"
    # non-inferiority: 20 of 20 correct in both arms -> the binomial floor binds
    meta = {"config": {"splits": [3]}, "arms": [{"name": "pop@6"}]}
    vec = {"exact": np.full(20, 100.0), "ridge+attention@3": np.full(20, 100.0)}
    needles = {"arms": {k: {} for k in vec}, "_vec": lambda a: vec[a], "_strata": ["t"] * 20}
    (t,) = report.noninferiority(needles, meta)
    assert t["bootstrap_bound"] == 0 and t["bound"] == pytest.approx(-100 * (1 - 0.05 ** (1 / 20)))
    assert t["bound"] == t["floor"] and not t["passed"]  # -13.9 points < -2
    assert report.ni_word(t) == "n too small"  # only the floor of 20 pairs stops it
    vec["ridge+attention@3"] = np.r_[np.full(10, 0.0), np.full(10, 100.0)]
    (t,) = report.noninferiority(needles, meta)
    assert t["bootstrap_bound"] < -2 and report.ni_word(t) == "fail"
    vec = {"exact": np.full(200, 100.0), "ridge+attention@3": np.full(200, 100.0)}
    needles["_strata"] = ["t"] * 200
    (t,) = report.noninferiority(needles, meta)
    assert t["passed"] and t["floor"] > -2 and report.ni_word(t) == "pass"


def test_needle_contrasts_by_prompt_length():
    """Each length's interval is the paired contrast of that length's samples alone."""
    recs = []
    for i in range(8):
        length = 2048 if i < 4 else 4096
        for arm, score in (("exact", 1.0), ("ridge@3", float(length == 2048))):
            recs.append({"arm": arm, "unit": f"u{i}", "stratum": f"t{i % 2}/{length}",
                         "score": score, "correct": score, "filled": 90, "exact_prefix": 10,
                         "needle_rows_exact": None, "macs_share": 0.5, "seconds": 1.0})
    arms = [{"name": "exact", "label": ""}, {"name": "ridge@3", "label": ""}]
    out = report._needles(recs, arms)["arms"]
    by = out["ridge@3"]["vs_exact_by_length"]
    assert set(by) == {"2048", "4096"}
    assert by["2048"]["estimate"] == 0.0 and by["2048"]["n"] == 4
    assert by["4096"] == {"estimate": -100.0, "low": -100.0, "high": -100.0, "n": 4,
                          "stratified": True}
    assert out["ridge@3"]["vs_exact"]["estimate"] == -50.0 and out["exact"]["vs_exact_by_length"] is None


def test_contrasts_and_noninferiority_per_task_family():
    """With several strata each pair and each test is also given per stratum: the contrast
    of that stratum's samples alone (RULER's task families)."""
    recs = []
    for i in range(12):
        task = ("a", "b")[i % 2]
        for arm, score in (("exact", 1.0), ("pop@6", 1.0), ("ridge@3", float(task == "a"))):
            recs.append({"arm": arm, "unit": f"u{i}", "stratum": f"{task}/4096", "score": score,
                         "correct": score, "filled": 90, "exact_prefix": 10,
                         "needle_rows_exact": None, "macs_share": 0.5, "seconds": 1.0})
    arms = [{"name": n, "label": ""} for n in ("exact", "pop@6", "ridge@3")]
    needles = report._needles(recs, arms)
    vs_exact = needles["arms"]["ridge@3"]["vs_exact_by_stratum"]
    assert vs_exact["a/4096"]["estimate"] == 0.0 and vs_exact["b/4096"]["estimate"] == -100.0
    assert needles["arms"]["exact"]["vs_exact_by_stratum"] is None
    meta = {"config": {"splits": [3]}, "arms": [{"name": "pop@6"}], "pairs": [("ridge@3", "pop@6")],
            "tests": [("ridge@3", "pop@6", 3.0)]}
    row = next(c for c in report.contrasts(needles, {}, {**meta, "arms": []})
               if (c["a"], c["b"]) == ("ridge@3", "pop@6"))
    assert row["retrieval"]["estimate"] == -50.0
    by = row["retrieval_by_stratum"]
    assert by["a/4096"]["estimate"] == 0.0 and by["a/4096"]["n"] == 6
    assert by["b/4096"]["estimate"] == by["b/4096"]["high"] == -100.0
    t = next(t for t in report.noninferiority(needles, meta) if t["b"] == "pop@6")
    assert not t["passed"] and not t["by_stratum"]["b/4096"]["passed"]
    a = t["by_stratum"]["a/4096"]  # 6 of 6 in both arms: only the binomial floor binds
    assert a["n"] == 6 and a["bound"] == pytest.approx(-100 * (1 - 0.05 ** (1 / 6)))
    assert report.ni_word(a) == "n too small" and report.ni_word(t["by_stratum"]["b/4096"]) == "fail"


def test_key_token_dnll_per_token_weighs_each_token():
    """Per token, a document's key tokens count one by one: two documents holding 1 and 3 key
    tokens with dNLL 1.0 and 0.0 average 0.5 per document and 0.25 per token."""
    a = {0: np.array([1.0]), 1: np.array([0.0, 0.0, 0.0]), 2: np.array([])}
    b = {0: np.array([0.5]), 1: np.array([1.0, 1.0, 1.0])}
    one = report_intervals.per_token(a)
    assert one["estimate"] == pytest.approx(0.25) and (one["tokens"], one["documents"]) == (4, 2)
    assert one["low"] <= 0.25 <= one["high"]  # resampling the two documents: 0, 1/4 or 1
    two = report_intervals.per_token(a, b)
    assert two["estimate"] == pytest.approx((0.5 - 3) / 4) and two["tokens"] == 4
    assert report_intervals.per_token({0: np.array([])}) is None


def test_key_token_per_token_interval_resamples_whole_documents():
    """Two domains of two documents, each document's key tokens all at one value, resampled
    by document within domain: domain a draws its 30-token document twice (60 / 66 per token,
    one time in four), once (30 / 38) or never (0), so the interval spans 0 to 60 / 66 (by
    token, 38 draws of one token each would almost never reach either end)."""
    by_doc = {0: np.full(30, 1.0), 1: np.full(2, 0.0), 2: np.full(3, 0.0), 3: np.full(3, 0.0)}
    iv = report_intervals.per_token(by_doc, strata=["a", "a", "b", "b"])
    assert iv["estimate"] == pytest.approx(30 / 38) and iv["documents"] == 4
    assert iv["low"] == pytest.approx(0.0) and iv["high"] == pytest.approx(60 / 66)


# ----------------------------------------------------------------------------- resume
class Stop(Exception):
    pass


def test_resume_recomputes_nothing(mini, tmp_path, monkeypatch):
    loaded, maps = mini["loaded"], mini["maps"]
    cfg = small_cfg(loaded, splits=(3,))
    calls = {"needle": 0, "loss": 0}
    real = {"needle": ins.needles, "loss": ins.loss}
    limit = {"loss": 3}

    def needles(sess, arms, *a, **k):
        calls["needle"] += len(arms)
        return real["needle"](sess, arms, *a, **k)

    def loss(*a, **k):
        if calls["loss"] >= limit["loss"]:
            raise Stop
        calls["loss"] += 1
        return real["loss"](*a, **k)

    monkeypatch.setattr(ins, "needles", needles)
    monkeypatch.setattr(ins, "loss", loss)
    kw = dict(maps=maps, progress=False)
    arms = grid.study_arms(cfg, loaded.n_layers)
    n_needle = len(arms)
    with pytest.raises(Stop):
        ev.evaluate_model(loaded, cfg, tmp_path, SyntheticTexts(), **kw)
    assert calls == {"needle": n_needle, "loss": 3}
    j = Journal(tmp_path / loaded.name / "records.jsonl")
    assert sum(r["instrument"] == "needle" for r in j.records()) == n_needle
    # exact's record; the 3 arms measured before the stop wait for the document's batched
    # agreement, so they are measured again
    assert sum(r["instrument"] == "loss" for r in j.records()) == 1
    assert [r["finished"] for r in j.records() if r["instrument"] == "session"] == [False]
    stopped = json.loads((tmp_path / loaded.name / "report.json").read_text())
    assert stopped["partial"] and stopped["counts"]["needle_records"] == n_needle
    n_doc = len([a for a in arms if not a.blind]) - 1  # the exact document run is not ins.loss
    assert f"1 of {n_doc + 1} loss records measured" in " ".join(stopped["partial_reasons"])
    assert "PARTIAL" in (tmp_path / loaded.name / "report.md").read_text().upper()
    # a torn last line (killed mid-write) is dropped, the rest kept
    with open(j.path, "a") as fh:
        fh.write('{"key": "needle|torn')
    limit["loss"] = 10 ** 6
    calls.update(needle=0, loss=0)
    rep = ev.evaluate_model(loaded, cfg, tmp_path, SyntheticTexts(), **kw)
    assert calls == {"needle": 0, "loss": n_doc}
    assert not any("measured" in r for r in rep["partial_reasons"])
    assert rep["counts"]["needle_records"] == n_needle
    calls.update(needle=0, loss=0)
    md_before = (tmp_path / loaded.name / "report.md").read_text()
    rep2 = ev.evaluate_model(loaded, cfg, tmp_path, SyntheticTexts(), **kw)
    assert calls == {"needle": 0, "loss": 0}
    # the rerun of the finished grid measured nothing: no session line, the same report
    assert rep2["needles"] == rep["needles"] and rep2["counts"]["sessions"] == 2
    (cmd,) = rep2["commands"]  # one command, its two sessions and every run they measured
    assert cmd["sessions"] == 2 and cmd["measured"] == rep2["counts"]["records"]
    assert (tmp_path / loaded.name / "report.md").read_text() == md_before


def test_whole_grid_on_a_sliding_window_model(tmp_path):
    """The study's arms on a tiny Gemma-3 whose window (32) is shorter than the tail: the
    splices read rows the stock cache of a sliding-window layer no longer holds."""
    from gpu.lab.eval import minimodel

    torch.set_num_threads(1)
    path = minimodel.build(tmp_path / "tiny-gemma3", family="gemma3")
    loaded = models.load(str(path), device="cpu", dtype=torch.float32)
    assert "sliding_attention" in loaded.model.config.layer_types
    cfg = small_cfg(loaded, chat=False, calib_tokens=3000)
    fit_kw = {"lambdas": (1e-1,), "doc_tokens": 512, "heldout_docs": 1, "heldout_tokens": 256}
    rep = ev.evaluate_model(loaded, cfg, tmp_path, SyntheticTexts(), progress=False,
                            fit_kw=fit_kw, calib=str(minimodel.write_calibration(tmp_path / "c")))
    arms = grid.study_arms(cfg, loaded.n_layers)
    assert not rep["partial"], rep["partial_reasons"]
    assert rep["counts"]["needle_records"] == len(arms)
    assert rep["counts"]["loss_records"] == len([a for a in arms if not a.blind])
    # exact keys and values in every filled row leave the tail exact (to rounding), even
    # though agreement fed the exact cache further tokens before the splices read it
    dnll = {a: v["dnll_all"]["estimate"] for a, v in rep["documents"]["arms"].items()}
    assert abs(dnll["ridge@3/splice-both"]) < 1e-5 < abs(dnll["ridge@3"])


def test_custom_arms_for_a_selector_study(mini, tmp_path):
    """Issue 9 reuses the harness with its own selectors: any gpu.core.select name with options,
    each followed by controls that name it in ``of``."""
    loaded, maps = mini["loaded"], mini["maps"]
    cfg = small_cfg(loaded, instruments=("needle",))
    ridge = PrefillConfig(fill="ridge", split=3, tail=160, rows="none")
    sel = ins.Arm("ridge+attn5@3", ridge.replace(rows="attention", selector_options={"share": 0.05}))
    arms = [ins.Arm("exact", PrefillConfig(fill="exact")), ins.Arm("ridge@3", ridge), sel,
            ins.Arm("ridge+attn5@3/random", ridge.replace(rows="attention"), control="random",
                    of=sel.name)]
    rep = ev.evaluate_model(loaded, cfg, tmp_path, SyntheticTexts(), maps=maps, arms=arms,
                            progress=False)
    a = rep["needles"]["arms"]
    assert a[sel.name]["exact_row_share"] == pytest.approx(0.05, abs=0.01)
    assert a[sel.name + "/random"]["exact_row_share"] == a[sel.name]["exact_row_share"]
    pairs = {(c["a"], c["b"]) for c in rep["contrasts"]}
    assert {(sel.name, sel.name + "/random"), (sel.name, "ridge@3")} <= pairs
    assert "options" not in arms[1].spec() and sel.spec()["options"] == (("share", 0.05),)


def test_rereport_keeps_the_later_record_of_a_rerun_arm():
    """A journal holding an arm measured twice on a unit (a rerun after a fix) reports the
    later record alone, and only the units that every arm measured."""
    from gpu.lab.eval.rereport import complete_records

    def rec(unit, arm, score):
        return {"instrument": "needle", "unit": unit, "arm": arm, "score": score}

    records = [rec("u0", "exact", 1), rec("u0", "kv@3", 0), rec("u1", "exact", 1),
               {"instrument": "session", "wall_seconds": 1.0}, rec("u0", "kv@3", 1)]
    kept = complete_records(records, {"exact", "kv@3"})
    assert [r.get("score") for r in kept] == [1, None, 1]
    assert [r.get("unit") for r in kept] == ["u0", None, "u0"]
