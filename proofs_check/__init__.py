"""proofs_check: re-check RidgeFill's Lean proofs and tie each theorem to its Python twin.

``python -m proofs_check`` (``make proofs``) finds a Lean 4 toolchain, checks every module of
``lean/`` in import order, and prints one row per theorem of the manifest
(``proofs_check/manifest.py``): its Lean name, the toolchain that checked it, its status
(``proved`` only when that toolchain checked it in this run), the axioms ``#print axioms``
reports, the ``rfmath`` twin and the Hypothesis test that checks the same statement numerically.

It exits non-zero on a ``sorry``/``admit``/``axiom`` in ``lean/``, a manifest theorem missing
from ``lean/``, a twin or test that does not exist, an axiom beyond ``propext``,
``Classical.choice`` and ``Quot.sound``, or a module that fails to check. A module that needs
what the toolchain's core library lacks (``RatCheck`` needs ``Rat``) is reported
``not built here``; that is not a failure.
"""

from proofs_check.check import CheckResult, main, run_check

__all__ = ["CheckResult", "main", "run_check"]
