/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill
import Init.Data.Rat.Lemmas

/-!
# Every main theorem, applied once over core's `Rat`

This module makes core's `Rat` an instance of `RidgeFill.OrderedField` (each law is a lemma of
core's `Init.Data.Rat.Lemmas`) and instantiates every `RidgeFill.nv_` theorem of
`RidgeFill/NonVacuous.lean` with it: each main theorem applied once to concrete rational inputs,
every hypothesis discharged. That shows that the class's laws have a model, and that no main
theorem is vacuous there.

No concrete check here computes with `Rat.add`, `Rat.mul` or `Rat.inv` (irreducible in current
core, so `decide` on them gets stuck) and nothing uses `decide` on them or `native_decide`: the
concrete facts are proved once, over any ordered field, by rewriting with the package's lemmas
(`NonVacuous`), and only instantiated here. The instance's proofs use core's `Rat` lemmas; its one
`decide` compares the integer numerators of the literals `0` and `1`.

Nothing imports this module, and it is not a default target: `lake build` does not build it;
`lake build RatCheck` does. It needs a core library with `Rat` (the pinned toolchain); the 2021
toolchain that `proofs_check` uses where Lake is missing has none, so there it is reported
"not built here". It lives outside namespace `RidgeFill`, so the package's scoped numeral
instances are not active here and `(2 : Rat)` is core's literal.
-/

namespace RatCheck

instance instOrderedFieldRat : RidgeFill.OrderedField Rat where
  toAdd := inferInstance
  toMul := inferInstance
  toNeg := inferInstance
  toSub := inferInstance
  toLE := inferInstance
  toLT := inferInstance
  zero := 0
  one := 1
  inv := fun a => a⁻¹
  abs := fun a => if 0 ≤ a then a else -a
  add_assoc := Rat.add_assoc
  add_comm := Rat.add_comm
  zero_add := Rat.zero_add
  add_neg := Rat.add_neg_cancel
  mul_assoc := Rat.mul_assoc
  mul_comm := Rat.mul_comm
  one_mul := Rat.one_mul
  mul_add := Rat.mul_add
  sub_eq := Rat.sub_eq_add_neg
  mul_inv := fun a h => Rat.mul_inv_cancel a h
  zero_ne_one := fun h => absurd (congrArg Rat.num h) (by decide)
  le_refl := fun _ => Rat.le_refl
  le_trans := fun _ _ _ => Rat.le_trans
  le_antisymm := fun _ _ => Rat.le_antisymm
  le_total := fun _ _ => Rat.le_total
  lt_iff := fun _ _ =>
    ⟨fun h => ⟨Rat.le_of_lt h, Rat.not_le.mpr h⟩, fun h => Rat.not_le.mp h.2⟩
  add_le_add_left := fun _ _ _ h => Rat.add_le_add_left.mpr h
  mul_nonneg := fun _ _ => Rat.mul_nonneg
  abs_of_nonneg := fun _ h => if_pos h
  abs_of_nonpos := fun a h => by
    show (if 0 ≤ a then a else -a) = -a
    by_cases h0 : 0 ≤ a
    · rw [if_pos h0]
      have e : a = 0 := Rat.le_antisymm h h0
      have n0 : -(0 : Rat) = 0 := by
        have h3 := Rat.add_neg_cancel (0 : Rat)
        rw [Rat.zero_add] at h3
        exact h3
      rw [e, n0]
    · rw [if_neg h0]

/-! ## StateCorrection and RhoRange: a filled row and an exact row, both with gate 1 -/

example := @RidgeFill.nv_run_eq_unrolled Rat instOrderedFieldRat
example := @RidgeFill.nv_corrected_state_eq_exact Rat instOrderedFieldRat
example := @RidgeFill.nv_other_scale_leaves_residual Rat instOrderedFieldRat
example := @RidgeFill.nv_unscaled_correction_overshoots Rat instOrderedFieldRat
example := @RidgeFill.nv_correction_cancels_after_tail Rat instOrderedFieldRat
example := @RidgeFill.nv_rho_mem_unit Rat instOrderedFieldRat

/-! ## TailShare, GdnContraction -/

example := @RidgeFill.nv_filled_share_le_of_exact_tail Rat instOrderedFieldRat
example := @RidgeFill.nv_normSq_erase_le Rat instOrderedFieldRat
example := @RidgeFill.nv_delta_rule_contraction Rat instOrderedFieldRat

/-! ## AttentionInfluence, AttentionVector, TopK -/

example := @RidgeFill.nv_output_value_change Rat instOrderedFieldRat
example := @RidgeFill.nv_weight_change_le Rat instOrderedFieldRat
example := @RidgeFill.nv_output_score_change_le Rat instOrderedFieldRat
example := @RidgeFill.nv_output_score_change_normSq_le Rat instOrderedFieldRat
example := @RidgeFill.nv_topk_minimises_unprotected Rat instOrderedFieldRat

/-! ## CountMatched, CountControl, BreakEven, MatrixState -/

example := @RidgeFill.nv_count_matched_expectation Rat instOrderedFieldRat
example := @RidgeFill.nv_control_size_margin Rat instOrderedFieldRat
example := @RidgeFill.nv_break_even_iff Rat instOrderedFieldRat
example := @RidgeFill.nv_break_even_floor Rat instOrderedFieldRat
example := @RidgeFill.nv_matrix_corrected_state_eq_exact Rat instOrderedFieldRat
example := @RidgeFill.nv_matrix_correction_cancels_after_tail Rat instOrderedFieldRat

/-! ## Anchored -/

example := @RidgeFill.nv_anchored_objective_gap Rat instOrderedFieldRat
example := @RidgeFill.nv_anchored_minimises Rat instOrderedFieldRat
example := @RidgeFill.nv_anchored_le_identity Rat instOrderedFieldRat

/-- Core's `(2 : Rat)` is not captured by the package's numerals: it is core's literal, whose
numerator is `2` by `rfl` (no arithmetic is evaluated). -/
example : (2 : Rat).num = 2 := rfl

end RatCheck
