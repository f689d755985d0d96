/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill
import Init.Data.Rat.Lemmas

/-!
# Every main theorem, applied once over core's `Rat`

This module instantiates `RidgeFill.OrderedField` with core's `Rat` and applies each main
theorem of the five families to small concrete inputs, discharging every hypothesis by
computation (`decide`). It shows that the hypotheses can all hold at once, i.e. that no theorem
is vacuous, and that the class's laws are satisfied by a real field.

Nothing imports this module. It needs a toolchain whose core library has `Rat` (Lean 4.2x and
later); the 2021 toolchain used by `proofs_check` on machines without `lake` has no `Rat`, so
there it is reported "not built here".
-/

namespace RidgeFill.RatCheck

open RidgeFill

instance instOrderedFieldRat : OrderedField Rat where
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
  zero_ne_one := by decide
  le_refl := fun _ => Rat.le_refl
  le_trans := fun _ _ _ => Rat.le_trans
  le_antisymm := fun _ _ => Rat.le_antisymm
  le_total := fun _ _ => Rat.le_total
  lt_iff := fun _ _ =>
    ⟨fun h => ⟨Rat.le_of_lt h, Rat.not_le.mpr h⟩, fun h => Rat.not_le.mp h.2⟩
  add_le_add_left := fun _ _ _ h => Rat.add_le_add_left.mpr h
  mul_nonneg := fun _ _ => Rat.mul_nonneg
  abs_of_nonneg := fun a h => if_pos h
  abs_of_nonpos := fun a h => by
    show (if 0 ≤ a then a else -a) = -a
    by_cases h0 : 0 ≤ a
    · have e : a = 0 := Rat.le_antisymm h h0
      subst e
      decide
    · rw [if_neg h0]

/-! ## StateCorrection: a filled row of update 3 and an exact row, both with gate 1/2 -/

def demoRows : List (Row Rat) := [⟨1/2, 3, true⟩, ⟨1/2, 1, false⟩]

theorem demo_total_ne_zero : totalWeight demoRows ≠ 0 := by decide
theorem demo_one_ne_rho : (1 : Rat) ≠ rho demoRows := by decide

example : run 0 demoRows = 0 * gateProd demoRows + weightedSum demoRows :=
  run_eq_unrolled 0 demoRows
example : run 0 (fillShift 1 demoRows) + rho demoRows * deltaM 1 demoRows = run 0 demoRows :=
  corrected_state_eq_exact 1 0 demoRows demo_total_ne_zero
example : run 0 (fillShift 1 demoRows) + 1 * deltaM 1 demoRows ≠ run 0 demoRows :=
  other_scale_leaves_residual 1 0 1 demoRows demo_total_ne_zero (by decide) demo_one_ne_rho
example := unscaled_correction_overshoots 1 0 demoRows demo_total_ne_zero
example := correction_cancels_after_tail 1 0 demoRows demoRows demo_total_ne_zero

/-! ## TailShare: one filled row behind one exact row, gates 1/2 -/

def demoPre : List (Row Rat) := [⟨1/2, 1, true⟩]
def demoTail : List (Row Rat) := [⟨1/2, 1, false⟩]

theorem demo_gates : allOf (gateIn (1/2 : Rat)) (demoPre ++ demoTail) :=
  And.intro (And.intro (by decide) (by decide))
    (And.intro (And.intro (by decide) (by decide)) True.intro)
theorem demo_tail_exact : allOf isExact demoTail := And.intro rfl True.intro

example : rho (demoPre ++ demoTail) ≤ npow (1/2 : Rat) (len demoTail) * inv (1 - 1/2) :=
  filled_share_le_of_exact_tail (1/2) demoPre demoTail (by decide) demo_gates demo_tail_exact

/-! ## GdnContraction: one key coordinate, unit key, gate 1/2, β = 1 -/

def demoInput : DeltaInput Rat := ⟨1/2, 1, fun _ => 1, fun _ => 3⟩

theorem demo_key_unit : normSq 1 demoInput.key = 1 := by decide
theorem demo_valid : validInput (1/2 : Rat) 1 demoInput :=
  And.intro (by decide) (And.intro (by decide) (And.intro (by decide)
    (And.intro (by decide) demo_key_unit)))

example := normSq_erase_le 1 (1 : Rat) demoInput.key (fun _ => 5) demo_key_unit (by decide)
  (by decide)
example := delta_rule_contraction (1/2 : Rat) 1 1 (fun _ _ => 5) (fun _ _ => -1) [demoInput]
  (And.intro demo_valid True.intro)

/-! ## AttentionInfluence: row `j` (score 1, value 1) before one row (score 1, value 2) -/

def demoPost : List (AttnRow Rat) := [⟨1, 2⟩]

theorem demo_post_pos : allOf scorePos demoPost :=
  And.intro (show (0 : Rat) < (AttnRow.mk (1 : Rat) 2).score by decide) True.intro
theorem demo_post_values : allOf (valueLe (2 : Rat)) demoPost :=
  And.intro (show abs (AttnRow.mk (1 : Rat) 2).value ≤ (2 : Rat) by decide) True.intro

example := output_value_change [] demoPost (1 : Rat) 1 (1/4)
example := weight_change_le [] demoPost (1 : Rat) 1 2 2 True.intro demo_post_pos (by decide)
  (by decide) (by decide) (by decide)
example := output_score_change_le [] demoPost (1 : Rat) 1 2 2 2 True.intro demo_post_pos
  True.intro demo_post_values (by decide) (by decide) (by decide) (by decide) (by decide)

/-! ## CountMatched: 2 of the 3 rows with benefits 1, 2, 3 -/

example : averageBenefit 2 [(1 : Rat), 2, 3] =
    natCast 2 * inv (natCast (len [(1 : Rat), 2, 3])) * total [(1 : Rat), 2, 3] :=
  count_matched_expectation 2 1 [(1 : Rat), 2, 3] rfl

end RidgeFill.RatCheck
