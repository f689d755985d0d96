"""Choosing lambda on held-out text (paper section 2.2): the cosine between the cache entries
written from the predicted and from the true layer input, per map kind (gpu.core.fills.MAP_KINDS),
and the attention-weighted key cosine beside it (what a far query reads)."""
from __future__ import annotations

import numpy as np
import torch
from tqdm import tqdm

from rfmath.ridge import compose

from ..core.engine import Engine


def cache_write_cosine(engine: Engine, layer: int, x_pred: torch.Tensor, x_true: torch.Tensor,
                       kind: str = "ridge") -> tuple[float, float, float]:
    """Mean per-row cosine of keys and of values written from predicted vs true input (2.2),
    and the key cosine weighted by the attention the last ``WEIGHT_QUERIES`` rows' exact
    queries give each row (what a far query reads; nan on a Gated DeltaNet layer, which has no
    per-row cache entry: what a row writes towards its state is scored instead, its key and
    value projections). ``kind="kv"``: ``x_pred`` is the direct map's stacked key and value
    projections (gpu.core.adapters.base.Adapter.project_entries), not a layer input."""
    ad = engine.adapter
    if ad.layer_info(layer).kind == "gdn":
        norm = ad.input_norm(layer)
        (kp, vp), (kt, vt) = ad.gdn_writes(layer, norm(x_pred)), ad.gdn_writes(layer, norm(x_true))
        return (*(torch.nn.functional.cosine_similarity(a.float(), b.float(), dim=-1).mean().item()
                  for a, b in ((kp, kt), (vp, vt))), float("nan"))
    n = x_true.shape[1]
    pos = torch.arange(n, device=x_true.device)[None]
    cos, sin = ad.rope(x_true, pos, layer)
    norm = ad.input_norm(layer)
    kp, vp = (ad.project_entries(layer, x_pred, cos, sin) if kind == "kv"
              else ad.keys_values(layer, norm(x_pred), cos, sin))
    kt, vt = ad.keys_values(layer, norm(x_true), cos, sin)

    def rows(a, b):  # (n,) per-row cosine over every key/value head
        a, b = a.transpose(1, 2).flatten(2).float(), b.transpose(1, 2).flatten(2).float()
        return torch.nn.functional.cosine_similarity(a, b, dim=-1)[0]

    kc = rows(kp, kt)
    m = min(WEIGHT_QUERIES, n)
    q = ad.queries(layer, norm(x_true[:, n - m:]), cos[:, n - m:], sin[:, n - m:]).float()
    keys = kt.float().repeat_interleave(q.shape[1] // kt.shape[1], dim=1)     # GQA groups
    scores = q @ keys.transpose(-1, -2) * ad.scaling(layer)                     # (1, H, m, n)
    causal = torch.arange(n, device=q.device)[None] <= torch.arange(n - m, n, device=q.device)[:, None]
    w = scores.masked_fill(~causal, float("-inf")).softmax(-1).mean(dim=(0, 1, 2))  # (n,)
    return kc.mean().item(), rows(vp, vt).mean().item(), float((w * kc).sum() / w.sum())


WEIGHT_QUERIES = 64  # exact-tail queries whose attention weights the key cosine


def predictions(maps):
    """``predict(layer, x_S) -> what the filled rows write from`` (maps: {layer: (A, b)} of any
    kind, applied in fp32; None: the identity fill, x_S itself)."""
    def predict(layer: int, x_s: torch.Tensor) -> torch.Tensor:
        if maps is None:
            return x_s
        A, b = maps[layer]
        return x_s @ torch.from_numpy(A.astype(np.float32)).T + torch.from_numpy(b.astype(np.float32))
    return predict


def heldout_scores(engine: Engine, captures, split: int, maps, kind: str = "ridge"
                   ) -> dict[int, tuple[float, float, float]]:
    """{layer: (key cosine, value cosine, attention-weighted key cosine)} over the held-out
    captures; maps None = identity. The prediction is made in fp32 and, like the true input,
    fed to the model's own norm and projections at the model's dtype on its device (a bf16
    model on CUDA scores as it runs)."""
    p = next(engine.model.parameters())
    predict = predictions(maps)
    out = {}
    with torch.inference_mode():
        for layer in range(split + 1, engine.adapter.n_layers):
            scores = []
            for xs in captures:
                pred = predict(layer, torch.from_numpy(xs[split])[None])
                x_true = torch.from_numpy(xs[layer])[None].to(p.device, p.dtype)
                scores.append(cache_write_cosine(engine, layer, pred.to(p.device, p.dtype),
                                                 x_true, kind))
            out[layer] = tuple(float(np.mean(c)) for c in zip(*scores))
    return out


def entry_projection(engine: Engine, layer: int) -> tuple[np.ndarray, np.ndarray]:
    """Layer ``layer``'s key and value projections stacked: W (2 m, d), c (2 m,) float64
    (zero where the projection has no bias), m = n_kv * head_dim."""
    attn = engine.adapter.attn(layer)
    W = torch.cat([attn.k_proj.weight, attn.v_proj.weight]).detach().double().cpu().numpy()
    biases = [pr.bias if pr.bias is not None else torch.zeros(pr.weight.shape[0])
              for pr in (attn.k_proj, attn.v_proj)]
    return W, torch.cat([b.detach().double().cpu() for b in biases]).numpy()


def solve_kind(moments: dict, split: int, kind: str, lam: float, engine: Engine) -> dict:
    """{layer: (A, b)} of one kind at penalty ``lam`` from the capture's sums: ridge (paper
    2.2), anchored (rfmath.ridge.solve_anchored_moments) or kv (the ridge map of the normed
    input composed with the layer's K/V projections: rfmath.ridge.compose)."""
    if kind == "ridge":
        return moments[split].solve(lam)
    if kind == "anchored":
        return moments[split].solve_anchored(lam)
    return {l: compose(*entry_projection(engine, l), A, b)
            for l, (A, b) in moments[-1 - split].solve(lam).items()}


def choose(engine: Engine, captures, moments: dict, split: int, kind: str,
           lambdas: tuple[float, ...], progress: bool):
    """The maps of one kind and split with lambda chosen on the held-out captures by the
    cache-write cosine ((keys + values) / 2): one lambda for the split (the paper's ridge),
    one per layer for the other kinds. Returns (maps, lambda or {layer: lambda}, scores
    {lambda: {layer: (k, v, weighted k)}}, {layer: lambda the weighted key cosine picks})."""
    best: dict[int, tuple[float, float, tuple]] = {}
    scores, split_best = {}, None
    for lam in tqdm(lambdas, desc=f"lambda search ({kind}, split {split})", disable=not progress):
        maps = solve_kind(moments, split, kind, lam, engine)
        per_layer = heldout_scores(engine, captures, split, maps, kind)
        scores[lam] = per_layer
        mean = float(np.mean([(k + v) / 2 for k, v, _ in per_layer.values()]))
        if split_best is None or mean > split_best[1]:
            split_best = (lam, mean, maps)
        for l, (k, v, _) in per_layer.items():
            if l not in best or (k + v) / 2 > best[l][1]:
                best[l] = (lam, (k + v) / 2, maps[l])
    by_weighted = {l: max(lambdas, key=lambda lam: scores[lam][l][2]) for l in best}
    if kind == "ridge":
        return split_best[2], split_best[0], scores, by_weighted
    return ({l: m for l, (_, _, m) in best.items()}, {l: lam for l, (lam, _, _) in best.items()},
            scores, by_weighted)
