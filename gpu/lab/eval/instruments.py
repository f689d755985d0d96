"""The evaluation's measurements of one prompt under one arm (paper sections 3.1 and 3.3).

An :class:`Arm` says how the late layers treat the prefix (paper Table 3: exact, no fill,
identity, RidgeFill; POP native is the identity fill at POP's own split with a one-token
tail), which exact prefix rows it keeps (a selector of gpu.core.select, or a control
count-matched to another arm's selection: random rows, or the same count added to the
tail), and whether a splice replaces the filled keys / values with exact ones.

Instruments:

* :func:`needles` - prefill a needle prompt under every arm, decode the answers greedily
  (together), score like RULER.
* :func:`loss` - per-token NLL of the scored stretch (the document's last tokens, inside
  every arm's exact tail); :class:`Agreement` - continuing the same caches, greedy
  agreement and KL(exact || arm) over the exact arm's greedy continuation.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F

from rfmath import cost

from ...core import select
from .batch_decode import Batch
from ...core.cache import full_cache, layer_inputs
from ...core.engine import Engine, Feeder, Prefill
from ...core.extras import Extras
from ...core.late import SINK_RATIO
from ...core.config import PrefillConfig
from ...core.fills import cost_arm
from ...core.plan import row_counts
from ...core.prompt import Prompt
from .decode_check import CheckedFeeder, decode

try:  # the cost-model view of a HF config (optional: only the MAC shares need it)
    from ...core.archspec import arch_of
except ImportError:  # pragma: no cover
    arch_of = None

@dataclass(frozen=True)
class Arm:
    """One configuration of the late layers (paper Table 3); ``name`` is unique within a study.

    ``config`` is the arm's prefill (a control's ``rows`` name the selector whose count it
    copies; its own prefill takes rows at random or from the tail instead); the other fields
    are what only the study adds: a control, a blind selector, a splice, a decode-time check.
    """

    name: str
    config: PrefillConfig
    blind: bool = False            # selector does not see the question (control, paper 6.5)
    control: str | None = None     # random | tail: count-matched to the selection of ``of``
    of: str | None = None
    splice: str | None = None      # keys | values | both, from the exact arm's cache
    label: str = ""
    check: float | None = None     # decode-time check threshold (paper I.4; gpu.lab.eval.decode_check)

    # the configuration's fields the harness reads (one home: ``config``)
    fill = property(lambda self: self.config.fill)
    split = property(lambda self: self.config.split)
    tail = property(lambda self: self.config.tail)
    rows = property(lambda self: self.config.rows)
    options = property(lambda self: self.config.selector_options)
    rescale = property(lambda self: self.config.rescale)
    values_fill = property(lambda self: self.config.values_fill)

    @property
    def selects(self) -> bool:
        """True for an arm whose own selector picks exact rows (controls copy a count)."""
        return self.rows != "none" and self.control is None

    def prefill_config(self, tail: int | None = None, blind: bool = False) -> PrefillConfig:
        """The configuration one prefill of this arm runs (``tail`` overrides the arm's;
        ``blind`` hides the question from the selector). Controls pass their own selector to
        the engine, so their configuration selects nothing."""
        rows = "none" if self.control is not None else self.rows
        options = dict(self.options)
        if rows != "none" and (self.blind or blind):
            options["blind"] = True
        return self.config.replace(tail=self.tail if tail is None else tail, rows=rows,
                                   selector_options=options)

    def spec(self) -> dict:
        """What identifies the arm's records in a journal (the keys written since the first
        study: an exact arm's tail is 0; options, rescale, check and values_fill only when set;
        kv arms carry their sink rows, records from before them are stale)."""
        d = {"name": self.name, "fill": self.fill, "split": self.split,
             "tail": 0 if self.fill == "exact" else self.tail, "rows": self.rows,
             "blind": self.blind, "control": self.control, "of": self.of, "splice": self.splice,
             "options": self.options, "rescale": self.rescale, "check": self.check,
             "values_fill": self.values_fill}
        for k in ("options", "rescale", "check", "values_fill"):
            if not d[k]:
                del d[k]
        if "kv" in (self.fill, self.values_fill):
            d["sinks"] = SINK_RATIO
        return d


# ----------------------------------------------------------------------------- prefill
class Session:
    """A loaded model with one engine per split (maps where fitted) and its cost model.

    ``reuse_lower``: arms at one split share a prompt's lower-layer pass (bitwise the same
    results; see gpu.core.engine.Engine). Switch it off to time prefills.
    """

    def __init__(self, loaded, maps: dict[int, object], reuse_lower: bool = True,
                 lower_splits=()):
        self.loaded, self.model, self.tok = loaded, loaded.model, loaded.tokenizer
        self.maps = maps
        self.reuse_lower = reuse_lower
        self.lower_splits = sorted(set(lower_splits)) if reuse_lower else []
        self._engines: dict[int | None, Engine] = {}
        self.arch = arch_of(self.model.config) if arch_of is not None else None

    def engine(self, split: int | None) -> Engine:
        if split not in self._engines:
            self._engines[split] = Engine(self.model, self.maps.get(split), self.reuse_lower)
        return self._engines[split]

    @torch.inference_mode()
    def exact(self, ids: torch.Tensor, keep: int) -> Prefill:
        """The stock forward (the exact arm), with logits of the last ``keep`` rows only.
        Its first layers are the lower-layer pass of every split in ``lower_splits``, which
        the engines of those splits then reuse (Engine.adopt_lower)."""
        n = ids.shape[1]
        ids = ids.to(self.model.device)
        cache = full_cache(self.model.config)
        top = self.lower_splits[-1] if self.lower_splits else -1
        with layer_inputs(self.engine(None).adapter, dict.fromkeys(range(top + 1), slice(None))) as inputs:
            out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=keep)
        for s in self.lower_splits:
            self.engine(s).adopt_lower(ids, s, inputs, cache)
        rows = torch.arange(n - keep, n, device=self.model.device)
        return Prefill(out.cache, out.logits[0, -keep:], rows, None, "exact")

    def prefill(self, arm: Arm, prompt: Prompt, *, count: int = 0, seed: int = 0,
                exact_cache=None, tail: int | None = None, window_blind: bool = False,
                keep: int = 1) -> Prefill:
        """Prefill ``prompt`` under ``arm``. ``count``: the matched selection's size (for
        controls); ``tail`` overrides the arm's tail; ``window_blind`` points every selector
        at the rows before ``prompt.question_row`` (long-document loss: the stretch before
        the scored tokens); ``keep``: logits of the last ``keep`` rows that ran every layer
        (1: decoding; the scored stretch: loss)."""
        if arm.fill == "exact":
            return self.exact(prompt.ids, keep)
        T = (tail if tail is not None else arm.tail) + (count if arm.control == "tail" else 0)
        selector = None
        if arm.control == "random":
            selector = select.RandomRows(count=count, seed=seed % 2 ** 32)
        extras = Extras(splice=arm.splice, exact_cache=exact_cache if arm.splice else None,
                        selector=selector)
        return self.engine(arm.split).prefill(prompt.ids, arm.prefill_config(T, window_blind), extras,
                                              prompt=prompt, logits_rows=keep)

    def macs_share(self, arm: Arm, pre: Prefill, n: int) -> float | None:
        """Multiply-accumulates of this prefill over exact prefill's (paper 2.5), every sweep
        charged: the exact prefix rows the selector chose (E), a probe arm's first sweep over
        the filled cache (2.4), the attention selector's scores (:func:`ranking_macs`)."""
        if self.arch is None:
            return None
        if arm.fill == "exact" or pre.plan is None:
            return 1.0
        p = pre.plan
        c = cost.macs(self.arch, n, S=p.split, T=p.tail, E=int(p.exact_rows.size),
                      arm=cost_arm(arm.fill, arm.values_fill))
        rows = arm.prefill_config().rows
        if rows == "probe" and p.n_prefix >= 2:
            window = dict(arm.options).get("probe_window", select.ProbeRows.probe_window)
            c += probe_sweep_macs(self.arch, p.n_prefix, p.split, min(window, n - p.n_prefix),
                                  cost_arm(arm.fill if arm.fill != "none" else "ridge"))
        if rows == "attention" and p.n_prefix >= 2:  # the selection's own scores
            c += ranking_macs(self.arch, n, p.split,
                              dict(arm.options).get("window", select.AttentionRows.window))
        return c / cost.macs(self.arch, n, arm="exact")


