"""Shared pytest/Hypothesis settings: CI runs a bounded number of examples per property."""
import os
import sys

import pytest

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="module")
def attention_functions_restored():
    """Importing kvpress wraps transformers' attention functions for the whole process; every
    test module leaves them as it found them, so no module's result depends on the order."""
    def local() -> dict:
        utils = sys.modules.get("transformers.modeling_utils")  # rfmath's tests never load it
        return utils.ALL_ATTENTION_FUNCTIONS._local_mapping if utils else {}

    before = dict(local())
    yield
    local().clear()
    local().update(before)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``large`` (the Qwen2.5-Coder models, the tiered vLLM path compiled: minutes
    each) run only when asked for with ``-m large`` (``make test-large``), so ``make test``
    stays inside CI's half hour."""
    if "large" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="larger model or minutes of compiling: run with "
                                   "`make test-large`")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip)
