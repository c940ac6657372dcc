"""The book's reader: how Sphinx (and nbval, and the execution cache) read a .py source.

Every chapter and exercise is a Jupytext py:percent source holding the prose of both
editions (`inferbook.book.bilingual`) and, for exercises, the solutions between markers
(`inferbook.book.exercise_sources`). `book_reads` turns one into the notebook a page is
built from: one language's prose, and solutions folded behind "Show solution" toggles.
`_config.yml` names it as the reader of .py files; the Chinese overlay (`_config.zh.yml`)
adds ``lang: zh``. The tests read sources through it too, so what they execute is what the
book executes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["book_reads"]


def book_reads(text: str, fmt: str = "py:percent", lang: str = "en") -> Any:
    """Sphinx's reader for .py sources: jupytext, the prose of one language
    (`inferbook.book.bilingual`), and toggles where there are solutions.

    `_config.yml` gives it to Sphinx; the Chinese edition's configuration adds ``lang: zh``.
    """
    import jupytext
    import nbformat

    from inferbook.book.bilingual import edition
    from inferbook.book.exercise_sources import book_notebook, has_solutions
    nb = jupytext.reads(text, fmt=fmt)
    nb.cells = edition(nb.cells, lang, nbformat.v4.new_markdown_cell)
    return book_notebook(nb, lang) if has_solutions(nb) else nb
