/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.OrderedField

/-!
# Rearrangement and order lemmas

Consequences of the `OrderedField` laws that the theorem families use: ring rearrangements
(commuting, cancelling, distributing, negating), inverses, the order's compatibility with `+` and
`*`, and absolute values. Every proof is a short chain of `rw`, `exact` and `apply` steps from the
class's laws (no `ring`, `linarith` or `omega`; see `lean/README.md` for why).
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α]

/-! ## Addition -/

theorem add_zero (a : α) : a + 0 = a := by rw [add_comm]; exact zero_add a

theorem neg_add_self (a : α) : -a + a = 0 := by rw [add_comm]; exact add_neg a

theorem add_left_comm (a b c : α) : a + (b + c) = b + (a + c) := by
  rw [← add_assoc, add_comm a b, add_assoc]

theorem add_right_comm (a b c : α) : a + b + c = a + c + b := by
  rw [add_assoc, add_comm b c, ← add_assoc]

theorem add_add_add_comm (a b c d : α) : a + b + (c + d) = a + c + (b + d) := by
  rw [add_assoc, add_left_comm b c d, ← add_assoc]

theorem add_left_cancel {a b c : α} (h : a + b = a + c) : b = c := by
  have h2 : -a + (a + b) = -a + (a + c) := by rw [h]
  rw [← add_assoc, neg_add_self, zero_add, ← add_assoc, neg_add_self, zero_add] at h2
  exact h2

theorem add_right_cancel {a b c : α} (h : a + c = b + c) : a = b := by
  rw [add_comm a c, add_comm b c] at h
  exact add_left_cancel h

theorem eq_neg_of_add_eq_zero {a b : α} (h : a + b = 0) : a = -b := by
  have h2 : a + b + -b = 0 + -b := by rw [h]
  rw [add_assoc, add_neg, add_zero, zero_add] at h2
  exact h2

theorem neg_neg (a : α) : -(-a) = a := (eq_neg_of_add_eq_zero (add_neg a)).symm

theorem neg_zero : -(0 : α) = 0 := (eq_neg_of_add_eq_zero (add_zero (0 : α))).symm

theorem neg_add (a b : α) : -(a + b) = -a + -b := by
  have h : -a + -b + (a + b) = 0 := by
    rw [add_add_add_comm, neg_add_self, neg_add_self, add_zero]
  exact (eq_neg_of_add_eq_zero h).symm

theorem neg_inj {a b : α} (h : -a = -b) : a = b := by
  rw [← neg_neg a, h, neg_neg]

theorem add_neg_cancel_left (a b : α) : a + (-a + b) = b := by
  rw [← add_assoc, add_neg, zero_add]

theorem neg_add_cancel_left (a b : α) : -a + (a + b) = b := by
  rw [← add_assoc, neg_add_self, zero_add]

theorem add_neg_cancel_right (a b : α) : a + b + -b = a := by
  rw [add_assoc, add_neg, add_zero]

theorem sub_self (a : α) : a - a = 0 := by rw [sub_eq, add_neg]

theorem sub_zero (a : α) : a - 0 = a := by rw [sub_eq, neg_zero, add_zero]

theorem zero_sub (a : α) : 0 - a = -a := by rw [sub_eq, zero_add]

theorem sub_add_cancel (a b : α) : a - b + b = a := by
  rw [sub_eq, add_assoc, neg_add_self, add_zero]

theorem add_sub_cancel (a b : α) : a + b - b = a := by
  rw [sub_eq, add_neg_cancel_right]

theorem neg_sub (a b : α) : -(a - b) = b - a := by
  rw [sub_eq, neg_add, neg_neg, add_comm, ← sub_eq]

theorem sub_eq_zero {a b : α} (h : a - b = 0) : a = b := by
  rw [sub_eq] at h
  have h2 := eq_neg_of_add_eq_zero h
  rw [neg_neg] at h2
  exact h2

theorem eq_of_sub_eq {a b c : α} (h : a - b = c) : a = c + b := by
  rw [← h, sub_add_cancel]

