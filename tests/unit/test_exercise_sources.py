"""Exercise sources -> student notebooks (stubs) and book pages (solutions behind toggles)."""

import pytest

nbformat = pytest.importorskip("nbformat")
jupytext = pytest.importorskip("jupytext")

from inferbook.book import exercise_sources, reader  # noqa: E402

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

SOURCE = '''# %% [markdown]
# **1** A number.

# %%
# BEGIN SOLUTION
scratch = 3
answer = scratch * 2
# END SOLUTION

# %%
check("ch01.prompt_kv_bytes", answer)

# %%
def f(x):
    """Twice x."""
    # BEGIN SOLUTION
    y = x * 2
    return y
    # END SOLUTION

# %%
check("ch01.write_kv", f)

# %% [markdown] tags=["solution"]
# Because the cache is written once and read at every step.
'''


def student():
    return exercise_sources.student_notebook(jupytext.reads(SOURCE, fmt="py:percent"))


def test_top_level_solutions_become_stubs_for_the_names_the_notebook_uses():
    code = [c.source for c in student().cells if c.cell_type == "code"]
    assert code[0] == "answer = ...  # YOUR ANSWER HERE"          # not `scratch`


def test_solutions_inside_functions_raise_not_implemented_at_their_indentation():
    code = [c.source for c in student().cells if c.cell_type == "code"]
    assert code[2].splitlines() == ["def f(x):", '    """Twice x."""', "    # YOUR CODE HERE",
                                    '    raise NotImplementedError("your code here")']
    namespace = {}
    exec(code[2], namespace)
    with pytest.raises(NotImplementedError):
        namespace["f"](1)


def test_written_solutions_become_empty_answer_cells_and_nothing_of_a_solution_is_left():
    nb = student()
    text = "\n".join(c.source for c in nb.cells)
    for secret in ("scratch", "y = x * 2", "return y", "read at every step", "SOLUTION"):
        assert secret not in text
    assert nb.cells[-1].source == exercise_sources.STUDENT_ANSWER_CELL
    assert nb.metadata["inferbook"] == {"exercises": ["ch01"]}


def test_the_book_page_hides_solutions_behind_toggles():
    nb = reader.book_reads(SOURCE)
    solution_cells = [c for c in nb.cells if "hide-input" in c.metadata.get("tags", [])]
    assert len(solution_cells) == 2
    assert all("SOLUTION" not in c.source for c in nb.cells)
    assert solution_cells[0].metadata["mystnb"]["code_prompt_show"] == "Show solution"
    assert nb.cells[-1].source.startswith(":::{admonition} Solution\n:class: dropdown")
    # A notebook without solutions (a chapter) is read exactly as jupytext reads it.
    chapter = "# %%\nx = 1\n"
    plain = jupytext.reads(chapter, fmt="py:percent")
    read = reader.book_reads(chapter)
    assert [(c.cell_type, c.source, c.metadata) for c in read.cells] == \
        [(c.cell_type, c.source, c.metadata) for c in plain.cells]


@pytest.mark.parametrize("source, message", [
    ("# BEGIN SOLUTION\nx = 1\n", "never ended"),
    ("x = 1\n# END SOLUTION\n", "without BEGIN"),
    ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n", "inside another"),
    ('# BEGIN SOLUTION\nx = 1\n# END SOLUTION\ncheck("ch01.prompt_kv_bytes", x)\n',
     "must not call check"),
])
def test_malformed_sources_are_refused_with_the_cell_named(source, message):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)])
    with pytest.raises(ValueError, match=message):
        exercise_sources.student_notebook(nb)
