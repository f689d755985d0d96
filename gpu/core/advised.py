"""The built-in models' default split, tail, fill and rows, chosen by ``ridgefill advise``
(paper section 9, steps 2-5).

The rule comes before the numbers: it is gpu.tools.advise.recommend with the advisor's
default budget (filled-region retrieval at most 5 points below exact, key-token dNLL at most
0.5 nats, both point estimates on held-out calibration text): the configurations that keep it
on the advisor's frontier, cheapest first, are confirmed on 40 more held-out needles, and the
first that keeps it there with half the retrieval allowance wins; when none does, exact
prefill (``{"fill": "exact"}``: maps given to such a model are refused unless the caller
asks for ``fill='ridge'``). :data:`ADVISED` copies each
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

# what `ridgefill demo` / `make demo` run: the smallest built-in whose advice is a
# fill the advisor confirmed, not exact prefill or POP's own configuration
DEMO_MODEL = "qwen2.5-coder-0.5b"
ADVISABLE = ("split", "tail", "fill", "values_fill", "rows", "rescale")  # what the advisor chooses
ADVISED: dict[str, dict] = {
    # each entry: results/advise/<model>/advice.json (command, seeds, sample counts); what was
    # screened, confirmed and rerun, per model: docs/advisor.md
    "smollm2-135m": {"fill": "exact"},
    "gemma3-270m": {"split": 12, "tail": 1, "fill": "identity", "rows": "none"},
    "qwen2.5-coder-0.5b": {"split": 16, "tail": 1, "fill": "kv", "values_fill": "identity",
                           "rows": "none"},
    "qwen2.5-coder-1.5b": {"split": 19, "tail": 1, "fill": "identity", "values_fill": "kv",
                           "rows": "none"},
}


def default_config(model: str, advice: dict | None = None, **settings) -> PrefillConfig:
    """The configuration a prefill of ``model`` starts from: the ``advice`` a map file carries
    (gpu.maps.advice), else the built-in advised one, as a whole (its tail and rows were
    chosen for its split, so maps fitted at another split are refused by name rather than run
    with a tail chosen for another depth), or the library's defaults, with ``settings`` on top. The advised values source belongs to the advised keys fill: a
    ``fill`` given without ``values_fill`` takes its values from the same fill (``--fill
    exact`` on a model advised ``identity`` keys / ``kv`` values is exact prefill)."""
    advised = dict(advice["config"] if advice else ADVISED.get(model, {}))
    if "fill" in settings and "values_fill" not in settings:
        advised.pop("values_fill", None)
    return PrefillConfig(**advised | settings)


def default_split(model: str, n_layers: int) -> int:
    """The split ``ridgefill fit`` fits when no ``--splits`` are given: the advised one for a
    built-in model, else the paper's default of 3/8 of depth (section 2.1)."""
    split = ADVISED.get(model, {}).get("split")
    return int(split) if split is not None else paper_split(n_layers)
