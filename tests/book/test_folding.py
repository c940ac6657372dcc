"""The chapters read like a book: bookkeeping is folded, library listings are shown.

Checked on the sources (the browser test checks the same on the built pages):

- A chapter glues its numbers into the prose from cells the site folds (`hide-input`): at most
  a tenth of the `glue(` lines the chapters had before folding (issue 16) may sit in cells the
  reader sees unfolded.
- Library code is shown with `inferbook.book.listing.show_source`, never printed with
  `inspect.getsource` (plain text, no highlighting, lines that run off the page), and every
  `show_source` call ends its cell, the only place a notebook displays a value.
"""

import ast
import re
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted((ROOT / "chapters").glob("*.py"))
FOLDED = {"hide-input", "remove-input", "remove-cell"}
# `grep -c "glue(" chapters/*.py` before the chapters were folded (issue 16: "at most a tenth
# of today's glue lines remain in cells the reader sees unfolded").
GLUE_LINES_BEFORE_FOLDING = 557
VISIBLE_GLUE_LIMIT = GLUE_LINES_BEFORE_FOLDING // 10


def code_cells(source: Path):
    return [c for c in jupytext.read(source).cells if c.cell_type == "code"]


def is_folded(cell) -> bool:
    return bool(FOLDED & set(cell.metadata.get("tags", [])))


def glue_lines(cell) -> int:
    return sum("glue(" in line for line in cell.source.splitlines())


def test_the_folded_tag_is_what_the_count_reads():
    # The count below relies on Jupytext reading `# %% tags=["hide-input"]` as a cell tag.
    nb = jupytext.reads('# %% tags=["hide-input"]\nglue("a", 1)\n\n# %%\nx = 1\n',
                        fmt="py:percent")
    assert [is_folded(c) for c in nb.cells] == [True, False]
    assert [glue_lines(c) for c in nb.cells] == [1, 0]


def test_at_most_a_tenth_of_the_glue_lines_are_in_view():
    assert CHAPTERS
    in_view = {p.name: sum(glue_lines(c) for c in code_cells(p) if not is_folded(c))
               for p in CHAPTERS}
    total = sum(in_view.values())
    assert total <= VISIBLE_GLUE_LIMIT, (
        f"{total} glue lines in unfolded cells, at most {VISIBLE_GLUE_LIMIT}: "
        f"{ {k: v for k, v in in_view.items() if v} }. Move them into a `hide-input` cell.")
    # The folding did not drop the glue: the chapters still glue every number they did.
    assert sum(glue_lines(c) for p in CHAPTERS for c in code_cells(p)) >= \
        GLUE_LINES_BEFORE_FOLDING - VISIBLE_GLUE_LIMIT


@pytest.mark.parametrize("source", CHAPTERS, ids=lambda p: p.name)
def test_library_code_is_shown_with_show_source_at_the_end_of_its_cell(source):
    assert "inspect.getsource" not in source.read_text(), \
        f"{source.name}: show library code with show_source, not print(inspect.getsource(...))"
    for cell in code_cells(source):
        body = ast.parse(cell.source).body
        calls = [s for s in body if re.match(r"show_source\(", ast.unparse(s))]
        for call in calls:
            assert call is body[-1] and isinstance(call, ast.Expr), (
                f"{source.name}: `{ast.unparse(call)[:60]}` must be the last line of its cell, "
                "or the listing is never displayed")
            assert not is_folded(cell), f"{source.name}: a listing's cell is folded"
