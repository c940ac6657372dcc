"""An exercise source's format: from it, the student notebook and the book's exercise page.

An exercise notebook is written once, as a py:percent source in `exercises/`, with its
solutions in it. A solution is the code between two marker lines::

    # BEGIN SOLUTION
    kv_bytes = 2 * cfg.L * cfg.K * cfg.H * 2
    # END SOLUTION

or, for a written answer, a whole Markdown cell tagged ``solution``. Two things are made
from the source:

- the **student notebook** (`student_notebook`), committed as the Colab `.ipynb` beside the
  source by `inferbook.book.notebooks` (`make notebooks`), and graded by `inferbook grade`.
  Each solution becomes a stub: inside a function, ``raise NotImplementedError`` (which
  `check` reports as "not attempted"); at the top level, ``name = ...`` for every name the
  solution assigns. Solution cells of Markdown become an empty answer cell.
  No line of a solution survives.
- the **book page** (`book_notebook`, which the book's reader `inferbook.book.reader` applies
  to a source with solutions): the marker lines are dropped and each solution cell is folded
  behind a "Show solution" toggle; the page runs, so its checks show that the solutions pass.

Rules the sources follow (`validate` enforces them): markers come in pairs, not nested; a
cell holding a solution calls no `check` (the check goes in the next cell, so the toggle hides
the solution and nothing else); cells outside solutions never call the student's functions —
only `check` does, so an unanswered notebook runs top to bottom.
"""

from __future__ import annotations

import ast
import copy
import io
import re
import textwrap
import tokenize
from typing import Any

__all__ = ["BEGIN", "END", "SOLUTION_TAG", "QUESTION_ID", "solution_regions", "student_source",
           "student_notebook", "book_notebook", "has_solutions", "validate", "question_ids"]

BEGIN = re.compile(r"^(?P<indent>[ \t]*)#\s*BEGIN SOLUTION\s*$")
END = re.compile(r"^[ \t]*#\s*END SOLUTION\s*$")
SOLUTION_TAG = "solution"
# A question's id: its set (the chapter, "ch01") and its name; `inferbook.grading.registry`
# finds the sets by it.
QUESTION_ID = re.compile(r"^(ch\d\d)\.[a-z0-9_]+$")
CHECK_CALL = re.compile(r"""\bcheck\(\s*(?P<q>["'])(?P<id>[^"']+)(?P=q)""")
STUDENT_ANSWER_CELL = "*Your answer:* "
# The words this module writes into a page, per language (the prose itself is the source's).
WORDS = {"en": {"answer": STUDENT_ANSWER_CELL, "solution": "Solution"},
         "zh": {"answer": "*你的答案：* ", "solution": "解答"}}


def solution_regions(source: str) -> list[tuple[int, int, str]]:
    """(line of BEGIN, line of END, indentation) for each solution in a code cell's source."""
    regions, begin = [], None
    for i, line in enumerate(source.splitlines()):
        if m := BEGIN.match(line):
            if begin is not None:
                raise ValueError(f"line {i + 1}: BEGIN SOLUTION inside another solution")
            begin, indent = i, m["indent"]
        elif END.match(line):
            if begin is None:
                raise ValueError(f"line {i + 1}: END SOLUTION without BEGIN SOLUTION")
            regions.append((begin, i, indent))
            begin = None
    if begin is not None:
        raise ValueError(f"line {begin + 1}: BEGIN SOLUTION is never ended")
    return regions


def _assigned_names(code: str) -> list[str]:
    """Names a block of top-level code assigns, in order (functions and imports excluded)."""
    try:
        tree = ast.parse(textwrap.dedent(code))
    except SyntaxError:
        return []
    names: list[str] = []

    def add(target: ast.AST) -> None:
        if isinstance(target, ast.Name) and target.id not in names:
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                add(t)

    for node in tree.body:
        if isinstance(node, ast.Assign):
            for t in node.targets:
                add(t)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            add(node.target)
    return names


def _stub(solution: list[str], indent: str, used: set[str] | None) -> list[str]:
    if indent:      # inside a function (or any block): a body that says "not done yet"
        return [f"{indent}# YOUR CODE HERE", f'{indent}raise NotImplementedError("your code here")']
    names = [n for n in _assigned_names("\n".join(solution)) if used is None or n in used]
    return [f"{name} = ...  # YOUR ANSWER HERE" for name in names] or ["# YOUR CODE HERE"]


