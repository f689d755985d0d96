"""gpu.lab.tools.selector_study without a model: its arms (controls beside the default only, every
selector with span completion but the paper's attention selector) and its summary / markdown /
plot on a synthetic report."""
from __future__ import annotations

import json

from gpu.lab.tools import selector_study as st


def test_arms_and_controls():
    arms = st.arms_for(11, 512, ("lexical", "combined"))
    names = [a.name for a in arms]
    assert names[:2] == ["exact", "ridge@11"]
    controls = {f"ridge+{s}@11/{c}" for s in ("lexical", "combined")
                for c in ("random", "tail", "blind")}
    assert {"ridge+attention@11", "ridge+attention-paper@11", "ridge+probe@11",
            "ridge+protected@11", "ridge+lexical@11",
            "ridge+combined@11"} | controls == set(names[2:])
    for a in arms:
        if a.name == "ridge+attention-paper@11":  # §2.4 as written: 10%, no span completion
            assert a.rows == "attention" and dict(a.options) == {"share": 0.10}
        elif a.rows not in ("none", "combined"):
            assert dict(a.options)["complete"] is True
        if a.control:
            assert a.of in ("ridge+lexical@11", "ridge+combined@11")
            assert a.rows in a.of and names.index(a.of) < names.index(a.name)


def test_summary_markdown_plot(tmp_path):
    arms = st.arms_for(11, 512, ("combined",), ("attention", "combined"))
    iv = {"estimate": -5.0, "low": -10.0, "high": 0.0, "n": 8}
    needles = {"strata": ["t/2048"], "by_stratum": {a.name: {"t/2048": 50.0} for a in arms},
               "arms": {a.name: {"n": 8, "score": 50.0, "correct": 0.5,
                                 "exact_row_share": 0.1 if a.rows != "none" else 0.0,
                                 "needle_rows_exact": 0.5, "macs_share": 0.6,
                                 "vs_exact": None if a.name == "exact" else iv} for a in arms}}
    loss_iv = {"estimate": 0.25, "low": 0.125, "high": 0.5, "n": 4}
    docs = {"units": 4, "domains": ["a", "b"], "scored_tokens": 1024, "novel_tokens": 900,
            "key_tokens": 12,
            "arms": {a.name: {"n": 4, "dnll_all": loss_iv, "dnll_novel": loss_iv,
                              "dnll_key": None, "agreement": 0.75, "kl_mean": 0.5}
                     for a in arms if not a.blind}}
    rep = {"needles": needles, "documents": docs,
           "meta": {"sample_sets": {"t/2048": {"kept": 8, "drawn": 30},
                                    "docs": {"kept": 4, "domains": ["a", "b"]}}},
           "contrasts": [{"a": "ridge+combined@11", "b": "ridge@11", "retrieval": iv}]}
    timing = {a.name: {"prefill": 1.0, "replay": 0.9 if a.selects else None,
                       "macs_share": 0.6} for a in arms}
    meta = {"model": "m", "split": 11, "tail": 512, "lengths": [2048], "tasks": ["t"],
            "seed": 0, "command": "c", "wall_seconds": 1.0, "timing_seconds": 1.0,
            "device": "cpu", "threads": 1, "maps": "x", "samples_asked": 10, "docs": 4,
            "loss_length": 2048, "strata": ["t/2048"], "timing_units": 1, "timing_length": 2048,
            "notes": []}
    summ = st.summarize(rep, timing, arms, meta)
    json.dumps(summ)
    assert summ["checks"]["ridge+combined@11"]["vs_ridge"] == iv and summ["samples"] == 8
    assert summ["checks"]["ridge+combined@11"]["vs_random"] is None  # not in the report
    assert summ["default"] == summ["ranking"][0]["arm"]
    md = st.markdown(summ)
    assert summ["partial"] and summ["short_cells"] == ["t/2048"]  # 8 kept of 10 asked
    assert "PARTIAL" in md and "ridge+combined@11/random" in md
    assert ("| `ridge+combined@11` | 4 | 0.250 [0.125, 0.500] | 0.250 [0.125, 0.500] | - | 0.75 |"
            " 0.500 |") in md
    assert [r["arm"] for r in summ["loss"]] == [a.name for a in arms if not a.blind]
    st.plot(summ, tmp_path / "p.png")
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_study_grid_follows_the_issue():
    """Issue 9's grid on both built-in models: primary split (3/8 of depth), tail 512, the
    asked lengths and tasks, and a scored stretch that fits inside the tail."""
    from types import SimpleNamespace

    args = st.build_parser().parse_args(["--docs", "3", "--samples", "5"])
    for name, layers, split, chat in (("smollm2-135m", 30, 11, True), ("gemma3-270m", 18, 7, False)):
        tok = SimpleNamespace(chat_template="{{ messages }}" if chat else None)  # as installed
        preset, cfg = st.study_config(SimpleNamespace(name=name, n_layers=layers,
                                                      tokenizer=tok), args)
        assert cfg.splits == (split,) and preset.splits[0] == split
        assert cfg.tail == 512 and cfg.samples == 5 and cfg.docs == 3 and cfg.chat is chat
        assert set(cfg.needles) == {2048, 4096}
        assert cfg.needles[4096] == ("niah_single_1", "niah_multikey_1")
        assert 0 < cfg.score_tokens <= cfg.tail // 2 and cfg.key_window > 0
        assert cfg.instruments == ("needle", "loss")
    no_docs = st.build_parser().parse_args(["--docs", "0"])
    _, cfg = st.study_config(SimpleNamespace(name="smollm2-135m", n_layers=30,
                                             tokenizer=SimpleNamespace(chat_template="x")), no_docs)
    assert cfg.instruments == ("needle",)
    for template in (None, "{{ messages }}"):  # any other model: chat prompts iff it has a template
        _, cfg = st.study_config(SimpleNamespace(name="local", n_layers=8,
                                                 tokenizer=SimpleNamespace(chat_template=template)),
                                 no_docs)
        assert cfg.chat is (template is not None) and cfg.splits == (3,)
    _, cfg = st.study_config(SimpleNamespace(name="gemma3-270m", n_layers=18,  # a base model's
                                             tokenizer=SimpleNamespace(chat_template="x")), no_docs)
    assert cfg.chat is False  # preset: completion prompts, whatever the tokenizer carries


