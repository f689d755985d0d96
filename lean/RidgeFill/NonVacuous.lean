/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.StateCorrection
import RidgeFill.TailShare
import RidgeFill.GdnContraction
import RidgeFill.AttentionInfluence
import RidgeFill.CountMatched
import RidgeFill.AttentionVector
import RidgeFill.TopK
import RidgeFill.CountControl
import RidgeFill.RhoRange
import RidgeFill.BreakEven
import RidgeFill.MatrixState
import RidgeFill.Anchored

/-!
# Every main theorem, applied once to concrete inputs

No main theorem is vacuous: each `nv_` theorem below applies one of them to concrete inputs
built from `0`, `1` and `2` over any ordered field and discharges every hypothesis. The proofs
use only this package's lemmas and `rfl` equation lemmas (rewriting), never `decide`, so they
hold in every `OrderedField`; `RatCheck.lean` instantiates them with core's `Rat`, which shows
that the class's laws have a model in which all the hypotheses hold together.
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

theorem nv_absurd (P : Prop) (h : true = false) : P := Bool.noConfusion h

theorem nv_one_le_two : (1 : α) ≤ 2 := le_add_of_nonneg_left zero_le_one

theorem nv_abs_one : abs (1 : α) ≤ 1 := by
  rw [abs_of_nonneg zero_le_one]
  exact le_refl 1

theorem nv_inv_one : inv (1 : α) ≤ 1 := by
  rw [inv_one]
  exact le_refl 1

theorem nv_normSq_one : normSq 1 (fun _ => (1 : α)) = 1 := by
  have e : normSq 1 (fun _ => (1 : α)) = 1 * 1 + 0 := rfl
  rw [e, one_mul, add_zero]

theorem nv_normSq_le : normSq 1 (fun _ => (1 : α)) ≤ 1 * 1 := by
  rw [nv_normSq_one, one_mul]
  exact le_refl 1

/-! ## StateCorrection and RhoRange: a filled row and an exact row, both with gate 1 -/

def nvRow1 : Row α := ⟨1, 1, true⟩
def nvRow2 : Row α := ⟨1, 0, false⟩
def nvRows : List (Row α) := [nvRow1, nvRow2]

theorem nvRows_gates : allOf (gateIn (1 : α)) nvRows :=
  And.intro (And.intro zero_le_one (le_refl 1))
    (And.intro (And.intro zero_le_one (le_refl 1)) True.intro)

theorem nvRows_total : totalWeight (nvRows : List (Row α)) ≠ 0 :=
  ne_of_gt (lt_of_lt_of_le zero_lt_one (one_le_totalWeight_cons nvRow1 [nvRow2] nvRows_gates))

theorem nvRows_rho_pos : 0 < rho (nvRows : List (Row α)) := by
  have e : filledWeight (nvRows : List (Row α)) = 1 * 1 + (0 + 0) := rfl
  have hF : 0 < filledWeight (nvRows : List (Row α)) := by
    rw [e, one_mul, add_zero, add_zero]
    exact zero_lt_one
  have hT : 0 < totalWeight (nvRows : List (Row α)) :=
    lt_of_lt_of_le zero_lt_one (one_le_totalWeight_cons nvRow1 [nvRow2] nvRows_gates)
  rw [rho_def]
  exact mul_pos hF (inv_pos hT)

theorem nv_run_eq_unrolled :
    run 0 (nvRows : List (Row α)) = 0 * gateProd nvRows + weightedSum nvRows :=
  run_eq_unrolled 0 nvRows

theorem nv_corrected_state_eq_exact :
    run 0 (fillShift 1 nvRows) + rho nvRows * deltaM 1 nvRows = run (0 : α) nvRows :=
  corrected_state_eq_exact 1 0 nvRows nvRows_total

