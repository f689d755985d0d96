"""A resumable record of finished measurements: one JSON object per line, appended and
synced as each measurement ends, so an interrupted evaluation loses at most the one it was
running. On reopening, a torn last line (the process died mid-write) is cut off and every
complete record is kept; a record is found again by its ``key``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterator


class Journal:
    """Append-only JSONL of records that each carry a unique ``"key"`` string."""

    def __init__(self, path: str | os.PathLike, readonly: bool = False):
        self.path = Path(path)
        self.readonly = readonly  # another process's journal: read its complete lines only
        if not readonly:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[str, dict] = {}
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        raw = self.path.read_bytes()
        end = raw.rfind(b"\n") + 1
        if end < len(raw) and not self.readonly:  # a torn last line: drop it so the next
            with open(self.path, "r+b") as fh:    # append starts clean
                fh.truncate(end)
        for line in raw[:end].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a damaged line is measured again
            if isinstance(rec, dict) and "key" in rec:
                self._records[rec["key"]] = rec

    def __contains__(self, key: str) -> bool:
        return key in self._records

    def __len__(self) -> int:
        return len(self._records)

    def get(self, key: str) -> dict | None:
        return self._records.get(key)

    def add(self, record: dict) -> dict:
        """Append ``record`` (which must hold ``"key"``) and sync it to disk."""
        if "key" not in record:
            raise ValueError("a journal record needs a 'key'")
        if self.readonly:
            raise ValueError(f"{self.path} was opened read-only (another process's journal)")
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), allow_nan=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self._records[record["key"]] = record
        return record

    def records(self) -> Iterator[dict]:
        return iter(list(self._records.values()))
