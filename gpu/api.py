"""The Python API: RidgeFill prefill on a loaded model, then ordinary decoding.

    from gpu.api import RidgeFill
    rf = RidgeFill.load("smollm2-135m", maps="maps.safetensors", tail=512, rows="probe")
    out = rf.generate("long document ...", question="What is ...?", chat=True)
    cache = rf.cache(input_ids)          # an ordinary transformers cache of all but the last
    model.generate(input_ids, past_key_values=cache, max_new_tokens=32)   # token
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from . import models, prompt as prompts, select
from .engine import FILLS, Engine, Prefill
from .mapfile import MapSet, load_maps
from .plan import Plan


@dataclass
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
    configuration; every decoding step runs the full model."""

    def __init__(self, loaded: models.Loaded, maps: MapSet | None = None, *, split: int | None = None,
                 tail: int = 512, fill: str = "ridge", rows: str | None = None,
                 rescale: str | None = None, rescale_rows: int = 512, correction: bool = False,
                 selector_options: dict | None = None):
        if fill not in FILLS:
            raise ValueError(f"--fill {fill!r}: choose one of {FILLS}")
        if tail < 1:
            raise ValueError(f"--tail {tail}: the exact tail must be at least 1 token "
                             "(paper default 4096; 512 on the small models)")
        if fill == "ridge" and maps is None:
            raise ValueError("--fill ridge needs maps: run `ridgefill fit --model M --splits S "
                             "--out maps.safetensors` and pass --maps maps.safetensors")
        split = split if split is not None else (maps.split if maps is not None else None)
        if fill in ("ridge", "identity", "none") and split is None:
            raise ValueError(f"--fill {fill} needs a split: pass --split S or --maps")
        self.loaded, self.maps, self.split, self.tail = loaded, maps, split, tail
        self.fill, self.rows, self.rescale, self.rescale_rows = fill, rows, rescale, rescale_rows
        self.engine = Engine(loaded.model, maps)
        if split is not None:
            Plan(1, split, 1, loaded.n_layers)  # validates the split now, not at the first prompt
        if correction:
            kinds = {self.engine.adapter.layer_info(l).kind for l in range(split, loaded.n_layers)}
            if "gdn" not in kinds:
                raise ValueError("--correction applies to Gated DeltaNet layers above the split; "
                                 f"{loaded.name} has none there (drop --correction)")
            if fill == "identity":
                raise ValueError("--correction with --fill identity: DeltaM is measured for the "
                                 "ridge maps; use --fill ridge or drop --correction")
            if fill == "ridge" and not getattr(maps, "delta_M", None):
                raise ValueError("--correction needs DeltaM in the map file: refit the maps with "
                                 "`ridgefill fit --correction`")
        self.correction = correction
        self.rows_default = rows is None  # the measured default (select.DEFAULT_ROWS)
        self.rows = rows = select.DEFAULT_ROWS if rows is None else rows
        self.selector = select.make(rows, **(selector_options or {}))

    @classmethod
    def load(cls, model: str, maps: str | None = None, *, device=None, precision: str = "bf16",
             resident: bool = True, **kw) -> "RidgeFill":
        loaded = models.load(model, device=device)
        mapset = None
        if maps is not None:
            mapset = load_maps(maps, fingerprint=loaded.fingerprint(), split=kw.get("split"),
                               precision=precision, resident=resident,
                               dtype=loaded.model.dtype, device=loaded.model.device)
        return cls(loaded, mapset, **kw)

    # --------------------------------------------------------------------------
    def prompt(self, body: str, question: str = "", chat: bool = False,
               answer_prefix: str = "") -> prompts.Prompt:
        p = prompts.build(self.loaded.tokenizer, body, question, chat=chat,
                          answer_prefix=answer_prefix)
        if p.n > self.loaded.max_context:
            raise ValueError(f"the prompt has {p.n} tokens, more than {self.loaded.name}'s "
                             f"context of {self.loaded.max_context}; shorten it")
        return p

    def plan(self, n: int) -> Plan | None:
        return None if self.fill == "exact" else Plan(n, self.split, self.tail, self.loaded.n_layers)

    def prefill(self, p: prompts.Prompt, notes: list[str] | None = None,
                logits_rows: int | None = 1) -> Prefill:
        notes = notes if notes is not None else []
        plan = self.plan(p.n)
        selector = self.selector
        if plan is not None and plan.n_prefix == 0:
            notes.append(f"prompt of {p.n} tokens fits in the tail of {self.tail}: ran exact")
        if selector is not None and plan is not None and plan.n_prefix < 2:
            if plan.n_prefix:
                notes.append(f"--rows {self.rows}: the prefix has {plan.n_prefix} rows, too short "
                             "to select from; fell back to --rows none")
            selector = None
        return self.engine.prefill(p.ids, plan, self.fill, rescale=self.rescale,
                                   rescale_rows=self.rescale_rows, selector=selector, prompt=p,
                                   logits_rows=logits_rows, correction=self.correction)

    def generate(self, body: str, question: str = "", *, chat: bool = False,
                 max_new_tokens: int = 32, answer_prefix: str = "") -> Result:
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
        return Result(self.loaded.tokenizer.decode(tokens, skip_special_tokens=True), p.n,
                      counts["filled"], counts["exact_prefix"], counts["tail"], ttft,
                      (len(tokens) - 1) / decode_s if len(tokens) > 1 and decode_s > 0 else 0.0,
                      len(tokens), pre.fill, self.rows, self.split, notes)

    @torch.inference_mode()
    def cache(self, input_ids: torch.Tensor):
        """RidgeFill prefill of ``input_ids[:, :-1]`` as an ordinary transformers cache, so
        ``model.generate(input_ids, past_key_values=cache)`` decodes the way users already do
        (the last prompt token then runs as the first full-depth step). Raw ids carry no
        text, so the default row selector is not applied (rows='none' here)."""
        ids = input_ids[:, :-1]
        if self.selector is not None and not self.rows_default:
            raise ValueError("cache() takes raw ids; use prefill(prompt) for --rows selectors")
        # raw ids carry no text to select from: the default selector is not applied here
        # (every prefix row filled); prefill(prompt) / generate() apply it
        pre = self.engine.prefill(ids, self.plan(ids.shape[1]), self.fill, rescale=self.rescale,
                                  rescale_rows=self.rescale_rows, correction=self.correction)
        if pre.visible is not None:
            raise ValueError("--fill none leaves filled rows without late-layer entries, which "
                             "an ordinary cache cannot hide; use RidgeFill.generate instead")
        return pre.cache
