/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.ListSum

/-!
# The delta rule forgets: two runs with the same last inputs converge

Paper, Appendix H ("The bound also holds with the erase term"). A Gated DeltaNet layer updates
its state with the delta rule

  `S_t = g_t (I - β_t k_t k_tᵀ) S_{t-1} + β_t k_t v_tᵀ`,  `|k_t| = 1`, `0 ≤ β_t ≤ 2`.

The state is `d_k × d_v`, as in `rfmath.gating.delta_rule_step`, and is read as columns:
column `c` of `S` is a vector in key space (`S c : Nat → α`, read on its first `n = d_k`
coordinates), and the write term's column `c` is `β v_c k`. (The issue writes the write term as
`β v kᵀ`, the same state transposed; transposing changes no norm.) Norms are squared Euclidean
norms, of a column (`normSq`) and of the whole state (`frobSq`, the squared Frobenius norm over
`p = d_v` columns).

* `normSq_erase` — `|x - β (k·x) k|² = |x|² - β (2 - β) (k·x)²` when `|k|² = 1`;
* `normSq_erase_le` — hence `I - β k kᵀ` does not expand any vector when `0 ≤ β ≤ 2`;
* `delta_rule_contraction` — two runs that receive the same last `m` inputs, each with a gate in
  `[0, γ]`, end with states whose difference has squared norm at most `(γ²)^m = γ^(2m)` times the
  squared norm of their difference before those inputs.
-/

namespace RidgeFill

/-- One token's input to the delta rule: gate `g`, write strength `β`, key `k`, value `v`. -/
structure DeltaInput (α : Type) where
  gate : α
  beta : α
  key : Nat → α
  value : Nat → α

section
variable {α : Type} [OrderedField α]

/-- The dot product of the first `n` coordinates. -/
def dot (n : Nat) (x y : Nat → α) : α := sumTo n (fun i => x i * y i)

/-- The squared Euclidean norm of the first `n` coordinates. -/
def normSq (n : Nat) (x : Nat → α) : α := dot n x x

/-- `(I - β k kᵀ) x`, the delta rule's erase step applied to the column `x`. -/
def erase (n : Nat) (β : α) (k x : Nat → α) : Nat → α := fun i => x i - β * dot n k x * k i

/-- One delta-rule step on the whole state (columns indexed by `c`). -/
def deltaStep (n : Nat) (inp : DeltaInput α) (S : Nat → Nat → α) : Nat → Nat → α :=
  fun c i => inp.gate * erase n inp.beta inp.key (S c) i + inp.beta * inp.value c * inp.key i

/-- The state after feeding `inputs` in order to the state `S`. -/
def deltaRun (n : Nat) (S : Nat → Nat → α) : List (DeltaInput α) → Nat → Nat → α
  | [] => S
  | inp :: rest => deltaRun n (deltaStep n inp S) rest

/-- The squared Frobenius norm of a state with `p` columns of length `n`. -/
def frobSq (n p : Nat) (S : Nat → Nat → α) : α := sumTo p (fun c => normSq n (S c))

