"""RULER-style needle tasks (paper sections 3.1-3.2) and RULER's scorer.

Four tasks, configured as in RULER (Hsieh et al., 2024):

=================  ====  ======  =======  ==================================================
task               keys  values  queried  what the prompt holds
=================  ====  ======  =======  ==================================================
niah_single_1         1       1        1  one needle
niah_multikey_1       4       1        1  one real needle among three with other keys
niah_multivalue       1       4        1  four needles with the same key; all four asked
niah_multiquery       4       1        4  four needles; all four keys asked
=================  ====  ======  =======  ==================================================

A needle reads ``One of the special magic numbers for {key} is: {value}.`` with a
seven-digit value and an adjective-noun key. As in RULER's essay haystacks, the haystack's
whitespace is collapsed, it is cut into sentences, and each needle goes in at a sentence
boundary at a depth drawn (without replacement) from 40 evenly spaced depths 0-100%. The
haystack is sized with the caller's tokenizer so the prompt has at most ``length`` tokens
(and as many as fit). The question ends the prompt. RULER's niah_single_1 uses a repeated
filler sentence as its haystack; here every task takes the installed text it is given
(``gpu.data.corpus.haystack_text``), and :data:`REPEAT_HAYSTACK` is there for RULER's variant.

Chat templates are the caller's business: a sample carries the plain prompt, the
question (also the prompt's last line) and RULER's answer prefix separately.

Scoring is RULER's ``string_match_all``: per sample, the fraction of expected values that
occur (case-insensitively) in the answer; RULER reports the mean over samples times 100.
"""
from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

__all__ = [
    "TASKS",
    "TASK_CONFIG",
    "PARAPHRASED",
    "shared_run",
    "NEEDLE_TEMPLATE",
    "REPEAT_HAYSTACK",
    "Needle",
    "NeedleSample",
    "token_counter",
    "make_sample",
    "make_samples",
    "needle_token_positions",
    "in_filled_region",
    "postprocess_pred",
    "score",
    "all_found",
    "string_match_all",
]

TASK_CONFIG: dict[str, dict[str, int]] = {
    "niah_single_1": {"num_keys": 1, "num_values": 1, "num_queries": 1},
    "niah_multikey_1": {"num_keys": 4, "num_values": 1, "num_queries": 1},
    "niah_multivalue": {"num_keys": 1, "num_values": 4, "num_queries": 1},
    "niah_multiquery": {"num_keys": 4, "num_values": 1, "num_queries": 4},
}
TASKS = tuple(TASK_CONFIG)
# a needle whose question paraphrases it (held out from RULER's wording: the question and the
# answer prefix share no 4-word run with the needle, :func:`shared_run`), one key, one value:
# (needle, preamble, question, answer prefix)
PARAPHRASED = {"niah_paraphrase": (
    "Remember this: the archivist gave the {key} the code {value}.",
    "A short note is hidden within the following text. Make sure to remember it.",
    "Which code was assigned to the {query} earlier? Answer with the code.",
    "The code assigned to the {query} is")}
TASK_CONFIG.update({t: {"num_keys": 1, "num_values": 1, "num_queries": 1} for t in PARAPHRASED})

NEEDLE_TEMPLATE = "One of the special magic {type_v} for {key} is: {value}."
PREAMBLE = ("Some special magic {type_v} are hidden within the following text. "
            "Make sure to memorize it. I will quiz you about the {type_v} afterwards.")
QUESTION = "What are all the special magic {type_v} for {query} mentioned in the provided text?"
ANSWER_PREFIX = "The special magic {type_v} for {query} mentioned in the provided text are"
REPEAT_HAYSTACK = ("The grass is green. The sky is blue. The sun is yellow. "
                   "Here we go. There and back again.")
#: RULER's insertion depths: 40 evenly spaced percentages, rounded
DEPTHS = [int(x) for x in np.round(np.linspace(0, 100, num=40, endpoint=True))]

