"""The Chinese edition's wording, checked and mechanically repaired.

The Chinese pages are written in the glossary's terms (``book/notation.md``), and a Chinese
sentence reads as Chinese: a ratio is "快了 25 倍", never "快了 25×"; *compute* is 计算
(算术 only in 算术强度, *arithmetic intensity*); a source is named by its title, never by
the project's internal label ("seed 000") or by a nickname left in English ("scaling book").
The glossary's table of rejected variants decides the rest: each row names a variant that
some pages used (拆分), the term every page uses instead (切分), and whether the replacement
is safe to make everywhere without reading the sentence.

`findings` reads every source that holds Chinese text — chapters, exercises, front matter,
and the library's Chinese strings (glued labels, checkers' feedback, question sets) — and
returns what breaks a rule, with its file and line. `fix` makes the replacements that need no
judgement, only inside Chinese text: a Markdown line or comment that holds Chinese, or a
Python string literal that does (an English string beside it on the same line is left alone).
What it cannot fix (a seed label, a calque) it leaves for a person, and `findings` still
reports it. Run it again after merging branches that touched Chinese prose::

    python -m inferbook.book.zh_terms check     # exit 1 and one line per finding
    python -m inferbook.book.zh_terms fix       # replace what is mechanical, then check
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

__all__ = ["Finding", "Rule", "chinese_segments", "rejected_variants", "rules", "sources",
           "findings", "fix_text", "fix", "main"]

HAN = re.compile(r"[\u4e00-\u9fff]")
HAN_OR_MARK = "\u4e00-\u9fff\u3000-\u303f\uff00-\uffef"   # Han, full-width punctuation
GLOSSARY = Path("book") / "notation.md"
# The heading of the glossary's table of rejected variants, in its English block.
VARIANTS_HEADING = "## Rejected variants"
SOURCE_GLOBS = ("chapters/*.py", "exercises/*.py", "book/*.md", "book/*.py",
                "lib/inferbook/**/*.py")
# This module states the rules, so it quotes what they reject.
EXEMPT = {Path("lib/inferbook/book/zh_terms.py")}
STRING = re.compile(r"""(?<![\w])[rbfu]{0,2}("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')""",
                    re.I)
SCALING_BOOK_TITLE = "《How to Scale Your Model》"


@dataclass(frozen=True)
class Finding:
    """One break of a rule: where (file relative to the root, 1-based line) and what."""

    path: str
    line: int
    rule: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.text.strip()[:100]}"


@dataclass(frozen=True)
class Rule:
    """A pattern that Chinese text must not contain, and its replacement where one is safe
    (a string, or a function of the match); None where a person must reword the sentence."""

    name: str
    pattern: re.Pattern
    replacement: str | Callable[[re.Match], str] | None = None
    skip: frozenset[Path] = frozenset()


def chinese_segments(line: str, python: bool) -> list[tuple[int, int]]:
    """The (start, end) spans of `line` that are Chinese text. In Markdown, the whole line if
    it holds a Han character; in Python, a comment that does, or each string literal that
    does (a line inside a triple-quoted string is taken whole)."""
    if not HAN.search(line):
        return []
    if not python:
        return [(0, len(line))]
    stripped = line.lstrip()
    if stripped.startswith("#") or ('"' not in line and "'" not in line):
        return [(0, len(line))]
    return [m.span(1) for m in STRING.finditer(line) if HAN.search(m[1])]


def _ratio(m: re.Match) -> str:
    return f"{m['number']} 倍"


def rules(root: Path) -> list[Rule]:
    """The style rules (fixed in this module) and the glossary's rejected variants."""
    glossary = frozenset({GLOSSARY})     # it quotes what the rules reject
    out = [
        # "25×" ends a ratio; "4×4" (a mesh), "8× H100" (a count of chips) are not ratios.
        Rule("ratio written with × (write N 倍)",
             re.compile(r"(?<![A-Za-z0-9_.,])(?P<number>\d[\d,]*(?:\.\d+)?)\s*×"
                        r"(?![ \t]*[A-Za-z0-9_$\\({`])(?:[ \t]+(?=[\u4e00-\u9fff]))?"),
             _ratio),
        Rule("'×' after a glued value (a ratio's Chinese form already says 倍)",
             re.compile(r"\{glue(?::\w+)?\}`[^`]+`[ \t]*×(?![ \t]*[A-Za-z0-9_$\\({`])")),
        Rule("算术 outside 算术强度 (compute is 计算)", re.compile(r"算术(?:运算)?(?!强度)"),
             "计算", glossary),
        Rule("internal source label (name the source by its title)",
             re.compile(r"\bseeds? 0\d\d(?:/0\d\d)?\b"), None, glossary),
        Rule("'scaling book' left in English (name it by its title)",
             re.compile(rf"(?:(?<=[{HAN_OR_MARK}])[ \t])?(?:the |The )?[Ss]caling[ \t]+[Bb]ook"
                        rf"(?:'s)?(?:[ \t](?=[{HAN_OR_MARK}]))?"),
             SCALING_BOOK_TITLE, glossary),
    ]
    for variant, use, automatic in rejected_variants(root):
        out.append(Rule(f"rejected variant {variant} (the glossary's term: {use})",
                        re.compile(re.escape(variant)), use if automatic else None, glossary))
    return out