def ranking_macs(arch, n: int, split: int, window: int) -> float:
    """The attention selector's own work (gpu.core.select.lower_received): at each lower layer
    it reads (3/7/11/15 below the split, global attention only, else the global attention
    layer just below the split), the last ``window`` rows' queries, ``d*(H*D)`` a row, and
    their scores over every key up to them, ``H*D`` a key (QK^T; no AV). The lower layers'
    keys are the prefill's own; norms, RoPE and softmax are not counted, as rfmath.cost counts
    none. A question-blind selector's window ends at the question instead: charged the same."""
    kinds = arch.kinds
    layers = [l for l in select.lower_layers(split) if l < len(kinds) and kinds[l] == "attention"]
    if not layers:
        layers = [l for l in range(split) if kinds[l] == "attention"][-1:]
    w = min(window, n)
    q = arch.n_heads * arch.head_dim
    keys = (n * (n + 1) - (n - w) * (n - w + 1)) // 2  # rows p = n-w..n-1 read p + 1 keys
    return float(len(layers) * (w * arch.d_model * q + q * keys))


def probe_sweep_macs(arch, n_prefix: int, split: int, window: int, arm: str) -> float:
    """The probe's first sweep (paper 2.4): every prefix row filled in the late layers and
    the last ``window`` rows run there exactly over that cache; its late-layer cost, i.e. a
    prefill of ``n_prefix + window`` rows with a ``window``-row tail, less its lower layers
    (which the prefill shares). The probe rows' contexts are counted from the end of the
    prefix, at most the tail's length short of where they sit."""
    n = n_prefix + window
    whole = cost.macs(arch, n, S=split, T=window, arm=arm, logit_rows=0)
    lower = cost.macs(arch, n, S=split, T=0, arm="nofill", logit_rows=0)
    return whole - lower