def test_default_rule_ranks_qualified_selectors_first():
    """Share over 10% or retrieval more than 5 points under exact disqualifies; ties on
    retrieval go to the lower key-token loss, then to the cheaper prefill."""
    def row(arm, share, score, gap, macs):
        return {"arm": arm, "exact_row_share": share, "retrieval": score, "macs_share": macs,
                "vs_exact": {"estimate": gap}}
    rows = [row("exact", None, 100.0, None, 1.0), row("ridge@11", 0.0, 0.0, -100.0, 0.6),
            row("ridge+probe@11", 0.5, 100.0, 0.0, 0.8),        # too many rows
            row("ridge+attention@11", 0.1, 90.0, -10.0, 0.65),  # too far from exact
            row("ridge+lexical@11", 0.02, 100.0, 0.0, 0.61),
            row("ridge+combined@11", 0.1, 100.0, 0.0, 0.65),
            row("ridge+combined@11/random", 0.1, 0.0, -100.0, 0.65)]
    loss = [{"arm": "ridge+lexical@11", "dnll_key": {"estimate": 0.9}},
            {"arm": "ridge+combined@11", "dnll_key": {"estimate": 0.4}}]
    ranking = st.rank_selectors({"rows": rows, "loss": loss})
    assert [r["arm"] for r in ranking] == ["ridge+combined@11", "ridge+lexical@11",
                                           "ridge+probe@11", "ridge+attention@11"]
    assert [r["qualifies"] for r in ranking] == [True, True, False, False]
    no_loss = st.rank_selectors({"rows": rows, "loss": []})
    assert [r["arm"] for r in no_loss][:2] == ["ridge+lexical@11", "ridge+combined@11"]


def test_end_to_end_on_a_local_model_and_reuse_timing(tmp_path):
    """A model given as a folder (a tokenizer without a chat template: plain prompts) runs the
    whole study; its summary lands beside the harness's report under ``--out-dir``, and
    ``--reuse-timing`` rebuilds it keeping the measured timing (refused without one)."""
    import pytest
    import torch
    from gpu_fixtures import tiny_dir

    model = tiny_dir("llama", 3)
    before = sorted(p.name for p in model.iterdir())
    args = ["--models", str(model), "--samples", "1", "--lengths", "1024", "--tasks",
            "niah_single_1", "--tail", "128", "--docs", "0", "--timing-units", "1",
            "--out-dir", str(tmp_path), "--quiet"]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert st.main(args) == 0
        root = tmp_path / model.name
        first = json.loads((root / "summary.json").read_text())
        assert (root / "report.json").is_file() and (root / "summary.md").is_file()
        assert sorted(p.name for p in model.iterdir()) == before  # nothing written beside the model
        assert first["model"] == model.name and set(first["timing"]) >= {"exact", f"ridge@{first['split']}"}
        assert st.main(args + ["--reuse-timing"]) == 0
        again = json.loads((root / "summary.json").read_text())
        assert again["timing"] == first["timing"]
        assert again["timing_command"] == first["command"]
        assert "summary rebuilt by" in again["command"] and "--reuse-timing" in again["command"]
        del again["timing_command"]
        (root / "summary.json").write_text(json.dumps(again))
        with pytest.raises(SystemExit, match="holds no timing"):
            st.main(args + ["--reuse-timing"])
    finally:
        torch.set_num_threads(threads)
