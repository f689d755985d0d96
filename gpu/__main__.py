"""``python -m gpu CMD ...`` is the ``ridgefill`` command (gpu.cli); under torchrun,
``torchrun --nproc-per-node N -m gpu fit --model M --splits S --out F`` shards the capture."""
import sys

from .cli import main

sys.exit(main())