# ----------------------------------------------------------------------------- decoding
def step_logits(engine: Engine, pre: Prefill, tokens: list[int]) -> torch.Tensor:
    """Logits (len(tokens), vocab) predicting each of ``tokens`` in turn: the prefill's last
    row, then after feeding each token but the last."""
    feeder = Feeder(engine, pre)
    out = [pre.last_logits]
    for t in tokens[:-1]:
        out.append(feeder.push(int(t)))
    return torch.stack(out).float()


def greedy(engine: Engine, pre: Prefill, steps: int) -> tuple[list[int], torch.Tensor]:
    """The greedy continuation of ``steps`` tokens and the logits that chose them."""
    feeder = Feeder(engine, pre)
    logits, tokens = [pre.last_logits], []
    for i in range(steps):
        tokens.append(int(logits[-1].argmax()))
        if i < steps - 1:
            logits.append(feeder.push(tokens[-1]))
    return tokens, torch.stack(logits).float()


def kl_and_agreement(exact_logits: torch.Tensor, arm_logits: torch.Tensor,
                     tokens: list[int]) -> tuple[list[float], list[int]]:
    """Per step KL(exact || arm) in nats and whether the arm's top token is the exact
    arm's greedy token."""
    lp_e = F.log_softmax(exact_logits.double(), -1)
    lp_a = F.log_softmax(arm_logits.double(), -1)
    kl = (lp_e.exp() * (lp_e - lp_a)).sum(-1).clamp_min(0.0)
    agree = (arm_logits.argmax(-1).cpu() == torch.tensor(tokens)).int()
    return kl.cpu().tolist(), agree.tolist()


# ----------------------------------------------------------------------------- instruments
# the most prefills of one prompt a decoding batch holds: its cache is preallocated for each
# (a 4K prompt on qwen2.5-coder-1.5b in fp32: about 0.22 GB a slot), so a grid of more arms
# (issue 57's tiered screen: 81) decodes in several batches; the grids of 5-10 arms in one
DECODE_SLOTS = 16


