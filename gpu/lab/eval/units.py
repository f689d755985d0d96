"""What the study measures, as units: filled-region needle samples and long documents cut
for loss, each with a signature of what it holds (record keys), from the corpus's eval role."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from ...core import prompt as prompts
from ...data import corpus
from . import tasks
from .grid import EvalConfig


def sig(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


# ----------------------------------------------------------------------------- texts
class CorpusTexts:
    """The installed texts: eval-role haystacks and whole eval-role documents."""

    name = "builtin"

    def haystack(self, min_chars: int, seed: int) -> str:
        return corpus.haystack_text(min_chars, seed)

    def documents(self, min_chars: int) -> list[corpus.Document]:
        return corpus.eval_documents(chunked=False, min_chars=min_chars)


def pick_documents(docs, n: int, seed: int, tok, length: int) -> list:
    """``n`` documents of at least ``length`` tokens, dealt round-robin across domains in a
    seeded order, so any prefix of the list mixes the domains."""
    by_domain: dict[str, list] = {}
    for d in sorted(docs, key=lambda d: hashlib.sha256(f"{seed}:{d.doc_id}".encode()).hexdigest()):
        by_domain.setdefault(d.domain, []).append(d)
    queues = [by_domain[k] for k in sorted(by_domain)]
    out = []
    while len(out) < n and any(queues):
        for q in queues:
            while q and len(out) < n:
                d = q.pop(0)
                if len(tok(d.text[: length * 12], add_special_tokens=False).input_ids) >= length:
                    out.append(d)
                    break
    return out


# ----------------------------------------------------------------------------- units
@dataclass
class Unit:
    """One needle sample or one document, tokenized once for every arm."""

    kind: str
    id: str
    prompt: prompts.Prompt
    sig: str
    stratum: str
    seed: int = 0
    expected: list = field(default_factory=list)
    needle_rows: list = field(default_factory=list)
    max_new_tokens: int = 0
    start: int = 0
    meta: dict = field(default_factory=dict)


def overhead(tok, chat: bool) -> int:
    longest = "The special magic numbers for wandering-umbrella, " * 3 + "mentioned in the text are"
    return prompts.build(tok, "x", "x", chat=chat, answer_prefix=longest).n + 8


def sample(tok, cfg: EvalConfig, task: str, length: int, hay: str, index: int, reserve: int):
    """Sample ``index`` and its rendered prompt, at most ``length`` tokens with the template
    and the answer prefix (the haystack shrinks when they take more than ``reserve``; the
    sample's needles, keys and depths depend on its seed and index alone)."""
    for _ in range(3):
        s = tasks.make_sample(task, length, cfg.seed, hay, tok, index=index, reserve=reserve)
        p = prompts.build(tok, s.context, s.question, chat=cfg.chat,
                          answer_prefix=s.answer_prefix if cfg.answer_prefix else "")
        if p.n <= length:
            break
        reserve += p.n - length + 2
    return s, p


def needle_units(tok, cfg: EvalConfig, texts, stats: dict) -> list[Unit]:
    """The fixed filled-region sample set: for each task and length, the first
    ``cfg.samples`` seeded samples whose needles all lie before the exact tail."""
    units: dict[tuple, Unit] = {}
    reserve = overhead(tok, cfg.chat)
    for length, names in sorted(cfg.needles.items()):
        hay = texts.haystack(length * 8, cfg.seed)
        for task in names:
            got, i = 0, 0
            while got < cfg.samples and i < cfg.samples * cfg.max_draws:
                s, p = sample(tok, cfg, task, length, hay, i, reserve)
                i += 1
                shift = p.text.find(s.context)
                if p.n > length or not tasks.in_filled_region(s, p.spans, p.n, cfg.tail, shift):
                    continue
                rows = sorted({r for pos in tasks.needle_token_positions(s, p.spans, shift)
                               for r in pos})
                units[(length, got, task)] = Unit(
                    "needle", f"{task}/{length}/{s.index}", p, sig(p.ids[0].tolist(), s.expected),
                    f"{task}/{length}", s.seed, s.expected, rows,
                    cfg.answer_tokens, meta={"task": task, "length": length})
                got += 1
            stats[f"{task}/{length}"] = {"kept": got, "drawn": i}
    return [units[k] for k in sorted(units)]  # by length, then index, then task


def doc_units(tok, cfg: EvalConfig, texts, stats: dict) -> list[Unit]:
    """``cfg.docs`` documents cut to their first ``loss_length`` tokens (BOS kept); the
    last ``score_tokens`` are scored; selectors read the rows before that stretch."""
    N, s = cfg.loss_length, cfg.score_tokens
    docs = pick_documents(texts.documents(N * 3), cfg.docs, cfg.seed, tok, N)
    out = []
    for d in docs:
        p = prompts.build(tok, d.text[: N * 12])
        if p.n < N:
            continue
        cut = prompts.Prompt(p.ids[:, :N], p.text, p.spans[:N], p.pieces[:N],
                             p.special[p.special < N], N - s)
        seed = int(sig(cfg.seed, d.doc_id)[:8], 16)  # the random control's rows, per document
        out.append(Unit("doc", d.doc_id, cut, sig(cut.ids[0].tolist(), seed), d.domain, seed,
                        start=N - s, meta={"domain": d.domain}))
    stats["docs"] = {"kept": len(out), "domains": sorted({u.stratum for u in out})}
    return out
