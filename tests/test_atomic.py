"""rfmodel.atomic: whole-file writes that never leave a half-written file or a stray temp."""
from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rfmodel.atomic import atomic_path, write_json, write_text


@settings(max_examples=50, deadline=None)
@given(st.text())
def test_write_text_writes_the_utf8_bytes_with_line_endings_untouched(text):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "f.txt"
        write_text(p, "old")
        write_text(p, text)
        assert p.read_bytes() == text.encode("utf-8")
        assert os.listdir(d) == ["f.txt"]


def test_failed_block_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    p = tmp_path / "report.json"
    write_json(p, {"a": 1})
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_path(p) as tmp:
            tmp.write_text("half")
            raise RuntimeError("boom")
    assert json.loads(p.read_text()) == {"a": 1}
    assert sorted(os.listdir(tmp_path)) == ["report.json"]


def test_file_gets_the_mode_open_would_give_not_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.md", "x")
        plain = tmp_path / "b.md"
        plain.write_text("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE((tmp_path / "a.md").stat().st_mode)
    assert mode == stat.S_IMODE(plain.stat().st_mode) == 0o644


def test_missing_parent_folders_are_created(tmp_path):
    p = tmp_path / "x" / "y" / "z.json"
    write_json(p, [1, 2])
    assert json.loads(p.read_text()) == [1, 2]


def test_write_never_touches_the_process_umask(tmp_path, monkeypatch):
    """Another thread may create files meanwhile: the writer must not flip the umask."""
    def umask(_):
        raise AssertionError("os.umask called")
    monkeypatch.setattr(os, "umask", umask)
    write_text(tmp_path / "a.md", "x")
    assert (tmp_path / "a.md").read_text() == "x"


def test_a_temp_name_already_taken_is_skipped_not_overwritten(tmp_path, monkeypatch):
    import secrets
    names = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(names))
    taken = tmp_path / ".f.txt.aaaaaaaaaaaa.tmp"
    write_text(tmp_path / "f.txt", "first")  # takes the name "aaaa..." and moves it away
    taken.write_text("someone else's")
    write_text(tmp_path / "f.txt", "second")  # "aaaa..." is taken now: the next name is used
    assert taken.read_text() == "someone else's"
    assert (tmp_path / "f.txt").read_text() == "second"