theorem nv_other_scale_leaves_residual :
    run 0 (fillShift 1 nvRows) + 0 * deltaM 1 nvRows ≠ run (0 : α) nvRows :=
  other_scale_leaves_residual 1 0 0 nvRows nvRows_total one_ne_zero (ne_of_lt nvRows_rho_pos)

theorem nv_unscaled_correction_overshoots :
    run 0 (fillShift 1 nvRows) + deltaM 1 nvRows =
        run (0 : α) nvRows + (1 - rho nvRows) * deltaM 1 nvRows ∧
      (1 - rho nvRows) * deltaM 1 nvRows = 1 * exactWeight (nvRows : List (Row α)) :=
  unscaled_correction_overshoots 1 0 nvRows nvRows_total

theorem nv_correction_cancels_after_tail :
    run 0 (fillShift 1 nvRows ++ nvRows) + gateProd nvRows * (rho nvRows * deltaM 1 nvRows) =
      run (0 : α) (nvRows ++ nvRows) :=
  correction_cancels_after_tail 1 0 nvRows nvRows nvRows_total

theorem nv_rho_mem_unit : 0 ≤ rho (nvRow1 :: [nvRow2] : List (Row α)) ∧
    rho (nvRow1 :: [nvRow2] : List (Row α)) ≤ 1 :=
  rho_mem_unit nvRow1 [nvRow2] nvRows_gates

/-! ## TailShare: a filled row behind an exact row, gates 0 (`γ = 0`) -/

theorem nv_filled_share_le_of_exact_tail :
    rho ([⟨0, 1, true⟩] ++ [⟨0, 1, false⟩] : List (Row α)) ≤
      npow 0 (len ([⟨0, 1, false⟩] : List (Row α))) * inv (1 - 0) :=
  filled_share_le_of_exact_tail 0 [⟨0, 1, true⟩] [⟨0, 1, false⟩] zero_lt_one
    (And.intro (And.intro (le_refl 0) (le_refl 0))
      (And.intro (And.intro (le_refl 0) (le_refl 0)) True.intro))
    (And.intro rfl True.intro)

/-! ## GdnContraction: one key coordinate, unit key, gate 1, `β = 1` -/

def nvInput : DeltaInput α := ⟨1, 1, fun _ => 1, fun _ => 0⟩

theorem nv_normSq_erase_le :
    normSq 1 (erase 1 (1 : α) (fun _ => 1) (fun _ => 1)) ≤ normSq 1 (fun _ => (1 : α)) :=
  normSq_erase_le 1 1 (fun _ => 1) (fun _ => 1) nv_normSq_one zero_le_one nv_one_le_two

theorem nv_delta_rule_contraction :
    frobSq 1 1 (stateDiff (deltaRun 1 (fun _ _ => (1 : α)) [nvInput])
        (deltaRun 1 (fun _ _ => 0) [nvInput])) ≤
      npow (1 * 1) (len ([nvInput] : List (DeltaInput α))) *
        frobSq 1 1 (stateDiff (fun _ _ => 1) (fun _ _ => (0 : α))) :=
  delta_rule_contraction (1 : α) 1 1 (fun _ _ => 1) (fun _ _ => 0) [nvInput]
    (And.intro (And.intro zero_le_one (And.intro (le_refl 1) (And.intro zero_le_one
      (And.intro nv_one_le_two nv_normSq_one)))) True.intro)

/-! ## AttentionInfluence: row `j` (score 1, value 1) before one row (score 1, value 1) -/

def nvPost : List (AttnRow α) := [⟨1, 1⟩]

theorem nvPost_pos : allOf scorePos (nvPost : List (AttnRow α)) :=
  And.intro zero_lt_one True.intro

theorem nvPost_values : allOf (valueLe (1 : α)) nvPost := And.intro nv_abs_one True.intro

theorem nv_output_value_change :
    output ([] ++ AttnRow.mk 1 (1 + 1) :: nvPost) =
      output ([] ++ AttnRow.mk 1 1 :: nvPost) +
        1 * inv (scoreSum ([] ++ AttnRow.mk 1 1 :: (nvPost : List (AttnRow α)))) * 1 :=
  output_value_change [] nvPost 1 1 1

