"""Issue 57's tiered arms in the frontier grid (gpu.lab.eval.frontier, ``--tiered``): they exist
only when asked, their configurations are what their names say, the split placeholders of
``keep`` resolve, the paper grid is unchanged without them, and each arm's MAC share counts
the exact rows it selected and the selector's own scores (rfmath.cost's closed form)."""
from __future__ import annotations

import re
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from rfmath import cost

from gpu.core.config import PrefillConfig
from gpu.core.plan import Plan
from gpu.lab.eval import frontier as fr
from gpu.lab.eval.instruments import Arm, Session, ranking_macs
from gpu.lab.eval.options import TIERED_FILLS, FrontierOptions

NAME = re.compile(r"^(?P<keys>[a-z]+)(?:\.(?P<values>[a-z]+)-values)?\+attn(?P<pct>\d+)"
                  r"(?P<c>c?)@(?P<split>\d+)/t(?P<tail>\d+)$")


def names(f: fr.Frontier) -> list[str]:
    return [a.name for a in f.arms()]


@pytest.mark.parametrize("layers", [8, 24, 28, 30])
def test_tiered_arms_exist_only_when_asked(layers):
    plain = names(fr.Frontier(layers))
    assert not any("attn" in n for n in plain)
    assert names(fr.Frontier(layers, tiered=False)) == plain
    both = fr.Frontier(layers, tiered=True)
    got = names(both)
    assert got[: len(plain)] == plain  # the paper grid first, unchanged, then the tiered arms
    tiered = got[len(plain):]
    assert len(tiered) == len(set(tiered)) == 4 * 3 * 3 * 2 and all(NAME.match(n) for n in tiered)
    assert [a.name for a in both.arms() if both.is_tiered(a)] == tiered
    assert not any(fr.Frontier(layers).is_tiered(a) for a in both.arms())
    # the maps' kinds and the other pairs of the grid do not move
    assert fr.Frontier(layers).kinds == both.kinds
    assert fr.Frontier(layers).fill_pairs(both.arms()) == fr.Frontier(layers).fill_pairs(
        fr.Frontier(layers).arms())


def test_the_names_say_the_configuration():
    f = fr.Frontier(24, tiered=True)
    assert f.tiered_splits == (8, 12, 14, 16) and fr.Frontier(28).tiered_splits == (9, 14, 16, 19)
    seen = set()
    for a in f.arms():
        if not f.is_tiered(a):
            continue
        m = NAME.match(a.name)
        cfg = a.config
        assert cfg.fill == m["keys"] and cfg.values_fill is None and m["values"] is None
        assert cfg.split == int(m["split"]) and cfg.tail == int(m["tail"]) == 1
        assert cfg.rows == "attention" and a.rows == "attention"
        assert a.options == (("complete", m["c"] == "c"), ("share", int(m["pct"]) / 100))
        assert cfg.rescale is None and a.splice is None and a.control is None
        seen.add((cfg.split, cfg.fill, int(m["pct"]), m["c"] == "c"))
    assert seen == {(s, fill, k, c) for s in (8, 12, 14, 16) for fill in ("kv", "ridge", "none")
                    for k in (10, 20, 30) for c in (False, True)}
    by = {a.name: a for a in f.arms()}
    kv = by["kv+attn20c@12/t1"].config
    assert (kv.fill, kv.split, kv.tail, kv.options) == ("kv", 12, 1, {"share": 0.2, "complete": True})
    assert by["none+attn10@16/t1"].config.options == {"share": 0.1, "complete": False}
    assert by["none+attn10@16/t1"].config.map_kinds == ()  # the drop arm reads no maps
    # the selector the engine builds from the configuration is the attention one at that share
    from gpu.core import select
    sel = select.make(kv.rows, **kv.options)
    assert isinstance(sel, select.AttentionRows) and sel.share == 0.2 and sel.complete
    assert sel.window == 64


def test_an_arms_name_parses_back_to_its_configuration():
    """grid.parse_arm (the bench's --tiered) inverts every tiered arm's name, two-source kinds
    too, and refuses a name it cannot read."""
    from gpu.lab.eval.grid import parse_arm
    for layers, fills in ((24, ("kv", "ridge", "none", "kv.identity")), (28, ("identity.kv",))):
        f = fr.Frontier(layers, tiered=True, tiered_fills=fills)
        tiered = [a for a in f.arms() if f.is_tiered(a)]
        assert len(tiered) == 4 * 3 * 2 * len(fills)
        for a in tiered:
            assert parse_arm(a.name) == a.config, a.name
    assert parse_arm("kv.identity-values@16") == PrefillConfig(
        fill="kv", values_fill="identity", split=16, tail=1, rows="none")
    for bad in ("kv+attn20c", "kv@12/tx", "KV@12"):
        with pytest.raises(ValueError, match="spell it"):
            parse_arm(bad)


