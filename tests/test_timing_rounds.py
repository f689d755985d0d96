"""gpu.lab.eval.timing.time_arms: one untimed warm-up per sample, then rounds that alternate the
arms, each arm's best round kept (a fake session and a patched clock are the oracle)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gpu.core.config import PrefillConfig
from gpu.lab.eval import timing
from gpu.lab.eval.instruments import Arm


class FakeSession:
    """Prefills take the seconds listed per call, in call order."""

    def __init__(self, seconds: list[float]):
        self.loaded = SimpleNamespace(name="fake", n_layers=4)
        self.calls: list[str] = []
        self.clock, self.seconds = 0.0, list(seconds)

    def now(self) -> float:
        return self.clock

    def prefill(self, arm, prompt, *, count=0, seed=0):
        self.calls.append(arm.name)
        self.clock += self.seconds.pop(0)
        plan = SimpleNamespace(exact_rows=np.zeros(0, np.int64))
        return SimpleNamespace(last_logits=torch.zeros(3), plan=plan)

    def macs_share(self, arm, pre, n):
        return 1.0 if arm.fill == "exact" else 0.5


def test_arms_alternate_after_a_warm_up_and_keep_their_best_round(monkeypatch):
    at = PrefillConfig(fill="identity", tail=1, rows="none")
    arms = [Arm("exact", PrefillConfig(fill="exact")), Arm("a", at.replace(split=2)),
            Arm("b", at.replace(split=3)), Arm("b/random", at.replace(split=3), control="random",
                                                of="b")]
    # warm-up 9 s, round 1: exact 4, a 3, b 5; round 2: exact 2, a 6, b 1
    sess = FakeSession([9.0, 4.0, 3.0, 5.0, 2.0, 6.0, 1.0])
    monkeypatch.setattr(timing.time, "perf_counter", sess.now)
    unit = SimpleNamespace(prompt=SimpleNamespace(n=10), seed=0)
    res = timing.time_arms(sess, [unit], arms, n_units=1, progress=False, replay=False, rounds=2)
    assert sess.calls == ["exact", "exact", "a", "b", "exact", "a", "b"]
    assert {k: v["prefill"] for k, v in res.items()} == {"exact": 2.0, "a": 3.0, "b": 1.0}
    assert res["a"]["macs_share"] == pytest.approx(0.5) and "b/random" not in res
