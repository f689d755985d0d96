"""Shared helpers for the torch-backend tests: tiny seeded random Hugging Face models of each
family (llama, qwen3, gemma3) with a byte-level tokenizer, saved once per test process to a
temporary folder so `gpu.core.models.load(path)` and the CLI can read them; a tiny calibration
folder; conversion of a tiny model's weights to rfmodel's TinyModel; small map objects.

Everything here is an *oracle builder*, never a copy of the code under test: the references
are the stock transformers forward, rfmodel.model.TinyModel and closed forms.
"""
from __future__ import annotations

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, LAYERS = 32, 4, 2, 8, 64, 4
N_SPECIAL = 3                      # <pad>=0, <s>=1, </s>=2, then the 256 byte symbols
VOCAB = N_SPECIAL + 256
WINDOW = 6                         # gemma3 tiny sliding window

_ROOT = Path(tempfile.mkdtemp(prefix="ridgefill-tests-"))
atexit.register(shutil.rmtree, _ROOT, True)


def scratch(name: str) -> Path:
    """A fresh folder under this test process's temporary root."""
    p = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_ROOT))
    return p


# ---------------------------------------------------------------------------- tokenizer
@functools.cache
def byte_tokenizer():
    """A byte-level BPE tokenizer with no merges: one token per byte (vocab 259)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    assert len(vocab) == VOCAB
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


# ---------------------------------------------------------------------------- models
def tiny_config(family: str, **kw):
    from transformers import Gemma3TextConfig, LlamaConfig, Qwen3Config

    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTER,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=512,
                  rms_norm_eps=1e-6, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                  pad_token_id=0)
    if family == "llama":
        cfg = LlamaConfig(**{**common, "rope_theta": 10000.0, **kw})
    elif family == "qwen3":
        cfg = Qwen3Config(**{**common, "rope_theta": 1000.0, **kw})
    elif family == "gemma3":
        layer_types = ["sliding_attention", "sliding_attention", "full_attention",
                       "sliding_attention"]
        cfg = Gemma3TextConfig(**{**common, "sliding_window": WINDOW, "layer_types": layer_types,
                                  "query_pre_attn_scalar": HEAD_DIM, **kw})
    else:
        raise ValueError(family)
    cfg._attn_implementation = "sdpa"
    return cfg


def _randomize(model, seed: int, std: float = 0.25):
    """Seeded weights with enough scale that fills and rows make visible differences."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if "norm" in name:
                # gemma3 norms compute x * (1 + w): keep the effective gain near 1 either way
                base = 0.0 if model.config.model_type.startswith("gemma3") else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=g))
            elif p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=g) * (std if "embed" in name
                                                             else 1.0 / p.shape[1] ** 0.5))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


def tiny_model(family: str, seed: int = 0, **kw):
    """A seeded random fp32 tiny causal LM of ``family`` (eval mode, CPU)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, **kw), dtype=torch.float32)
    return _randomize(model, seed).eval()


@functools.cache
def tiny_dir(family: str = "llama", seed: int = 0) -> Path:
    """A tiny model saved as a local Hugging Face folder (config, weights, tokenizer)."""
    path = _ROOT / f"tiny-{family}-{seed}"
    model = tiny_model(family, seed)
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


@functools.cache
def tiny_qwen2_dir(seed: int = 0) -> Path:
    """A small random Qwen2 (vLLM's Qwen2 class: biased K/V projections, grouped queries)
    with heads vLLM's CPU attention kernels take (head size 64) and two key/value heads (one
    per rank under tensor parallelism 2), saved as a local folder."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0, use_sliding_window=False)
    torch.manual_seed(seed)
    model = _randomize(AutoModelForCausalLM.from_config(cfg, dtype=torch.float32), seed).eval()
    path = _ROOT / f"tiny-qwen2-vllm-{seed}"
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


def load_tiny(family: str = "llama", seed: int = 0):
    """``gpu.core.models.load`` of the saved tiny folder (on the CPU, fp32)."""
    from gpu.core import models

    return models.load(str(tiny_dir(family, seed)), device="cpu", dtype=torch.float32)


def token_ids(n: int, seed: int = 0, vocab: int = VOCAB) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(N_SPECIAL, vocab, (1, n), generator=g)


# ---------------------------------------------------------------------------- calibration
CALIB_SOURCES = sorted(Path("/usr/share/common-licenses").glob("*"))