theorem eq_add_of_sub_eq' {a b c : α} (h : a - c = b) : a = c + b := by
  rw [← h, add_comm, sub_add_cancel]

theorem sub_eq_of_eq_add {a b c : α} (h : a = c + b) : a - b = c := by
  rw [h, add_sub_cancel]

theorem sub_sub_cancel (a b : α) : a - (a - b) = b := by
  rw [sub_eq a (a - b), neg_sub, add_comm, sub_add_cancel]

theorem add_sub_assoc (a b c : α) : a + b - c = a + (b - c) := by
  rw [sub_eq, sub_eq, add_assoc]

theorem sub_add_eq_add_sub (a b c : α) : a - b + c = a + c - b := by
  rw [sub_eq, sub_eq, add_right_comm]

theorem sub_sub (a b c : α) : a - b - c = a - (b + c) := by
  rw [sub_eq, sub_eq, sub_eq, neg_add, add_assoc]

theorem add_sub_add_left (a b c : α) : c + a - (c + b) = a - b := by
  rw [sub_eq, sub_eq, neg_add, add_add_add_comm, add_neg, zero_add]

theorem add_sub_add_right (a b c : α) : a + c - (b + c) = a - b := by
  rw [add_comm a c, add_comm b c, add_sub_add_left]

theorem sub_sub_sub_cancel_right (a b c : α) : a - c - (b - c) = a - b := by
  rw [sub_eq a c, sub_eq b c, add_sub_add_right]

theorem add_sub_add_comm (a b c d : α) : a + b - (c + d) = a - c + (b - d) := by
  rw [sub_eq, sub_eq, sub_eq, neg_add, add_add_add_comm]

/-! ## Multiplication -/

theorem mul_one (a : α) : a * 1 = a := by rw [mul_comm]; exact one_mul a

theorem add_mul (a b c : α) : (a + b) * c = a * c + b * c := by
  rw [mul_comm, mul_add, mul_comm c a, mul_comm c b]

theorem mul_left_comm (a b c : α) : a * (b * c) = b * (a * c) := by
  rw [← mul_assoc, mul_comm a b, mul_assoc]

theorem mul_right_comm (a b c : α) : a * b * c = a * c * b := by
  rw [mul_assoc, mul_comm b c, ← mul_assoc]

theorem mul_mul_mul_comm (a b c d : α) : a * b * (c * d) = a * c * (b * d) := by
  rw [mul_assoc, mul_left_comm b c d, ← mul_assoc]

theorem mul_zero (a : α) : a * 0 = 0 := by
  have h : a * 0 + a * 0 = a * 0 + 0 := by rw [← mul_add, add_zero, add_zero]
  exact add_left_cancel h

theorem zero_mul (a : α) : 0 * a = 0 := by rw [mul_comm]; exact mul_zero a

theorem neg_mul (a b : α) : -a * b = -(a * b) := by
  have h : -a * b + a * b = 0 := by rw [← add_mul, neg_add_self, zero_mul]
  exact eq_neg_of_add_eq_zero h

theorem mul_neg (a b : α) : a * -b = -(a * b) := by
  rw [mul_comm, neg_mul, mul_comm]

theorem neg_mul_neg (a b : α) : -a * -b = a * b := by
  rw [neg_mul, mul_neg, neg_neg]

theorem mul_sub (a b c : α) : a * (b - c) = a * b - a * c := by
  rw [sub_eq, sub_eq, mul_add, mul_neg]

theorem sub_mul (a b c : α) : (a - b) * c = a * c - b * c := by
  rw [sub_eq, sub_eq, add_mul, neg_mul]

theorem two_mul (a : α) : (1 + 1) * a = a + a := by rw [add_mul, one_mul]

theorem eq_zero_of_mul_eq_zero_left {a b : α} (ha : a ≠ 0) (h : a * b = 0) : b = 0 := by
  have h2 : inv a * (a * b) = inv a * 0 := by rw [h]
  rw [← mul_assoc, mul_comm (inv a) a, mul_inv ha, one_mul, mul_zero] at h2
  exact h2

