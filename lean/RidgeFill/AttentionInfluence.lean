/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.ListSum

/-!
# How much one row can move an attention output

Paper, §2.4 ("Why attention"). A query reads `o = Σ_i a_i v_i` with `a = softmax(s)`, written
here as positive scores `e_i = exp(s_i)` over their sum: `a_i = e_i / Σ_k e_k`. The rows are
split as `pre ++ row j :: post`.

* `output_value_change` — changing row `j`'s value by `δ` changes the output by exactly `a_j δ`;
* `weight_change_le` — multiplying row `j`'s score by `f > 0` (`f = e^ε`) moves the weights by
  `Σ_i |a'_i - a_i| ≤ 2 a_j (E - 1)` for every `E ≥ max(f, 1/f)` (so for `E = e^|ε|`);
* `output_score_change_le` — hence the output moves by at most `2 V a_j (E - 1)` when every
  value has `|v_i| ≤ V`.

Values are scalars here. `AttentionVector` proves the output bound for vector values in the
Euclidean norm, as §2.4 states it (`output_score_change_normSq_le`, with squared norms).

Proof sketch for `weight_change_le`: with `Z`, `Z'` the score sums before and after and
`R = Z - e_j`, every other row's weight moves by `e_i |1/Z' - 1/Z| = e_i e_j |f - 1| / (Z Z')`
and row `j`'s by `e_j |f - 1| R / (Z Z')`, so the total is `2 a_j |f - 1| R / Z'`; and
`|f - 1| R ≤ (E - 1)(R + f e_j) = (E - 1) Z'` in both cases `f ≥ 1` and `f ≤ 1`.
-/

namespace RidgeFill

/-- One key/value row as a query sees it: its score `e = exp(s)` and its value. -/
structure AttnRow (α : Type) where
  score : α
  value : α

section
variable {α : Type} [OrderedField α]

/-- The row's score is positive (`e = exp(s) > 0`). -/
def scorePos (r : AttnRow α) : Prop := 0 < r.score

/-- The row's value has `|v| ≤ V`. -/
def valueLe (V : α) (r : AttnRow α) : Prop := abs r.value ≤ V

/-- `Σ_i e_i`, the softmax denominator. -/
def scoreSum (rows : List (AttnRow α)) : α := sumBy (fun r => r.score) rows

/-- `Σ_i e_i z v_i`: the output when the scores are scaled by `z`. -/
def outputWith (z : α) : List (AttnRow α) → α
  | [] => 0
  | r :: rs => r.score * z * r.value + outputWith z rs

/-- The attention output `Σ_i a_i v_i`, `a_i = e_i / Σ_k e_k`. -/
def output (rows : List (AttnRow α)) : α := outputWith (inv (scoreSum rows)) rows

/-- The scores scaled by `z`. -/
def weightsWith (z : α) : List (AttnRow α) → List α
  | [] => []
  | r :: rs => r.score * z :: weightsWith z rs

/-- The attention weights `a_i = e_i / Σ_k e_k`. -/
def weights (rows : List (AttnRow α)) : List α := weightsWith (inv (scoreSum rows)) rows

/-- `Σ_i |x_i - y_i|`, the L1 distance of two lists of the same length. -/
def l1Dist : List α → List α → α
  | x :: xs, y :: ys => abs (x - y) + l1Dist xs ys
  | _, _ => 0

theorem score_mk (e v : α) : (AttnRow.mk e v).score = e := rfl
theorem value_mk (e v : α) : (AttnRow.mk e v).value = v := rfl
theorem scoreSum_def (rows : List (AttnRow α)) :
    scoreSum rows = sumBy (fun r => r.score) rows := rfl
theorem outputWith_nil (z : α) : outputWith z [] = 0 := rfl
theorem outputWith_cons (z : α) (r : AttnRow α) (rs : List (AttnRow α)) :
    outputWith z (r :: rs) = r.score * z * r.value + outputWith z rs := rfl
theorem output_def (rows : List (AttnRow α)) :
    output rows = outputWith (inv (scoreSum rows)) rows := rfl
theorem weightsWith_nil (z : α) : weightsWith z [] = [] := rfl
theorem weightsWith_cons (z : α) (r : AttnRow α) (rs : List (AttnRow α)) :
    weightsWith z (r :: rs) = r.score * z :: weightsWith z rs := rfl
