"""The Colab notebooks: generated from the chapters' Jupytext sources and committed.

Chapters are written as py:percent files (diffable, reviewable). Colab cannot open those, and
the book's "Open in Colab" button points at `<same path>.ipynb` in the repository, so each
source gets a committed `.ipynb` twin: the same cells without outputs, preceded by one cell
that installs `inferbook` when — and only when — it runs on Colab. The repository it
installs from is configured once, in `_config.yml` (repository.url and repository.branch).
The twin of an exercise source is the *student* notebook: every solution replaced by a stub
(see `inferbook.book.exercise_sources`); the book's page shows the solutions behind toggles.

Colab renders Markdown, not MyST, so every Markdown cell is rewritten by
`inferbook.book.colab_markdown`: citations become author–year links to the site's references,
admonitions block quotes, links to other pages links to the site, and a cell that shows glued
numbers becomes a hidden form cell that displays its text with the numbers the reader's own
run computed (`inferbook.book.prose`). Code cells the site hides (tagged ``remove-input`` or
``hide-input``) are folded as forms too.

Every source has a twin per language (`inferbook.book.bilingual`): the English one beside it
(`chapters/01_x.ipynb`), the Chinese one at the same path under `zh/`
(`zh/chapters/01_x.ipynb`), which the Chinese site's Colab button opens. A Chinese twin holds
the Chinese prose, sets the kernel's language in its first cell (so exercise feedback and
figures are in Chinese) and, on Colab, installs a CJK font for the figures. A page not yet
translated gets a Chinese twin with its English prose under a note saying so.

    python -m inferbook.book.notebooks sync     # (re)write every .ipynb twin
    python -m inferbook.book.notebooks check    # exit 1 if any twin is missing or stale

Needs jupytext and PyYAML (installed with the book's tools, not with the library).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

__all__ = ["install_cell_source", "models_used",
           "site", "colab_notebook", "sources", "twin_path", "sync",
           "stale"]

ROOT = Path(__file__).resolve().parents[3]
SOURCE_DIRS = ("book", "chapters", "exercises")
EDITION_DIR = "zh"          # the Chinese twins: zh/<same path as the English twin>


def models_used(source: Path) -> tuple[str, ...]:
    """The book's pretrained models (`model_store.PRETRAINED`) a page names, in order."""
    from inferbook.model.model_store import PRETRAINED
    text = source.read_text(encoding="utf-8")
    return tuple(name for name in PRETRAINED if f'"{name}"' in text or f"'{name}'" in text)


def install_cell_source(root: Path = ROOT, lang: str = "en", models: tuple[str, ...] = ()) -> str:
    """The first cell of every Colab notebook: pip-install the library on Colab only, and
    fetch the trained weights a page runs (`models`: the same pinned GGUF file the book is
    built with, so a reader's numbers are the build's; `python -m inferbook.model.model_store`).

    A Chinese twin's cell also sets the kernel's language and installs a CJK font (Debian's
    Noto CJK) for the figures' labels on Colab."""
    import yaml
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config["repository"]
    url = f"git+{repo['url'].rstrip('/')}@{repo.get('branch', 'main')}"
    pip = (f"    subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"-q\", "
           f"\"inferbook @ {url}\"], check=True)")
    for name in models:
        pip += (f"\n    subprocess.run([sys.executable, \"-m\", \"inferbook.model.model_store\", "
                f"\"fetch\", \"{name}\"], check=True)")
    if lang == "en":
        return (
            "# On Colab, install the book's library first; anywhere else this cell does nothing.\n"
            "import sys\n"
            "if \"google.colab\" in sys.modules:\n"
            "    import subprocess\n"
            f"{pip}"
        )
    from inferbook.book.language import ENV, check_language
    return (
        "# 本笔记本用中文：练习的反馈和图中的文字都是中文。在 Colab 上，这个单元格还会安装本书的\n"
        "# 库和图表用的中文字体；在其他环境中，它只设置语言。\n"
        "import os\n"
        "import sys\n"
        f"os.environ[{ENV!r}] = {check_language(lang)!r}\n"
        "if \"google.colab\" in sys.modules:\n"
        "    import subprocess\n"
        f"{pip}\n"
        "    subprocess.run(\"apt-get -qq update && apt-get -qq install -y fonts-noto-cjk \"\n"
        "                   \"> /dev/null\", shell=True,\n"
        "                   check=False)"
    )


def twin_path(source: Path, lang: str = "en", root: Path = ROOT) -> Path:
    """Where the Colab twin of `source` in `lang` is committed."""
    twin = source.with_suffix(".ipynb")
    return twin if lang == "en" else root / EDITION_DIR / twin.relative_to(root)


