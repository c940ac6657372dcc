"""Measured claims: strict in the build, a note in a reader's session.

`expect_measured` must fail like an assert when INFERBOOK_STRICT_CLAIMS is set (the Makefile
sets it for the book and the tests), and otherwise show the reader what was expected, what
was measured and why it may differ, and let the notebook go on.
"""

import re
from pathlib import Path

import pytest

from inferbook.book import claims

ROOT = Path(__file__).resolve().parents[2]
CLAIM = dict(claim="the cached step is faster", expected="at least 10×", measured="3.2×")


def test_a_claim_that_holds_passes_silently_in_both_modes(monkeypatch, capsys):
    for value in ("1", ""):
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


def test_the_makefile_builds_and_tests_strictly():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(rf"^export {claims.STRICT_ENV}\s*:?=\s*1\s*$", makefile, re.M)