theorem weights_def (rows : List (AttnRow α)) :
    weights rows = weightsWith (inv (scoreSum rows)) rows := rfl
theorem l1Dist_nil : l1Dist ([] : List α) [] = 0 := rfl
theorem l1Dist_cons (x y : α) (xs ys : List α) :
    l1Dist (x :: xs) (y :: ys) = abs (x - y) + l1Dist xs ys := rfl

theorem scoreSum_split (pre post : List (AttnRow α)) (r : AttnRow α) :
    scoreSum (pre ++ r :: post) = scoreSum pre + scoreSum post + r.score := by
  rw [scoreSum_def, sumBy_append, sumBy_cons, ← scoreSum_def, ← scoreSum_def, add_left_comm,
    add_comm, add_assoc, add_comm (scoreSum post)]

theorem outputWith_split (z : α) (pre post : List (AttnRow α)) (r : AttnRow α) :
    outputWith z (pre ++ r :: post) =
      outputWith z pre + (r.score * z * r.value + outputWith z post) := by
  induction pre with
  | nil => rw [List.nil_append, outputWith_nil, zero_add, outputWith_cons]
  | cons x xs ih => rw [List.cons_append, outputWith_cons, outputWith_cons, ih, add_assoc]

theorem weightsWith_split (z : α) (pre post : List (AttnRow α)) (r : AttnRow α) :
    weightsWith z (pre ++ r :: post) = weightsWith z pre ++ (r.score * z :: weightsWith z post) := by
  induction pre with
  | nil => rfl
  | cons x xs ih => rw [List.cons_append, weightsWith_cons, weightsWith_cons, ih, List.cons_append]

