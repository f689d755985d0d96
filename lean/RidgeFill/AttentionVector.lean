/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.AttentionInfluence
import RidgeFill.GdnContraction

/-!
# How much one row's score can move a vector attention output

Paper, §2.4 ("Why attention"): "Let `V` be the largest value norm among the rows query `i`
attends to. [...] If row `j`'s attention score changes by `ε`, the output changes by at most
`2 V a_ij (e^|ε| - 1)`." `AttentionInfluence` proves this for scalar values; here the values are
vectors (`Nat → α`, read on their first `n` coordinates) and the norm is Euclidean. Everything
is stated with squared norms, so no square root is needed:

* `output_score_change_normSq_le` — if every value has `|v_i|² ≤ V²`, multiplying row `j`'s
  score by `f > 0` moves the output by `|Δo|² ≤ (2 V a_j (E - 1))²`, for every `E ≥ max(f, 1/f)`
  (so for `E = e^|ε|`, `f = e^ε`).

The attention output is the scalar output of `AttentionInfluence` taken coordinate by coordinate
(`outputVec rows c = output (atCoord c rows)`); the weights do not depend on the coordinate.

Proof sketch: `Δo = Σ_i (a'_i - a_i) v_i`. The squared triangle inequality
(`normSq_add_le`: `|x|² ≤ P²`, `|y|² ≤ Q²` give `|x + y|² ≤ (P + Q)²`, from Cauchy–Schwarz
without roots, `dot_le_of_normSq_le`) bounds `|Δo|²` by `(V Σ_i |a'_i - a_i|)²`, and
`weight_change_le` bounds `Σ_i |a'_i - a_i| ≤ 2 a_j (E - 1)`.
-/

namespace RidgeFill

/-- One key/value row with a vector value: its score `e = exp(s)` and its value `v`. -/
structure VecRow (α : Type) where
  score : α
  value : Nat → α

section
variable {α : Type} [OrderedField α]

/-! ## Squared norms: Cauchy–Schwarz and the triangle inequality without roots -/

theorem dot_comm (n : Nat) (x y : Nat → α) : dot n x y = dot n y x := by
  have e : (fun i => x i * y i) = (fun i => y i * x i) := funext (fun i => mul_comm (x i) (y i))
  rw [dot_def, dot_def, e]

theorem mul_self_eq_zero {a : α} (h : a * a = 0) : a = 0 := by
  cases Classical.em (a = 0) with
  | inl h0 => exact h0
  | inr h0 => exact absurd h (mul_ne_zero h0 h0)

/-- A vector of squared norm `≤ 0` is orthogonal to everything (its coordinates are `0`). -/
theorem dot_eq_zero_of_normSq_nonpos (n : Nat) (x y : Nat → α) (h : normSq n x ≤ 0) :
    dot n x y = 0 := by
  induction n with
  | zero => rfl
  | succ n ih =>
    have hs : normSq (n + 1) x = x n * x n + normSq n x := rfl
    rw [hs] at h
    have hx : x n * x n ≤ 0 := le_trans (le_add_of_nonneg_right (normSq_nonneg n x)) h
    have hr : normSq n x ≤ 0 := le_trans (le_add_of_nonneg_left (mul_self_nonneg (x n))) h
    have hx0 : x n = 0 := mul_self_eq_zero (le_antisymm hx (mul_self_nonneg (x n)))
    have hd : dot (n + 1) x y = x n * y n + dot n x y := rfl
    rw [hd, ih hr, hx0, zero_mul, add_zero]

private theorem sq_lin (a b x y : α) :
    (b * x - a * y) * (b * x - a * y) =
      b * b * (x * x) + (-(a * b + a * b) * (x * y) + a * a * (y * y)) := by
  rw [neg_mul, add_mul, sub_mul, mul_sub, mul_sub, mul_mul_mul_comm b x b x,
    mul_mul_mul_comm a y a y, mul_mul_mul_comm b x a y, mul_mul_mul_comm a y b x, mul_comm b a,
    mul_comm y x]
  generalize b * b * (x * x) = p
  generalize a * a * (y * y) = q
  generalize a * b * (x * y) = m
  simp only [sub_eq, neg_add, neg_neg, add_comm, add_assoc, add_left_comm] <;> rfl

