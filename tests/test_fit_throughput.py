"""The capture speed the fit reports (issue 21): capture tokens per second over the median of
FORWARD_REPEATS plain forwards of the first calibration document at the capture's length."""
from __future__ import annotations

import statistics
from types import SimpleNamespace

from gpu.core import models
from gpu.maps import fit as fitmod
from gpu_fixtures import tiny_dir


def test_throughput_is_capture_rate_over_the_median_forward(monkeypatch):
    loaded = models.load(str(tiny_dir("llama")), device="cpu")
    calls = []
    forward = loaded.model.forward

    def counted(*a, **k):
        calls.append(k["input_ids"].shape[1])
        return forward(*a, **k)

    monkeypatch.setattr(loaded.model, "forward", counted)
    clock = iter([0.0, 2.0, 10.0, 11.0, 20.0, 24.0])   # forwards of 2 s, 1 s and 4 s
    monkeypatch.setattr(fitmod.time, "perf_counter", lambda: next(clock))
    doc = SimpleNamespace(text="the quick brown fox jumps over the lazy dog " * 20)
    speed = fitmod.throughput(loaded, doc, doc_tokens=64, tokens=300, seconds=1.5)
    assert calls == [64] * fitmod.FORWARD_REPEATS == [64, 64, 64]
    assert speed["forward_tokens"] == 64
    assert speed["forward_tokens_per_second"] == 64 / statistics.median([2.0, 1.0, 4.0])
    assert speed["capture_tokens_per_second"] == 300 / 1.5
    assert speed["capture_share_of_forward"] == (300 / 1.5) / (64 / 2.0)
