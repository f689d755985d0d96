"""What a vLLM step's requests are, beyond what its attention metadata says (paper section
2.1 as a serving engine schedules it).

vLLM's attention metadata gives each request's new tokens (``query_start_loc``) and its
length after the step (``seq_lens``), so the tokens already computed (a cached prefix,
earlier chunks) are ``seq_lens - q``. Which new rows are filled also needs each request's
*prompt length* (the exact tail sits at the prompt's end, which a chunk may not reach) and
where its prefill started (a cached prefix too short to leave rows worth filling runs
exact: gpu.serving.rows.MIN_FILL_ROWS). vLLM's runner holds both in its input batch and
passes the model only tensors, so RidgeFill wraps the runner's ``_model_forward`` (the method
vLLM keeps for subclasses to change how the model is called) to publish them for the
duration of the call. Requests are in the input batch's order, which is the metadata's.
"""
from __future__ import annotations

import contextvars
import functools
from dataclasses import dataclass

import numpy as np

_STEP: contextvars.ContextVar["Step | None"] = contextvars.ContextVar("ridgefill_step",
                                                                      default=None)
_MARK = "_ridgefill_step_hook"


@dataclass(frozen=True)
class Step:
    """Per request of the step, in the metadata's order: ``prompt_lens`` (its prompt's
    length), ``started`` (the tokens it had computed when its prefill began in this engine:
    its cached prefix, 0 for a fresh prompt), ``exact`` (it asked for prompt logprobs,
    which read every prompt row's logits, so none of its rows is filled) and ``prompt_ids``
    (its prompt's token ids: the tiered selection completes spans from their pieces) and
    ``req_ids`` (vLLM's request ids: a chunked prompt's rows wait under its id)."""

    prompt_lens: np.ndarray
    started: np.ndarray
    exact: np.ndarray
    prompt_ids: tuple[np.ndarray, ...] = ()
    req_ids: tuple[str, ...] = ()


def current() -> Step | None:
    """The running step's :class:`Step`, or None outside a runner's model call (vLLM's dummy
    and profiling runs call the model directly)."""
    return _STEP.get()


class StartTracker:
    """Where each request's prefill started: the first computed-token count seen for its id,
    forgotten when it leaves the batch (a preempted request starts again when it returns)."""

    def __init__(self):
        self.first: dict[str, int] = {}

    def started(self, req_ids: list[str], computed: np.ndarray) -> np.ndarray:
        self.first = {r: self.first.get(r, int(c)) for r, c in zip(req_ids, computed)}
        return np.asarray([self.first[r] for r in req_ids], np.int64)


def install() -> None:
    """Wrap vLLM's ``GPUModelRunner._model_forward`` (the CPU runner's too) once per process
    so that :func:`current` is set during each step's model call."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    forward = GPUModelRunner._model_forward
    if getattr(forward, _MARK, False):
        return

    @functools.wraps(forward)
    def with_step(runner, *args, **kwargs):
        batch = runner.input_batch
        n = batch.num_reqs
        tracker = runner.__dict__.setdefault(_MARK, StartTracker())
        ids = list(batch.req_ids[:n])
        token = _STEP.set(Step(
            prompt_lens=batch.num_prompt_tokens[:n].astype(np.int64),
            started=tracker.started(ids, batch.num_computed_tokens_cpu[:n]),
            exact=np.asarray([r in runner.num_prompt_logprobs for r in ids], bool),
            prompt_ids=tuple(batch.token_ids_cpu[i, :batch.num_prompt_tokens[i]]
                             for i in range(n)), req_ids=tuple(ids)))
        try:
            return forward(runner, *args, **kwargs)
        finally:
            _STEP.reset(token)

    setattr(with_step, _MARK, True)
    GPUModelRunner._model_forward = with_step
