"""RULER (Hsieh et al., 2024) as the harness's needle units, from the package most users run it
from: lm-eval's ``lm_eval/tasks/ruler`` task definitions (``pip install -e ".[ruler]"``).

lm-eval builds each sample (its generators, sized with the model's own tokenizer), the prompt
(``Task.fewshot_context`` in the model's chat template, RULER's answer prefix opening the
assistant turn, as ``lm_eval --apply_chat_template`` renders it) and the answer budget
(the task's ``max_gen_toks``). The harness runs every arm on each prompt (gpu.lab.eval.harness:
shared lower passes, batched greedy decoding) and scores with RULER's ``string_match_all``
(gpu.lab.eval.tasks.score, checked against lm-eval's own ``process_results`` in the tests).

Only the tasks that generate with no network run here (:data:`OFFLINE`); :data:`NEEDS_NETWORK`
says why the others cannot. Every sample is scored, wherever its needles lie (RULER's number,
not the filled-region subset of gpu.lab.eval.units.needle_units).
"""
from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from contextlib import contextmanager
from functools import lru_cache

import numpy as np

from rfmodel.atomic import write_text

from ...core import prompt as prompts
from .report import ni_word
from .units import Unit, sig

OFFLINE = ("niah_single_1", "niah_multikey_2", "niah_multikey_3", "ruler_vt", "ruler_cwe",
           "ruler_fwe")
_ESSAY = ("the essay haystack loads the data set baber/paul_graham_essays from the Hugging Face "
          "hub, and its sentence splitter needs nltk's punkt_tab download")
NEEDS_NETWORK = {
    "niah_single_2": _ESSAY, "niah_single_3": _ESSAY, "niah_multikey_1": _ESSAY,
    "niah_multivalue": _ESSAY, "niah_multiquery": _ESSAY,
    "ruler_qa_squad": "SQuAD is downloaded from rajpurkar.github.io",
    "ruler_qa_hotpot": "HotpotQA is downloaded from the Hugging Face hub",
}


@contextmanager
def _offline():
    """The hub and data-set libraries told not to reach the network, and lm-eval's
    per-task notices quieted (restored on exit)."""
    keys = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    log = logging.getLogger("lm_eval")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@lru_cache(maxsize=4)
def _manager(cls, tokenizer_dir: str, length: int):
    """lm-eval's task index (about 10 s to build), once per tokenizer and length."""
    return cls(metadata={"tokenizer": tokenizer_dir, "max_seq_lengths": [length]})


def load_tasks(tokenizer_dir: str, names: tuple[str, ...], length: int, seed: int) -> dict:
    """{name: (lm-eval Task, its docs)} for ``names`` at ``length`` tokens. The generators draw
    from Python's and NumPy's global generators: both are seeded with ``seed`` before each
    task, so a task's samples depend on (tokenizer, length, seed) alone."""
    bad = [n for n in names if n not in OFFLINE]
    if bad:
        why = "; ".join(f"{n}: {NEEDS_NETWORK.get(n, 'not a RULER task')}" for n in bad)
        raise ValueError(f"RULER tasks {bad} do not generate here ({why}); choose from "
                         f"{', '.join(OFFLINE)}")
    try:
        from lm_eval.tasks import TaskManager
    except ImportError as e:
        raise ImportError("RULER needs lm-eval: pip install -e '.[ruler]'") from e
    out = {}
    with _offline():
        manager = _manager(TaskManager, tokenizer_dir, length)
        for name in names:
            random.seed(seed)
            np.random.seed(seed)
            task = manager.load([name])["tasks"][name]
            out[name] = (task, list(task.test_docs()))
    return out


def chat_template(tokenizer):
    """The renderer lm-eval's Hugging Face model hands to ``Task.fewshot_context``: a turn
    given the answer prefix is continued, not closed."""
    def render(messages: list[dict], add_generation_prompt: bool = True) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=add_generation_prompt,
                                             continue_final_message=not add_generation_prompt)
    return render


def render(task, doc: dict, tokenizer, chat: bool = True) -> str:
    """One sample's prompt as lm-eval renders it (``--apply_chat_template`` when ``chat``)."""
    return task.fewshot_context(doc, 0, apply_chat_template=chat,
                                chat_template=chat_template(tokenizer) if chat else None,
                                gen_prefix=task.doc_to_prefix(doc))


