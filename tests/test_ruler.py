"""RULER through lm-eval (gpu.lab.eval.ruler): the samples and prompts are lm-eval's own, the
score is lm-eval's ``process_results``, the tasks that need the network say why, and the
frontier runs its grid on them end to end (tiny random Llama; lm-eval's index takes ~10 s)."""
from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from gpu_fixtures import MINI_FIT_KW, mini_llama

from gpu.lab.eval import frontier as fr
from gpu.lab.eval import minimodel, ruler
from gpu.lab.eval.options import FrontierOptions
from gpu.lab.eval.tasks import score

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.slow

TASKS = ("niah_single_1", "niah_multikey_2")
LENGTH = 1024
FIT_KW = MINI_FIT_KW


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    yield from mini_llama(tmp_path_factory.mktemp("ruler"))


def test_units_are_lm_evals_samples_in_lm_evals_prompts(tiny):
    tok = tiny["loaded"].tokenizer
    us = ruler.units(tok, TASKS, LENGTH, 2, seed=0)
    assert [u.meta["task"] for u in us] == list(TASKS) * 2  # index-major: balanced prefixes
    tasks = ruler.load_tasks(tok.name_or_path, TASKS, LENGTH, 0)
    for u in us:
        task, docs = tasks[u.meta["task"]]
        doc = next(d for d in docs if u.id.endswith(f"/{d['index']}"))
        assert u.prompt.text == ruler.render(task, doc, tok)
        assert u.expected == list(doc["outputs"]) and u.prompt.n <= LENGTH
        assert all(v in u.prompt.text for v in u.expected)  # the needle is in the prompt
        assert u.prompt.text.endswith(doc["gen_prefix"])  # the answer prefix opens the turn
        assert u.max_new_tokens == task.config.generation_kwargs["max_gen_toks"]
    again = ruler.units(tok, TASKS, LENGTH, 2, seed=0)
    assert [u.sig for u in again] == [u.sig for u in us]  # seeded: the same samples
    other = ruler.units(tok, TASKS, LENGTH, 2, seed=1)
    assert [u.sig for u in other] != [u.sig for u in us]


def test_score_is_lm_evals_process_results(tiny):
    tok = tiny["loaded"].tokenizer
    rng = random.Random(0)
    for name, (task, docs) in ruler.load_tasks(tok.name_or_path, TASKS, LENGTH, 0).items():
        for doc in docs[:20]:
            want = list(doc["outputs"]) + ["1234567"]
            answer = " ".join(rng.sample(want, rng.randint(0, len(want)))).upper()
            answer = f"\x01 {answer} \n" if rng.random() < 0.5 else answer
            assert score(answer, doc["outputs"]) == task.process_results(doc, [answer])[str(LENGTH)]


def test_tasks_that_need_the_network_say_why():
    with pytest.raises(ValueError, match="paul_graham_essays.*choose from"):
        ruler.load_tasks("unused", ("niah_single_2",), LENGTH, 0)
    assert set(ruler.OFFLINE).isdisjoint(ruler.NEEDS_NETWORK)


def test_frontier_runs_its_grid_on_ruler(tiny, tmp_path):
    lm = tiny["loaded"]
    opts = FrontierOptions(models=(lm.name,), out_dir=tmp_path / "ruler", samples=1, docs=0,
                           lengths=(LENGTH,), tails=(1, 96), seed=0, timing_units=0,
                           suite="ruler", tasks=TASKS, keep=("ridge@{pop}/t1",),
                           maps_from=tmp_path / "maps-run")
    [s] = fr.run(opts, progress=False, loaded=lm, texts=minimodel.SyntheticTexts(),
                 fit_kw=FIT_KW, calib=tiny["calib"])
    root = tmp_path / "ruler" / lm.name
    assert (tmp_path / "maps-run" / lm.name / "maps").is_dir()  # maps where --maps-from says
    assert not (root / "maps").exists()
    assert {r["arm"] for r in s["rows"]} == {"exact", "pop@6", "ridge@6/t1"}
    recs = [json.loads(x) for x in (root / "records.jsonl").read_text().splitlines()]
    needles = [r for r in recs if r["instrument"] == "needle"]
    assert len(needles) == 3 * len(TASKS) and {r["suite"] for r in needles} == {"ruler"}
    tasks = ruler.load_tasks(lm.tokenizer.name_or_path, TASKS, LENGTH, 0)
    for r in needles:  # each record's score is lm-eval's score of its answer
        task, docs = tasks[r["task"]]
        doc = next(d for d in docs if r["unit"].endswith(f"/{d['index']}"))
        assert r["score"] == task.process_results(doc, [r["answer"]])[str(LENGTH)]
    md = (root / "ruler.md").read_text()
    assert all(t in md for t in TASKS) and "| ridge@6/t1 | 2 |" in md
    assert "Non-inferior to POP native" in md
    head = (root / "frontier.md").read_text()  # RULER scores every sample, not filled-region ones
    assert f"{len(TASKS)} RULER samples, every one scored" in head and "filled-region needle" not in head
    rep = json.loads((root / "report.json").read_text())
    vs_pop = next(c for c in rep["contrasts"] if (c["a"], c["b"]) == ("ridge@6/t1", "pop@6"))
    assert set(vs_pop["retrieval_by_stratum"]) == {f"{t}/{LENGTH}" for t in TASKS}
    # a rerun measures nothing again
    again = fr.run(replace(opts), progress=False, loaded=lm, texts=minimodel.SyntheticTexts(),
                   fit_kw=FIT_KW, calib=tiny["calib"])
    assert again[0]["rows"] == s["rows"]