def calib_dir(n_docs: int = 4, chars: int = 1500) -> Path:
    """A folder of ``n_docs`` small .txt documents cut from the licenses on this machine
    (any text would do; these ship with every Debian image)."""
    texts = []
    for p in CALIB_SOURCES:
        try:
            t = p.read_text(errors="replace")
        except OSError:
            continue
        if len(t) >= chars:
            texts.append(t)
    if not texts:
        pytest.skip("no text files under /usr/share/common-licenses")
    folder = scratch("calib")
    for i in range(n_docs):
        t = texts[i % len(texts)]
        start = (i // len(texts)) * chars
        (folder / f"doc{i:02d}.txt").write_text(t[start:start + chars])
    return folder


# ---------------------------------------------------------------------------- rfmodel twin
def to_tiny_model(model, dtype=np.float64):
    """rfmodel's TinyModel with the same weights as a llama/qwen3 HF model."""
    from rfmodel.model import TinyConfig, TinyModel

    cfg = model.config
    theta = cfg.rope_parameters["rope_theta"]
    tc = TinyConfig(vocab=cfg.vocab_size, hidden=cfg.hidden_size, n_layers=cfg.num_hidden_layers,
                    n_heads=cfg.num_attention_heads, n_kv_heads=cfg.num_key_value_heads,
                    head_dim=cfg.head_dim, intermediate=cfg.intermediate_size, rope_theta=theta,
                    rms_eps=cfg.rms_norm_eps, qk_norm=cfg.model_type == "qwen3",
                    tie_embeddings=bool(cfg.tie_word_embeddings))
    weights = {k: v.detach().double().numpy() for k, v in model.state_dict().items()}
    return TinyModel(tc, weights, dtype=dtype)


# ---------------------------------------------------------------------------- maps
class DenseMaps:
    """A minimal Predictor: x_hat_l = x @ A_l^T + b_l with float32 torch tensors."""

    def __init__(self, split: int, maps: dict[int, tuple[np.ndarray, np.ndarray]]):
        self.split = split
        self.np = maps
        self.t = {l: (torch.tensor(A, dtype=torch.float32), torch.tensor(b, dtype=torch.float32))
                  for l, (A, b) in maps.items()}

    def predict(self, layer, x):
        A, b = self.t[layer]
        return torch.nn.functional.linear(x, A, b)


def random_maps(split: int, n_layers: int = LAYERS, d: int = HIDDEN, seed: int = 0,
                noise: float = 0.2):
    """Maps near the identity (so predictions stay in a sensible range), float32-exact values."""
    rng = np.random.default_rng(seed)
    out = {}
    for l in range(split + 1, n_layers):
        A = (np.eye(d) + noise * rng.standard_normal((d, d)) / np.sqrt(d)).astype(np.float32)
        b = (0.1 * rng.standard_normal(d)).astype(np.float32)
        out[l] = (A.astype(np.float64), b.astype(np.float64))
    return out


def identity_maps(split: int, n_layers: int = LAYERS, d: int = HIDDEN):
    return {l: (np.eye(d), np.zeros(d)) for l in range(split + 1, n_layers)}


def every_row_through_late(model, ids: torch.Tensor, split: int):
    """The engine's own path with every row exact: lower layers, then Engine.late over all
    rows. Returns (logits (n, vocab), cache), to compare with the stock forward."""
    from transformers import DynamicCache

    from gpu.core.engine import Engine
    from gpu.core.late import every_row_exact

    eng = Engine(model)
    cache = DynamicCache(config=model.config)
    x_split, _ = eng.lower(ids, split, cache)
    h = every_row_exact(eng.adapter, split, x_split, cache)
    return eng.adapter.logits(h)[0], cache


class KeepingRows:
    """A selector that asks for slices of two lower layers' inputs and picks rows from them
    (so a reused lower pass must hand back exactly what a fresh one would)."""

    def __init__(self):
        self.seen: dict[int, torch.Tensor] = {}

    def keep(self, prompt, plan):
        return {0: slice(-3, None), plan.split - 1: slice(1, 4)}

    def __call__(self, ctx):
        self.seen = {i: t.clone() for i, t in ctx.kept.items()}
        score = ctx.x_split[0, : ctx.plan.n_prefix].norm(dim=-1)
        return np.sort(score.argsort(descending=True)[:3].cpu().numpy())


def assert_lower_reuse_bitwise(model, maps, ids: torch.Tensor, split: int, tail: int,
                               n_layers: int = LAYERS, adopt: bool = False) -> None:
    """Engine(reuse_lower=True) over several arms and two prompts gives bitwise the logits,
    caches and selector inputs of a fresh engine per prefill, and runs the lower layers once
    per prompt. ``adopt``: the first prompt's pass comes from a stock forward instead
    (Engine.adopt_lower, as the exact arm hands it on), so the engine runs only the second."""
    from gpu.core.cache import full_cache, layer_inputs
    from gpu.core.engine import Engine

    from gpu.core.plan import Plan

    reuse = Engine(model, maps, reuse_lower=True)
    calls = []
    lower = reuse.lower
    reuse.lower = lambda *a, **k: calls.append(1) or lower(*a, **k)
    if adopt:
        cache = full_cache(model.config)
        with torch.inference_mode(), \
                layer_inputs(reuse.adapter, dict.fromkeys(range(split + 1), slice(None))) as inputs:
            model(input_ids=ids, cache=cache, use_cache=True)
        reuse.adopt_lower(ids, split, inputs, cache)
    other = torch.roll(ids, 1, dims=1)
    runs = [(ids, "ridge", None), (ids, "identity", None), (ids, "ridge", KeepingRows),
            (ids, "none", None), (other, "ridge", KeepingRows), (other, "identity", None)]
    for x, fill, sel in runs:
        n = x.shape[1]
        plan = Plan(n, split, tail, n_layers)
        s_reuse, s_fresh = (sel(), sel()) if sel else (None, None)
        a = run_plan(reuse, x, plan, fill, selector=s_reuse)
        b = run_plan(Engine(model, maps), x, plan, fill, selector=s_fresh)
        assert torch.equal(a.logits, b.logits), fill
        assert np.array_equal(a.plan.exact_rows, b.plan.exact_rows)
        for la, lb in zip(a.cache.layers, b.cache.layers):
            for name in ("keys", "values", "recurrent_states", "conv_states"):
                ta, tb = getattr(la, name, None), getattr(lb, name, None)
                if isinstance(tb, torch.Tensor):
                    assert torch.equal(ta, tb), (fill, name)
        if sel:
            assert s_reuse.seen.keys() == s_fresh.seen.keys()
            assert all(torch.equal(s_reuse.seen[i], s_fresh.seen[i]) for i in s_fresh.seen)
    assert len(calls) == (1 if adopt else 2)  # one lower pass per prompt


# ---------------------------------------------------------------------------- prefill under a plan
def run_plan(engine, ids, plan, fill: str, *, logits_rows: int | None = None, prompt=None,
             keep_x_split: bool = False, selector=None, splice=None, exact_cache=None,
             deltas=None, **config):
    """``engine.prefill`` under a fixed ``plan`` (its split, tail and exact rows; None: the stock
    forward) with ``fill``, every row's logits by default; ``config``: other PrefillConfig
    fields. The tests' shorthand for the configuration plus extras the engine takes."""
    from gpu.core.config import PrefillConfig
    from gpu.core.extras import Extras

    if plan is None:
        return engine.prefill(ids, PrefillConfig(fill="exact"), logits_rows=logits_rows)
    cfg = PrefillConfig(split=plan.split, tail=plan.tail, fill=fill, rows="none", **config)
    rows = plan.exact_rows if selector is None else None
    return engine.prefill(ids, cfg, Extras(splice, exact_cache, selector, rows, deltas),
                          prompt=prompt, logits_rows=logits_rows, keep_x_split=keep_x_split)


def free_port() -> int:
    """A localhost TCP port nothing listens on (a server a test starts binds it)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# the fit settings that keep a tiny random Llama's map fit to seconds (the harness tests)
MINI_FIT_KW = {"lambdas": (1e-3, 1e-1), "doc_tokens": 512, "heldout_docs": 1, "heldout_tokens": 256}


def mini_llama(root: Path):
    """gpu.lab.eval.minimodel's tiny Llama loaded fp32 on one thread, with its calibration folder:
    yields {"root", "loaded", "calib"} and restores the thread count (a fixture's body)."""
    from gpu.core import models
    from gpu.lab.eval import minimodel

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    loaded = models.load(str(minimodel.build(root / "tiny-llama")), device="cpu",
                         dtype=torch.float32)
    yield {"root": root, "loaded": loaded, "calib": str(minimodel.write_calibration(root / "calib"))}
    torch.set_num_threads(threads)