_ADJECTIVES = (
    "abundant", "agreeable", "ancient", "bitter", "bold", "brave", "breezy", "bright",
    "calm", "careful", "cheerful", "clever", "cloudy", "crooked", "curious", "damp",
    "dazzling", "delicate", "distant", "dusty", "eager", "elegant", "empty", "faint",
    "fancy", "fierce", "fragile", "frosty", "gentle", "gigantic", "glossy", "graceful",
    "hollow", "humble", "icy", "jolly", "keen", "lively", "lucky", "marble", "mellow",
    "misty", "modest", "narrow", "nimble", "noisy", "odd", "pale", "plain", "polite",
    "proud", "quiet", "rapid", "rough", "rustic", "scarlet", "shiny", "silent", "silky",
    "slender", "smooth", "sour", "steady", "sturdy", "swift", "tame", "tender", "tidy",
    "tiny", "vivid", "wandering", "wary", "wise", "witty", "wooden", "young", "zealous",
)
_NOUNS = (
    "anchor", "apple", "arrow", "badge", "basket", "beacon", "bell", "blanket", "bridge",
    "bucket", "cabin", "candle", "canyon", "carpet", "castle", "cellar", "chimney", "clock",
    "comet", "compass", "cottage", "crystal", "dragon", "drum", "engine", "falcon", "feather",
    "fiddle", "forest", "fountain", "garden", "glacier", "hammer", "harbor", "helmet",
    "island", "jacket", "kettle", "ladder", "lantern", "meadow", "mirror", "monkey",
    "needle", "orchard", "otter", "paddle", "parrot", "pebble", "pencil", "pillow", "planet",
    "pocket", "pumpkin", "quilt", "rabbit", "ribbon", "river", "saddle", "scarf", "shovel",
    "spoon", "statue", "tiger", "tower", "trumpet", "tunnel", "umbrella", "valley", "violin",
    "wagon", "walnut", "whistle", "window", "wizard", "yacht", "zebra",
)


@dataclass(frozen=True)
class Needle:
    key: str
    value: str
    text: str
    #: character span [start, end) of ``text`` in the sample's prompt
    span: tuple[int, int]
    #: whether the question asks for this needle's value (False for multikey distractors)
    queried: bool
    #: the insertion depth in percent of the haystack's sentences
    depth: int


@dataclass(frozen=True)
class NeedleSample:
    task: str
    #: target prompt length in tokens (the prompt has at most this many)
    length: int
    #: the seed this sample was drawn from (make_samples derives one per index)
    seed: int
    index: int
    #: the plain prompt: preamble, haystack with needles, and the question as its last line
    prompt: str
    question: str
    #: the values a correct answer contains (in the order the question asks for them)
    expected: list[str]
    needles: list[Needle]
    #: tokens in ``prompt`` under the counter used to build it
    n_tokens: int
    #: RULER's answer prefix, for completion-style prompts (prefilling it is optional)
    answer_prefix: str
    query: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def needle_spans(self) -> list[tuple[int, int]]:
        return [n.span for n in self.needles]

    @property
    def context(self) -> str:
        """The prompt without its final question line."""
        return self.prompt[: len(self.prompt) - len(self.question)].rstrip("\n")


# --------------------------------------------------------------------------- tokens


def token_counter(tokenizer: Any) -> Callable[[str], int]:
    """``count_tokens(text) -> int`` from a callable or from a tokenizer with ``encode``
    (a transformers tokenizer, a ``tokenizers.Tokenizer``); special tokens are not counted."""
    if hasattr(tokenizer, "encode"):
        def count(text: str) -> int:
            try:
                out = tokenizer.encode(text, add_special_tokens=False)
            except TypeError:
                out = tokenizer.encode(text)
            return len(out.ids) if hasattr(out, "ids") else len(out)
        return count
    if callable(tokenizer):
        return tokenizer
    raise TypeError("count_tokens must be a callable text -> int or a tokenizer with encode()")