/-- `|b x - a y|² = b² |x|² - 2 a b (x·y) + a² |y|²`. -/
theorem normSq_lin (n : Nat) (a b : α) (x y : Nat → α) :
    normSq n (fun i => b * x i - a * y i) =
      b * b * normSq n x + (-(a * b + a * b) * dot n x y + a * a * normSq n y) := by
  have e : (fun i => (b * x i - a * y i) * (b * x i - a * y i)) =
      (fun i => b * b * (x i * x i) + (-(a * b + a * b) * (x i * y i) + a * a * (y i * y i))) :=
    funext (fun i => sq_lin a b (x i) (y i))
  rw [normSq_def, dot_def, e, sumTo_add, sumTo_add, sumTo_mul_left, sumTo_mul_left,
    sumTo_mul_left]
  rfl

private theorem r_cs (p q m c : α) (hp : p ≤ c) (hq : q ≤ c) (h : 0 ≤ p + (-(m + m) + q)) :
    m + m ≤ c + c := by
  have h1 : 0 ≤ c + (-(m + m) + c) := le_trans h (add_le_add hp (add_le_add_left hq _))
  rw [add_comm (-(m + m)) c, ← add_assoc, ← sub_eq] at h1
  exact le_of_sub_nonneg h1

/-- Cauchy–Schwarz without roots: `|x|² ≤ a²`, `|y|² ≤ b²`, `a, b ≥ 0` give `x·y ≤ a b`. -/
theorem dot_le_of_normSq_le (n : Nat) (a b : α) (x y : Nat → α) (ha : 0 ≤ a) (hb : 0 ≤ b)
    (hx : normSq n x ≤ a * a) (hy : normSq n y ≤ b * b) : dot n x y ≤ a * b := by
  cases Classical.em (a * b = 0) with
  | inl hab =>
    cases Classical.em (a = 0) with
    | inl ha0 =>
      rw [ha0, mul_zero] at hx
      rw [dot_eq_zero_of_normSq_nonpos n x y hx, hab]
      exact le_refl _
    | inr ha0 =>
      have hb0 : b = 0 := eq_zero_of_mul_eq_zero_left ha0 hab
      rw [hb0, mul_zero] at hy
      rw [dot_comm, dot_eq_zero_of_normSq_nonpos n y x hy, hab]
      exact le_refl _
  | inr hab =>
    have hc : 0 < a * b := lt_of_le_of_ne (mul_nonneg ha hb) (fun e => hab e.symm)
    -- 0 ≤ |b x - a y|² = b²|x|² - 2ab (x·y) + a²|y|² ≤ 2 (ab)² - 2ab (x·y)
    have h0 := normSq_nonneg n (fun i => b * x i - a * y i)
    rw [normSq_lin n a b x y, neg_mul, add_mul] at h0
    have hp : b * b * normSq n x ≤ a * b * (a * b) := by
      have h1 := mul_le_mul_of_nonneg_left hx (mul_self_nonneg b)
      rw [mul_mul_mul_comm b b a a, mul_comm b a] at h1
      exact h1
    have hq : a * a * normSq n y ≤ a * b * (a * b) := by
      have h1 := mul_le_mul_of_nonneg_left hy (mul_self_nonneg a)
      rw [mul_mul_mul_comm a a b b] at h1
      exact h1
    have h2 := r_cs _ _ _ _ hp hq h0
    rw [← two_mul (a * b * dot n x y), ← two_mul (a * b * (a * b))] at h2
    have h3 := le_of_mul_le_mul_left h2 (add_pos_of_pos_of_nonneg zero_lt_one zero_le_one)
    exact le_of_mul_le_mul_left h3 hc

private theorem sq_add (x y : α) : (x + y) * (x + y) = x * x + ((1 + 1) * (x * y) + y * y) := by
  rw [add_mul, mul_add, mul_add, two_mul, mul_comm y x]
  generalize x * x = p
  generalize x * y = m
  generalize y * y = q
  simp only [add_comm, add_assoc, add_left_comm] <;> rfl

