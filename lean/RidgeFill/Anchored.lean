/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.Algebra

/-!
# The anchored fill: ridge shrunk toward the identity, one coordinate

Beyond the paper (`rfmath.ridge.solve_anchored_moments`): the anchored map minimises
`Σ_t ‖y_t - (A x_t + b)‖² + α ‖A - I‖²_F`, so as `α` grows it tends to the identity fill plus
the mean shift, not to zero. With centred data and one coordinate, written with the moments
`Sxx = Σ x²`, `Sxy = Σ x y`, `Syy = Σ y²`, the objective of a slope `a` is

  `J(a) = Syy - 2 a Sxy + a² Sxx + α (a - 1)²`   (`anchoredObjective`),

and its minimiser is `a* = (Sxy + α) / (Sxx + α) = 1 + (Sxy - Sxx) / (Sxx + α)`, the scalar case
of `A = I + (Y - X)ᵀ X (Xᵀ X + α I)⁻¹`. Everything is stated division-free, for any `s` with
`(Sxx + α) s = Sxy + α`:

* `anchored_objective_gap` — `J(a) - J(s) = (Sxx + α) (a - s)²` for every `a`;
* `anchored_minimises` — if `Sxx + α ≥ 0`, `J(s) ≤ J(a)` for every `a`;
* `anchored_le_identity` — in particular `J(s) ≤ J(1)`: the anchored fill never fits the
  calibration moments worse than the identity fill with the mean shift (`a = 1`, where the
  penalty vanishes: `anchoredObjective_one`).

Squares are written as products. The polynomial identities are proved over plain variables
with no subtraction (`a = (a - s) + s` is substituted back with `sub_add_cancel`), so no step
needs an AC-`simp` to cancel a term against its negation.
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

/-- The anchored objective of a slope `a`, from the centred moments:
`Syy - 2 a Sxy + a² Sxx + α (a - 1)² = Σ_t (y_t - a x_t)² + α (a - 1)²`. -/
def anchoredObjective (Sxx Sxy Syy alpha a : α) : α :=
  Syy - 2 * a * Sxy + a * a * Sxx + alpha * ((a - 1) * (a - 1))

theorem anchoredObjective_def (Sxx Sxy Syy alpha a : α) :
    anchoredObjective Sxx Sxy Syy alpha a =
      Syy - 2 * a * Sxy + a * a * Sxx + alpha * ((a - 1) * (a - 1)) := rfl

/-- At the identity `a = 1` the penalty vanishes: `J(1) = Syy - 2 Sxy + Sxx = Σ_t (y_t - x_t)²`,
the residual of the identity fill with the mean shift. -/
theorem anchoredObjective_one (Sxx Sxy Syy alpha : α) :
    anchoredObjective Sxx Sxy Syy alpha 1 = Syy - 2 * Sxy + Sxx := by
  rw [anchoredObjective_def, sub_self, mul_zero (0 : α), mul_zero alpha, add_zero, mul_one (2 : α),
    one_mul (1 : α), one_mul Sxx]

/-- The completed square over plain variables: `K d² + 2 (d + s) K s = K (d + s)² + K s²`. -/
private theorem anchored_square_plain (K d s : α) :
    K * (d * d) + 2 * (d + s) * (K * s) = K * ((d + s) * (d + s)) + K * (s * s) := by
  rw [two_eq]
  simp only [mul_add, add_mul, one_mul]
  rw [mul_left_comm d K s, mul_left_comm s K s, mul_comm s d]
  generalize K * (d * d) = p
  generalize K * (d * s) = q
  generalize K * (s * s) = r
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

/-- `K (a - s)² + 2 a K s = K a² + K s²`. -/
theorem anchored_square (K a s : α) :
    K * ((a - s) * (a - s)) + 2 * a * (K * s) = K * (a * a) + K * (s * s) := by
  have h := anchored_square_plain K (a - s) s
  rw [sub_add_cancel] at h
  exact h

private theorem anchored_two_sq (K s : α) : 2 * s * (K * s) = K * (s * s) + K * (s * s) := by
  rw [two_eq, mul_assoc, two_mul, mul_left_comm s K s]

private theorem anchored_cancel (Syy P Q R T : α) :
    Syy - P + Q + R + (P + T) = Syy + Q + R + T := by
  rw [add_comm P T, ← add_assoc, add_right_comm (Syy - P + Q + R) T P,
    add_right_comm (Syy - P + Q) R P, add_right_comm (Syy - P) Q P, sub_add_cancel]

