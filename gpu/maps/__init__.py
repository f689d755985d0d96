"""RidgeFill maps (paper section 2.2): map files (``files``), the capture pass and closed-form
fit (``fit``), its resumable checkpoints and the distributed all-reduce of the moments."""