/-- `|x + y|² = |x|² + 2 x·y + |y|²`. -/
theorem normSq_add (n : Nat) (x y : Nat → α) :
    normSq n (fun i => x i + y i) = normSq n x + ((1 + 1) * dot n x y + normSq n y) := by
  have e : (fun i => (x i + y i) * (x i + y i)) =
      (fun i => x i * x i + ((1 + 1) * (x i * y i) + y i * y i)) :=
    funext (fun i => sq_add (x i) (y i))
  rw [normSq_def, dot_def, e, sumTo_add, sumTo_add, sumTo_mul_left]
  rfl

/-- The triangle inequality without roots: `|x|² ≤ P²`, `|y|² ≤ Q²` give `|x + y|² ≤ (P + Q)²`. -/
theorem normSq_add_le (n : Nat) (P Q : α) (x y : Nat → α) (hP : 0 ≤ P) (hQ : 0 ≤ Q)
    (hx : normSq n x ≤ P * P) (hy : normSq n y ≤ Q * Q) :
    normSq n (fun i => x i + y i) ≤ (P + Q) * (P + Q) := by
  have hd := dot_le_of_normSq_le n P Q x y hP hQ hx hy
  have h := add_le_add hx
    (add_le_add (mul_le_mul_of_nonneg_left hd (add_nonneg zero_le_one zero_le_one)) hy)
  rw [normSq_add, sq_add P Q]
  exact h

theorem abs_mul_abs_self (a : α) : abs a * abs a = a * a := by
  rw [← abs_mul, abs_of_nonneg (mul_self_nonneg a)]

/-- `|t v|² ≤ (|V| |t|)²` when `|v|² ≤ V²`. -/
theorem normSq_smul_le (n : Nat) (t V : α) (v : Nat → α) (hv : normSq n v ≤ V * V) :
    normSq n (fun i => t * v i) ≤ abs V * abs t * (abs V * abs t) := by
  rw [normSq_smul n t v, mul_mul_mul_comm (abs V) (abs t) (abs V) (abs t), abs_mul_abs_self,
    abs_mul_abs_self, mul_comm (V * V) (t * t)]
  exact mul_le_mul_of_nonneg_left hv (mul_self_nonneg t)

theorem normSq_zero (n : Nat) : normSq n (fun _ => (0 : α)) = 0 := by
  induction n with
  | zero => rfl
  | succ n ih =>
    show (0 : α) * 0 + normSq n (fun _ => (0 : α)) = 0
    rw [ih, mul_zero, add_zero]

/-! ## Rows with vector values -/

/-- The row's score is positive. -/
def vScorePos (r : VecRow α) : Prop := 0 < r.score

/-- The row's value has `|v|² ≤ V²` (first `n` coordinates). -/
def normLe (n : Nat) (V : α) (r : VecRow α) : Prop := normSq n r.value ≤ V * V

/-- `Σ_i e_i`, the softmax denominator. -/
def vScoreSum (rows : List (VecRow α)) : α := sumBy (fun r => r.score) rows

/-- Coordinate `c` of every row's value, as scalar rows with the same scores. -/
def atCoord (c : Nat) : List (VecRow α) → List (AttnRow α)
  | [] => []
  | r :: rs => AttnRow.mk r.score (r.value c) :: atCoord c rs

/-- The attention output `Σ_i a_i v_i`, a vector: coordinate `c` is the scalar output of the
rows' coordinate `c`. -/
def outputVec (rows : List (VecRow α)) : Nat → α := fun c => output (atCoord c rows)

