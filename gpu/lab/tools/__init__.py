"""Scripts around the product: the benchmark, the demo, the selector study and the CUDA
equivalence check."""
