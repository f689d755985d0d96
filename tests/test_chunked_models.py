"""The larger built-in models arrive as GGUF chunks in registry packages
(gpu.core.models.Chunked): assembled in order, checked by size and sha256, refused when a
chunk is damaged, and a missing package names the command that installs it."""
import hashlib
import sys

import pytest

from gpu.core import models
from gpu.core.models import Chunked


@pytest.fixture
def chunks(tmp_path, monkeypatch):
    """Three fake chunk packages ``rfxfake_part1..3`` on sys.path (never imported)."""
    parts = [bytes(range(256)) * 40, b"middle" * 1000, b"end"]
    for i, data in enumerate(parts, 1):
        pkg = tmp_path / "site" / f"rfxfake_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('a chunk package is never imported')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    whole = b"".join(parts)
    spec = Chunked("rfxfake-part", 3, "1.0", len(whole), hashlib.sha256(whole).hexdigest(),
                   "fake.gguf")
    return spec, whole, tmp_path / "site"


def test_assembles_in_order_and_checks(chunks, tmp_path):
    spec, whole, _ = chunks
    out = spec.assemble(tmp_path / "cache" / "fake.gguf")
    assert out.read_bytes() == whole
    assert not any("rfxfake" in m for m in sys.modules)  # located as files, never imported


def test_damaged_chunk_is_refused(chunks, tmp_path):
    spec, _, site = chunks
    part = site / "rfxfake_part2" / "data" / "part02.bin"
    data = bytearray(part.read_bytes())
    data[100] ^= 1  # same size, one bit off
    part.write_bytes(bytes(data))
    target = tmp_path / "cache" / "fake.gguf"
    with pytest.raises(ValueError, match=r"(?s)damaged.*--force-reinstall"):
        spec.assemble(target)
    assert not target.exists() and not target.with_name("fake.gguf.partial").exists()


def test_missing_package_names_the_install_command(chunks, tmp_path):
    spec, _, site = chunks
    (site / "rfxfake_part3" / "__init__.py").unlink()
    (site / "rfxfake_part3" / "data" / "part03.bin").unlink()
    (site / "rfxfake_part3" / "data").rmdir()
    (site / "rfxfake_part3").rmdir()
    with pytest.raises(ModuleNotFoundError, match=r"(?s)make models.*rfxfake-part3==1\.0"):
        spec.assemble(tmp_path / "cache" / "fake.gguf")


def test_builtin_qwen_specs_match_the_published_files():
    for name, parts, size in (("qwen2.5-coder-0.5b", 6, 491_400_064),
                              ("qwen2.5-coder-1.5b", 22, 1_117_320_768)):
        spec = models.BUILTINS[name].gguf
        assert isinstance(spec, Chunked) and spec.parts == parts and spec.size == size
        assert len(spec.sha256) == 64
    assert set(models.SMALL) < set(models.BUILTINS)
