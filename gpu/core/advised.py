"""The built-in models' default split, tail, fill and rows, chosen by ``ridgefill advise``
(paper section 9, steps 2-5; issue 20).

The rule comes before the numbers: it is gpu.tools.advise.recommend with the advisor's
default budget (filled-region retrieval at most 5 points below exact, key-token dNLL at most
0.5 nats, both point estimates on held-out calibration text); among the configurations that
keep it, the lowest MAC share; when none keeps it, exact prefill. :data:`ADVISED` copies each
built-in model's recommendation from ``results/advise/<model>/advice.json`` (command, seed and
sample counts there); tests/test_advised.py checks it against that file, so a rerun of the
advisor that changes the answer fails until this table follows it.

Where the defaults apply: ``RidgeFill.load`` / ``RidgeFill(...)`` and ``ridgefill generate``
start from :func:`default_config` and apply the settings or flags given on top;
``ridgefill fit`` without ``--splits`` fits :func:`default_split`. A local Hugging Face folder
(or any model not listed) gets the library's defaults (PrefillConfig()).
"""
from __future__ import annotations

from .config import PrefillConfig, paper_split

ADVISABLE = ("split", "tail", "fill", "rows", "rescale")  # what the advisor chooses
ADVISED: dict[str, dict] = {
    # `ridgefill advise --model smollm2-135m --threads 2` (seed 0; 16 needle samples at 2K/4K,
    # 4 held-out documents): ridge@20/t1, MAC share 0.702
    "smollm2-135m": {"split": 20, "tail": 1, "fill": "ridge", "rows": "none"},
    # `ridgefill advise --model gemma3-270m --threads 2` (same sizes): POP native's own
    # configuration, identity fill from split 12 with a one-token tail, MAC share 0.683; the
    # ridge fill at that split and tail keeps the budget too but costs 0.703
    "gemma3-270m": {"split": 12, "tail": 1, "fill": "identity", "rows": "none"},
}


def default_config(model: str) -> PrefillConfig:
    """The configuration a prefill of ``model`` starts from: the advised one as a whole (its
    tail and rows were chosen for its split, so maps fitted at another split are refused by
    name rather than run with a tail chosen for another depth), or the library's defaults."""
    return PrefillConfig(**ADVISED.get(model, {}))


def default_split(model: str, n_layers: int) -> int:
    """The split ``ridgefill fit`` fits when no ``--splits`` are given: the advised one for a
    built-in model, else the paper's default of 3/8 of depth (section 2.1)."""
    split = ADVISED.get(model, {}).get("split")
    return int(split) if split is not None else paper_split(n_layers)
