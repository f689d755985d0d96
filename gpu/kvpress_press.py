"""RidgeFill as a press of NVIDIA's kvpress (PyPI ``kvpress``), for comparing it with the KV-cache
methods there: RidgeFill's prefill of the context (paper sections 2.1-2.4) inside kvpress's
``kv-press-text-generation`` pipeline.

    import kvpress  # registers the pipeline
    from transformers import pipeline
    from gpu import PrefillConfig, RidgeFillKVPress, load_maps
    pipe = pipeline("kv-press-text-generation", model=model, tokenizer=tok)
    press = RidgeFillKVPress(load_maps("maps.safetensors", model), PrefillConfig(tail=512), tok)
    pipe(context, question="...", press=press)["answer"]

The pipeline (kvpress 0.5.5) prefills the context with ``model.model(input_ids=context_ids,
past_key_values=cache)`` inside ``with press(model):``, reads nothing of that call but the
cache, and then runs the question and the greedy answer through the stock ``model(...)`` after
the press has exited. So the press replaces the inner model's forward for one call: a prefill of
more than one token into an empty cache runs RidgeFill (``gpu.press.run_prefill``) and writes
its cache layers into the cache the pipeline passed; every other call is the model's own. The
output carries that cache only (``last_hidden_state`` is None: RidgeFill's late layers run the
tail rows only, and the pipeline reads no hidden state); ``model.generate`` under a press is
``gpu.RidgeFillPress``'s job. Sliding-window layers keep RidgeFill's own cache layers, which
kvpress's trimming between several questions of one context does not expect: ask one question
per call on such models.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

from kvpress import BasePress
from transformers import DynamicCache
from transformers.modeling_outputs import BaseModelOutputWithPast

from .core.config import PrefillConfig
from .core.engine import Engine, Prefill
from .press import maps_config, run_prefill


@dataclass
class RidgeFillKVPress(BasePress):
    """``pipe(context, question=q, press=RidgeFillKVPress(maps, config, tokenizer))``: the
    context's prefill is RidgeFill's under ``config`` (``maps`` from :func:`gpu.load_maps`, None
    for fill identity/exact; ``config`` None: the maps' advice, gpu.press.maps_config;
    ``tokenizer`` for the text-reading row selectors). The model is restored on exit,
    exceptions included."""

    maps: object = None
    config: PrefillConfig | None = None
    tokenizer: object = None
    last: Prefill | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.config is None:
            self.config = maps_config(self.maps)

    @contextmanager
    def __call__(self, model):
        engine = Engine(model, self.maps)
        engine.resolve(self.config)  # a configuration error before the pipeline runs
        inner = model.model
        own = vars(inner).get("forward")  # an instance forward already there (accelerate hooks)
        stock = inner.forward
        inside = False  # the engine's own calls of the inner model run stock

        def forward(*args, **kwargs):
            nonlocal inside
            ids = kwargs.get("input_ids", args[0] if args else None)
            cache = kwargs.get("cache", kwargs.get("past_key_values"))
            if (inside or ids is None or ids.shape[-1] < 2
                    or (cache is not None and cache.get_seq_length() > 0)):
                return stock(*args, **kwargs)
            if cache is not None and not isinstance(cache, DynamicCache):
                raise ValueError(f"RidgeFillKVPress writes an ordinary DynamicCache, not a "
                                 f"{type(cache).__name__}: leave the pipeline's cache unset")
            padding = kwargs.get("attention_mask")
            if padding is not None and not bool(padding.all()):
                raise ValueError("RidgeFillKVPress prefills one context without padding")
            inside = True
            try:
                self.last = run_prefill(engine, ids, self.config, self.tokenizer)
            finally:
                inside = False
            if cache is None:
                cache = self.last.cache
            else:
                cache.layers[:] = self.last.cache.layers  # the pipeline keeps the object it passed
            return BaseModelOutputWithPast(last_hidden_state=None, cache=cache)

        inner.forward = forward
        try:
            yield model
        finally:
            if own is not None:
                inner.forward = own
            else:
                del inner.forward  # the class's own forward again