def test_two_source_fills_and_the_arm_name():
    f = fr.Frontier(24, tiered=True, tiered_fills=("kv.identity", "identity"))
    by = {a.name: a for a in f.arms() if f.is_tiered(a)}
    a = by["kv.identity-values+attn30@14/t1"]
    assert (a.fill, a.values_fill, a.config.map_kinds) == ("kv", "identity", ("kv",))
    assert by["identity+attn10c@8/t1"].config.fill == "identity"
    assert len(by) == 4 * 2 * 3 * 2
    assert fr.arm_name("kv", 12, 1, "attention", share=0.2, complete=True) == "kv+attn20c@12/t1"
    assert fr.arm_name("kv", 12, 1, "attention", "identity", 0.1) == \
        "kv.identity-values+attn10@12/t1"
    assert fr.arm_name("ridge", 5, 512, "lexical") == "ridge+lexical@5/t512"  # as before
    with pytest.raises(ValueError, match="share"):
        fr.arm_name("kv", 12, 1, "lexical", share=0.2)
    with pytest.raises(ValueError, match="whole percent"):
        fr.arm_name("kv", 12, 1, "attention", share=0.125)
    for bad in ("exact", "kv.kv", "kv.none", "magic"):
        with pytest.raises(ValueError, match="keys.values"):
            fr.Frontier(24, tiered=True, tiered_fills=(bad,))
        with pytest.raises(ValueError, match="keys.values"):
            FrontierOptions(tiered_fills=(bad,))
    assert FrontierOptions(tiered_fills=("kv.identity", "none")).tiered_fills


def test_placeholders_resolve_and_cuts_leave_the_tiered_arms_alone():
    keep = ("kv+attn20c@{half}/t1", "none+attn*@{third}/t1", "ridge+attn10@{seven12}/t1",
            "kv.identity-values@{pop}/t1", "ridge@{deep}/t1")
    f = fr.Frontier(24, tiered=True, keep=keep)
    assert f.placeholders() == {"third": 8, "half": 12, "seven12": 14, "deep": 15, "pop": 16}
    assert names(f) == ["exact", "pop@16", "ridge@15/t1", "kv.identity-values@16/t1",
                        "none+attn10@8/t1", "none+attn10c@8/t1", "none+attn20@8/t1",
                        "none+attn20c@8/t1", "none+attn30@8/t1", "none+attn30c@8/t1",
                        "kv+attn20c@12/t1", "ridge+attn10@14/t1"]
    # the Qwen models' cuts ('*+*': no rows in the paper grid) leave every tiered arm
    cut = fr.Frontier(24, tiered=True, cut=fr.CUTS["qwen2.5-coder-0.5b"])
    got = names(cut)
    assert sum(n.count("+attn") for n in got) == 72
    assert not any("+" in n for n in got if "+attn" not in n)
    assert names(fr.Frontier(24, cut=fr.CUTS["qwen2.5-coder-0.5b"])) == \
        [n for n in got if "+attn" not in n]


def test_pairs_and_tests_of_the_tiered_arms():
    f = fr.Frontier(24, tiered=True, keep=("*+attn20c@{half}/t1", "kv.identity-values@{pop}/t1"))
    arms = f.arms()
    assert [a.name for a in arms] == ["exact", "pop@16", "kv.identity-values@16/t1",
                                      "kv+attn20c@12/t1", "ridge+attn20c@12/t1",
                                      "none+attn20c@12/t1"]
    assert f.references(arms) == ["kv.identity-values@16/t1"]
    pairs = f.tiered_pairs(arms)
    assert ("kv+attn20c@12/t1", "none+attn20c@12/t1") in pairs
    assert ("ridge+attn20c@12/t1", "none+attn20c@12/t1") in pairs
    assert ("none+attn20c@12/t1", "kv.identity-values@16/t1") in pairs
    assert len(pairs) == 2 + 3
    tiered = ("kv+attn20c@12/t1", "ridge+attn20c@12/t1", "none+attn20c@12/t1")
    assert f.tiered_tests(arms) == [(a, "kv.identity-values@16/t1", 3.0) for a in tiered] + [
        (a, "exact", 5.0) for a in tiered]
    assert ("kv+attn20c@12/t1", "pop@16") in f.pairs(arms)  # every arm against POP, as before
    assert fr.Frontier(24).tiered_pairs(fr.Frontier(24).arms()) == []


