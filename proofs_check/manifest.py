"""Which Lean theorem states what, and which Python twin and Hypothesis test check it.

Each entry names a main theorem of ``lean/RidgeFill/<family>.lean`` by its full Lean name, the
``rfmath`` function(s) that compute the same quantity, and the property test that checks the
statement numerically (``path::test_name``, relative to the repository root). The theorem's
docstring repeats the twins (``Python:``) and the test (``Test:``); ``proofs_check`` fails if
the two disagree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Theorem:
    """One manifest row: a Lean theorem, its Python twin(s) and its property test."""

    family: str  # module under lean/RidgeFill/, e.g. "StateCorrection"
    name: str  # full Lean name, e.g. "RidgeFill.run_eq_unrolled"
    twins: tuple[str, ...]  # "package.module.function"
    test: str  # "tests/test_x.py::test_name"


_GATING = "tests/test_rfmath_gating.py"
_ATTENTION = "tests/test_rfmath_attention.py"
_COST = "tests/test_rfmath_cost.py"
_STATS = "tests/test_rfmath_stats.py"
_ANCHORED = "tests/test_rfmath_anchored.py"

THEOREMS: tuple[Theorem, ...] = (
    Theorem("StateCorrection", "RidgeFill.run_eq_unrolled",
            ("rfmath.gating.state_weights",),
            f"{_GATING}::test_state_weights_unroll_recurrence"),
    Theorem("StateCorrection", "RidgeFill.corrected_state_eq_exact",
            ("rfmath.gating.corrected_state",),
            f"{_GATING}::test_rho_scaled_correction_cancels_uniform_shift"),
    Theorem("StateCorrection", "RidgeFill.other_scale_leaves_residual",
            ("rfmath.gating.corrected_state",),
            f"{_GATING}::test_other_scale_leaves_residual"),
    Theorem("StateCorrection", "RidgeFill.unscaled_correction_overshoots",
            ("rfmath.gating.corrected_state",),
            f"{_GATING}::test_other_scale_leaves_residual"),
    Theorem("StateCorrection", "RidgeFill.correction_cancels_after_tail",
            ("rfmath.gating.corrected_state",),
            f"{_GATING}::test_rho_scaled_correction_cancels_uniform_shift"),
    Theorem("TailShare", "RidgeFill.filled_share_le_of_exact_tail",
            ("rfmath.gating.tail_share_bound",),
            f"{_GATING}::test_filled_share_behind_tail_within_bound"),
    Theorem("GdnContraction", "RidgeFill.normSq_erase_le",
            ("rfmath.gating.delta_rule_step",),
            f"{_GATING}::test_delta_rule_contraction"),
    Theorem("GdnContraction", "RidgeFill.delta_rule_contraction",
            ("rfmath.gating.delta_rule_step", "rfmath.gating.contraction_factor"),
            f"{_GATING}::test_delta_rule_contraction"),
    Theorem("AttentionInfluence", "RidgeFill.output_value_change",
            ("rfmath.attention.value_change_effect",),
            f"{_ATTENTION}::test_value_change_is_exact"),
    Theorem("AttentionInfluence", "RidgeFill.weight_change_le",
            ("rfmath.attention.weight_change_bound",),
            f"{_ATTENTION}::test_weight_change_le"),
    Theorem("AttentionInfluence", "RidgeFill.output_score_change_le",
            ("rfmath.attention.logit_change_bound",),
            f"{_ATTENTION}::test_logit_change_within_bound"),
    Theorem("CountMatched", "RidgeFill.count_matched_expectation",
            ("rfmath.stats.count_matched_expected",),
            f"{_STATS}::test_count_matched_expectation_is_k_over_n"),
    Theorem("AttentionVector", "RidgeFill.output_score_change_normSq_le",
            ("rfmath.attention.output_change_sq_bound",),
            f"{_ATTENTION}::test_output_score_change_norm_sq_le"),
    Theorem("TopK", "RidgeFill.topk_minimises_unprotected",
            ("rfmath.attention.top_k_rows", "rfmath.attention.unprotected_attention"),
            f"{_ATTENTION}::test_topk_minimises_unprotected"),
    Theorem("CountControl", "RidgeFill.control_size_margin",
            ("rfmath.stats.control_size_term",),
            f"{_STATS}::test_control_size_margin"),
    Theorem("RhoRange", "RidgeFill.rho_mem_unit",
            ("rfmath.gating.filled_share",),
            f"{_GATING}::test_rho_mem_unit"),
    Theorem("BreakEven", "RidgeFill.break_even_iff",
            ("rfmath.cost.break_even_rows",),
            f"{_COST}::test_break_even_iff"),
    Theorem("BreakEven", "RidgeFill.break_even_floor",
            ("rfmath.cost.break_even_rows",),
            f"{_COST}::test_break_even_floor"),
    Theorem("MatrixState", "RidgeFill.matrix_corrected_state_eq_exact",
            ("rfmath.gating.corrected_state",),
            f"{_GATING}::test_matrix_corrected_state_eq_exact"),
    Theorem("MatrixState", "RidgeFill.matrix_correction_cancels_after_tail",
            ("rfmath.gating.corrected_state",),
            f"{_GATING}::test_matrix_correction_cancels_after_tail"),
    Theorem("Anchored", "RidgeFill.anchored_objective_gap",
            ("rfmath.ridge.solve_anchored_moments",),
            f"{_ANCHORED}::test_anchored_objective_gap"),
    Theorem("Anchored", "RidgeFill.anchored_minimises",
            ("rfmath.ridge.solve_anchored_moments",),
            f"{_ANCHORED}::test_anchored_minimises"),
    Theorem("Anchored", "RidgeFill.anchored_le_identity",
            ("rfmath.ridge.solve_anchored_moments",),
            f"{_ANCHORED}::test_anchored_le_identity"),
)
