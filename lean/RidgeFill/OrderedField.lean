/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/

/-!
# Ordered fields, stated as a class of laws

`OrderedField α` bundles the operations of a linearly ordered field together with the laws the
proofs in this package use, each as a field of the class. The class has no parent beyond core's
notation classes (`Add`, `Mul`, `Neg`, `Sub`, `LE`, `LT`), so every theorem here depends only on
these laws and on Lean core's logic. `RatCheck.lean` instantiates it with core's `Rat`.

Division is written `a * inv b`; `abs` is a field pinned down by `abs_of_nonneg` and
`abs_of_nonpos`. The numerals `0`, `1` and `2` are the fields `zero`, `one` and `one + one`,
through `OfNat` instances that are `scoped` to namespace `RidgeFill` and of low priority: they
are active only inside `namespace RidgeFill` (every module here), and even there a type with
numerals of its own (`Nat`, `Rat`) keeps them, so they cannot capture another type's literals.
-/

namespace RidgeFill

/-- A linearly ordered field, given by its operations and the laws the proofs use. -/
class OrderedField (α : Type) extends Add α, Mul α, Neg α, Sub α, LE α, LT α where
  zero : α
  one : α
  inv : α → α
  abs : α → α
  add_assoc : ∀ a b c : α, a + b + c = a + (b + c)
  add_comm : ∀ a b : α, a + b = b + a
  zero_add : ∀ a : α, zero + a = a
  add_neg : ∀ a : α, a + -a = zero
  mul_assoc : ∀ a b c : α, a * b * c = a * (b * c)
  mul_comm : ∀ a b : α, a * b = b * a
  one_mul : ∀ a : α, one * a = a
  mul_add : ∀ a b c : α, a * (b + c) = a * b + a * c
  sub_eq : ∀ a b : α, a - b = a + -b
  mul_inv : ∀ a : α, a ≠ zero → a * inv a = one
  zero_ne_one : zero ≠ one
  le_refl : ∀ a : α, a ≤ a
  le_trans : ∀ a b c : α, a ≤ b → b ≤ c → a ≤ c
  le_antisymm : ∀ a b : α, a ≤ b → b ≤ a → a = b
  le_total : ∀ a b : α, a ≤ b ∨ b ≤ a
  lt_iff : ∀ a b : α, a < b ↔ a ≤ b ∧ ¬ b ≤ a
  add_le_add_left : ∀ a b c : α, a ≤ b → c + a ≤ c + b
  mul_nonneg : ∀ a b : α, zero ≤ a → zero ≤ b → zero ≤ a * b
  abs_of_nonneg : ∀ a : α, zero ≤ a → abs a = a
  abs_of_nonpos : ∀ a : α, a ≤ zero → abs a = -a

section
variable {α : Type} [OrderedField α]

scoped instance (priority := low) instOfNatZero : OfNat α (nat_lit 0) := ⟨OrderedField.zero⟩
scoped instance (priority := low) instOfNatOne : OfNat α (nat_lit 1) := ⟨OrderedField.one⟩
scoped instance (priority := low) instOfNatTwo : OfNat α (nat_lit 2) :=
  ⟨OrderedField.one + OrderedField.one⟩

/-- `inv a` is the multiplicative inverse of `a` (its value at `0` is left unspecified). -/
def inv (a : α) : α := OrderedField.inv a

/-- `abs a` is the absolute value of `a`. -/
def abs (a : α) : α := OrderedField.abs a

/-- `natCast n` is `1 + ... + 1` (`n` times) in `α`. -/
def natCast : Nat → α
  | 0 => 0
  | n + 1 => natCast n + 1

/-- `npow a n` is `a * ... * a` (`n` times). -/
def npow (a : α) : Nat → α
  | 0 => 1
  | n + 1 => a * npow a n

theorem two_eq : (2 : α) = 1 + 1 := rfl
theorem natCast_zero : (natCast 0 : α) = 0 := rfl
theorem natCast_succ (n : Nat) : (natCast (n + 1) : α) = natCast n + 1 := rfl
theorem npow_zero (a : α) : npow a 0 = 1 := rfl
theorem npow_succ (a : α) (n : Nat) : npow a (n + 1) = a * npow a n := rfl

theorem add_assoc (a b c : α) : a + b + c = a + (b + c) := OrderedField.add_assoc a b c
theorem add_comm (a b : α) : a + b = b + a := OrderedField.add_comm a b
theorem zero_add (a : α) : 0 + a = a := OrderedField.zero_add a
theorem add_neg (a : α) : a + -a = 0 := OrderedField.add_neg a
theorem mul_assoc (a b c : α) : a * b * c = a * (b * c) := OrderedField.mul_assoc a b c
theorem mul_comm (a b : α) : a * b = b * a := OrderedField.mul_comm a b
theorem one_mul (a : α) : 1 * a = a := OrderedField.one_mul a
theorem mul_add (a b c : α) : a * (b + c) = a * b + a * c := OrderedField.mul_add a b c
theorem sub_eq (a b : α) : a - b = a + -b := OrderedField.sub_eq a b
theorem mul_inv {a : α} (h : a ≠ 0) : a * inv a = 1 := OrderedField.mul_inv a h
theorem zero_ne_one : (0 : α) ≠ 1 := OrderedField.zero_ne_one
theorem le_refl (a : α) : a ≤ a := OrderedField.le_refl a
theorem le_trans {a b c : α} (h₁ : a ≤ b) (h₂ : b ≤ c) : a ≤ c := OrderedField.le_trans a b c h₁ h₂
theorem le_antisymm {a b : α} (h₁ : a ≤ b) (h₂ : b ≤ a) : a = b :=
  OrderedField.le_antisymm a b h₁ h₂
theorem le_total (a b : α) : a ≤ b ∨ b ≤ a := OrderedField.le_total a b
theorem lt_iff (a b : α) : a < b ↔ a ≤ b ∧ ¬ b ≤ a := OrderedField.lt_iff a b
theorem add_le_add_left {a b : α} (h : a ≤ b) (c : α) : c + a ≤ c + b :=
  OrderedField.add_le_add_left a b c h
theorem mul_nonneg {a b : α} (ha : 0 ≤ a) (hb : 0 ≤ b) : 0 ≤ a * b :=
  OrderedField.mul_nonneg a b ha hb
theorem abs_of_nonneg {a : α} (h : 0 ≤ a) : abs a = a := OrderedField.abs_of_nonneg a h
theorem abs_of_nonpos {a : α} (h : a ≤ 0) : abs a = -a := OrderedField.abs_of_nonpos a h

end
end RidgeFill
