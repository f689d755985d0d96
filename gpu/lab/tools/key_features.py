"""Which closed-form features predict the late layers' keys (``python -m gpu.lab.tools.key_features``):
the fallback lever of the tiered study, measured before the engine grows a new fill.

Below POP's split the direct cache-entry maps (the ``kv`` kind: a ridge map from x_S to each
late layer's key and value projections, paper 2.2) lose retrieval, and the keys carry the loss
(exact keys spliced into filled rows restore it; exact values change nothing). A linear map of
one row's x_S cannot see what the layers between S and l mix into that row from others. This
study fits the same closed-form map on richer features of the rows the lower pass already
computed, and scores what a far query reads:

- ``x``: x_S (the kv kind itself);
- ``x+prev``: x_S with the previous row's x_S (what a previous-token head above S copies in);
- ``x+prev2``: x_S with the two previous rows';
- ``x+lower``: x_S with the input of layer S/2 (a second source layer);
- ``x+mean``: x_S with the causal mean of x_S over the last ``MEAN_WINDOW`` rows;
- ``identity``: no map, POP's fill (the layer's own projections of x_S), the scale to read by.

One capture over the calibration text accumulates every feature set's moments (rfmodel.ridge,
targets the late layers' normed inputs, composed with their K/V projections as the kv kind is);
lambda is chosen per layer on the first half of the held-out documents by the fit's own
criterion (gpu.maps.choose: key and value cosine), and the other half is scored: key cosine,
attention-weighted key cosine, and the relative error of the last ``QUERIES`` exact rows'
attention output when every earlier row's keys and values are predicted (and with the keys alone
predicted, exact values). Writes JSON, markdown and a PNG.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

from rfmath.ridge import compose
from rfmodel.atomic import write_json, write_text
from rfmodel.ridge import RidgeMoments

from ...core import models
from ...core.attention import masked_attention
from ...core.engine import Engine
from ...core.late import SINK_RATIO, sink_rows
from ...data import corpus
from ...data.corpus import Document
from ...maps.choose import cache_write_cosine, entry_projection
from ...maps.fit import BACKEND, capture

FEATURES = ("x", "x+prev", "x+prev2", "x+lower", "x+mean", "identity")
MEAN_WINDOW = 32   # rows the causal mean of x+mean covers
QUERIES = 64       # exact last rows whose attention output is scored
LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1)
DOC_TOKENS = 4096  # calibration tokens a document at most (ridgefill fit's default)


def shifted(x: np.ndarray, k: int) -> np.ndarray:
    """Rows of ``x`` (n, d) moved down by ``k``: row t holds x[t - k], zeros for t < k."""
    return np.concatenate([np.zeros((k, x.shape[1]), x.dtype), x])[:x.shape[0]]


def ordinary(x: np.ndarray) -> np.ndarray:
    """``x`` with its sink rows (norm above SINK_RATIO times the median, the rows a kv fill
    keeps exact: gpu.core.late) zeroed: what the neighbour features read, so that a sink's
    far larger state feeds no other row's prediction."""
    norms = np.linalg.norm(x, axis=1)
    return np.where((norms > SINK_RATIO * np.median(norms))[:, None], 0, x).astype(x.dtype)


def causal_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Row t: the mean of x[max(0, t - window + 1) .. t] (n, d)."""
    c = np.cumsum(np.concatenate([np.zeros((1, x.shape[1])), x.astype(np.float64)]), axis=0)
    t = np.arange(1, x.shape[0] + 1)
    lo = np.maximum(t - window, 0)
    return ((c[t] - c[lo]) / (t - lo)[:, None]).astype(np.float32)


def lower_layer(split: int) -> int:
    """The second source layer of ``x+lower``: S/2 (layer 1 at least)."""
    return max(split // 2, 1)


def features(name: str, xs: dict[int, np.ndarray], split: int) -> np.ndarray:
    """The feature rows (n, k d) of set ``name`` from one document's captured layer inputs."""
    x = xs[split]
    xo = ordinary(x) if name in ("x+prev", "x+prev2", "x+mean") else x
    extra = {"x": [], "x+prev": [shifted(xo, 1)], "x+prev2": [shifted(xo, 1), shifted(xo, 2)],
             "x+lower": [xs[lower_layer(split)]], "x+mean": [causal_mean(xo, MEAN_WINDOW)]}
    if name not in extra:
        raise ValueError(f"feature set {name!r}: choose from {', '.join(extra)}")
    return np.concatenate([x, *extra[name]], axis=1) if extra[name] else x


