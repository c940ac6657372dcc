"""Let nbval execute the book's notebooks straight from their Jupytext sources.

nbval only collects .ipynb files. This plugin hands it the `.py` (py:percent) sources of
chapters/ and exercises/ instead, read through jupytext, and keeps pytest from importing those
sources as test modules. The committed .ipynb copies (for Colab) are skipped so nothing runs
twice; a separate test checks that they match their sources.

Use: pytest -p tests.notebook_plugin --nbval-lax --nbval-current-env book chapters exercises
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import jupytext
import nbval.plugin
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIRS = {ROOT / "book", ROOT / "chapters", ROOT / "exercises"}


def _is_source(path: Path) -> bool:
    return path.suffix == ".py" and path.parent in NOTEBOOK_DIRS


def _nbval_on(config) -> bool:
    return bool(config.option.nbval or config.option.nbval_lax)


class JupytextNotebook(nbval.plugin.IPyNbFile):
    """An nbval notebook whose cells come from a py:percent file."""

    def collect(self):
        def read(path, as_version=4):
            return jupytext.read(path)
        with mock.patch.object(nbval.plugin.nbformat, "read", read):
            yield from super().collect()


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
