"""The vLLM bench's and profile's own arithmetic, without starting vLLM: the trace's self
times against hand-computed nesting, the ``--arms`` flag, and the refusal of a run with no
stock arm to divide by."""
from __future__ import annotations

import pytest

from gpu import cli
from gpu.lab.tools.bench_options import VLLM_ARMS, BenchOptions
from gpu.lab.tools.profile_vllm import analyse, self_times


def _event(name, ts, dur, tid=1, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 7, "tid": tid}


def test_self_times_subtract_direct_children_per_thread():
    events = [_event("stage", 0, 100, cat="user_annotation"),
              _event("aten::mm", 10, 30), _event("aten::add", 12, 5),   # add inside mm
              _event("aten::mm", 50, 20),
              _event("aten::mm", 0, 1000, tid=2),                       # another thread
              {"ph": "i", "name": "marker", "ts": 5, "pid": 7, "tid": 1},
              _event("gpu_kernel", 0, 999, cat="kernel")]
    own, total = self_times(events)
    assert total["stage"] == pytest.approx(100e-6)
    assert own["stage"] == pytest.approx((100 - 30 - 20) * 1e-6)
    assert own["aten::add"] == pytest.approx(5e-6)
    assert own["aten::mm"] == pytest.approx((30 - 5 + 20 + 1000) * 1e-6)
    assert total["aten::mm"] == pytest.approx(1050e-6)
    assert "marker" not in total and "gpu_kernel" not in total


def test_analysis_of_a_profile():
    rec = {"stock-one-pass": {"wall_seconds": 10.0}, "stock-eager": {"wall_seconds": 12.5},
           "advised": {"wall_seconds": 8.0, "stages_seconds": {
               "ridgefill.lower": 5.0, "ridgefill.fill": 1.0, "ridgefill.exact_rows": 1.5}}}
    a = analyse(rec)
    assert a["stock_compiled_over_eager"] == pytest.approx(0.8)
    assert a["lower_if_compiled_saves_seconds"] == pytest.approx(1.0)
    assert a["outside_stages_seconds"] == pytest.approx(0.5)
    assert a["speedup_measured"] == pytest.approx(1.25)
    assert a["speedup_if_lower_compiled"] == pytest.approx(10 / 7)


def test_arms_flag():
    parser = cli.build_parser()
    opts = cli.options_from_args(parser.parse_args(["bench", "--engine", "vllm", "--arms",
                                                    "stock", "advised"]), BenchOptions)
    assert opts.arms == ("stock", "advised")
    assert cli.options_from_args(parser.parse_args(["bench"]), BenchOptions).arms == VLLM_ARMS
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--arms", "stock", "fast"])


def test_a_run_without_stock_is_refused_before_any_engine_starts():
    pytest.importorskip("vllm")
    from gpu.lab.tools.bench_vllm import bench_model

    with pytest.raises(ValueError, match="--arms must include stock"):
        next(bench_model("qwen2.5-coder-0.5b", [2048], 1, "bfloat16", False, ("advised",)))


def test_records_name_the_processor_and_its_bf16_extensions():
    from gpu.lab.tools.bench_records import cpu

    info = ("processor\t: 0\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16 sse\n"
            "processor\t: 1\nmodel name\t: Some Xeon\nflags\t\t: fpu avx2 avx512f amx_bf16\n")
    assert cpu(info) == "Some Xeon (avx2, avx512f, amx_bf16)"
    assert cpu("model name\t: Old One\nflags\t\t: fpu sse2\n") == (
        "Old One (none of avx2/avx512f/avx512_bf16/amx_bf16)")
    assert cpu().split(" (")[0]  # this machine's has a name


def test_a_resumed_vllm_bench_remeasures_on_another_processor(tmp_path, monkeypatch):
    """``--resume`` keeps a record only for the processor that measured it: bf16 speed
    depends on the processor's extensions, so another processor measures again and both
    records stay."""
    import json

    from gpu.lab.tools import bench_vllm

    measured = []

    def fake_bench(name, lengths, repeats, *rest):
        for n in lengths:
            measured.append((name, n))
            yield {"model": name, "n": n, "repeats": repeats, "median_seconds": {"stock": 1.0}}

    monkeypatch.setattr(bench_vllm, "bench_model", fake_bench)
    opts = BenchOptions(models=("m",), lengths=(64,), repeats=1, out_dir=tmp_path, resume=True,
                        engine="vllm", dtype="bf16")
    for name in ("Xeon A (avx2)", "Xeon A (avx2)", "Xeon B (avx2, amx_bf16)"):
        monkeypatch.setattr(bench_vllm, "cpu", lambda name=name: name)
        bench_vllm.run(opts)
    assert measured == [("m", 64), ("m", 64)]  # the second run on A kept A's record
    records = json.loads((tmp_path / "vllm" / "bench-bfloat16.json").read_text())["records"]
    assert [r["cpu"] for r in records] == ["Xeon A (avx2)", "Xeon B (avx2, amx_bf16)"]


def test_tiered_arms_join_the_vllm_bench_by_name():
    """``--tiered`` adds RidgeFill arms named as the study's (their configurations parsed from
    the names), and a resumed run keeps a record only when it timed the same tiered arms."""
    from gpu.lab.tools import bench_vllm

    opts = cli.options_from_args(cli.build_parser().parse_args(
        ["bench", "--engine", "vllm", "--tiered", "kv+attn20c@12/t1"]), BenchOptions)
    assert opts.tiered == ("kv+attn20c@12/t1",)
    cfgs = bench_vllm.configs("qwen2.5-coder-0.5b", 24, opts.tiered)
    tiered = cfgs["kv+attn20c@12/t1"]
    assert set(cfgs) == {"advised", "pop", "kv+attn20c@12/t1"}
    assert (tiered.fill, tiered.split, tiered.rows, tiered.options) == (
        "kv", 12, "attention", {"share": 0.2, "complete": True})
    rec = {"model": "m", "n": 64, "repeats": 1, "cpu": "c"}
    assert bench_vllm._key({**rec, "tiered": ["kv+attn20c@12/t1"]}) != bench_vllm._key(rec)
    assert bench_vllm._key({**rec, "tiered": ("a",)}) == bench_vllm._key({**rec, "tiered": ["a"]})
