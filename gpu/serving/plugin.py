"""vLLM's ``vllm.general_plugins`` entry point: registers RidgeFill's variants of vLLM's model
classes under their own architecture names (gpu.serving.settings.overrides selects them), in
every vLLM process. Registering twice is harmless; stock architectures are left as they are."""
from __future__ import annotations

from .settings import ARCHITECTURES, PREFIX


def register() -> None:
    """Make ``RidgeFill<Arch>`` resolvable by vLLM's model registry (imports nothing heavy:
    vLLM imports gpu.serving.model when it builds such a model)."""
    from vllm import ModelRegistry

    for arch in ARCHITECTURES.values():
        name = PREFIX + arch
        if name not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(name, f"gpu.serving.model:{name}")
