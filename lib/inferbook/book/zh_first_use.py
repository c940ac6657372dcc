"""A Chinese page glosses 词元 at its first use: 词元（token）.

The glossary (``book/notation.md``) renders *token* as 词元, a word a Chinese reader who knows
the field as "token" may not recognise at once; so each page — a chapter, an exercise, a page
of front matter — writes 词元（token） the first time its Chinese prose uses the word, and
plain 词元 after. Each page is read on its own, because a reader may land on any of them.

Only the reader's prose counts: the Chinese cells of a page (``lang-zh``: a ``# %% [markdown]``
cell of a jupytext source, a ``+++`` block of a Markdown page), outside fenced code, inline
code, math and roles, and outside the glossary terms that contain it (首个词元延迟). Code,
checkers' feedback and figure labels are not a page's prose.

`first_uses` returns, for each page, where its first 词元 is and whether it is glossed;
`unglossed` those that are not, as ``file:line`` findings for the test; `gloss` adds the
gloss in place (``python -m inferbook.book.zh_first_use fix``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Sequence

__all__ = ["TERM", "GLOSS", "PAGE_GLOBS", "pages", "first_uses", "unglossed", "gloss", "main"]

TERM = "词元"
GLOSS = "（token）"
PAGE_GLOBS = ("chapters/*.py", "exercises/*.py", "book/*.py", "book/*.md")
CELL_START = re.compile(r'^# %% \[markdown\].*"lang-zh"|^\+\+\+ \{.*"lang-zh"')
CELL_END = re.compile(r"^# %%|^\+\+\+")
FENCE = re.compile(r"^\s*(?:# )?\s*(```|:::)")
# What a reader does not read as prose on a line: roles, inline code, inline math.
HIDDEN = re.compile(r"\{[a-zA-Z][\w:-]*\}`[^`]*`|`[^`\n]*`|\$[^$\n]*\$|\]\([^)]*\)")
# Glossary terms that hold the word: a gloss inside one would split the term, so the first
# use that counts is the first outside them (首个词元延迟 is *time to first token*).
COMPOUNDS = re.compile("首个词元延迟|每个输出词元的时间")


def pages(root: Path) -> list[Path]:
    """Every page that may hold Chinese prose, relative to `root`."""
    return sorted({p.relative_to(root) for g in PAGE_GLOBS for p in root.glob(g)})


def _prose_lines(text: str):
    """(1-based line number, line with hidden spans blanked) of every Chinese prose line."""
    inside = fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if CELL_START.match(line):
            inside, fenced = True, False
            continue
        if CELL_END.match(line):
            inside = False
            continue
        if not inside:
            continue
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            blank = HIDDEN.sub(lambda m: " " * len(m[0]), line)
            yield number, COMPOUNDS.sub(lambda m: " " * len(m[0]), blank)


def first_uses(root: Path, paths: Sequence[Path] | None = None
               ) -> dict[str, tuple[int, int, bool]]:
    """page -> (line, column, glossed) of its first 词元 in Chinese prose; pages that never
    use the word are left out."""
    out = {}
    for path in paths if paths is not None else pages(Path(root)):
        text = (Path(root) / path).read_text(encoding="utf-8")
        for number, line in _prose_lines(text):
            column = line.find(TERM)
            if column >= 0:
                glossed = line.startswith(GLOSS, column + len(TERM))
                out[str(path)] = (number, column, glossed)
                break
    return out


def unglossed(root: Path, paths: Sequence[Path] | None = None) -> list[str]:
    """``file:line: ...`` for every page whose first 词元 lacks its gloss."""
    return [f"{page}:{line}: the page's first {TERM} is not written {TERM}{GLOSS}"
            for page, (line, _, glossed) in first_uses(root, paths).items() if not glossed]


def gloss(root: Path, paths: Sequence[Path] | None = None) -> list[str]:
    """Add the gloss at each page's first use where it is missing; the pages changed."""
    changed = []
    for page, (number, column, glossed) in first_uses(root, paths).items():
        if glossed:
            continue
        path = Path(root) / page
        lines = path.read_text(encoding="utf-8").split("\n")
        at = column + len(TERM)
        lines[number - 1] = lines[number - 1][:at] + GLOSS + lines[number - 1][at:]
        path.write_text("\n".join(lines), encoding="utf-8")
        changed.append(page)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``check`` (exit 1 and one line per unglossed page) or ``fix``; bad input: exit 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args not in (["check"], ["fix"]):
        print("zh_first_use: expected one verb, check or fix", file=sys.stderr)
        return 2
    if args == ["fix"]:
        for page in gloss(Path(".")):
            print(f"{page}: glossed")
    found = unglossed(Path("."))
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
