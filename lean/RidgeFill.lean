/-
Copyright (c) 2026 RidgeFill authors. Released under Apache 2.0.
-/
import RidgeFill.StateCorrection
import RidgeFill.TailShare
import RidgeFill.GdnContraction
import RidgeFill.AttentionInfluence
import RidgeFill.CountMatched
import RidgeFill.AttentionVector
import RidgeFill.TopK
import RidgeFill.CountControl
import RidgeFill.RhoRange
import RidgeFill.BreakEven
import RidgeFill.MatrixState
import RidgeFill.Anchored
import RidgeFill.NonVacuous

/-!
# RidgeFill

Machine-checked statements behind RidgeFill's design (paper, Appendix H, §2.4 and §3.3), one
module per theorem family. Shared definitions live in `OrderedField`, `Algebra`, `ListSum` and
`Gating`; `NonVacuous` applies every main theorem once to concrete inputs. See `README.md` for
what each family states and which toolchain checked it.
-/
