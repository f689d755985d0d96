"""Markup to plain text for the installed corpora (gpu.data.corpus): HTML pages and MediaWiki
articles, prose kept, templates, tables, references and files dropped."""
from __future__ import annotations

import html
import re
from typing import Callable

__all__ = ["html_to_text", "wikitext_to_text"]

_WS_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


def html_to_text(s: str) -> str:
    s = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", s)
    s = re.sub(r"(?i)<br\s*/?>|</p>|</div>|</h\d>|</li>", "\n", s)
    s = re.sub(r"<[^>]+>", "", s)
    s = html.unescape(s)
    s = re.sub(r"[ \t]+", " ", s)
    return _WS_LINES.sub("\n\n", s).strip()


def _strip_nested(s: str, open_: str, close: str, keep: Callable[[str], str | None] | None = None) -> str:
    """Remove (or rewrite with ``keep``) balanced ``open_ ... close`` spans, innermost first;
    an unmatched ``close`` or ``open_`` is kept as text."""
    out: list[str] = []
    stack: list[int] = []  # indices into out where each open span starts
    for tok in re.split(f"({re.escape(open_)}|{re.escape(close)})", s):
        if tok == open_:
            stack.append(len(out))
            out.append(tok)
        elif tok == close and stack:
            start = stack.pop()
            inner = "".join(out[start + 1:])
            del out[start:]
            rep = keep(inner) if keep else None
            if rep:
                out.append(rep)
        elif tok:
            out.append(tok)
    return "".join(out)


def _wikilink(inner: str) -> str | None:
    target, _, label = inner.partition("|")
    prefix = target.split(":", 1)[0].strip().lower() if ":" in target else ""
    if prefix in {"file", "image", "category", "media"} or (len(prefix) in (2, 3) and prefix.isalpha()):
        return None  # files, categories and interlanguage links carry no prose
    if label:
        return label.rsplit("|", 1)[-1]
    return target.lstrip(":")


def wikitext_to_text(s: str) -> str:
    """A small MediaWiki-markup cleaner: keeps prose, drops templates, tables, refs, files."""
    s = re.sub(r"(?s)<!--.*?-->", "", s)
    s = re.sub(r"(?is)<ref\b[^>/]*/>", "", s)
    s = re.sub(r"(?is)<ref\b[^>]*>.*?</ref>", "", s)
    s = re.sub(r"(?is)<(gallery|math|timeline|imagemap|score|syntaxhighlight|source)\b.*?</\1>", "", s)
    s = _strip_nested(s, "{{", "}}")
    s = _strip_nested(s, "{|", "|}")
    s = _strip_nested(s, "[[", "]]", _wikilink)
    s = re.sub(r"\[(?:https?:)?//[^\s\]]+\s+([^\]]*)\]", r"\1", s)
    s = re.sub(r"\[(?:https?:)?//[^\]]*\]", "", s)
    s = re.sub(r"'{2,}", "", s)
    s = re.sub(r"(?m)^(=+)\s*(.*?)\s*\1\s*$", r"\2", s)
    s = re.sub(r"<[^>]+>", "", s)
    s = html.unescape(s)
    s = re.sub(r"(?m)^[*#:;]+\s*", "", s)
    s = re.sub(r"(?m)^\s*(__[A-Z]+__)\s*$", "", s)
    s = re.sub(r"[ \t]+", " ", s)
    s = re.sub(r"(?m)^ +| +$", "", s)
    return _WS_LINES.sub("\n\n", s).strip()
