"""The Colab twins of the chapters, and the table of contents.

Every chapter and exercise source has a committed .ipynb that the Colab button opens; it must
be exactly what the source generates, begin with the install cell, and that cell must install
the library on Colab and do nothing anywhere else.
"""

import subprocess
import sys
import types
from pathlib import Path
from unittest import mock

import nbformat
import pytest
import yaml

from inferbook.book import notebooks

ROOT = Path(__file__).resolve().parents[2]


def test_every_colab_notebook_matches_its_source():
    stale = notebooks.stale(ROOT)
    assert not stale, f"regenerate with `make notebooks`: {[str(p) for p in stale]}"


@pytest.mark.parametrize("source", notebooks.sources(ROOT), ids=lambda p: p.name)
def test_colab_notebooks_start_with_the_install_cell_and_have_no_outputs(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    assert nb.cells[0].source == notebooks.install_cell_source(ROOT, "en",
                                                                notebooks.models_used(source))
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


def run_install_cell(in_colab: bool, models: tuple[str, ...] = ()):
    fake_modules = dict(sys.modules)
    if in_colab:
        fake_modules["google.colab"] = types.ModuleType("google.colab")
    else:
        fake_modules.pop("google.colab", None)
    with mock.patch.dict(sys.modules, fake_modules, clear=True), \
            mock.patch.object(subprocess, "run") as run:
        exec(notebooks.install_cell_source(ROOT, "en", models), {})
    return run


def test_the_install_cell_does_nothing_outside_colab():
    assert not run_install_cell(in_colab=False).called


def test_the_install_cell_installs_from_the_configured_repository_on_colab():
    run = run_install_cell(in_colab=True)
    (args,), _ = run.call_args
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert args[1:4] == ["-m", "pip", "install"]
    repo = config["repository"]
    assert args[-1] == f"inferbook @ git+{repo['url']}@{repo['branch']}"


def test_a_page_that_runs_the_trained_model_fetches_it_after_installing_the_library():
    chapter1 = ROOT / "chapters" / "01_sampling_kv_cache.py"
    assert "smollm2-135m-instruct" in notebooks.models_used(chapter1)
    assert notebooks.models_used(ROOT / "chapters" / "04_inference_arithmetic.py") == ()
    run = run_install_cell(in_colab=True, models=notebooks.models_used(chapter1))
    calls = [c.args[0] for c in run.call_args_list]
    assert calls[0][1:4] == ["-m", "pip", "install"]
    assert calls[1][1:] == ["-m", "inferbook.model.model_store", "fetch", "smollm2-135m-instruct"]
    assert not run_install_cell(in_colab=False, models=("smollm2-135m-instruct",)).called


def toc_files():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part.get("chapters", [])]
    return files


def test_every_toc_entry_exists_and_every_chapter_is_listed():
    files = toc_files()
    for f in files:
        assert any((ROOT / f).with_suffix(s).is_file() for s in (".md", ".py", ".ipynb")), f
    for source in sorted((ROOT / "chapters").glob("*.py")):
        assert str(source.relative_to(ROOT).with_suffix("")) in files, source.name