def student_source(source: str, used: set[str] | None = None) -> str:
    """A code cell's source with every solution replaced by its stub.

    A top-level solution becomes ``name = ...`` for each name it assigns that the rest of the
    notebook uses (`used`; all of them if None): the answers, not the scratch variables.
    """
    lines, out, pos = source.splitlines(), [], 0
    for begin, end, indent in solution_regions(source):
        out += lines[pos:begin] + _stub(lines[begin + 1:end], indent, used)
        pos = end + 1
    return "\n".join(out + lines[pos:])


def _names_outside_solutions(nb: Any) -> set[str]:
    """Every identifier in the notebook's code outside the solutions."""
    names: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type == "code":
            lines, pos, kept = cell.source.splitlines(), 0, []
            for begin, end, _ in solution_regions(cell.source):
                kept += lines[pos:begin]
                pos = end + 1
            names |= _identifiers("\n".join(kept + lines[pos:]))
    return names


def _identifiers(code: str) -> set[str]:
    """The names in a piece of code (not the words in its strings and comments)."""
    try:
        return {t.string for t in tokenize.generate_tokens(io.StringIO(code + "\n").readline)
                if t.type == tokenize.NAME}
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return set(re.findall(r"[A-Za-z_]\w*", code))


def _without_markers(source: str) -> str:
    return "\n".join(line for line in source.splitlines()
                     if not (BEGIN.match(line) or END.match(line)))


def _is_solution_markdown(cell: Any) -> bool:
    return cell.cell_type == "markdown" and SOLUTION_TAG in cell.metadata.get("tags", [])


def question_ids(cells: Any) -> list[str]:
    """The ids of every `check("...")` call in these cells' code, in order."""
    ids: list[str] = []
    for cell in cells:
        if cell.cell_type == "code":
            ids += [m["id"] for m in CHECK_CALL.finditer(cell.source) if m["id"] not in ids]
    return ids


def validate(nb: Any) -> None:
    """Raise ValueError naming the cell that breaks one of the rules in the module doc."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        try:
            regions = solution_regions(cell.source)
        except ValueError as err:
            raise ValueError(f"cell {i + 1}: {err}") from None
        if regions and CHECK_CALL.search(cell.source):
            raise ValueError(f"cell {i + 1}: a cell with a solution must not call check(); "
                             "put the check in the next cell")


def student_notebook(nb: Any, lang: str = "en") -> Any:
    """The notebook students get: solutions replaced by stubs (a new notebook).

    `nb` holds the prose of one language (`inferbook.book.bilingual.select`); `lang` names it,
    for the words this adds and for the notebook's metadata (the grader reads it there)."""
    validate(nb)
    nb = copy.deepcopy(nb)
    used = _names_outside_solutions(nb)
    for cell in nb.cells:
        if cell.cell_type == "code" and solution_regions(cell.source):
            cell.source = student_source(cell.source, used)
        elif _is_solution_markdown(cell):
            cell.source = WORDS[lang]["answer"]
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != SOLUTION_TAG]
            if not cell.metadata["tags"]:
                del cell.metadata["tags"]
    sets = sorted({m.group(1) for m in map(QUESTION_ID.match, question_ids(nb.cells)) if m})
    nb.metadata["inferbook"] = {"exercises": sets}
    if lang != "en":
        nb.metadata["inferbook"]["language"] = lang
    return nb


def book_notebook(nb: Any, lang: str = "en") -> Any:
    """The book's page: solutions shown behind toggles (a new notebook).

    The code cells are the same in every language (the book executes them once); the
    Chinese edition's "Show solution" is set when the page is rendered
    (`inferbook.book.sphinx_editions`)."""
    validate(nb)
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code" and solution_regions(cell.source):
            cell.source = _without_markers(cell.source)
            tags = cell.metadata.setdefault("tags", [])
            if "hide-input" not in tags:
                tags.append("hide-input")
            cell.metadata["mystnb"] = {"code_prompt_show": "Show solution",
                                       "code_prompt_hide": "Hide solution"}
        elif _is_solution_markdown(cell):
            cell.source = (f":::{{admonition}} {WORDS[lang]['solution']}\n:class: dropdown\n\n"
                           f"{cell.source}\n:::")
    return nb


def has_solutions(nb: Any) -> bool:
    """Whether any cell of `nb` holds a solution (marker lines or a solution Markdown cell)."""
    marker = re.compile(r"(?m)^[ \t]*#\s*(BEGIN|END) SOLUTION\s*$")
    return any((c.cell_type == "code" and marker.search(c.source)) or _is_solution_markdown(c)
               for c in nb.cells)
