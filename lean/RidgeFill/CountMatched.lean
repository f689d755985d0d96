/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.ListSum

/-!
# Why the random-row control matches the selection's count

Paper, §3.3: "Suppose each exact row adds its own fixed benefit, regardless of which other rows
are exact. Then a random set of rows gains, on average, the same share of the total benefit as
its share of the rows."

The `n` rows are a list of their benefits; a set of `k` rows is a `k`-element sublist (chosen by
position, so equal benefits are still different rows); `subsetsOfCard k l` lists every one of
them once. A set's benefit is the sum of its members' benefits (the rows act independently).

* `count_matched_sum` — `n · Σ_S benefit(S) = k · #S · Σ_i b_i`;
* `count_matched_expectation` — the average benefit over all `k`-sets is `k/n` of the total.

Proof sketch: by induction over the rows, with two counting facts proved the same way:
`T_k + T_{k+1} = N_k · Σ b` (`subsetBenefitSum_add_succ`) and the absorption identity
`n N_k = (k + 1) N_{k+1} + k N_k` (`len_mul_numSubsets`), where `T_k`, `N_k` are the benefit sum
and the number of `k`-sets of the remaining rows.
-/

namespace RidgeFill

section
variable {β : Type}

/-- Put `x` in front of every list. -/
def consAll (x : β) : List (List β) → List (List β)
  | [] => []
  | s :: ss => (x :: s) :: consAll x ss

/-- Every `k`-element sublist of `l`, once each (sublists are chosen by position). -/
def subsetsOfCard : Nat → List β → List (List β)
  | 0, _ => [[]]
  | _ + 1, [] => []
  | k + 1, x :: xs => consAll x (subsetsOfCard k xs) ++ subsetsOfCard (k + 1) xs

theorem consAll_nil (x : β) : consAll x [] = [] := rfl
theorem consAll_cons (x : β) (s : List β) (ss : List (List β)) :
    consAll x (s :: ss) = (x :: s) :: consAll x ss := rfl
theorem subsetsOfCard_zero (l : List β) : subsetsOfCard 0 l = [[]] := by cases l <;> rfl
theorem subsetsOfCard_succ_nil (k : Nat) : subsetsOfCard (k + 1) ([] : List β) = [] := rfl
theorem subsetsOfCard_succ_cons (k : Nat) (x : β) (xs : List β) :
    subsetsOfCard (k + 1) (x :: xs) = consAll x (subsetsOfCard k xs) ++ subsetsOfCard (k + 1) xs :=
  rfl

theorem len_consAll (x : β) (ss : List (List β)) : len (consAll x ss) = len ss := by
  induction ss with
  | nil => rfl
  | cons s ss ih => rw [consAll_cons, len_cons, len_cons, ih]

end

section
variable {α : Type} [OrderedField α]

-- Rearrangements over plain variables. Each expands with the (non-permuting) distributive
-- laws, names every product with `generalize`, and only then sorts the sum with AC-`simp`:
-- the 2021 `simp` does not terminate when sorting sums of three or more products.
private theorem r_consAll (x t m S : α) : x + t + (x * m + S) = x * (m + 1) + (t + S) := by
  rw [mul_add, mul_one]
  generalize x * m = p
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem r_regroup (p q r s t : α) :
    p + r + s + (q + s + t) = p + q + (r + s) + (s + t) := by
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem r_factor (x A B s : α) : x * A + x * B + A * s + B * s = (A + B) * (x + s) := by
  rw [add_mul, mul_add, mul_add, mul_comm x A, mul_comm x B]
  generalize A * x = p1
  generalize B * x = p2
  generalize A * s = p3
  generalize B * s = p4
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem r_expand (m A B : α) : (m + 1) * (A + B) = m * A + m * B + (A + B) := by
  rw [add_mul, one_mul, mul_add]

private theorem r_absorb (c A B C : α) :
    (c + 1) * B + c * A + ((c + 1 + 1) * C + (c + 1) * B) + (A + B) =
      (c + 1 + 1) * (B + C) + (c + 1) * (A + B) := by
  simp only [add_mul, mul_add, one_mul]
  generalize c * A = p
  generalize c * B = q
  generalize c * C = r
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem r_expand3 (m x A T0 T1 : α) :
    (m + 1) * (x * A + T0 + T1) = x * (m * A) + m * T0 + m * T1 + x * A + (T0 + T1) := by
  simp only [add_mul, mul_add, one_mul]
  rw [mul_left_comm m x A]
  generalize x * (m * A) = p1
  generalize m * T0 = p2
  generalize m * T1 = p3
  generalize x * A = p4
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem r_main (c x s A B : α) :
    x * ((c + 1) * B + c * A) + c * A * s + (c + 1) * B * s + x * A + A * s =
      (c + 1) * (A + B) * (x + s) := by
  simp only [add_mul, mul_add, one_mul]
  rw [mul_comm x (c * B), mul_comm x B, mul_comm x (c * A), mul_comm x A]
  generalize c * A * x = p1
  generalize c * A * s = p2
  generalize A * x = p3
  generalize A * s = p4
  generalize c * B * x = p5
  generalize c * B * s = p6
  generalize B * x = p7
  generalize B * s = p8
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem r_avg (i c N s : α) : i * (c * N * s) = c * i * s * N := by
  rw [mul_assoc c N s, mul_left_comm i c, mul_comm N s, mul_assoc (c * i) s N,
    mul_assoc c i (s * N)]

