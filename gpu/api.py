"""The Python API: RidgeFill prefill on a loaded model, then ordinary decoding.

    from gpu.api import RidgeFill
    rf = RidgeFill.load("smollm2-135m", "maps.safetensors", fill="ridge", tail=512, rows="lexical")
    out = rf.generate("long document ...", question="What is ...?", chat=True)
    cache = rf.cache(input_ids)          # an ordinary transformers cache of all but the last
    rf.loaded.model.generate(input_ids, cache=cache, max_new_tokens=32)   # token

Settings are one :class:`gpu.core.config.PrefillConfig`; ``load`` and the constructor also take
its fields as keywords, applied over the model's defaults (for a built-in model, the split,
tail, fill and rows ``ridgefill advise`` chose: gpu.core.advised).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from .core import models
from .core import prompt as prompts
from .core.config import PrefillConfig
from .core.engine import Engine, Prefill
from .conversation import Conversation
from .maps.advice import choose_config
from .maps.cached import cached_maps
from .maps.files import MapSet, load_maps
from .press import run_prefill


def _cached(loaded: models.Loaded, config: PrefillConfig) -> dict:
    """A built-in model's maps of each kind ``config`` reads at its split (shipped, cached, or
    fitted once: gpu.maps.cached; said in one line); a local model has none to find."""
    if loaded.name not in models.BUILTINS or config.split is None:
        return {}
    return {kind: cached_maps(loaded.name, config.split, kind, loaded=loaded)
            for kind in config.map_kinds}


@dataclass(kw_only=True)
class Result:
    text: str
    prompt_tokens: int
    filled: int
    exact_prefix: int
    tail: int
    ttft_seconds: float
    decode_tokens_per_second: float
    new_tokens: int
    fill: str
    rows: str
    split: int | None
    notes: list[str]

    def to_dict(self) -> dict:
        return asdict(self)


class RidgeFill:
    """RidgeFill prefill (paper sections 2.1-2.4) for one model, one set of maps and one
    :class:`PrefillConfig`; every decoding step runs the full model. ``cache()``,
    ``prefill()`` and ``generate()`` select the same rows for the same prompt."""

    def __init__(self, loaded: models.Loaded, maps: MapSet | None = None,
                 config: PrefillConfig | None = None, **settings):
        config = choose_config(loaded.name, maps, config, **settings)
        self.loaded, self.maps = loaded, maps
        self.engine = Engine(loaded.model, maps)
        self.config = self.engine.resolve(config)  # checked once, here, not at the first prompt

    @classmethod
    def load(cls, model: str, maps: str | None = None, config: PrefillConfig | None = None, *,
             device=None, dtype: torch.dtype | None = None, **settings) -> "RidgeFill":
        """Load a built-in model or a local Hugging Face folder, and its map file (with the
        configuration advised for it when one was written beside it and ``config`` is not
        given: gpu.maps.advice)."""
        loaded = models.load(model, device=device, dtype=dtype)
        config = choose_config(loaded.name, maps, config, **settings)

        def read(path):
            return load_maps(path, loaded.model, split=config.split, precision=config.precision,
                             resident=not config.stream_maps)

        if maps is not None:  # one file, of the kind it says (the keys' fill, or the probe's)
            return cls(loaded, read(maps), config)
        found = {kind: read(path) for kind, path in
                 (_cached(loaded, config) if config.needs_maps else {}).items()}
        return cls(loaded, found if len(found) > 1 else next(iter(found.values()), None), config)

    # --------------------------------------------------------------------------
    @property
    def split(self) -> int | None:
        return self.config.split

    def prompt(self, body: str, question: str = "", chat: bool = False,
               answer_prefix: str = "") -> prompts.Prompt:
        p = prompts.build(self.loaded.tokenizer, body, question, chat=chat,
                          answer_prefix=answer_prefix)
        if p.n > self.loaded.max_context:
            raise ValueError(f"the prompt has {p.n} tokens, more than {self.loaded.name}'s "
                             f"context of {self.loaded.max_context}; shorten it")
        return p

    def prefill(self, p: prompts.Prompt, notes: list[str] | None = None,
                logits_rows: int | None = 1) -> Prefill:
        """RidgeFill prefill of the whole prompt ``p``; adjustments are appended to ``notes``."""
        pre = self.engine.prefill(p.ids, self.config, prompt=p, logits_rows=logits_rows)
        if notes is not None:
            notes.extend(pre.info["notes"])
        return pre

    def generate(self, body: str, question: str = "", *, chat: bool = False,
                 max_new_tokens: int = 32, answer_prefix: str = "") -> Result:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens}: generate at least one token")
        notes: list[str] = []
        p = self.prompt(body, question, chat, answer_prefix)
        start = time.perf_counter()
        pre = self.prefill(p, notes)
        first = int(pre.last_logits.argmax())  # the first token is chosen here
        ttft = time.perf_counter() - start
        t1 = time.perf_counter()
        tokens = self.engine.decode(pre, max_new_tokens, self.loaded.tokenizer.eos_token_id)
        decode_s = time.perf_counter() - t1
        assert tokens[0] == first
        counts = pre.plan.counts() if pre.plan is not None else {"filled": 0, "exact_prefix": 0,
                                                                  "tail": p.n}
        return Result(
            text=self.loaded.tokenizer.decode(tokens, skip_special_tokens=True),
            prompt_tokens=p.n, filled=counts["filled"], exact_prefix=counts["exact_prefix"],
            tail=counts["tail"], ttft_seconds=ttft,
            decode_tokens_per_second=(len(tokens) - 1) / decode_s
            if len(tokens) > 1 and decode_s > 0 else 0.0,
            new_tokens=len(tokens), fill=pre.fill, rows=self.config.rows,
            split=self.config.split, notes=notes)

    @torch.inference_mode()
    def cache(self, input_ids: torch.Tensor):
        """RidgeFill prefill of ``input_ids[:, :-1]`` as an ordinary transformers cache, so
        ``model.generate(input_ids, cache=cache)`` decodes the way users already do (the last
        prompt token then runs as the first full-depth step). Text-reading row selectors read
        the ids' decoded text (the loaded tokenizer), so the rows are those ``prefill`` picks
        for the same tokens (gpu.prefill on a stock model does the same)."""
        return run_prefill(self.engine, input_ids[:, :-1], self.config, self.loaded.tokenizer).cache

    def chat(self, document: str, *, chat: bool | None = None) -> Conversation:
        """A conversation over ``document`` (paper Appendix D): the document and the first
        question are prefilled once with RidgeFill, then every answer and question runs at
        full depth on the carried cache; the exact rows are chosen once, for the first
        question. ``chat``: wrap the turns in the model's chat template (default: when the
        tokenizer has one)."""
        return Conversation(self, document, chat)