theorem mul_ne_zero {a b : α} (ha : a ≠ 0) (hb : b ≠ 0) : a * b ≠ 0 :=
  fun h => hb (eq_zero_of_mul_eq_zero_left ha h)

theorem inv_mul {a : α} (h : a ≠ 0) : inv a * a = 1 := by rw [mul_comm]; exact mul_inv h

theorem one_ne_zero : (1 : α) ≠ 0 := fun h => zero_ne_one h.symm

theorem inv_ne_zero {a : α} (h : a ≠ 0) : inv a ≠ 0 := by
  intro h0
  have h1 := mul_inv h
  rw [h0, mul_zero] at h1
  exact zero_ne_one h1

theorem eq_inv_of_mul_eq_one {a b : α} (ha : a ≠ 0) (h : a * b = 1) : b = inv a := by
  have h2 : inv a * (a * b) = inv a * 1 := by rw [h]
  rw [← mul_assoc, inv_mul ha, one_mul, mul_one] at h2
  exact h2

theorem inv_mul_distrib {a b : α} (ha : a ≠ 0) (hb : b ≠ 0) :
    inv (a * b) = inv a * inv b := by
  have h : a * b * (inv a * inv b) = 1 := by
    rw [mul_mul_mul_comm, mul_inv ha, mul_inv hb, one_mul]
  exact (eq_inv_of_mul_eq_one (mul_ne_zero ha hb) h).symm

theorem mul_inv_cancel_left {a : α} (ha : a ≠ 0) (b : α) : a * (inv a * b) = b := by
  rw [← mul_assoc, mul_inv ha, one_mul]

theorem inv_mul_cancel_left {a : α} (ha : a ≠ 0) (b : α) : inv a * (a * b) = b := by
  rw [← mul_assoc, inv_mul ha, one_mul]

theorem mul_inv_cancel_right {b : α} (hb : b ≠ 0) (a : α) : a * b * inv b = a := by
  rw [mul_assoc, mul_inv hb, mul_one]

theorem mul_inv_mul_cancel {b : α} (hb : b ≠ 0) (a : α) : a * inv b * b = a := by
  rw [mul_assoc, inv_mul hb, mul_one]

theorem inv_one : inv (1 : α) = 1 :=
  (eq_inv_of_mul_eq_one one_ne_zero (mul_one (1 : α))).symm

/-- Cross-multiplication: `a / b = c` when `a = c * b` and `b ≠ 0`. -/
theorem mul_inv_eq_of_eq_mul {a b c : α} (hb : b ≠ 0) (h : a = c * b) : a * inv b = c := by
  rw [h, mul_inv_cancel_right hb]

/-! ## Order -/

theorem add_le_add_right {a b : α} (h : a ≤ b) (c : α) : a + c ≤ b + c := by
  rw [add_comm a c, add_comm b c]; exact add_le_add_left h c

theorem add_le_add {a b c d : α} (h₁ : a ≤ b) (h₂ : c ≤ d) : a + c ≤ b + d :=
  le_trans (add_le_add_right h₁ c) (add_le_add_left h₂ b)

theorem le_of_add_le_add_left {a b c : α} (h : c + a ≤ c + b) : a ≤ b := by
  have h2 := add_le_add_left h (-c)
  rw [neg_add_cancel_left, neg_add_cancel_left] at h2
  exact h2

theorem le_of_add_le_add_right {a b c : α} (h : a + c ≤ b + c) : a ≤ b := by
  rw [add_comm a c, add_comm b c] at h
  exact le_of_add_le_add_left h

theorem sub_nonneg_of_le {a b : α} (h : a ≤ b) : 0 ≤ b - a := by
  have h2 := add_le_add_right h (-a)
  rw [add_neg, ← sub_eq] at h2
  exact h2

theorem sub_nonpos_of_le {a b : α} (h : a ≤ b) : a - b ≤ 0 := by
  have h2 := add_le_add_right h (-b)
  rw [add_neg, ← sub_eq] at h2
  exact h2

