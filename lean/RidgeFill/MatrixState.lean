/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.StateCorrection

/-!
# The state correction for matrix states, entry by entry

Paper, Appendix H: "The state `M_t` and the update `u_t` are matrices of the same size, one per
head, and the gate `g_t` is one number between 0 and 1 per head and token." `StateCorrection`
proves its statements for scalar states; this module lifts the two that the correction rests on
to matrix states of one head, entry by entry.

A head's rows carry a scalar gate, a matrix update (`Nat → Nat → α`, entry `(a, b)`) and the
filled flag; the state obeys `M_t = g_t M_{t-1} + U_t` in every entry, and the fill shifts every
filled row's update by the same matrix `δ`. Entry `(a, b)` of the matrix run is the scalar run
of the rows' `(a, b)` entries (`mrun_entry`); the weights, and so `ρ`, depend only on the gates
and flags (`gatesOf`), the same for every entry. Heads do not interact: apply the statements
head by head, each with its own gates and its own `ρ`.

* `matrix_corrected_state_eq_exact` — adding `ρ ΔM`, `ΔM = δ Σ_j w_j` (a matrix), to the
  matrix state at the end of the prefix gives back the exact matrix state;
* `matrix_correction_cancels_after_tail` — and after any further rows, faded by their gates,
  it still cancels the error in the final matrix state.
-/

namespace RidgeFill

/-- One prompt row of one head, with a matrix update: entry `(a, b)` is `update a b`. -/
structure MRow (α : Type) where
  gate : α
  update : Nat → Nat → α
  filled : Bool

section
variable {α : Type} [OrderedField α]

/-- The rows' `(a, b)` entries, as scalar rows with the same gates and flags. -/
def entryRows (a b : Nat) : List (MRow α) → List (Row α)
  | [] => []
  | r :: rs => ⟨r.gate, r.update a b, r.filled⟩ :: entryRows a b rs

/-- The gates and flags alone (zero updates): what the weights and `ρ` depend on. -/
def gatesOf : List (MRow α) → List (Row α)
  | [] => []
  | r :: rs => ⟨r.gate, 0, r.filled⟩ :: gatesOf rs

/-- The matrix state after feeding `rows` to `M`: `M_t = g_t M_{t-1} + U_t`, entry by entry. -/
def mrun (M : Nat → Nat → α) : List (MRow α) → Nat → Nat → α
  | [] => M
  | r :: rs => mrun (fun a b => r.gate * M a b + r.update a b) rs

/-- The rows with every filled row's update moved from `U_j` to `U_j - δ` (`δ` a matrix). -/
def mfillShift (δ : Nat → Nat → α) : List (MRow α) → List (MRow α)
  | [] => []
  | r :: rs =>
    ⟨r.gate, fun a b => r.update a b - mask r.filled (δ a b), r.filled⟩ :: mfillShift δ rs

/-- `ρ` of a head: the filled rows' share of the weight. -/
def mrho (rows : List (MRow α)) : α := rho (gatesOf rows)

/-- `ΔM = δ Σ_j w_j`, a matrix: the exact state minus the state of a fully filled prefix. -/
def mdeltaM (δ : Nat → Nat → α) (rows : List (MRow α)) : Nat → Nat → α :=
  fun a b => δ a b * totalWeight (gatesOf rows)

theorem entryRows_nil (a b : Nat) : entryRows a b ([] : List (MRow α)) = [] := rfl
theorem entryRows_cons (a b : Nat) (r : MRow α) (rs : List (MRow α)) :
    entryRows a b (r :: rs) = ⟨r.gate, r.update a b, r.filled⟩ :: entryRows a b rs := rfl
theorem gatesOf_cons (r : MRow α) (rs : List (MRow α)) :
    gatesOf (r :: rs) = ⟨r.gate, 0, r.filled⟩ :: gatesOf rs := rfl
theorem mrun_nil (M : Nat → Nat → α) : mrun M [] = M := rfl
theorem mrun_cons (M : Nat → Nat → α) (r : MRow α) (rs : List (MRow α)) :
    mrun M (r :: rs) = mrun (fun a b => r.gate * M a b + r.update a b) rs := rfl
theorem mfillShift_cons (δ : Nat → Nat → α) (r : MRow α) (rs : List (MRow α)) :
    mfillShift δ (r :: rs) =
      ⟨r.gate, fun a b => r.update a b - mask r.filled (δ a b), r.filled⟩ :: mfillShift δ rs :=
  rfl
theorem mrho_def (rows : List (MRow α)) : mrho rows = rho (gatesOf rows) := rfl
theorem mdeltaM_apply (δ : Nat → Nat → α) (rows : List (MRow α)) (a b : Nat) :
    mdeltaM δ rows a b = δ a b * totalWeight (gatesOf rows) := rfl

/-- Entry `(a, b)` of the matrix run is the scalar run of the rows' `(a, b)` entries. -/
theorem mrun_entry (M : Nat → Nat → α) (rows : List (MRow α)) (a b : Nat) :
    mrun M rows a b = run (M a b) (entryRows a b rows) := by
  induction rows generalizing M with
  | nil => rfl
  | cons r rs ih =>
    show mrun (fun a b => r.gate * M a b + r.update a b) rs a b =
      run (r.gate * M a b + r.update a b) (entryRows a b rs)
    exact ih _

