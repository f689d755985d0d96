"""``python -m proofs_check``: see ``proofs_check.check.main``."""

from proofs_check.check import main

raise SystemExit(main())
