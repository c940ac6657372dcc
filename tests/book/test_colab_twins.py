"""The Colab twins show what the site shows: no MyST syntax, citations as author–year text,
and prose with the numbers the reader's own kernel computed.

The conversion is checked three ways: every committed twin holds no MyST role, directive or
target in anything Colab renders; each MyST construct converts to the Markdown it stands for;
and a twin generated from a small source, executed in a real kernel, displays the values its
code cells glued — including one that a sentence names before the cell that computes it.
"""

import re
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from inferbook.book import colab_markdown as cm
from inferbook.book import notebooks
from inferbook.book.citations import load_bibliography, parse_bibtex
from inferbook.book.prose import NOT_YET

ROOT = Path(__file__).resolve().parents[2]
SITE = "https://example.org/book-site"
BIB = parse_bibtex(textwrap.dedent("""\
    @misc{one2020, author = {Austin, Jacob and Douglas, Sholto and Pope, Reiner},
      title = {How to Scale}, year = {2025}}
    @misc{two2021, author = {Dao, Tri and R{\\'e}, Christopher}, title = {X}, year = {2022}}
    @misc{solo, author = {Chen, Carol}, title = {{Arithmetic}}, year = 2022}
"""))


def site(**labels):
    return cm.Site(SITE, "https://raw.example.org/repo/main", BIB, labels)


def rendered(cell) -> str:
    """What Colab renders for a cell: a Markdown cell's text, a prose cell's template."""
    if cell.cell_type == "markdown":
        return cell.source
    m = re.search(r"show_prose\((.*)\)\s*$", cell.source, re.S)
    return eval(m[1]) if m else ""                       # the string literal in the cell


@pytest.mark.parametrize("source", notebooks.sources(ROOT), ids=lambda p: p.name)
def test_no_myst_survives_in_any_twin(source):
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    for cell in nb.cells:
        text = rendered(cell)
        found = cm.MYST_SYNTAX.search(text)
        assert not found, f"{source.name}: {found[0]!r} in {text[:200]!r}"
        # Links to other pages go to the site, never to a source file Colab cannot show.
        assert not re.search(r"\]\((?!https?:)[^)]*\.(md|py)\)", text), text[:200]


def test_every_citation_of_the_book_has_an_entry_with_an_author_and_a_year():
    bib = load_bibliography(ROOT / "book" / "references.bib")
    keys = set()
    for source in notebooks.sources(ROOT):
        for m in re.finditer(r"\{cite:[pt]\}`([^`]+)`", source.read_text()):
            keys |= {k.strip() for k in m[1].split(",")}
    assert keys and keys <= set(bib)
    assert all(bib[k].authors and re.fullmatch(r"\d{4}", bib[k].year) for k in keys)


def test_citations_are_author_year_links_to_the_references_page():
    text = cm.convert_markdown("as shown {cite:p}`one2020,two2021`; {cite:t}`solo` says so",
                               site(), "chapters/x")
    ref = f"{SITE}/book/references.html"
    assert text == (f"as shown ([Austin et al., 2025]({ref}); [Dao and Ré, 2022]({ref})); "
                    f"[Chen (2022)]({ref}) says so")
    with pytest.raises(ValueError, match="nobody"):
        cm.convert_markdown("{cite:p}`nobody`", site(), "chapters/x")