def grab(engine: Engine, tokenizer: PreTrainedTokenizerBase, text: str, tokens: int, split: int
         ) -> dict[int, np.ndarray]:
    """One document's layer inputs from layer S/2 up, and the late layers' normed inputs."""
    ids = tokenizer(text, return_tensors="pt").input_ids[:, :tokens]
    return capture(engine, ids, lower_layer(split), normed=True)


def accumulate(engine: Engine, tokenizer: PreTrainedTokenizerBase, docs: Sequence[Document],
               split: int, sets: Sequence[str], budget: int, doc_tokens: int = DOC_TOKENS,
               progress: bool = True) -> dict[str, RidgeMoments]:
    """Moments of every feature set over the calibration documents (targets: normed inputs),
    ``budget`` tokens in all, at most ``doc_tokens`` a document (as ``ridgefill fit`` cuts them);
    a document with non-finite activations is skipped, as the fit skips it."""
    d = engine.model.config.get_text_config().hidden_size
    late = range(split + 1, engine.adapter.n_layers)
    moments, used = {}, 0
    bar = tqdm(total=budget, desc=f"capture (split {split})", unit="tok", disable=not progress)
    for doc in docs:
        if used >= budget:
            break
        xs = grab(engine, tokenizer, doc.text, min(doc_tokens, budget - used), split)
        if not all(np.isfinite(x).all() for x in xs.values()):
            warnings.warn(f"calibration document {doc.doc_id} gives non-finite activations; "
                          "skipped")
            continue
        n = xs[split].shape[0]
        used += n
        bar.update(n)
        ys = {l: xs[-1 - l] for l in late}
        for name in sets:
            f = features(name, xs, split)
            m = moments.setdefault(name, RidgeMoments(f.shape[1], {l: d for l in late},
                                                      backend=BACKEND))
            m.update(f, ys)
    bar.close()
    return moments


def predict(f: torch.Tensor, A: np.ndarray, b: np.ndarray) -> torch.Tensor:
    """(1, n, 2 m) stacked key/value projections the map (A, b) predicts from one document's
    feature rows ``f`` (1, n, k d), in fp32 as the engine applies a map."""
    return f @ torch.from_numpy(A.astype(np.float32)).T + torch.from_numpy(b.astype(np.float32))


def entry_maps(engine: Engine, moments: RidgeMoments, lam: float
               ) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """{layer: (A, b)} from features to the stacked key/value projections (the kv kind's compose)."""
    return {l: compose(*entry_projection(engine, l), A, b) for l, (A, b) in moments.solve(lam).items()}


def read_errors(engine: Engine, layer: int, kv_pred: torch.Tensor, x_true: torch.Tensor,
                x_split: torch.Tensor, keep_sinks: bool = True) -> tuple[float, float]:
    """Relative error of the last QUERIES exact rows' attention output (mean over heads and
    queries) when every earlier row writes the predicted keys and values, and when it writes
    predicted keys with exact values. ``keep_sinks``: the rows the engine keeps exact under a
    kv fill (attention sinks: gpu.core.late.sink_rows of x_S ``x_split``) write exact entries
    in both (POP's identity fill keeps none). Full-attention layers only."""
    ad = engine.adapter
    if ad.layer_info(layer).kind != "attention" or ad.layer_info(layer).window is not None:
        raise ValueError(f"layer {layer} is not a full-attention layer: the read error scores "
                         "full causal attention only")
    n = x_true.shape[1]
    m = min(QUERIES, n - 1)
    sinks = torch.as_tensor(sink_rows(x_split, np.arange(n - m)) if keep_sinks
                            else np.zeros(0, np.int64))
    cos, sin = ad.rope(x_true, torch.arange(n)[None], layer)
    norm = ad.input_norm(layer)
    kt, vt = ad.keys_values(layer, norm(x_true), cos, sin)
    kp, vp = ad.project_entries(layer, kv_pred, cos, sin)
    q = ad.queries(layer, norm(x_true[:, n - m:]), cos[:, n - m:], sin[:, n - m:])
    allowed = torch.arange(n)[None] <= torch.arange(n - m, n)[:, None]

    def out(k, v):
        return masked_attention(q, k, v, allowed, ad.scaling(layer)).float()

    def mixed(pred, true):
        entries = torch.cat([pred[:, :, :n - m], true[:, :, n - m:]], dim=2)
        entries[:, :, sinks] = true[:, :, sinks]
        return entries

    exact = out(kt, vt)
    scale = exact.norm(dim=-1).clamp_min(1e-12)
    both = ((out(mixed(kp, kt), mixed(vp, vt)) - exact).norm(dim=-1) / scale).mean().item()
    keys = ((out(mixed(kp, kt), vt) - exact).norm(dim=-1) / scale).mean().item()
    return both, keys


