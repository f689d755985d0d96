/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.Algebra

/-!
# When exact prefix rows still pay: the break-even count

Paper, Appendix H ("Exact rows and the cost model"). Prefill time grows in a straight line with
the number `E` of exact prefix rows, `τ(E) = τ₀ + E σ`, `σ > 0` the time one exact row adds.
RidgeFill with `E` exact rows is no slower than exact prefill (time `τ_exact`) when
`E ≤ (τ_exact - τ₀) / σ`.

* `break_even_iff` — `τ₀ + E σ ≤ τ_exact ↔ E ≤ (τ_exact - τ₀) / σ`, for every `E`;
* `break_even_floor` — the floor `m` of `x = (τ_exact - τ₀) / σ` (`m ≤ x < m + 1`, what
  `rfmath.cost.break_even_rows` returns) is the most rows that fit: `m` rows fit, `m + 1` do
  not, and every count `E` that fits is below `m + 1` (so, for integers, at most `m`).

Division is written `a * inv σ`. `E` and `m` range over the whole field, so negative floors
(RidgeFill slower than exact even with no exact rows) are covered too.
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

theorem le_sub_of_add_le {a b c : α} (h : a + b ≤ c) : b ≤ c - a := by
  have h2 := add_le_add_right h (-a)
  rw [add_comm a b, add_neg_cancel_right, ← sub_eq] at h2
  exact h2

theorem add_le_of_le_sub {a b c : α} (h : b ≤ c - a) : a + b ≤ c := by
  have h2 := add_le_add_left h a
  rw [← add_sub_assoc, add_comm a c, add_sub_cancel] at h2
  exact h2

/-- `τ₀ + E σ ≤ τ_exact` exactly when `E ≤ (τ_exact - τ₀) / σ`, for `σ > 0`.
Python: rfmath.cost.break_even_rows
Test: tests/test_rfmath_cost.py::test_break_even_iff -/
theorem break_even_iff (tau0 tauExact sigma E : α) (hσ : 0 < sigma) :
    tau0 + E * sigma ≤ tauExact ↔ E ≤ (tauExact - tau0) * inv sigma := by
  constructor
  · intro h
    exact le_mul_inv_of_mul_le hσ (le_sub_of_add_le h)
  · intro h
    have h2 := mul_le_mul_of_nonneg_right h (le_of_lt hσ)
    rw [mul_inv_mul_cancel (ne_of_gt hσ)] at h2
    exact add_le_of_le_sub h2

/-- The floor `m` of `(τ_exact - τ₀) / σ` is the most exact rows that keep RidgeFill no slower
than exact prefill: `m` rows fit, `m + 1` rows do not, and any count that fits is below `m + 1`.
Python: rfmath.cost.break_even_rows
Test: tests/test_rfmath_cost.py::test_break_even_floor -/
theorem break_even_floor (tau0 tauExact sigma m : α) (hσ : 0 < sigma)
    (hm : m ≤ (tauExact - tau0) * inv sigma) (hm1 : (tauExact - tau0) * inv sigma < m + 1) :
    tau0 + m * sigma ≤ tauExact ∧ tauExact < tau0 + (m + 1) * sigma ∧
      ∀ E : α, tau0 + E * sigma ≤ tauExact → E < m + 1 := by
  constructor
  · exact (break_even_iff tau0 tauExact sigma m hσ).mpr hm
  constructor
  · apply lt_of_not_le
    intro h
    exact not_le_of_lt hm1 ((break_even_iff tau0 tauExact sigma (m + 1) hσ).mp h)
  · intro E h
    exact lt_of_le_of_lt ((break_even_iff tau0 tauExact sigma E hσ).mp h) hm1

end

#print axioms break_even_iff
#print axioms break_even_floor

end RidgeFill
