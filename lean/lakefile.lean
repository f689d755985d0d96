import Lake
open Lake DSL

-- RidgeFill's machine-checked statements (paper, Appendix H, §2.4, §3.3). Lean core only.
package ridgefill

-- The theorem families; `RidgeFill.lean` imports every one of them.
@[default_target]
lean_lib RidgeFill

-- Instantiates each main theorem with core's `Rat`, so that none is vacuous. Imported by
-- nothing; it needs a toolchain whose core has `Rat` (the 2021 toolchain does not).
@[default_target]
lean_lib RatCheck
