"""`check(question_id, answer)`: feedback in the notebook, and the record the grader reads.

`check` prints one line — passed; failed, with a hint; not attempted yet; blocked — and
never raises, whatever it is given: an unanswered exercise notebook runs top to bottom.

Every check is also remembered for `summary()` and, when the notebook runs under
`inferbook grade`, appended to the log file named by the environment variable
``INFERBOOK_GRADING_LOG`` (JSON lines). The grader reads that file rather than the
notebook's outputs. A "start" line is written before a check runs the student's code and a
"result" line after, so if the kernel dies or runs out of time in between, the grader knows
which question did it.

In a kernel run by `inferbook grade --sealed` there are no answer keys to grade with:
`check` records the answer for the grader instead (see `sealed_check.py`), and `summary` says so.
"""

from __future__ import annotations

import json
import os
from typing import Any

from . import sealed_check
from .localize import say, status_word
from .questions import Result

__all__ = ["check", "evaluate", "summary", "results", "LOG_ENV"]

LOG_ENV = "INFERBOOK_GRADING_LOG"

# The latest result of each question checked in this session.
_RESULTS: dict[str, Result] = {}


def _platform() -> str:
    """'cpu', 'gpu' or 'tpu': where JAX runs single-device work in this session."""
    import jax  # only when a question asks: importing the grading package loads no JAX
    return jax.default_backend()


def evaluate(question_id: str, answer: Any) -> Result:
    """Grade `answer` without printing or recording anything. Never raises."""
    from . import registry  # the answer keys: loaded here, so a sealed kernel can import us
    question = registry.get(question_id) if isinstance(question_id, str) else None
    if question is None:
        return Result(str(question_id), "failed", 0.0,
                      say("there is no question {id}: check the spelling of the id",
                          id=repr(question_id)))
    try:
        if question.requires == "accelerator" and _platform() == "cpu":
            return question.result("blocked", say("this criterion is measured on a GPU or TPU; "
                                                  "this runtime has only a CPU, so it is not "
                                                  "graded here"))
        return question.grade(answer)
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - feedback, never a traceback
        return question.result("failed", say("could not check this answer ({error})",
                                             error=f"{type(err).__name__}: {err}"))


def _log(event: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        pass


def check(question_id: str, answer: Any) -> None:
    """Check an answer and print the feedback. Never raises (except on a user interrupt)."""
    if sealed_check.sealed():
        print(sealed_check.record(question_id, answer), flush=True)
        return
    _log({"event": "start", "id": str(question_id)})
    result = evaluate(question_id, answer)
    _RESULTS[result.id] = result
    _log({"event": "result", **result.as_dict()})
    print(result.line(), flush=True)


def results() -> dict[str, Result]:
    """The latest result of every question checked in this session."""
    return dict(_RESULTS)


def summary(set_id: str | None = None) -> None:
    """Print this session's score on one question set (default: the last one checked)."""
    if sealed_check.sealed():
        print(say("Graded sealed: the grader scores the recorded answers after the notebook has "
                  "run."))
        return
    from . import registry
    if set_id is None:
        checked = [registry.set_of(i) for i in _RESULTS if registry.set_of(i)]
        if not checked:
            print(say("No question has been checked yet."))
            return
        set_id = checked[-1]
    try:
        questions = registry.questions_in(set_id)
    except (KeyError, ValueError) as err:
        print(say("summary: {error}", error=err))
        return
    width = max(len(q.id) for q in questions)
    tol = max(_width(q.tolerance) for q in questions)
    score = total = 0.0
    print(f"{_pad(say('question'), width)}  {_pad(say('score'), 7, right=True)}  "
          f"{_pad(say('tolerance'), tol)}  {say('status')}")
    for q in questions:
        r = _RESULTS.get(q.id) or q.result("not attempted")
        if r.status != "blocked":
            total += q.points
            score += r.score
        print(f"{q.id:<{width}}  {f'{r.score:g} / {q.points:g}':>7}  {_pad(q.tolerance, tol)}  "
              f"{status_word(r.status)}")
    print(f"{_pad(say('total'), width)}  {f'{score:g} / {total:g}':>7}")


def _width(text: str) -> int:
    """Columns `text` takes in a monospaced font: a CJK character takes two."""
    return sum(2 if "\u2e80" <= ch <= "\uffef" else 1 for ch in text)


def _pad(text: str, width: int, right: bool = False) -> str:
    space = " " * max(width - _width(text), 0)
    return space + text if right else text + space
