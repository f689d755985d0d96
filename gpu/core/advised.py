"""The built-in models' default split, tail, fill and rows, chosen by ``ridgefill advise``
(paper section 9, steps 2-5).

The rule comes before the numbers: it is gpu.tools.advise.recommend with the advisor's
default budget (filled-region retrieval at most 5 points below exact, key-token dNLL at most
0.5 nats, both point estimates on held-out calibration text): the configurations that keep it
on the advisor's frontier, cheapest first, are confirmed on more held-out needles, and the
first that keeps it there with half the retrieval allowance wins; when none does, exact
prefill (``{"fill": "exact"}``: maps given to such a model are refused unless the caller
asks for ``fill='ridge'``). :data:`ADVISED` reads each built-in model's recommendation from
its committed advice file, ``results/advise/<model>/advice.json`` (command, seed and sample
counts there; what was screened, confirmed and rerun: docs/advisor.md), so a rerun of the
advisor that changes the answer changes the default with it.

Where the defaults apply: ``RidgeFill.load`` / ``RidgeFill(...)``, ``ridgefill generate`` /
``serve``, ``prefill`` and the presses start from :func:`default_config` and apply the
settings or flags given on top; ``ridgefill fit`` without ``--splits`` fits
:func:`default_split`. A local Hugging Face folder (or any model not listed) gets the
library's defaults (PrefillConfig()), or the advice beside its maps (gpu.maps.advice).
"""
from __future__ import annotations

import json
from pathlib import Path

from .config import PrefillConfig, paper_split
from .models import BUILTINS

# what `ridgefill demo` / `make demo` run: the smallest built-in whose advice is a
# fill the advisor confirmed, not exact prefill or POP's own configuration
DEMO_MODEL = "qwen2.5-coder-0.5b"
ADVISABLE = ("split", "tail", "fill", "values_fill", "rows", "rescale")  # what the advisor chooses
COMMITTED = Path(__file__).resolve().parents[2] / "results" / "advise"


def settings_of(recommendation: dict) -> dict:
    """The settings an advisor's recommendation makes the default: its configuration's
    advisable fields, or exact prefill when it does not keep the budget."""
    if not recommendation["keeps_budget"]:
        return {"fill": "exact"}
    return {k: v for k, v in recommendation["config"].items() if k in ADVISABLE}


def _committed() -> dict[str, dict]:
    """{built-in model: settings} from the committed advice files (none in an install
    without the repository's results/: every model then starts from PrefillConfig())."""
    found = {}
    for name in BUILTINS:
        path = COMMITTED / name / "advice.json"
        if path.is_file():
            found[name] = settings_of(json.loads(path.read_text())["recommendation"])
    return found


ADVISED: dict[str, dict] = _committed()


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