theorem nv_weight_change_le :
    l1Dist (weights ([] ++ AttnRow.mk (1 * 1) 1 :: nvPost))
        (weights ([] ++ AttnRow.mk 1 1 :: nvPost)) ≤
      2 * (1 * inv (scoreSum ([] ++ AttnRow.mk 1 1 :: (nvPost : List (AttnRow α))))) * (1 - 1) :=
  weight_change_le [] nvPost 1 1 1 1 True.intro nvPost_pos zero_lt_one zero_lt_one (le_refl 1)
    nv_inv_one

theorem nv_output_score_change_le :
    abs (output ([] ++ AttnRow.mk (1 * 1) 1 :: nvPost) - output ([] ++ AttnRow.mk 1 1 :: nvPost))
      ≤ 2 * 1 * (1 * inv (scoreSum ([] ++ AttnRow.mk 1 1 :: (nvPost : List (AttnRow α))))) *
        (1 - 1) :=
  output_score_change_le [] nvPost 1 1 1 1 1 True.intro nvPost_pos True.intro nvPost_values
    nv_abs_one zero_lt_one zero_lt_one (le_refl 1) nv_inv_one

/-! ## AttentionVector: the same rows with one-coordinate vector values -/

def nvVecPost : List (VecRow α) := [⟨1, fun _ => 1⟩]

theorem nv_output_score_change_normSq_le :
    normSq 1 (fun c => outputVec ([] ++ VecRow.mk (1 * 1) (fun _ => 1) :: nvVecPost) c -
        outputVec ([] ++ VecRow.mk 1 (fun _ => 1) :: nvVecPost) c) ≤
      2 * 1 * (1 * inv (vScoreSum ([] ++ VecRow.mk 1 (fun _ => 1) ::
          (nvVecPost : List (VecRow α))))) * (1 - 1) *
        (2 * 1 * (1 * inv (vScoreSum ([] ++ VecRow.mk 1 (fun _ => 1) ::
          (nvVecPost : List (VecRow α))))) * (1 - 1)) :=
  output_score_change_normSq_le 1 [] nvVecPost 1 1 1 1 (fun _ => 1) True.intro
    (And.intro zero_lt_one True.intro) True.intro (And.intro nv_normSq_le True.intro)
    nv_normSq_le zero_lt_one zero_lt_one (le_refl 1) nv_inv_one

/-! ## CountMatched and CountControl: the rows `1, 0` -/

theorem nv_count_matched_expectation :
    averageBenefit 1 [(1 : α), 0] = natCast 1 * inv (natCast (len [(1 : α), 0])) * total [1, 0] :=
  count_matched_expectation 1 1 [(1 : α), 0] rfl

theorem nv_control_size_margin :
    1 - averageBenefit 2 [(1 : α), 0] =
      (1 - averageBenefit 1 [(1 : α), 0]) +
        (natCast 1 - natCast 2) * inv (natCast (len [(1 : α), 0])) * total [1, 0] :=
  control_size_margin 1 2 1 0 [(1 : α), 0] rfl rfl 1

/-! ## TopK: the ranking keeps the row of score 1, the other selection the row of score 0 -/

def nvPicks : List (Pick α) := [⟨1, true, false⟩, ⟨0, false, true⟩]

theorem nv_topk_minimises_unprotected :
    unprotected Pick.top (nvPicks : List (Pick α)) ≤ unprotected Pick.other nvPicks :=
  topk_minimises_unprotected 0 1 nvPicks
    (And.intro (And.intro (fun _ => zero_le_one) (fun h => nv_absurd _ h))
      (And.intro (And.intro (fun _ => le_refl 0) (fun _ => le_refl 0)) True.intro))
    rfl rfl

/-! ## BreakEven: `τ₀ = 0`, `σ = 1` -/