theorem le_of_sub_nonneg {a b : α} (h : 0 ≤ b - a) : a ≤ b := by
  have h2 := add_le_add_right h a
  rw [zero_add, sub_add_cancel] at h2
  exact h2

theorem neg_le_neg {a b : α} (h : a ≤ b) : -b ≤ -a := by
  have h2 := add_le_add_right h (-a + -b)
  rw [add_neg_cancel_left, add_left_comm b (-a) (-b), add_neg, add_zero] at h2
  exact h2

theorem neg_nonneg_of_nonpos {a : α} (h : a ≤ 0) : 0 ≤ -a := by
  have h2 := neg_le_neg h
  rw [neg_zero] at h2
  exact h2

theorem neg_nonpos_of_nonneg {a : α} (h : 0 ≤ a) : -a ≤ 0 := by
  have h2 := neg_le_neg h
  rw [neg_zero] at h2
  exact h2

theorem le_neg_of_le_neg {a b : α} (h : a ≤ -b) : b ≤ -a := by
  have h2 := neg_le_neg h
  rw [neg_neg] at h2
  exact h2

theorem neg_le_of_neg_le {a b : α} (h : -a ≤ b) : -b ≤ a := by
  have h2 := neg_le_neg h
  rw [neg_neg] at h2
  exact h2

theorem add_nonneg {a b : α} (ha : 0 ≤ a) (hb : 0 ≤ b) : 0 ≤ a + b := by
  have h := add_le_add ha hb
  rw [add_zero] at h
  exact h

theorem le_add_of_nonneg_right {a b : α} (h : 0 ≤ b) : a ≤ a + b := by
  have h2 := add_le_add_left h a
  rw [add_zero] at h2
  exact h2

theorem sub_le_self {a b : α} (h : 0 ≤ b) : a - b ≤ a := by
  have h2 := add_le_add_left (neg_nonpos_of_nonneg h) a
  rw [add_zero, ← sub_eq] at h2
  exact h2

theorem le_add_of_nonneg_left {a b : α} (h : 0 ≤ b) : a ≤ b + a := by
  rw [add_comm]; exact le_add_of_nonneg_right h

theorem mul_le_mul_of_nonneg_left {a b c : α} (h : a ≤ b) (hc : 0 ≤ c) : c * a ≤ c * b := by
  have h2 := mul_nonneg hc (sub_nonneg_of_le h)
  rw [mul_sub] at h2
  exact le_of_sub_nonneg h2

theorem mul_le_mul_of_nonneg_right {a b c : α} (h : a ≤ b) (hc : 0 ≤ c) : a * c ≤ b * c := by
  rw [mul_comm a c, mul_comm b c]; exact mul_le_mul_of_nonneg_left h hc

theorem mul_le_mul {a b c d : α} (h₁ : a ≤ b) (h₂ : c ≤ d) (hc : 0 ≤ c) (hb : 0 ≤ b) :
    a * c ≤ b * d :=
  le_trans (mul_le_mul_of_nonneg_right h₁ hc) (mul_le_mul_of_nonneg_left h₂ hb)

theorem mul_nonneg_of_nonpos_of_nonpos {a b : α} (ha : a ≤ 0) (hb : b ≤ 0) : 0 ≤ a * b := by
  have h := mul_nonneg (neg_nonneg_of_nonpos ha) (neg_nonneg_of_nonpos hb)
  rw [neg_mul_neg] at h
  exact h

theorem mul_nonpos_of_nonneg_of_nonpos {a b : α} (ha : 0 ≤ a) (hb : b ≤ 0) : a * b ≤ 0 := by
  have h := mul_nonneg ha (neg_nonneg_of_nonpos hb)
  rw [mul_neg] at h
  have h2 := neg_le_neg h
  rw [neg_neg, neg_zero] at h2
  exact h2

