"""Smoke test on the real SmolLM2 (issue 4): fitted maps beat the identity fill on held-out
cache writes, and a needle in the filled region is answered with the default exact rows.
Not the study (``make eval``): one short fit and one prompt."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gpu.data import corpus
from gpu.core import models
from gpu.lab.eval import tasks
from gpu.api import RidgeFill
from gpu.core.config import PrefillConfig
from gpu.maps.fit import FitOptions, fit
from gpu.maps.files import load_maps


@pytest.fixture(scope="module")
def smol():
    try:
        return models.load("smollm2-135m", device="cpu", dtype=torch.float32)
    except ModuleNotFoundError as e:  # the model package is not installed here
        pytest.skip(str(e))


@pytest.mark.model
@pytest.mark.slow
def test_smollm2_fit_and_filled_region_needle(smol, tmp_path):
    torch.set_num_threads(2)
    out = tmp_path / "smol-s11.safetensors"
    fit(smol, FitOptions([11], out, max_tokens=4096, doc_tokens=2048, heldout_docs=1,
                         heldout_tokens=512, lambdas=(1e-3, 1e-2, 1e-1)), progress=False)
    meta = json.loads(out.with_suffix(".json").read_text())
    fitted = np.mean([v["keys"] for v in meta["heldout"]["cosine"].values()])
    identity = np.mean([v["keys"] for v in meta["heldout"]["identity_cosine"].values()])
    assert fitted > identity + 0.03 and fitted > 0.9, (fitted, identity)

    maps = load_maps(out, fingerprint=smol.fingerprint(), split=11)
    # a whole config: the library's defaults (lexical rows), not smollm2's advised bundle
    rf = RidgeFill(smol, maps, config=PrefillConfig(split=11, tail=128))
    hay = corpus.haystack_text(8000, seed=3)
    for index in range(20):
        s = tasks.make_sample("niah_single_1", 700, 3, hay, smol.tokenizer, index=index,
                              reserve=64)
        p = rf.prompt(s.context, s.question, chat=True)
        if tasks.in_filled_region(s, p.spans, p.n, rf.config.tail, char_shift=p.text.find(s.context)):
            break
    else:
        pytest.fail("no sample with its needle in the filled region")
    r = rf.generate(s.context, s.question, chat=True, max_new_tokens=24)
    assert r.filled > 0 and r.exact_prefix < 0.2 * (r.filled + r.exact_prefix)
    assert tasks.all_found(r.text, s.expected), (r.text, s.expected)
