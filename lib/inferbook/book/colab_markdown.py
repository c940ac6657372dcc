"""MyST Markdown rewritten as the plain Markdown Colab renders, for the Colab twins.

The chapters are written in MyST: roles (``{glue:text}`x` ``, ``{cite:p}`key` ``, ``{math}``,
``{ref}``, ``{doc}``), directives (```` ```{admonition} ````, ``{note}``, ``{math}``,
``{figure}``, ``{glue:figure}``), targets (``(label)=``) and links to other pages' sources.
Colab shows all of that as literal text. `convert_cell` turns one Markdown cell into cells Colab
renders:

- a cell without glued values stays Markdown, with citations as author–year links to the
  site's references page, admonitions as block quotes, math as ``$…$``/``$$…$$``, links to
  other pages (``../book/how_to_run.md``) as links to the site;
- a cell that shows glued values becomes a code cell hidden as a Colab form that calls
  `inferbook.book.prose.show_prose` with the text as a template (``{{name}}`` for each value);
- a ``{glue:figure}`` becomes a hidden code cell that displays the object glued there.

Any role or directive this module does not know raises ValueError, so MyST cannot slip into a
twin unconverted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from inferbook.book.citations import Reference, cite_parenthetical, cite_textual

__all__ = ["Site", "convert_markdown", "convert_cell", "prose_cell_source", "MYST_SYNTAX"]

# What must not survive in a twin's Markdown, or in the text a prose cell renders.
MYST_SYNTAX = re.compile(r"\{[a-zA-Z][\w:-]*\}`|^\s*(```+|:::+)\s*\{|^\s*\([\w.:-]+\)=\s*$"
                         r"|\{glue|\{cite", re.M)
ROLE = re.compile(r"(?<!`)\{(?P<role>[a-zA-Z][\w:-]*)\}`(?P<body>[^`]*)`")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|:{3,})\s*(?P<info>.*?)\s*$")
TARGET = re.compile(r"^\s*\((?P<label>[\w.:-]+)\)=\s*$")
LINK = re.compile(r"\]\((?P<path>(?!https?:|mailto:|#)[^)\s]+?)(?P<anchor>#[^)\s]*)?\)")
ADMONITIONS = {"admonition", "note", "tip", "hint", "important", "warning", "caution",
               "attention", "danger", "error", "seealso"}
# Sphinx's titles of the admonitions, in the Chinese edition (the English is the name's).
TITLES_ZH = {"note": "注", "tip": "提示", "hint": "提示", "important": "重要", "warning": "警告",
             "caution": "当心", "attention": "注意", "danger": "危险", "error": "错误",
             "seealso": "另见"}
FORM_TITLE = "# @title"                  # Colab shows the output and folds the code away


@dataclass
class Site:
    """Where the site lives and what the twins link to: the references page, other pages."""

    url: str                                    # e.g. https://owner.github.io/repo
    raw_url: str                                # raw files of the repository, for images
    bibliography: dict[str, Reference]
    labels: dict[str, str] = field(default_factory=dict)   # (label)= target -> page path
    lang: str = "en"                            # the edition: citations in its words

    def page(self, path: str, anchor: str = "") -> str:
        """The site URL of a page given as a repository path (`book/errata`, with or without a
        source suffix)."""
        path = re.sub(r"\.(md|py|ipynb|html)$", "", path)
        return f"{self.url.rstrip('/')}/{path}.html{anchor}"

    @property
    def references(self) -> str:
        return self.page("book/references")


def _resolve(page: str, target: str) -> str:
    """A link relative to `page` (a repository path) as a repository path."""
    parts = page.split("/")[:-1]
    for piece in target.split("/"):
        if piece == "..":
            parts = parts[:-1]
        elif piece not in ("", "."):
            parts.append(piece)
    return "/".join(parts)


def _anchor(label: str) -> str:
    """The HTML id Sphinx gives a target: lower case, runs of other characters as hyphens."""
    return "#" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def _role(m: re.Match, site: Site, page: str, glued: list[str]) -> str:
    role, body = m["role"], m["body"]
    if role in ("glue", "glue:text", "glue:any", "glue:md"):
        if ":" in body:
            raise ValueError(f"{page}: a glue format spec ({body}) has no Colab form")
        glued.append(body)
        return "{{" + body + "}}"
    if role == "glue:math":
        glued.append(body)
        return "${{" + body + "}}$"
    if role in ("cite", "cite:p", "cite:ps"):
        return cite_parenthetical(body, site.bibliography, site.references, site.lang)
    if role in ("cite:t", "cite:ts"):
        return cite_textual(body, site.bibliography, site.references, site.lang)
    if role == "math":
        return f"${body}$"
    explicit = re.fullmatch(r"(?P<text>.+?)\s*<(?P<target>[^>]+)>", body)
    text, target = (explicit["text"], explicit["target"]) if explicit else (None, body)
    if role in ("ref", "numref"):
        if target not in site.labels:
            raise ValueError(f"{page}: {{{role}}} to an unknown label {target!r}")
        return f"[{text or target}]({site.page(site.labels[target], _anchor(target))})"
    if role == "doc":
        return f"[{text or target}]({site.page(_resolve(page, target))})"
    if role == "eq":
        return f"({target})"
    if role in ("term", "abbr", "dfn"):
        return text or re.sub(r"\s*\(.*\)$", "", target)
    if role in ("sub", "sup", "kbd"):
        return f"<{role}>{body}</{role}>"
    if role == "download":
        return f"[{text or target}]({site.raw_url}/{_resolve(page, target)})"
    raise ValueError(f"{page}: the MyST role {{{role}}} has no Colab form")


def _inline(text: str, site: Site, page: str, glued: list[str]) -> str:
    if "{{" in text:
        raise ValueError(f"{page}: '{{{{' (a MyST substitution?) has no Colab form")
    text = ROLE.sub(lambda m: _role(m, site, page, glued), text)

    def link(m: re.Match) -> str:
        path = _resolve(page, m["path"])
        if re.search(r"\.(md|py|ipynb)$", path):
            return f"]({site.page(path, m['anchor'] or '')})"
        return f"]({site.raw_url}/{path}{m['anchor'] or ''})"
    return LINK.sub(link, text)


def _directive(name: str, argument: str, body: list[str], site: Site, page: str,
               glued: list[str], blocks: list[Any]) -> None:
    """Append the Colab form of one directive to `blocks` (strings of Markdown, or a figure)."""
    options = {}
    while body and (m := re.match(r"^\s*:(\w[\w-]*):\s*(.*)$", body[0])):
        options[m[1]] = m[2]
        body = body[1:]
    if name in ADMONITIONS:
        title = argument if name == "admonition" else (
            TITLES_ZH[name] if site.lang == "zh" else name.capitalize())
        inner = convert_markdown("\n".join(body), site, page, glued)
        quoted = "\n".join(f"> {line}" if line else ">" for line in inner.splitlines())
        blocks.append(f"> **{_inline(title, site, page, glued)}**\n>\n{quoted}"
                      if title else quoted)
    elif name == "math":
        blocks.append("$$\n" + "\n".join(body).strip() + "\n$$")
    elif name in ("figure", "image"):
        caption = convert_markdown("\n".join(body), site, page, glued).strip()
        alt = options.get("alt", caption or argument)
        blocks.append(f"![{alt}]({site.raw_url}/{_resolve(page, argument)})"
                      + (f"\n\n*{caption}*" if caption else ""))
    elif name in ("code-block", "code", "sourcecode", "code-cell"):
        blocks.append(f"```{argument}\n" + "\n".join(body) + "\n```")
    elif name in ("glue:figure", "glue", "glue:any"):
        glued.append(argument)
        blocks.append(GluedObject(argument, convert_markdown("\n".join(body), site, page,
                                                             glued).strip()))
    else:
        raise ValueError(f"{page}: the MyST directive {{{name}}} has no Colab form")


@dataclass(frozen=True)
class GluedObject:
    """A glued object (a figure) shown by its own cell, with an optional caption."""

    name: str
    caption: str


def _blocks(text: str, site: Site, page: str, glued: list[str]) -> list[Any]:
    """The cell's text as Markdown strings and `GluedObject`s, in order."""
    lines, blocks, out, i = text.splitlines(), [], [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if target := TARGET.match(lines[i]):
            out.append(f'<a id="{_anchor(target["label"])[1:]}"></a>')
        elif m:
            close = re.compile(rf"^\s*{re.escape(m['fence'][0])}{{{len(m['fence'])},}}\s*$")
            j = next((k for k in range(i + 1, len(lines)) if close.match(lines[k])), len(lines))
            body = lines[i + 1:j]
            d = re.fullmatch(r"\{(?P<name>[\w:-]+)\}\s*(?P<arg>.*)", m["info"])
            if d is None and m["fence"][0] == ":":
                raise ValueError(f"{page}: a ':::' block without a directive name")
            if out:
                blocks.append(_inline("\n".join(out), site, page, glued))
                out = []
            if d is None:                      # ordinary fenced code: left as it is
                blocks.append("\n".join(lines[i:j + 1]))
            else:
                _directive(d["name"], d["arg"], body, site, page, glued, blocks)
            i = j
        elif lines[i].lstrip().startswith("\\begin{") and "$$" not in lines[i]:
            # An amsmath environment outside $$ (MyST's amsmath extension): give it $$.
            j = next((k for k in range(i, len(lines)) if "\\end{" in lines[k]), len(lines) - 1)
            out += ["$$", *lines[i:j + 1], "$$"]
            i = j
        else:
            out.append(lines[i])
        i += 1
    if out:
        blocks.append(_inline("\n".join(out), site, page, glued))
    return blocks


def convert_markdown(text: str, site: Site, page: str, glued: list[str] | None = None) -> str:
    """`text` (MyST) as Colab Markdown; glued values become {{name}} and are added to `glued`.

    Only for text without {glue:figure}: those need a cell of their own (`convert_cell`).
    """
    glued = [] if glued is None else glued
    blocks = _blocks(text, site, page, glued)
    if any(isinstance(b, GluedObject) for b in blocks):
        raise ValueError(f"{page}: a glued figure inside another directive has no Colab form")
    return "\n\n".join(blocks)


def _literal(text: str) -> str:
    """A readable Python string literal for `text`: raw triple-quoted where possible."""
    for quote in ('"""', "'''"):
        if quote not in text and not text.endswith((quote[0], "\\")):
            return f"r{quote}{text}{quote}"
    return repr(text)


def prose_cell_source(template: str) -> str:
    """The code of a Colab prose cell that renders `template` with this kernel's values."""
    return (f"{FORM_TITLE}\nfrom inferbook.book.prose import show_prose\n\n"
            f"show_prose({_literal(template)})")


def _figure_cell_source(obj: GluedObject) -> str:
    caption = f"\ndisplay(Markdown({_literal(obj.caption)}))" if obj.caption else ""
    return (f"{FORM_TITLE}\nfrom IPython.display import Markdown, display\n\n"
            f"from inferbook.book.prose import glued_object\n\n"
            f"display(glued_object({obj.name!r})){caption}")


def _paragraphs(text: str) -> list[str]:
    """`text` split at blank lines that are outside fenced code and $$ math."""
    paragraphs, current, fence, math = [], [], None, False
    for line in text.splitlines():
        m = FENCE.match(line)
        if fence is None and m and not math:
            fence = m["fence"]
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None and line.strip().count("$$") % 2:
            math = not math
        if not line.strip() and fence is None and not math:
            if current:
                paragraphs.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        paragraphs.append("\n".join(current))
    return paragraphs


def convert_cell(source: str, site: Site, page: str) -> list[tuple[str, str]]:
    """One MyST Markdown cell as Colab cells: a list of (cell type, source).

    Paragraphs without glued values stay Markdown cells (so headings stay in Colab's table of
    contents); runs of paragraphs with them become one hidden "code" form cell each, and so
    does every glued figure. ("{{" is refused in the source, so any in the converted text is a
    glued value.)
    """
    groups: list[tuple[str, list[str]]] = []      # ("markdown" | "prose" | "figure", texts)
    for block in _blocks(source, site, page, []):
        if isinstance(block, GluedObject):
            groups.append(("figure", [_figure_cell_source(block)]))
            continue
        for paragraph in _paragraphs(block):
            kind = "prose" if "{{" in paragraph else "markdown"
            if groups and groups[-1][0] == kind:
                groups[-1][1].append(paragraph)
            else:
                groups.append((kind, [paragraph]))
    return [("markdown", "\n\n".join(texts)) if kind == "markdown"
            else ("code", prose_cell_source("\n\n".join(texts)) if kind == "prose" else texts[0])
            for kind, texts in groups]
