"""RidgeFill on torch: the public face (paper sections 2.1-2.4).

    from gpu import PrefillConfig, RidgeFill, RidgeFillPress, load_maps, prefill

``prefill(model, input_ids, maps, config, tokenizer)`` returns an ordinary transformers Cache;
``RidgeFillPress(maps, config, tokenizer)(model)`` is a context manager around a stock model's
``generate``; ``RidgeFillKVPress(maps, config, tokenizer)`` is that prefill as a press of
NVIDIA's kvpress pipeline (the ``kvpress`` extra; imported on first use, so ``import gpu`` does
not import kvpress, and ``from gpu import *`` leaves it out); ``RidgeFill`` is the convenience
class over a built-in or local model. The packages: ``core`` (the engine), ``maps`` (map files,
fit), ``serving`` (RidgeFill inside vLLM), ``data`` (texts), ``eval`` (the research harness),
``tools`` (bench, demo, studies), ``cli``.
"""
from .version import __version__

# the public names, imported on first use: ``import gpu.serving.plugin`` (which vLLM loads in
# every process it starts) then imports neither torch's engine nor numba
EXPORTS = {"PrefillConfig": "core.config", "RidgeFill": "api", "RidgeFillPress": "press",
           "load_maps": "maps.files", "prefill": "press", "RidgeFillKVPress": "kvpress_press"}
__all__ = ["PrefillConfig", "RidgeFill", "RidgeFillPress", "load_maps", "prefill", "__version__"]


def __getattr__(name: str):
    """The public names of :data:`EXPORTS` (``RidgeFillKVPress`` imports kvpress, an
    optional extra, which ``from gpu import *`` leaves out)."""
    if name in EXPORTS:
        from importlib import import_module
        return getattr(import_module(f"{__name__}.{EXPORTS[name]}"), name)
    raise AttributeError(f"module 'gpu' has no attribute {name!r}")