theorem mul_self_nonneg (a : α) : 0 ≤ a * a := by
  cases le_total 0 a with
  | inl h => exact mul_nonneg h h
  | inr h => exact mul_nonneg_of_nonpos_of_nonpos h h

theorem zero_le_one : (0 : α) ≤ 1 := by
  have h := mul_self_nonneg (1 : α)
  rw [mul_one] at h
  exact h

theorem not_one_le_zero : ¬ (1 : α) ≤ 0 :=
  fun h => zero_ne_one (le_antisymm zero_le_one h)

theorem le_of_lt {a b : α} (h : a < b) : a ≤ b := ((lt_iff a b).mp h).1

theorem not_le_of_lt {a b : α} (h : a < b) : ¬ b ≤ a := ((lt_iff a b).mp h).2

theorem lt_of_le_of_not_le {a b : α} (h₁ : a ≤ b) (h₂ : ¬ b ≤ a) : a < b :=
  (lt_iff a b).mpr ⟨h₁, h₂⟩

theorem lt_of_not_le {a b : α} (h : ¬ b ≤ a) : a < b := by
  cases le_total a b with
  | inl h2 => exact lt_of_le_of_not_le h2 h
  | inr h2 => exact absurd h2 h

theorem lt_of_le_of_ne {a b : α} (h₁ : a ≤ b) (h₂ : a ≠ b) : a < b :=
  lt_of_le_of_not_le h₁ (fun h => h₂ (le_antisymm h₁ h))

theorem ne_of_lt {a b : α} (h : a < b) : a ≠ b :=
  fun e => not_le_of_lt h (by rw [e]; exact le_refl b)

theorem ne_of_gt {a b : α} (h : a < b) : b ≠ a := fun e => ne_of_lt h e.symm

theorem zero_lt_one : (0 : α) < 1 := lt_of_le_of_not_le zero_le_one not_one_le_zero

theorem lt_of_lt_of_le {a b c : α} (h₁ : a < b) (h₂ : b ≤ c) : a < c :=
  lt_of_le_of_not_le (le_trans (le_of_lt h₁) h₂)
    (fun h => not_le_of_lt h₁ (le_trans h₂ h))

theorem lt_of_le_of_lt {a b c : α} (h₁ : a ≤ b) (h₂ : b < c) : a < c :=
  lt_of_le_of_not_le (le_trans h₁ (le_of_lt h₂))
    (fun h => not_le_of_lt h₂ (le_trans h h₁))

theorem add_pos_of_pos_of_nonneg {a b : α} (ha : 0 < a) (hb : 0 ≤ b) : 0 < a + b := by
  have h := le_add_of_nonneg_right (a := a) hb
  exact lt_of_lt_of_le ha h

theorem sub_pos_of_lt {a b : α} (h : a < b) : 0 < b - a :=
  lt_of_le_of_ne (sub_nonneg_of_le (le_of_lt h))
    (fun e => ne_of_lt h (sub_eq_zero e.symm).symm)

theorem mul_pos {a b : α} (ha : 0 < a) (hb : 0 < b) : 0 < a * b :=
  lt_of_le_of_ne (mul_nonneg (le_of_lt ha) (le_of_lt hb))
    (fun e => ne_of_gt hb (eq_zero_of_mul_eq_zero_left (ne_of_gt ha) e.symm))

theorem inv_pos {a : α} (ha : 0 < a) : 0 < inv a := by
  apply lt_of_not_le
  intro h
  have h2 := mul_nonpos_of_nonneg_of_nonpos (le_of_lt ha) h
  rw [mul_inv (ne_of_gt ha)] at h2
  exact not_one_le_zero h2

theorem inv_nonneg {a : α} (ha : 0 < a) : 0 ≤ inv a := le_of_lt (inv_pos ha)

theorem le_of_mul_le_mul_left {a b c : α} (h : c * a ≤ c * b) (hc : 0 < c) : a ≤ b := by
  have h2 := mul_le_mul_of_nonneg_left h (inv_nonneg hc)
  rw [inv_mul_cancel_left (ne_of_gt hc), inv_mul_cancel_left (ne_of_gt hc)] at h2
  exact h2

