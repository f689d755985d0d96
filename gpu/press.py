"""RidgeFill on a stock Hugging Face model, the way NVIDIA's kvpress plugs a method in: a
function that returns an ordinary transformers ``Cache``, and a press whose context manager
makes ``model.generate`` run RidgeFill for the prefill and the stock model for every
decoding step, leaving the model untouched on exit (paper sections 2.1-2.4).

    from gpu import PrefillConfig, RidgeFillPress, load_maps, prefill
    maps = load_maps("maps-s11.safetensors", model)
    cache = prefill(model, input_ids, maps, PrefillConfig(tail=512), tokenizer=tok)
    model.generate(input_ids, cache=cache, max_new_tokens=32)
    with RidgeFillPress(maps, PrefillConfig(tail=512), tok)(model):
        model.generate(input_ids, max_new_tokens=32)
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

import torch
from transformers import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .core import prompt as prompts
from .core.cache import outside_inference
from .core.config import PrefillConfig
from .core.engine import Engine, Prefill
from .maps.advice import choose_config


def maps_config(maps) -> PrefillConfig:
    """The configuration ``prefill`` and the presses run when given none: the advice for
    ``maps`` (a map set, or {kind: map set}): their own, or their built-in model's
    (gpu.maps.advice.advice_for; said in one line), else the library's defaults."""
    return choose_config("", maps)


def run_prefill(engine: Engine, ids: torch.Tensor, config: PrefillConfig, tokenizer=None,
                logits_rows: int | None = 1) -> Prefill:
    """RidgeFill prefill of ``ids`` (1, n) under ``config``; text-reading row selectors read
    the ids' text through ``tokenizer`` (a clear error without one)."""
    # without a tokenizer a text-reading selector gets no prompt, and Engine.prefill says so
    prompt = (prompts.from_ids(tokenizer, ids) if tokenizer is not None and config.needs_text
              and config.rows != "none" and config.fill != "exact" else None)
    pre = engine.prefill(ids, config, prompt=prompt, logits_rows=logits_rows)
    outside_inference(pre.cache)
    if pre.visible is not None:
        raise ValueError("fill='none' leaves filled rows without late-layer entries, which an "
                         "ordinary cache cannot hide; use fill='ridge' or 'identity' here "
                         "(RidgeFill.generate runs fill='none')")
    return pre


def prefill(model, input_ids: torch.Tensor, maps=None, config: PrefillConfig | None = None,
            tokenizer=None):
    """An ordinary transformers Cache holding the RidgeFill prefill of ``input_ids[:, :-1]``
    on a stock ``AutoModelForCausalLM``, so ``model.generate(input_ids, cache=...)`` (or
    ``past_key_values=``) continues from it: the last prompt token runs as the first
    full-depth step. ``maps`` from :func:`gpu.load_maps` (None for fill identity/exact);
    ``config`` None: :func:`maps_config`."""
    config = config if config is not None else maps_config(maps)
    ids = input_ids[:, :-1]
    return run_prefill(Engine(model, maps), ids, config, tokenizer).cache


@contextmanager
def prefill_hook(module, engine: Engine, config: PrefillConfig, tokenizer, name: str,
                 output: Callable, press):
    """Both presses' wrapper: while open, ``module.forward`` runs RidgeFill's prefill of the
    whole prompt (``config`` checked first) when called with more than one unpadded token and
    an empty or absent cache, writing into the cache it was given (the caller keeps that
    object) and returning ``output(prefill, cache)``; ``press.last`` keeps the prefill. Every
    other call, decoding and the engine's own included, is the module's own forward, which
    is restored on exit, exceptions included."""
    engine.resolve(config)
    stock = module.forward
    own = vars(module).get("forward")  # an instance forward already there (accelerate hooks)
    inside = False

    def forward(*args, **kwargs):
        nonlocal inside
        ids = kwargs.get("input_ids", args[0] if args else None)
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        if (inside or ids is None or ids.shape[-1] < 2
                or (cache is not None and cache.get_seq_length() > 0)):
            return stock(*args, **kwargs)
        if cache is not None and not isinstance(cache, DynamicCache):
            raise ValueError(f"{name} writes an ordinary DynamicCache, not a "
                             f"{type(cache).__name__}: leave the cache unset")
        mask = kwargs.get("attention_mask")
        if mask is not None and not bool(mask.all()):
            raise ValueError(f"{name} prefills one unpadded sequence: pass a batch of one "
                             "without padding")
        inside = True
        try:
            press.last = run_prefill(engine, ids, config, tokenizer)
        finally:
            inside = False
        if cache is None:
            cache = press.last.cache
        else:
            cache.layers[:] = press.last.cache.layers
        return output(press.last, cache)

    module.forward = forward
    try:
        yield
    finally:
        if own is not None:
            module.forward = own
        else:
            del module.forward  # the class's own forward again


class RidgeFillPress:
    """``with RidgeFillPress(maps, config, tokenizer)(model): model.generate(...)``: the
    first forward with an empty cache and more than one token is a RidgeFill prefill of the
    whole prompt (its cache written into the cache ``generate`` passed); every other forward,
    decoding included, is the model's own. The model is restored on exit, exceptions
    included."""

    def __init__(self, maps=None, config: PrefillConfig | None = None, tokenizer=None):
        self.maps, self.tokenizer = maps, tokenizer
        self.config = config if config is not None else maps_config(maps)
        self.last: Prefill | None = None  # the last prefill this press ran (rows, counts)

    @contextmanager
    def __call__(self, model):
        def output(pre: Prefill, cache):
            return CausalLMOutputWithPast(logits=pre.logits[-1:][None], past_key_values=cache)

        with prefill_hook(model, Engine(model, self.maps), self.config, self.tokenizer,
                          "RidgeFillPress", output, self):
            yield model
