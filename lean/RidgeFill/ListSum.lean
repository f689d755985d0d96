/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.Algebra

/-!
# Finite sums

Two kinds of finite sum, each defined by structural recursion and given `rfl` equation lemmas
(`rw` never unfolds a definition, so every proof rewrites with these):

* `sumBy f l`, the sum of `f x` over the elements `x` of a list `l`;
* `sumTo n f`, the sum of `f i` over the indices `i < n` (vectors are functions `Nat → α`
  read on their first `n` coordinates).

Also `len`, a list length of our own (core's `List.length` does not unfold by `rfl` on every
toolchain), and `allOf p l`, the statement that `p` holds of every element of `l`.
-/

namespace RidgeFill

section
variable {α : Type} [OrderedField α] {β : Type}

/-- The sum of `f x` over the elements of a list. -/
def sumBy (f : β → α) : List β → α
  | [] => 0
  | x :: xs => f x + sumBy f xs

/-- The sum of `f i` over the indices `i < n`. -/
def sumTo : Nat → (Nat → α) → α
  | 0, _ => 0
  | n + 1, f => f n + sumTo n f

/-- The length of a list. -/
def len : List β → Nat
  | [] => 0
  | _ :: xs => len xs + 1

/-- `p` holds of every element of the list. -/
def allOf (p : β → Prop) : List β → Prop
  | [] => True
  | x :: xs => p x ∧ allOf p xs

theorem sumBy_nil (f : β → α) : sumBy f [] = 0 := rfl
theorem sumBy_cons (f : β → α) (x : β) (xs : List β) : sumBy f (x :: xs) = f x + sumBy f xs := rfl
theorem sumTo_zero (f : Nat → α) : sumTo 0 f = 0 := rfl
theorem sumTo_succ (n : Nat) (f : Nat → α) : sumTo (n + 1) f = f n + sumTo n f := rfl
theorem len_nil : len ([] : List β) = 0 := rfl
theorem len_cons (x : β) (xs : List β) : len (x :: xs) = len xs + 1 := rfl
theorem allOf_nil (p : β → Prop) : allOf p [] = True := rfl
theorem allOf_cons (p : β → Prop) (x : β) (xs : List β) :
    allOf p (x :: xs) = (p x ∧ allOf p xs) := rfl

theorem allOf_append_left {p : β → Prop} (xs ys : List β) (h : allOf p (xs ++ ys)) :
    allOf p xs := by
  induction xs with
  | nil => exact True.intro
  | cons x xs ih =>
    rw [List.cons_append, allOf_cons] at h
    exact ⟨h.1, ih h.2⟩

theorem allOf_append_right {p : β → Prop} (xs ys : List β) (h : allOf p (xs ++ ys)) :
    allOf p ys := by
  induction xs with
  | nil => exact h
  | cons x xs ih =>
    rw [List.cons_append, allOf_cons] at h
    exact ih h.2

theorem sumBy_append (f : β → α) (xs ys : List β) :
    sumBy f (xs ++ ys) = sumBy f xs + sumBy f ys := by
  induction xs with
  | nil => rw [List.nil_append, sumBy_nil, zero_add]
  | cons x xs ih => rw [List.cons_append, sumBy_cons, sumBy_cons, ih, add_assoc]

theorem sumBy_add (f g : β → α) (xs : List β) :
    sumBy (fun x => f x + g x) xs = sumBy f xs + sumBy g xs := by
  induction xs with
  | nil => rw [sumBy_nil, sumBy_nil, sumBy_nil, add_zero]
  | cons x xs ih =>
    rw [sumBy_cons, sumBy_cons, sumBy_cons, ih, add_add_add_comm]

theorem sumBy_mul_left (c : α) (f : β → α) (xs : List β) :
    sumBy (fun x => c * f x) xs = c * sumBy f xs := by
  induction xs with
  | nil => rw [sumBy_nil, sumBy_nil, mul_zero]
  | cons x xs ih => rw [sumBy_cons, sumBy_cons, ih, mul_add]

