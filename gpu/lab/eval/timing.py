"""Time to first token per arm (paper 3.1's measured speedup beside the MAC ceiling of 2.5):
each arm's prefill alone, with no lower pass shared between arms (a Session with
``reuse_lower=False``), best of a few rounds that alternate the arms; a selector's rows
replayed through gpu.core.select.FixedRows isolate the selector's own cost."""
from __future__ import annotations

import time

import numpy as np
import torch
from tqdm import tqdm

from ...core import select
from ...core.extras import Extras
from .instruments import Arm, Session


def _prefill_seconds(sess: Session, arm: Arm, prompt, count: int, seed: int,
                     selector=None) -> tuple[float, object]:
    """Wall time of one prefill (the first token's logits included)."""
    t0 = time.perf_counter()
    if selector is None:
        pre = sess.prefill(arm, prompt, count=count, seed=seed)
    else:
        pre = sess.engine(arm.split).prefill(prompt.ids, arm.prefill_config(), Extras(selector=selector),
                                             prompt=prompt)
    int(pre.last_logits.argmax())
    return time.perf_counter() - t0, pre


@torch.inference_mode()
def time_arms(sess: Session, units, arms: list[Arm], n_units: int = 2,
              progress: bool = True, replay: bool = True, rounds: int = 2) -> dict:
    """Prefill seconds per arm (best of ``rounds``, mean over ``n_units`` samples); with
    ``replay``, selector arms also with the same rows replayed through FixedRows (the
    selector's own cost = difference). On each sample one untimed prefill warms up, then
    every round times every arm in turn, so a slow stretch of a shared machine is spread
    over the arms instead of landing on whichever arm ran then (the first arms did)."""
    arms = [a for a in arms if a.control is None and not a.blind]  # controls cost the same
    out: dict[str, dict] = {a.name: {"prefill": [], "replay": [], "macs_share": []} for a in arms}
    bar = tqdm(total=len(units[:n_units]) * len(arms) * rounds, desc=f"{sess.loaded.name} timing",
               unit="arm", disable=not progress, dynamic_ncols=True)
    for u in units[:n_units]:
        _prefill_seconds(sess, arms[0], u.prompt, 0, u.seed)  # warm-up, untimed
        counts: dict[str, int] = {}
        fastest = {a.name: float("inf") for a in arms}  # best round of the arm's prefill
        fastest_replay = dict(fastest)  # and of its selected rows replayed
        for _ in range(rounds):
            for arm in arms:
                bar.update()
                s, pre = _prefill_seconds(sess, arm, u.prompt, counts.get(arm.of, 0), u.seed)
                fastest[arm.name] = min(fastest[arm.name], s)
                if arm.name not in counts:
                    out[arm.name]["macs_share"].append(sess.macs_share(arm, pre, u.prompt.n))
                    counts[arm.name] = int(pre.plan.exact_rows.size) if pre.plan is not None else 0
                if replay and arm.selects:
                    fixed = select.FixedRows(given=np.asarray(pre.plan.exact_rows))
                    r, _ = _prefill_seconds(sess, arm, u.prompt, 0, u.seed, selector=fixed)
                    fastest_replay[arm.name] = min(fastest_replay[arm.name], r)
        for arm in arms:
            out[arm.name]["prefill"].append(fastest[arm.name])
            if replay and arm.selects:
                out[arm.name]["replay"].append(fastest_replay[arm.name])
    bar.close()
    res = {}
    for name, d in out.items():
        res[name] = {k: (float(np.mean(v)) if v and v[0] is not None else None)
                     for k, v in d.items()}
    return res