def _loaded(name: str, layers: int):
    return SimpleNamespace(name=name, n_layers=layers,
                           tokenizer=SimpleNamespace(chat_template="{{ x }}"))


@pytest.mark.parametrize("name,layers,plain,tiered", [
    ("qwen2.5-coder-0.5b", 24, (12, 15, 16), (8, 12, 14, 15, 16)),
    ("qwen2.5-coder-1.5b", 28, (14, 18, 19), (9, 14, 16, 18, 19))])
def test_the_screen_grid_and_its_maps(name, layers, plain, tiered):
    """The RULER screen's options: without --tiered the maps' splits (hence their file names)
    are the RULER run's; with it, the tiered splits join them."""
    o = FrontierOptions(models=(name,), suite="ruler", lengths=(4096,), docs=0, samples=6,
                        tails=(1, 1024), timing_units=0)
    cfg, f = fr.frontier_config(_loaded(name, layers), o)
    assert cfg.splits == plain and not any(f.is_tiered(a) for a in f.arms())
    cfg, f = fr.frontier_config(_loaded(name, layers), replace(o, tiered=True,
                                                               keep=("*+attn*",)))
    assert cfg.splits == tiered and cfg.samples == 6
    arms = f.arms()
    assert len(arms) == 2 + 72 and {a.split for a in arms[2:]} == set(f.tiered_splits)
    assert f.kinds == ("ridge", "kv")


def test_the_cli_flags():
    from gpu.cli import build_parser, options_from_args
    a = build_parser().parse_args(["eval", "frontier", "--tiered", "--tiered-fills", "kv",
                                   "none", "kv.identity", "--keep", "*+attn*@{third}/t1"])
    o = options_from_args(a, FrontierOptions)
    assert o.tiered and o.tiered_fills == ("kv", "none", "kv.identity")
    assert o.keep == ("*+attn*@{third}/t1",)
    o = options_from_args(build_parser().parse_args(["eval", "frontier"]), FrontierOptions)
    assert not o.tiered and o.tiered_fills == TIERED_FILLS


# ----------------------------------------------------------------------------- cost
ARCH = cost.Arch(n_layers=8, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128,
                 vocab=100)


def _share(arm: Arm, plan: Plan, n: int) -> float:
    return Session.macs_share(SimpleNamespace(arch=ARCH), arm, SimpleNamespace(plan=plan), n)


@pytest.mark.parametrize("fill,kind", [("kv", "kv"), ("ridge", "ridgefill"), ("none", "nofill"),
                                       ("identity", "identity")])
def test_mac_share_counts_the_selection(fill, kind):
    """A tiered arm's MAC share is rfmath.cost's closed form with the E exact prefix rows it
    selected, plus the attention selector's scores: at split 5 it reads layer 3 alone, the
    last 64 rows' queries (64 * d * H*D) over the keys up to each (H*D a key, rows 136..199
    reading 137..200 keys: 10,784 keys)."""
    n, split, E = 200, 5, 40
    arm = Arm("t", PrefillConfig(fill=fill, split=split, tail=1, rows="attention",
                                 selector_options={"share": 0.2, "complete": True}))
    plan = Plan(n, split, 1, 8).with_rows(np.arange(0, 2 * E, 2))
    exact = cost.macs(ARCH, n, arm="exact")
    q = ARCH.n_heads * ARCH.head_dim
    scores = 64 * ARCH.d_model * q + q * sum(range(137, 201))
    assert sum(range(137, 201)) == 10_784
    assert ranking_macs(ARCH, n, split, 64) == scores
    want = (cost.macs(ARCH, n, S=split, T=1, E=E, arm=kind) + scores) / exact
    assert _share(arm, plan, n) == pytest.approx(want, rel=1e-12)
    # the exact rows are charged: each one moves the share by the closed form's difference
    bare = Plan(n, split, 1, 8)
    assert _share(arm, plan, n) - _share(arm, bare, n) == pytest.approx(
        (cost.macs(ARCH, n, S=split, T=1, E=E, arm=kind)
         - cost.macs(ARCH, n, S=split, T=1, E=0, arm=kind)) / exact, rel=1e-9)
    assert _share(arm, plan, n) > _share(arm, bare, n) > 0
    # the same rows without a selector (fixed rows, a control) pay no scores
    plain = Arm("p", PrefillConfig(fill=fill, split=split, tail=1, rows="none"))
    assert _share(plain, plan, n) == pytest.approx(
        cost.macs(ARCH, n, S=split, T=1, E=E, arm=kind) / exact, rel=1e-12)


