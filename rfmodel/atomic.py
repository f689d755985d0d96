"""Atomic file writes: a temporary file in the target folder, then one ``os.replace``.

A reader never sees a half-written file, and an interrupted write leaves the old file (or
none) in place. The temporary file is created with mode 0666, so the kernel applies the umask
and the file gets the mode a plain ``open`` would give it (not ``mkstemp``'s owner-only 0600),
without reading the process-wide umask.
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
from pathlib import Path
from typing import Any, Iterator


def _create_beside(target: Path) -> Path:
    """A new, empty file in ``target``'s folder, created 0666 less the umask."""
    while True:
        tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            return tmp
        except FileExistsError:
            continue


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; move it into place only if the block succeeds."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(target)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` as UTF-8, line endings untouched."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8", newline="")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
