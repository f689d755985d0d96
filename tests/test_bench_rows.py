"""The exact-row cost of ``ridgefill bench`` (issue 21): sigma is the slope of time against the
row count, and a noise-level or negative slope is "not resolved", never a break-even of 0."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu.lab.tools.bench import row_cost

ARMS = {0: "r0", 10: "r10", 20: "r20", 40: "r40"}


def test_sigma_is_the_slope_when_every_repeat_agrees():
    # tau(E) = 2 + 0.01 E (+ a small per-repeat offset): slope 0.01 in every repeat
    times = {name: [2 + 0.01 * e + 0.001 * r for r in range(5)] for e, name in ARMS.items()}
    got = row_cost(times, ARMS)
    assert got["resolved"] and got["sigma_seconds"] == pytest.approx(0.01)
    assert got["range"][0] == pytest.approx(0.01) and got["rows"] == [0, 10, 20, 40]


def test_noise_level_sigma_is_not_resolved():
    # one repeat's slope is negative (noise larger than the rows' cost)
    times = {name: [2 + 0.001 * e, 2 - 0.002 * e, 2 + 0.001 * e] for e, name in ARMS.items()}
    got = row_cost(times, ARMS)
    assert not got["resolved"] and got["sigma_seconds"] is None
    assert got["range"][0] < 0 < got["range"][1]


def one_thread(bench_model, *args, **kw):
    """``bench_model``'s records, run on one torch thread (the thread count restored after)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return list(bench_model(*args, **kw))
    finally:
        torch.set_num_threads(before)


def test_no_row_counts_is_not_resolved():
    assert row_cost({"r0": [1.0]}, {0: "r0"})["resolved"] is False


def test_bench_times_every_arm_and_reports_their_ratios():
    """One round of the benchmark on the smollm2 shape with random weights (300 tokens): every
    arm is timed and measured, and the reported ratios are those of the medians."""
    from gpu.lab.tools.bench import bench_model

    (rec,) = one_thread(bench_model, "smollm2-135m", [300], repeats=1, random_weights=True,
                        split=11, tail=64, rows_probe=False)
    med = rec["median_seconds"]
    assert set(med) == {"exact", "ridgefill", "ridgefill-other-order", "pop"}
    assert set(rec["peak_extra_bytes"]) == set(med)
    assert rec["speedup"] == med["exact"] / med["ridgefill"]
    # on the CPU the default writes layer by layer; the other arm is the batched fill
    assert rec["fill_order"]["default"] == "layer"
    assert rec["fill_order"]["batched_over_per_layer"] == med["ridgefill"] / med["ridgefill-other-order"]
    assert rec["pop"]["ridgefill_over_pop"] == med["pop"] / med["ridgefill"]
    assert rec["share_of_mac_ceiling"] == rec["speedup"] / rec["ceiling_macs"]
    assert rec["rows_probe"]["resolved"] is False and rec["rows_probe"]["sigma_seconds"] is None


def test_advised_arm_is_timed_unless_it_is_exact_or_another_arm():
    """The bench's default times each model's advised configuration (gpu.core.advised): none
    beside exact where the advice is exact prefill, the POP arm where the advice is POP's own
    configuration."""
    from gpu.core.config import PrefillConfig
    from gpu.lab.tools.bench import advised_arm

    rf = PrefillConfig(split=20, tail=1, rows="none")
    pop = PrefillConfig(split=20, tail=1, fill="identity", rows="none")
    assert advised_arm("smollm2-135m", rf, pop) == (None, "exact")
    assert advised_arm("gemma3-270m", rf, PrefillConfig(split=12, tail=1, fill="identity",
                                                        rows="none")) == (None, "pop")
    assert advised_arm("not-a-built-in", rf, pop) == (None, None)


