"""Let nbval execute the book's notebooks straight from their Jupytext sources.

nbval only collects .ipynb files. This plugin hands it the `.py` (py:percent) sources of
chapters/ and exercises/ instead, read through jupytext, and keeps pytest from importing those
sources as test modules. The committed .ipynb copies (for Colab) are skipped so nothing runs
twice; a separate test checks that they match their sources.

Notebooks are read with the book's own reader (`inferbook.book.reader.book_reads`), so the
cells nbval runs are exactly the cells the book renders. Each notebook whose cells all pass is
saved with its outputs under `_build/executed/`, and at the end of the session the saved
notebooks go into the book's jupyter-cache (`tests/book_cache.py`): the book build that
follows in `make test` renders them instead of executing every chapter again.

Measured claims are strict in the kernels it starts (`inferbook.book.claims`) unless
INFERBOOK_STRICT_CLAIMS=0.

Use: pytest -p tests.notebook_plugin --nbval-lax --nbval-current-env book chapters exercises
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import nbformat
import nbval.plugin
import pytest

from inferbook.book.claims import strict_by_default
from inferbook.book.reader import book_reads

try:                                    # imported as tests.notebook_plugin or from tests/
    from tests import book_cache
except ImportError:                     # pragma: no cover
    import book_cache

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = {ROOT / "book", ROOT / "chapters", ROOT / "exercises"}


def _is_source(path: Path) -> bool:
    return path.suffix == ".py" and path.parent in NOTEBOOK_DIRS


def _nbval_on(config) -> bool:
    return bool(config.option.nbval or config.option.nbval_lax)


def pytest_configure(config):
    # Before any kernel starts: measured claims fail the notebook, as in the book's build,
    # however nbval was started (INFERBOOK_STRICT_CLAIMS=0 turns them into notes).
    if _nbval_on(config):
        strict_by_default()


class JupytextNotebook(nbval.plugin.IPyNbFile):
    """An nbval notebook whose cells come from a py:percent file."""

    def collect(self):
        def read(path, as_version=4):
            return book_reads(Path(path).read_text(encoding="utf-8"))
        self.all_passed = True
        with mock.patch.object(nbval.plugin.nbformat, "read", read):
            yield from super().collect()

    def save_executed(self, cells) -> None:
        """Write the notebook with the outputs its cells produced, for the book build."""
        for item in cells:
            item.cell.outputs = list(item.test_outputs or [])
        path = book_cache.EXECUTED / self.path.relative_to(book_cache.ROOT).with_suffix(".ipynb")
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(self.nb, path)


class _Nothing(pytest.File):
    def collect(self):
        return []


def pytest_collect_file(file_path: Path, parent):
    if _is_source(file_path) and _nbval_on(parent.config) \
            and not parent.session.isinitpath(file_path):
        return JupytextNotebook.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent):
    # A source named on the command line reaches here instead of pytest_collect_file.
    if _is_source(module_path):
        if _nbval_on(parent.config):
            return JupytextNotebook.from_parent(parent, path=module_path)
        return _Nothing.from_parent(parent, path=module_path)
    return None


def pytest_ignore_collect(collection_path: Path, config):
    # The generated Colab notebooks beside the chapter sources.
    if collection_path.suffix == ".ipynb" and collection_path.with_suffix(".py").exists() \
            and collection_path.parent in NOTEBOOK_DIRS:
        return True
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    if isinstance(item.parent, JupytextNotebook) and report.failed:
        item.parent.all_passed = False


def pytest_runtest_teardown(item, nextitem):
    notebook = item.parent
    if not isinstance(notebook, JupytextNotebook):
        return
    if nextitem is not None and nextitem.parent is notebook:
        return
    cells = [i for i in item.session.items if i.parent is notebook]
    ran_all = all(getattr(i, "test_outputs", None) is not None for i in cells)
    if notebook.all_passed and ran_all:
        notebook.save_executed(cells)


def pytest_sessionfinish(session, exitstatus):
    # Under xdist only the controller stores, once every worker has finished.
    if _nbval_on(session.config) and not hasattr(session.config, "workerinput"):
        book_cache.store_executed()
