/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.Gating

/-!
# Why the terminal-state correction is scaled by ρ

Paper, Appendix H. With the recurrence `M_t = g_t M_{t-1} + u_t` (the Gated DeltaNet state
without the delta rule's erase term):

* `run_eq_unrolled` — the state unrolls to `M_0 Π_t g_t + Σ_j w_j u_j`, `w_j = Π_{k>j} g_k`;
* `run_fillShift` — if the fill moves every filled row's update by the same `δ`, the state moves
  by `δ · Σ_filled w_j`;
* `corrected_state_eq_exact` — adding `ρ · ΔM`, with `ΔM = δ Σ_j w_j` and
  `ρ = Σ_filled w_j / Σ_j w_j`, gives back the exact state;
* `other_scale_leaves_residual` — any other scale `c ≠ ρ` leaves a nonzero residual
  (`corrected_state_residual` gives it: `(c - ρ) ΔM`);
* `unscaled_correction_overshoots` — scale `1` overshoots by the exact rows' share `1 - ρ` of
  `ΔM` (`one_sub_rho_eq_exact_share`);
* `correction_cancels_after_tail` — the correction, added at the end of the prefix and faded by
  the tail's gates like the error, still cancels it after any further exact rows.

Sign convention: `fillShift δ` moves a filled row's update from `u_j` to `u_j - δ`, so that
`ΔM = δ Σ_j w_j` is the exact state minus the state of a fully filled prefix
(`deltaM_eq_exact_sub_fully_filled`), as the paper defines `ΔM`.
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

/-- Feeding a state `M + c` instead of `M` adds `c` faded by every gate. -/
theorem run_add (M c : α) (rows : List (Row α)) :
    run (M + c) rows = run M rows + gateProd rows * c := by
  induction rows generalizing M c with
  | nil => rw [run_nil, run_nil, gateProd_nil, one_mul]
  | cons r rs ih =>
    rw [run_cons, run_cons, gateProd_cons, mul_add, add_right_comm, ih, mul_assoc,
      mul_left_comm]

/-- The recurrence `M_t = g_t M_{t-1} + u_t` unrolls to `M_n = M_0 Π_t g_t + Σ_j w_j u_j`
with `w_j = Π_{k>j} g_k`.
Python: rfmath.gating.state_weights
Test: tests/test_rfmath_gating.py::test_state_weights_unroll_recurrence -/
theorem run_eq_unrolled (M : α) (rows : List (Row α)) :
    run M rows = M * gateProd rows + weightedSum rows := by
  induction rows generalizing M with
  | nil => rw [run_nil, gateProd_nil, weightedSum_nil, mul_one, add_zero]
  | cons r rs ih =>
    rw [run_cons, ih, gateProd_cons, weightedSum_cons]
    simp only [add_mul, mul_add, mul_comm, mul_assoc, mul_left_comm, add_comm, add_assoc,
      add_left_comm] <;> rfl

/-- Moving every filled row's update by `-δ` moves the state by `-δ Σ_filled w_j`. -/
theorem run_fillShift (δ M : α) (rows : List (Row α)) :
    run M (fillShift δ rows) = run M rows - δ * filledWeight rows := by
  rw [run_eq_unrolled, run_eq_unrolled]
  have hg : ∀ rs : List (Row α), gateProd (fillShift δ rs) = gateProd rs := by
    intro rs
    induction rs with
    | nil => rfl
    | cons r rs ih => rw [fillShift_cons, gateProd_cons, gateProd_cons, ih]
  have hw : ∀ rs : List (Row α),
      weightedSum (fillShift δ rs) = weightedSum rs - δ * filledWeight rs := by
    intro rs
    induction rs with
    | nil => rw [fillShift_nil, weightedSum_nil, filledWeight_nil, mul_zero, sub_zero]
    | cons r rs ih =>
      show gateProd (fillShift δ rs) * (r.update - mask r.filled δ) + weightedSum (fillShift δ rs)
        = gateProd rs * r.update + weightedSum rs - δ * (mask r.filled (gateProd rs) + filledWeight rs)
      rw [ih, hg, mul_add δ, mul_mask_comm r.filled δ (gateProd rs)]
      simp only [sub_eq, mul_add, add_mul, neg_add, mul_neg, neg_mul, mul_comm, mul_left_comm,
        add_comm, add_left_comm, add_assoc] <;> rfl
  rw [hg, hw, add_sub_assoc]

/-- `ΔM = δ Σ_j w_j` is the exact state minus the state of a fully filled prefix. -/
theorem deltaM_eq_exact_sub_fully_filled (δ M : α) (rows : List (Row α)) :
    deltaM δ rows = run M rows - run M (fillShift δ (allFilled rows)) := by
  have hr : ∀ N : α, ∀ rs : List (Row α), run N (allFilled rs) = run N rs := by
    intro N rs
    induction rs generalizing N with
    | nil => rfl
    | cons r rs ih => rw [allFilled_cons, run_cons, run_cons, ih]
  have hg : ∀ rs : List (Row α), gateProd (allFilled rs) = gateProd rs := by
    intro rs
    induction rs with
    | nil => rfl
    | cons r rs ih => rw [allFilled_cons, gateProd_cons, gateProd_cons, ih]
  have hf : ∀ rs : List (Row α), filledWeight (allFilled rs) = totalWeight rs := by
    intro rs
    induction rs with
    | nil => rfl
    | cons r rs ih =>
      rw [allFilled_cons, filledWeight_cons, totalWeight_cons, mask_true, hg, ih]
  rw [run_fillShift, hr, hf, sub_sub_cancel, deltaM_def]

/-- The filled rows' share `ρ` times the total weight is the filled weight. -/
theorem rho_mul_totalWeight {rows : List (Row α)} (h : totalWeight rows ≠ 0) :
    rho rows * totalWeight rows = filledWeight rows := by
  rw [rho_def, mul_inv_mul_cancel h]

/-- If the fill moves every filled row's update by the same `δ`, adding `ρ · ΔM` at the end
of the prefix gives back the exact state.
Python: rfmath.gating.corrected_state
Test: tests/test_rfmath_gating.py::test_rho_scaled_correction_cancels_uniform_shift -/
theorem corrected_state_eq_exact (δ M : α) (rows : List (Row α)) (h : totalWeight rows ≠ 0) :
    run M (fillShift δ rows) + rho rows * deltaM δ rows = run M rows := by
  rw [run_fillShift, deltaM_def, mul_left_comm, rho_mul_totalWeight h, sub_add_cancel]

/-- With any scale `c`, the corrected state misses the exact one by `(c - ρ) · ΔM`. -/
theorem corrected_state_residual (δ M c : α) (rows : List (Row α)) (h : totalWeight rows ≠ 0) :
    run M (fillShift δ rows) + c * deltaM δ rows - run M rows = (c - rho rows) * deltaM δ rows := by
  have e : c * deltaM δ rows = rho rows * deltaM δ rows + (c - rho rows) * deltaM δ rows := by
    rw [← add_mul, add_comm, sub_add_cancel]
  rw [e, ← add_assoc, corrected_state_eq_exact δ M rows h, add_comm, add_sub_cancel]

/-- Any scale other than `ρ` leaves a nonzero residual, when the shift `δ` is nonzero.
Python: rfmath.gating.corrected_state
Test: tests/test_rfmath_gating.py::test_other_scale_leaves_residual -/
theorem other_scale_leaves_residual (δ M c : α) (rows : List (Row α))
    (h : totalWeight rows ≠ 0) (hδ : δ ≠ 0) (hc : c ≠ rho rows) :
    run M (fillShift δ rows) + c * deltaM δ rows ≠ run M rows := by
  intro e
  have r := corrected_state_residual δ M c rows h
  rw [e, sub_self, deltaM_def] at r
  have hc' : c - rho rows ≠ 0 := fun z => hc (sub_eq_zero z)
  exact mul_ne_zero hc' (mul_ne_zero hδ h) r.symm

/-- `1 - ρ` is the exact rows' share of the weight. -/
theorem one_sub_rho_eq_exact_share (rows : List (Row α)) (h : totalWeight rows ≠ 0) :
    1 - rho rows = exactWeight rows * inv (totalWeight rows) := by
  apply sub_eq_of_eq_add
  rw [rho_def, ← add_mul, add_comm, filledWeight_add_exactWeight, mul_inv h]

/-- The unscaled correction (scale `1`) overshoots: it leaves the exact state plus the exact
rows' share `1 - ρ` of `ΔM`, which is `δ Σ_exact w_j`.
Python: rfmath.gating.corrected_state
Test: tests/test_rfmath_gating.py::test_other_scale_leaves_residual -/
theorem unscaled_correction_overshoots (δ M : α) (rows : List (Row α))
    (h : totalWeight rows ≠ 0) :
    run M (fillShift δ rows) + deltaM δ rows = run M rows + (1 - rho rows) * deltaM δ rows ∧
      (1 - rho rows) * deltaM δ rows = δ * exactWeight rows := by
  constructor
  · have r := corrected_state_residual δ M 1 rows h
    rw [one_mul] at r
    exact eq_add_of_sub_eq' r
  · rw [one_sub_rho_eq_exact_share rows h, deltaM_def, mul_mul_mul_comm, inv_mul h, mul_one,
      mul_comm]

/-- After any further exact rows `tail`, the correction added at the end of the prefix, faded
by the tail's gates exactly as the error is, still cancels the error in the final state.
Python: rfmath.gating.corrected_state
Test: tests/test_rfmath_gating.py::test_rho_scaled_correction_cancels_uniform_shift -/
theorem correction_cancels_after_tail (δ M : α) (pre tail : List (Row α))
    (h : totalWeight pre ≠ 0) :
    run M (fillShift δ pre ++ tail) + gateProd tail * (rho pre * deltaM δ pre) =
      run M (pre ++ tail) := by
  rw [run_append, run_append, ← run_add, corrected_state_eq_exact δ M pre h]

end

#print axioms run_eq_unrolled
#print axioms corrected_state_eq_exact
#print axioms other_scale_leaves_residual
#print axioms unscaled_correction_overshoots
#print axioms correction_cancels_after_tail

end RidgeFill
