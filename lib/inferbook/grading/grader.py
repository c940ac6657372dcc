"""Grading a submitted notebook: run it in a sandboxed kernel, score its answers.

`grade_notebook(path)` copies the notebook's folder to a scratch folder, runs every code
cell there in a fresh kernel (`cell_runner.run_cells`: a time limit per cell and one for the
notebook, a memory limit, restarts after a crash), ends every process the notebook started,
and scores the questions of the exercise sets it belongs to. It never reads the notebook's
outputs. Two modes share everything but the scoring:

- **self-study** (the default): `check()` grades in the kernel, as it does for a student,
  and logs each result to a file the grader reads (see `feedback.py`). It is honest feedback
  at scale, not proof against a student set on cheating: code in the notebook can rewrite
  `check`, read the answer keys, or write the log.
- **sealed** (`sealed=True`): the kernel has no answer keys; `check()` only records the
  answers, as plain data, and the grader scores them in its own process — functions are
  rebuilt from the notebook's source and run on freshly drawn inputs in a separate sandbox
  (see `sealed_scoring.py`). What the submission could still do, and what the sandbox does about
  it, is in `sandbox.py` and the book's page for instructors.

The points come from the registry, never from the kernel. Whatever the student's code does,
the grader reports it on a question and carries on.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from inferbook.book import exercise_sources, language

from . import registry
from .cell_runner import run_cells
from .feedback import LOG_ENV
from .function_dispatch import run_functions
from .questions import Question
from .reaper import ProcessReaper
from .report import Grade, Report, Run
from .sandbox import DEFAULT_MEMORY, Sandbox, parse_memory
from .sandboxed_kernel import Kernel
from .sealed_scoring import score_sealed

__all__ = ["GradingError", "read_notebook", "question_sets", "score", "grade_notebook",
           "copy_submission"]

MAX_COPY_BYTES = 256 * 2**20      # the submission's folder, copied for the run
MAX_COPY_FILES = 10_000


class GradingError(ValueError):
    """The input cannot be graded (missing, not a notebook, holds no exercises)."""


# Reading the submission ---------------------------------------------------------------------

def read_notebook(path: Path) -> Any:
    """The notebook at `path` (.ipynb, or a py:percent .py source if jupytext is installed)."""
    if path.is_dir():
        raise GradingError(f"{path} is a directory, not a notebook")
    if not path.is_file():
        raise GradingError(f"{path} does not exist")
    if path.suffix == ".py":
        try:
            import jupytext
        except ImportError:
            raise GradingError("grading a .py source needs jupytext (pip install jupytext)") \
                from None
        try:
            return jupytext.read(path)
        except Exception as err:  # noqa: BLE001
            raise GradingError(f"cannot read {path} as a py:percent notebook: {err}") from None
    if path.suffix != ".ipynb":
        raise GradingError(f"{path} is not a notebook (expected .ipynb, or a .py source)")
    import nbformat  # optional, like jupytext above: `inferbook grade` checks for it
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - JSON, encoding, schema: all "not a notebook"
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GradingError(f"cannot read {path} as a notebook: {text}") from None
    if not isinstance(nb.get("cells"), list):
        raise GradingError(f"{path} is not a notebook (no cells)")
    for index, cell in enumerate(nb.cells):
        if not (isinstance(cell, dict) and cell.get("cell_type") in ("code", "markdown", "raw")
                and isinstance(cell.get("source"), str)):
            raise GradingError(f"{path} is not a notebook: cell {index + 1} has no cell type "
                               f"and text")
        if not isinstance(cell.get("metadata"), dict):
            cell["metadata"] = nbformat.NotebookNode()
    if not isinstance(nb.get("metadata"), dict):
        nb["metadata"] = nbformat.NotebookNode()
    return nb


def question_sets(nb: Any, path: Path) -> list[str]:
    """The exercise sets the notebook belongs to: its metadata, its checks, its file name."""
    known = set(registry.set_ids())
    meta = nb.metadata.get("inferbook") if isinstance(nb.metadata, dict) else None
    listed = meta.get("exercises") if isinstance(meta, dict) else None
    sets = {s for s in listed if s in known} if isinstance(listed, list) else set()
    sets |= {s for s in map(registry.set_of, exercise_sources.question_ids(nb.cells)) if s in known}
    if not sets and (m := re.search(r"(\d\d)_", path.name)) and f"ch{m[1]}" in known:
        sets.add(f"ch{m[1]}")
    return sorted(sets)


# Running it ---------------------------------------------------------------------------------

def notebook_language(nb: Any) -> str:
    """The language a student notebook was written in (its metadata; English if unknown)."""
    meta = nb.metadata.get("inferbook") if isinstance(nb.metadata, dict) else None
    lang = meta.get("language") if isinstance(meta, dict) else None
    return lang if lang in language.LANGUAGES else language.DEFAULT


def copy_submission(folder: Path, into: Path) -> Path:
    """A scratch copy of the submission's folder: plain files, within a size limit.

    Links are not followed, unreadable files are skipped, and so is `into` itself (a notebook
    in /tmp is copied into /tmp)."""
    into.mkdir(parents=True)
    skip = into.resolve().parents[1]               # the grader's temporary folder
    left_bytes, left_files = MAX_COPY_BYTES, MAX_COPY_FILES
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = [d for d in sorted(dirs) if not (here / d).is_symlink()
                   and (here / d).resolve() != skip]
        target = into / here.relative_to(folder)
        target.mkdir(exist_ok=True)
        for name in sorted(files):
            path = here / name
            try:
                size = path.lstat().st_size
                if path.is_symlink() or not path.is_file() or size > left_bytes \
                        or left_files <= 0:
                    continue
                shutil.copyfile(path, target / name)
            except OSError:
                continue
            left_bytes, left_files = left_bytes - size, left_files - 1
    return into


def _read_log(path: Path) -> list[dict[str, Any]]:
    events = []
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(event, dict) and isinstance(event.get("id"), str):
                events.append(event)
    return events


# Scoring ------------------------------------------------------------------------------------

def score(questions: list[Question], nb: Any, run_: Run) -> list[Grade]:
    """One Grade per question, from the log of checks and what happened to the run."""
    latest: dict[str, dict[str, Any]] = {}
    pending = None                       # a check that started and never finished
    for event in run_.log:
        if event.get("event") == "start":
            pending = event["id"]
        elif event.get("event") == "result":
            latest[event["id"]] = event
            pending = None
    check_cell = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for qid in exercise_sources.question_ids([cell]):
                check_cell.setdefault(qid, index)
    grades = []
    for q in questions:
        event = latest.get(q.id)
        if event is not None and event.get("status") in ("passed", "failed", "not attempted",
                                                          "blocked"):
            grades.append(Grade(q, event["status"], str(event.get("message", ""))))
        elif q.id == pending and run_.stopped:
            grades.append(Grade(q, "failed", f"checking this question stopped the notebook: "
                                             f"{run_.stopped}"))
        elif check_cell.get(q.id) in run_.cell_errors:
            grades.append(Grade(q, "failed", f"not checked: "
                                             f"{run_.cell_errors[check_cell[q.id]]}"))
        elif run_.stopped:
            grades.append(Grade(q, "not run", f"not checked: {run_.stopped}"))
        else:
            grades.append(Grade(q, "not run", f'not checked: the notebook never runs '
                                              f'check("{q.id}", ...)'))
    return grades


def grade_notebook(path: str | Path, timeout_s: float = 600.0, *, sealed: bool = False,
                   cell_timeout_s: float = 300.0, memory: str | int = DEFAULT_MEMORY,
                   isolate: bool = True, seed: int | None = None,
                   sets: list[str] | None = None) -> Report:
    """Run and score one notebook. Raises GradingError only for input that is not gradable.

    `timeout_s` bounds all the cells together, `cell_timeout_s` each one; `memory` is the
    kernel's memory limit ('4G', '50%' of the machine, or bytes); `isolate=False` skips
    bubblewrap even where it works; `seed` fixes a sealed run's inputs (default: fresh);
    `sets` grades these exercise sets whatever the notebook says it holds.
    """
    path = Path(path)
    nb = read_notebook(path)
    if sets is None:
        sets = question_sets(nb, path)
    if not sets:
        raise GradingError(f"{path} holds none of the book's exercises (no check() calls of a "
                           f"known question set: {', '.join(registry.set_ids())})")
    memory_bytes = memory if isinstance(memory, int) else parse_memory(memory)
    questions = [q for s in sets for q in registry.questions_in(s)]
    seed = secrets.randbits(32) if sealed and seed is None else seed
    with tempfile.TemporaryDirectory(prefix="inferbook-grade-") as tmp, \
            ProcessReaper() as reaper:
        def sandbox(name: str) -> Sandbox:
            folder = Path(tmp) / name
            runtime = folder / "runtime"
            runtime.mkdir(parents=True)
            return Sandbox(copy_submission(path.resolve().parent, folder / "work"), runtime,
                           memory_bytes, hide_keys=sealed, isolate=isolate)

        box = sandbox("notebook")
        log = box.runtime / "checks.jsonl"
        env = box.env() if sealed else box.env(**{LOG_ENV: str(log)})
        run = run_cells(nb, Kernel(box, sealed, env), reaper, cell_timeout_s, timeout_s)
        if sealed:      # scored here: feedback in the notebook's language, as in its kernel
            with language.using(notebook_language(nb)):
                grades = score_sealed(
                    questions, nb, run, seed=seed, setup_limit_s=cell_timeout_s,
                    run_jobs=lambda jobs, blocked: run_functions(jobs, blocked,
                                                                 sandbox("functions"), reaper))
        else:
            run.log = _read_log(log)
            grades = score(questions, nb, run)
        reaper.sweep()
    return Report(path.name, list(sets), grades, run, sealed=sealed, seed=seed)