def rejected_variants(root: Path) -> list[tuple[str, str, bool]]:
    """(variant, the term used instead, whether `fix` replaces it) for every row of the
    glossary's table of rejected variants."""
    text = (root / GLOSSARY).read_text(encoding="utf-8")
    if VARIANTS_HEADING not in text:
        raise ValueError(f"{GLOSSARY} has no section {VARIANTS_HEADING!r}")
    rows = []
    for line in text.split(VARIANTS_HEADING, 1)[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 4 or not HAN.match(cells[0]) or cells[2].lower() not in ("yes", "no"):
            continue
        rows.append((cells[0], cells[1].strip("`"), cells[2].lower() == "yes"))
    if not rows:
        raise ValueError(f"{GLOSSARY}: the section {VARIANTS_HEADING!r} lists no variant")
    return rows


def sources(root: Path) -> list[Path]:
    """Every file that may hold Chinese text, relative to `root`."""
    found = {p.relative_to(root) for g in SOURCE_GLOBS for p in root.glob(g) if p.is_file()}
    return sorted(found - EXEMPT)


def _spans(text: str, path: Path) -> Iterator[tuple[int, str, int, int]]:
    python = path.suffix == ".py"
    for number, line in enumerate(text.splitlines(), 1):
        for start, end in chinese_segments(line, python):
            yield number, line, start, end


def findings(root: Path, paths: Sequence[Path] | None = None) -> list[Finding]:
    """Every break of a rule in the Chinese text of `paths` (default: `sources`)."""
    root = Path(root)
    active = rules(root)
    out = []
    for path in paths if paths is not None else sources(root):
        text = (root / path).read_text(encoding="utf-8")
        for number, line, start, end in _spans(text, path):
            for rule in active:
                if path in rule.skip:
                    continue
                for m in rule.pattern.finditer(line, start, end):
                    out.append(Finding(str(path), number, rule.name, line))
        out += _across_lines(text, path, active)
    return out


def _across_lines(text: str, path: Path, active: Sequence[Rule]) -> list[Finding]:
    """Breaks of a rule that a wrapped line splits ("对数和" at the end of one line, "指数" at
    the start of the next): prose lines are joined as the Chinese edition joins them."""
    lines = text.splitlines()
    out = []
    for number, (first, second) in enumerate(zip(lines, lines[1:]), 1):
        if not (HAN.search(first) and HAN.search(second)):
            continue
        tail, head = first.rstrip(), re.sub(r"^\s*#?\s*", "", second)
        for rule in active:
            if path in rule.skip:
                continue
            for m in rule.pattern.finditer(tail + head):
                if m.start() < len(tail) < m.end():
                    out.append(Finding(str(path), number, rule.name + " (across a line break)",
                                       tail[-20:] + " / " + head[:20]))
    return out


def _spaced(m: re.Match, new: str) -> str:
    """`new` in place of the match `m`, with the space Chinese typesetting wants between a
    Han character and Latin text (none beside full-width punctuation such as 《》)."""
    before, after = m.string[max(m.start() - 1, 0):m.start()], m.string[m.end():m.end() + 1]
    if new[:1].isascii() and new[:1].isalnum() and HAN.match(before):
        new = " " + new
    if new[-1:].isascii() and new[-1:].isalnum() and HAN.match(after):
        new = new + " "
    return new


def fix_text(text: str, path: Path, active: Sequence[Rule]) -> tuple[str, int]:
    """`text` with every automatic rule's replacement made inside its Chinese text, and how
    many replacements were made."""
    lines = text.split("\n")
    count = 0

    def replace(rule: Rule) -> Callable[[re.Match], str]:
        def one(m: re.Match) -> str:
            nonlocal count
            count += 1
            new = rule.replacement if isinstance(rule.replacement, str) else rule.replacement(m)
            return _spaced(m, new)
        return one

    for i, line in enumerate(lines):
        for rule in active:
            if rule.replacement is None or path in rule.skip:
                continue
            for start, end in reversed(chinese_segments(line, path.suffix == ".py")):
                line = line[:start] + rule.pattern.sub(replace(rule), line[start:end]) + line[end:]
        lines[i] = line
    return "\n".join(lines), count


def fix(root: Path, paths: Sequence[Path] | None = None) -> dict[str, int]:
    """Make the automatic replacements in place; the number made, per file changed."""
    root = Path(root)
    active = rules(root)
    changed = {}
    for path in paths if paths is not None else sources(root):
        text = (root / path).read_text(encoding="utf-8")
        new, count = fix_text(text, path, active)
        if count:
            (root / path).write_text(new, encoding="utf-8")
            changed[str(path)] = count
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """``check``: exit 1 and list the findings, 0 if none. ``fix``: replace what is
    mechanical, report what was changed, then check. Bad input: exit 2 and one line."""
    parser = argparse.ArgumentParser(prog="python -m inferbook.book.zh_terms",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("verb", choices=["check", "fix"])
    parser.add_argument("paths", nargs="*", help="files relative to --root (default: all)")
    parser.add_argument("--root", default=".", help="the book's repository (default: .)")
    def one_line(message: str) -> None:
        print(f"zh_terms: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = one_line            # bad input: one line, exit 2 (no usage block)
    try:
        args = parser.parse_intermixed_args(argv)
    except SystemExit as done:           # --help, or the one line above
        return int(done.code or 0)
    root = Path(args.root)
    try:
        paths = [Path(p) for p in args.paths] or None
        for p in paths or []:
            if not (root / p).is_file():
                raise ValueError(f"no such file under {root}: {p}")
        if args.verb == "fix":
            for path, count in fix(root, paths).items():
                print(f"{path}: {count} replaced")
        found = findings(root, paths)
    except (OSError, ValueError) as err:
        print(f"zh_terms: {err}", file=sys.stderr)
        return 2
    for finding in found:
        print(finding)
    print(f"{len(found)} finding(s) in the Chinese text", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