theorem nv_break_even_iff :
    (0 : α) + 1 * 1 ≤ 1 ↔ (1 : α) ≤ (1 - 0) * inv 1 :=
  break_even_iff 0 1 1 1 zero_lt_one

theorem nv_break_even_floor :
    (0 : α) + 0 * 1 ≤ 0 ∧ (0 : α) < 0 + (0 + 1) * 1 ∧
      ∀ E : α, 0 + E * 1 ≤ 0 → E < 0 + 1 := by
  have hx : (0 - 0) * inv (1 : α) = 0 := by rw [sub_self, zero_mul]
  have hm : (0 : α) ≤ (0 - 0) * inv 1 := by
    rw [hx]
    exact le_refl 0
  have hm1 : (0 - 0) * inv (1 : α) < 0 + 1 := by
    rw [hx, zero_add]
    exact zero_lt_one
  exact break_even_floor 0 0 1 0 zero_lt_one hm hm1

/-! ## MatrixState: the rows of `StateCorrection` with matrix updates -/

def nvMRows : List (MRow α) := [⟨1, fun _ _ => 1, true⟩, ⟨1, fun _ _ => 0, false⟩]

theorem nvMRows_total : totalWeight (gatesOf (nvMRows : List (MRow α))) ≠ 0 :=
  ne_of_gt (lt_of_lt_of_le zero_lt_one (one_le_totalWeight_cons (⟨1, 0, true⟩ : Row α)
    [⟨1, 0, false⟩] (And.intro (And.intro zero_le_one (le_refl 1))
      (And.intro (And.intro zero_le_one (le_refl 1)) True.intro))))

theorem nv_matrix_corrected_state_eq_exact :
    (fun a b => mrun (fun _ _ => 0) (mfillShift (fun _ _ => 1) nvMRows) a b +
        mrho nvMRows * mdeltaM (fun _ _ => 1) nvMRows a b) =
      mrun (fun _ _ => (0 : α)) nvMRows :=
  matrix_corrected_state_eq_exact (fun _ _ => 1) (fun _ _ => 0) nvMRows nvMRows_total

theorem nv_matrix_correction_cancels_after_tail :
    (fun a b => mrun (fun _ _ => 0) (mfillShift (fun _ _ => 1) nvMRows ++ nvMRows) a b +
        gateProd (gatesOf nvMRows) * (mrho nvMRows * mdeltaM (fun _ _ => 1) nvMRows a b)) =
      mrun (fun _ _ => (0 : α)) (nvMRows ++ nvMRows) :=
  matrix_correction_cancels_after_tail (fun _ _ => 1) (fun _ _ => 0) nvMRows nvMRows
    nvMRows_total

/-! ## Anchored: `Sxx = 0`, `Sxy = Syy = α = 1`, so the anchored slope is `s = 2`, not `1` -/

theorem nvAnchored_hs : (0 + 1) * (2 : α) = 1 + 1 := by rw [zero_add, one_mul, two_eq]

theorem nvAnchored_pos : (0 : α) ≤ 0 + 1 := by
  rw [zero_add]
  exact zero_le_one

theorem nv_anchored_objective_gap :
    anchoredObjective 0 1 1 1 (0 : α) - anchoredObjective 0 1 1 1 2 =
      (0 + 1) * ((0 - 2) * (0 - 2)) :=
  anchored_objective_gap 0 1 1 1 0 2 nvAnchored_hs

theorem nv_anchored_minimises :
    anchoredObjective 0 1 1 1 (2 : α) ≤ anchoredObjective 0 1 1 1 0 :=
  anchored_minimises 0 1 1 1 2 nvAnchored_hs nvAnchored_pos 0

theorem nv_anchored_le_identity :
    anchoredObjective 0 1 1 1 (2 : α) ≤ anchoredObjective 0 1 1 1 1 :=
  anchored_le_identity 0 1 1 1 2 nvAnchored_hs nvAnchored_pos

end

end RidgeFill