def units(tokenizer, names: tuple[str, ...], length: int, samples: int, seed: int,
          chat: bool = True) -> list[Unit]:
    """The first ``samples`` samples of each task at ``length``, ordered by sample index then
    task, so that any prefix of a run holds every task about equally."""
    tasks = load_tasks(tokenizer.name_or_path, names, length, seed)
    out = []
    for i in range(samples):
        for name in names:
            task, docs = tasks[name]
            if i >= len(docs):
                continue
            doc = docs[i]
            p = prompts.build_text(tokenizer, render(task, doc, tokenizer, chat))
            expected = [str(v) for v in doc["outputs"]]
            out.append(Unit("needle", f"{name}/{length}/{doc['index']}", p,
                            sig(p.ids[0].tolist(), expected), f"{name}/{length}", seed,
                            expected, [], int(task.config.generation_kwargs["max_gen_toks"]),
                            meta={"task": name, "length": length, "suite": "ruler"}))
    return out


def _iv(iv: dict | None) -> str:
    if not iv or iv.get("low") is None:
        return "-"
    return f"{iv['estimate']:+.1f} [{iv['low']:+.1f}, {iv['high']:+.1f}]"


def table(rep: dict, pop: str) -> str:
    """RULER's scores per task and arm (x100, RULER's mean ``string_match_all``) from a
    harness report, each arm's paired difference against exact and against POP native
    (bootstrap 95% intervals, resampled within tasks) and the 3-point non-inferiority test
    against POP per task and pooled (the lower of the bootstrap bound and the binomial floor)."""
    nd = rep.get("needles") or {}
    if not nd:
        return "No RULER samples measured yet.\n"
    strata = nd["strata"]
    con = {(c["a"], c["b"]): c for c in rep["contrasts"] if "retrieval" in c}
    ni = {t["a"]: t for t in rep["noninferiority"] if t["b"] == pop}
    lines = ["| arm | n | " + " | ".join(s.split("/")[0] for s in strata) + " | pooled |",
             "|---|---:|" + "---:|" * (len(strata) + 1)]
    order = sorted(nd["arms"], key=lambda n: (n != "exact", n != pop, n))
    for name in order:
        a = nd["arms"][name]
        cells = [f"{nd['by_stratum'][name][s]:.1f}" for s in strata]
        lines.append(f"| {name} | {a['n']} | " + " | ".join(cells) + f" | {a['score']:.1f} |")
    for b, title in (("exact", "exact"), (pop, "POP native")):
        lines += ["", f"Paired difference against {title}, points (95% interval):", "",
                  "| arm | " + " | ".join(s.split("/")[0] for s in strata) + " | pooled |",
                  "|---|" + "---|" * (len(strata) + 1)]
        for name in order:
            a, c = nd["arms"][name], con.get((name, b)) or {}
            if b == "exact" and a.get("vs_exact"):
                c = {"retrieval": a["vs_exact"], "retrieval_by_stratum": a["vs_exact_by_stratum"]}
            if c:
                by = c.get("retrieval_by_stratum") or {}
                lines.append(f"| {name} | " + " | ".join(_iv(by.get(s)) for s in strata)
                             + f" | {_iv(c['retrieval'])} |")
    lines += ["", "Non-inferior to POP native at a 3-point margin (one-sided 95% bound; n too "
              "small: only the binomial floor of n pairs keeps it from passing):", "",
              "| arm | " + " | ".join(s.split("/")[0] for s in strata) + " | pooled |",
              "|---|" + "---|" * (len(strata) + 1)]

    def verdict(t: dict | None) -> str:
        if not t:
            return "-"
        return f"{ni_word(t)} ({t['bound']:+.1f}, n={t['n']})"

    for name in (n for n in order if n in ni):
        t = ni[name]
        by = t.get("by_stratum") or {}
        lines.append(f"| {name} | " + " | ".join(verdict(by.get(s)) for s in strata)
                     + f" | {verdict(t)} |")
    return "\n".join(lines) + "\n"


def write(root: Path, rep: dict, pop: str, command: str) -> None:
    """``root/ruler.md``: :func:`table` under the command that ran it (a partial run's too)."""
    why = "; ".join(rep.get("partial_reasons") or [])
    write_text(root / "ruler.md", f"# RULER: {rep['model']}\n\n`{command}`\n\n"
               + (f"Partial: {why}.\n\n" if why else "") + table(rep, pop))
