/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.Gating

/-!
# The filled rows' share behind an exact tail

Paper, Appendix H: if every gate is at most `γ < 1` and the last `m` rows of the prompt are
exact, each filled row has at least `m` gates after it, so the filled rows' total weight in the
final state is at most `γ^m + γ^(m+1) + ... = γ^m / (1 - γ)`; the total weight of all rows is at
least `1` (the last row's weight), so the filled rows' share is at most `γ^m / (1 - γ)`.

The share is `rho (pre ++ tail)`, the same `ρ` as in `StateCorrection`, read over the whole
prompt: the filled rows' weight over all rows' weight in the final state.

Proof sketch for the geometric bound (`totalWeight_mul_add_gateProd_le`): induction over the
rows from the front with the invariant `(Σ_j w_j) (1 - γ) + Π_t g_t ≤ 1`.
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

/-- The row's gate lies in `[0, γ]`. -/
def gateIn (γ : α) (r : Row α) : Prop := 0 ≤ r.gate ∧ r.gate ≤ γ

/-- The row is exact (its update did not come from the fill). -/
def isExact (r : Row α) : Prop := r.filled = false

theorem gateProd_nonneg {γ : α} (rows : List (Row α)) (h : allOf (gateIn γ) rows) :
    0 ≤ gateProd rows := by
  induction rows with
  | nil => exact zero_le_one
  | cons r rs ih => rw [gateProd_cons]; exact mul_nonneg h.1.1 (ih h.2)

theorem gateProd_le_npow {γ : α} (rows : List (Row α)) (h : allOf (gateIn γ) rows) :
    gateProd rows ≤ npow γ (len rows) := by
  induction rows with
  | nil => exact le_refl (1 : α)
  | cons r rs ih =>
    rw [gateProd_cons, len_cons, npow_succ]
    exact mul_le_mul h.1.2 (ih h.2) (gateProd_nonneg rs h.2) (le_trans h.1.1 h.1.2)

theorem filledWeight_nonneg {γ : α} (rows : List (Row α)) (h : allOf (gateIn γ) rows) :
    0 ≤ filledWeight rows := by
  induction rows with
  | nil => exact le_refl (0 : α)
  | cons r rs ih =>
    rw [filledWeight_cons]
    exact add_nonneg (mask_nonneg r.filled (gateProd_nonneg rs h.2)) (ih h.2)

theorem filledWeight_le_totalWeight {γ : α} (rows : List (Row α))
    (h : allOf (gateIn γ) rows) : filledWeight rows ≤ totalWeight rows := by
  induction rows with
  | nil => exact le_refl (0 : α)
  | cons r rs ih =>
    rw [filledWeight_cons, totalWeight_cons]
    exact add_le_add (mask_le r.filled (gateProd_nonneg rs h.2)) (ih h.2)

theorem filledWeight_of_exact (rows : List (Row α)) (h : allOf isExact rows) :
    filledWeight rows = 0 := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    have hr : r.filled = false := h.1
    rw [filledWeight_cons, hr, mask_false, ih h.2, add_zero]

/-- The invariant behind the geometric sum: `(Σ_j w_j)(1 - γ) + Π_t g_t ≤ 1`. -/
theorem totalWeight_mul_add_gateProd_le {γ : α} (rows : List (Row α))
    (h : allOf (gateIn γ) rows) : totalWeight rows * (1 - γ) + gateProd rows ≤ 1 := by
  induction rows with
  | nil => rw [totalWeight_nil, gateProd_nil, zero_mul, zero_add]; exact le_refl (1 : α)
  | cons r rs ih =>
    rw [totalWeight_cons, gateProd_cons]
    have hP := gateProd_nonneg rs h.2
    have step : (gateProd rs + totalWeight rs) * (1 - γ) + r.gate * gateProd rs ≤
        (gateProd rs + totalWeight rs) * (1 - γ) + γ * gateProd rs :=
      add_le_add_left (mul_le_mul_of_nonneg_right h.1.2 hP) _
    have e : (gateProd rs + totalWeight rs) * (1 - γ) + γ * gateProd rs =
        totalWeight rs * (1 - γ) + gateProd rs := by
      rw [add_mul, add_right_comm (gateProd rs * (1 - γ)), mul_comm γ (gateProd rs), ← mul_add,
        sub_add_cancel, mul_one, add_comm]
    rw [e] at step
    exact le_trans step (ih h.2)

/-- The total weight of a nonempty prompt is at least `1`, the last row's weight. -/
theorem one_le_totalWeight_cons {γ : α} (r : Row α) (rs : List (Row α))
    (h : allOf (gateIn γ) (r :: rs)) : 1 ≤ totalWeight (r :: rs) := by
  have hinv : ∀ xs : List (Row α), allOf (gateIn γ) xs → 1 ≤ totalWeight xs + gateProd xs := by
    intro xs hx
    induction xs with
    | nil => rw [totalWeight_nil, gateProd_nil, zero_add]; exact le_refl (1 : α)
    | cons y ys ih =>
      rw [totalWeight_cons, gateProd_cons, add_comm (gateProd ys)]
      exact le_trans (ih hx.2)
        (le_add_of_nonneg_right (mul_nonneg hx.1.1 (gateProd_nonneg ys hx.2)))
  rw [totalWeight_cons, add_comm]
  exact hinv rs h.2

/-- The filled share is at most the filled weight (the total weight is `0` or at least `1`). -/
theorem rho_le_filledWeight {γ : α} (rows : List (Row α)) (h : allOf (gateIn γ) rows) :
    rho rows ≤ filledWeight rows := by
  cases rows with
  | nil => rw [rho_def, filledWeight_nil, zero_mul]; exact le_refl (0 : α)
  | cons r rs =>
    have hT := one_le_totalWeight_cons r rs h
    have hF := filledWeight_nonneg (r :: rs) h
    rw [rho_def]
    apply mul_inv_le_of_le_mul (lt_of_lt_of_le zero_lt_one hT)
    have h2 := mul_le_mul_of_nonneg_left hT hF
    rw [mul_one] at h2
    exact h2

/-- If every gate is in `[0, γ]` with `γ < 1` and the last `m` rows (`tail`) are exact, the
filled rows' share of the final state is at most `γ^m / (1 - γ)`.
Python: rfmath.gating.tail_share_bound
Test: tests/test_rfmath_gating.py::test_filled_share_behind_tail_within_bound -/
theorem filled_share_le_of_exact_tail (γ : α) (pre tail : List (Row α)) (hγ : γ < 1)
    (hg : allOf (gateIn γ) (pre ++ tail)) (hx : allOf isExact tail) :
    rho (pre ++ tail) ≤ npow γ (len tail) * inv (1 - γ) := by
  have hpre := allOf_append_left pre tail hg
  have htail := allOf_append_right pre tail hg
  have hpos : 0 < 1 - γ := sub_pos_of_lt hγ
  -- the prefix's filled weight is at most its total weight, at most `1 / (1 - γ)`
  have hT : totalWeight pre * (1 - γ) ≤ 1 :=
    le_trans (le_add_of_nonneg_right (gateProd_nonneg pre hpre))
      (totalWeight_mul_add_gateProd_le pre hpre)
  have hT' := le_mul_inv_of_mul_le hpos hT
  rw [one_mul] at hT'
  have hF := le_trans (filledWeight_le_totalWeight pre hpre) hT'
  -- the tail fades it by at most `γ^m` and adds no filled weight of its own
  have hfin : filledWeight (pre ++ tail) ≤ inv (1 - γ) * npow γ (len tail) := by
    rw [filledWeight_append, filledWeight_of_exact tail hx, add_zero]
    exact mul_le_mul hF (gateProd_le_npow tail htail) (gateProd_nonneg tail htail)
      (inv_nonneg hpos)
  rw [mul_comm] at hfin
  exact le_trans (rho_le_filledWeight (pre ++ tail) hg) hfin

end

#print axioms filled_share_le_of_exact_tail

end RidgeFill