/-- Rows that keep their score contribute `|e_i z' - e_i z|` each to the L1 distance. -/
theorem l1Dist_weightsWith_append (z' z : α) (xs : List (AttnRow α)) (A B : List α) :
    l1Dist (weightsWith z' xs ++ A) (weightsWith z xs ++ B) =
      sumBy (fun r => abs (r.score * z' - r.score * z)) xs + l1Dist A B := by
  induction xs with
  | nil => rw [weightsWith_nil, weightsWith_nil, List.nil_append, List.nil_append, sumBy_nil,
      zero_add]
  | cons x xs ih =>
    rw [weightsWith_cons, weightsWith_cons, List.cons_append, List.cons_append, l1Dist_cons, ih,
      sumBy_cons, add_assoc]

theorem l1Dist_weightsWith (z' z : α) (xs : List (AttnRow α)) :
    l1Dist (weightsWith z' xs) (weightsWith z xs) =
      sumBy (fun r => abs (r.score * z' - r.score * z)) xs := by
  have h := l1Dist_weightsWith_append z' z xs [] []
  rw [List.append_nil, List.append_nil, l1Dist_nil, add_zero] at h
  exact h

theorem sumBy_abs_weight_diff (z' z : α) (xs : List (AttnRow α))
    (h : allOf scorePos xs) :
    sumBy (fun r => abs (r.score * z' - r.score * z)) xs = scoreSum xs * abs (z' - z) := by
  induction xs with
  | nil => rw [sumBy_nil, scoreSum_def, sumBy_nil, zero_mul]
  | cons x xs ih =>
    rw [sumBy_cons, ih h.2, scoreSum_def (x :: xs), sumBy_cons, ← scoreSum_def, ← mul_sub,
      abs_mul_of_nonneg (le_of_lt h.1), add_mul]

theorem scoreSum_nonneg (xs : List (AttnRow α)) (h : allOf scorePos xs) :
    0 ≤ scoreSum xs := by
  induction xs with
  | nil => exact le_refl (0 : α)
  | cons x xs ih =>
    rw [scoreSum_def, sumBy_cons, ← scoreSum_def]
    exact add_nonneg (le_of_lt h.1) (ih h.2)

/-- Changing row `j`'s value by `δ` changes the output by exactly `a_j δ`.
Python: rfmath.attention.value_change_effect
Test: tests/test_rfmath_attention.py::test_value_change_is_exact -/
theorem output_value_change (pre post : List (AttnRow α)) (e v δ : α) :
    output (pre ++ AttnRow.mk e (v + δ) :: post) =
      output (pre ++ AttnRow.mk e v :: post) +
        e * inv (scoreSum (pre ++ AttnRow.mk e v :: post)) * δ := by
  have hs : scoreSum (pre ++ AttnRow.mk e (v + δ) :: post) =
      scoreSum (pre ++ AttnRow.mk e v :: post) := by
    rw [scoreSum_split, scoreSum_split]
  rw [output_def, output_def, hs, outputWith_split, outputWith_split]
  generalize inv (scoreSum (pre ++ AttnRow.mk e v :: post)) = z
  generalize outputWith z pre = A
  generalize outputWith z post = B
  show A + (e * z * (v + δ) + B) = A + (e * z * v + B) + e * z * δ
  simp only [mul_add, add_comm, add_assoc, add_left_comm] <;> rfl

/-- `1/Z' - 1/Z = (1/Z)(1/Z')(Z - Z')`. -/
theorem inv_sub_inv {Z Z' : α} (hZ : Z ≠ 0) (hZ' : Z' ≠ 0) :
    inv Z' - inv Z = inv Z * inv Z' * (Z - Z') := by
  rw [mul_sub, mul_right_comm (inv Z) (inv Z') Z, inv_mul hZ, one_mul, mul_assoc, inv_mul hZ',
    mul_one]

/-- `f e/Z' - e/Z = e (1/Z)(1/Z')(f Z - Z')`. -/
theorem scaled_inv_sub_inv {Z Z' : α} (hZ : Z ≠ 0) (hZ' : Z' ≠ 0) (e f : α) :
    f * e * inv Z' - e * inv Z = e * inv Z * inv Z' * (f * Z - Z') := by
  have h1 : e * inv Z * inv Z' * (f * Z) = f * e * inv Z' * (inv Z * Z) := by
    simp only [mul_comm, mul_assoc, mul_left_comm] <;> rfl
  have h2 : e * inv Z * inv Z' * Z' = e * inv Z * (inv Z' * Z') := mul_assoc _ _ _
  rw [mul_sub, h1, h2, inv_mul hZ, inv_mul hZ', mul_one, mul_one]

/-- The key inequality: `|f - 1| R ≤ (E - 1)(R + f e)` for `R ≥ 0`, `e, f > 0`,
`E ≥ max(f, 1/f)`. -/
theorem abs_sub_one_mul_le (R e f E : α) (hR : 0 ≤ R) (he : 0 < e) (hf : 0 < f)
    (hE1 : f ≤ E) (hE2 : inv f ≤ E) : abs (f - 1) * R ≤ (E - 1) * (R + f * e) := by
  have hfe : 0 ≤ f * e := le_of_lt (mul_pos hf he)
  have hRle : R ≤ R + f * e := le_add_of_nonneg_right hfe
  cases le_total 1 f with
  | inl h1 =>
    -- f ≥ 1: |f - 1| = f - 1 ≤ E - 1
    have hE : 0 ≤ E - 1 := sub_nonneg_of_le (le_trans h1 hE1)
    rw [abs_of_nonneg (sub_nonneg_of_le h1)]
    have hfE : f - 1 ≤ E - 1 := by
      rw [sub_eq, sub_eq]; exact add_le_add_right hE1 (-1)
    exact le_trans (mul_le_mul_of_nonneg_right hfE hR) (mul_le_mul_of_nonneg_left hRle hE)
  | inr h1 =>
    -- f ≤ 1: |f - 1| = 1 - f ≤ (E - 1) f, because E f ≥ (1/f) f = 1
    have hinv : 1 ≤ inv f := by
      have h2 := mul_le_mul_of_nonneg_right h1 (inv_nonneg hf)
      rw [mul_inv (ne_of_gt hf), one_mul] at h2
      exact h2
    have hE : 0 ≤ E - 1 := sub_nonneg_of_le (le_trans hinv hE2)
    have hEf : 1 - f ≤ (E - 1) * f := by
      have h3 := mul_le_mul_of_nonneg_right hE2 (le_of_lt hf)
      rw [inv_mul (ne_of_gt hf)] at h3
      rw [sub_mul, one_mul, sub_eq, sub_eq]
      exact add_le_add_right h3 (-f)
    rw [abs_of_nonpos (sub_nonpos_of_le h1), neg_sub]
    have h4 : (E - 1) * f * R ≤ (E - 1) * R := by
      rw [mul_assoc]
      apply mul_le_mul_of_nonneg_left _ hE
      have h5 := mul_le_mul_of_nonneg_right h1 hR
      rw [one_mul] at h5
      exact h5
    exact le_trans (mul_le_mul_of_nonneg_right hEf hR)
      (le_trans h4 (mul_le_mul_of_nonneg_left hRle hE))

theorem zero_le_two : (0 : α) ≤ 2 := by
  rw [two_eq]; exact add_nonneg zero_le_one zero_le_one

/-- The weight change with the rows other than `j` lumped into their score sum `R`. -/
theorem weight_change_core (R e f E : α) (hR : 0 ≤ R) (he : 0 < e) (hf : 0 < f)
    (hE1 : f ≤ E) (hE2 : inv f ≤ E) :
    R * abs (inv (R + f * e) - inv (R + e)) + abs (f * e * inv (R + f * e) - e * inv (R + e))
      ≤ 2 * (e * inv (R + e)) * (E - 1) := by
  have hZ : 0 < R + e := by rw [add_comm]; exact add_pos_of_pos_of_nonneg he hR
  have hZ' : 0 < R + f * e := by rw [add_comm]; exact add_pos_of_pos_of_nonneg (mul_pos hf he) hR
  have d1 : inv (R + f * e) - inv (R + e) = inv (R + e) * inv (R + f * e) * (e * (1 - f)) := by
    rw [inv_sub_inv (ne_of_gt hZ) (ne_of_gt hZ'), add_sub_add_left, mul_sub e 1 f, mul_one,
      mul_comm e f]
  have d2 : f * e * inv (R + f * e) - e * inv (R + e) =
      e * inv (R + e) * inv (R + f * e) * ((f - 1) * R) := by
    rw [scaled_inv_sub_inv (ne_of_gt hZ) (ne_of_gt hZ') e f, mul_add, add_sub_add_right,
      sub_mul, one_mul]
  have hz : 0 ≤ inv (R + e) := inv_nonneg hZ
  have hz' : 0 ≤ inv (R + f * e) := inv_nonneg hZ'
  have he' : 0 ≤ e := le_of_lt he
  rw [d1, d2, abs_mul_of_nonneg (mul_nonneg hz hz'), abs_mul_of_nonneg he',
    abs_mul_of_nonneg (mul_nonneg (mul_nonneg he' hz) hz'), abs_mul, abs_of_nonneg hR,
    abs_sub_comm 1 f]
  have e3 : R * (inv (R + e) * inv (R + f * e) * (e * abs (f - 1))) +
      e * inv (R + e) * inv (R + f * e) * (abs (f - 1) * R) =
      2 * (e * inv (R + e)) * (abs (f - 1) * R * inv (R + f * e)) := by
    rw [two_eq]
    simp only [add_mul, mul_add, one_mul, mul_one, mul_comm, mul_assoc, mul_left_comm] <;> rfl
  rw [e3]
  apply mul_le_mul_of_nonneg_left _ (mul_nonneg zero_le_two (mul_nonneg he' hz))
  apply mul_inv_le_of_le_mul hZ'
  exact abs_sub_one_mul_le R e f E hR he hf hE1 hE2

/-- Multiplying row `j`'s score by `f > 0` changes the weights by
`Σ_i |a'_i - a_i| ≤ 2 a_j (E - 1)`, for any `E ≥ max(f, 1/f)` (such as `E = e^|ε|`, `f = e^ε`).
Python: rfmath.attention.weight_change_bound
Test: tests/test_rfmath_attention.py::test_weight_change_le -/
theorem weight_change_le (pre post : List (AttnRow α)) (e v f E : α)
    (hpre : allOf scorePos pre) (hpost : allOf scorePos post)
    (he : 0 < e) (hf : 0 < f) (hE1 : f ≤ E) (hE2 : inv f ≤ E) :
    l1Dist (weights (pre ++ AttnRow.mk (f * e) v :: post)) (weights (pre ++ AttnRow.mk e v :: post))
      ≤ 2 * (e * inv (scoreSum (pre ++ AttnRow.mk e v :: post))) * (E - 1) := by
  rw [weights_def, weights_def, weightsWith_split, weightsWith_split,
    l1Dist_weightsWith_append, l1Dist_cons, l1Dist_weightsWith,
    sumBy_abs_weight_diff _ _ pre hpre, sumBy_abs_weight_diff _ _ post hpost,
    scoreSum_split, scoreSum_split, score_mk, score_mk]
  have hR : 0 ≤ scoreSum pre + scoreSum post :=
    add_nonneg (scoreSum_nonneg pre hpre) (scoreSum_nonneg post hpost)
  have e0 : ∀ a b x y : α, a * x + (y + b * x) = (a + b) * x + y := by
    intro a b x y
    simp only [add_mul, add_comm, add_assoc, add_left_comm] <;> rfl
  rw [e0]
  exact weight_change_core _ e f E hR he hf hE1 hE2

/-- Rows that keep their score and value move the output by at most `V Σ |e_i z' - e_i z|`. -/
theorem abs_outputWith_sub_le (z' z V : α) (xs : List (AttnRow α)) (h : allOf (valueLe V) xs) :
    abs (outputWith z' xs - outputWith z xs) ≤
      V * sumBy (fun r => abs (r.score * z' - r.score * z)) xs := by
  induction xs with
  | nil =>
    rw [outputWith_nil, outputWith_nil, sub_self, sumBy_nil, mul_zero,
      abs_of_nonneg (le_refl (0 : α))]
    exact le_refl (0 : α)
  | cons x xs ih =>
    rw [outputWith_cons, outputWith_cons, sumBy_cons, add_sub_add_comm, ← sub_mul, mul_add]
    apply le_trans (abs_add_le _ _)
    apply add_le_add _ (ih h.2)
    rw [abs_mul, mul_comm V]
    exact mul_le_mul_of_nonneg_left h.1 (abs_nonneg _)

/-- Changing row `j`'s score (and no value) moves the output by at most `V` times the L1
distance between the old and the new weights. -/
theorem abs_output_sub_le (pre post : List (AttnRow α)) (e' e v V : α)
    (hpre : allOf (valueLe V) pre) (hpost : allOf (valueLe V) post) (hv : abs v ≤ V) :
    abs (output (pre ++ AttnRow.mk e' v :: post) - output (pre ++ AttnRow.mk e v :: post)) ≤
      V * l1Dist (weights (pre ++ AttnRow.mk e' v :: post))
        (weights (pre ++ AttnRow.mk e v :: post)) := by
  rw [output_def, output_def, weights_def, weights_def, weightsWith_split, weightsWith_split,
    l1Dist_weightsWith_append, l1Dist_cons, l1Dist_weightsWith, outputWith_split,
    outputWith_split, score_mk, score_mk, value_mk]
  generalize inv (scoreSum (pre ++ AttnRow.mk e' v :: post)) = z'
  generalize inv (scoreSum (pre ++ AttnRow.mk e v :: post)) = z
  rw [add_sub_add_comm, add_sub_add_comm, mul_add, mul_add, ← sub_mul]
  apply le_trans (abs_add_le _ _)
  apply add_le_add (abs_outputWith_sub_le z' z V pre hpre)
  apply le_trans (abs_add_le _ _)
  apply add_le_add _ (abs_outputWith_sub_le z' z V post hpost)
  rw [abs_mul, mul_comm V]
  exact mul_le_mul_of_nonneg_left hv (abs_nonneg _)

/-- Multiplying row `j`'s score by `f > 0` moves the output by at most `2 V a_j (E - 1)` when
every value has `|v_i| ≤ V`, for any `E ≥ max(f, 1/f)`.
Python: rfmath.attention.logit_change_bound
Test: tests/test_rfmath_attention.py::test_logit_change_within_bound -/
theorem output_score_change_le (pre post : List (AttnRow α)) (e v f E V : α)
    (hpre : allOf scorePos pre) (hpost : allOf scorePos post)
    (hVpre : allOf (valueLe V) pre) (hVpost : allOf (valueLe V) post) (hv : abs v ≤ V)
    (he : 0 < e) (hf : 0 < f) (hE1 : f ≤ E) (hE2 : inv f ≤ E) :
    abs (output (pre ++ AttnRow.mk (f * e) v :: post) - output (pre ++ AttnRow.mk e v :: post))
      ≤ 2 * V * (e * inv (scoreSum (pre ++ AttnRow.mk e v :: post))) * (E - 1) := by
  have hV : 0 ≤ V := le_trans (abs_nonneg v) hv
  have h := mul_le_mul_of_nonneg_left (weight_change_le pre post e v f E hpre hpost he hf hE1 hE2) hV
  rw [mul_assoc 2 V, mul_left_comm 2 V, mul_assoc V]
  exact le_trans (abs_output_sub_le pre post (f * e) e v V hVpre hVpost hv) h

end

#print axioms output_value_change
#print axioms weight_change_le
#print axioms output_score_change_le

end RidgeFill
