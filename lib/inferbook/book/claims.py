"""Claims about a measurement: strict in the book's build, a visible note in a reader's session.

The book makes two kinds of claim. A claim about an exact quantity — the bytes a cache holds,
the FLOPs XLA counts, the collectives in a compiled program, tokens equal to a reference — is
true or false on every machine, and the chapters state it with `assert`. A claim about a
*measurement on the reader's device* — "the cached step is at least ten times faster", "a
decode step reaches half the read bandwidth" — depends on the device, its load, and the JAX
version. The build, run on a quiet machine, must still fail when such a claim is false: that is
how a slower library or a wrong explanation gets caught. A reader on a busy Colab runtime must
instead learn what was expected and what their device measured, and read on.

`expect_measured` does both. The environment variable ``INFERBOOK_STRICT_CLAIMS`` chooses:
``1`` makes a failed claim an error, unset or ``0`` a note. Every way the project itself runs
a notebook — the book build (its Sphinx extension, `tests/book_cache.py`), nbval
(`tests/notebook_plugin.py`), the Colab twins' test (`tests/colab_notebooks.py`) and the unit
tests — calls `strict_by_default`, so claims are strict there whether or not `make` started
it, unless someone sets ``INFERBOOK_STRICT_CLAIMS=0`` on purpose. A reader's Jupyter or Colab
session runs none of these, sets nothing, and gets the note.

Every claim states its threshold as a named value, glued into the prose that makes the claim
and quoted in the claim's own words (`tests/book/test_claim_thresholds.py` checks each page
for that), so the words and the check cannot drift apart.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

__all__ = ["STRICT_ENV", "MeasuredClaimError", "strict", "strict_by_default", "expect_measured",
           "unconfirmed"]

STRICT_ENV = "INFERBOOK_STRICT_CLAIMS"

# What most often makes a timing miss its expectation on a reader's machine.
LIKELY_REASONS = (
    "other work shares this machine's cores or memory bandwidth (a busy shared runtime such "
    "as a free Colab CPU, a browser, a laptop saving power);",
    "the first runs of a program were still warming caches or threads;",
    "this device or JAX version behaves differently from the machine the book was built on "
    "(the printed numbers above are what this device measured).",
)
RERUN = ("Run this cell again when the runtime is idle; if the note persists, your device "
         "differs from the book's, and the numbers above describe yours.")

_unconfirmed: list[str] = []


class MeasuredClaimError(AssertionError):
    """A measured claim failed while the build was strict."""


def strict() -> bool:
    """True when measured claims must hold (the book build and the test suite)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def strict_by_default() -> None:
    """Make claims strict in this process and every kernel it starts from now on, unless the
    environment already chose (``INFERBOOK_STRICT_CLAIMS=0`` keeps them notes). The project's
    own entry points call it; a reader's session does not."""
    os.environ.setdefault(STRICT_ENV, "1")


def unconfirmed() -> list[str]:
    """The claims this session reported as not confirmed, in order (notes shown to a reader)."""
    return list(_unconfirmed)


def _note(claim: str, expected: str, measured: str, reasons: Sequence[str],
          rerun: str) -> str:
    lines = [f"**Measured claim not confirmed on this device:** {claim}.", "",
             f"- expected: {expected}", f"- measured here: {measured}",
             "- likely reasons:"]
    lines += [f"  - {r}" for r in reasons]
    lines += [f"- {rerun}", "", "The notebook goes on with this device's numbers."]
    return "\n".join(lines)


def _show(markdown: str) -> None:
    """A note the reader sees: rendered Markdown in a notebook, plain text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:           # pragma: no cover - IPython ships with every notebook
        get_ipython = None
    if get_ipython is not None and get_ipython() is not None:
        display(Markdown("> " + markdown.replace("\n", "\n> ")))
    else:
        print(markdown, file=sys.stderr)


def expect_measured(holds: bool, claim: str, *, expected: str, measured: str,
                    reasons: Sequence[str] = LIKELY_REASONS, rerun: str = RERUN) -> bool:
    """Check a claim about a measurement on this device; returns whether it held.

    `claim` says what the measurement shows, `expected` the threshold in words and numbers,
    `measured` what this run got (pre-formatted, e.g. with `inferbook.book.present`). When the
    claim fails: under ``INFERBOOK_STRICT_CLAIMS=1`` a `MeasuredClaimError` (an
    AssertionError) stops the build; otherwise the reader sees a note with the expectation,
    the measurement, the likely reasons and how to re-run, and the notebook continues.
    """
    holds = bool(holds)
    if holds:
        return True
    if not claim or not expected or not measured:
        raise ValueError("a measured claim needs its claim, expected and measured texts")
    if strict():
        raise MeasuredClaimError(f"{claim}: expected {expected}, measured {measured}")
    _unconfirmed.append(claim)
    _show(_note(claim, expected, measured, reasons, rerun))
    return False
