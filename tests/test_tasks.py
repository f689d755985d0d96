"""RULER-style needle tasks: generation, token positions, filled-region filter, scorer."""
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu.lab.eval.tasks import (
    TASKS,
    Needle,
    NeedleSample,
    all_found,
    in_filled_region,
    make_sample,
    make_samples,
    needle_token_positions,
    score,
    string_match_all,
    token_counter,
)

WORDS = ("river stone light garden window paper morning yellow quietly across under "
         "people market winter letter music open carry simple house field water").split()


def make_haystack(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out = []
    while len(out) < n_words:
        sent = [rng.choice(WORDS) for _ in range(rng.randint(5, 14))]
        sent[0] = sent[0].capitalize()
        out.extend(sent[:-1] + [sent[-1] + rng.choice(".!?")])
        if rng.random() < 0.1:
            out[-1] += "\n\n"
    return " ".join(out)


HAYSTACK = make_haystack(12_000)


def ws_count(text: str) -> int:
    return len(text.split())


_PIECE = re.compile(r"\w+|[^\w\s]")


def piece_count(text: str) -> int:
    """A real-ish tokenizer: words and single punctuation marks (digits of a number stay one)."""
    return len(_PIECE.findall(text))


def ws_offsets(text: str):
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("length", [300, 2000])
def test_samples_hold_needles_and_hit_length(task, length):
    samples = make_samples(task, length, 4, seed=7, haystack=HAYSTACK, count_tokens=ws_count)
    for s in samples:
        assert s.task == task and s.length == length
        # whitespace tokens grow one per word: the prompt fills the budget exactly
        assert s.n_tokens == ws_count(s.prompt)
        assert length - 1 <= s.n_tokens <= length
        assert s.prompt.endswith("\n" + s.question)
        assert s.context + "\n" + s.question == s.prompt
        for n in s.needles:
            assert s.prompt[n.span[0]:n.span[1]] == n.text
            assert n.text == f"One of the special magic numbers for {n.key} is: {n.value}."
            assert re.fullmatch(r"[1-9]\d{6}", n.value)
            assert s.prompt.count(n.value) == 1
        queried = [n for n in s.needles if n.queried]
        assert sorted(n.value for n in queried) == sorted(s.expected)
        for k in {n.key for n in queried}:
            assert k in s.question


def test_task_shapes():
    def one(task):
        return make_sample(task, 800, 3, HAYSTACK, ws_count)

    s = one("niah_single_1")
    assert len(s.needles) == 1 and len(s.expected) == 1
    assert s.prompt.startswith("A special magic number is hidden within the following text.")
    assert s.question == f"What is the special magic number for {s.query} mentioned in the provided text?"
    assert s.answer_prefix.endswith("mentioned in the provided text is")
    s = one("niah_multikey_1")
    assert len(s.needles) == 4 and len({n.key for n in s.needles}) == 4
    assert sum(n.queried for n in s.needles) == 1 and len(s.expected) == 1
    s = one("niah_multivalue")
    assert len(s.needles) == 4 and len({n.key for n in s.needles}) == 1
    assert all(n.queried for n in s.needles) and len(set(s.expected)) == 4
    assert s.prompt.startswith("Some special magic numbers are hidden")
    assert s.question.startswith("What are all the special magic numbers for")
    s = one("niah_multiquery")
    assert len({n.key for n in s.needles}) == 4 and all(n.queried for n in s.needles)
    assert ", and " in s.query and len(s.expected) == 4
    with pytest.raises(ValueError):
        one("niah_single_2")


def test_real_ish_tokenizer_length_tolerance():
    for task in TASKS:
        for s in make_samples(task, 1500, 3, seed=1, haystack=HAYSTACK, count_tokens=piece_count):
            assert 1500 - 20 <= s.n_tokens <= 1500
            assert s.n_tokens == piece_count(s.prompt)


def test_reserve_leaves_room():
    s = make_sample("niah_single_1", 1000, 0, HAYSTACK, ws_count, reserve=100)
    assert 899 <= s.n_tokens <= 900


def test_seeds_reproducible_and_distinct():
    a = make_samples("niah_multikey_1", 600, 5, 11, HAYSTACK, ws_count)
    b = make_samples("niah_multikey_1", 600, 5, 11, HAYSTACK, ws_count)
    assert a == b
    c = make_samples("niah_multikey_1", 600, 5, 12, HAYSTACK, ws_count)
    assert [s.prompt for s in a] != [s.prompt for s in c]
    assert len({s.prompt for s in a}) == 5  # samples within a set differ
    assert len({s.seed for s in a}) == 5


def test_depths_follow_ruler_grid():
    depths = set()
    for s in make_samples("niah_single_1", 600, 40, 0, HAYSTACK, ws_count):
        d = s.needles[0].depth
        depths.add(d)
        frac = s.needles[0].span[0] / len(s.prompt)
        assert abs(frac - d / 100) < 0.15
    assert len(depths) > 15


def test_haystack_too_short_or_budget_too_small():
    with pytest.raises(ValueError, match="haystack too short"):
        make_sample("niah_single_1", 5000, 0, make_haystack(500), ws_count)
    with pytest.raises(ValueError):
        make_sample("niah_multiquery", 20, 0, HAYSTACK, ws_count)


def test_token_counter_accepts_tokenizers():
    class HF:
        def encode(self, text, add_special_tokens=True):
            return [0] * (ws_count(text) + (1 if add_special_tokens else 0))

    class Enc:
        def __init__(self, n):
            self.ids = list(range(n))

    class Raw:
        def encode(self, text):
            return Enc(ws_count(text))

    assert token_counter(HF())("a b c") == 3
    assert token_counter(Raw())("a b c") == 3
    assert token_counter(ws_count)("a b") == 2
    with pytest.raises(TypeError):
        token_counter(42)


def test_needle_token_positions_whitespace():
    s = make_sample("niah_multivalue", 700, 5, HAYSTACK, ws_count)
    offs = ws_offsets(s.prompt)
    toks = s.prompt.split()
    for needle, pos in zip(s.needles, needle_token_positions(s, offs)):
        assert pos == list(range(pos[0], pos[-1] + 1))
        assert " ".join(toks[i] for i in pos) == needle.text


def test_char_shift_and_tensor_offsets():
    import torch

    s = make_sample("niah_single_1", 400, 2, HAYSTACK, ws_count)
    header = "<|user|>\n"
    offs = ws_offsets(header + s.prompt)
    got = needle_token_positions(s, torch.tensor([offs]), char_shift=len(header))
    want = [[i + 1 for i in p] for p in needle_token_positions(s, ws_offsets(s.prompt))]
    assert got == want


def test_trained_bpe_tokenizer_offsets():
    pytest.importorskip("tokenizers")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([HAYSTACK[:20000], "One of the special magic numbers 0123456789"],
                            trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    s = make_sample("niah_multikey_1", 900, 4, HAYSTACK, tok)
    enc = tok.encode(s.prompt)
    assert len(enc.ids) == s.n_tokens <= 900
    for needle, pos in zip(s.needles, needle_token_positions(s, enc.offsets)):
        covered = s.prompt[enc.offsets[pos[0]][0]:enc.offsets[pos[-1]][1]]
        assert covered.strip() == needle.text


def _hand_sample(prompt, spans):
    needles = [Needle(key="k", value="1", text=prompt[a:b], span=(a, b), queried=True, depth=0)
               for a, b in spans]
    return NeedleSample(task="niah_single_1", length=0, seed=0, index=0, prompt=prompt,
                        question="", expected=["1"], needles=needles, n_tokens=0,
                        answer_prefix="", query="k")


def test_filled_region_hand_cases():
    #         0123456789012345678901234
    prompt = "aa bb NEEDLE cc dd NEE ee"
    offs = ws_offsets(prompt)  # tokens: aa bb NEEDLE cc dd NEE ee -> 0..6
    s = _hand_sample(prompt, [(6, 12)])
    assert needle_token_positions(s, offs) == [[2]]
    # 7 tokens; tail 4 -> filled positions 0..2: needle at 2 is filled
    assert in_filled_region(s, offs, 7, 4)
    # tail 5 -> filled positions 0..1: needle at 2 is in the tail
    assert not in_filled_region(s, offs, 7, 5)
    two = _hand_sample(prompt, [(6, 12), (19, 22)])
    assert needle_token_positions(two, offs) == [[2], [5]]
    assert in_filled_region(two, offs, 7, 1)
    assert not in_filled_region(two, offs, 7, 2)  # cutoff 5: second needle is exact
    # a needle split across tokens counts by its last token; special tokens (0, 0) ignored
    offs2 = [(0, 0), (0, 2), (3, 5), (6, 9), (9, 12), (13, 15)]
    assert needle_token_positions(s, offs2) == [[3, 4]]
    assert in_filled_region(s, offs2, 6, 1) and not in_filled_region(s, offs2, 6, 2)
    with pytest.raises(ValueError):
        in_filled_region(s, [(0, 2), (3, 5)], 2, 0)
    # a distractor in the tail: out of the subset, unless only asked-for needles count
    mixed = NeedleSample(**{**two.__dict__, "needles": [two.needles[0],
                                                        Needle(**{**two.needles[1].__dict__, "queried": False})]})
    assert not in_filled_region(mixed, offs, 7, 2)
    assert in_filled_region(mixed, offs, 7, 2, queried_only=True)


@given(st.data())
def test_positions_match_character_oracle(data):
    n_tok = data.draw(st.integers(1, 30))
    cuts = sorted(data.draw(st.lists(st.integers(0, 80), min_size=n_tok + 1, max_size=n_tok + 1)))
    offs = [(cuts[i], cuts[i + 1]) for i in range(n_tok)]
    a = data.draw(st.integers(0, 79))
    b = data.draw(st.integers(a + 1, 80))
    s = _hand_sample("x" * 80, [(a, b)])
    want = [i for i, (u, v) in enumerate(offs) if any(u <= c < v for c in range(a, b))]
    assert needle_token_positions(s, offs) == [want]
    if want:
        n_total = n_tok + data.draw(st.integers(0, 5))
        tail = data.draw(st.integers(0, n_total))
        assert in_filled_region(s, offs, n_total, tail) == (max(want) < n_total - tail)


def test_score_ruler_examples():
    assert score("The special magic number for odd-tiger is 1234567.", ["1234567"]) == 1.0
    assert score("I could not find it.", ["1234567"]) == 0.0
    assert score("1234567 and 7654321", ["1234567", "7654321", "1111111", "2222222"]) == 0.5
    assert score("ABC-def", ["abc-DEF"]) == 1.0  # case-insensitive
    assert score("12345\x0067", ["1234567"]) == 0.0  # control chars become newlines
    assert score("  \n1234567\n  ", ["1234567"]) == 1.0
    assert all_found("7654321, 1234567", ["1234567", "7654321"])
    assert not all_found("1234567", ["1234567", "7654321"])
    preds = ["1234567", "nothing", "1 2 3 4 5 6 7 and 7654321"]
    refs = [["1234567"], ["1234567"], ["1234567", "7654321"]]
    assert string_match_all(preds, refs) == pytest.approx((1 + 0 + 0.5) / 3)
    with pytest.raises(ValueError):
        score("x", [])


@given(st.text(max_size=40), st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=5))
def test_score_is_ruler_fraction(answer, expected):
    pred = re.sub(r"[\x00-\x1f]", "\n", answer.strip()).strip()
    want = sum(1.0 if r.lower() in pred.lower() else 0.0 for r in expected) / len(expected)
    assert score(answer, expected) == want
    assert all_found(answer, expected) == (want == 1.0)


@given(st.lists(st.integers(0, 3), min_size=1, max_size=400), st.integers(0, 40), st.integers(0, 500))
def test_largest_fitting_matches_linear_scan(costs, base, budget):
    from gpu.lab.eval.tasks import _largest_fitting

    prefix = [base]
    for c in costs:
        prefix.append(prefix[-1] + c)
    if prefix[0] > budget:
        return
    calls = []

    def n_tokens(w):
        calls.append(w)
        return prefix[w]

    lo, hi = _largest_fitting(n_tokens, budget, len(costs))
    want = max(w for w in range(len(costs) + 1) if prefix[w] <= budget)
    assert lo == want
    assert (hi is None) == (want == len(costs))
    if hi is not None:
        assert prefix[hi] > budget and hi == lo + 1


def test_paraphrased_needle_shares_no_four_word_run_with_its_question():
    """The held-out kind of needle: its question and answer prefix paraphrase it (no 4-word
    run in common), on real samples; RULER's own wording shares its key phrase (the checker
    bites: "special magic" twice, a 3-word run once the key is counted)."""
    from gpu.lab.eval.tasks import PARAPHRASED, make_sample, shared_run

    hay = " ".join(f"Sentence {i} tells of the river and the town." for i in range(400))
    for i in range(5):
        s = make_sample("niah_paraphrase", 512, 0, hay, lambda t: len(t.split()), index=i)
        [needle] = s.needles
        assert needle.value in needle.text and s.expected == [needle.value]
        assert needle.key in s.question
        assert not shared_run(needle.text, s.question) and not shared_run(needle.text,
                                                                          s.answer_prefix)
    r = make_sample("niah_single_1", 512, 0, hay, lambda t: len(t.split()))
    assert shared_run(r.needles[0].text, r.question, 2)
    assert shared_run("a b c d e", "x b c d e", 4) and not shared_run("a b c d", "a b c x", 4)
    assert set(PARAPHRASED) <= set(__import__("gpu.lab.eval.tasks", fromlist=["x"]).TASK_CONFIG)
