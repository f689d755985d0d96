"""Text that installs from the package registries: calibration and haystack corpora
(``corpus``), their fetchers and readers (``rdata``, ``markup``)."""
