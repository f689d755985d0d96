/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.Gating

/-!
# Keeping the rows with the most attention minimises what is left unprotected

Paper, §2.4 ("Why attention"): both bounds on how much row `j`'s error moves query `i`'s output
scale with `a_ij`, "so if the fill's error were the same size at every row, keeping exact the
rows with the largest summed attention would minimize the total of these bounds over the
queries". With errors of one size, the bound a dropped row leaves is its summed attention
`s_j = Σ_i a_ij` times a constant, so the total left unprotected is `Σ_{j dropped} s_j` times that
constant.

Rows are `Pick`s: a row's summed attention `score`, whether the attention ranking keeps it
(`top`) and whether some other selection keeps it (`other`). The ranking keeps `k` rows with the
highest scores: there is a threshold `t` with every kept score `≥ t` and every dropped score
`≤ t` (`ranked t`; ties may go either way). The other selection is any set of `k` rows.

* `topk_minimises_unprotected` — the ranking leaves at most as much unprotected as any other
  selection of the same count.

Proof (an exchange argument, done at once): `Σ_j (top_j - other_j)(s_j - t) ≥ 0` term by term,
since a row kept by the ranking alone has `s_j ≥ t` and a row kept by the other alone has
`s_j ≤ t`; and `Σ_j (top_j - other_j) t = 0` because both keep `k` rows.
-/

namespace RidgeFill

/-- One row: its summed attention, and whether the ranking and another selection keep it. -/
structure Pick (α : Type) where
  score : α
  top : Bool
  other : Bool

section
variable {α : Type} [OrderedField α]

/-- `1` for `true`, `0` for `false`. -/
def boolNat : Bool → Nat
  | true => 1
  | false => 0

/-- How many rows the selection `b` keeps. -/
def countBy (b : Pick α → Bool) : List (Pick α) → Nat
  | [] => 0
  | r :: rs => countBy b rs + boolNat (b r)

/-- The summed attention of the rows the selection `b` keeps. -/
def keptBy (b : Pick α → Bool) (rows : List (Pick α)) : α :=
  sumBy (fun r => mask (b r) r.score) rows

/-- The summed attention of the rows the selection `b` leaves to the fill: the total bound it
leaves unprotected (in units of the common error size). -/
def unprotected (b : Pick α → Bool) (rows : List (Pick α)) : α :=
  sumBy (fun r => mask (not (b r)) r.score) rows

/-- The ranking's threshold: kept rows score at least `t`, dropped rows at most `t`. -/
def ranked (t : α) (r : Pick α) : Prop :=
  (r.top = true → t ≤ r.score) ∧ (r.top = false → r.score ≤ t)

theorem countBy_nil (b : Pick α → Bool) : countBy b [] = 0 := rfl
theorem countBy_cons (b : Pick α → Bool) (r : Pick α) (rs : List (Pick α)) :
    countBy b (r :: rs) = countBy b rs + boolNat (b r) := rfl
theorem keptBy_nil (b : Pick α → Bool) : keptBy b [] = 0 := rfl
theorem keptBy_cons (b : Pick α → Bool) (r : Pick α) (rs : List (Pick α)) :
    keptBy b (r :: rs) = mask (b r) r.score + keptBy b rs := rfl
theorem unprotected_cons (b : Pick α → Bool) (r : Pick α) (rs : List (Pick α)) :
    unprotected b (r :: rs) = mask (not (b r)) r.score + unprotected b rs := rfl

/-- The count, in `α`: `natCast (countBy b rows) = Σ_j [b keeps j]`. -/
theorem natCast_countBy (b : Pick α → Bool) (rows : List (Pick α)) :
    natCast (countBy b rows) = sumBy (fun r => mask (b r) (1 : α)) rows := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    rw [countBy_cons, sumBy_cons, ← ih, add_comm (mask (b r) 1)]
    cases b r with
    | true => exact natCast_succ (countBy b rs)
    | false => exact (add_zero (natCast (countBy b rs))).symm

