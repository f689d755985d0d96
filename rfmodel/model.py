"""A tiny layer-by-layer model that runs every RidgeFill arm (paper §2.1-2.4), in one file.

Attention layers follow HF ``LlamaForCausalLM`` / ``Qwen3ForCausalLM`` exactly (RMSNorm,
GQA, RoPE "rotate_half", optional per-head QK RMSNorm applied before RoPE as in Qwen3, SwiGLU
MLP ``down(silu(gate(x)) * up(x))``, no biases, softmax scale ``1/sqrt(head_dim)``), with the
same weight names, so a transformers ``state_dict`` converted to NumPy loads as is.

Gated DeltaNet layers are this project's own simple layer (not Qwen3-Next's: no short
convolution, no output gate/norm, separate projections), under ``model.layers.{i}.linear_attn``::

    q, k, v = h W_q^T, h W_k^T, h W_v^T          per head: q, k L2-normalised (eps 1e-6),
                                                  q divided by sqrt(d_k) (as HF's kernel)
    g    = exp(-softplus(h W_a^T + dt_bias) * exp(A_log))        one gate per head and row
    beta = sigmoid(h W_b^T)
    o    = gated delta rule scan (rfmodel.gdn);   out = o W_o^T

with h the input-normed row. Weights: ``q_proj, k_proj (Hg*d_k, C)``, ``v_proj (Hg*d_v, C)``,
``a_proj, b_proj (Hg, C)``, ``o_proj (C, Hg*d_v)``, ``A_log, dt_bias (Hg,)``.

Arms (§2.1, Table 3), for the late layers ``l >= S`` of the N - T prefix rows:
``exact`` every row runs every layer; ``nofill`` non-exact prefix rows have no entries there
(attention skips them, a GDN scan skips them: no gate, no update); ``identity`` (POP's fill)
``x_hat_l = x_S``; ``ridgefill`` ``x_hat_l = A_l x_S + b_l``. Filled rows run only the cache
writers from x_hat: input norm + K/V projections (+ k_norm, RoPE at their own positions), or
the GDN state update. Exact prefix rows and the tail run everything.
Shapes: ids ``(N,)``; hidden states ``(N, C)``; caches per attention layer K, V
``(Hkv, n, D)`` post-norm post-RoPE with positions ``(n,)``; per GDN layer the state
``(Hg, d_k, d_v)``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

from rfmodel import _validate as _v
from rfmodel.attention import attend, rescale_factors, rms_norm, rope
from rfmodel.attention import splice as _splice
from rfmodel.gdn import gdn_prefill_scan
from rfmodel.maps import apply_map
from rfmodel.selectors import attention_received, probe_rows
from rfmodel.tiny_config import ARMS, AttnCache, Cache, GdnCache, TinyConfig, weight_shapes

__all__ = ["TinyConfig", "TinyModel", "AttnCache", "GdnCache", "Cache", "ARMS"]

def _l2norm(x: np.ndarray) -> np.ndarray:
    return x * (1.0 / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + x.dtype.type(1e-6)))


class TinyModel:
    """Layer-by-layer reference model (module docstring). weights: HF-named arrays; dtype:
    float64 (default) or float32, the dtype of every computation."""

    def __init__(self, config: TinyConfig, weights: dict[str, np.ndarray], *, dtype=np.float64):
        if not isinstance(config, TinyConfig):
            raise ValueError(f"config must be a TinyConfig; got {type(config).__name__}.")
        if dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be np.float32 or np.float64; got {dtype!r}.")
        self.config, self.dtype = config, dtype
        shapes = weight_shapes(config)
        extra = set(weights) - set(shapes) - {"lm_head.weight"}
        extra = {k for k in extra if not k.endswith("rotary_emb.inv_freq")}
        missing = set(shapes) - set(weights)
        if missing or extra:
            raise ValueError(f"weights do not match the config: missing {sorted(missing)[:5]}, "
                             f"unexpected {sorted(extra)[:5]} ({len(weights)} != {len(shapes)} keys).")
        self.w = {}
        for name, shape in shapes.items():
            arr = _v.float_array(np.asarray(weights[name]), name)
            if arr.shape != shape:
                raise ValueError(f"{name} must have shape {shape}; got {arr.shape}.")
            self.w[name] = np.ascontiguousarray(arr, dtype=dtype)
        if config.tie_embeddings:
            self.w["lm_head.weight"] = self.w["model.embed_tokens.weight"]

    @classmethod
    def random(cls, config: TinyConfig, seed: int = 0, *, dtype=np.float64) -> "TinyModel":
        """Seeded random weights (projections ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.1^2))."""
        rng = np.random.default_rng(_v.integer(seed, "seed", minimum=0))
        weights = {}
        for name, shape in weight_shapes(config).items():
            if name.endswith("A_log"):
                weights[name] = np.log(rng.uniform(0.02, 0.6, shape))
            elif name.endswith("dt_bias"):
                weights[name] = rng.normal(0.0, 0.5, shape)
            elif len(shape) == 1:
                weights[name] = 1.0 + 0.1 * rng.standard_normal(shape)
            elif name == "model.embed_tokens.weight":
                weights[name] = rng.standard_normal(shape)
            else:
                weights[name] = rng.standard_normal(shape) / np.sqrt(shape[1])
        return cls(config, weights, dtype=dtype)

    # ------------------------------------------------------------------ layer pieces
    def _p(self, i: int, name: str) -> np.ndarray:
        return self.w[f"model.layers.{i}.{name}"]

    def _norm_in(self, i, x):
        return rms_norm(x, self._p(i, "input_layernorm.weight"), self.config.rms_eps)

    def _mlp_block(self, i, x):
        """``x + down(silu(gate(h)) * up(h))`` with h the post-attention norm of x."""
        h = rms_norm(x, self._p(i, "post_attention_layernorm.weight"), self.config.rms_eps)
        gate = h @ self._p(i, "mlp.gate_proj.weight").T
        up = h @ self._p(i, "mlp.up_proj.weight").T
        return x + ((gate * expit(gate)) * up) @ self._p(i, "mlp.down_proj.weight").T

    def _heads(self, i, h, proj, n_heads, norm, pos):
        """Project normed rows to heads ``(n_heads, n, D)``, optional QK-norm, then RoPE."""
        c = self.config
        x = (h @ self._p(i, f"self_attn.{proj}.weight").T).reshape(h.shape[0], n_heads, c.head_dim)
        if c.qk_norm and norm:
            x = rms_norm(x, self._p(i, f"self_attn.{norm}.weight"), c.rms_eps)
        x = x.transpose(1, 0, 2)  # (heads, n, D)
        return rope(x, pos, c.rope_theta).astype(self.dtype, copy=False) if x.shape[1] else x

    def _kv(self, i, x, pos):
        """Attention cache writer: k, v ``(Hkv, n, D)`` of rows x entering layer i."""
        c = self.config
        h = self._norm_in(i, x)
        k = self._heads(i, h, "k_proj", c.n_kv_heads, "k_norm", pos)
        v = (h @ self._p(i, "self_attn.v_proj.weight").T).reshape(x.shape[0], c.n_kv_heads, c.head_dim)
        return k, v.transpose(1, 0, 2)

    def _gdn_inputs(self, i, x):
        """GDN cache writer inputs q, k ``(Hg, n, d_k)``, v ``(Hg, n, d_v)``, g, beta ``(Hg, n)``."""
        c = self.config
        h = self._norm_in(i, x)
        n, H = x.shape[0], c.gdn_heads
        a = "linear_attn."
        q = _l2norm((h @ self._p(i, a + "q_proj.weight").T).reshape(n, H, c.gdn_k_dim))
        q = q * self.dtype(1.0 / np.sqrt(c.gdn_k_dim))
        k = _l2norm((h @ self._p(i, a + "k_proj.weight").T).reshape(n, H, c.gdn_k_dim))
        v = (h @ self._p(i, a + "v_proj.weight").T).reshape(n, H, c.gdn_v_dim)
        pre = h @ self._p(i, a + "a_proj.weight").T + self._p(i, a + "dt_bias")  # (n, H)
        g = np.exp(-np.logaddexp(0.0, pre) * np.exp(self._p(i, a + "A_log")))
        beta = expit(h @ self._p(i, a + "b_proj.weight").T)
        return (q.transpose(1, 0, 2), k.transpose(1, 0, 2), v.transpose(1, 0, 2),
                np.ascontiguousarray(g.T), np.ascontiguousarray(beta.T))

    # ------------------------------------------------------------------ one layer, mixed rows
    def _attention_layer(self, i, x, pos, fill=None, want_probs=False):
        """Rows x ``(n, C)`` at positions pos run layer i; fill = (k_f, v_f, pos_f) adds filled
        cache rows. Returns (x_out, AttnCache, probs or None)."""
        c = self.config
        k, v = self._kv(i, x, pos)
        q = self._heads(i, self._norm_in(i, x), "q_proj", c.n_heads, "q_norm", pos)
        filled = np.zeros(pos.shape[0], dtype=np.bool_)
        if fill is not None and fill[2].size:
            order = np.argsort(np.concatenate([fill[2], pos]), kind="stable")
            k = np.concatenate([fill[0], k], axis=1)[:, order]
            v = np.concatenate([fill[1], v], axis=1)[:, order]
            filled = np.concatenate([np.ones(fill[2].size, np.bool_), filled])[order]
            cache_pos = np.concatenate([fill[2], pos])[order]
        else:
            cache_pos = pos
        out = attend(q, k, v, pos, cache_pos, return_probs=want_probs)
        out, probs = out if want_probs else (out, None)
        out = out.transpose(1, 0, 2).reshape(x.shape[0], c.n_heads * c.head_dim)  # (n, H*D)
        x = x + out @ self._p(i, "self_attn.o_proj.weight").T
        return self._mlp_block(i, x), AttnCache(k, v, cache_pos, filled), probs

    def _gdn_layer(self, i, x, pos, n_prefix, fill=None, delta_M=None, mode="rho", state0=None):
        """Rows x run GDN layer i; fill = (q, k, v, g, beta, pos_f) of filled rows. The scan runs
        over all rows in position order; delta_M is added (times rho) at the prefix end."""
        c = self.config
        parts = self._gdn_inputs(i, x)
        n_e = pos.shape[0]
        is_exact = np.ones(n_e, dtype=np.bool_)
        all_pos = pos
        if fill is not None and fill[5].size:
            order = np.argsort(np.concatenate([fill[5], pos]), kind="stable")
            parts = tuple(np.concatenate([f, e], axis=1)[:, order] for f, e in zip(fill[:5], parts))
            is_exact = np.concatenate([np.zeros(fill[5].size, np.bool_), is_exact])[order]
            all_pos = np.concatenate([fill[5], pos])[order]
        n_pre = int(np.searchsorted(all_pos, n_prefix))
        out, state, rho = gdn_prefill_scan(*parts, n_pre, ~is_exact[:n_pre], delta_M=delta_M,
                                           correction=mode, state0=state0)
        o = out[:, is_exact].transpose(1, 0, 2).reshape(n_e, c.gdn_heads * c.gdn_v_dim)
        x = x + o @ self._p(i, "linear_attn.o_proj.weight").T
        return self._mlp_block(i, x), GdnCache(state, rho)

    def _logits(self, x):
        h = rms_norm(x, self.w["model.norm.weight"], self.config.rms_eps)
        return h @ self.w["lm_head.weight"].T

    # ------------------------------------------------------------------ checks
    def _ids(self, ids) -> np.ndarray:
        arr = np.asarray(ids)
        if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iu":
            raise ValueError(f"ids must be a non-empty 1-D array of token ids; got {arr.dtype} {arr.shape}.")
        if arr.min() < 0 or arr.max() >= self.config.vocab:
            raise ValueError(f"ids must lie in [0, vocab={self.config.vocab}); got min {arr.min()}, "
                             f"max {arr.max()}.")
        return arr.astype(np.int64)

    def _split(self, S, T, N):
        L = self.config.n_layers
        if L < 2:
            raise ValueError(f"a split needs at least 2 layers; this model has n_layers={L}.")
        s = _v.integer(S, "S", minimum=1, maximum=L - 1)
        return s, _v.integer(T, "T", minimum=1, maximum=N)

    def _maps(self, maps, S):
        late = range(S, self.config.n_layers)
        C = self.config.hidden
        if not isinstance(maps, dict) or not set(late) <= set(maps):
            have = sorted(maps) if isinstance(maps, dict) else maps
            raise ValueError(f"maps must give (A, b) for every late layer {list(late)}; got {have}.")
        out = {}
        for l in late:
            A = _v.float_array(maps[l][0], f"maps[{l}] A", shape=(C, C))
            b = _v.float_array(maps[l][1], f"maps[{l}] b", shape=(C,))
            out[l] = (A.astype(self.dtype), b.astype(self.dtype))
        return out

    # ------------------------------------------------------------------ public passes
    def _exact_layers(self, x, start, stop, want_probs=False, want_hidden=False):
        """Layers start..stop-1 for every row of x ``(N, C)`` (rows at positions 0..N-1):
        (x_stop, caches, {layer: probs}, [x_start+1, ..., x_stop] if want_hidden)."""
        N = x.shape[0]
        pos = np.arange(N)
        caches, probs, hidden = [], {}, []
        for i in range(start, stop):
            if self.config.layer_types[i] == "attention":
                x, cache, p = self._attention_layer(i, x, pos, want_probs=want_probs)
                if want_probs:
                    probs[i] = p
            else:
                x, cache = self._gdn_layer(i, x, pos, N)
            caches.append(cache)
            if want_hidden:
                hidden.append(x)
        return x, caches, probs, hidden

    def _lower(self, ids, stop, want_probs=False, want_hidden=False):
        """Embedding, then layers 0..stop-1 exactly for every row; hidden lists x_0..x_stop."""
        x = self.w["model.embed_tokens.weight"][ids]  # (N, C)
        out, caches, probs, hidden = self._exact_layers(x, 0, stop, want_probs, want_hidden)
        return out, caches, probs, [x] + hidden

    def forward_exact(self, ids, *, return_probs: bool = False):
        """Exact prefill: logits ``(N, vocab)`` and a Cache of every row in every layer; with
        return_probs also ``{attention layer: probs (H, N, N)}``."""
        arr = self._ids(ids)
        x, caches, probs, _ = self._lower(arr, self.config.n_layers, want_probs=return_probs)
        cache = Cache(caches, arr.shape[0])
        logits = self._logits(x)
        return (logits, cache, probs) if return_probs else (logits, cache)

    def capture(self, ids, S: int, layers) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """Exact residual stream entering layer S, ``(N, C)``, and entering each given layer
        (before its input norm): ``(x_S, {l: x_l})`` -- the rows a RidgeMoments update takes."""
        arr = self._ids(ids)
        s, _ = self._split(S, 1, arr.shape[0])
        want = [_v.integer(l, "layers", minimum=s, maximum=self.config.n_layers - 1) for l in layers]
        _, _, _, hidden = self._lower(arr, self.config.n_layers, want_hidden=True)
        return hidden[s], {l: hidden[l] for l in want}

    def lower_attention(self, ids, layers, window: int = 64) -> np.ndarray:
        """Attention received by each row ``(N,)`` from the last ``window`` rows, summed over
        the heads of the given attention layers of an exact pass (the §2.4 reference selector)."""
        arr = self._ids(ids)
        _, _, probs = self.forward_exact(arr, return_probs=True)
        chosen = [probs[l] for l in layers if l in probs]
        if not chosen:
            raise ValueError(f"layers must include an attention layer; got {list(layers)}.")
        return attention_received(chosen, window)

    def prefill(self, ids, arm: str, S: int, T: int, *, exact_rows=(), maps=None, rescale=None,
                c: int | None = None, rescale_mode: str = "mean_ratio", correction=None,
                correction_mode: str = "rho", splice=None):
        """Prefill under one arm: logits of the T tail rows ``(T, vocab)`` and the Cache.

        S in 1..L-1 (layers 0..S-1 run exactly for every row); T in 1..N; exact_rows: prefix
        rows that run every layer; maps ``{l: (A (C, C), b (C,))}`` for every late layer
        (ridgefill); rescale None | "values" | "keys" measured on the first c tail rows
        (default ``min(512, T)``, the paper's c; rfmodel.attention.rescale_factors with
        rescale_mode); correction ``{gdn layer: delta_M}``
        added at the end of the prefix times rho (correction_mode "rho") or unscaled;
        splice None | "keys" | "values" | "both" replaces filled K/V by exact ones.
        """
        arr = self._ids(ids)
        N = arr.shape[0]
        s, t = self._split(S, T, N)
        _v.choice(arm, "arm", ARMS)
        n_p = N - t
        exact = _v.index_array(exact_rows, "exact_rows", n=max(n_p, 1)) if n_p else np.zeros(0, np.int64)
        _v.choice(rescale, "rescale", (None, "values", "keys"))
        _v.choice(splice, "splice", (None, "keys", "values", "both"))
        _v.choice(correction_mode, "correction_mode", ("rho", "unscaled"))
        fill_arm = arm in ("identity", "ridgefill")
        if (rescale or splice) and not fill_arm:
            raise ValueError(f"rescale and splice act on filled rows; arm={arm!r} has none. "
                             "Use arm='identity' or 'ridgefill'.")
        cc = (min(512, t) if c is None else _v.integer(c, "c", minimum=1, maximum=t)) if rescale else 0
        mp = self._maps(maps, s) if arm == "ridgefill" else None
        corr = self._corrections(correction, s)
        x_s, caches, _, _ = self._lower(arr, s)
        if arm == "exact":
            x, late, _, _ = self._exact_layers(x_s, s, self.config.n_layers)
            # logits of every row, then the tail: the same matmul shape as forward_exact
            info = {"exact_rows": np.arange(N), "filled_rows": np.zeros(0, np.int64), "x_split": x_s}
            return self._logits(x)[n_p:], Cache(caches + late, N, info)
        return self._late(arr, x_s, caches, s, t, exact, arm, mp, rescale, cc, rescale_mode,
                          corr, correction_mode, splice)

    def _corrections(self, correction, s):
        if correction is None:
            return {}
        c = self.config
        if not isinstance(correction, dict):
            raise ValueError(f"correction must be a dict {{gdn layer: delta_M}}; got {type(correction).__name__}.")
        out = {}
        for l, d in correction.items():
            if not (isinstance(l, (int, np.integer)) and s <= l < c.n_layers and c.layer_types[l] == "gdn"):
                raise ValueError(f"correction layer {l!r} must be a GDN layer >= S={s}.")
            out[int(l)] = _v.float_array(d, f"correction[{l}]",
                                         shape=(c.gdn_heads, c.gdn_k_dim, c.gdn_v_dim))
        return out

    def _late(self, ids, x_s, caches, s, t, exact, arm, mp, rescale, cc, rescale_mode, corr,
              corr_mode, splice):
        N = ids.shape[0]
        n_p = N - t
        rows_e = np.union1d(exact, np.arange(n_p, N)).astype(np.int64)  # exact prefix rows + tail
        rows_f = np.setdiff1d(np.arange(n_p), exact).astype(np.int64)
        if arm == "nofill":
            rows_f = rows_f[:0]
        exact_cache = self.forward_exact(ids)[1] if splice else None
        x = x_s[rows_e]
        tail_c = np.arange(n_p, n_p + cc)
        late = []
        for i in range(s, self.config.n_layers):
            # predicted inputs of the filled rows: A_l x_S + b_l (ridgefill) or x_S (identity)
            x_hat = apply_map(x_s[rows_f], *mp[i]) if arm == "ridgefill" else x_s[rows_f]
            x_hat = x_hat.astype(self.dtype, copy=False)
            if self.config.layer_types[i] == "attention":
                k_f, v_f = self._kv(i, x_hat, rows_f)
                if rescale and rows_f.size:
                    x_hat_c = x_s[tail_c] if arm == "identity" else apply_map(x_s[tail_c], *mp[i])
                    k_p, v_p = self._kv(i, x_hat_c.astype(self.dtype, copy=False), tail_c)
                    k_x, v_x = self._kv(i, x[np.searchsorted(rows_e, tail_c)], tail_c)
                    if rescale == "values":
                        v_f = v_f * rescale_factors(v_x, v_p, rescale_mode).astype(self.dtype)[:, None, None]
                    else:
                        k_f = k_f * rescale_factors(k_x, k_p, rescale_mode).astype(self.dtype)[:, None, None]
                if splice and rows_f.size:
                    ex = exact_cache.layers[i]
                    k_f, v_f = _splice(k_f, v_f, ex.k[:, rows_f], ex.v[:, rows_f], splice)
                x, cache, _ = self._attention_layer(i, x, rows_e, fill=(k_f, v_f, rows_f))
            else:
                fill = (*self._gdn_inputs(i, x_hat), rows_f) if rows_f.size else None
                x, cache = self._gdn_layer(i, x, rows_e, n_p, fill, corr.get(i), corr_mode)
            late.append(cache)
        info = {"exact_rows": rows_e, "filled_rows": rows_f, "x_split": x_s}
        return self._logits(x)[-t:], Cache(caches + late, N, info)

    def decode_step(self, token: int, cache: Cache) -> np.ndarray:
        """One generated token through every layer (full depth) over ``cache``, which is
        extended in place. Returns its logits ``(vocab,)``."""
        if not isinstance(cache, Cache) or len(cache.layers) != self.config.n_layers:
            raise ValueError("cache must be a Cache from prefill/forward_exact of this model.")
        tok = self._ids(np.array([token]))
        pos = np.array([cache.length])
        x = self.w["model.embed_tokens.weight"][tok]
        for i, layer in enumerate(cache.layers):
            if self.config.layer_types[i] == "attention":
                x, new, _ = self._attention_layer(i, x, pos, fill=(layer.k, layer.v, layer.pos))
                cache.layers[i] = AttnCache(new.k, new.v, new.pos,
                                            np.concatenate([layer.filled, [False]]))
            else:
                x, new = self._gdn_layer(i, x, pos, 0, state0=layer.state)
                cache.layers[i] = GdnCache(new.state, layer.rho)
        cache.length += 1
        return self._logits(x)[0]

    def probe_prefill(self, ids, S: int, T: int, maps, *, E: int, window: int = 256,
                      reserved=(), special=(), **prefill_kwargs):
        """Two-sweep prefill (§2.4, Fig. 5). Sweep 1: lower layers for every row, filled late
        attention K/V for the prefix from the maps. Probe: the last ``window`` rows run the
        exact late layers over that filled cache (GDN layers from an empty state); prefix rows
        are ranked by the attention they receive, summed over late attention layers, heads and
        probe rows. The probe keeps E rows (``reserved`` lexical-net rows inside E), plus
        ``special`` rows on top. Sweep 2: ridgefill with those rows exact.
        Returns ``(logits (T, vocab), cache, info)`` with info rows, received, E."""
        arr = self._ids(ids)
        N = arr.shape[0]
        s, t = self._split(S, T, N)
        n_p = N - t
        mp = self._maps(maps, s)
        w = _v.integer(window, "window", minimum=1)
        x_s, caches, _, _ = self._lower(arr, s)
        probe = np.arange(max(N - w, 0), N)
        rows_f = np.arange(0, min(n_p, probe[0]))
        x = x_s[probe]
        received = np.zeros(N)
        for i in range(s, self.config.n_layers):
            if self.config.layer_types[i] == "attention":
                k_f, v_f = self._kv(i, apply_map(x_s[rows_f], *mp[i]).astype(self.dtype), rows_f)
                x, cache, probs = self._attention_layer(i, x, probe, fill=(k_f, v_f, rows_f), want_probs=True)
                received[cache.pos] += probs.sum(axis=(0, 1))
            else:
                x, _ = self._gdn_layer(i, x, probe, int(probe[0]))  # empty state, probe rows only
        e = _v.integer(E, "E", minimum=0, maximum=n_p)
        chosen = probe_rows(received[:n_p], n_p, e, reserved)
        sp = _v.index_array(special, "special", n=max(n_p, 1)) if n_p else np.zeros(0, np.int64)
        rows = np.union1d(chosen, sp).astype(np.int64)
        logits, cache = self.prefill(arr, "ridgefill", s, t, exact_rows=rows, maps=maps, **prefill_kwargs)
        cache.info.update({"probe_rows": chosen, "received": received, "E": e})
        return logits, cache, {"rows": rows, "received": received, "E": e}
