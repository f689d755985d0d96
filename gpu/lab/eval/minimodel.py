"""A tiny random Llama and synthetic texts for the miniature evaluation (``ridgefill eval
mini``) and the tests: no model package, no installed text, no network.

The tokenizer is a byte-level BPE trained on the synthetic text (digits kept one per token
as in SmolLM2), with BOS/EOS and a ChatML template, saved beside the model so
``gpu.core.models.load(folder)`` loads both like any local Hugging Face model.
"""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import torch

from ...data.corpus import Document

WORDS = {
    "alpha": ("river stone light garden window paper morning yellow quietly across under people "
              "market winter letter music open carry simple house field water bright").split(),
    "beta": ("function value return object class module import string number list table index "
             "error option default system method buffer stream parse result").split(),
}
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
                 "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIAL = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]


def prose(n_words: int, seed: int = 0, domain: str = "alpha", repeat: float = 0.0) -> str:
    """Seeded sentences over a small vocabulary; with ``repeat`` > 0 some sentences are
    copies of earlier ones (so documents hold copyable runs, as real ones do)."""
    rng = random.Random(f"{domain}:{seed}")
    words = WORDS[domain]
    sents: list[str] = []
    n = 0
    while n < n_words:
        if sents and rng.random() < repeat:
            s = rng.choice(sents)
        else:
            body = [rng.choice(words) for _ in range(rng.randint(5, 14))]
            if rng.random() < 0.2:
                body.append(str(rng.randint(10, 99999)))
            body[0] = body[0].capitalize()
            s = " ".join(body) + rng.choice(".!?")
        sents.append(s)
        n += len(s.split())
    return " ".join(sents)


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    text = [prose(4000, 1, d) for d in WORDS] + [
        "Some special magic numbers are hidden within the following text. Make sure to "
        "memorize it. I will quiz you about the numbers afterwards. One of the special magic "
        "numbers for wandering-umbrella is: 0123456789. What are all the special magic numbers "
        "for keen-otter mentioned in the provided text? The special magic number is"]
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                                   eos_token="</s>", additional_special_tokens=SPECIAL[3:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(path: str | Path, *, layers: int = 8, hidden: int = 64, seed: int = 0,
          family: str = "llama", window: int = 32) -> Path:
    """Write (once) a random model of ``layers`` layers and its tokenizer to ``path``:
    a Llama, or a Gemma-3 whose layers are sliding-window (``window`` tokens) except every
    fourth from the third, so that a global layer lies below the split at 3/8 of depth, as
    in the real one (global layer 5 below split 7)."""
    from transformers import AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig

    path = Path(path)
    if (path / "config.json").exists():
        return path
    tok = _tokenizer()
    common = dict(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=hidden // 4, max_position_embeddings=2048, tie_word_embeddings=True,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.eos_token_id)
    if family == "llama":
        cfg = LlamaConfig(**common)
    elif family == "gemma3":
        kinds = ["full_attention" if i % 4 == 2 else "sliding_attention" for i in range(layers)]
        cfg = Gemma3TextConfig(**common, sliding_window=window, layer_types=kinds,
                               query_pre_attn_scalar=hidden // 4)
    else:
        raise ValueError(f"family must be 'llama' or 'gemma3'; got {family!r}")
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    tmp = path.with_name(path.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    shutil.rmtree(path, ignore_errors=True)
    tmp.replace(path)
    return path


class SyntheticTexts:
    """Haystacks and two domains of documents from :func:`prose` (never calibration text:
    calibration uses other seeds)."""

    name = "synthetic"

    def haystack(self, min_chars: int, seed: int) -> str:
        n = max(min_chars // 5, 200)
        return prose(n, 1000 + seed, "alpha")

    def documents(self, min_chars: int) -> list[Document]:
        n = max(min_chars // 2, 200)
        return [Document(f"{d}/doc{k}", d, prose(n, 2000 + k, d, repeat=0.15))
                for d in WORDS for k in range(2)]


def write_calibration(folder: str | Path, n_docs: int = 6) -> Path:
    """Synthetic calibration documents as .txt files (for ``gpu.maps.fit`` with ``calib=folder``)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for k in range(n_docs):
        d = list(WORDS)[k % len(WORDS)]
        (folder / f"calib{k}.txt").write_text(prose(600, 3000 + k, d, repeat=0.1))
    return folder