def test_ranking_reads_the_reference_layers_below_the_split():
    q = ARCH.n_heads * ARCH.head_dim
    one = 64 * ARCH.d_model * q + q * sum(range(137, 201))
    assert ranking_macs(ARCH, 200, 2, 64) == one       # the layer below the split: 1
    assert ranking_macs(ARCH, 200, 7, 64) == 1 * one   # layer 3 (7 is not below 7)
    assert ranking_macs(ARCH, 200, 8, 64) == 2 * one   # layers 3 and 7
    assert ranking_macs(ARCH, 30, 4, 64) == 30 * ARCH.d_model * q + q * sum(range(1, 31))
    sliding = replace(ARCH, layer_types=("attention",) * 7 + ("sliding",), sliding_window=16)
    assert ranking_macs(sliding, 200, 8, 64) == one    # layer 7 slides: the selector skips it
    local = replace(ARCH, layer_types=("sliding",) * 2 + ("attention",) * 6, sliding_window=16)
    assert ranking_macs(local, 200, 3, 64) == one      # layer 2 is the one it reads
    # on qwen2.5-coder-0.5b's shape at RULER's 4K (3,710 tokens) the scores are nearly free:
    # under 0.1% of exact prefill at POP's split (4 layers read), where POP's ceiling is 1.49x
    qwen = cost.Arch(n_layers=24, d_model=896, n_heads=14, n_kv_heads=2, head_dim=64,
                     d_ff=4864, vocab=151936)
    exact = cost.macs(qwen, 3710, arm="exact")
    assert ranking_macs(qwen, 3710, 16, 64) / exact < 1e-3
    assert exact / cost.macs(qwen, 3710, S=16, T=1, arm="identity") == pytest.approx(1.49, abs=0.01)


# ----------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from gpu_fixtures import mini_llama
    yield from mini_llama(tmp_path_factory.mktemp("tiered"))


def _needle_records(root) -> list[dict]:
    import json
    recs = [json.loads(line) for line in (root / "records.jsonl").open()]
    return [r for r in recs if r.get("instrument") == "needle"]


@pytest.mark.slow
def test_tiered_arms_run_through_the_harness(tiny, tmp_path, monkeypatch):
    """The drop arm (fill none) with attention rows, which gpu.press.prefill refuses, runs
    in the harness (its filled rows hidden from decoding); every tiered arm journals its
    selected rows and its MAC share, and frontier.md carries the tiered table. More arms than
    a decoding batch holds decode in several batches, with the answers of one."""
    from gpu_fixtures import MINI_FIT_KW
    from gpu.lab.eval import instruments, minimodel

    o = FrontierOptions(models=(tiny["loaded"].name,), out_dir=tmp_path / "t", samples=1,
                        docs=0, lengths=(512,), tails=(1, 96), seed=0, timing_units=0,
                        loss_length=256, instruments=("needle",), tiered=True,
                        keep=("*+attn20c@{half}/t1", "kv@{pop}/t1"))

    def run(**kw):
        return fr.run(replace(o, **kw), progress=False, loaded=tiny["loaded"],
                      texts=minimodel.SyntheticTexts(), fit_kw=MINI_FIT_KW, calib=tiny["calib"])

    [s] = run()
    root = tmp_path / "t" / tiny["loaded"].name
    recs = _needle_records(root)
    monkeypatch.setattr(instruments, "DECODE_SLOTS", 2)  # six arms: three batches
    run(out_dir=tmp_path / "two", maps_from=tmp_path / "t")
    two = _needle_records(tmp_path / "two" / tiny["loaded"].name)
    answer = {(r["arm"], r["unit"]): r["answer"] for r in recs}
    assert {(r["arm"], r["unit"]): r["answer"] for r in two} == answer
    assert all(r["decode_seconds"] > 0 for r in two)
    want = {"kv+attn20c@4/t1", "ridge+attn20c@4/t1", "none+attn20c@4/t1"}
    by = {}
    for r in recs:
        by.setdefault(r["arm"], []).append(r)
    assert want | {"exact", "pop@6", "kv@6/t1"} == set(by)
    for name in want:
        for r in by[name]:
            assert r["exact_prefix"] >= 0.2 * (r["n"] - 1) - 1 and r["filled"] > 0
            assert 0 < r["macs_share"] < 1
    t = s["tiered"]
    assert [r["arm"] for r in t["rows"]] == ["kv+attn20c@4/t1", "ridge+attn20c@4/t1",
                                             "none+attn20c@4/t1"]
    assert list(t["references"]) == ["kv@6/t1"]
    kv = t["rows"][0]
    assert kv["dropped"] == "none+attn20c@4/t1" and kv["vs_dropped"] is not None
    assert kv["vs_reference"]["kv@6/t1"]["noninferior"]["margin"] == 3.0
    assert kv["noninferior_exact"]["margin"] == 5.0
    assert kv["mac_ceiling"] == pytest.approx(1 / kv["macs_share"])
    assert t["rows"][2]["vs_dropped"] is None  # the drop arm has no twin of its own
    md = (root / "frontier.md").read_text()
    assert "## Tiered prefill" in md and "`none+attn20c@4/t1`" in md


