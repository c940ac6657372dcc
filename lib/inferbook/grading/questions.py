"""The kinds of question an exercise can ask, and how each one grades an answer.

A question never stores its answer. It stores how to *compute* the answer with the library
(`reference`, called when the check runs), how close an answer must be (a tolerance stated
with the question), a hint for a wrong answer, and its points. Three kinds cover the book:

- `Numeric`: a number, right within a relative (and optionally absolute) tolerance. Known
  wrong answers (`Mistake`) get their own explanation — e.g. forgetting that the cache holds
  values as well as keys, the slip between two renderings of the scaling book.
- `Exact`: a value that must match exactly — True/False, a choice among options, an integer.
- `Function`: the student writes a function; it is called on random inputs (a fixed seed per
  question) next to the library's reference, each call under a time limit, and the outputs
  are compared by the question's `compare`.

`grade(answer)` returns a `Result`. It may raise only on a bug in the question itself;
`inferbook.grading.check` turns even that into feedback. Its message is in the kernel's
language (`inferbook.grading.localize`); its id, status and points are the same in all.
"""

from __future__ import annotations

import math
import numbers
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .compare import Compare, allclose, as_numpy, describe, error_line
from .localize import question_text, say, status_word
from .timelimit import Outcome, call_with_time_limit

__all__ = ["Result", "Question", "Numeric", "Mistake", "Exact", "Function"]

STATUSES = ("passed", "failed", "not attempted", "blocked")


@dataclass(frozen=True)
class Result:
    """The outcome of checking one answer."""

    id: str
    status: str          # one of STATUSES
    points: float        # what the question is worth
    message: str = ""

    @property
    def score(self) -> float:
        return self.points if self.status == "passed" else 0.0

    def line(self) -> str:
        """The feedback shown in the notebook."""
        mark = {"passed": "✔", "failed": "✘", "not attempted": "…", "blocked": "⏸"}[self.status]
        pts = f"{_pts(self.score)}/{_pts(self.points)}"
        return f"{mark} {self.id} — {status_word(self.status)} ({pts})" + (
            f": {self.message}" if self.message else "")

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "score": self.score,
                "points": self.points, "message": self.message}


def _pts(x: float) -> str:
    return f"{x:g}"


def unanswered(answer: Any) -> bool:
    """The stubs of the student notebooks: `...` (or None) where an answer goes."""
    return answer is None or answer is Ellipsis


@dataclass(frozen=True)
class Question:
    """What every question has. `requires="accelerator"`: graded only on a GPU or TPU."""

    id: str
    title: str
    points: float
    hint: str
    requires: str | None = field(default=None, kw_only=True)

    def result(self, status: str, message: str = "") -> Result:
        return Result(self.id, status, self.points, message)

    def text(self, english: str) -> str:
        """One of this question's texts (its hint, a mistake's message) in the kernel's
        language, from its set's table of translations."""
        return question_text(self.id, english)

    def grade(self, answer: Any) -> Result:  # pragma: no cover - every kind overrides it
        raise NotImplementedError

    @property
    def tolerance(self) -> str:
        """The tolerance in words, for the score table and the exercise pages."""
        return say("exact")


# Numbers ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mistake:
    """A known wrong answer: `value(reference)` gives it, `message` explains it."""

    value: Callable[[float], float]
    message: str


def as_number(answer: Any) -> float | str:
    """The answer as a float, or a message saying why it is not a number."""
    if isinstance(answer, bool):
        return say("expected a number, got {got}", got=repr(answer))
    if isinstance(answer, str):
        return say("expected a number, got the text {got} (leave out the quotes)",
                   got=repr(answer[:40]))
    if isinstance(answer, numbers.Real):
        return float(answer)
    try:
        arr = np.asarray(answer)
    except Exception:  # noqa: BLE001 - any object a student may hand in
        arr = None
    if arr is not None and arr.size == 1 and arr.dtype.kind in "iuf":
        return float(arr.reshape(()))
    return say("expected a single number, got {got}", got=describe(answer))


@dataclass(frozen=True)
class Numeric(Question):
    """A number within `rel_tol` of the reference (or within `abs_tol` of it)."""

    reference: Callable[[], float] = field(kw_only=True)
    rel_tol: float = field(default=0.01, kw_only=True)
    abs_tol: float = field(default=0.0, kw_only=True)
    mistakes: Sequence[Mistake] = field(default=(), kw_only=True)

    @property
    def tolerance(self) -> str:
        parts = [say("within {percent}%", percent=f"{self.rel_tol * 100:g}")] if self.rel_tol \
            else []
        if self.abs_tol:
            parts.append(f"± {self.abs_tol:g}")
        return say(" or ").join(parts) or say("exact")

    def close(self, got: float, want: float) -> bool:
        return abs(got - want) <= max(self.rel_tol * abs(want), self.abs_tol)

    def grade(self, answer: Any) -> Result:
        if unanswered(answer):
            return self.result("not attempted", say("replace the `...` with your answer"))
        got = as_number(answer)
        if isinstance(got, str):
            return self.result("failed", got)
        if not math.isfinite(got):
            return self.result("failed", say("your answer is {got}", got=got))
        want = float(self.reference())
        if self.close(got, want):
            return self.result("passed")
        for mistake in self.mistakes:
            if self.close(got, float(mistake.value(want))):
                return self.result("failed", self.text(mistake.message))
        template = ("{got} is too large (tolerance: {tolerance}). Hint: {hint}" if got > want
                    else "{got} is too small (tolerance: {tolerance}). Hint: {hint}")
        return self.result("failed", say(template, got=f"{got:,.6g}", tolerance=self.tolerance,
                                         hint=self.text(self.hint)))