def needles(sess: Session, arms: list[Arm], prompt: Prompt, expected: list[str],
            needle_rows: list[int], *, max_new_tokens: int, counts: dict[str, int],
            seed: int = 0) -> list[dict]:
    """Answer one needle prompt under each of ``arms`` (in order); RULER's score and what
    each plan kept exact. Every arm prefills, then the answers decode greedily together
    (gpu.lab.eval.batch_decode; an arm whose cache does not batch, a hybrid's, decodes alone).
    An answer stops at the end token, after ``max_new_tokens`` or once it holds every
    expected value (RULER's score cannot change after that). At most :data:`DECODE_SLOTS`
    prefills decode together: a full batch is decoded before the next arm's prefill joins a
    new one. ``counts``: the selection size of each arm already measured, which its controls
    copy; updated here."""
    from .tasks import all_found, score

    eos = sess.tok.eos_token_id

    def found(tokens: list[int]) -> bool:
        return all_found(sess.tok.decode(tokens, skip_special_tokens=True), expected)

    def decode(b: Batch) -> tuple[list[list[int]], float]:
        t0 = time.perf_counter()
        answers = b.greedy(eos, stop=lambda slot, tokens: found(tokens))
        return answers, (time.perf_counter() - t0) / max(len(answers), 1)

    batch = Batch(sess.model, min(len(arms), DECODE_SLOTS), max_new_tokens)
    exact_cache, runs, decoded = None, [], []
    for i, arm in enumerate(arms):
        if arm.splice and exact_cache is None:
            exact_cache = sess.exact(prompt.ids, 1).cache
        t0 = time.perf_counter()
        pre = sess.prefill(arm, prompt, count=counts.get(arm.of, 0), seed=seed,
                           exact_cache=exact_cache)
        exact = set(pre.plan.exact_rows.tolist()) if pre.plan is not None else set()
        rows = [r for r in needle_rows if pre.plan is None or r < pre.plan.n_prefix]
        covered = (sum(r in exact for r in rows) / len(rows)) if rows and pre.plan is not None else None
        rec = {"n": prompt.n, **row_counts(pre.plan, prompt.n), "needle_rows_exact": covered,
               "macs_share": sess.macs_share(arm, pre, prompt.n)}
        counts[arm.name] = rec["exact_prefix"]
        if arm.fill == "exact":
            exact_cache = pre.cache
        rec["prefill_seconds"] = time.perf_counter() - t0
        if arm.check is not None:
            tokens = checked_answer(sess, arm, pre, prompt, max_new_tokens, eos, found, rec)
        elif batch.accepts(pre):
            if len(batch) == batch.capacity:  # full: decode it, then a new one
                decoded.append(decode(batch))
                batch = Batch(sess.model, min(len(arms) - i, DECODE_SLOTS), max_new_tokens)
            tokens = (len(decoded), batch.add(pre))  # (batch, slot), answered below
        else:
            t1 = time.perf_counter()
            tokens = sess.engine(arm.split).decode(pre, max_new_tokens, eos, stop=found)
            rec["decode_seconds"] = time.perf_counter() - t1
        runs.append((rec, tokens))
    decoded.append(decode(batch))
    out = []
    for rec, tokens in runs:
        if isinstance(tokens, tuple):
            answers, share = decoded[tokens[0]]
            tokens = answers[tokens[1]]
            rec["decode_seconds"] = share  # this arm's share of its batch
        answer = sess.tok.decode(tokens, skip_special_tokens=True)
        rec.update(answer=answer, new_tokens=len(tokens), score=score(answer, expected),
                   correct=int(all_found(answer, expected)),
                   seconds=rec["prefill_seconds"] + rec["decode_seconds"])
        out.append(rec)
    return out


def checked_answer(sess: Session, arm: Arm, pre: Prefill, prompt: Prompt, max_new_tokens: int,
                   eos, found, rec: dict) -> list[int]:
    """The answer of a decode-check arm (paper I.4; gpu.lab.eval.decode_check), decoded alone; its
    repairs, and the seconds per step of the same prefill decoded without the check (a copy
    of its cache) beside its own: the check's overhead."""
    engine = sess.engine(arm.split)
    t0 = time.perf_counter()
    plain = engine.decode(replace(pre, cache=copy.deepcopy(pre.cache)), max_new_tokens, eos,
                          stop=found)
    t1 = time.perf_counter()
    feeder = CheckedFeeder(engine, pre, prompt, arm.prefill_config(), arm.check)
    tokens = decode(feeder, pre.last_logits, max_new_tokens, eos, stop=found)
    t2 = time.perf_counter()
    rec["decode_seconds"] = t2 - t1
    rec["check"] = {**feeder.stats, "exact_prefix_after": feeder.exact_rows,
                    "seconds_per_step": (t2 - t1) / len(tokens),
                    "plain_seconds_per_step": (t1 - t0) / len(plain)}
    return tokens


def stretch_nll(pre: Prefill, ids: torch.Tensor, start: int) -> np.ndarray:
    """NLL (nats) of ``ids[0, start:]`` from the prefill's logits of rows start-1..N-2
    (which must all have run every layer: the stretch lies inside the tail)."""
    n = ids.shape[1]
    pos = torch.arange(start - 1, n - 1, device=pre.rows.device)
    idx = torch.searchsorted(pre.rows, pos)
    if (idx >= pre.rows.numel()).any() or not torch.equal(pre.rows[idx], pos):
        raise ValueError("the scored stretch must lie inside the exact tail")
    logp = F.log_softmax(pre.logits[idx].double(), -1)
    target = ids[0, start:].to(logp.device)
    return (-logp.gather(1, target[:, None])[:, 0]).cpu().numpy()


