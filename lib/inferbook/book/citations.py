"""Citations as author–year text, for the places where Sphinx does not render them (Colab).

On the site, ``{cite:p}`austin2025scaling` `` becomes "(Austin et al., 2025)" through
sphinxcontrib-bibtex and `book/references.bib`. A Colab notebook shows Markdown only, so its
twin carries the same text, written here from the same bibliography and linked to the site's
references page. The style follows the site's (``bibtex_reference_style: author_year``): one
author "Chen", two "Dao and Fu", more "Austin et al."; ``{cite:t}`` gives "Austin et al.
(2025)", ``{cite:p}`` "(Austin et al., 2025; Lienhart, 2023)".

Only the parts of BibTeX that `references.bib` uses are read: ``@type{key, field = {...}}``
entries, braces, and the LaTeX accents of authors' names.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Reference", "parse_bibtex", "load_bibliography", "author_year_names",
           "cite_parenthetical", "cite_textual"]


@dataclass(frozen=True)
class Reference:
    """One bibliography entry, as much of it as a citation needs."""

    key: str
    authors: tuple[str, ...]      # family names, in order ("others" kept as the last one)
    year: str
    title: str


_ENTRY = re.compile(r"@(\w+)\s*\{\s*([^,\s]+)\s*,")
# LaTeX accent commands as they appear in names: {\'e} -> é, {\L} -> Ł.
_ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", '"': "\u0308", "~": "\u0303",
            "c": "\u0327", "v": "\u030c"}
_LETTERS = {"L": "Ł", "l": "ł", "o": "ø", "O": "Ø", "ss": "ß", "ae": "æ", "AE": "Æ"}


def _delatex(text: str) -> str:
    def accent(m: re.Match) -> str:
        return unicodedata.normalize("NFC", m["letter"] + _ACCENTS[m["cmd"]])

    text = re.sub(r"\{?\\(?P<cmd>['`^\"~cv])\{?(?P<letter>[A-Za-z])\}?\}?", accent, text)
    text = re.sub(r"\{?\\(L|l|o|O|ss|ae|AE)\b\}?", lambda m: _LETTERS[m[1]], text)
    return text.replace("{", "").replace("}", "").strip()


def _closing(text: str, start: int) -> int:
    """The index of the brace that closes the one at `start`."""
    depth = 0
    for k in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[k], 0)
        if depth == 0:
            return k
    raise ValueError(f"unbalanced braces in the bibliography after {text[start:start + 40]!r}")


def _fields(body: str) -> dict[str, str]:
    """`name = {value}` (or `name = value`) pairs of one entry's body."""
    fields, i = {}, 0
    while (m := re.compile(r"\s*(\w+)\s*=\s*").match(body, i)):
        name, j = m[1].lower(), m.end()
        if body[j:j + 1] == "{":
            k = _closing(body, j)
            fields[name], i = body[j + 1:k], k + 1
        else:                         # a bare number, a quoted string or a macro
            end = re.compile(r"[^,]*").match(body, j).end()
            fields[name], i = body[j:end].strip().strip('"'), end
        i = re.compile(r"\s*,?").match(body, i).end()
    return fields


def _family_name(author: str) -> str:
    author = author.strip()
    if author.startswith("{") and author.endswith("}"):      # a corporate or single name
        return _delatex(author)
    if "," in author:                                         # "Last, First"
        return _delatex(author.split(",")[0])
    return _delatex(author.split()[-1])                      # "First Last"


def parse_bibtex(text: str) -> dict[str, Reference]:
    """Every entry of a BibTeX text, by key."""
    refs = {}
    for m in _ENTRY.finditer(text):
        body = text[m.end():_closing(text, text.index("{", m.start()))]
        f = _fields(body)
        authors = tuple(_family_name(a) for a in re.split(r"\s+and\s+", f.get("author", ""))
                        if a.strip())
        refs[m[2]] = Reference(m[2], authors, f.get("year", "n.d."), _delatex(f.get("title", "")))
    return refs


def load_bibliography(path: str | Path) -> dict[str, Reference]:
    """The entries of a .bib file, by key."""
    return parse_bibtex(Path(path).read_text(encoding="utf-8"))


# "et al." and "and" in each language's author–year label (Chinese: "Austin 等", "Dao 和 Fu").
_WORDS = {"en": ("et al.", "and"), "zh": ("等", "和")}


def author_year_names(ref: Reference, lang: str = "en") -> str:
    """"Chen", "Dao and Fu", "Austin et al." — the site's author–year label."""
    others, both = _WORDS[lang]
    names = list(ref.authors)
    if not names:
        return ref.title or ref.key
    if len(names) > 2 or names[-1].lower() == "others":
        return f"{names[0]} {others}"
    return f" {both} ".join(names)


def _lookup(keys: str, bib: dict[str, Reference]) -> list[Reference]:
    refs = []
    for key in (k.strip() for k in keys.split(",")):
        if key not in bib:
            raise ValueError(f"citation key {key!r} is not in the bibliography")
        refs.append(bib[key])
    return refs


def cite_parenthetical(keys: str, bib: dict[str, Reference], url: str,
                       lang: str = "en") -> str:
    """Markdown for {cite:p}: "([Austin et al., 2025](url); [Lienhart, 2023](url))"."""
    return "(" + "; ".join(f"[{author_year_names(r, lang)}, {r.year}]({url})"
                           for r in _lookup(keys, bib)) + ")"


def cite_textual(keys: str, bib: dict[str, Reference], url: str, lang: str = "en") -> str:
    """Markdown for {cite:t}: "[Austin et al. (2025)](url)", several joined by commas."""
    return ", ".join(f"[{author_year_names(r, lang)} ({r.year})]({url})"
                     for r in _lookup(keys, bib))
