"""Built-in texts cut into chunks and dealt to roles, and folders of the user's own text.

Roles: :func:`split_documents` assigns whole source documents to ``calib`` (fitting maps),
``lambda`` (choosing the ridge penalty) and ``eval`` (haystacks and long-document loss),
disjoint by document id and by content hash, and records the assignment in a manifest.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Iterable, Sequence

from rfmodel.atomic import write_text

from .clients import FetchError
from .domains import (DOMAINS, FETCHERS, PROSE_DOMAINS, Document, available_domains,
                      domain_errors, load_domain, normalize, safe_name, texts_dir)

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
#: share of each domain's source documents per role
ROLE_SHARES = {"calib": 0.5, "lambda": 0.15, "eval": 0.35}
#: the seed of the built-in split that every caller shares (keep it fixed)
SPLIT_SEED = 0


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
             "sources": {n: FETCHERS[n][1] for n in names},
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
    domain = safe_name(root.resolve().name) or "local"
    docs, unreadable = [], []
    for p in files:
        try:
            text = p.read_bytes().decode("utf-8", "replace")
        except OSError as e:
            unreadable.append(f"{p.name} ({e.strerror or e})")
            continue
        text = normalize(text)
        if text.strip():
            rel = p.relative_to(root).as_posix()
            docs.append(Document(f"{domain}/{rel}", domain, text))
    if not docs:
        detail = f"; unreadable: {', '.join(unreadable)}" if unreadable else ""
        if not files:
            raise ValueError(f"calibration folder {str(root)!r} holds no *.txt or *.md files: {what}")
        raise ValueError(f"calibration folder {str(root)!r} holds no readable non-empty text{detail}: {what}")
    return docs