@torch.inference_mode()
def cut_nll(sess: Session, ids: torch.Tensor, start: int, window: int) -> np.ndarray:
    """Exact NLL of ``ids[0, start:]`` with the context cut to the ``window`` tokens before
    ``start`` (each scored token then sees at least ``window`` tokens; a leading BOS is
    kept when the document has one)."""
    lo = start - window
    body = ids[:, lo:]
    bos = sess.tok.bos_token_id
    if bos is not None and lo > 0 and int(ids[0, 0]) == bos:
        body = torch.cat([ids[:, :1], body], dim=1)
    keep = ids.shape[1] - start + 1
    out = sess.model(input_ids=body.to(sess.model.device), logits_to_keep=keep)
    logp = F.log_softmax(out.logits[0, :-1].double(), -1)
    target = ids[0, start:].to(logp.device)
    return (-logp.gather(1, target[:, None])[:, 0]).cpu().numpy()


def loss(sess: Session, arm: Arm, prompt: Prompt, start: int, *, count: int = 0, seed: int = 0,
         exact_cache=None, agreement: bool = False,
         native_tail: bool = False) -> tuple[dict, Prefill | None]:
    """NLL of the scored stretch ``[start, N)`` under ``arm``; with ``agreement``, also the
    prefill that agreement continues from (:class:`Agreement`: the same cache).

    Every arm's tail must cover the stretch: an arm with a shorter tail (POP native's one
    token) gets ``N - start + 1``, which is the same computation as feeding the stretch as
    decoding steps; its agreement then continues from its own prefill with its native tail
    (``native_tail``)."""
    t0 = time.perf_counter()
    need = prompt.n - start + 1
    tail = max(arm.tail, need) if arm.fill != "exact" else None
    pre = sess.prefill(arm, prompt, count=count, seed=seed, exact_cache=exact_cache,
                       tail=tail, window_blind=True, keep=need)
    nll = stretch_nll(pre, prompt.ids, start)
    rec = {"nll": [round(float(x), 5) for x in nll], "n": prompt.n, **row_counts(pre.plan, prompt.n),
           "macs_share": sess.macs_share(arm, pre, prompt.n)}
    agree_pre = pre if agreement else None
    if agreement and native_tail and arm.fill != "exact" and arm.tail < need:
        agree_pre = sess.prefill(arm, prompt, count=count, seed=seed, exact_cache=exact_cache)
    rec["seconds"] = time.perf_counter() - t0
    return rec, agree_pre


class Agreement:
    """Greedy agreement and KL(exact || arm) over ``continuation`` (the exact arm's greedy
    tokens) fed as decoding steps after each arm's prefill (paper 3.3). Prefills that batch
    are fed together in one :class:`Batch` (each is copied in as it arrives, so its own
    cache may be dropped); the rest (a hybrid's recurrent state) are fed alone."""

    def __init__(self, sess: Session, capacity: int, continuation: list[int],
                 exact_logits: torch.Tensor):
        self.sess, self.continuation, self.exact_logits = sess, continuation, exact_logits
        self.batch = Batch(sess.model, capacity, max(len(continuation) - 1, 0))
        self.items: list[int | tuple[torch.Tensor, float]] = []

    def add(self, arm: Arm, pre: Prefill | torch.Tensor) -> None:
        """``pre``: a prefill to continue, or the logits an arm already fed (the decode
        check's, gpu.lab.eval.decode_check.checked_loss)."""
        if isinstance(pre, torch.Tensor):
            self.items.append((pre, 0.0))  # its feeding time is in its loss record
        elif self.batch.accepts(pre):
            self.items.append(self.batch.add(pre))
        else:
            t0 = time.perf_counter()
            logits = step_logits(self.sess.engine(arm.split), pre, self.continuation)
            self.items.append((logits, time.perf_counter() - t0))

    def results(self) -> list[dict]:
        """Per added prefill, in order: ``kl``, ``agree`` and ``seconds`` (its feeding time;
        a batched prefill's share of the batch)."""
        t0 = time.perf_counter()
        fed = self.batch.feed(self.continuation)
        share = (time.perf_counter() - t0) / max(fed.shape[0], 1)
        out = []
        for item in self.items:
            logits, sec = (fed[item], share) if isinstance(item, int) else item
            kl, agree = kl_and_agreement(self.exact_logits, logits, self.continuation)
            out.append({"kl": [round(float(x), 6) for x in kl], "agree": agree, "seconds": sec})
        return out
