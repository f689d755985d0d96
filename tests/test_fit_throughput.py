"""The capture speed the fit reports (issue 21): per document, at the same length, the plain
forward's seconds over the capture's (median over the longest captured documents, the first
left out as warm-up), beside the capture's tokens per second over the whole pass."""
from __future__ import annotations

import statistics

import pytest
import torch

from gpu.core import models
from gpu.maps import fit as fitmod
from gpu_fixtures import tiny_dir


def test_share_is_the_median_paired_ratio_on_the_longest_documents(monkeypatch):
    loaded = models.load(str(tiny_dir("llama")), device="cpu")
    calls = []
    forward = loaded.model.forward

    def counted(*a, **k):
        calls.append(k["input_ids"].shape[1])
        return forward(*a, **k)

    monkeypatch.setattr(loaded.model, "forward", counted)
    # captured (tokens, seconds): the first is the warm-up; the 3 longest after it are timed
    captured = [(90, 9.0), (40, 2.0), (80, 4.0), (10, 0.5), (60, 3.0), (70, 7.0)]
    timed = [(torch.randint(0, 100, (1, n)), s) for n, s in captured]
    clock = iter([0.0, 2.0, 10.0, 17.0, 20.0, 21.5])  # forwards of 2 s (80), 7 s (70), 1.5 s (60)
    monkeypatch.setattr(fitmod.time, "perf_counter", lambda: next(clock))
    speed = fitmod.throughput(loaded, timed)
    assert calls == [80, 70, 60] and speed["forward_tokens"] == [80, 70, 60]
    assert speed["capture_share_of_forward"] == statistics.median([2.0 / 4.0, 7.0 / 7.0, 1.5 / 3.0])
    assert speed["capture_tokens_per_second"] == pytest.approx(350 / 25.5)
    assert speed["forward_tokens_per_second"] == pytest.approx(210 / 10.5)
    assert speed["paired_capture_tokens_per_second"] == pytest.approx(210 / 14.0)


def test_a_resumed_capture_reports_no_speed():
    loaded = models.load(str(tiny_dir("llama")), device="cpu")
    assert fitmod.throughput(loaded, [])["capture_share_of_forward"] is None
