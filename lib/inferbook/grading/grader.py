"""Grading a submitted notebook: run it in a fresh kernel, read its checks, score them.

`grade_notebook(path)` runs every code cell of the notebook, in order, in a new Jupyter
kernel of the current Python environment, with one time limit for all its cells. It
does not read the notebook's outputs: each `check()` in the kernel appends its result to a
log file (see `feedback.py`), and the score is the latest result of each question of the
exercise sets the notebook belongs to. The points come from the registry, not from the log.

Whatever the student's code does, the grader reports it on a question and carries on:

- a crash inside a checked function is that question's failure (`check` catches it);
- an endless loop inside a checked function is stopped by the check's time limit;
- an error in a cell is noted, and questions whose check sits in that cell are failed
  with the error as the reason; later cells still run;
- a cell that runs past the notebook's time limit (an endless loop at the top level, or in
  XLA where no in-kernel limit reaches) or a kernel that dies (memory, ``os._exit``) ends
  the run: the question whose check was in progress is failed with the reason, and questions
  never reached are "not run".

Like any autograder, this executes the submission's code with the grader's permissions:
run it in a container (Gradescope does) for work you do not trust. And like any grader that
checks inside the student's kernel, it gives honest feedback at scale, not proof against a
student set on cheating: code in the notebook could rewrite `check` itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from . import generate, registry
from .feedback import LOG_ENV
from .questions import Question
from .report import Grade, Report, Run

__all__ = ["GradingError", "read_notebook", "question_sets", "run", "score", "grade_notebook"]

MAX_OUTPUT_CHARS = 2_000_000     # a notebook that prints forever must not fill our memory


class GradingError(ValueError):
    """The input cannot be graded (missing, not a notebook, holds no exercises)."""


# Reading the submission ---------------------------------------------------------------------

def read_notebook(path: Path) -> Any:
    """The notebook at `path` (.ipynb, or a py:percent .py source if jupytext is installed)."""
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
    import nbformat
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - JSON, encoding, schema: all "not a notebook"
        text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GradingError(f"cannot read {path} as a notebook: {text}") from None
    if not isinstance(nb.get("cells"), list):
        raise GradingError(f"{path} is not a notebook (no cells)")
    return nb


def question_sets(nb: Any, path: Path) -> list[str]:
    """The exercise sets the notebook belongs to: its metadata, its checks, its file name."""
    known = set(registry.set_ids())
    meta = nb.metadata.get("inferbook") if isinstance(nb.metadata, dict) else None
    listed = meta.get("exercises") if isinstance(meta, dict) else None
    sets = {s for s in listed if s in known} if isinstance(listed, list) else set()
    sets |= {s for s in map(registry.set_of, generate.question_ids(nb.cells)) if s in known}
    if not sets and (m := re.search(r"(\d\d)_", path.name)) and f"ch{m[1]}" in known:
        sets.add(f"ch{m[1]}")
    return sorted(sets)


# Running it ---------------------------------------------------------------------------------

def _client(nb: Any, cwd: Path):
    """An nbclient NotebookClient on a kernel of *this* Python (whatever kernelspecs exist)."""
    import ipykernel.kernelspec
    import nbclient
    from jupyter_client import AsyncKernelManager
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class ThisPython(KernelSpecManager):
        def get_kernel_spec(self, kernel_name):
            return KernelSpec(resource_dir=ipykernel.kernelspec.RESOURCES,
                              **ipykernel.kernelspec.get_kernel_dict())

    class Client(nbclient.NotebookClient):
        chars = 0

        def output(self, outs, msg, display_id, cell_index):
            if msg["msg_type"] != "error":
                self.chars += len(json.dumps(msg.get("content", {})))
                if self.chars > MAX_OUTPUT_CHARS:
                    return None
            return super().output(outs, msg, display_id, cell_index)

    km = AsyncKernelManager(kernel_name="python3", kernel_spec_manager=ThisPython())
    return Client(nb, km=km, allow_errors=True, shutdown_kernel="immediate",
                  record_timing=False, resources={"metadata": {"path": str(cwd)}})


def _where(nb: Any, index: int) -> str:
    """'cell 7 (`check("ch01.x", ...)`)': notebooks show no cell numbers, so quote the cell."""
    first = next((line.strip() for line in nb.cells[index].source.splitlines() if line.strip()),
                 "")
    return f"cell {index + 1} (`{first[:60]}{'…' if len(first) > 60 else ''}`)"


def _error_text(content: dict[str, Any]) -> str:
    value = str(content.get("evalue", "")).strip().splitlines()
    return f"{content.get('ename', 'Error')}" + (f": {value[0][:200]}" if value else "")


def run(nb: Any, cwd: Path, timeout_s: float) -> Run:
    """Execute the notebook's code cells in a fresh kernel; never raises."""
    import nbclient.exceptions as nbx
    result = Run()
    executed = 0
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="inferbook-grade-") as tmp:
        log_path = Path(tmp) / "checks.jsonl"
        env = {**os.environ, LOG_ENV: str(log_path), "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
        try:
            client = _client(nb, cwd)

            def on_error(cell, cell_index, execute_reply):
                result.cell_errors[cell_index] = (f"{_where(nb, cell_index)} raised "
                                                  f"{_error_text(execute_reply['content'])}")
            client.on_cell_error = on_error
            with client.setup_kernel(env=env, cwd=str(cwd), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL):
                deadline = time.monotonic() + timeout_s      # the kernel has started
                for index, cell in enumerate(nb.cells):
                    if cell.cell_type != "code":
                        continue
                    left = deadline - time.monotonic()
                    if left <= 0:
                        result.stopped = f"the notebook ran out of time ({timeout_s:g} s) " \
                                         f"before {_where(nb, index)}"
                        break
                    client.timeout = max(1, int(left + 0.999))
                    executed += 1
                    try:
                        client.execute_cell(cell, index)
                    except nbx.CellTimeoutError:
                        result.stopped = f"the notebook ran out of time ({timeout_s:g} s) " \
                                         f"in {_where(nb, index)}"
                        break
                    except nbx.DeadKernelError:
                        result.stopped = f"the kernel died in {_where(nb, index)} (out of " \
                                         f"memory, or the code ended the process)"
                        break
        except Exception as err:  # noqa: BLE001 - no kernel, broken install: say so, go on
            if result.stopped is None:
                result.stopped = f"the grader could not run the notebook: " \
                                 f"{type(err).__name__}: {err}"
                result.infrastructure_error = executed == 0
        result.seconds = time.monotonic() - start
        result.log = _read_log(log_path)
    return result


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
            for qid in generate.question_ids([cell]):
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


def grade_notebook(path: str | Path, timeout_s: float = 600.0) -> Report:
    """Run and score one notebook. Raises GradingError only for input that is not gradable."""
    path = Path(path)
    nb = read_notebook(path)
    sets = question_sets(nb, path)
    if not sets:
        raise GradingError(f"{path} holds none of the book's exercises (no check() calls of a "
                           f"known question set: {', '.join(registry.set_ids())})")
    questions = [q for s in sets for q in registry.questions_in(s)]
    run_ = run(nb, path.resolve().parent, timeout_s)
    return Report(path.name, sets, score(questions, nb, run_), run_)