def test_roles_directives_targets_and_links_become_markdown():
    text = textwrap.dedent("""\
        (sec-a)=
        ## A

        See {ref}`the roofline <sec-a>`, {doc}`../book/notation`, [how](../book/how_to_run.md#gpu),
        {math}`x^2`, {sub}`2` and [the paper](https://arxiv.org/abs/1).

        ```{note}
        A note with {math}`y`.
        ```

        :::{admonition} Takeaways
        :class: tip
        - one
        :::

        ```{math}
        a = b
        ```

        \\begin{align}
        c &= d
        \\end{align}

        ```python
        {cite:p}`untouched in code`
        ```
        """)
    out = cm.convert_markdown(text, site(**{"sec-a": "chapters/02_x"}), "chapters/01_y")
    assert '<a id="sec-a"></a>' in out
    assert f"[the roofline]({SITE}/chapters/02_x.html#sec-a)" in out
    assert f"[../book/notation]({SITE}/book/notation.html)" in out
    assert f"[how]({SITE}/book/how_to_run.html#gpu)" in out
    assert "$x^2$" in out and "<sub>2</sub>" in out and "(https://arxiv.org/abs/1)" in out
    assert "> **Note**\n>\n> A note with $y$." in out
    assert "> **Takeaways**\n>\n> - one" in out and ":class:" not in out
    assert "$$\na = b\n$$" in out and "$$\n\\begin{align}\nc &= d\n\\end{align}\n$$" in out
    assert "```python\n{cite:p}`untouched in code`\n```" in out


@pytest.mark.parametrize("bad", ["{foo}`x`", "```{mermaid}\nx\n```", "{{ substitution }}",
                                 "{ref}`nowhere`", "{glue:text}`x:.2f`"])
def test_unknown_myst_is_refused_rather_than_passed_through(bad):
    with pytest.raises(ValueError):
        cm.convert_markdown(bad, site(), "chapters/x")


def test_a_cell_with_glued_values_becomes_prose_and_the_rest_stays_markdown():
    cells = cm.convert_cell("## Heading\n\nPlain words.\n\nIt has {glue:text}`n` layers "
                            "{cite:p}`solo`.\n\n```{glue:figure} fig\nThe caption.\n```",
                            site(), "chapters/x")
    kinds = [kind for kind, _ in cells]
    assert kinds == ["markdown", "code", "code"]
    assert cells[0][1] == "## Heading\n\nPlain words."
    prose, figure = cells[1][1], cells[2][1]
    assert prose.startswith(cm.FORM_TITLE) and "It has {{n}} layers ([Chen, 2022]" in prose
    assert "glued_object('fig')" in figure and "The caption." in figure


def make_twin(tmp_path: Path) -> Path:
    """A one-page book with a source whose prose names a value before and after it is
    computed, and its Colab twin as `make notebooks` writes it."""
    shutil.copy(ROOT / "_config.yml", tmp_path / "_config.yml")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "references.bib").write_text(
        "@misc{solo, author = {Chen, Carol}, title = {T}, year = {2022}}\n")
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    source = chapters / "01_demo.py"
    source.write_text(textwrap.dedent('''\
        # %% [markdown]
        # # Demo
        #
        # The product below is {glue:text}`later` ({cite:t}`solo`).

        # %%
        import random

        from inferbook.book.present import glue

        a = random.randint(10**6, 10**7)
        glue("value", f"{a:,}")

        # %% [markdown]
        # The kernel drew {glue:text}`value`.

        # %%
        glue("later", f"{3 * a:,}")
        '''))
    twin = source.with_suffix(".ipynb")
    twin.write_text(notebooks.colab_notebook(source, tmp_path))
    return twin


def test_an_executed_twin_shows_the_numbers_its_kernel_computed(tmp_path):
    import nbclient
    twin = make_twin(tmp_path)
    nb = nbformat.read(twin, as_version=4)
    assert not any(cm.MYST_SYNTAX.search(rendered(c)) for c in nb.cells)
    work = tmp_path / "empty"
    work.mkdir()
    nbclient.NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(work)}}).execute()
    shown = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text/markdown" in out.get("data", {}):
                shown[cell.id] = out["data"]["text/markdown"]
    drawn = int(next(t for t in shown.values() if t.startswith("The kernel drew"))
                .removeprefix("The kernel drew ").rstrip(".").replace(",", ""))
    # The first sentence named a value computed three cells later: updated in place.
    first = next(t for t in shown.values() if t.startswith("The product"))
    assert first.startswith(f"The product below is {3 * drawn:,} ([Chen (2022)](")
    assert all(NOT_YET not in t and "{{" not in t for t in shown.values())
