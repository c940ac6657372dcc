"""Measured claims: strict wherever the project runs a notebook, a note in a reader's session.

`expect_measured` must fail like an assert when claims are strict, and otherwise show the
reader what was expected, what was measured and why it may differ, and let the notebook go on.
Strictness must not depend on `make`: each runner the project uses — nbval through our plugin,
the book's executor (`tests/book_cache.py`), the Colab twins' runner
(`tests/colab_notebooks.py`) — runs a planted failing claim below and must fail on it, unless
INFERBOOK_STRICT_CLAIMS=0; a notebook run the way Jupyter or Colab runs it shows the note.
"""

import os
import subprocess
import sys
from pathlib import Path

import nbclient
import nbformat
import pytest

from inferbook.book import claims
from inferbook.book.reader import book_reads

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
import book_cache  # noqa: E402
import colab_notebooks  # noqa: E402

CLAIM = dict(claim="the cached step is faster", expected="at least 10×", measured="3.2×")
NOTE = "Measured claim not confirmed"
# A page with one claim that fails on every machine, as a Jupytext source.
PLANTED = f"""# %% [markdown]
# A planted claim.

# %%
from inferbook.book.claims import expect_measured
expect_measured(False, {CLAIM['claim']!r}, expected={CLAIM['expected']!r},
                measured={CLAIM['measured']!r})
print("the notebook", "went on")   # the words appear in outputs only
"""


def test_a_claim_that_holds_passes_silently_in_both_modes(monkeypatch, capsys):
    for value in ("1", "0", ""):
        monkeypatch.setenv(claims.STRICT_ENV, value)
        assert claims.expect_measured(True, **CLAIM) is True
    assert capsys.readouterr() == ("", "")


def test_strict_mode_fails_like_an_assert(monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    with pytest.raises(AssertionError, match=r"faster: expected at least 10×, measured 3\.2×"):
        claims.expect_measured(False, **CLAIM)


def test_a_reader_gets_a_note_and_the_notebook_goes_on(monkeypatch, capsys):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    before = len(claims.unconfirmed())
    assert claims.expect_measured(False, **CLAIM) is False
    note = capsys.readouterr().err
    for part in ("not confirmed", "the cached step is faster", "expected: at least 10×",
                 "measured here: 3.2×", "likely reasons", "busy shared runtime",
                 "Run this cell again"):
        assert part in note, part
    assert claims.unconfirmed()[before:] == [CLAIM["claim"]]


def test_a_claim_needs_its_texts(monkeypatch):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    with pytest.raises(ValueError):
        claims.expect_measured(False, claim="x", expected="", measured="y")


def test_strict_by_default_keeps_an_explicit_choice(monkeypatch):
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    claims.strict_by_default()
    assert claims.strict()
    monkeypatch.setenv(claims.STRICT_ENV, "0")
    claims.strict_by_default()
    assert not claims.strict()


@pytest.fixture
def planted(tmp_path):
    """The planted page as a source (.py, what nbval and the book read) and as a twin (.ipynb,
    what Colab opens)."""
    source = tmp_path / "planted.py"
    source.write_text(PLANTED, encoding="utf-8")
    twin = tmp_path / "planted.ipynb"
    nbformat.write(book_reads(PLANTED), twin)
    return source, twin


def outputs(nb) -> str:
    """Every text the executed notebook showed."""
    return "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/markdown", ""))
                     + "".join(o.get("traceback", [])) for c in nb.cells
                     if c.cell_type == "code" for o in c.get("outputs", []))


def run_nbval(twin: Path, env: dict) -> tuple[bool, str]:
    # nbval started by hand, not by make: our plugin must make the claim strict by itself.
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.notebook_plugin",
                          "--nbval-lax", "--nbval-current-env", "-p", "no:cacheprovider",
                          "-q", str(twin)], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    return run.returncode == 0, run.stdout + run.stderr


def run_book(source: Path, env: dict) -> tuple[bool, str]:
    os.environ.clear()
    os.environ.update(env)
    nb, _, error = book_cache.execute_page(source, timeout=300)
    return error is None, (error or "") + outputs(nb)


def run_colab(twin: Path, env: dict) -> tuple[bool, str]:
    os.environ.clear()
    os.environ.update(env)
    saved = twin.parent / "executed"
    _, _, _, error, notes = colab_notebooks.run_twin(twin, twin.parent, 300, save=saved)
    shown = outputs(nbformat.read(next(saved.iterdir()), as_version=4))
    return error is None, (error or "") + shown + f"\nnotes: {notes}"


RUNNERS = {"nbval": run_nbval, "book": run_book, "colab": run_colab}


@pytest.mark.parametrize("mode", ["unset", "0"])
@pytest.mark.parametrize("runner", RUNNERS)
def test_every_runner_of_the_project_is_strict_unless_told_otherwise(planted, runner, mode):
    source, twin = planted
    env = {k: v for k, v in os.environ.items() if k != claims.STRICT_ENV}
    if mode == "0":
        env[claims.STRICT_ENV] = "0"
    saved = dict(os.environ)
    try:
        passed, shown = RUNNERS[runner](source if runner == "book" else twin, env)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if mode == "unset":
        assert not passed and "MeasuredClaimError" in shown, shown[-2000:]
        assert "the notebook went on" not in shown
    else:
        assert passed, shown[-2000:]
        # nbval passing means every cell ran; the book and the Colab twins show the note.
        if runner != "nbval":
            assert NOTE in shown and "the notebook went on" in shown, shown[-2000:]


def test_a_readers_notebook_shows_a_note_and_goes_on(planted, monkeypatch):
    # Jupyter or Colab: a kernel started with no INFERBOOK_STRICT_CLAIMS in its environment.
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    _, twin = planted
    nb = nbformat.read(twin, as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(twin.parent)}}).execute()
    shown = outputs(nb)
    assert NOTE in shown and "expected: at least 10×" in shown and "the notebook went on" in shown
