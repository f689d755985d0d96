"""Several questions over one long document (paper Appendix D): the document and the first
question are prefilled once with RidgeFill; every answer and question after that runs at full
depth on the carried cache, so the exact rows are those chosen for the first question, never
re-chosen.

    conv = rf.chat(document)
    conv.ask("Who wrote it?").text
    conv.ask("And when?").text       # on the same cache: no new prefill
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .core import prompt as prompts
from .core import select
from .core.late import repair_rows
from .core.plan import Plan


@dataclass
class Answer:
    text: str
    tokens: list[int]
    new_prompt_tokens: int      # prompt tokens this turn added (the whole prefill on turn 1)
    seconds: float
    repaired_rows: int = 0      # prefix rows made exact for this question (reselect=True)
    repair_seconds: float = 0.0


class Conversation:
    """Turns over one document (``RidgeFill.chat``). The first question is asked with the
    document in one RidgeFill prefill (the row selector sees it, as in ``generate``); every
    later turn feeds only what the conversation's rendering adds, at full depth, on the
    carried cache. ``ids`` are the tokens the cache holds, in order."""

    def __init__(self, rf, document: str, chat: bool | None = None):
        tok = rf.loaded.tokenizer
        if tok is None:
            raise ValueError("a conversation renders text: load the model with its tokenizer")
        self.rf, self.tok, self.document = rf, tok, document
        self.chat = chat if chat is not None else getattr(tok, "chat_template", None) is not None
        self.turns: list[tuple[str, str]] = []
        self.prefill = None          # the first turn's RidgeFill prefill (its plan: the rows)
        self.cache = None
        self.ids: list[int] = []
        self.text = ""               # the text whose tokens the cache holds
        self.exact_rows = np.zeros(0, np.int64)   # prefix rows whose late entries are exact

    def _render(self, turns: list[tuple[str, str | None]]) -> str:
        """The conversation's text: the document and the first question in one user turn, as
        gpu.core.prompt.build renders a single question (its answer prefix added by ``ask``)."""
        if not self.chat:
            bos = self.tok.bos_token if getattr(self.tok, "add_bos_token", True) and self.tok.bos_token else ""
            parts = [bos + self.document]
            for q, a in turns:
                parts.append(f"\n\n{q}" + (a if a is not None else ""))
            return "".join(parts)
        messages = []
        for i, (q, a) in enumerate(turns):
            messages.append({"role": "user", "content": f"{self.document}\n\n{q}" if i == 0 else q})
            if a is not None:
                messages.append({"role": "assistant", "content": a})
        return self.tok.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=turns[-1][1] is None)

    @torch.inference_mode()
    def ask(self, question: str, max_new_tokens: int = 32, answer_prefix: str = "",
            stop: Callable[[str], bool] | None = None, reselect: bool = False) -> Answer:
        """Answer ``question`` greedily: the first one in the RidgeFill prefill of the
        document, later ones fed at full depth on the carried cache. ``answer_prefix``: text
        the answer starts with (base models, as RULER prefills it); ``stop(text)``: end the
        answer early once its text satisfies it (besides the end token). ``reselect``: before
        a later question, run the lexical net again for it and make the prefix rows it adds
        exact in place (gpu.core.late.repair_rows: their late layers only, no new prefill)."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}: generate at least one token")
        full = self._render(self.turns + [(question, None)]) + answer_prefix
        model, limit = self.rf.loaded.model, self.rf.loaded.max_context
        start = time.perf_counter()
        if self.cache is None:
            p = prompts.build_text(self.tok, full, question)
            if p.n + max_new_tokens > limit:
                raise ValueError(f"the document and question take {p.n} tokens; with the answer "
                                 f"they pass {self.rf.loaded.name}'s context of {limit}")
            pre = self.rf.engine.prefill(p.ids, self.rf.config, prompt=p, logits_rows=1,
                                     keep_x_split=True)
            if pre.visible is not None:
                raise ValueError("fill='none' hides its filled rows from later turns, which an "
                                 "ordinary cache cannot do; use fill='ridge' for a conversation")
            self.prefill, self.cache, self.ids = pre, pre.cache, p.ids[0].tolist()
            if pre.plan is not None:
                self.exact_rows = pre.plan.exact_rows
            logits, n_new = pre.last_logits, p.n
            repaired, repair_s = 0, 0.0
        else:
            if not full.startswith(self.text):
                raise ValueError("the chat template renders earlier turns differently once a "
                                 "new one is added, so the carried cache no longer matches the "
                                 "text; use chat=False for this tokenizer")
            new = self.tok(full[len(self.text):], add_special_tokens=False)["input_ids"]
            if len(self.ids) + len(new) + max_new_tokens > limit:
                raise ValueError(f"the conversation would pass {self.rf.loaded.name}'s context "
                                 f"of {limit} tokens; start a new one")
            t0 = time.perf_counter()
            repaired = self._reselect(new) if reselect else 0
            repair_s = time.perf_counter() - t0
            feed = torch.tensor([new], device=model.device)
            logits = model(input_ids=feed, cache=self.cache, use_cache=True,
                           logits_to_keep=1).logits[0, -1]
            self.ids += new
            n_new = len(new)
        tokens: list[int] = []
        for step in range(max_new_tokens):
            token = int(logits.argmax())
            tokens.append(token)
            if token == self.tok.eos_token_id or step == max_new_tokens - 1 or (
                    stop is not None and stop(self.tok.decode(tokens, skip_special_tokens=True))):
                break
            logits = model(input_ids=torch.tensor([[token]], device=model.device),
                           cache=self.cache, use_cache=True).logits[0, -1]
            self.ids.append(token)
        self.text = full + self.tok.decode(tokens[:-1], skip_special_tokens=False)  # last: unfed
        answer = self.tok.decode(tokens, skip_special_tokens=True)
        self.turns.append((question, answer_prefix + answer))
        return Answer(answer, tokens, n_new, time.perf_counter() - start, repaired, repair_s)

    def _reselect(self, new: list[int]) -> int:
        """The lexical net's rows for the conversation ending in ``new`` (the next question),
        read from this turn's rows only, among the first prefill's prefix rows; those not yet
        exact are repaired in place."""
        pre, cfg = self.prefill, self.rf.config
        if pre.plan is None:
            return 0  # exact prefill: every row is exact already
        if cfg.rows != "lexical":
            raise ValueError(f"reselect=True runs the lexical net again for the new question; "
                             f"rows={cfg.rows!r} is not re-run on a carried cache: use "
                             "rows='lexical' or reselect=False")
        ids = self.ids + new
        p = prompts.from_ids(self.tok, torch.tensor([ids]))
        plan = Plan(len(ids), pre.plan.split, len(ids) - pre.plan.n_prefix, pre.plan.n_layers)
        ctx = select.Context(self.rf.engine, p, plan, pre.x_split, self.cache, {}, cfg.fill)
        # the window: this turn's rows only (else the earlier question, still within the
        # last 64 rows, wins the net again)
        lexical = select.make("lexical", **cfg.options)
        lexical.window = min(len(new), lexical.window)
        chosen = lexical(ctx)
        rows = np.setdiff1d(chosen, self.exact_rows)
        if rows.size:
            t = torch.as_tensor(rows, device=pre.x_split.device)
            repair_rows(self.rf.engine.adapter, pre.plan.split, pre.x_split[:, t], t, self.cache)
            self.exact_rows = np.union1d(self.exact_rows, rows)
        return int(rows.size)
