"""vLLM's ``vllm.general_plugins`` entry point: registers RidgeFill's variants of vLLM's model
classes under their own architecture names (gpu.serving.settings.overrides selects them), in
every vLLM process. Registering twice is harmless; stock architectures are left as they are.
Under a vLLM other than the one the classes are written for, nothing is registered (stock
vLLM keeps working) and one warning names both versions."""
from __future__ import annotations

import logging

from .settings import ARCHITECTURES, PREFIX, check_version

log = logging.getLogger("ridgefill")


def register() -> None:
    """Make ``RidgeFill<Arch>`` resolvable by vLLM's model registry (imports nothing heavy:
    vLLM imports gpu.serving.model when it builds such a model)."""
    import vllm
    from vllm import ModelRegistry

    try:
        check_version(vllm.__version__)
    except RuntimeError as err:
        log.warning("%s; the RidgeFill architectures are not registered", err)
        return
    for arch in ARCHITECTURES.values():
        name = PREFIX + arch
        if name not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(name, f"gpu.serving.model:{name}")
