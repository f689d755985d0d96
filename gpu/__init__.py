"""Torch backend: real models, capture and fit, RidgeFill prefill, evaluation, benchmark, CLI."""
