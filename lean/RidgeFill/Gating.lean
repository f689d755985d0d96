/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.ListSum

/-!
# The gated recurrence without the erase term

The logical model of `rfmath.gating` (paper, Appendix H, "Why the terminal-state correction is
scaled by ρ"). A prompt is a list of rows in order; row `t` has a gate `g_t`, an update `u_t` and
a flag saying whether its update came from the fill. The state obeys `M_t = g_t M_{t-1} + u_t`.

States, updates and shifts are scalars here. In the paper they are matrices of one size per head,
but the recurrence, the shift and the correction act on every entry separately with the same
scalar gates, so each statement below holds entry by entry, hence for the matrices.

* `run M rows` — the state after feeding `rows` to the state `M`;
* `gateProd rows` — the product of all gates of `rows`;
* `weightedSum rows` — `Σ_j w_j u_j` with `w_j = Π_{k>j} g_k` (row `j`'s weight);
* `totalWeight`, `filledWeight`, `exactWeight` — `Σ_j w_j` over all, filled, exact rows;
* `fillShift δ rows` — the rows with every filled row's update moved from `u_j` to `u_j - δ`;
* `rho rows` — the filled rows' share of the weight, `Σ_filled w_j / Σ_j w_j`;
* `deltaM δ rows` — `δ · Σ_j w_j`, the exact state minus the state of a fully filled prefix.
-/

namespace RidgeFill

/-- One prompt row as the gated recurrence sees it. -/
structure Row (α : Type) where
  gate : α
  update : α
  filled : Bool

section
variable {α : Type} [OrderedField α]

/-- `mask b a` is `a` when `b` holds and `0` otherwise. -/
def mask : Bool → α → α
  | true, a => a
  | false, _ => 0

/-- The state after feeding `rows` in order to the state `M`: `M_t = g_t M_{t-1} + u_t`. -/
def run (M : α) : List (Row α) → α
  | [] => M
  | r :: rs => run (r.gate * M + r.update) rs

/-- The product of the gates of `rows`: the weight, after `rows`, of anything before them. -/
def gateProd : List (Row α) → α
  | [] => 1
  | r :: rs => r.gate * gateProd rs

/-- `Σ_j w_j u_j`, with row `j`'s weight `w_j` the product of the gates after it. -/
def weightedSum : List (Row α) → α
  | [] => 0
  | r :: rs => gateProd rs * r.update + weightedSum rs

/-- `Σ_j w_j` over all rows. -/
def totalWeight : List (Row α) → α
  | [] => 0
  | _ :: rs => gateProd rs + totalWeight rs

/-- `Σ_j w_j` over the filled rows. -/
def filledWeight : List (Row α) → α
  | [] => 0
  | r :: rs => mask r.filled (gateProd rs) + filledWeight rs

/-- `Σ_j w_j` over the exact rows. -/
def exactWeight : List (Row α) → α
  | [] => 0
  | r :: rs => mask (not r.filled) (gateProd rs) + exactWeight rs

/-- The rows with every filled row's update moved from `u_j` to `u_j - δ`. -/
def fillShift (δ : α) : List (Row α) → List (Row α)
  | [] => []
  | r :: rs => ⟨r.gate, r.update - mask r.filled δ, r.filled⟩ :: fillShift δ rs

/-- The rows with every row marked filled (a fully filled prefix). -/
def allFilled : List (Row α) → List (Row α)
  | [] => []
  | r :: rs => ⟨r.gate, r.update, true⟩ :: allFilled rs

/-- `ρ`, the filled rows' share of the weight: `Σ_filled w_j / Σ_j w_j`. -/
def rho (rows : List (Row α)) : α := filledWeight rows * inv (totalWeight rows)

/-- `ΔM = δ · Σ_j w_j`, the exact state minus the state of a fully filled prefix. -/
def deltaM (δ : α) (rows : List (Row α)) : α := δ * totalWeight rows

theorem mask_true (a : α) : mask true a = a := rfl
theorem mask_false (a : α) : mask false a = 0 := rfl
theorem run_nil (M : α) : run M [] = M := rfl
theorem run_cons (M : α) (r : Row α) (rs : List (Row α)) :
    run M (r :: rs) = run (r.gate * M + r.update) rs := rfl
theorem gateProd_nil : gateProd ([] : List (Row α)) = 1 := rfl
theorem gateProd_cons (r : Row α) (rs : List (Row α)) :
    gateProd (r :: rs) = r.gate * gateProd rs := rfl
theorem weightedSum_nil : weightedSum ([] : List (Row α)) = 0 := rfl
theorem weightedSum_cons (r : Row α) (rs : List (Row α)) :
    weightedSum (r :: rs) = gateProd rs * r.update + weightedSum rs := rfl
theorem totalWeight_nil : totalWeight ([] : List (Row α)) = 0 := rfl
theorem totalWeight_cons (r : Row α) (rs : List (Row α)) :
    totalWeight (r :: rs) = gateProd rs + totalWeight rs := rfl
theorem filledWeight_nil : filledWeight ([] : List (Row α)) = 0 := rfl
theorem filledWeight_cons (r : Row α) (rs : List (Row α)) :
    filledWeight (r :: rs) = mask r.filled (gateProd rs) + filledWeight rs := rfl
theorem exactWeight_nil : exactWeight ([] : List (Row α)) = 0 := rfl
theorem exactWeight_cons (r : Row α) (rs : List (Row α)) :
    exactWeight (r :: rs) = mask (not r.filled) (gateProd rs) + exactWeight rs := rfl
theorem fillShift_nil (δ : α) : fillShift δ [] = [] := rfl
theorem fillShift_cons (δ : α) (r : Row α) (rs : List (Row α)) :
    fillShift δ (r :: rs) = ⟨r.gate, r.update - mask r.filled δ, r.filled⟩ :: fillShift δ rs := rfl
theorem allFilled_nil : allFilled ([] : List (Row α)) = [] := rfl
theorem allFilled_cons (r : Row α) (rs : List (Row α)) :
    allFilled (r :: rs) = ⟨r.gate, r.update, true⟩ :: allFilled rs := rfl
theorem rho_def (rows : List (Row α)) : rho rows = filledWeight rows * inv (totalWeight rows) :=
  rfl
theorem deltaM_def (δ : α) (rows : List (Row α)) : deltaM δ rows = δ * totalWeight rows := rfl

/-- A row's weight splits into its filled and exact parts. -/
theorem mask_add_mask_not (b : Bool) (a : α) : mask b a + mask (not b) a = a := by
  cases b with
  | true => exact add_zero a
  | false => exact zero_add a

theorem mask_mul (b : Bool) (c a : α) : mask b (c * a) = c * mask b a := by
  cases b with
  | true => rfl
  | false => exact (mul_zero c).symm

theorem mul_mask_comm (b : Bool) (c a : α) : c * mask b a = a * mask b c := by
  cases b with
  | true => exact mul_comm c a
  | false => exact (mul_zero c).trans (mul_zero a).symm

theorem mask_nonneg (b : Bool) {a : α} (h : 0 ≤ a) : 0 ≤ mask b a := by
  cases b with
  | true => exact h
  | false => exact le_refl (0 : α)

theorem mask_le (b : Bool) {a : α} (h : 0 ≤ a) : mask b a ≤ a := by
  cases b with
  | true => exact le_refl a
  | false => exact h

/-- The filled and exact weights add up to the total weight. -/
theorem filledWeight_add_exactWeight (rows : List (Row α)) :
    filledWeight rows + exactWeight rows = totalWeight rows := by
  induction rows with
  | nil => exact add_zero (0 : α)
  | cons r rs ih =>
    rw [filledWeight_cons, exactWeight_cons, totalWeight_cons, add_add_add_comm,
      mask_add_mask_not, ih]

theorem gateProd_append (xs ys : List (Row α)) :
    gateProd (xs ++ ys) = gateProd xs * gateProd ys := by
  induction xs with
  | nil => rw [List.nil_append, gateProd_nil, one_mul]
  | cons r rs ih => rw [List.cons_append, gateProd_cons, gateProd_cons, ih, mul_assoc]

theorem filledWeight_append (xs ys : List (Row α)) :
    filledWeight (xs ++ ys) = filledWeight xs * gateProd ys + filledWeight ys := by
  induction xs with
  | nil => rw [List.nil_append, filledWeight_nil, zero_mul, zero_add]
  | cons r rs ih =>
    rw [List.cons_append, filledWeight_cons, filledWeight_cons, ih, gateProd_append, add_mul,
      add_assoc, mul_comm (gateProd rs) (gateProd ys), mask_mul, mul_comm]

theorem totalWeight_append (xs ys : List (Row α)) :
    totalWeight (xs ++ ys) = totalWeight xs * gateProd ys + totalWeight ys := by
  induction xs with
  | nil => rw [List.nil_append, totalWeight_nil, zero_mul, zero_add]
  | cons r rs ih =>
    rw [List.cons_append, totalWeight_cons, totalWeight_cons, ih, gateProd_append, add_mul,
      add_assoc, mul_comm (gateProd rs) (gateProd ys)]

theorem run_append (M : α) (xs ys : List (Row α)) : run M (xs ++ ys) = run (run M xs) ys := by
  induction xs generalizing M with
  | nil => rfl
  | cons r rs ih => rw [List.cons_append, run_cons, run_cons, ih]

end
end RidgeFill