def test_speed_configuration_is_labelled_with_its_measured_retrieval(tmp_path):
    """The bench reads what the committed frontier measured for the RidgeFill arm it times
    (the ridge fill at its split and tail, no rows), from the larger of two samples, and says
    nothing where no frontier ran that configuration."""
    import json

    from gpu.lab.tools.bench import measured_retrieval

    def frontier(root, rows):
        (tmp_path / root / "m").mkdir(parents=True)
        (tmp_path / root / "m" / "frontier.json").write_text(json.dumps({"rows": rows}))

    frontier("power", [{"arm": "ridge@15/t1024", "retrieval": 2.5, "n": 120},
                       {"arm": "ridge+lexical@15/t1024", "retrieval": 90.0, "n": 200}])
    frontier("frontier", [{"arm": "ridge@15/t1024", "retrieval": 0.0, "n": 40},
                          {"arm": "ridge@15/t1", "retrieval": 75.0, "n": 40}])
    roots = (tmp_path / "power", tmp_path / "frontier")
    got = measured_retrieval("m", 15, 1024, roots)
    assert got == {"retrieval": 2.5, "n": 120, "source": str(tmp_path / "power/m/frontier.json")}
    assert measured_retrieval("m", 15, 1, roots)["retrieval"] == 75.0
    assert measured_retrieval("m", 14, 1024, roots) is None
    assert measured_retrieval("other", 15, 1024, roots) is None


def test_bench_times_the_advised_kv_fill_at_its_own_price(monkeypatch):
    """A model advised to a fill the ridgefill arm does not run (here the direct cache-entry
    maps) gets an "advised" arm, timed in the same rounds with maps of its own kind and
    priced by its own MAC ceiling (rfmath.cost: the kv fill costs what the identity fill
    does)."""
    from gpu.core import advised
    from gpu.lab.tools.bench import bench_model
    from rfmath.cost import speedup_ceiling

    monkeypatch.setitem(advised.ADVISED, "smollm2-135m",
                        {"fill": "kv", "split": 20, "tail": 1, "rows": "none"})
    (rec,) = one_thread(bench_model, "smollm2-135m", [300], repeats=1, random_weights=True,
                        split=11, tail=64, rows_probe=False, other_order=False)
    med, a = rec["median_seconds"], rec["advised"]
    assert set(med) == {"exact", "ridgefill", "pop", "advised"}
    assert a["config"]["fill"] == "kv" and a["speedup"] == med["exact"] / med["advised"]
    from gpu.core.archspec import arch_of
    from gpu.core.models import random_model
    arch = arch_of(random_model("smollm2-135m", "cpu").model.config)
    assert a["ceiling_macs"] == speedup_ceiling(arch, 300, 20, 1, E=0, arm="identity")
    assert a["ceiling_macs"] == rec["pop"]["ceiling_macs"]


@pytest.mark.slow
def test_bench_times_the_compiled_walk_beside_the_eager_one():
    """``--compile`` adds the torch.compile arm (gpu.core.compiled), warmed up untimed, and
    reports its ratios from the medians (split 28 of 30: two late layers to compile)."""
    from gpu.lab.tools.bench import bench_model

    (rec,) = one_thread(bench_model, "smollm2-135m", [200], repeats=1, random_weights=True,
                        split=28, tail=32, rows_probe=False, compile=True)
    med = rec["median_seconds"]
    assert "ridgefill-compiled" in med and "ridgefill-compiled" in rec["peak_extra_bytes"]
    assert rec["compiled"] == {"speedup": med["exact"] / med["ridgefill-compiled"],
                               "over_eager": med["ridgefill"] / med["ridgefill-compiled"]}


def test_bench_writes_each_record_and_resumes_without_retiming(tmp_path, monkeypatch):
    """bench.json holds every record as soon as it is measured; ``resume`` keeps the records
    measured with the same settings (not timed again: ``_timed`` fails if called), a resumed
    run at another length keeps the file's other records, and the ``--no-other-order`` run has
    no other-order arm."""
    import json

    import torch

    from gpu.core.models import default_device
    from gpu.lab.tools import bench
    from gpu.lab.tools.bench_options import BenchOptions

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    kw = dict(models=("smollm2-135m",), lengths=(96,), repeats=1, random_weights=True,
              split=28, tail=16, rows_probe=False, other_order=False, out_dir=tmp_path)
    out = tmp_path / default_device().type
    try:
        assert bench.run(BenchOptions(**kw)) == 0
        first = json.loads((out / "bench.json").read_text())
        assert first["complete"] is True
        (rec,) = first["records"]
        assert set(rec["median_seconds"]) == {"exact", "ridgefill", "pop"}
        assert rec["fill_order"] is None

        def no_timing(*a, **k):
            raise AssertionError("a kept record was timed again")

        monkeypatch.setattr(bench, "_timed", no_timing)
        assert bench.run(BenchOptions(resume=True, **kw)) == 0
        again = json.loads((out / "bench.json").read_text())
        assert again["records"] == first["records"]
        with pytest.raises(AssertionError, match="timed again"):   # other settings: timed
            bench.run(BenchOptions(resume=True, **{**kw, "tail": 8}))
        monkeypatch.undo()
        assert bench.run(BenchOptions(resume=True, **{**kw, "lengths": (64,)})) == 0
        narrower = json.loads((out / "bench.json").read_text())   # a rerun at another length
        assert narrower["records"][0] == rec                       # keeps the first record
        assert [r["n"] for r in narrower["records"]] == [96, 64]
        assert [(r["command"], r["machine"]) for r in narrower["records"]] == [
            (first["command"], first["machine"]), (narrower["command"], narrower["machine"])]
    finally:
        torch.set_num_threads(before)