/-- The total benefit of a set of rows: the sum of its members' benefits. -/
def total (l : List α) : α := sumBy (fun b => b) l

/-- `Σ_S benefit(S)` over every `k`-element set `S` of the rows. -/
def subsetBenefitSum (k : Nat) (l : List α) : α := sumBy total (subsetsOfCard k l)

/-- The number of `k`-element sets of the rows, in `α`. -/
def numSubsets (k : Nat) (l : List α) : α := natCast (len (subsetsOfCard k l))

/-- The average benefit of a uniformly chosen `k`-element set of the rows. -/
def averageBenefit (k : Nat) (l : List α) : α := subsetBenefitSum k l * inv (numSubsets k l)

theorem total_nil : total ([] : List α) = 0 := rfl
theorem total_cons (x : α) (xs : List α) : total (x :: xs) = x + total xs := rfl
theorem subsetBenefitSum_def (k : Nat) (l : List α) :
    subsetBenefitSum k l = sumBy total (subsetsOfCard k l) := rfl
theorem numSubsets_def (k : Nat) (l : List α) :
    numSubsets k l = natCast (len (subsetsOfCard k l)) := rfl
theorem averageBenefit_def (k : Nat) (l : List α) :
    averageBenefit k l = subsetBenefitSum k l * inv (numSubsets k l) := rfl

theorem numSubsets_zero (l : List α) : numSubsets 0 l = 1 := by
  rw [numSubsets_def, subsetsOfCard_zero, len_cons, len_nil, natCast_one]

theorem numSubsets_succ_nil (k : Nat) : numSubsets (k + 1) ([] : List α) = 0 := rfl

theorem numSubsets_succ_cons (k : Nat) (x : α) (xs : List α) :
    numSubsets (k + 1) (x :: xs) = numSubsets k xs + numSubsets (k + 1) xs := by
  rw [numSubsets_def, subsetsOfCard_succ_cons, natCast_len_append, len_consAll]
  rfl

theorem subsetBenefitSum_zero (l : List α) : subsetBenefitSum 0 l = 0 := by
  rw [subsetBenefitSum_def, subsetsOfCard_zero, sumBy_cons, sumBy_nil, total_nil, add_zero]

theorem subsetBenefitSum_succ_nil (k : Nat) : subsetBenefitSum (k + 1) ([] : List α) = 0 := rfl

theorem sumBy_total_consAll (x : α) (ss : List (List α)) :
    sumBy total (consAll x ss) = x * natCast (len ss) + sumBy total ss := by
  induction ss with
  | nil => rw [consAll_nil, sumBy_nil, len_nil, natCast_zero, mul_zero, add_zero]
  | cons s ss ih =>
    rw [consAll_cons, sumBy_cons, sumBy_cons, ih, total_cons, len_cons, natCast_add_one,
      r_consAll]

theorem subsetBenefitSum_succ_cons (k : Nat) (x : α) (xs : List α) :
    subsetBenefitSum (k + 1) (x :: xs) =
      x * numSubsets k xs + subsetBenefitSum k xs + subsetBenefitSum (k + 1) xs := by
  rw [subsetBenefitSum_def, subsetsOfCard_succ_cons, sumBy_append, sumBy_total_consAll]
  rfl

/-- Each `k`-set and each `(k+1)`-set, summed: `T_k + T_{k+1} = N_k · Σ b`. -/
theorem subsetBenefitSum_add_succ (k : Nat) (l : List α) :
    subsetBenefitSum k l + subsetBenefitSum (k + 1) l = numSubsets k l * total l := by
  induction l generalizing k with
  | nil =>
    rw [subsetBenefitSum_succ_nil, total_nil, mul_zero, add_zero]
    cases k with
    | zero => exact subsetBenefitSum_zero []
    | succ k => exact subsetBenefitSum_succ_nil k
  | cons x xs ih =>
    cases k with
    | zero =>
      have h0 := ih 0
      rw [subsetBenefitSum_zero, zero_add, numSubsets_zero, one_mul] at h0
      rw [subsetBenefitSum_zero, zero_add, subsetBenefitSum_succ_cons, numSubsets_zero,
        numSubsets_zero, subsetBenefitSum_zero, add_zero, h0, one_mul, mul_one, total_cons]
    | succ k =>
      rw [subsetBenefitSum_succ_cons, subsetBenefitSum_succ_cons, numSubsets_succ_cons,
        total_cons]
      rw [r_regroup, ih k, ih (k + 1)]
      exact r_factor _ _ _ _

