"""A tokenized prompt with what the row selectors read: token pieces, character spans in the
rendered text, special-token rows and where the question starts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Prompt:
    ids: torch.Tensor            # (1, N)
    text: str                    # the text the ids encode (chat template rendered)
    spans: np.ndarray            # (N, 2) character [start, end) of each token in ``text``
    pieces: list[str]            # token strings
    special: np.ndarray          # rows holding special / control tokens
    question_row: int            # first row of the question (N when there is none)

    @property
    def n(self) -> int:
        return int(self.ids.shape[1])


def build(tokenizer, body: str, question: str = "", *, chat: bool = False,
          answer_prefix: str = "") -> Prompt:
    """Tokenize ``body`` + ``question`` (question last, paper 3.2), optionally in the model's
    chat template as one user turn."""
    user = body if not question else f"{body}\n\n{question}"
    if chat:
        text = tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                             add_generation_prompt=True) + answer_prefix
    else:
        bos = tokenizer.bos_token if getattr(tokenizer, "add_bos_token", True) and tokenizer.bos_token else ""
        text = bos + user + answer_prefix
    return build_text(tokenizer, text, question)


def build_text(tokenizer, text: str, question: str = "") -> Prompt:
    """The Prompt of an already rendered ``text`` (template and special tokens written out);
    ``question``, when given, is the last occurrence of that string in the text."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids = enc["input_ids"]
    spans = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    special = special_rows(tokenizer, ids)
    q_char = text.rfind(question) if question else len(text)
    question_row = int(np.searchsorted(spans[:, 0], q_char)) if question else len(ids)
    return Prompt(torch.tensor([ids]), text, spans, tokenizer.convert_ids_to_tokens(ids), special,
                  question_row)


def from_ids(tokenizer, ids: torch.Tensor) -> Prompt:
    """The Prompt of raw ``ids`` (1, N): the text they decode to, with special and
    chat-template tokens recognised from the tokenizer. When the decoded text tokenizes back to
    the same ids its offsets are used; otherwise each token's own decoding is laid end to end.
    Raw ids carry no question boundary (``question_row`` = N)."""
    seq = [int(t) for t in ids[0].tolist()]
    text = tokenizer.decode(seq, skip_special_tokens=False, clean_up_tokenization_spaces=False)
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if list(enc["input_ids"]) == seq:
        spans = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    else:
        parts = [tokenizer.decode([t], skip_special_tokens=False,
                                  clean_up_tokenization_spaces=False) for t in seq]
        ends = np.cumsum([len(s) for s in parts], dtype=np.int64)
        spans = np.stack([ends - [len(s) for s in parts], ends], axis=1).reshape(-1, 2)
        text = "".join(parts)
    special = special_rows(tokenizer, seq)
    return Prompt(ids.detach().cpu().reshape(1, -1), text, spans,
                  tokenizer.convert_ids_to_tokens(seq), special, len(seq))


def special_rows(tokenizer, ids: list[int]) -> np.ndarray:
    """Rows holding special or added (chat-template, control) tokens."""
    special_ids = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    return np.array([i for i, t in enumerate(ids) if t in special_ids], dtype=np.int64)
