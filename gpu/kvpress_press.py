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
more than one token into an empty cache runs RidgeFill and writes its cache layers into the
cache the pipeline passed (``gpu.press.prefill_hook``, the wrapper of both presses); every other
call is the model's own. The
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
from transformers.modeling_outputs import BaseModelOutputWithPast

from .core.config import PrefillConfig
from .core.engine import Engine, Prefill
from .press import maps_config, prefill_hook


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
        def output(pre: Prefill, cache):
            return BaseModelOutputWithPast(last_hidden_state=None, cache=cache)

        # kvpress's pipeline calls the inner model; the engine's own calls of it run stock
        with prefill_hook(model.model, Engine(model, self.maps), self.config, self.tokenizer,
                          "RidgeFillKVPress", output, self):
            yield model
