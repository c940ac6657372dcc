"""The grade of one notebook: a line per question, a score table, Gradescope's results.json.

Statuses: passed, failed, not attempted (the stub was left in), blocked (a criterion measured
on an accelerator, on a CPU runtime: shown, not counted) and not run (the notebook never
reached its check).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .questions import Question

__all__ = ["Grade", "Run", "Report"]


@dataclass(frozen=True)
class Grade:
    """One question's line of the score table."""

    question: Question
    status: str      # passed | failed | not attempted | blocked | not run
    output: str = ""

    @property
    def score(self) -> float:
        return self.question.points if self.status == "passed" else 0.0

    @property
    def max_score(self) -> float:
        return 0.0 if self.status == "blocked" else self.question.points


@dataclass
class Run:
    """What happened when the notebook ran."""

    cell_errors: dict[int, str] = field(default_factory=dict)    # errors, time-outs, deaths
    stopped: str | None = None        # why the run ended early, if it did
    log: list[dict[str, Any]] = field(default_factory=list)      # self-study: check()'s log
    answers: list[tuple[int, Any]] = field(default_factory=list)  # sealed: (cell, message)
    sealed_refusals: set[int] = field(default_factory=set)       # cells refused the keys
    seconds: float = 0.0
    infrastructure_error: bool = False
    isolation: str = ""               # what separated the submission from the machine
    restarts: int = 0                 # kernels restarted after a death or a stuck cell


@dataclass
class Report:
    """The grades of one notebook's questions, and what happened when it ran."""

    notebook: str
    sets: list[str]
    grades: list[Grade]
    run: Run
    sealed: bool = False
    seed: int | None = None           # sealed: the draw of the coding questions' inputs

    @property
    def score(self) -> float:
        return sum(g.score for g in self.grades)

    @property
    def max_score(self) -> float:
        return sum(g.max_score for g in self.grades)

    def notes(self) -> list[str]:
        notes = [err for _, err in sorted(self.run.cell_errors.items())]
        return notes + ([self.run.stopped] if self.run.stopped else [])

    def table(self) -> str:
        """The score table printed by `inferbook grade`."""
        width = max([len(g.question.id) for g in self.grades] + [5])
        mode = f"sealed, inputs seed {self.seed}" if self.sealed else "self-study checks"
        lines = [f"{self.notebook} — exercises {', '.join(self.sets)} "
                 f"(ran in {self.run.seconds:.1f} s; {mode})",
                 f"{'question':<{width}}  {'score':>9}  status"]
        for g in self.grades:
            pts = f"{g.score:g} / {g.question.points:g}"
            lines.append(f"{g.question.id:<{width}}  {pts:>9}  {g.status}")
        lines.append(f"{'total':<{width}}  {f'{self.score:g} / {self.max_score:g}':>9}")
        details = [f"  {g.question.id}: {g.output}" for g in self.grades
                   if g.status not in ("passed", "not run") and g.output]
        not_run = [g.question.id for g in self.grades if g.status == "not run"]
        if not_run:
            why = "the notebook stopped first" if self.run.stopped else "no check() for it"
            details.append(f"  not run ({why}): {', '.join(not_run)}")
        if details:
            lines += ["", "Feedback:"] + details
        if self.notes():
            lines += ["", "While running the notebook:"] + [f"  {n}" for n in self.notes()]
        if self.run.isolation:
            lines += ["", f"Isolation: {self.run.isolation}"]
        return "\n".join(lines)

    def gradescope(self) -> dict[str, Any]:
        """Gradescope's results.json (gradescope-autograders.readthedocs.io, 'specs')."""
        tests = []
        for g in self.grades:
            test = {"name": f"{g.question.id}: {g.question.title}", "score": g.score,
                    "max_score": g.max_score,
                    "output": g.status + (f": {g.output}" if g.output else "")}
            if g.status == "blocked":
                test["output"] = f"blocked (not counted): {g.output}"
            else:
                test["status"] = "passed" if g.status == "passed" else "failed"
            tests.append(test)
        isolation = [f"Isolation: {self.run.isolation}"] if self.run.isolation else []
        return {"score": self.score, "execution_time": round(self.run.seconds),
                "output": "\n".join(self.notes() + isolation), "tests": tests}