theorem sumBy_nonneg {f : β → α} (xs : List β) (h : allOf (fun x => 0 ≤ f x) xs) :
    0 ≤ sumBy f xs := by
  induction xs with
  | nil => exact le_refl (0 : α)
  | cons x xs ih => rw [sumBy_cons]; exact add_nonneg h.1 (ih h.2)

theorem sumBy_le_sumBy {f g : β → α} (xs : List β) (h : allOf (fun x => f x ≤ g x) xs) :
    sumBy f xs ≤ sumBy g xs := by
  induction xs with
  | nil => exact le_refl (0 : α)
  | cons x xs ih => rw [sumBy_cons, sumBy_cons]; exact add_le_add h.1 (ih h.2)

theorem sumTo_add (n : Nat) (f g : Nat → α) :
    sumTo n (fun i => f i + g i) = sumTo n f + sumTo n g := by
  induction n with
  | zero => exact (add_zero (0 : α)).symm
  | succ n ih =>
    show f n + g n + sumTo n (fun i => f i + g i) = f n + sumTo n f + (g n + sumTo n g)
    rw [ih, add_add_add_comm]

theorem sumTo_mul_left (n : Nat) (c : α) (f : Nat → α) :
    sumTo n (fun i => c * f i) = c * sumTo n f := by
  induction n with
  | zero => exact (mul_zero c).symm
  | succ n ih =>
    show c * f n + sumTo n (fun i => c * f i) = c * (f n + sumTo n f)
    rw [ih, mul_add]

theorem sumTo_neg (n : Nat) (f : Nat → α) :
    sumTo n (fun i => -f i) = -sumTo n f := by
  induction n with
  | zero => exact neg_zero.symm
  | succ n ih =>
    show -f n + sumTo n (fun i => -f i) = -(f n + sumTo n f)
    rw [ih, neg_add]

theorem sumTo_sub (n : Nat) (f g : Nat → α) :
    sumTo n (fun i => f i - g i) = sumTo n f - sumTo n g := by
  have e : (fun i => f i - g i) = (fun i => f i + -g i) := funext (fun i => sub_eq (f i) (g i))
  rw [e, sumTo_add, sumTo_neg, sub_eq]

theorem sumTo_nonneg (n : Nat) (f : Nat → α) (h : ∀ i, 0 ≤ f i) : 0 ≤ sumTo n f := by
  induction n with
  | zero => exact le_refl (0 : α)
  | succ n ih => exact add_nonneg (h n) ih

theorem sumTo_le_sumTo (n : Nat) (f g : Nat → α) (h : ∀ i, f i ≤ g i) :
    sumTo n f ≤ sumTo n g := by
  induction n with
  | zero => exact le_refl (0 : α)
  | succ n ih => exact add_le_add (h n) ih

theorem natCast_add_one (n : Nat) : (natCast (n + 1) : α) = natCast n + 1 := rfl

theorem natCast_one : (natCast 1 : α) = 1 := by
  show natCast 0 + 1 = (1 : α)
  rw [natCast_zero, zero_add]

theorem natCast_len_append (xs ys : List β) :
    (natCast (len (xs ++ ys)) : α) = natCast (len xs) + natCast (len ys) := by
  induction xs with
  | nil => rw [List.nil_append, len_nil, natCast_zero, zero_add]
  | cons x xs ih =>
    rw [List.cons_append, len_cons, len_cons, natCast_add_one, natCast_add_one, ih,
      add_right_comm]

theorem natCast_nonneg (n : Nat) : (0 : α) ≤ natCast n := by
  induction n with
  | zero => exact le_refl (0 : α)
  | succ n ih => exact add_nonneg ih zero_le_one

theorem natCast_succ_pos (n : Nat) : (0 : α) < natCast (n + 1) :=
  lt_of_lt_of_le zero_lt_one (le_add_of_nonneg_left (natCast_nonneg n))

end
end RidgeFill
