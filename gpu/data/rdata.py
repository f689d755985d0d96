"""A reader for R's XDR serialization and lazy-load databases: enough of R's data objects
(atomic vectors, lists, pairlists, symbols, references, environments, ALTREP sequences) to
read text shipped as R package data (gpu.data.corpus's austen domain) without R installed."""
from __future__ import annotations

import bz2
import gzip
import lzma
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RVector", "RSymbol", "RPairlist", "r_unserialize", "read_r_lazyload"]


@dataclass
class RVector:
    """An R atomic vector or list: ``values`` plus its attributes (names, class, ...)."""

    rtype: str
    values: list
    attributes: dict


class _RReader:
    """Reader for R's XDR serialization (format versions 2 and 3), enough for data objects:
    atomic vectors, lists, pairlists, symbols, references and environments."""

    NILVALUE, EMPTYENV, BASEENV, GLOBALENV, UNBOUND, MISSING, BASENS = 254, 242, 241, 253, 252, 251, 250
    REFSXP, NAMESPACESXP, PACKAGESXP, ALTREP = 255, 249, 248, 238

    def __init__(self, data: bytes):
        self.b = data
        self.i = 0
        self.refs: list = []

    def _int(self) -> int:
        v = struct.unpack_from(">i", self.b, self.i)[0]
        self.i += 4
        return v

    def _len(self) -> int:
        n = self._int()
        if n == -1:
            hi, lo = self._int(), self._int()
            n = (hi << 32) + (lo & 0xFFFFFFFF)
        return n

    def _bytes(self, n: int) -> bytes:
        if self.i + n > len(self.b):
            raise ValueError("truncated R serialization")
        v = self.b[self.i:self.i + n]
        self.i += n
        return v

    def header(self) -> None:
        fmt = self._bytes(2)
        if fmt != b"X\n":
            raise ValueError(f"unsupported R serialization format {fmt!r} (only XDR 'X')")
        version = self._int()
        self._int()  # writer version
        self._int()  # minimal reader version
        if version == 3:
            self._bytes(self._int())  # native encoding
        elif version != 2:
            raise ValueError(f"unsupported R serialization version {version}")

    def item(self):
        flags = self._int()
        t = flags & 0xFF
        has_attr = bool(flags & (1 << 9))
        has_tag = bool(flags & (1 << 10))
        levels = flags >> 12
        if t in (self.NILVALUE, self.EMPTYENV, self.BASEENV, self.GLOBALENV, self.UNBOUND,
                 self.MISSING, self.BASENS):
            return None
        if t == self.REFSXP:
            idx = flags >> 8
            if idx == 0:
                idx = self._int()
            return self.refs[idx - 1]
        if t == 1:  # SYMSXP
            name = self.item()
            self.refs.append(RSymbol(name))
            return self.refs[-1]
        if t in (self.NAMESPACESXP, self.PACKAGESXP):  # a string vector of names, kept as a reference
            self._int()  # always 0
            n = self._int()
            strs = [self.item() for _ in range(n)]
            obj = RSymbol(":".join(s or "" for s in strs))
            self.refs.append(obj)
            return obj
        if t == 4:  # ENVSXP
            env: dict = {}
            self.refs.append(env)
            self._int()  # locked
            self.item()  # enclosure
            frame = self.item()
            hashtab = self.item()
            self.item()  # attributes
            for part in (frame, hashtab):
                if isinstance(part, RPairlist):
                    env.update(part.as_dict())
                elif isinstance(part, RVector):
                    for v in part.values:
                        if isinstance(v, RPairlist):
                            env.update(v.as_dict())
            return env
        if t in (2, 3, 5, 6, 17):  # LISTSXP, CLOSXP, PROMSXP, LANGSXP, DOTSXP
            items: list[tuple] = []
            while True:
                attrs = self.item() if has_attr else None
                tag = self.item() if has_tag else None
                car = self.item()
                items.append((tag.name if isinstance(tag, RSymbol) else None, car, attrs))
                # the CDR: a further cell of the same list is read iteratively
                flags = self._int()
                t2 = flags & 0xFF
                if t2 in (2, 3, 5, 6, 17):
                    has_attr = bool(flags & (1 << 9))
                    has_tag = bool(flags & (1 << 10))
                    continue
                self.i -= 4
                self.item()  # the terminator (normally NILVALUE)
                break
            return RPairlist(items)
        if t == 9:  # CHARSXP
            n = self._int()
            if n == -1:
                return None  # NA_STRING
            raw = self._bytes(n)
            latin1 = bool(levels & (1 << 2)) and not bool(levels & (1 << 3))
            return raw.decode("latin-1" if latin1 else "utf-8", "replace")
        if t in (10, 13):  # LGLSXP, INTSXP
            n = self._len()
            vals = list(struct.unpack_from(f">{n}i", self.b, self.i))
            self.i += 4 * n
            na = -(2 ** 31)
            vals = [None if v == na else (bool(v) if t == 10 else v) for v in vals]
            return self._finish("logical" if t == 10 else "integer", vals, has_attr)
        if t == 14:  # REALSXP
            n = self._len()
            vals = list(struct.unpack_from(f">{n}d", self.b, self.i))
            self.i += 8 * n
            return self._finish("double", vals, has_attr)
        if t == 15:  # CPLXSXP
            n = self._len()
            vals = struct.unpack_from(f">{2 * n}d", self.b, self.i)
            self.i += 16 * n
            return self._finish("complex", [complex(vals[2 * k], vals[2 * k + 1]) for k in range(n)], has_attr)
        if t == 16:  # STRSXP
            n = self._len()
            return self._finish("character", [self.item() for _ in range(n)], has_attr)
        if t in (19, 20):  # VECSXP, EXPRSXP
            n = self._len()
            return self._finish("list", [self.item() for _ in range(n)], has_attr)
        if t == 24:  # RAWSXP
            n = self._len()
            return self._finish("raw", list(self._bytes(n)), has_attr)
        if t == self.ALTREP:
            info = self.item()
            state = self.item()
            attr = self.item()
            return self._altrep(info, state, attr)
        raise ValueError(f"unsupported R object type {t} in serialization")

    def _finish(self, rtype: str, vals: list, has_attr: bool) -> "RVector":
        attrs = self.item() if has_attr else None
        return RVector(rtype, vals, attrs.as_dict() if isinstance(attrs, RPairlist) else {})

    def _altrep(self, info, state, attr):
        cls = info.items[0][1].name if isinstance(info, RPairlist) and isinstance(info.items[0][1], RSymbol) else ""
        attrs = attr.as_dict() if isinstance(attr, RPairlist) else {}
        if cls == "compact_intseq" and isinstance(state, RVector):
            n, start, step = (int(x) for x in state.values[:3])
            return RVector("integer", [start + k * step for k in range(n)], attrs)
        if cls == "compact_realseq" and isinstance(state, RVector):
            n, start, step = state.values[:3]
            return RVector("double", [start + k * step for k in range(int(n))], attrs)
        if cls in ("wrap_integer", "wrap_real", "wrap_string", "wrap_logical") and isinstance(state, RPairlist):
            inner = state.items[0][1]
            return RVector(inner.rtype, inner.values, attrs or inner.attributes)
        if cls == "deferred_string" and isinstance(state, RPairlist):
            inner = state.items[0][1]
            return RVector("character", [None if v is None else str(v) for v in inner.values], attrs)
        raise ValueError(f"unsupported ALTREP class {cls!r}")