# Exact answers ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Exact(Question):
    """An answer that must equal the reference; `choices` lists the allowed answers."""

    reference: Callable[[], Any] = field(kw_only=True)
    choices: Sequence[Any] | None = field(default=None, kw_only=True)

    @staticmethod
    def _norm(x: Any) -> Any:
        if isinstance(x, str):
            return x.strip().lower()
        if isinstance(x, (np.generic, np.ndarray)) and np.ndim(x) == 0:
            return x.item()
        return x

    def grade(self, answer: Any) -> Result:
        if unanswered(answer):
            return self.result("not attempted", say("replace the `...` with your answer"))
        got = self._norm(answer)
        if self.choices is not None:
            allowed = [self._norm(c) for c in self.choices]
            if not any(type(got) is type(a) and got == a for a in allowed):
                return self.result("failed", say("answer with one of {choices}", choices=", ".join(
                    repr(c) for c in self.choices)))
        want = self._norm(self.reference())
        if type(got) is bool or type(want) is bool:
            ok = type(got) is type(want) and got == want
        else:
            ok = got == want
        return self.result("passed") if ok else self.result(
            "failed", say("Hint: {hint}", hint=self.text(self.hint)))


# Functions ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Function(Question):
    """A function, checked against the library's `reference` on random `cases`.

    `cases(rng)` returns a list of argument tuples; both functions get the same arguments.
    `compare(student_output, reference_output)` returns None when they agree, else a message.
    `time_limit_s` bounds each call of the student's function (the first call may compile).
    `library_answers` names the library callables that answer the question outright (e.g.
    "inferbook.model.kvcache.write"): a sealed grader runs the student's function where
    those raise instead (see `sealed_guards.py`).
    """

    reference: Callable[..., Any] = field(kw_only=True)
    cases: Callable[[np.random.Generator], list[tuple]] = field(kw_only=True)
    compare: Compare = field(default_factory=allclose, kw_only=True)
    time_limit_s: float = field(default=10.0, kw_only=True)
    describe_case: Callable[[tuple], str] | None = field(default=None, kw_only=True)
    library_answers: tuple[str, ...] = field(default=(), kw_only=True)

    @property
    def tolerance(self) -> str:
        return say("each call ≤ {seconds} s", seconds=f"{self.time_limit_s:g}")

    def rng(self, salt: int | None = None) -> np.random.Generator:
        """The same inputs on every run (so a grade can be reproduced), different per question.

        A sealed grader passes a fresh `salt`: inputs nobody could tabulate in advance."""
        seed = zlib.crc32(self.id.encode())
        return np.random.default_rng(seed if salt is None else [seed, salt])

    def _case(self, i: int, n: int, args: tuple) -> str:
        text = self.describe_case(args) if self.describe_case else \
            ", ".join(describe(a) for a in args)
        return say("test {i} of {n} ({case})", i=i + 1, n=n, case=text)

    def grade(self, answer: Any) -> Result:
        if unanswered(answer):
            return self.result("not attempted", say("write the function, then run this cell "
                                                    "again"))
        if not callable(answer):
            return self.result("failed", say("expected a function, got {got}",
                                             got=describe(answer)))
        return self.judge(self.cases(self.rng()), lambda i, args: call_with_time_limit(
            lambda *a: as_numpy(answer(*a)), args, seconds=self.time_limit_s))

    def judge(self, cases: list[tuple], call: Callable[[int, tuple], Outcome]) -> Result:
        """Grade the outcomes of the student's function on `cases` (`call(i, args)` gives the
        i-th: here in the kernel, or read back from the sealed grader's sandbox)."""
        for i, args in enumerate(cases):
            want = as_numpy(self.reference(*args))
            outcome = call(i, args)
            case = self._case(i, len(cases), args)
            hint = self.text(self.hint)
            if outcome.timed_out:
                msg = say("did not return within {seconds} s on {case}",
                          seconds=f"{self.time_limit_s:g}", case=case)
                if outcome.abandoned:
                    msg += say(" and is still running in the background; if this notebook "
                               "becomes slow, restart the runtime")
                return self.result("failed", say("{message}. Hint: {hint}", message=msg,
                                                 hint=hint))
            if isinstance(outcome.error, NotImplementedError) and i == 0:
                return self.result("not attempted", say("write the function, then run this "
                                                        "cell again"))
            if outcome.error is not None:
                return self.result("failed", say("raised {error} on {case}. Hint: {hint}",
                                                 error=error_line(outcome.error), case=case,
                                                 hint=hint))
            problem = self.compare(outcome.value, want)
            if problem:
                return self.result("failed", say("{problem} on {case}. Hint: {hint}",
                                                 problem=problem, case=case, hint=hint))
        return self.result("passed", say("agrees with the library on {n} random tests",
                                         n=len(cases)))