theorem entryRows_mfillShift (δ : Nat → Nat → α) (rows : List (MRow α)) (a b : Nat) :
    entryRows a b (mfillShift δ rows) = fillShift (δ a b) (entryRows a b rows) := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    show Row.mk r.gate (r.update a b - mask r.filled (δ a b)) r.filled ::
        entryRows a b (mfillShift δ rs) =
      Row.mk r.gate (r.update a b - mask r.filled (δ a b)) r.filled ::
        fillShift (δ a b) (entryRows a b rs)
    rw [ih]

theorem entryRows_append (a b : Nat) (xs ys : List (MRow α)) :
    entryRows a b (xs ++ ys) = entryRows a b xs ++ entryRows a b ys := by
  induction xs with
  | nil => rfl
  | cons r rs ih => rw [List.cons_append, entryRows_cons, entryRows_cons, ih, List.cons_append]

theorem gateProd_entryRows (a b : Nat) (rows : List (MRow α)) :
    gateProd (entryRows a b rows) = gateProd (gatesOf rows) := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    show r.gate * gateProd (entryRows a b rs) = r.gate * gateProd (gatesOf rs)
    rw [ih]

theorem totalWeight_entryRows (a b : Nat) (rows : List (MRow α)) :
    totalWeight (entryRows a b rows) = totalWeight (gatesOf rows) := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    show gateProd (entryRows a b rs) + totalWeight (entryRows a b rs) =
      gateProd (gatesOf rs) + totalWeight (gatesOf rs)
    rw [ih, gateProd_entryRows]

theorem filledWeight_entryRows (a b : Nat) (rows : List (MRow α)) :
    filledWeight (entryRows a b rows) = filledWeight (gatesOf rows) := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    show mask r.filled (gateProd (entryRows a b rs)) + filledWeight (entryRows a b rs) =
      mask r.filled (gateProd (gatesOf rs)) + filledWeight (gatesOf rs)
    rw [ih, gateProd_entryRows]

/-- Every entry sees the head's `ρ`. -/
theorem rho_entryRows (a b : Nat) (rows : List (MRow α)) :
    rho (entryRows a b rows) = mrho rows := by
  rw [rho_def, filledWeight_entryRows, totalWeight_entryRows, mrho_def, rho_def]

/-- If the fill moves every filled row's matrix update by the same matrix `δ`, adding `ρ ΔM`
(one `ρ` per head, `ΔM = δ Σ_j w_j`) to the matrix state at the end of the prefix gives back the
exact matrix state, in every entry.
Python: rfmath.gating.corrected_state
Test: tests/test_rfmath_gating.py::test_matrix_corrected_state_eq_exact -/
theorem matrix_corrected_state_eq_exact (δ M : Nat → Nat → α) (rows : List (MRow α))
    (h : totalWeight (gatesOf rows) ≠ 0) :
    (fun a b => mrun M (mfillShift δ rows) a b + mrho rows * mdeltaM δ rows a b) =
      mrun M rows := by
  funext a b
  have h' : totalWeight (entryRows a b rows) ≠ 0 := by
    rw [totalWeight_entryRows]; exact h
  have e := corrected_state_eq_exact (δ a b) (M a b) (entryRows a b rows) h'
  rw [rho_entryRows, deltaM_def, totalWeight_entryRows, ← entryRows_mfillShift,
    ← mrun_entry, ← mrun_entry, ← mdeltaM_apply] at e
  exact e

/-- After any further rows `tail`, the matrix correction added at the end of the prefix, faded
by the tail's gates exactly as the error is, still cancels the error in every entry of the final
matrix state.
Python: rfmath.gating.corrected_state
Test: tests/test_rfmath_gating.py::test_matrix_correction_cancels_after_tail -/
theorem matrix_correction_cancels_after_tail (δ M : Nat → Nat → α) (pre tail : List (MRow α))
    (h : totalWeight (gatesOf pre) ≠ 0) :
    (fun a b => mrun M (mfillShift δ pre ++ tail) a b +
        gateProd (gatesOf tail) * (mrho pre * mdeltaM δ pre a b)) = mrun M (pre ++ tail) := by
  funext a b
  have h' : totalWeight (entryRows a b pre) ≠ 0 := by
    rw [totalWeight_entryRows]; exact h
  have e := correction_cancels_after_tail (δ a b) (M a b) (entryRows a b pre)
    (entryRows a b tail) h'
  rw [rho_entryRows, deltaM_def, totalWeight_entryRows, gateProd_entryRows,
    ← entryRows_mfillShift, ← entryRows_append, ← entryRows_append, ← mrun_entry,
    ← mrun_entry, ← mdeltaM_apply] at e
  exact e

end

#print axioms matrix_corrected_state_eq_exact
#print axioms matrix_correction_cancels_after_tail

end RidgeFill
