"""Scoring a notebook that ran sealed: its recorded answers, graded in the grader's process.

The kernel reported, cell by cell, what each `check` was given (`sealed_check.py`). Here each
question gets the latest answer recorded for it, and

- a number, text, array or list is graded by the question itself (`Question.grade`): it is
  plain data, so comparing it runs none of the student's code;
- a function is rebuilt from the notebook's source (`slicing.py`) and run by the sandboxed
  runner on inputs drawn afresh for this run (`function_dispatch.py`); its outputs come back
  as plain data and are compared with the references computed here (`Function.judge`);
- anything else ("an object whose __eq__ ...") fails, saying what it was.

A question with no recorded answer fails with what happened to its cell. When a cell that
leads up to it was refused the answer keys, the grade says so: the answer was read from the
library, not computed.
"""

from __future__ import annotations

from typing import Any, Callable

from inferbook.book import exercise_sources

from . import plain_answers
from .compare import ReportedError
from .function_dispatch import FunctionJob
from .questions import Function, Question, Result
from .report import Grade, Run
from .slicing import SliceError, answer_program
from .timelimit import Outcome

__all__ = ["score_sealed", "grade_value"]


def _grader_platform() -> str:
    """Where the grader's own JAX runs; loaded only for a question that depends on it."""
    import jax
    return jax.default_backend()


def grade_value(question: Question, value: Any) -> Result:
    """Grade plain data the way `feedback.evaluate` grades an answer in the kernel."""
    try:
        if question.requires == "accelerator" and _grader_platform() == "cpu":
            return question.result("blocked", "this criterion is measured on a GPU or TPU; the "
                                              "grader has only a CPU, so it is not graded here")
        if isinstance(value, plain_answers.Callable):
            return question.result("failed", f"expected an answer, got the function "
                                             f"{value.name}")
        if isinstance(value, plain_answers.Unsupported):
            return question.result("failed", f"got {value.description}: a sealed grader "
                                              f"accepts numbers, text, lists and arrays only")
        return question.grade(value)
    except Exception as err:  # noqa: BLE001 - a broken question is a failure, not a crash
        return question.result("failed", f"could not check this answer ({type(err).__name__}: "
                                         f"{err})")


def _outcome(event: dict[str, Any], i: int) -> Outcome:
    outcomes = event.get("outcomes") or []
    if i >= len(outcomes) or not isinstance(outcomes[i], dict):
        return Outcome(error=ReportedError("no output came back for this input"))
    out = outcomes[i]
    if out.get("timed_out"):
        return Outcome(timed_out=True, abandoned=False)
    if "error" in out:
        if out.get("not_implemented") is True:
            return Outcome(error=NotImplementedError())
        return Outcome(error=ReportedError(str(out["error"])[:500]))
    try:
        return Outcome(value=plain_answers.decode(out.get("value")))
    except (plain_answers.AnswerFormatError, ValueError, TypeError) as err:
        return Outcome(error=ReportedError(f"returned something the grader cannot read ({err})"))


def _judge_function(q: Function, job: FunctionJob, event: dict[str, Any]) -> Result:
    for key, words in (("infrastructure", "the grader could not run it: "), ("killed", "it "),
                       ("setup_error", "rebuilding it from the notebook raised "),
                       ("not_callable", "the checked answer is not a function but ")):
        if key in event:
            return q.result("failed", f"{words}{str(event[key])[:400]}. Hint: {q.hint}")
    if "setup_timeout" in event:
        return q.result("failed", f"rebuilding it from the notebook took longer than "
                                  f"{event['setup_timeout']:g} s")
    return q.judge(job.cases, lambda i, args: _outcome(event, i))


def _answer_regions(nb: Any) -> dict[str, range]:
    """For each checked question, the cells from after the previous check to its own."""
    regions, previous = {}, 0
    for index, cell in enumerate(nb.cells):
        ids = exercise_sources.question_ids([cell]) if cell.cell_type == "code" else []
        for qid in ids:
            regions.setdefault(qid, range(previous, index + 1))
        if ids:
            previous = index + 1
    return regions


def score_sealed(questions: list[Question], nb: Any, run: Run, *, seed: int,
                 setup_limit_s: float,
                 run_jobs: Callable[[list[FunctionJob], dict[str, str]], dict[str, Any]]
                 ) -> list[Grade]:
    """One Grade per question from the run's recorded answers (see the module doc).

    `run_jobs(jobs, blocked)` runs the coding questions' functions
    (`function_dispatch.run_functions` in a sandbox); `seed` draws their inputs."""
    latest: dict[str, tuple[int, Any]] = {}
    for cell, message in run.answers:
        if isinstance(message, dict) and isinstance(message.get("id"), str):
            latest[message["id"]] = (cell, message)
    sources = [c.source if c.cell_type == "code" else "" for c in nb.cells]
    results: dict[str, Result] = {}
    jobs: list[FunctionJob] = []
    for q in questions:
        if q.id not in latest:
            continue
        cell, message = latest[q.id]
        try:
            value = plain_answers.decode(message.get("answer"))
        except (plain_answers.AnswerFormatError, ValueError, TypeError) as err:
            results[q.id] = q.result("failed", f"the recorded answer cannot be read ({err})")
            continue
        if isinstance(q, Function) and isinstance(value, plain_answers.Callable):
            line = message.get("line") if type(message.get("line")) is int else None
            try:
                program = answer_program(sources, cell, line, q.id)
            except SliceError as err:
                results[q.id] = q.result("failed", str(err))
                continue
            try:
                cases = q.cases(q.rng(seed))
            except Exception as err:  # noqa: BLE001 - a broken question, not the student
                results[q.id] = q.result("failed", f"could not draw inputs ({err!r})")
                continue
            jobs.append(FunctionJob(q.id, program, cases, q.time_limit_s, setup_limit_s))
        else:
            results[q.id] = grade_value(q, value)
    if jobs:
        blocked = {name: q.id for q in questions if isinstance(q, Function)
                   for name in q.library_answers}
        events = run_jobs(jobs, blocked)
        for job in jobs:
            q = next(q for q in questions if q.id == job.id)
            event = events.get(job.id, {"infrastructure": "no result came back"})
            try:
                results[q.id] = _judge_function(q, job, event)
            except Exception as err:  # noqa: BLE001 - a broken reference, not the student
                results[q.id] = q.result("failed", f"could not check this answer ({err!r})")
    regions = _answer_regions(nb)
    return [_grade(q, results.get(q.id), regions.get(q.id, range(0)), run) for q in questions]


def _grade(q: Question, result: Result | None, region: range, run: Run) -> Grade:
    if result is not None:
        return Grade(q, result.status, result.message)
    refused = [run.cell_errors[i] for i in region if i in run.sealed_refusals]
    why = f"scored 0 sealed — the answer was read from the library: {refused[-1]}" \
        if refused else None
    check_cell = region[-1] if region else None
    if check_cell in run.cell_errors:
        return Grade(q, "failed", why or f"not checked: {run.cell_errors[check_cell]}")
    if why:
        return Grade(q, "failed", why)
    if run.stopped:
        return Grade(q, "not run", f"not checked: {run.stopped}")
    return Grade(q, "not run", f'not checked: the notebook never runs check("{q.id}", ...)')
