/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.TailShare

/-!
# The filled share lies in [0, 1]

Paper, §2.3 and Appendix H: `ρ = Σ_filled w_j / Σ_j w_j`, the filled rows' share of the weight
in the state, is a share. `rfmath.gating.filled_share` promises a value in `[0, 1]`; this is the
statement behind that promise.

* `rho_mem_unit` — for a nonempty prompt whose gates all lie in `[0, 1]`, `0 ≤ ρ ≤ 1`.

Proof sketch: the total weight of a nonempty prompt is at least the last row's weight `1`
(`one_le_totalWeight_cons`), and `0 ≤ Σ_filled w_j ≤ Σ_j w_j` because every weight is a product
of gates in `[0, 1]` (`filledWeight_nonneg`, `filledWeight_le_totalWeight`).
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

/-- For a nonempty prompt whose gates all lie in `[0, 1]`, the filled share `ρ` lies in `[0, 1]`.
Python: rfmath.gating.filled_share
Test: tests/test_rfmath_gating.py::test_rho_mem_unit -/
theorem rho_mem_unit (r : Row α) (rs : List (Row α)) (hg : allOf (gateIn 1) (r :: rs)) :
    0 ≤ rho (r :: rs) ∧ rho (r :: rs) ≤ 1 := by
  have hT := one_le_totalWeight_cons r rs hg
  have hpos : 0 < totalWeight (r :: rs) := lt_of_lt_of_le zero_lt_one hT
  constructor
  · rw [rho_def]
    exact mul_nonneg (filledWeight_nonneg (r :: rs) hg) (inv_nonneg hpos)
  · rw [rho_def]
    exact le_one_of_le hpos (filledWeight_le_totalWeight (r :: rs) hg)

end

#print axioms rho_mem_unit

end RidgeFill