# --------------------------------------------------------------------------- generation

_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+")


def _sample_rng(task: str, length: int, seed: int, index: int) -> tuple[int, random.Random]:
    h = hashlib.sha256(f"ridgefill-niah:{task}:{length}:{seed}:{index}".encode()).digest()
    s = int.from_bytes(h[:8], "big")
    return s, random.Random(s)


def _plural_forms(n_answers: int) -> tuple[str, str, str, str]:
    """RULER's wording: singular when exactly one value is asked for."""
    pre, q, pfx, type_v = PREAMBLE, QUESTION, ANSWER_PREFIX, "numbers"
    if n_answers == 1:
        pre = pre.replace("Some", "A").replace("are all", "is").replace("are", "is")
        q = q.replace("are all", "is").replace("are", "is")
        pfx = pfx.replace("are", "is")
        type_v = "number"
    return pre, q, pfx, type_v


def _draw_keys(rng: random.Random, n: int, avoid: str) -> list[str]:
    keys: list[str] = []
    while len(keys) < n:
        k = f"{rng.choice(_ADJECTIVES)}-{rng.choice(_NOUNS)}"
        if k not in keys and k not in avoid:
            keys.append(k)
    return keys


def _draw_values(rng: random.Random, n: int, avoid: str) -> list[str]:
    vals: list[str] = []
    while len(vals) < n:
        v = str(rng.randint(10 ** 6, 10 ** 7 - 1))
        if v not in vals and v not in avoid:
            vals.append(v)
    return vals


def make_sample(task: str, length: int, seed: int, haystack: str,
                count_tokens: Any, *, index: int = 0, reserve: int = 0) -> NeedleSample:
    """One needle prompt of at most ``length - reserve`` tokens (``reserve`` leaves room for
    a chat template or the answer), drawn from ``seed`` and ``index``."""
    if task not in TASK_CONFIG:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
    count = token_counter(count_tokens)
    cfg = TASK_CONFIG[task]
    sample_seed, rng = _sample_rng(task, length, seed, index)
    words = haystack.split()
    if not words:
        raise ValueError("the haystack is empty")
    flat = " ".join(words)

    keys = _draw_keys(rng, cfg["num_keys"], flat)
    values = [_draw_values(rng, cfg["num_values"], flat) for _ in keys]
    needles = []  # (key index, value)
    for ki, key in enumerate(keys):
        for v in values[ki]:
            needles.append((ki, v))
    rng.shuffle(needles)
    depths = sorted(rng.sample(DEPTHS, len(needles)))
    queried_idx = sorted(rng.sample(range(len(keys)), cfg["num_queries"]))
    start_frac = rng.random()

    queries = [keys[i] for i in queried_idx]
    query = queries[0] if len(queries) == 1 else ", ".join(queries[:-1]) + ", and " + queries[-1]
    expected = [v for i in queried_idx for v in values[i]]
    pre_t, q_t, pfx_t, type_v = _plural_forms(len(expected))
    needle_t = NEEDLE_TEMPLATE
    if task in PARAPHRASED:
        needle_t, pre_t, q_t, pfx_t = PARAPHRASED[task]
    preamble = pre_t.format(type_v=type_v)
    question = q_t.format(type_v=type_v, query=query)
    answer_prefix = pfx_t.format(type_v=type_v, query=query)
    needle_texts = [needle_t.format(type_v="numbers", key=keys[ki], value=v) for ki, v in needles]

    def build(n_words: int) -> tuple[str, list[tuple[int, int]]]:
        first = int(start_frac * (len(words) - n_words + 1))
        sents = [s for s in _SENT_SPLIT.split(" ".join(words[first:first + n_words])) if s]
        cuts = [int(len(sents) * d / 100) for d in depths]
        pieces: list[str] = [preamble + "\n"]
        pos = len(pieces[0])
        spans: list[tuple[int, int]] = []
        prev = 0
        parts: list[str] = []
        for cut, ntext in zip(cuts, needle_texts):
            if cut > prev:
                parts.append(" ".join(sents[prev:cut]))
            parts.append(("N", ntext))  # type: ignore[arg-type]
            prev = cut
        if prev < len(sents):
            parts.append(" ".join(sents[prev:]))
        for k, part in enumerate(parts):
            if k:
                pieces.append(" ")
                pos += 1
            if isinstance(part, tuple):
                spans.append((pos, pos + len(part[1])))
                part = part[1]
            pieces.append(part)
            pos += len(part)
        pieces.append("\n" + question)
        return "".join(pieces), spans

    budget = length - reserve
    counts: dict[int, int] = {}

    def n_tokens(n_words: int) -> int:
        if n_words not in counts:
            counts[n_words] = count(build(n_words)[0])
        return counts[n_words]

    n_tok = n_tokens(0)
    if n_tok > budget:
        raise ValueError(f"{task}: even without haystack the prompt has {n_tok} tokens > {budget}")
    lo, hi = _largest_fitting(n_tokens, budget, len(words))
    if hi is None and n_tokens(lo) < 0.9 * budget:
        raise ValueError(f"haystack too short: {len(words)} words make {n_tokens(lo)} tokens, "
                         f"need about {budget}; pass more text (gpu.data.corpus.haystack_text)")
    prompt, spans = build(lo)
    n_tok = count(prompt)
    queried_keys = set(queried_idx)
    needle_objs = [
        Needle(key=keys[ki], value=v, text=t, span=sp, queried=ki in queried_keys, depth=d)
        for (ki, v), t, sp, d in zip(needles, needle_texts, spans, depths)
    ]
    for nd in needle_objs:
        assert prompt[nd.span[0]:nd.span[1]] == nd.text
    return NeedleSample(
        task=task, length=length, seed=sample_seed, index=index, prompt=prompt,
        question=question, expected=expected, needles=needle_objs, n_tokens=n_tok,
        answer_prefix=answer_prefix, query=query,
        meta={"haystack_words": lo, "reserve": reserve, "base_seed": seed},
    )