theorem le_mul_inv_of_mul_le {a b c : α} (hc : 0 < c) (h : a * c ≤ b) : a ≤ b * inv c := by
  have h2 := mul_le_mul_of_nonneg_right h (inv_nonneg hc)
  rw [mul_inv_cancel_right (ne_of_gt hc)] at h2
  exact h2

theorem mul_inv_le_of_le_mul {a b c : α} (hc : 0 < c) (h : a ≤ b * c) : a * inv c ≤ b := by
  have h2 := mul_le_mul_of_nonneg_right h (inv_nonneg hc)
  rw [mul_inv_cancel_right (ne_of_gt hc)] at h2
  exact h2

theorem le_one_of_le {a b : α} (hb : 0 < b) (h : a ≤ b) : a * inv b ≤ 1 := by
  apply mul_inv_le_of_le_mul hb
  rw [one_mul]; exact h

/-! ## Absolute value -/

theorem abs_nonneg (a : α) : 0 ≤ abs a := by
  cases le_total 0 a with
  | inl h => rw [abs_of_nonneg h]; exact h
  | inr h => rw [abs_of_nonpos h]; exact neg_nonneg_of_nonpos h

theorem le_abs_self (a : α) : a ≤ abs a := by
  cases le_total 0 a with
  | inl h => rw [abs_of_nonneg h]; exact le_refl a
  | inr h => rw [abs_of_nonpos h]; exact le_trans h (neg_nonneg_of_nonpos h)

theorem neg_le_abs_self (a : α) : -a ≤ abs a := by
  cases le_total 0 a with
  | inl h => rw [abs_of_nonneg h]; exact le_trans (neg_nonpos_of_nonneg h) h
  | inr h => rw [abs_of_nonpos h]; exact le_refl (-a)

theorem abs_le_of {a c : α} (h₁ : a ≤ c) (h₂ : -a ≤ c) : abs a ≤ c := by
  cases le_total 0 a with
  | inl h => rw [abs_of_nonneg h]; exact h₁
  | inr h => rw [abs_of_nonpos h]; exact h₂

theorem abs_neg (a : α) : abs (-a) = abs a := by
  cases le_total 0 a with
  | inl h => rw [abs_of_nonpos (neg_nonpos_of_nonneg h), neg_neg, abs_of_nonneg h]
  | inr h => rw [abs_of_nonneg (neg_nonneg_of_nonpos h), abs_of_nonpos h]

theorem abs_sub_comm (a b : α) : abs (a - b) = abs (b - a) := by
  rw [← neg_sub, abs_neg]

/-- The triangle inequality. -/
theorem abs_add_le (a b : α) : abs (a + b) ≤ abs a + abs b := by
  apply abs_le_of
  · exact add_le_add (le_abs_self a) (le_abs_self b)
  · rw [neg_add]; exact add_le_add (neg_le_abs_self a) (neg_le_abs_self b)

theorem abs_mul_of_nonneg {c : α} (hc : 0 ≤ c) (a : α) : abs (c * a) = c * abs a := by
  cases le_total 0 a with
  | inl h => rw [abs_of_nonneg h, abs_of_nonneg (mul_nonneg hc h)]
  | inr h => rw [abs_of_nonpos h, abs_of_nonpos (mul_nonpos_of_nonneg_of_nonpos hc h), mul_neg]

theorem abs_mul (a b : α) : abs (a * b) = abs a * abs b := by
  cases le_total 0 a with
  | inl h => rw [abs_mul_of_nonneg h, abs_of_nonneg h]
  | inr h =>
    have e : a * b = -(-a * b) := by rw [neg_mul, neg_neg]
    rw [e, abs_neg, abs_mul_of_nonneg (neg_nonneg_of_nonpos h), abs_of_nonpos h]

theorem abs_of_pos {a : α} (h : 0 < a) : abs a = a := abs_of_nonneg (le_of_lt h)

end
end RidgeFill