/-- The entrywise difference of two states. -/
def stateDiff (S S' : Nat → Nat → α) : Nat → Nat → α := fun c i => S c i - S' c i

/-- The input's gate is in `[0, γ]`, its `β` in `[0, 2]`, and its key has unit norm. -/
def validInput (γ : α) (n : Nat) (inp : DeltaInput α) : Prop :=
  0 ≤ inp.gate ∧ inp.gate ≤ γ ∧ 0 ≤ inp.beta ∧ inp.beta ≤ 2 ∧ normSq n inp.key = 1

theorem dot_def (n : Nat) (x y : Nat → α) : dot n x y = sumTo n (fun i => x i * y i) := rfl
theorem normSq_def (n : Nat) (x : Nat → α) : normSq n x = dot n x x := rfl
theorem deltaRun_nil (n : Nat) (S : Nat → Nat → α) : deltaRun n S [] = S := rfl
theorem deltaRun_cons (n : Nat) (S : Nat → Nat → α) (inp : DeltaInput α)
    (rest : List (DeltaInput α)) : deltaRun n S (inp :: rest) = deltaRun n (deltaStep n inp S) rest :=
  rfl
theorem frobSq_def (n p : Nat) (S : Nat → Nat → α) :
    frobSq n p S = sumTo p (fun c => normSq n (S c)) := rfl

theorem normSq_nonneg (n : Nat) (x : Nat → α) : 0 ≤ normSq n x :=
  sumTo_nonneg n _ (fun i => mul_self_nonneg (x i))

theorem frobSq_nonneg (n p : Nat) (S : Nat → Nat → α) : 0 ≤ frobSq n p S :=
  sumTo_nonneg p _ (fun c => normSq_nonneg n (S c))

/-- The dot product is linear in its second argument (differences). -/
theorem dot_sub (n : Nat) (k x y : Nat → α) :
    dot n k (fun i => x i - y i) = dot n k x - dot n k y := by
  have e : (fun i => k i * (x i - y i)) = (fun i => k i * x i - k i * y i) :=
    funext (fun i => mul_sub (k i) (x i) (y i))
  rw [dot_def, e, sumTo_sub]
  rfl

theorem normSq_smul (n : Nat) (g : α) (y : Nat → α) :
    normSq n (fun i => g * y i) = g * g * normSq n y := by
  have e : (fun i => g * y i * (g * y i)) = (fun i => g * g * (y i * y i)) :=
    funext (fun i => mul_mul_mul_comm g (y i) g (y i))
  rw [normSq_def, dot_def, e, sumTo_mul_left]
  rfl

private theorem sq_sub_smul (x c k : α) :
    (x - c * k) * (x - c * k) = x * x + (-(c + c) * (k * x) + c * c * (k * k)) := by
  simp only [sub_eq, mul_add, add_mul, neg_add, mul_neg, neg_mul, neg_neg, mul_comm, mul_assoc,
    mul_left_comm, add_comm, add_assoc, add_left_comm] <;> rfl

private theorem erase_identity (N d β : α) :
    N + (-(β * d + β * d) * d + β * d * (β * d) * 1) = N - β * (2 - β) * (d * d) := by
  rw [two_eq]
  simp only [sub_eq, mul_add, add_mul, neg_add, mul_neg, neg_mul, neg_neg, mul_one, mul_comm,
    mul_assoc, mul_left_comm, add_comm, add_assoc, add_left_comm] <;> rfl

/-- `|x - β (k·x) k|² = |x|² - β (2 - β) (k·x)²` for a unit key `k`. -/
theorem normSq_erase (n : Nat) (β : α) (k x : Nat → α) (hk : normSq n k = 1) :
    normSq n (erase n β k x) = normSq n x - β * (2 - β) * (dot n k x * dot n k x) := by
  have e : (fun i => erase n β k x i * erase n β k x i) =
      (fun i => x i * x i + (-(β * dot n k x + β * dot n k x) * (k i * x i) +
        β * dot n k x * (β * dot n k x) * (k i * k i))) :=
    funext (fun i => sq_sub_smul (x i) (β * dot n k x) (k i))
  rw [normSq_def, dot_def, e, sumTo_add, sumTo_add, sumTo_mul_left, sumTo_mul_left]
  have hk' : sumTo n (fun i => k i * k i) = 1 := hk
  rw [hk', ← dot_def, ← dot_def, ← normSq_def, erase_identity]

/-- The erase step `I - β k kᵀ` does not expand any vector when `|k| = 1` and `0 ≤ β ≤ 2`.
Python: rfmath.gating.delta_rule_step
Test: tests/test_rfmath_gating.py::test_delta_rule_contraction -/
theorem normSq_erase_le (n : Nat) (β : α) (k x : Nat → α) (hk : normSq n k = 1)
    (hβ0 : 0 ≤ β) (hβ2 : β ≤ 2) : normSq n (erase n β k x) ≤ normSq n x := by
  rw [normSq_erase n β k x hk]
  exact sub_le_self (mul_nonneg (mul_nonneg hβ0 (sub_nonneg_of_le hβ2))
    (mul_self_nonneg (dot n k x)))

/-- Two runs fed the same input differ, one step later, by the gated erase of their difference:
the write term `β k vᵀ` cancels. -/
theorem deltaStep_diff (n : Nat) (inp : DeltaInput α) (S S' : Nat → Nat → α) (c : Nat) :
    stateDiff (deltaStep n inp S) (deltaStep n inp S') c =
      (fun i => inp.gate * erase n inp.beta inp.key (stateDiff S S' c) i) := by
  apply funext
  intro i
  show inp.gate * (S c i - inp.beta * dot n inp.key (S c) * inp.key i) +
      inp.beta * inp.value c * inp.key i -
      (inp.gate * (S' c i - inp.beta * dot n inp.key (S' c) * inp.key i) +
      inp.beta * inp.value c * inp.key i) =
    inp.gate * (S c i - S' c i - inp.beta * dot n inp.key (fun j => S c j - S' c j) * inp.key i)
  rw [dot_sub, add_sub_add_right, ← mul_sub]
  apply congrArg (fun t => inp.gate * t)
  simp only [sub_eq, mul_add, add_mul, neg_add, mul_neg, neg_mul, neg_neg, mul_comm, mul_assoc,
    mul_left_comm, add_comm, add_assoc, add_left_comm] <;> rfl

/-- One step shrinks the squared distance between two states by at least `γ²`. -/
theorem frobSq_deltaStep_le (γ : α) (n p : Nat) (inp : DeltaInput α) (S S' : Nat → Nat → α)
    (h : validInput γ n inp) :
    frobSq n p (stateDiff (deltaStep n inp S) (deltaStep n inp S')) ≤
      γ * γ * frobSq n p (stateDiff S S') := by
  have hg0 : 0 ≤ inp.gate := h.1
  have hgγ : inp.gate ≤ γ := h.2.1
  have hβ0 : 0 ≤ inp.beta := h.2.2.1
  have hβ2 : inp.beta ≤ 2 := h.2.2.2.1
  have hk : normSq n inp.key = 1 := h.2.2.2.2
  have e : (fun c => normSq n (stateDiff (deltaStep n inp S) (deltaStep n inp S') c)) =
      (fun c => inp.gate * inp.gate *
        normSq n (erase n inp.beta inp.key (stateDiff S S' c))) := by
    apply funext
    intro c
    rw [deltaStep_diff, normSq_smul]
  rw [frobSq_def, e, sumTo_mul_left, frobSq_def]
  have h1 : sumTo p (fun c => normSq n (erase n inp.beta inp.key (stateDiff S S' c))) ≤
      sumTo p (fun c => normSq n (stateDiff S S' c)) :=
    sumTo_le_sumTo p _ _ (fun c => normSq_erase_le n inp.beta inp.key _ hk hβ0 hβ2)
  have hgg : inp.gate * inp.gate ≤ γ * γ := mul_le_mul hgγ hgγ hg0 (le_trans hg0 hgγ)
  exact le_trans (mul_le_mul_of_nonneg_left h1 (mul_nonneg hg0 hg0))
    (mul_le_mul_of_nonneg_right hgg (frobSq_nonneg n p (stateDiff S S')))

/-- Two runs that receive the same last `m` inputs, each with gate in `[0, γ]`, `β` in `[0, 2]`
and a unit key, end with states whose difference has squared norm at most `(γ²)^m = γ^(2m)`
times that of their difference before those inputs.
Python: rfmath.gating.delta_rule_step, rfmath.gating.contraction_factor
Test: tests/test_rfmath_gating.py::test_delta_rule_contraction -/
theorem delta_rule_contraction (γ : α) (n p : Nat) (S S' : Nat → Nat → α)
    (inputs : List (DeltaInput α)) (h : allOf (validInput γ n) inputs) :
    frobSq n p (stateDiff (deltaRun n S inputs) (deltaRun n S' inputs)) ≤
      npow (γ * γ) (len inputs) * frobSq n p (stateDiff S S') := by
  induction inputs generalizing S S' with
  | nil => rw [deltaRun_nil, deltaRun_nil, len_nil, npow_zero, one_mul]; exact le_refl _
  | cons inp rest ih =>
    rw [deltaRun_cons, deltaRun_cons, len_cons, npow_succ]
    have hnn : 0 ≤ npow (γ * γ) (len rest) := by
      have hgen : ∀ m : Nat, 0 ≤ npow (γ * γ) m := by
        intro m
        induction m with
        | zero => exact zero_le_one
        | succ m ihm => exact mul_nonneg (mul_self_nonneg γ) ihm
      exact hgen (len rest)
    have h1 := ih (deltaStep n inp S) (deltaStep n inp S') h.2
    have h2 := mul_le_mul_of_nonneg_left (frobSq_deltaStep_le γ n p inp S S' h.1) hnn
    rw [mul_left_comm, ← mul_assoc (γ * γ)] at h2
    exact le_trans h1 h2

end

#print axioms normSq_erase_le
#print axioms delta_rule_contraction

end RidgeFill
