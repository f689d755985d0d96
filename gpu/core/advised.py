"""The built-in models' default split, tail, fill and rows, chosen by ``ridgefill advise``
(paper section 9, steps 2-5).

The rule comes before the numbers: it is gpu.lab.tools.advise.recommend with the advisor's
default budget (filled-region retrieval at most 5 points below exact, key-token dNLL at most
0.5 nats, both point estimates on held-out calibration text): the configurations that keep it
on the advisor's frontier, cheapest first, are confirmed on more held-out needles, and the
first that keeps it there with half the retrieval allowance wins; when none does, exact
prefill (``{"fill": "exact"}``: maps given to such a model are refused unless the caller
asks for ``fill='ridge'``). :data:`ADVISED` reads each built-in model's recommendation from
the advice file shipped in this package, ``gpu/core/advice/<model>.json`` (package data, read
through importlib.resources, so an installed wheel runs the same defaults as the repository):
a byte-identical copy of the advisor's committed output, ``results/advise/<model>/advice.json``
(command, seed and sample counts there; what was screened, confirmed and rerun:
docs/advisor.md). A rerun of the advisor into the checkout's record rewrites this copy too
(gpu.lab.tools.advise.ship; tests/test_advice_package.py checks the two are the same bytes).

Where the defaults apply: ``RidgeFill.load`` / ``RidgeFill(...)``, ``ridgefill generate`` /
``serve``, ``prefill`` and the presses start from :func:`default_config` and apply the
settings or flags given on top; ``ridgefill fit`` without ``--splits`` fits
:func:`default_split`. A local Hugging Face folder (or any model not listed) gets the
library's defaults (PrefillConfig()), or the advice beside its maps (gpu.maps.advice).
"""
from __future__ import annotations

import json
from importlib import resources

from .config import PrefillConfig, paper_split
from .models import BUILTINS

# what `ridgefill demo` / `make demo` run: the smallest built-in whose advice is a
# fill the advisor confirmed, not exact prefill or POP's own configuration
DEMO_MODEL = "qwen2.5-coder-0.5b"
ADVISABLE = ("split", "tail", "fill", "values_fill", "rows", "rescale")  # what the advisor chooses
RECORD = "results/advise"  # the advisor's output in the repository: RECORD/<model>/advice.json
SHIPPED = "advice"  # its copies in this package, what ADVISED reads: gpu/core/SHIPPED/<model>.json


def shipped_advice(model: str):
    """The advice file of built-in ``model`` as shipped in the package (an
    importlib.resources Traversable: a file in a wheel install or a checkout alike)."""
    return resources.files(__package__).joinpath(SHIPPED, f"{model}.json")


def advice_source(model: str) -> str:
    """How an announcement names built-in ``model``'s advice: the shipped copy and the
    record it copies."""
    return f"{__package__.replace('.', '/')}/{SHIPPED}/{model}.json, from {RECORD}/{model}/advice.json"


def settings_of(recommendation: dict) -> dict:
    """The settings an advisor's recommendation makes the default: its configuration's
    advisable fields, or exact prefill when it does not keep the budget."""
    if not recommendation["keeps_budget"]:
        return {"fill": "exact"}
    return {k: v for k, v in recommendation["config"].items() if k in ADVISABLE}


def _shipped() -> dict[str, dict]:
    """{built-in model: settings} from the advice files shipped in the package. Every built-in
    has one: a missing file is a broken install, said here rather than run as PrefillConfig()."""
    found = {}
    for name in BUILTINS:
        source = shipped_advice(name)
        if not source.is_file():
            raise FileNotFoundError(
                f"the built-in advice for {name} ({source}) is not in this install of ridgefill: "
                f"reinstall it, or copy {RECORD}/{name}/advice.json there")
        found[name] = settings_of(json.loads(source.read_text())["recommendation"])
    return found


ADVISED: dict[str, dict] = _shipped()


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
