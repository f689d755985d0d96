"""The research harness (paper section 6): the study driver (``harness``), its instruments,
RULER-style tasks, loss masks, journal, batched decoding and reports. Not on a user's path."""
