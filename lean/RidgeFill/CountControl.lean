/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.CountMatched

/-!
# A control of a different size adds a term of the count alone

Paper, §3.3: "A selection's margin over a random set of the same size therefore measures only how
well it chose. A control of a different size would add a term that depends on the count alone."

With every row adding its own benefit (`CountMatched`), a selection with benefit `B` beats the
average random set of `k'` rows by its margin over the average random set of its own size `k`,
plus `(k - k')/n` of the total benefit: a term fixed by the counts (and the prompt's total),
whatever the selection chose.

* `control_size_margin` — `B - avg_{k'} = (B - avg_k) + (k - k')/n · Σ_i b_i`, for `k, k' ≤ n`
  (written `n = d + k`, `n = d' + k'`, as in `count_matched_expectation`).
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

private theorem r_margin (B a b z T : α) :
    B - b * z * T = B - a * z * T + (a - b) * z * T := by
  rw [sub_mul, sub_mul, sub_eq B (a * z * T), add_assoc, sub_eq (a * z * T),
    neg_add_cancel_left, ← sub_eq]

/-- A selection with benefit `B`, set against the average random set of `k'` rows instead of
its own count `k`, gains `(k - k')/n` of the total benefit on top of its count-matched margin.
Python: rfmath.stats.control_size_term
Test: tests/test_rfmath_stats.py::test_control_size_margin -/
theorem control_size_margin (k k' d d' : Nat) (l : List α) (h : len l = d + k)
    (h' : len l = d' + k') (B : α) :
    B - averageBenefit k' l =
      (B - averageBenefit k l) + (natCast k - natCast k') * inv (natCast (len l)) * total l := by
  rw [count_matched_expectation k d l h, count_matched_expectation k' d' l h']
  exact r_margin B _ _ _ _

end

#print axioms control_size_margin

end RidgeFill
