"""Smoke run of the kernel bench (rfmodel.bench) at toy sizes: every case reports a ratio."""
import io
import json

import pytest

from rfmodel.bench import run_kernel_bench


@pytest.mark.slow
def test_run_kernel_bench_quick_reports_every_case(tmp_path):
    buf = io.StringIO()
    results = run_kernel_bench(quick=True, file=buf, json_path=str(tmp_path / "bench.jsonl"))
    assert {"ridge accumulate (2 layers)", "ridge accumulate weighted", "span completion kernel",
            "4-gram match kernel", "complete_spans (whole)", "lexical_net (whole)"} <= set(results)
    assert any(name.startswith("gdn scan") for name in results)
    for r in results.values():
        assert r["numpy_ms"] > 0 and r["numba_ms"] > 0 and r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
    assert "ratio = numpy/numba" in buf.getvalue()
    lines = (tmp_path / "bench.jsonl").read_text().splitlines()
    assert len(lines) == len(results) and json.loads(lines[0])["case"] in results
