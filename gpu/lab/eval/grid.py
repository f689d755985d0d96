"""The study's grid (paper sections 3, 6): its configuration (:class:`EvalConfig`, the
presets of the built-in models), its arms (paper Table 3 plus the controls) and the names of
the frontier's and the benches' arms (:func:`arm_name`)."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from ...core import presets
from ...core.config import PrefillConfig, pop_split
from ...core.extras import SPLICES
from . import tasks
from .instruments import Arm

# the selector an exact share of the prefix names (gpu.core.select.AttentionRows' ``share``)
SHARE_ROWS = "attention"


@dataclass
class EvalConfig:
    """One model's grid. ``splits[0]`` is the primary split (3/8 of depth)."""

    model: str
    splits: tuple[int, ...]
    tail: int
    needles: dict[int, tuple[str, ...]]       # prompt length -> tasks
    samples: int = 20                          # filled-region samples per task and length
    docs: int = 24                             # long documents for loss and agreement
    loss_length: int = 4096                    # tokens of each document used
    score_tokens: int = 256                    # the scored final stretch (inside the tail)
    continuation: int = 32                     # exact greedy tokens for agreement / KL
    answer_tokens: int = 128                   # new tokens per answer at most (RULER's NIAH)
    chat: bool = True                          # chat template (instruct models)
    answer_prefix: bool = True                 # RULER's answer prefix ends the prompt
    seed: int = 0
    calib_tokens: int = 40_000
    max_draws: int = 25                        # candidates drawn per wanted sample, at most
    instruments: tuple[str, ...] = ("needle", "loss")
    minimum: dict = field(default_factory=lambda: {"samples": 20, "docs": 24, "domains": 4})

    @property
    def key_window(self) -> int:
        """W: key tokens compare exact loss with the context cut to the last W tokens before
        the scored stretch, which removes the whole prefix (the cut run is the tail)."""
        return self.tail - self.score_tokens

    def to_dict(self) -> dict:
        d = asdict(self)
        d["needles"] = {str(k): list(v) for k, v in self.needles.items()}
        d["key_window"] = self.key_window
        return d


def depth(fraction: float, n_layers: int) -> int:
    return int(round(fraction * n_layers))


def rows_part(rows: str, share: float | None = None, complete: bool = False) -> str:
    """The rows part of an arm's name: the selector's name, or for the attention selector with
    an exact ``share`` of the prefix ``attn<percent>``, then ``c`` with span completion."""
    if share is None:
        return rows
    if rows != SHARE_ROWS:
        raise ValueError(f"a share names the {SHARE_ROWS!r} selector's rows, not {rows!r}")
    pct = share * 100
    if abs(pct - round(pct)) > 1e-9 or not 0 < round(pct) <= 100:
        raise ValueError(f"share={share!r}: a whole percent of the prefix, 0.01 to 1")
    return f"attn{round(pct)}{'c' if complete else ''}"


def arm_name(fill: str, split: int, tail: int, rows: str = "none",
             values: str | None = None, share: float | None = None,
             complete: bool = False) -> str:
    """``<keys>[.<values>-values][+<rows>]@<split>/t<tail>``; with a ``share`` of the
    attention selector's rows the rows part is ``attn<percent>[c]`` (:func:`rows_part`)."""
    keys = fill if values is None else f"{fill}.{values}-values"
    rows = rows_part(rows, share, complete)
    return f"{keys}{'' if rows == 'none' else '+' + rows}@{split}/t{tail}"


_ARM = re.compile(r"(?P<keys>[a-z]+)(?:\.(?P<values>[a-z]+)-values)?(?:\+(?P<rows>[a-z0-9]+))?"
                  r"@(?P<split>\d+)(?:/t(?P<tail>\d+))?")


