"""Compute model: the layer-pass ceiling r, multiply-accumulate counts, the exact-row cost line.

Twins of §2.5 ("Compute": ``r = (S(N-T) + L T) / (L N)`` and the multiply-accumulate model
that charges attention over the context and the maps) and Appendix H ("Exact rows and the
cost model": ``tau(E) = tau0 + E sigma`` and the break-even number of exact rows).

Notation (§2.1): L layers, split S (layers 0..S-1 run exactly for every row), N prompt
tokens (rows), tail T (the last T rows run every layer), E exact prefix rows in the late
layers. ``Arch`` describes a decoder stack; ``macs`` counts one prefill.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from rfmath import _validate as _v

__all__ = [
    "Arch",
    "LAYER_TYPES",
    "ARMS",
    "exact_share",
    "macs",
    "speedup_ceiling",
    "exact_row_cost",
    "break_even_rows",
]

LAYER_TYPES: tuple[str, ...] = ("attention", "sliding", "gdn")
ARMS: tuple[str, ...] = ("exact", "ridgefill", "identity", "nofill", "kv")


def exact_share(S: int, L: int, T: int, N: int) -> float:
    """Layer-pass share of exact prefill that remains, ``r = (S(N-T') + L T') / (L N)`` (§2.5).

    T' = min(T, N), so a tail covering the whole prompt gives r = 1. Assumes every layer costs
    the same per row and the maps are free; the speedup is at most 1/r. Ints S in [0, L],
    L >= 1, T >= 0, N >= 1. Returns a float in [0, 1] (0 only when S = T = 0).
    """
    L_ = _v.integer(L, "L", minimum=1)
    S_ = _v.integer(S, "S", minimum=0)
    if S_ > L_:
        raise ValueError(f"S must be a layer index in [0, L]; got S={S_} with L={L_}.")
    T_ = _v.integer(T, "T", minimum=0)
    N_ = _v.integer(N, "N", minimum=1)
    tail = min(T_, N_)
    return (S_ * (N_ - tail) + L_ * tail) / (L_ * N_)


@dataclass(frozen=True)
class Arch:
    """A decoder stack for the multiply-accumulate model of §2.5.

    Attention layers ("attention", or "sliding" with ``sliding_window``) use n_heads query
    heads and n_kv_heads key/value heads of size head_dim; "gdn" layers (Gated DeltaNet) use
    gdn_k_heads key/query heads of size gdn_k_dim and gdn_v_heads value heads of size
    gdn_v_dim. Every layer has a GLU MLP of width d_ff. ``layer_types=None`` means every layer
    is "attention". vocab=0 skips the logits. The constructor validates every field.
    """

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab: int = 0
    layer_types: tuple[str, ...] | None = None
    sliding_window: int | None = None
    gdn_k_heads: int = 0
    gdn_v_heads: int = 0
    gdn_k_dim: int = 0
    gdn_v_dim: int = 0

    def __post_init__(self) -> None:
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff"):
            _v.integer(getattr(self, name), name, minimum=1)
        for name in ("vocab", "gdn_k_heads", "gdn_v_heads", "gdn_k_dim", "gdn_v_dim"):
            _v.integer(getattr(self, name), name, minimum=0)
        if self.n_kv_heads > self.n_heads:
            raise ValueError(
                f"n_kv_heads must be <= n_heads; got {self.n_kv_heads} > {self.n_heads}."
            )
        if self.layer_types is not None:
            if isinstance(self.layer_types, str):
                raise ValueError(
                    f"layer_types must be a sequence with one type per layer, not a string; got "
                    f"{self.layer_types!r}. Use ({self.layer_types!r},) * n_layers."
                )
            kinds = tuple(self.layer_types)
            object.__setattr__(self, "layer_types", kinds)  # accept any sequence, store a tuple
            if len(kinds) != self.n_layers:
                raise ValueError(
                    f"layer_types must have one entry per layer; got {len(kinds)} != "
                    f"n_layers={self.n_layers}."
                )
            bad = sorted({k for k in kinds if k not in LAYER_TYPES})
            if bad:
                raise ValueError(f"layer_types entries must be in {LAYER_TYPES}; got {bad}.")
        kinds = self.kinds
        if "sliding" in kinds:
            if self.sliding_window is None:
                raise ValueError(
                    'sliding_window is required when layer_types holds "sliding"; '
                    "pass the window length in tokens."
                )
            _v.integer(self.sliding_window, "sliding_window", minimum=1)
        elif self.sliding_window is not None:
            _v.integer(self.sliding_window, "sliding_window", minimum=1)
        if "gdn" in kinds:
            for name in ("gdn_k_heads", "gdn_v_heads", "gdn_k_dim", "gdn_v_dim"):
                if getattr(self, name) < 1:
                    raise ValueError(
                        f'{name} must be >= 1 when layer_types holds "gdn"; got '
                        f"{getattr(self, name)}."
                    )

    @property
    def kinds(self) -> tuple[str, ...]:
        """The layer types, one per layer ("attention" everywhere when layer_types is None)."""
        return self.layer_types if self.layer_types is not None else ("attention",) * self.n_layers

    # Per-row multiply-accumulates of one layer, without attention over the context.
    def _mlp(self) -> int:
        return 3 * self.d_model * self.d_ff  # GLU: gate, up, down

    def _attn_dense(self) -> int:
        d, q, kv = self.d_model, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        return d * q + 2 * d * kv + q * d + self._mlp()  # Q, K, V, O projections + MLP

    def _attn_fill(self) -> int:
        return 2 * self.d_model * self.n_kv_heads * self.head_dim  # K and V projections

    def _gdn_state(self) -> int:
        return self.gdn_v_heads * self.gdn_k_dim * self.gdn_v_dim  # one pass over the state

    def _gdn_exact(self) -> int:
        d = self.d_model
        qk = self.gdn_k_heads * self.gdn_k_dim  # width of q and of k
        vz = self.gdn_v_heads * self.gdn_v_dim  # width of v and of the output gate z
        proj = d * (2 * qk + 2 * vz + 2 * self.gdn_v_heads)  # q, k, v, z, beta, gate
        return proj + vz * d + 3 * self._gdn_state() + self._mlp()  # + out proj, update + read

    def _gdn_fill(self) -> int:
        d = self.d_model
        k, v = self.gdn_k_heads * self.gdn_k_dim, self.gdn_v_heads * self.gdn_v_dim
        proj = d * (k + v + 2 * self.gdn_v_heads)  # k, v, beta, gate
        return proj + 2 * self._gdn_state()  # + the state update (erase read, rank-one write)


def _context_sum(lo: int, hi: int, window: int | None) -> int:
    """Sum over positions p in [lo, hi) of the keys row p attends to: min(p + 1, window)."""

    def prefix(n: int) -> int:  # sum over p in [0, n)
        if window is None or n <= window:
            return n * (n + 1) // 2
        return window * (window + 1) // 2 + (n - window) * window

    return prefix(hi) - prefix(lo)


def macs(
    arch: Arch,
    N: int,
    *,
    S: int | None = None,
    T: int = 0,
    E: int = 0,
    arm: str = "exact",
    map_in: int | None = None,
    logit_rows: int = 1,
) -> float:
    """Multiply-accumulates of a prefill of N tokens under one arm (§2.5, Figure 7).

    Rows are positions p = 0..N-1; the tail is the last T' = min(T, N) rows, the prefix the
    first P = N - T'. Layers below S run exactly for every row in every arm. A row that runs a
    layer exactly costs, per layer:

    - attention / sliding: Q, K, V, O projections ``d*(H*D) + 2*d*(Hkv*D) + (H*D)*d``, plus
      ``QK^T`` and ``AV`` over its context, ``2*H*D*c`` with c = p + 1 keys (min(p + 1, window)
      on sliding layers);
    - gdn: input projections (q, k of gdn_k_heads*gdn_k_dim; v, z of gdn_v_heads*gdn_v_dim;
      beta and gate, one per value head), the output projection, and three passes over each
      value head's ``k_dim x v_dim`` state (the erase read ``k^T S``, the rank-one write and
      the output read ``q^T S``);
    - every layer: a GLU MLP, ``3*d*d_ff``.

    In the late layers (S and up), by arm:

    - "exact": every row runs every layer (S, T, E are ignored);
    - "ridgefill": the tail and E exact prefix rows run exactly; each filled row (P - E of
      them) costs the map, ``map_in*d`` (map_in defaults to d), plus the K and V projections
      of an attention layer, or a gdn layer's k, v, beta and gate projections and its state
      update (two passes);
    - "identity": as "ridgefill" without the map;
    - "kv" (the direct cache-entry maps, beyond the paper): each filled row of an attention
      layer costs only its map, ``d*2*Hkv*D``, which replaces the K and V projections: exactly
      the identity fill's price (so the ceiling is POP's at the same split). Attention layers
      only (a gdn layer has no direct map: ValueError). Keys and values from two fills cost
      the keys' source for K plus the values' source for V: "ridgefill" when either reads an
      input map (anchored maps cost what ridge maps cost), else "identity";
    - "nofill": filled rows cost nothing; the late layers run only over the E + T' exact rows,
      as if those rows were the whole sequence (each attends only to the exact rows before it).

    The E exact prefix rows are charged the mean attention context of a prefix row, the
    expected cost when they are spread uniformly over the prefix, so the count can be
    fractional. Logits cost ``vocab*d`` for each of ``logit_rows`` rows. Norms, rotary
    embeddings, the gdn short convolution, softmax and other elementwise work are not counted.
    Returns a float.
    """
    if not isinstance(arch, Arch):
        raise ValueError(f"arch must be an rfmath.cost.Arch; got {type(arch).__name__}.")
    arm_ = _v.choice(arm, "arm", ARMS)
    N_ = _v.integer(N, "N", minimum=1)
    L = arch.n_layers
    rows = _v.integer(logit_rows, "logit_rows", minimum=0)
    if rows > N_:
        raise ValueError(f"logit_rows must be <= N={N_}; got {rows}.")
    d = arch.d_model
    m_in = d if map_in is None else _v.integer(map_in, "map_in", minimum=1)
    if arm_ == "exact":
        S_, tail, E_ = L, N_, 0
    else:
        if S is None:
            raise ValueError(
                f'S is required for arm="{arm_}"; pass the split layer, 0 <= S <= L={L}.'
            )
        S_ = _v.integer(S, "S", minimum=0)
        if S_ > L:
            raise ValueError(f"S must be a layer index in [0, L]; got S={S_} with L={L}.")
        tail = min(_v.integer(T, "T", minimum=0), N_)
        E_ = _v.integer(E, "E", minimum=0)
        if E_ > N_ - tail:
            raise ValueError(
                f"E must be <= the prefix length N - min(T, N) = {N_ - tail}; got E={E_}."
            )
    if arm_ == "kv" and "gdn" in arch.kinds[S_:]:
        raise ValueError('arm="kv" maps attention cache entries; this architecture has gdn '
                         f"layers at or above S={S_}. Use arm=\"ridgefill\".")
    prefix = N_ - tail
    filled = prefix - E_
    attn_per_key = 2 * arch.n_heads * arch.head_dim  # QK^T and AV per (query, key) pair
    total = float(arch.vocab * d * rows)
    for layer, kind in enumerate(arch.kinds):
        window = arch.sliding_window if kind == "sliding" else None
        if kind == "gdn":
            dense, fill = arch._gdn_exact(), arch._gdn_fill()
        else:
            dense, fill = arch._attn_dense(), arch._attn_fill()
        if layer < S_:  # every row runs the layer exactly
            total += N_ * dense
            if kind != "gdn":
                total += attn_per_key * _context_sum(0, N_, window)
            continue
        if arm_ == "nofill":  # only the E + T' exact rows, as a shorter sequence
            total += (E_ + tail) * dense
            if kind != "gdn":
                total += attn_per_key * _context_sum(0, E_ + tail, window)
            continue
        total += (tail + E_) * dense
        if kind != "gdn":
            total += attn_per_key * _context_sum(prefix, N_, window)
            if E_:
                total += attn_per_key * E_ * _context_sum(0, prefix, window) / prefix
        total += filled * (fill + (m_in * d if arm_ == "ridgefill" else 0))
    return total


def speedup_ceiling(
    arch: Arch,
    N: int,
    S: int,
    T: int,
    E: int = 0,
    arm: str = "ridgefill",
    *,
    map_in: int | None = None,
    logit_rows: int = 1,
) -> float:
    """Speedup allowed if time were proportional to multiply-accumulates (§2.5, Figure 10b):
    ``macs(exact) / macs(arm)``. Arguments as in ``macs``. Returns a float (inf when the arm
    costs nothing: "nofill" with S = T = E = 0 and no logits).
    """
    reduced = macs(arch, N, S=S, T=T, E=E, arm=arm, map_in=map_in, logit_rows=logit_rows)
    exact = macs(arch, N, arm="exact", logit_rows=logit_rows)
    return exact / reduced if reduced > 0.0 else math.inf  # nofill, S = T = 0, no logits


def exact_row_cost(tau0: float, tau_E1: float, E1: int) -> float:
    """Time one exact prefix row adds, ``sigma = (tau(E1) - tau0) / E1`` (Appendix H).

    tau0: prefill time with no exact rows; tau_E1: time with E1 >= 1 exact rows. Returns a
    float (negative if the measurements contradict the model).
    """
    t0 = _v.finite_scalar(tau0, "tau0")
    t1 = _v.finite_scalar(tau_E1, "tau_E1")
    e1 = _v.integer(E1, "E1", minimum=1)
    return (t1 - t0) / e1


def break_even_rows(tau_exact: float, tau0: float, sigma: float) -> int:
    """Most exact prefix rows E with ``tau0 + E*sigma <= tau_exact`` (Appendix H), i.e.
    ``floor((tau_exact - tau0) / sigma)``.

    sigma > 0 is the time per exact row. The ratio is taken in exact rational arithmetic on
    the given floats, so the result never disagrees with the inequality through rounding.
    Returns an int; a negative value means RidgeFill is slower than exact even with no exact
    rows.
    """
    te = _v.finite_scalar(tau_exact, "tau_exact")
    t0 = _v.finite_scalar(tau0, "tau0")
    sg = _v.finite_scalar(sigma, "sigma")
    if sg <= 0.0:
        raise ValueError(
            f"sigma must be > 0 (each exact row adds time); got {sg}. Measure tau(E1) > tau0 "
            "with exact_row_cost."
        )
    # Exact rational arithmetic on the given floats: no rounding at the boundary.
    return math.floor((Fraction(te) - Fraction(t0)) / Fraction(sg))
