"""The decode-time check of paper Appendix I.4, as an evaluation arm.

At every decoding step the new token runs the lower layers with the model's own code and
the late layers through the engine's late walk (gpu.core.late), which adds up, for every
cache row, the attention it receives from the current query over the late attention layers
and their heads. That sum bounds the largest weight any one head of any late layer gives the
row, so a filled row whose weight crosses ``threshold`` anywhere is always flagged (the check
is sound; it may flag more). Flagged rows, completed to their words and digit runs
(rfmodel.selectors.complete_spans), become exact prefix rows: the prompt is prefilled again
with them exact (the lower pass reused), the tokens decoded so far are fed again in one
pass, and the step is redone, and checked again. It needs no question at prefill time. The
first answer token comes from the prefill's last row, as in RidgeFill's own prefill: the
check starts with the first decoding step.

When no filled row is left (every row repaired, or none filled), a step is the stock forward
(gpu.core.engine.Feeder), so decoding is then bitwise that of exact prefill.
This is a measurement of the method, not a product feature: it lives in gpu.lab.eval.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from rfmodel.selectors import complete_spans

from ...core import late
from ...core.walk import Late
from ...core.config import PrefillConfig
from ...core.engine import Engine, Feeder, Prefill
from ...core.extras import Extras
from ...core.plan import row_counts
from ...core.prompt import Prompt


class CheckedFeeder:
    """Feeds tokens after a RidgeFill prefill, checking and repairing at every step."""

    def __init__(self, engine: Engine, pre: Prefill, prompt: Prompt, config: PrefillConfig,
                 threshold: float):
        if config.fill not in ("ridge", "identity"):
            raise ValueError(f"the decode-time check needs filled late-layer entries; fill="
                             f"{config.fill!r} has none to check: use fill='ridge' or 'identity'")
        if not 0 < threshold:
            raise ValueError(f"threshold={threshold!r}: give the attention weight above which a "
                             "filled row is recomputed, e.g. 0.05")
        self.engine, self.prompt, self.config, self.threshold = engine, prompt, config, threshold
        self.history: list[int] = []
        self.stats = {"steps": 0, "repairs": 0, "rows_repaired": 0, "repair_seconds": 0.0}
        self._start(pre)

    def _start(self, pre: Prefill) -> None:
        self.pre, self.plan = pre, pre.plan
        self.n = int(pre.rows[-1]) + 1
        self.filled = torch.as_tensor(self.plan.filled, dtype=torch.long)
        self.stock = Feeder(self.engine, pre) if self.filled.numel() == 0 else None

    def _walk(self, tokens: list[int], received: torch.Tensor | None = None) -> torch.Tensor:
        """Feed ``tokens`` in one pass: the lower layers with the model's own code, the late
        layers through the late walk over the mixed cache; the last row's hidden state."""
        eng = self.engine
        ids = torch.tensor([tokens], device=eng.model.device)
        x_split, _ = eng.lower(ids, self.plan.split, self.pre.cache)
        ctx = Late.step(eng.adapter, self.plan.split, x_split, self.pre.cache, base=self.n,
                        received=received)
        h = late.run(ctx, x_split)
        self.n += len(tokens)
        return h[:, -1:]

    def _step(self, token: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Logits after ``token`` and the attention each cache row received (None: stock)."""
        if self.stock is not None:
            return self.stock.push(token), None
        received = torch.zeros(self.n + 1, device=self.engine.model.device)
        h = self._walk([token], received)
        return self.engine.adapter.logits(h)[0, -1], received

    def _replay(self, tokens: list[int]) -> None:
        """The tokens decoded so far, fed again unchecked on a repaired cache: in one pass
        (equal to one at a time up to float rounding; a repair costs one pass, not one per
        token), or one at a time through the stock forward once no row is filled (bitwise
        exact decoding)."""
        if self.stock is not None:
            for t in tokens:
                self.stock.push(t)
        elif tokens:
            self._walk(tokens)

    def flagged(self, received: torch.Tensor) -> np.ndarray:
        """Filled rows whose received attention crosses the threshold."""
        over = received[self.filled.to(received.device)] > self.threshold
        return self.filled[over.cpu()].numpy()

    def repair(self, rows: np.ndarray) -> None:
        """Rows (with their spans) made exact: prefill again, then feed the history again."""
        t0 = time.perf_counter()
        plan = self.plan
        rows = complete_spans(rows, self.prompt.pieces, plan.n_prefix)
        exact = np.union1d(plan.exact_rows, rows).astype(np.int64)
        config = self.config.replace(split=plan.split, tail=plan.tail, rows="none")
        pre = self.engine.prefill(self.prompt.ids, config, Extras(exact_rows=exact))
        self.stats["repairs"] += 1
        self.stats["rows_repaired"] += int(exact.size - plan.exact_rows.size)
        self._start(pre)
        self._replay(self.history)
        self.stats["repair_seconds"] += time.perf_counter() - t0

    @torch.inference_mode()
    def push(self, token: int) -> torch.Tensor:
        """Logits (vocab,) after feeding ``token``, once no filled row crosses the threshold."""
        self.stats["steps"] += 1
        while True:
            logits, received = self._step(token)
            rows = self.flagged(received) if received is not None else np.zeros(0, np.int64)
            if rows.size == 0:
                self.history.append(token)
                return logits
            self.repair(rows)  # the step is redone on the repaired cache

    @property
    def exact_rows(self) -> int:
        return int(self.plan.exact_rows.size)


def decode(feeder: CheckedFeeder, first: torch.Tensor, max_new_tokens: int, eos_token_id=None,
           stop: Callable[[list[int]], bool] | None = None) -> list[int]:
    """Greedy decoding through ``feeder`` from the prefill's logits ``first``, until the end
    token, ``max_new_tokens`` or ``stop(tokens)`` (as gpu.core.engine.Engine.decode)."""
    eos = set(eos_token_id if isinstance(eos_token_id, (list, tuple)) else
              [eos_token_id] if eos_token_id is not None else [])
    out, logits = [], first
    for step in range(max_new_tokens):
        out.append(int(logits.argmax()))
        if out[-1] in eos or step == max_new_tokens - 1 or (stop is not None and stop(out)):
            break
        logits = feeder.push(out[-1])
    return out


def checked_loss(sess, arm, prompt: Prompt, start: int, continuation: list[int],
                 count: int = 0, seed: int = 0) -> tuple[dict, torch.Tensor | None]:
    """Loss of a decode-check arm (gpu.lab.eval.instruments.loss's record): the rows before the
    scored stretch ``[start, N)`` prefilled under the arm (its own tail), then the stretch and
    the exact arm's ``continuation`` fed as decoding steps through the check. Returns the
    record and the logits predicting each continuation token (for agreement), or None."""
    t0 = time.perf_counter()
    head = Prompt(prompt.ids[:, :start], prompt.text, prompt.spans[:start], prompt.pieces[:start],
                  prompt.special[prompt.special < start], start)
    pre = sess.prefill(arm, head, count=count, seed=seed)
    feeder = CheckedFeeder(sess.engine(arm.split), pre, head, arm.prefill_config(), arm.check)
    ids = prompt.ids[0].tolist()
    logits = [pre.last_logits]
    for t in ids[start:] + continuation[:-1]:
        logits.append(feeder.push(t))
    logp = torch.log_softmax(torch.stack(logits[: prompt.n - start]).double(), -1)
    target = prompt.ids[0, start:].to(logp.device)
    nll = -logp.gather(1, target[:, None])[:, 0]
    rec = {"nll": [round(float(x), 5) for x in nll], "n": prompt.n, **row_counts(pre.plan, start),
           "macs_share": sess.macs_share(arm, pre, start),
           "check": {**feeder.stats, "exact_prefix_after": feeder.exact_rows},
           "seconds": time.perf_counter() - t0}
    agree = torch.stack(logits[prompt.n - start:]).float() if continuation else None
    return rec, agree