def pop_entries(engine: Engine, layer: int, x_split: torch.Tensor) -> torch.Tensor:
    """(1, n, 2 m) what POP's identity fill writes into ``layer``: the layer's own key and
    value projections of its norm of x_S (the baseline row ``identity``; nothing fitted)."""
    attn, normed = engine.adapter.attn(layer), engine.adapter.input_norm(layer)(x_split)
    return torch.cat([attn.k_proj(normed), attn.v_proj(normed)], dim=-1)


def score(engine: Engine, captures: Sequence[dict[int, np.ndarray]], split: int,
          layers: Iterable[int], predictor: Callable[[int, int], torch.Tensor],
          keep_sinks: bool = True) -> dict[int, dict]:
    """{layer: metrics} over held-out captures; ``predictor(i, layer)`` gives capture i's
    predicted stacked key/value projections (see :func:`read_errors` for ``keep_sinks``)."""
    out = {}
    with torch.inference_mode():
        for l in layers:
            rows = []
            for i, xs in enumerate(captures):
                pred = predictor(i, l)
                x_true = torch.from_numpy(xs[l])[None]
                rows.append((*cache_write_cosine(engine, l, pred, x_true, "kv"),
                             *read_errors(engine, l, pred, x_true,
                                          torch.from_numpy(xs[split])[None], keep_sinks)))
            k, v, w, e_both, e_keys = (float(np.mean(c)) for c in zip(*rows))
            out[l] = {"key_cosine": k, "value_cosine": v, "weighted_key_cosine": w,
                      "read_error": e_both, "read_error_keys_only": e_keys}
    return out


def study(engine: Engine, tokenizer: PreTrainedTokenizerBase, split: int, sets: Sequence[str],
          fit_docs: Sequence[Document], choose_caps: Sequence[dict[int, np.ndarray]],
          score_caps: Sequence[dict[int, np.ndarray]], budget: int) -> dict:
    """Every feature set's per-layer scores at ``split`` with lambda chosen per layer."""
    fitted = [name for name in sets if name != "identity"]
    moments = accumulate(engine, tokenizer, fit_docs, split, fitted, budget) if fitted else {}
    late = range(split + 1, engine.adapter.n_layers)
    result = {}
    if "identity" in sets:
        per_layer = score(engine, score_caps, split, late, lambda i, l: pop_entries(
            engine, l, torch.from_numpy(score_caps[i][split])[None]), keep_sinks=False)
        result["identity"] = summary(per_layer)
    for name in fitted:
        f_choose, f_score = ([torch.from_numpy(features(name, xs, split))[None] for xs in caps]
                             for caps in (choose_caps, score_caps))   # once, not per layer
        best: dict[int, tuple[float, float, tuple]] = {}
        for lam in tqdm(LAMBDAS, desc=f"lambda ({name}, split {split})"):
            maps = entry_maps(engine, moments[name], lam)
            with torch.inference_mode():
                for l, (A, b) in maps.items():
                    crit = np.mean([np.mean(cache_write_cosine(
                        engine, l, predict(f, A, b), torch.from_numpy(xs[l])[None], "kv")[:2])
                        for f, xs in zip(f_choose, choose_caps)])
                    if l not in best or crit > best[l][1]:
                        best[l] = (lam, crit, (A, b))
        per_layer = score(engine, score_caps, split, late,
                          lambda i, l: predict(f_score[i], *best[l][2]))
        for l in per_layer:
            per_layer[l]["lambda"] = best[l][0]
        result[name] = summary(per_layer)
    return result


def summary(per_layer: dict[int, dict]) -> dict:
    """Per-layer metrics and their means over the layers."""
    return {"layers": {str(l): v for l, v in per_layer.items()},
            "mean": {k: float(np.mean([v[k] for v in per_layer.values()]))
                     for k in next(iter(per_layer.values()))}}


def common_layers(rec: dict) -> list[str]:
    """The late layers every split of the record scores (above the deepest split): the layers
    on which splits compare (each split's own mean covers a different set of layers)."""
    sets = [set(r["layers"]) for by in rec["splits"].values() for r in by.values()]
    return sorted(set.intersection(*sets), key=int) if sets else []


