"""Several questions over one long document (paper Appendix D): the document is prefilled once
with RidgeFill; every question and answer after it runs at full depth on the carried cache, so
the exact rows are those chosen for the document, never re-chosen.

    conv = rf.chat(document)
    conv.ask("Who wrote it?").text
    conv.ask("And when?").text       # on the same cache: no new prefill
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .core import prompt as prompts


@dataclass
class Answer:
    text: str
    tokens: list[int]
    new_prompt_tokens: int      # question tokens fed at full depth before answering
    seconds: float


class Conversation:
    """Turns over a document prefilled once (``RidgeFill.chat``). ``ids`` are the tokens the
    cache holds, in order; every turn feeds only what the conversation's rendering adds."""

    def __init__(self, rf, document: str, chat: bool | None = None):
        tok = rf.loaded.tokenizer
        self.rf, self.tok, self.document = rf, tok, document
        self.chat = chat if chat is not None else getattr(tok, "chat_template", None) is not None
        self.turns: list[tuple[str, str]] = []
        self._sent = "\x00question\x00"
        rendered = self._render([(self._sent, None)])
        self.text = rendered[: rendered.index(self._sent)].rstrip("\n") if self.chat else \
            rendered[: rendered.index(self._sent)]
        p = prompts.build_text(tok, self.text)
        if p.n > rf.loaded.max_context:
            raise ValueError(f"the document has {p.n} tokens, more than {rf.loaded.name}'s "
                             f"context of {rf.loaded.max_context}; shorten it")
        self.prefill = rf.engine.run(p.ids, rf.config, prompt=p, logits_rows=1)
        if self.prefill.visible is not None:
            raise ValueError("fill='none' hides its filled rows from later turns, which an "
                             "ordinary cache cannot do; use fill='ridge' for a conversation")
        self.cache = self.prefill.cache
        self.ids: list[int] = p.ids[0].tolist()

    def _render(self, turns: list[tuple[str, str | None]]) -> str:
        """The conversation's text: the document and the first question in one user turn."""
        if not self.chat:
            bos = self.tok.bos_token if getattr(self.tok, "add_bos_token", True) and self.tok.bos_token else ""
            parts = [bos + self.document]
            for q, a in turns:
                parts.append(f"\n\n{q}\n" + (a if a is not None else ""))
            return "".join(parts)
        messages = []
        for i, (q, a) in enumerate(turns):
            messages.append({"role": "user", "content": f"{self.document}\n\n{q}" if i == 0 else q})
            if a is not None:
                messages.append({"role": "assistant", "content": a})
        return self.tok.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=turns[-1][1] is None)

    @torch.inference_mode()
    def ask(self, question: str, max_new_tokens: int = 32) -> Answer:
        """Feed the question's tokens at full depth on the carried cache, then decode greedily."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}: generate at least one token")
        full = self._render(self.turns + [(question, None)])
        if not full.startswith(self.text):
            raise ValueError("the chat template renders earlier turns differently once a new "
                             "one is added, so the carried cache no longer matches the text; "
                             "use chat=False for this tokenizer")
        new = self.tok(full[len(self.text):], add_special_tokens=False)["input_ids"]
        if len(self.ids) + len(new) + max_new_tokens > self.rf.loaded.max_context:
            raise ValueError(f"the conversation would pass {self.rf.loaded.name}'s context of "
                             f"{self.rf.loaded.max_context} tokens; start a new one")
        start = time.perf_counter()
        model = self.rf.loaded.model
        feed = torch.tensor([new], device=model.device)
        logits = model(input_ids=feed, cache=self.cache, use_cache=True, logits_to_keep=1).logits[0, -1]
        self.ids += new
        eos = self.tok.eos_token_id
        tokens: list[int] = []
        for step in range(max_new_tokens):
            token = int(logits.argmax())
            tokens.append(token)
            if token == eos or step == max_new_tokens - 1:
                break
            logits = model(input_ids=torch.tensor([[token]], device=model.device),
                           cache=self.cache, use_cache=True).logits[0, -1]
            self.ids.append(token)
        fed = tokens[:-1]  # the last token was chosen but not fed
        self.text = full + self.tok.decode(fed, skip_special_tokens=False)
        answer = self.tok.decode(tokens, skip_special_tokens=True)
        self.turns.append((question, answer))
        return Answer(answer, tokens, len(new), time.perf_counter() - start)