@dataclass
class RSymbol:
    name: str


@dataclass
class RPairlist:
    items: list  # (tag, value, attributes)

    def as_dict(self) -> dict:
        return {tag: value for tag, value, _ in self.items if tag is not None}


def r_unserialize(data: bytes):
    """Unserialize one R object from XDR bytes (optionally gzip-compressed, as .rds files)."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    r = _RReader(data)
    r.header()
    return r.item()


def _r_decompress(blob: bytes, compressed: int) -> bytes:
    """One value of an R lazy-load database: 4-byte big-endian length, then the stream."""
    n = struct.unpack(">I", blob[:4])[0]
    if compressed in (2, 3):  # a type byte precedes the data
        kind, body = blob[4:5], blob[5:]
        if kind == b"0":
            out = body
        elif kind == b"Z":
            out = zlib.decompress(body)
        elif kind == b"2":
            out = bz2.decompress(body)
        elif kind == b"X":
            out = lzma.decompress(body)
        else:
            raise ValueError(f"unknown lazy-load compression type {kind!r}")
    elif compressed:
        out = zlib.decompress(blob[4:])
    else:
        out = blob[4:]
    if len(out) != n:
        raise ValueError(f"lazy-load value: expected {n} bytes, got {len(out)}")
    return out


def read_r_lazyload(rdx: Path, rdb: Path | None = None) -> dict:
    """Read every variable of an R lazy-load database (``X.rdx`` index + ``X.rdb`` data)."""
    rdx = Path(rdx)
    rdb = Path(rdb) if rdb else rdx.with_suffix(".rdb")
    raw = rdx.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        index_bytes = gzip.decompress(raw)
    else:
        index_bytes = _r_decompress(raw, 1)
    index = r_unserialize(index_bytes)
    if not isinstance(index, RVector) or index.rtype != "list":
        raise ValueError(f"{rdx}: not an R lazy-load index")
    names = index.attributes.get("names")
    fields = dict(zip(names.values, index.values)) if isinstance(names, RVector) else {}
    variables = fields.get("variables")
    comp = fields.get("compressed")
    compressed = int(comp.values[0]) if isinstance(comp, RVector) and comp.values else 1
    if not isinstance(variables, RVector):
        raise ValueError(f"{rdx}: lazy-load index has no variables")
    var_names = variables.attributes["names"].values
    data = rdb.read_bytes()
    out = {}
    for name, where in zip(var_names, variables.values):
        off, length = (int(x) for x in where.values[:2])
        out[name] = r_unserialize(_r_decompress(data[off:off + length], compressed))
    return out
