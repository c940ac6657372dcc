"""One source, two languages: how a page holds its prose in English and in Chinese.

A chapter, exercise or front-matter notebook (py:percent) keeps every code cell once. Each of
its English Markdown cells may be followed by its Chinese twin, a Markdown cell tagged
``lang-zh``::

    # %% [markdown]
    # The decode step reads every weight once.

    # %% [markdown] tags=["lang-zh"]
    # 解码步骤把每个权重读取一遍。

A Markdown page (book/*.md) does the same with MyST's block breaks: the text up to a line
``+++ {"tags": ["lang-zh"]}`` is the English block, the text from it to the next ``+++`` its
Chinese twin.

A Markdown cell tagged ``lang-all`` belongs to every edition, like a code cell: it is for
what needs no translation because it already holds both languages (the glossary's table of
English and Chinese terms). It has no twin and is shown as it is.

`select` gives the page of one language: the English edition drops every Chinese cell; the
Chinese edition keeps each Chinese cell in place of the English one before it, keeps an
English cell that has no twin yet (a page not yet translated reads in English), and renames
the glued values of its Chinese prose to their Chinese forms (``{glue:text}`x` `` shows
``x__zh``, which `inferbook.book.present.glue` stores beside ``x``). Code cells are never
touched, so both editions of a page have the same code cells — the same execution.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from inferbook.book.language import DEFAULT, check_language, glued_name

__all__ = ["tag", "cell_language", "twins", "translated", "select", "edition", "UNTRANSLATED",
           "rename_glue", "join_cjk_lines",
           "Block", "markdown_blocks", "join_blocks", "select_markdown", "GLUE_REFERENCE"]

# A glued value in MyST: a role ({glue:text}`name`, {glue}`name`) or a directive line
# (```{glue:figure} name). The name ends at a backtick, a colon (a format spec) or a space.
GLUE_REFERENCE = re.compile(r"(?P<head>\{glue(?::\w+)?\}`)(?P<name>[^`:\s]+)"
                            r"|(?P<dhead>^\s*(?:```+|:::+)\s*\{glue(?::\w+)?\}\s+)(?P<dname>\S+)",
                            re.M)
BREAK = re.compile(r"^\+\+\+[ \t]*(?P<meta>\{.*\})?[ \t]*$")
# Chinese characters and punctuation (with the dashes, ellipsis and quotes Chinese text uses).
CJK = "\u2014\u2026\u2018\u2019\u201c\u201d\u2e80-\u9fff\u3000-\u303f\uff00-\uffef"
SOFT_BREAK = re.compile(rf"(?<=[{CJK}])[ \t]*\n[ \t]*(?=[{CJK}])")
FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})")


def tag(lang: str) -> str:
    """The cell tag of a translation into `lang` (``lang-zh``)."""
    return f"lang-{check_language(lang)}"


def _tags(cell: Any) -> list[str]:
    return list((cell.metadata or {}).get("tags", []))


# The tag of a Markdown cell that every edition shows as it is (see the module doc).
SHARED_TAG = "lang-all"


def cell_language(cell: Any) -> str | None:
    """The language of a Markdown cell's prose; None for a cell every edition shares (a code
    cell, or a Markdown cell tagged SHARED_TAG)."""
    if cell.cell_type == "markdown" and SHARED_TAG in _tags(cell):
        if len([t for t in _tags(cell) if t.startswith("lang-")]) > 1:
            raise ValueError(f"a {SHARED_TAG} cell cannot also be tagged with a language")
        return None
    langs = [t.removeprefix("lang-") for t in _tags(cell) if t.startswith("lang-")]
    if cell.cell_type != "markdown":
        if langs:
            raise ValueError("a code cell is shared by every language: it cannot be tagged "
                             f"{', '.join('lang-' + x for x in langs)}")
        return None
    if len(langs) > 1:
        raise ValueError(f"a Markdown cell has several language tags: {langs}")
    return check_language(langs[0]) if langs else DEFAULT


def twins(cells: Sequence[Any]) -> list[tuple[int, dict[str, int]]]:
    """For each English Markdown cell, its index and its translations' indices by language.

    A translation must directly follow its English cell (or another translation of it); a
    translated cell anywhere else is an error, as is a second one in the same language.
    """
    out: list[tuple[int, dict[str, int]]] = []
    owner = None            # the English cell that the previous cell is, or translates
    for i, cell in enumerate(cells):
        lang = cell_language(cell)
        if lang == DEFAULT:
            out.append((i, {}))
            owner = len(out) - 1
        elif lang is not None:
            if owner is None:
                raise ValueError(f"cell {i + 1}: a {lang} cell must directly follow the "
                                 "English cell it translates")
            if lang in out[owner][1]:
                raise ValueError(f"cell {i + 1}: a second {lang} translation of cell "
                                 f"{out[owner][0] + 1}")
            out[owner][1][lang] = i
        else:
            owner = None
    return out


def translated(cells: Sequence[Any], lang: str) -> bool:
    """Whether the page has any prose in `lang` (English: always)."""
    check_language(lang)
    return lang == DEFAULT or any(cell_language(c) == lang for c in cells)


def rename_glue(text: str, lang: str) -> str:
    """MyST text whose glued values are shown in their `lang` forms (see the module doc)."""
    def rename(m: re.Match) -> str:
        if m["head"]:
            return m["head"] + glued_name(m["name"], lang)
        return m["dhead"] + glued_name(m["dname"], lang)
    return GLUE_REFERENCE.sub(rename, text)


def join_cjk_lines(text: str) -> str:
    """Markdown whose line breaks between two Chinese characters are removed, outside fenced
    blocks. A source wraps its lines; a browser shows a wrapped line's break as a space,
    which Chinese text does not have (Chromium does not apply CSS's rule that drops it)."""
    out, fence = [], None
    for block in re.split(r"(^\s*(?:`{3,}|:{3,}|~{3,}).*$)", text, flags=re.M):
        if FENCE.match(block):
            mark = block.strip()[:3]
            fence = None if fence == mark else (fence or mark)
            out.append(block)
        else:
            out.append(block if fence and fence[0] != ":" else SOFT_BREAK.sub("", block))
    return "".join(out)


def select(cells: Sequence[Any], lang: str) -> list[Any]:
    """The cells of `lang`'s edition, in order (see the module doc). Cells are not copied;
    a kept translation gets a new source (glue renamed) and loses its language tag."""
    check_language(lang)
    keep: dict[int, Any] = {}
    pairs = twins(cells)
    for english, translations in pairs:
        if lang in translations:
            cell = cells[translations[lang]]
            cell.source = rename_glue(join_cjk_lines(cell.source), lang)
            cell.metadata["tags"] = [t for t in _tags(cell) if t != tag(lang)]
            if not cell.metadata["tags"]:
                del cell.metadata["tags"]
            keep[english] = cell
    dropped = {i for _, translations in pairs for i in translations.values()}
    return [keep.get(i, cell) for i, cell in enumerate(cells) if i not in dropped]


# A page that has no prose in a language yet is shown in English, under this note.
UNTRANSLATED = {
    "zh": ":::{note}\n本页尚未译成中文，下面是英文原文。\n:::",
}


def edition(cells: Sequence[Any], lang: str, new_cell: Callable[[str], Any]) -> list[Any]:
    """The cells of `lang`'s edition: `select`, plus the note `UNTRANSLATED` after the first
    cell (the title) of a page not yet translated into `lang`. `new_cell(text)` makes the
    Markdown cell of the note."""
    if translated(cells, lang):
        return select(cells, lang)
    out = select(cells, lang)
    return out[:1] + [new_cell(UNTRANSLATED[lang])] + out[1:]


# Markdown pages ----------------------------------------------------------------------------

@dataclass
class Block:
    """A stretch of a Markdown page between block breaks, shaped like a notebook cell."""

    source: str
    metadata: dict = field(default_factory=dict)
    cell_type: str = "markdown"


def markdown_blocks(text: str) -> list[Block]:
    """A Markdown page split at its ``+++`` block breaks (not those inside fenced code)."""
    blocks, lines, meta, fence = [], [], {}, None
    for line in text.splitlines():
        if m := FENCE.match(line):
            mark = m[1][0] * 3
            fence = None if fence == mark else (fence or mark)
        if fence is None and (b := BREAK.match(line)):
            blocks.append(Block("\n".join(lines).strip("\n"), meta))
            try:
                meta = json.loads(b["meta"]) if b["meta"] else {}
            except json.JSONDecodeError as err:
                raise ValueError(f"a block break's metadata is not JSON: {line!r}") from err
            lines = []
        else:
            lines.append(line)
    blocks.append(Block("\n".join(lines).strip("\n"), meta))
    return [b for b in blocks if b.source or b.metadata]


def join_blocks(blocks: Sequence[Block]) -> str:
    """The blocks as one Markdown text (block breaks dropped)."""
    return "\n\n".join(b.source for b in blocks if b.source) + "\n"


def select_markdown(text: str, lang: str) -> str:
    """A Markdown page in `lang` (see `edition`; the note of an untranslated page goes under
    its first line, the title)."""
    blocks = markdown_blocks(text)
    if blocks and not translated(blocks, lang):
        title, _, rest = blocks[0].source.partition("\n")
        blocks[:1] = [Block(title, blocks[0].metadata), Block(rest)]
    return join_blocks(edition(blocks, lang, Block))

