"""rfmath: the closed-form mathematics of RidgeFill, as pure NumPy/SciPy functions.

Each public function is the twin of a paper equation or a Lean statement
(reference/ridgefill-paper.md):

- ``rfmath.gating``    -- row weights, filled share rho, terminal-state correction, tail-share
  and contraction bounds, the gated delta rule (§2.3, Appendix H);
- ``rfmath.attention`` -- softmax and the attention-influence bounds (§2.4);
- ``rfmath.ridge``     -- penalty, centred moments, closed-form ridge solve (§2.2);
- ``rfmath.cost``      -- the ceiling r, multiply-accumulate counts, the exact-row cost line
  (§2.5, Appendix H);
- ``rfmath.stats``     -- paired bootstrap, binomial floor, non-inferiority, count-matched
  control (§3.3, §3.4).

rfmath imports only numpy and scipy: no model code, no I/O, no global state. Invalid arguments
raise ``ValueError`` naming the argument and the fix.
"""

from rfmath import attention, cost, gating, ridge, stats

__all__ = ["attention", "cost", "gating", "ridge", "stats"]