def _row(arm, ceiling, vs_advised=None, vs_exact=None):
    from gpu.lab.eval.grid import parse_arm
    cfg = parse_arm(arm)
    o = cfg.options
    iv = (lambda e: None if e is None else {"estimate": e, "low": e - 5, "high": e + 5})
    return {"arm": arm, "split": cfg.split, "fill": cfg.fill, "values_fill": cfg.values_fill,
            "share": o["share"], "complete": o["complete"], "mac_ceiling": ceiling,
            "vs_exact": iv(vs_exact),
            "vs_reference": {"kv.identity-values@16/t1": {"retrieval": iv(vs_advised)}}}


def test_the_finalists_follow_the_rule_stated_before_the_screen():
    """Prediction 2: the three best against the advised fill among ceilings >= 1.05 x POP's
    (ties: the higher ceiling); prediction 3: the two best against exact at >= 1.8x; prediction
    4: the advised kind's two 10% arms at POP's split. The report names them and the resume."""
    from gpu.lab.eval.frontier_report import tiered_markdown
    from gpu.lab.eval.tiered import finalists
    rows = [_row("kv+attn20c@12/t1", 1.60, -1.0, -9), _row("kv+attn10c@12/t1", 1.58, +2.0, -8),
            _row("ridge+attn30c@12/t1", 1.56, +10.0, -1), _row("kv+attn20@8/t1", 2.0, -5, -3),
            _row("kv+attn10@8/t1", 1.9, -8, -1), _row("none+attn10@8/t1", 1.81, None, -10),
            _row("ridge+attn20c@14/t1", 1.7, -1.0, -7),
            _row("kv.identity-values+attn10c@16/t1", 1.42, 0.0, -4),
            _row("kv.identity-values+attn10@16/t1", 1.44, -1.0, -5),
            _row("kv.identity-values+attn20c@16/t1", 1.36, 1.0, -3)]
    t = {"references": {"kv.identity-values@16/t1": {}}, "pop": {"mac_ceiling": 1.5},
         "pop_split": 16, "rows": rows}
    got = finalists(t)
    assert got == {"prediction 2": ["kv+attn10c@12/t1", "ridge+attn20c@14/t1", "kv+attn20c@12/t1"],
                   "prediction 3": ["kv+attn10@8/t1", "kv+attn20@8/t1"],
                   "prediction 4": ["kv.identity-values+attn10@16/t1",
                                    "kv.identity-values+attn10c@16/t1"]}
    text = "\n".join(tiered_markdown({**t, "finalists": got, "pop": {
        "mac_ceiling": 1.5, "retrieval": 50.0, "vs_exact": None}, "references": {
        "kv.identity-values@16/t1": {"mac_ceiling": 1.49, "retrieval": 60.0, "vs_exact": None}},
        "rows": [{**r, "exact_row_share": 0.1, "macs_share": 1 / r["mac_ceiling"],
                  "retrieval": 50.0, "n": 36, "vs_dropped": None, "noninferior_exact": None}
                 for r in rows]}))
    assert "Finalists by the rule" in text and "--samples 17 --keep" in text
    assert "'kv+attn10c@12/t1'" in text and "'kv.identity-values@16/t1'" in text
    assert finalists(t, moonshot=False)["prediction 3"] == []   # stated for the 1.5B only
    with pytest.raises(ValueError, match="one reference arm"):
        finalists({**t, "references": {"a@16/t1": {}, "b@16/t1": {}}})