def test_exact_in_passes_is_the_one_pass_forward_and_timed_above_the_chunk():
    """The chunked exact arm (the stock forward in passes of ``chunk`` rows over one cache)
    gives the one-pass forward's last logits up to float rounding, and the bench times it
    beside the others only when the prompt is longer than the chunk (never with ``chunk=0``,
    one lower-layer pass)."""
    import torch

    from gpu.core import models
    from gpu.lab.tools.bench import bench_model, exact_in_passes

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lm = models.random_model("smollm2-135m", "cpu")
        ids = torch.randint(0, lm.model.config.vocab_size, (1, 150),
                            generator=torch.Generator().manual_seed(3))
        with torch.inference_mode():
            one = lm.model(input_ids=ids).logits[0, -1]
        for chunk in (64, 150, 1000):
            torch.testing.assert_close(exact_in_passes(lm.model, ids, chunk).last_logits, one,
                                       rtol=1e-4, atol=1e-4)
        (rec,) = bench_model("smollm2-135m", [96], repeats=1, random_weights=True, split=28,
                             tail=16, rows_probe=False, other_order=False, chunk=64)
        (short,) = bench_model("smollm2-135m", [96], repeats=1, random_weights=True, split=28,
                               tail=16, rows_probe=False, other_order=False, chunk=128)
        (one_pass,) = bench_model("smollm2-135m", [96], repeats=1, random_weights=True,
                                  split=28, tail=16, rows_probe=False, other_order=False, chunk=0)
    finally:
        torch.set_num_threads(before)
    med = rec["median_seconds"]
    assert set(med) == {"exact", "exact-chunked", "ridgefill", "pop"} and rec["chunk"] == 64
    ch = rec["exact_chunked"]
    assert ch["speedup"] == med["exact-chunked"] / med["ridgefill"]
    assert ch["share_of_mac_ceiling"] == ch["speedup"] / rec["ceiling_macs"]
    assert "exact-chunked" not in short["median_seconds"] and short["exact_chunked"] is None
    assert one_pass["chunk"] == 0 and one_pass["exact_chunked"] is None   # --chunk 0: one pass
    assert set(one_pass["median_seconds"]) == {"exact", "ridgefill", "pop"}


def _rec(model: str, n: int, tail: int, seconds: float) -> dict:
    return {"model": "m" + model, "n": n, "split": 3, "tail": tail, "repeats": 2,
            "median_seconds": {"exact": seconds, "ridgefill": seconds / 2}}


RECORDS = st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from([64, 96]),
                             st.sampled_from([1, 8]), st.floats(0.1, 9)), max_size=8)


@given(RECORDS, RECORDS)
def test_merged_keeps_every_prior_measurement_this_run_did_not_redo(old, new):
    """``merged`` (a resumed bench.json): every record of this run, in order, after the prior
    records whose measurement (model, length, settings, arms) this run did not make; a prior
    record is dropped only for a new one with its key."""
    from gpu.lab.tools.bench_records import merged, record_key

    prior, records = [_rec(*t) for t in old], [_rec(*t) for t in new]
    out = merged(prior, records)
    assert out[len(out) - len(records):] == records
    redone = {record_key(r) for r in records}
    assert out[:len(out) - len(records)] == [r for r in prior if record_key(r) not in redone]
    assert {record_key(r) for r in out} == {record_key(r) for r in prior} | redone