/-- The objective with the linear term moved across: `J(a) + 2 a (Sxy + α) = (Syy + α) +
(Sxx + α) a²`. -/
theorem anchoredObjective_add (Sxx Sxy Syy alpha a : α) :
    anchoredObjective Sxx Sxy Syy alpha a + 2 * a * (Sxy + alpha) =
      Syy + alpha + (Sxx + alpha) * (a * a) := by
  have hq := anchored_square alpha a 1
  rw [mul_one (1 : α), mul_one alpha] at hq
  rw [anchoredObjective_def, mul_add (2 * a) Sxy alpha, anchored_cancel,
    add_assoc (Syy + a * a * Sxx), hq, add_mul Sxx alpha (a * a), mul_comm (a * a) Sxx]
  generalize Sxx * (a * a) = p
  generalize alpha * (a * a) = q
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

private theorem anchored_regroup (P Q R S : α) : P + Q + R + S = P + R + (Q + S) := by
  rw [add_right_comm P Q R, add_assoc]

private theorem anchored_gap_plain {Ja Js C P Q X Y Z : α} (ha : Ja + X = C + P)
    (hs : Js + Y = C + Q) (hsq : Z + X = P + Q) (h2 : Y = Q + Q) : Ja = Z + Js := by
  have e : Ja + X + Y = Z + Js + X + Y := by
    rw [ha, anchored_regroup Z Js X Y, hsq, hs, h2]
    simp only [add_comm, add_assoc, add_left_comm] <;> rfl
  exact add_right_cancel (add_right_cancel e)

/-- The anchored objective's exact gap: for `s` with `(Sxx + α) s = Sxy + α` (the anchored slope
`(Sxy + α) / (Sxx + α)`), `J(a) - J(s) = (Sxx + α) (a - s)²` for every slope `a`.
Python: rfmath.ridge.solve_anchored_moments
Test: tests/test_rfmath_anchored.py::test_anchored_objective_gap -/
theorem anchored_objective_gap (Sxx Sxy Syy alpha a s : α)
    (hs : (Sxx + alpha) * s = Sxy + alpha) :
    anchoredObjective Sxx Sxy Syy alpha a - anchoredObjective Sxx Sxy Syy alpha s =
      (Sxx + alpha) * ((a - s) * (a - s)) := by
  apply sub_eq_of_eq_add
  have ha := anchoredObjective_add Sxx Sxy Syy alpha a
  have hs' := anchoredObjective_add Sxx Sxy Syy alpha s
  rw [← hs] at ha
  rw [← hs] at hs'
  exact anchored_gap_plain ha hs' (anchored_square _ a s) (anchored_two_sq _ s)

/-- The anchored slope minimises the anchored objective: if `Sxx + α ≥ 0` and
`(Sxx + α) s = Sxy + α`, then `J(s) ≤ J(a)` for every slope `a`.
Python: rfmath.ridge.solve_anchored_moments
Test: tests/test_rfmath_anchored.py::test_anchored_minimises -/
theorem anchored_minimises (Sxx Sxy Syy alpha s : α) (hs : (Sxx + alpha) * s = Sxy + alpha)
    (hK : 0 ≤ Sxx + alpha) (a : α) :
    anchoredObjective Sxx Sxy Syy alpha s ≤ anchoredObjective Sxx Sxy Syy alpha a := by
  apply le_of_sub_nonneg
  rw [anchored_objective_gap Sxx Sxy Syy alpha a s hs]
  exact mul_nonneg hK (mul_self_nonneg (a - s))

/-- The anchored fill never fits the calibration moments worse than the identity fill with the
mean shift (`a = 1`, where the penalty is zero): `J(s) ≤ J(1)`.
Python: rfmath.ridge.solve_anchored_moments
Test: tests/test_rfmath_anchored.py::test_anchored_le_identity -/
theorem anchored_le_identity (Sxx Sxy Syy alpha s : α) (hs : (Sxx + alpha) * s = Sxy + alpha)
    (hK : 0 ≤ Sxx + alpha) :
    anchoredObjective Sxx Sxy Syy alpha s ≤ anchoredObjective Sxx Sxy Syy alpha 1 :=
  anchored_minimises Sxx Sxy Syy alpha s hs hK 1

end

#print axioms anchored_objective_gap
#print axioms anchored_minimises
#print axioms anchored_le_identity

end RidgeFill