def site(root: Path = ROOT, lang: str = "en"):
    """Where the twins link to: the site (`html.baseurl` in `_config.yml`, else the
    repository's GitHub Pages address), its bibliography, and every page's (label)= targets."""
    import yaml

    from inferbook.book.citations import load_bibliography
    from inferbook.book.colab_markdown import TARGET, Site
    config = yaml.safe_load((root / "_config.yml").read_text())
    repo = config["repository"]
    owner, name = repo["url"].removeprefix("https://github.com/").strip("/").split("/")[:2]
    url = (config.get("html") or {}).get("baseurl") or f"https://{owner}.github.io/{name}"
    url = url.rstrip("/") + ("" if lang == "en" else f"/{EDITION_DIR}")
    raw = f"https://raw.githubusercontent.com/{owner}/{name}/{repo.get('branch', 'main')}"
    labels = {}
    for page in [*sources(root), *sorted((root / "book").glob("*.md"))]:
        for line in page.read_text(encoding="utf-8").splitlines():
            if m := TARGET.match(re.sub(r"^# ?", "", line) if page.suffix == ".py" else line):
                labels[m["label"]] = page.relative_to(root).with_suffix("").as_posix()
    return Site(url.rstrip("/"), raw, load_bibliography(root / "book" / "references.bib"),
                labels, lang)


def _colab_cells(nb, page: str, where) -> list:
    """The notebook's cells as Colab shows them (see the module doc)."""
    import nbformat

    from inferbook.book.colab_markdown import FORM_TITLE, convert_cell
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for kind, text in convert_cell(cell.source, where, page):
                meta = copy.deepcopy(dict(cell.metadata))     # tags and the like carry over
                cells.append(nbformat.v4.new_markdown_cell(text, metadata=meta)
                             if kind == "markdown" else
                             nbformat.v4.new_code_cell(text, metadata={**meta,
                                                                       "cellView": "form"}))
            continue
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type == "code" and tags & {"remove-input", "hide-input"}:
            cell.source = f"{FORM_TITLE}\n{cell.source}"
            cell.metadata["cellView"] = "form"
        cells.append(cell)
    return cells


def colab_notebook(source: Path, root: Path = ROOT, where=None, lang: str = "en") -> str:
    """The .ipynb text for one py:percent source in `lang`, deterministic so it can be
    diffed."""
    import jupytext
    import nbformat

    from inferbook.book.bilingual import edition
    nb = jupytext.read(source)
    nb.cells = edition(nb.cells, lang, nbformat.v4.new_markdown_cell)
    if source.parent.name == "exercises":     # students get stubs, not the solutions
        from inferbook.book.exercise_sources import student_notebook
        nb = student_notebook(nb, lang)
    page = source.relative_to(root).with_suffix("").as_posix()
    nb.cells = _colab_cells(nb, page, where or site(root, lang))
    nb.cells.insert(0, nbformat.v4.new_code_cell(install_cell_source(root, lang,
                                                                     models_used(source))))
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i}"
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.metadata["colab"] = {"provenance": [], "name": source.with_suffix(".ipynb").name}
    return nbformat.writes(nb, version=4) + "\n"


def sources(root: Path = ROOT) -> list[Path]:
    """Every notebook source (py:percent) of the book that gets a Colab twin."""
    return sorted(p for d in SOURCE_DIRS for p in (root / d).glob("*.py")
                  if not p.name.startswith("_"))


def _expected(root: Path):
    """(twin path, its text) for every source in every language."""
    from inferbook.book.language import LANGUAGES
    for lang in LANGUAGES:
        where = site(root, lang)
        for src in sources(root):
            yield twin_path(src, lang, root), lambda src=src, w=where, lang=lang: \
                colab_notebook(src, root, w, lang)


def stale(root: Path = ROOT) -> list[Path]:
    """Twins that are missing or differ from what their source generates."""
    return [twin for twin, text in _expected(root)
            if not twin.is_file() or twin.read_text() != text()]


def sync(root: Path = ROOT) -> list[Path]:
    """Rewrite the twins that are stale; returns them."""
    changed = []
    for twin, text in _expected(root):
        new = text()
        if not twin.is_file() or twin.read_text() != new:
            twin.parent.mkdir(parents=True, exist_ok=True)
            twin.write_text(new)
            changed.append(twin)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferbook.book.notebooks")
    parser.add_argument("action", choices=("sync", "check"))
    args = parser.parse_args(argv)
    if args.action == "sync":
        for twin in sync():
            print(f"wrote {twin.relative_to(ROOT)}")
        return 0
    bad = stale()
    for twin in bad:
        print(f"{twin.relative_to(ROOT)} is out of date: run `make notebooks`", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
