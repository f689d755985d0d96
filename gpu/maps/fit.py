"""Fitting RidgeFill maps (paper section 2.2 and Appendix G).

One capture pass over the calibration text serves every listed split: the inputs of the
split layer and of every later layer are hooked out of the model's own forward and fed to
streaming fp64 moments (rfmodel.ridge). The pass checkpoints every few documents and resumes
bitwise. lambda is chosen per split on held-out documents by the cosine between the cache
entries written from the predicted and from the true layer input. Under torchrun each rank
captures a disjoint share of the documents and the moments are all-reduced before the solve.
With ``correction``, DeltaM of the terminal-state correction (paper 2.3) is measured for every
Gated DeltaNet layer above the split on the held-out documents, with the chosen maps.
"""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import statistics
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm
from transformers import DynamicCache

from rfmodel.atomic import atomic_path, write_json
from rfmodel.ridge import RidgeMoments

from ..data import corpus
from ..core.engine import Engine
from .choose import choose, heldout_scores
from ..core.fills import MAP_KINDS
from .files import save_maps
from .fit_options import FitOptions
from ..core.models import Loaded

logger = logging.getLogger("ridgefill")

BACKEND = "blocked"  # rfmodel.ridge: float32 block products summed in float64 (capture speed)


def check_options(opts: FitOptions, n_layers: int) -> None:
    for s in opts.splits:
        if not 1 <= s <= n_layers - 1:
            raise ValueError(f"split {s} is outside 1..{n_layers - 1} for this {n_layers}-layer "
                             "model; pick a layer between the first and the last")
    if not opts.splits:
        raise ValueError("give at least one split with --splits")
    bad_kinds = [k for k in opts.kinds if k not in MAP_KINDS] or (
        [] if opts.kinds else ["(none)"])
    if bad_kinds or len(set(opts.kinds)) != len(opts.kinds):
        raise ValueError(f"--kinds {' '.join(opts.kinds)}: give distinct kinds from "
                         f"{', '.join(MAP_KINDS)} (default: ridge)")
    bad = [lam for lam in opts.lambdas if not (lam > 0 and math.isfinite(lam))]
    if bad:
        raise ValueError(f"lambda must be > 0 (got {bad}); the default grid is 1e-4 .. 1")


def output_path(out: Path, split: int, n_splits: int, kind: str = "ridge",
                kinds: tuple[str, ...] = ("ridge",)) -> Path:
    """One split: ``out`` itself; several: ``out`` with ``-s{split}`` before the suffix. With
    several kinds, every kind but ridge adds ``-{kind}`` (one kind: ``out`` as given)."""
    path = out if n_splits == 1 else out.with_name(f"{out.stem}-s{split}{out.suffix}")
    if len(kinds) > 1 and kind != "ridge":
        path = path.with_name(f"{path.stem}-{kind}{path.suffix}")
    return path


