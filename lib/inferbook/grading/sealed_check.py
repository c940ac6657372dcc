"""`check()` in a sealed kernel: record the answer for the grader instead of grading it.

When `inferbook grade --sealed` runs a notebook, the kernel has no answer keys, so `check`
cannot grade anything. It records instead: the answer, turned into plain data by
`plain_answers.encode`, goes out as a display message of its own MIME type on the kernel's output
channel, with the question id and the line of the `check` call. The grader reads those
messages while it runs the cell — so it knows which cell each answer came from — and grades
them in its own process. A function is recorded as a marker only: the grader rebuilds it
from the notebook's source and runs it on hidden inputs in a separate sandbox.

Nothing here can raise into the notebook, and nothing the notebook does to this module can
change a grade: a forged message is only an answer, graded like any other.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from . import plain_answers

__all__ = ["MIME", "SEALED_ENV", "sealed", "activate", "record"]

MIME = "application/vnd.inferbook.answer+json"
SEALED_ENV = "INFERBOOK_GRADING_SEALED"

_ACTIVE = False


def activate() -> None:
    """Make `check` record answers in this process (the sealed kernel calls it at start)."""
    global _ACTIVE
    _ACTIVE = True
    os.environ[SEALED_ENV] = "1"


def sealed() -> bool:
    """True in a kernel run by `inferbook grade --sealed`."""
    return _ACTIVE or os.environ.get(SEALED_ENV) == "1"


def _caller_line() -> int | None:
    """The line of the notebook cell that called `check` (frames: here, check, the cell)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("inferbook."):
        frame = frame.f_back
    return frame.f_lineno if frame is not None else None


def record(question_id: Any, answer: Any) -> str:
    """Send the answer to the grader; return the line to print in the notebook."""
    try:
        payload = plain_answers.encode(answer)
        text = json.dumps(payload, allow_nan=False)
        if len(text) > plain_answers.MAX_BYTES:
            payload = {"__unsupported__": "an answer too large to send to the grader"}
    except (plain_answers.AnswerFormatError, RecursionError, ValueError, TypeError, OverflowError):
        payload = {"__unsupported__": "an answer that cannot be sent to the grader"}
    message = {"id": str(question_id)[:200], "line": _caller_line(), "answer": payload}
    try:                    # IPython exists only inside a kernel; elsewhere nothing is sent
        from IPython import get_ipython
        from IPython.display import publish_display_data
        if get_ipython() is not None:
            publish_display_data({MIME: message})
    except Exception:  # noqa: BLE001 - not in a kernel (the function runner): nothing to send
        pass
    return f"⧗ {message['id']} — recorded; the grader scores it after the notebook has run"