/-- The absorption identity `n N_k = (k + 1) N_{k+1} + k N_k`. -/
theorem len_mul_numSubsets (k : Nat) (l : List α) :
    natCast (len l) * numSubsets k l =
      natCast (k + 1) * numSubsets (k + 1) l + natCast k * numSubsets k l := by
  induction l generalizing k with
  | nil =>
    rw [len_nil, natCast_zero, zero_mul, numSubsets_succ_nil, mul_zero, zero_add]
    cases k with
    | zero => exact (zero_mul _).symm
    | succ k => rw [numSubsets_succ_nil, mul_zero]
  | cons x xs ih =>
    rw [len_cons, natCast_add_one]
    cases k with
    | zero =>
      have h0 := ih 0
      rw [numSubsets_zero, mul_one, natCast_one, one_mul, natCast_zero, zero_mul,
        add_zero] at h0
      rw [numSubsets_zero, numSubsets_succ_cons, numSubsets_zero, ← h0, natCast_one,
        natCast_zero, zero_mul, add_zero, mul_one, one_mul, add_comm]
    | succ k =>
      rw [numSubsets_succ_cons, numSubsets_succ_cons (k + 1), r_expand, ih k, ih (k + 1),
        natCast_add_one, natCast_add_one]
      exact r_absorb _ _ _ _

/-- With every row adding its own benefit, `n · Σ_S benefit(S) = k · #S · Σ_i b_i` over the
`k`-element sets `S` of the `n` rows. -/
theorem count_matched_sum (k : Nat) (l : List α) :
    natCast (len l) * subsetBenefitSum k l = natCast k * numSubsets k l * total l := by
  induction l generalizing k with
  | nil => rw [len_nil, natCast_zero, zero_mul, total_nil, mul_zero]
  | cons x xs ih =>
    cases k with
    | zero => rw [subsetBenefitSum_zero, mul_zero, natCast_zero, zero_mul, zero_mul]
    | succ k =>
      rw [len_cons, natCast_add_one, subsetBenefitSum_succ_cons, numSubsets_succ_cons,
        total_cons]
      rw [r_expand3, len_mul_numSubsets, ih k, ih (k + 1), subsetBenefitSum_add_succ,
        natCast_add_one]
      exact r_main _ _ _ _ _

/-- There is at least one `k`-element set of rows when `k ≤ n` (written `n = d + k`). -/
theorem one_le_numSubsets (k d : Nat) (l : List α) (h : len l = d + k) : 1 ≤ numSubsets k l := by
  induction l generalizing k with
  | nil =>
    cases k with
    | zero => rw [numSubsets_zero]; exact le_refl (1 : α)
    | succ k =>
      have h0 : 0 = Nat.succ (d + k) := h
      exact Nat.noConfusion h0
  | cons x xs ih =>
    cases k with
    | zero => rw [numSubsets_zero]; exact le_refl (1 : α)
    | succ k =>
      have h1 : Nat.succ (len xs) = Nat.succ (d + k) := h
      have h' : len xs = d + k := Nat.succ.inj h1
      rw [numSubsets_succ_cons]
      exact le_trans (ih k h') (le_add_of_nonneg_right (natCast_nonneg _))

/-- If each exact row adds its own benefit, independently of the others, the average benefit of
a uniformly chosen set of `k` of the `n` rows is `k/n` of the total (for `k ≤ n`, written
`n = d + k`).
Python: rfmath.stats.count_matched_expected
Test: tests/test_rfmath_stats.py::test_count_matched_expectation_is_k_over_n -/
theorem count_matched_expectation (k d : Nat) (l : List α) (h : len l = d + k) :
    averageBenefit k l = natCast k * inv (natCast (len l)) * total l := by
  have hN : numSubsets k l ≠ 0 :=
    ne_of_gt (lt_of_lt_of_le zero_lt_one (one_le_numSubsets k d l h))
  rw [averageBenefit_def]
  cases l with
  | nil =>
    have hT : subsetBenefitSum k ([] : List α) = 0 := by
      cases k with
      | zero => exact subsetBenefitSum_zero []
      | succ k => exact subsetBenefitSum_succ_nil k
    rw [hT, zero_mul, total_nil, mul_zero]
  | cons x xs =>
    have hn : (natCast (len (x :: xs)) : α) ≠ 0 := ne_of_gt (natCast_succ_pos (len xs))
    have hs := count_matched_sum k (x :: xs)
    apply mul_inv_eq_of_eq_mul hN
    rw [← inv_mul_cancel_left hn (subsetBenefitSum k (x :: xs)), hs]
    exact r_avg _ _ _ _

end

#print axioms count_matched_expectation

end RidgeFill