def documents(opts: FitOptions):
    """(fit documents, held-out lambda documents) for the built-in set or a folder."""
    if opts.calib == "builtin":
        fit = corpus.calibration_set(max_chars=opts.max_tokens * corpus.CHARS_PER_TOKEN * 2,
                                     seed=opts.seed)
        held = corpus.lambda_set(max_docs=opts.heldout_docs, seed=opts.seed)
        return fit, held
    docs = corpus.read_folder(opts.calib)
    n_held = min(opts.heldout_docs, max(len(docs) // 5, 1)) if len(docs) > 1 else 0
    if n_held == 0:
        return docs, docs[:1]  # one document: lambda is scored on it (noted in the metadata)
    return docs[:-n_held], docs[-n_held:]


def moments_path(out: Path, rank: int = 0) -> Path:
    """Where the capture pass keeps its moments: the checkpoint while it runs, and afterwards
    the saved sums from which a new lambda re-solves without a new pass."""
    suffix = "" if rank == 0 else f".rank{rank}"
    return out.with_name(f"{out.stem}.moments{suffix}.npz")


def capture(engine: Engine, ids: torch.Tensor, first: int, normed: bool = False
            ) -> dict[int, np.ndarray]:
    """Inputs (residual stream) of layers first..L-1 for every row, as float32 (n, d);
    ``normed``: also each layer's normed input (its input norm applied: what its key and
    value projections read, the targets of the direct cache-entry maps) under ``-1 - l``."""
    last = engine.adapter.n_layers - 1
    keep = {l: slice(None) for l in range(first, last)}
    with torch.inference_mode():
        x_last, kept = engine.lower(ids, last, None, keep=keep)
        kept[last] = x_last
        if normed:
            for l in range(first + 1, last + 1):
                kept[-1 - l] = engine.adapter.input_norm(l)(kept[l])
    return {l: t[0].float().cpu().numpy() for l, t in kept.items()}


class Checkpoint:
    """Moments of every split, unigram counts and progress in one npz, replaced atomically."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key

    def load(self):
        if not self.path.exists():
            return None
        with np.load(self.path, allow_pickle=False) as z:
            if str(z["key"]) != self.key:
                return None
            state = {k: z[k] for k in z.files}
        splits = sorted({int(k.split("/")[0][1:]) for k in state if k.startswith("s")})
        moments = {s: RidgeMoments.from_state_dict(
            {k.split("/", 1)[1]: v for k, v in state.items() if k.startswith(f"s{s}/")},
            backend=BACKEND)
            for s in splits}
        return moments, state["unigram"], int(state["done"]), json.loads(str(state["log"]))

    def save(self, moments: dict[int, RidgeMoments], unigram, done: int, log: dict) -> None:
        arrays = {f"s{s}/{k}": v for s, m in moments.items() for k, v in m.state_dict().items()}
        with atomic_path(self.path) as tmp:
            with open(tmp, "wb") as fh:
                np.savez(fh, key=np.array(self.key), unigram=unigram, done=np.array(done),
                         log=np.array(json.dumps(log)), **arrays)


def rank_device(device: str | torch.device | None) -> torch.device:
    """The device of this rank: under torchrun on CUDA, ``cuda:LOCAL_RANK`` (one GPU per
    process, as nccl requires); otherwise ``device`` (default: CUDA when present)."""
    device = torch.device(device) if device is not None else (
        torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))
    if device.type == "cuda" and "LOCAL_RANK" in os.environ and device.index is None:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    return device


def _dist(device: torch.device):
    """torch.distributed under torchrun (nccl for a CUDA model, gloo for a CPU one), else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    import torch.distributed as dist
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist


def accumulate(loaded: Loaded, opts: FitOptions, docs, progress: bool = True):
    """The capture pass: moments for every split, resumable, sharded under torchrun. Returns
    (moments, unigram counts, log, [(ids, seconds)] of each document this process captured:
    its speed)."""
    tok, model = loaded.tokenizer, loaded.model
    engine = Engine(model)
    L, d = loaded.n_layers, model.config.get_text_config().hidden_size
    first = min(opts.splits)
    dist = _dist(model.device)
    rank, world = (dist.get_rank(), dist.get_world_size()) if dist else (0, 1)
    mine = docs[rank::world]
    parts = [loaded.fingerprint(), opts.splits, opts.doc_tokens, opts.max_tokens,
             [x.doc_id for x in mine], BACKEND] + (["normed"] if "kv" in opts.kinds else [])
    key = hashlib.sha256(json.dumps(parts).encode()).hexdigest()
    ckpt = Checkpoint(moments_path(opts.out, rank), key)
    resumed = ckpt.load()
    if resumed:
        moments, unigram, done, log = resumed
    else:
        moments = {s: RidgeMoments(d, {l: d for l in range(s + 1, L)}, backend=BACKEND)
                   for s in opts.splits}
        if "kv" in opts.kinds:  # normed-input targets, kept as split -1 - s
            moments.update({-1 - s: RidgeMoments(d, {l: d for l in range(s + 1, L)},
                                                 backend=BACKEND) for s in opts.splits})
        unigram = np.zeros(model.config.get_text_config().vocab_size, np.int64)
        done, log = 0, {"docs": {}, "skipped": {}}
    budget = opts.max_tokens // world
    used = resumed_tokens = sum(log["docs"].values())
    bar = tqdm(total=budget, initial=used, unit="tok", desc=f"capture (rank {rank})",
               disable=not progress, dynamic_ncols=True)
    timed: list[tuple[torch.Tensor, float]] = []
    for i in range(done, len(mine)):
        if used >= budget:
            break
        doc = mine[i]
        t0 = time.perf_counter()
        ids = tok(doc.text, return_tensors="pt").input_ids[:, : min(opts.doc_tokens, budget - used)]
        xs = capture(engine, ids.to(model.device), first, normed="kv" in opts.kinds)
        if not all(np.isfinite(x).all() for x in xs.values()):
            warnings.warn(f"calibration document {doc.doc_id} gives non-finite activations; "
                          "skipped (recorded in the map metadata)")
            log["skipped"][doc.doc_id] = "non-finite activations"
        else:
            for s, m in moments.items():
                m.update(xs[s if s >= 0 else -1 - s],
                         {l: xs[l if s >= 0 else -1 - l] for l in m.d_outs})
            unigram += np.bincount(ids[0].numpy(), minlength=unigram.size)
            log["docs"][doc.doc_id] = int(ids.shape[1])
            used += int(ids.shape[1])
            bar.update(int(ids.shape[1]))
            timed.append((ids, time.perf_counter() - t0))
        if (i + 1) % opts.checkpoint_every == 0:
            ckpt.save(moments, unigram, i + 1, log)
    bar.close()
    ckpt.save(moments, unigram, len(mine), log)
    if dist:
        moments, unigram, log = _all_reduce(dist, moments, unigram, log, model.device)
    return moments, unigram, log, timed


def _all_reduce(dist, moments, unigram, log, device: torch.device):
    """Sum every rank's fp64 moments and unigram counts; the tensors travel on ``device``
    (nccl reduces device tensors only, gloo CPU ones)."""
    device = device if dist.get_backend() == "nccl" else torch.device("cpu")
    reduced = {}
    for s, m in moments.items():
        state = {}
        for k, v in m.state_dict().items():
            # flat copy: ascontiguousarray would turn the 0-d count/weight_sum into shape (1,)
            t = torch.from_numpy(np.array(v, dtype=np.float64).reshape(-1)).to(device)
            dist.all_reduce(t)
            state[k] = t.cpu().numpy().reshape(np.shape(v)).astype(v.dtype)
        reduced[s] = RidgeMoments.from_state_dict(state, backend=BACKEND)
    u = torch.from_numpy(unigram).clone().to(device)
    dist.all_reduce(u)
    u = u.cpu()
    logs = [None] * dist.get_world_size()
    dist.all_gather_object(logs, log)
    merged = {"docs": {}, "skipped": {}}
    for part in logs:
        merged["docs"].update(part["docs"])
        merged["skipped"].update(part["skipped"])
    return reduced, u.numpy(), merged


def gdn_layers(engine: Engine, split: int) -> list[int]:
    """Gated DeltaNet layers above the split: the layers the terminal-state correction covers
    (layer S itself reads x_S exactly, so its state is exact)."""
    ad = engine.adapter
    return [l for l in range(split + 1, ad.n_layers) if ad.layer_info(l).kind == "gdn"]


def _prefix_states(engine: Engine, layer: int, x: torch.Tensor, ends: list[int]) -> list[np.ndarray]:
    """GDN layer ``layer``'s recurrent state (H_v, d_k, d_v) after rows 0..e-1 for each e in
    ``ends``, the layer's own mixer run over input ``x`` (1, n, d) from an empty state."""
    ad = engine.adapter
    cache = DynamicCache(config=engine.model.config)
    normed = ad.input_norm(layer)(x)
    states, start = [], 0
    for e in ends:
        ad.mix(layer, normed[:, start:e], cache)
        states.append(cache.layers[layer].recurrent_states[0][0].double().cpu().numpy())
        start = e
    return states


def terminal_state_shift(engine: Engine, captures, split: int, layer: int, A: np.ndarray,
                         b: np.ndarray, every: int) -> tuple[np.ndarray, int]:
    """DeltaM of one GDN layer (paper 2.3): the mean over held-out documents and prefix ends
    (every ``every`` rows) of exact minus filled state, where the filled state is that of a
    fully filled prefix (every row's input predicted from x_S by the map, as stored in bf16,
    the default precision). Returns (DeltaM (H_v, d_k, d_v) float64, number of states)."""
    p = next(engine.model.parameters())
    A_t = torch.from_numpy(np.asarray(A, np.float32)).to(torch.bfloat16).to(p.device, p.dtype)
    b_t = torch.from_numpy(np.asarray(b, np.float32)).to(p.device, p.dtype)
    total, count = None, 0
    with torch.inference_mode():
        for xs in captures:
            x_true = torch.from_numpy(xs[layer])[None].to(p.device, p.dtype)
            x_hat = torch.nn.functional.linear(
                torch.from_numpy(xs[split])[None].to(p.device, p.dtype), A_t, b_t)
            n = x_true.shape[1]
            ends = list(range(every, n + 1, every)) or [n]
            for e, f in zip(_prefix_states(engine, layer, x_true, ends),
                            _prefix_states(engine, layer, x_hat, ends)):
                total = e - f if total is None else total + (e - f)
                count += 1
    return total / count, count


SPEED_DOCS = 3  # captured documents the plain forward is timed on (one forward each)


def throughput(loaded: Loaded, timed: list[tuple[torch.Tensor, float]]) -> dict:
    """Capture speed against the model's own forward at the same length. ``timed``:
    (ids, seconds) of each document this process captured (tokenizing, the capture forward,
    the moment update). The longest ``SPEED_DOCS`` of them (the first left out: it warms up)
    each get one plain forward of the same ids; the share is the median over those documents
    of forward seconds / capture seconds (paired: documents differ in length, and the
    per-token cost with it). Also the capture's tokens per second over the whole pass."""
    if not timed:  # everything was resumed from the checkpoint
        return {"capture_tokens_per_second": None, "capture_share_of_forward": None}
    pool = timed[1:] or timed
    chosen = sorted(pool, key=lambda t: -t[0].shape[1])[:SPEED_DOCS]
    forward = []
    with torch.inference_mode():
        for ids, _ in chosen:
            ids = ids.to(loaded.model.device)
            t = time.perf_counter()
            loaded.model(input_ids=ids, use_cache=False, logits_to_keep=1)
            if ids.device.type == "cuda":
                torch.cuda.synchronize()
            forward.append(time.perf_counter() - t)
    n = [int(ids.shape[1]) for ids, _ in chosen]
    return {"capture_tokens_per_second": sum(int(i.shape[1]) for i, _ in timed)
            / max(sum(s for _, s in timed), 1e-9),
            "forward_tokens_per_second": sum(n) / sum(forward),
            "paired_capture_tokens_per_second": sum(n) / sum(s for _, s in chosen),
            "forward_tokens": n,
            "capture_share_of_forward": statistics.median(
                f / s for f, (_, s) in zip(forward, chosen))}


def fit(loaded: Loaded, opts: FitOptions, progress: bool = True) -> dict[int, Path]:
    """Capture once, choose lambda on held-out text, write one map file per split and kind;
    returns {split: path} of the first kind (the others: :func:`output_path`)."""
    check_options(opts, loaded.n_layers)
    engine = Engine(loaded.model)
    for s in opts.splits:
        if opts.correction and not gdn_layers(engine, s):
            raise ValueError(f"--correction measures DeltaM on Gated DeltaNet layers above the "
                             f"split; {loaded.name} has none above split {s} (drop "
                             "--correction)")
        if "kv" in opts.kinds and gdn_layers(engine, s):
            raise ValueError(f"kv maps write attention cache entries; {loaded.name} has Gated "
                             f"DeltaNet layers above split {s}: fit --kinds ridge or anchored")
    fit_docs, held_docs = documents(opts)
    t0 = time.perf_counter()
    moments, unigram, log, timed = accumulate(loaded, opts, fit_docs, progress)
    capture_s = time.perf_counter() - t0
    speed = throughput(loaded, timed)
    if progress and speed["capture_share_of_forward"] is not None:
        logger.info("capture: %.0f tok/s; on %d of its documents (%s tokens) %.0f%% of the "
                 "model's own forward (median per document)",
                 speed["capture_tokens_per_second"], len(speed["forward_tokens"]),
                 "/".join(map(str, speed["forward_tokens"])),
                 100 * speed["capture_share_of_forward"])
    dist = _dist(loaded.model.device)
    if dist and dist.get_rank() != 0:
        dist.barrier()
        return {}
    model = loaded.model
    captures = []
    for doc in held_docs:
        ids = loaded.tokenizer(doc.text, return_tensors="pt").input_ids[:, : opts.heldout_tokens]
        captures.append(capture(engine, ids.to(model.device), min(opts.splits)))
    written = {}
    for s in opts.splits:
        identity = heldout_scores(engine, captures, s, None)
        for kind in opts.kinds:
            t1 = time.perf_counter()
            maps, lam, scores, by_weighted = choose(engine, captures, moments, s, kind,
                                                    opts.lambdas, progress)
            solve_s = time.perf_counter() - t1
            per_layer = {l: scores[lam if kind == "ridge" else lam[l]][l] for l in maps}
            meta = _meta(loaded, opts, s, kind, maps, lam, scores, by_weighted, per_layer,
                         identity, moments[s], log, held_docs)
            meta["timing"] = {"capture_seconds": capture_s, **speed,
                              "solve_seconds_per_layer": solve_s / (len(opts.lambdas) * len(maps))}
            delta_M = None
            if opts.correction and kind == "ridge":
                delta_M = _correction(engine, captures, s, maps, opts, held_docs, meta)
            path = output_path(opts.out, s, len(opts.splits), kind, opts.kinds)
            save_maps(path, maps, meta, unigram, delta_M=delta_M)
            write_json(path.with_suffix(".json"), meta)
            written.setdefault(s, path)
    if dist:
        dist.barrier()
    return written


def _cosines(per_layer: dict) -> dict:
    return {str(l): {"keys": k, "values": v, "keys_attention_weighted": w}
            for l, (k, v, w) in per_layer.items()}


def _meta(loaded: Loaded, opts: FitOptions, s: int, kind: str, maps: dict, lam, scores: dict,
          by_weighted: dict, per_layer: dict, identity: dict, moments: RidgeMoments, log: dict,
          held_docs) -> dict:
    """The map file's metadata: model, split, kind, lambda (per split or per layer) with the
    criterion's scores and the attention-weighted criterion's choice, held-out cosines."""
    d = loaded.model.config.get_text_config().hidden_size
    d_out = int(next(iter(maps.values()))[0].shape[0])
    lam_meta = lam if kind == "ridge" else {str(l): v for l, v in lam.items()}
    return {
        "model": loaded.name, "fingerprint": loaded.fingerprint(), "split": s, "kind": kind,
        "n_layers": loaded.n_layers, "d_in": d, "d_out": d_out, "lambda": lam_meta,
        "lambda_scores": {lam_: float(np.mean([(k + v) / 2 for k, v, _ in pl.values()]))
                          for lam_, pl in scores.items()},
        "lambda_by_weighted_keys": {str(l): v for l, v in by_weighted.items()},
        "calibration": {"source": opts.calib, "documents": log["docs"],
                        "rows": int(moments.count), "skipped": log["skipped"]},
        "heldout": {"documents": [doc.doc_id for doc in held_docs],
                    "cosine": _cosines(per_layer), "identity_cosine": _cosines(identity)},
    }


def _correction(engine: Engine, captures, s: int, maps: dict, opts: FitOptions, held_docs,
                meta: dict) -> dict:
    """DeltaM of every GDN layer above the split (paper 2.3), noted in ``meta``."""
    t2 = time.perf_counter()
    delta_M, states = {}, 0
    for l in gdn_layers(engine, s):
        delta_M[l], states = terminal_state_shift(engine, captures, s, l, *maps[l],
                                                  opts.correction_every)
    meta["correction"] = {
        "layers": sorted(delta_M), "documents": [d.doc_id for d in held_docs],
        "every": opts.correction_every, "states_per_layer": states,
        "note": "DeltaM = mean exact minus filled (fully filled prefix) recurrent state "
                "at prefix ends of the held-out documents, with the chosen maps",
        "seconds": time.perf_counter() - t2,
        "delta_M_norm": {str(l): float(np.linalg.norm(d)) for l, d in delta_M.items()}}
    return delta_M
