"""rfmodel: NumPy reference kernels with Numba fast paths, row selectors and a tiny model.

Modules (docs/architecture.md):

- ``ridge``      streaming ridge moments (fp32 rows, fp64 sums), mergeable, solved by rfmath.
- ``maps``       map application, bf16 rounding, int8 with one scale per 128 weights of a row.
- ``gdn``        the gated delta rule scan over filled and exact rows, rho and the correction.
- ``attention``  RoPE, RMSNorm, causal GQA attention over a mixed cache, rescales, splices.
- ``selectors``  exact-row selectors of section 2.4 (attention, probe, protected, lexical-net...).
- ``lexical``    the Appendix H word and sentence normalization behind the lexical net.
- ``kernels``    the Numba hot loops; each names its NumPy twin.
- ``model``      TinyConfig / TinyModel: a layer-by-layer model that runs every arm.
- ``bench``      Numba-vs-NumPy speed ratios (``run_kernel_bench``).

Dependencies point one way: rfmodel imports rfmath (public names only), never gpu.
"""
