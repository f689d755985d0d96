import Lake
open Lake DSL

-- RidgeFill's machine-checked statements (paper, Appendix H, §2.4, §3.3). Lean core only.
package ridgefill

-- The theorem families; `RidgeFill.lean` imports every one of them. `lake build` builds this
-- library, and only this one.
@[default_target]
lean_lib RidgeFill

-- Instantiates every main theorem with core's `Rat` (through `RidgeFill/NonVacuous.lean`).
-- Imported by nothing and not a default target: build it with `lake build RatCheck`. It needs
-- a toolchain whose core has `Rat` (the 2021 toolchain does not).
lean_lib RatCheck