/-- Coordinate `c` of `Σ_i (e_i z' - e_i z) v_i`: how rows that keep their score move the
output when the normaliser changes from `z` to `z'`. -/
def diffVec (z' z : α) (xs : List (VecRow α)) : Nat → α :=
  fun c => outputWith z' (atCoord c xs) - outputWith z (atCoord c xs)

/-- `Σ_i |e_i z' - e_i z|`, those rows' share of the L1 change of the weights. -/
def wdiff (z' z : α) (xs : List (VecRow α)) : α :=
  sumBy (fun r => abs (r.score * z' - r.score * z)) xs

theorem atCoord_cons (c : Nat) (r : VecRow α) (rs : List (VecRow α)) :
    atCoord c (r :: rs) = AttnRow.mk r.score (r.value c) :: atCoord c rs := rfl
theorem outputVec_apply (rows : List (VecRow α)) (c : Nat) :
    outputVec rows c = output (atCoord c rows) := rfl

theorem atCoord_split (c : Nat) (pre post : List (VecRow α)) (s : α) (w : Nat → α) :
    atCoord c (pre ++ VecRow.mk s w :: post) =
      atCoord c pre ++ AttnRow.mk s (w c) :: atCoord c post := by
  induction pre with
  | nil => rfl
  | cons r rs ih => rw [List.cons_append, atCoord_cons, atCoord_cons, ih, List.cons_append]

theorem scoreSum_atCoord (c : Nat) (rows : List (VecRow α)) :
    scoreSum (atCoord c rows) = vScoreSum rows := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    show r.score + scoreSum (atCoord c rs) = r.score + vScoreSum rs
    rw [ih]

theorem sumBy_atCoord_abs (c : Nat) (z' z : α) (rows : List (VecRow α)) :
    sumBy (fun r => abs (r.score * z' - r.score * z)) (atCoord c rows) = wdiff z' z rows := by
  induction rows with
  | nil => rfl
  | cons r rs ih =>
    show abs (r.score * z' - r.score * z) +
        sumBy (fun r => abs (r.score * z' - r.score * z)) (atCoord c rs) =
      abs (r.score * z' - r.score * z) + wdiff z' z rs
    rw [ih]

theorem allOf_scorePos_atCoord (c : Nat) (rows : List (VecRow α)) (h : allOf vScorePos rows) :
    allOf scorePos (atCoord c rows) := by
  induction rows with
  | nil => exact True.intro
  | cons r rs ih =>
    rw [atCoord_cons, allOf_cons]
    exact ⟨h.1, ih h.2⟩

theorem wdiff_nonneg (z' z : α) (rows : List (VecRow α)) : 0 ≤ wdiff z' z rows := by
  induction rows with
  | nil => exact le_refl (0 : α)
  | cons r rs ih =>
    show 0 ≤ abs (r.score * z' - r.score * z) + wdiff z' z rs
    exact add_nonneg (abs_nonneg _) ih

/-- Rows that keep their score move the output by `|Σ_i (e_i z' - e_i z) v_i|² ≤
(|V| Σ_i |e_i z' - e_i z|)²` when every value has `|v_i|² ≤ V²`. -/
theorem normSq_diffVec_le (n : Nat) (z' z V : α) (xs : List (VecRow α))
    (h : allOf (normLe n V) xs) :
    normSq n (diffVec z' z xs) ≤ abs V * wdiff z' z xs * (abs V * wdiff z' z xs) := by
  induction xs with
  | nil =>
    show normSq n (fun _ => (0 : α) - 0) ≤ abs V * 0 * (abs V * 0)
    rw [sub_self, normSq_zero, mul_zero, mul_zero]
    exact le_refl _
  | cons r rs ih =>
    have e : diffVec z' z (r :: rs) =
        (fun c => (r.score * z' - r.score * z) * r.value c + diffVec z' z rs c) := by
      funext c
      show r.score * z' * r.value c + outputWith z' (atCoord c rs) -
          (r.score * z * r.value c + outputWith z (atCoord c rs)) =
        (r.score * z' - r.score * z) * r.value c +
          (outputWith z' (atCoord c rs) - outputWith z (atCoord c rs))
      rw [add_sub_add_comm, ← sub_mul]
    have hw : wdiff z' z (r :: rs) = abs (r.score * z' - r.score * z) + wdiff z' z rs := rfl
    rw [e, hw, mul_add]
    exact normSq_add_le n _ _ (fun c => (r.score * z' - r.score * z) * r.value c)
      (diffVec z' z rs) (mul_nonneg (abs_nonneg V) (abs_nonneg _))
      (mul_nonneg (abs_nonneg V) (wdiff_nonneg z' z rs)) (normSq_smul_le n _ V r.value h.1)
      (ih h.2)

/-- The output change splits into the rows before `j`, row `j`, and the rows after it. -/
theorem outputVec_change (pre post : List (VecRow α)) (e f : α) (v : Nat → α) :
    (fun c => outputVec (pre ++ VecRow.mk (f * e) v :: post) c -
        outputVec (pre ++ VecRow.mk e v :: post) c) =
      (fun c => diffVec (inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)))
          (inv (vScoreSum (pre ++ VecRow.mk e v :: post))) pre c +
        ((f * e * inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)) -
            e * inv (vScoreSum (pre ++ VecRow.mk e v :: post))) * v c +
          diffVec (inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)))
            (inv (vScoreSum (pre ++ VecRow.mk e v :: post))) post c)) := by
  funext c
  rw [outputVec_apply, outputVec_apply, output_def, output_def, scoreSum_atCoord,
    scoreSum_atCoord, atCoord_split, atCoord_split, outputWith_split, outputWith_split]
  generalize inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)) = z'
  generalize inv (vScoreSum (pre ++ VecRow.mk e v :: post)) = z
  show outputWith z' (atCoord c pre) + (f * e * z' * v c + outputWith z' (atCoord c post)) -
      (outputWith z (atCoord c pre) + (e * z * v c + outputWith z (atCoord c post))) =
    outputWith z' (atCoord c pre) - outputWith z (atCoord c pre) +
      ((f * e * z' - e * z) * v c +
        (outputWith z' (atCoord c post) - outputWith z (atCoord c post)))
  rw [add_sub_add_comm, add_sub_add_comm, ← sub_mul]

/-- The L1 change of the weights, for vector rows: `Σ_i |a'_i - a_i| ≤ 2 a_j (E - 1)`. -/
theorem wdiff_change_le (pre post : List (VecRow α)) (e f E : α) (v : Nat → α)
    (hpre : allOf vScorePos pre) (hpost : allOf vScorePos post)
    (he : 0 < e) (hf : 0 < f) (hE1 : f ≤ E) (hE2 : inv f ≤ E) :
    wdiff (inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)))
        (inv (vScoreSum (pre ++ VecRow.mk e v :: post))) pre +
      (abs (f * e * inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)) -
          e * inv (vScoreSum (pre ++ VecRow.mk e v :: post))) +
        wdiff (inv (vScoreSum (pre ++ VecRow.mk (f * e) v :: post)))
          (inv (vScoreSum (pre ++ VecRow.mk e v :: post))) post) ≤
      2 * (e * inv (vScoreSum (pre ++ VecRow.mk e v :: post))) * (E - 1) := by
  have hw := weight_change_le (atCoord 0 pre) (atCoord 0 post) e (v 0) f E
    (allOf_scorePos_atCoord 0 pre hpre) (allOf_scorePos_atCoord 0 post hpost) he hf hE1 hE2
  rw [← atCoord_split 0 pre post (f * e) v, ← atCoord_split 0 pre post e v, weights_def,
    weights_def, scoreSum_atCoord, scoreSum_atCoord, atCoord_split, atCoord_split,
    weightsWith_split, weightsWith_split, l1Dist_weightsWith_append, l1Dist_cons,
    l1Dist_weightsWith, score_mk, score_mk, sumBy_atCoord_abs, sumBy_atCoord_abs] at hw
  exact hw

private theorem r_final (W V a b : α) (hW : W * W = V * V) :
    W * (2 * a * b) * (W * (2 * a * b)) = 2 * V * a * b * (2 * V * a * b) := by
  have e : V * (2 * a * b) = 2 * V * a * b := by
    rw [← mul_assoc, ← mul_assoc, mul_comm V 2]
  rw [mul_mul_mul_comm W (2 * a * b) W (2 * a * b), hW,
    ← mul_mul_mul_comm V (2 * a * b) V (2 * a * b), e]

/-- The bound with the two normalisers `z' = 1/Z'`, `z = 1/Z` named. -/
theorem output_change_core (n : Nat) (pre post : List (VecRow α)) (e f E V z' z : α)
    (v : Nat → α) (hVpre : allOf (normLe n V) pre) (hVpost : allOf (normLe n V) post)
    (hv : normSq n v ≤ V * V)
    (hL : wdiff z' z pre + (abs (f * e * z' - e * z) + wdiff z' z post) ≤
      2 * (e * z) * (E - 1)) :
    normSq n (fun c => diffVec z' z pre c + ((f * e * z' - e * z) * v c + diffVec z' z post c))
      ≤ 2 * V * (e * z) * (E - 1) * (2 * V * (e * z) * (E - 1)) := by
  have hV : 0 ≤ abs V := abs_nonneg V
  have h1 := normSq_diffVec_le n z' z V pre hVpre
  have h2 := normSq_smul_le n (f * e * z' - e * z) V v hv
  have h3 := normSq_diffVec_le n z' z V post hVpost
  have h4 := normSq_add_le n _ _ (fun c => (f * e * z' - e * z) * v c) (diffVec z' z post)
    (mul_nonneg hV (abs_nonneg _)) (mul_nonneg hV (wdiff_nonneg z' z post)) h2 h3
  have h5 := normSq_add_le n _ _ (diffVec z' z pre)
    (fun c => (f * e * z' - e * z) * v c + diffVec z' z post c)
    (mul_nonneg hV (wdiff_nonneg z' z pre))
    (add_nonneg (mul_nonneg hV (abs_nonneg _)) (mul_nonneg hV (wdiff_nonneg z' z post))) h1 h4
  rw [← mul_add, ← mul_add] at h5
  have hS : 0 ≤ wdiff z' z pre + (abs (f * e * z' - e * z) + wdiff z' z post) :=
    add_nonneg (wdiff_nonneg z' z pre) (add_nonneg (abs_nonneg _) (wdiff_nonneg z' z post))
  have h6 := mul_le_mul_of_nonneg_left hL hV
  have h7 := mul_le_mul h6 h6 (mul_nonneg hV hS) (le_trans (mul_nonneg hV hS) h6)
  rw [r_final (abs V) V (e * z) (E - 1) (abs_mul_abs_self V)] at h7
  exact le_trans h5 h7

/-- Multiplying row `j`'s score by `f > 0` moves the vector output by
`|Δo|² ≤ (2 V a_j (E - 1))²` when every value has `|v_i|² ≤ V²`, for any `E ≥ max(f, 1/f)`
(such as `E = e^|ε|`, `f = e^ε`); `a_j = e / Σ_i e_i` is row `j`'s weight before the change.
Python: rfmath.attention.output_change_sq_bound
Test: tests/test_rfmath_attention.py::test_output_score_change_norm_sq_le -/
theorem output_score_change_normSq_le (n : Nat) (pre post : List (VecRow α)) (e f E V : α)
    (v : Nat → α) (hpre : allOf vScorePos pre) (hpost : allOf vScorePos post)
    (hVpre : allOf (normLe n V) pre) (hVpost : allOf (normLe n V) post)
    (hv : normSq n v ≤ V * V) (he : 0 < e) (hf : 0 < f) (hE1 : f ≤ E) (hE2 : inv f ≤ E) :
    normSq n (fun c => outputVec (pre ++ VecRow.mk (f * e) v :: post) c -
        outputVec (pre ++ VecRow.mk e v :: post) c) ≤
      2 * V * (e * inv (vScoreSum (pre ++ VecRow.mk e v :: post))) * (E - 1) *
        (2 * V * (e * inv (vScoreSum (pre ++ VecRow.mk e v :: post))) * (E - 1)) := by
  rw [outputVec_change]
  exact output_change_core n pre post e f E V _ _ v hVpre hVpost hv
    (wdiff_change_le pre post e f E v hpre hpost he hf hE1 hE2)

end

#print axioms output_score_change_normSq_le

end RidgeFill