def shared_run(a: str, b: str, n: int = 4) -> bool:
    """True when texts ``a`` and ``b`` share a run of ``n`` words (lowercased, punctuation
    dropped): the test a paraphrased question must fail."""
    def runs(text: str) -> set[tuple[str, ...]]:
        w = re.findall(r"[a-z0-9-]+", text.lower())
        return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}
    return bool(runs(a) & runs(b))


def _largest_fitting(n_tokens: Callable[[int], int], budget: int, n_max: int) -> tuple[int, int | None]:
    """The largest word count ``w <= n_max`` with ``n_tokens(w) <= budget`` (``n_tokens(0)``
    fits), and the smallest count found not to fit (None when all ``n_max`` words fit).
    Grows a bracket from a first probe (never tokenizing much more than the budget), guesses
    by linear interpolation, gallops from the guess, then bisects."""
    lo, hi = 0, None
    probe = min(n_max, max(64, 2 * budget))
    while True:
        if n_tokens(probe) <= budget:
            lo = probe
            if probe == n_max:
                return lo, None
            probe = min(n_max, probe * 2)
        else:
            hi = probe
            break
    c_lo, c_hi = n_tokens(lo), n_tokens(hi)
    guess = lo + int((budget - c_lo) * (hi - lo) / max(c_hi - c_lo, 1))
    guess = min(max(guess, lo + 1), hi - 1)
    if guess > lo:
        step = 4
        if n_tokens(guess) <= budget:
            lo = guess
            while lo + step < hi and n_tokens(lo + step) <= budget:
                lo += step
                step *= 2
            hi = min(hi, lo + step)
        else:
            hi = guess
            while hi - step > lo and n_tokens(hi - step) > budget:
                hi -= step
                step *= 2
            lo = max(lo, hi - step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if n_tokens(mid) <= budget:
            lo = mid
        else:
            hi = mid
    return lo, hi


def make_samples(task: str, length: int, n: int, seed: int, haystack: str,
                 count_tokens: Any, *, reserve: int = 0) -> list[NeedleSample]:
    """A fixed, deterministic set of ``n`` samples for (task, length, seed)."""
    return [make_sample(task, length, seed, haystack, count_tokens, index=i, reserve=reserve)
            for i in range(n)]


# --------------------------------------------------------------------------- positions


def _offsets_array(offsets: Any) -> np.ndarray:
    if hasattr(offsets, "detach"):
        offsets = offsets.detach().cpu().numpy()
    arr = np.asarray(offsets, dtype=np.int64)
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError("offsets must be a sequence of (start, end) character offsets per token")
    return arr


def needle_token_positions(sample: NeedleSample, offsets: Any, char_shift: int = 0) -> list[list[int]]:
    """Token indices of each needle, given each token's ``(start, end)`` character offsets
    into the tokenized text (a transformers ``offset_mapping``). A token belongs to a needle
    when its non-empty character range overlaps the needle's span. ``char_shift`` is where
    the sample's prompt starts in the tokenized text (e.g. after a chat template's header)."""
    arr = _offsets_array(offsets)
    starts, ends = arr[:, 0], arr[:, 1]
    out = []
    for s, e in sample.needle_spans:
        s, e = s + char_shift, e + char_shift
        hit = (ends > starts) & (starts < e) & (ends > s)
        out.append(np.flatnonzero(hit).tolist())
    return out


def in_filled_region(sample: NeedleSample, offsets: Any, n_tokens: int, tail: int,
                     char_shift: int = 0, *, queried_only: bool = False) -> bool:
    """True iff every needle's tokens lie strictly before the exact tail, i.e. at
    positions ``< n_tokens - tail`` (``n_tokens``: the whole tokenized prompt, chat template
    and all). Every needle counts, multikey distractors included, as in the paper's
    filled-region subset; ``queried_only`` looks at the asked-for needles alone. Raises
    ``ValueError`` when a needle has no tokens (the offsets do not cover the prompt)."""
    cutoff = n_tokens - tail
    for k, pos in enumerate(needle_token_positions(sample, offsets, char_shift)):
        if queried_only and not sample.needles[k].queried:
            continue
        if not pos:
            raise ValueError(f"needle {k} ({sample.needles[k].text!r}) has no tokens in these offsets")
        if max(pos) >= cutoff:
            return False
    return True


# --------------------------------------------------------------------------- scoring

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess_pred(pred: str) -> str:
    """RULER's post-processing: strip, and turn control characters into newlines."""
    return _CONTROL.sub("\n", pred.strip()).strip()


def score(answer: str, expected: Sequence[str]) -> float:
    """RULER's ``string_match_all`` for one sample: the share of expected values that occur
    in the answer, compared case-insensitively."""
    if not expected:
        raise ValueError("expected must list at least one value")
    pred = postprocess_pred(answer).lower()
    return sum(1.0 if r.lower() in pred else 0.0 for r in expected) / len(expected)


def all_found(answer: str, expected: Sequence[str]) -> bool:
    """True iff every expected value occurs in the answer (the sample scores 1.0)."""
    return score(answer, expected) == 1.0


def string_match_all(preds: Sequence[str], refs: Sequence[Sequence[str]]) -> float:
    """RULER's corpus-level ``string_match_all`` in [0, 1] (RULER prints it times 100)."""
    if len(preds) != len(refs) or not preds:
        raise ValueError("need as many predictions as reference lists, at least one")
    return sum(score(p, r) for p, r in zip(preds, refs)) / len(preds)