def markdown(rec: dict) -> str:
    common = common_layers(rec)
    span = f"{common[0]}-{common[-1]}" if common else "none"
    lines = [f"# Key features ({rec['model']})", "", *(f"`{c}`" for c in rec["commands"]), "",
             f"Fit: {rec['fit_tokens']} calibration tokens; lambda per layer on "
             f"{len(rec['choose_docs'])} held-out documents, scored on "
             f"{len(rec['score_docs'])} others ({', '.join(map(str, rec['score_tokens']))} "
             f"tokens); the last {QUERIES} rows' attention read. Means over each split's late "
             f"layers, and over layers {span} (what every split shares). The weighted key cosine "
             "is the fit's criterion: sink rows predicted (every read error keeps them exact, "
             "as a kv fill does; `identity`, POP's fill, keeps none).", "",
             "| split | features | key cos | weighted key cos | value cos | read error | "
             f"read error, keys only | keys only, layers {span} |", "|---|---|---|---|---|---|---|---|"]
    for s in sorted(rec["splits"], key=int):
        for name, r in rec["splits"][s].items():
            m = r["mean"]
            shared = np.mean([r["layers"][l]["read_error_keys_only"] for l in common])
            lines.append(f"| {s} | {name} | {m['key_cosine']:.4f} | {m['weighted_key_cosine']:.4f} | "
                         f"{m['value_cosine']:.4f} | {m['read_error']:.4f} | "
                         f"{m['read_error_keys_only']:.4f} | {shared:.4f} |")
    return "\n".join(lines) + "\n"


def plot(rec: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    splits = sorted(rec["splits"], key=int)
    fig, axes = plt.subplots(1, len(splits), figsize=(5 * len(splits), 3.6), squeeze=False)
    for ax, s in zip(axes[0], splits):
        for name, r in rec["splits"][s].items():
            layers = sorted(int(l) for l in r["layers"])
            ax.plot(layers, [r["layers"][str(l)]["read_error_keys_only"] for l in layers],
                    marker="o", ms=3, label=name)
        ax.set(title=f"split {s}", xlabel="layer", ylabel="attention read error (keys predicted)")
        ax.grid(alpha=.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def merged(path: Path, setup: dict) -> dict:
    """The record at ``path`` when it was made with the same ``setup`` (a later run adds its
    splits and feature sets to it), else a new one."""
    if path.exists():
        old = json.loads(path.read_text())
        if {k: old.get(k) for k in setup} == setup:
            return old
    return {"commands": [], **setup, "splits": {}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpu.lab.tools.key_features",
                                description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="a built-in model")
    p.add_argument("--splits", type=int, nargs="+", default=(8, 12, 16),
                   help="split layers S to study")
    p.add_argument("--features", nargs="+", default=FEATURES, choices=FEATURES,
                   help="feature sets (the module's docstring says what each holds)")
    p.add_argument("--fit-tokens", type=int, default=24_000, help="calibration tokens fitted on")
    p.add_argument("--tokens", type=int, default=2048, help="tokens per held-out document")
    p.add_argument("--heldout-docs", type=int, default=4, help="half choose lambda, half score")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=None,
                   help="record directory (default: results/key_features/<model>); a rerun "
                   "with the same setup adds splits and sets to its record")
    a = p.parse_args(argv)
    if a.heldout_docs < 2:
        p.error("--heldout-docs must be at least 2: half choose lambda, the other half is scored")
    if a.threads:
        torch.set_num_threads(a.threads)
    loaded = models.load(a.model, device="cpu")
    a.out = a.out or Path("results/key_features") / loaded.name
    engine = Engine(loaded.model)
    fit_docs = corpus.calibration_set(max_chars=a.fit_tokens * corpus.CHARS_PER_TOKEN * 2, seed=0)
    held = corpus.lambda_set(max_docs=a.heldout_docs, seed=0)
    half = len(held) // 2
    setup = {"model": loaded.name, "fit_tokens": a.fit_tokens, "tokens": a.tokens,
             "choose_docs": [d.doc_id for d in held[:half]],
             "score_docs": [d.doc_id for d in held[half:]],
             "score_tokens": [len(loaded.tokenizer(d.text).input_ids[:a.tokens])
                              for d in held[half:]],
             "mean_window": MEAN_WINDOW, "queries": QUERIES, "lambdas": list(LAMBDAS)}
    rec = merged(a.out / "key_features.json", setup)
    rec["commands"].append("python -m gpu.lab.tools.key_features " + " ".join(
        argv if argv is not None else sys.argv[1:]))
    for s in a.splits:
        caps = [grab(engine, loaded.tokenizer, d.text, a.tokens, s) for d in held]
        rec["splits"].setdefault(str(s), {}).update(study(
            engine, loaded.tokenizer, s, a.features, fit_docs, caps[:half], caps[half:],
            a.fit_tokens))
        a.out.mkdir(parents=True, exist_ok=True)
        write_json(a.out / "key_features.json", rec)
        write_text(a.out / "key_features.md", markdown(rec))
    plot(rec, a.out / "key_features.png")
    print(markdown(rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