def parse_arm(name: str) -> PrefillConfig:
    """The configuration an arm's name (:func:`arm_name`, tail 1 when left out) spells,
    e.g. ``kv+attn20c@12/t1``: kv fill from split 12, 20% of the prefix exact by attention
    with whole spans, a one-token tail."""
    m = _ARM.fullmatch(name)
    if m is None:
        raise ValueError(f"arm {name!r}: spell it <keys>[.<values>-values][+<rows>]@<split>"
                         "[/t<tail>], e.g. kv+attn20c@12/t1")
    rows, options = m["rows"] or "none", {}
    share = re.fullmatch(r"attn(\d+)(c?)", rows)
    if share:
        rows, options = SHARE_ROWS, {"share": int(share[1]) / 100, "complete": bool(share[2])}
    return PrefillConfig(fill=m["keys"], values_fill=m["values"], split=int(m["split"]),
                         tail=int(m["tail"] or 1), rows=rows, selector_options=options)


def study_config(model: str, n_layers: int, *, chat: bool = True) -> EvalConfig:
    """The study's grid for the built-in models (any other model: smollm2's shape, chat
    prompts as ``chat`` says)."""
    if model == "gemma3-270m":  # base model, QK-norm: completion prompts, tail 1,024
        return EvalConfig(model, (depth(3 / 8, n_layers),), 1024,
                          {4096: tasks.TASKS, 8192: tasks.TASKS}, loss_length=8192,
                          score_tokens=512, chat=False)
    return EvalConfig(model, (depth(3 / 8, n_layers), depth(1 / 2, n_layers)), 512,
                      {2048: tasks.TASKS, 4096: tasks.TASKS, 8192: ("niah_single_1",)},
                      loss_length=4096, score_tokens=256, chat=chat)


def preset_for(loaded) -> EvalConfig:
    """``study_config`` of a loaded model: chat prompts iff its tokenizer has a chat template
    (smollm2-135m-Instruct has one; a base model gets plain completions)."""
    chat = getattr(loaded.tokenizer, "chat_template", None) is not None
    return study_config(loaded.name, loaded.n_layers, chat=chat)


def study_arms(cfg: EvalConfig, n_layers: int) -> list[Arm]:
    """Every arm at the primary split (controls beside each selected-rows arm, splices),
    exact / identity / RidgeFill at the others; in run order (a selection before the
    controls that copy its count)."""
    S, T = cfg.splits[0], cfg.tail
    pop = pop_split(n_layers)
    def at(fill: str, split: int, tail: int = T, rows: str = "none") -> PrefillConfig:
        return PrefillConfig(fill=fill, split=split, tail=tail, rows=rows)

    arms = [Arm("exact", PrefillConfig(fill="exact"), label="exact"),
            Arm(f"nofill@{S}", at("none", S), label="no fill"),
            Arm(f"identity@{S}", at("identity", S), label="identity (POP's fill)"),
            Arm(f"pop@{pop}", presets.pop(n_layers), label="POP native"),
            Arm(f"ridge@{S}", at("ridge", S), label="RidgeFill")]
    for rows, what in (("attention", "attention rows"), ("probe", "probe rows")):
        base, sel = f"ridge+{rows}@{S}", at("ridge", S, rows=rows)
        arms += [Arm(base, sel, label=f"RidgeFill + {what}"),
                 Arm(f"{base}/random", sel, control="random", of=base,
                     label=f"  control: random rows, count of {what}"),
                 Arm(f"{base}/tail", sel, control="tail", of=base,
                     label="  control: same count added to the tail"),
                 Arm(f"{base}/blind", sel, blind=True, label=f"  control: {what}, question hidden")]
    arms += [Arm(f"ridge@{S}/splice-{w}", at("ridge", S), splice=w, label=f"RidgeFill, exact {w}")
             for w in SPLICES]
    for s in cfg.splits[1:]:
        arms += [Arm(f"identity@{s}", at("identity", s), label="identity (POP's fill)"),
                 Arm(f"ridge@{s}", at("ridge", s), label="RidgeFill")]
    return arms