/-- The kept and the unprotected attention add up to the total. -/
theorem keptBy_add_unprotected (b : Pick α → Bool) (rows : List (Pick α)) :
    keptBy b rows + unprotected b rows = sumBy (fun r => r.score) rows := by
  induction rows with
  | nil => exact add_zero (0 : α)
  | cons r rs ih =>
    rw [keptBy_cons, unprotected_cons, sumBy_cons, add_add_add_comm, mask_add_mask_not, ih]

/-- One row of the exchange: `[other] s + t [top] ≤ [top] s + t [other]`. -/
theorem pick_step (t s : α) (a o : Bool) (h1 : a = true → t ≤ s) (h2 : a = false → s ≤ t) :
    mask o s + t * mask a 1 ≤ mask a s + t * mask o 1 := by
  cases a with
  | true =>
    cases o with
    | true => exact le_refl _
    | false =>
      have e1 : mask false s + t * mask true 1 = t := by
        rw [mask_false, mask_true, mul_one, zero_add]
      have e2 : mask true s + t * mask false 1 = s := by
        rw [mask_false, mask_true, mul_zero, add_zero]
      rw [e1, e2]
      exact h1 rfl
  | false =>
    cases o with
    | true =>
      have e1 : mask true s + t * mask false 1 = s := by
        rw [mask_false, mask_true, mul_zero, add_zero]
      have e2 : mask false s + t * mask true 1 = t := by
        rw [mask_false, mask_true, mul_one, zero_add]
      rw [e1, e2]
      exact h2 rfl
    | false => exact le_refl _

private theorem r_pair (A B C D t : α) : A + B + t * (C + D) = A + t * C + (B + t * D) := by
  rw [mul_add, add_add_add_comm]

/-- The exchange argument, summed: `Σ [other] s + t #top ≤ Σ [top] s + t #other`. -/
theorem kept_exchange (t : α) (rows : List (Pick α)) (h : allOf (ranked t) rows) :
    keptBy Pick.other rows + t * sumBy (fun r => mask r.top (1 : α)) rows ≤
      keptBy Pick.top rows + t * sumBy (fun r => mask r.other (1 : α)) rows := by
  induction rows with
  | nil => exact le_refl _
  | cons r rs ih =>
    rw [keptBy_cons, keptBy_cons, sumBy_cons, sumBy_cons, r_pair, r_pair]
    exact add_le_add (pick_step t r.score r.top r.other h.1.1 h.1.2) (ih h.2)

theorem sub_le_sub_left {a b : α} (h : a ≤ b) (c : α) : c - b ≤ c - a := by
  rw [sub_eq, sub_eq]
  exact add_le_add_left (neg_le_neg h) c

/-- Keeping the `k` rows with the highest summed attention (every kept score `≥ t ≥` every
dropped score) leaves at most as much summed attention unprotected as any other set of `k`
rows: with errors of one size, it minimises the total of §2.4's bounds left to the fill.
Python: rfmath.attention.top_k_rows, rfmath.attention.unprotected_attention
Test: tests/test_rfmath_attention.py::test_topk_minimises_unprotected -/
theorem topk_minimises_unprotected (t : α) (k : Nat) (rows : List (Pick α))
    (hrank : allOf (ranked t) rows) (htop : countBy Pick.top rows = k)
    (hother : countBy Pick.other rows = k) :
    unprotected Pick.top rows ≤ unprotected Pick.other rows := by
  have h := kept_exchange t rows hrank
  rw [← natCast_countBy, ← natCast_countBy, htop, hother] at h
  have hk := le_of_add_le_add_right h
  have e1 := keptBy_add_unprotected Pick.top rows
  have e2 := keptBy_add_unprotected Pick.other rows
  rw [add_comm] at e1 e2
  rw [← sub_eq_of_eq_add e1.symm, ← sub_eq_of_eq_add e2.symm]
  exact sub_le_sub_left hk _

end

#print axioms topk_minimises_unprotected

end RidgeFill
