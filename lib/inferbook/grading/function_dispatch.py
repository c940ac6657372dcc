"""The grader's side of `function_runner`: run the student's functions, read back plain data.

`run_functions(jobs, blocked, sandbox, reaper)` starts `function_runner` in the sandbox with
every coding question of the notebook, watches its progress file, and gives each question
a budget: the time to rebuild the answer, plus each call's limit per input, plus a margin
for compiling. A question that runs past its budget, or kills the process, fails alone: the
runner is started again for the questions after it. Only then, with every process of the
runner ended (`reaper.sweep`), are the results read — JSON, decoded by `plain_answers.decode`.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import function_runner as runner
from .reaper import ProcessReaper
from .sandbox import Sandbox
from .slicing import AnswerProgram
from .timelimit import STOP_GRACE_S

__all__ = ["FunctionJob", "run_functions", "START_LIMIT_S"]

START_LIMIT_S = 180.0           # starting Python, JAX and the library in the sandbox
MARGIN_S = 30.0                 # per question: compiling, and a loaded machine
MAX_RESULTS_BYTES = 256 * 2**20


@dataclass(frozen=True)
class FunctionJob:
    """One coding question: how to rebuild the answer, and the inputs to call it on."""

    id: str
    program: AnswerProgram
    cases: list[tuple]
    time_limit_s: float
    setup_limit_s: float

    def request(self) -> dict[str, Any]:
        return {"id": self.id, "cells": list(self.program.cells),
                "expression": self.program.expression, "cases": self.cases,
                "time_limit_s": self.time_limit_s, "setup_limit_s": self.setup_limit_s}

    @property
    def budget_s(self) -> float:
        return self.setup_limit_s + len(self.cases) * (self.time_limit_s + STOP_GRACE_S) + \
            MARGIN_S


def _events(path: Path, seen: int) -> tuple[list[dict[str, Any]], int]:
    """New complete lines of the progress file since byte `seen` (a forged file is just data)."""
    try:
        with open(path, "rb") as f:
            f.seek(seen)
            data = f.read(MAX_RESULTS_BYTES)
    except OSError:
        return [], seen
    end = data.rfind(b"\n") + 1
    events = []
    for line in data[:end].splitlines():
        try:
            event = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(event, dict) and isinstance(event.get("id"), str):
            events.append(event)
    return events, seen + end


def _one_runner(jobs: list[FunctionJob], blocked: dict[str, str], sandbox: Sandbox,
                folder: Path, results: dict[str, dict[str, Any]]) -> str | None:
    """Run `jobs` in one process until it ends; record results; return a failure, if any."""
    folder.mkdir(parents=True)
    if sandbox.user:                  # the submission's own account writes its results here
        os.chown(folder, sandbox.user[0], sandbox.user[1])
    with open(folder / runner.REQUEST, "wb") as f:
        pickle.dump({"jobs": [j.request() for j in jobs], "blocked": blocked}, f)
    errors = folder / "stderr.txt"
    with open(errors, "wb") as err:
        proc = subprocess.Popen(
            sandbox.command([sys.executable, "-m", "inferbook.grading.function_runner",
                             str(folder)]),
            cwd=sandbox.scratch, env=sandbox.env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    by_id = {j.id: j for j in jobs}
    seen, current, since, problem = 0, None, time.monotonic(), None
    while True:
        events, seen = _events(folder / runner.RESULTS, seen)
        for event in events:
            if event["id"] not in by_id or event["id"] in results:
                continue
            if event.get("event") == "start":
                current, since = event["id"], time.monotonic()
            elif event.get("event") == "result" and event["id"] == current:
                results[current], current, since = event, None, time.monotonic()
        if proc.poll() is not None:
            break
        limit = by_id[current].budget_s if current else START_LIMIT_S
        if time.monotonic() - since > limit:
            proc.kill()
            if current:
                results[current] = {"killed": f"ran past its time budget ({limit:.0f} s) "
                                              f"and was stopped"}
            else:
                problem = f"the function runner did not start a question within {limit:.0f} s"
            break
        time.sleep(0.05)
    status = proc.wait()
    if current and current not in results:
        results[current] = {"killed": f"ended the process running it (exit status {status}: "
                                      f"out of memory, or the code ended the process)"}
    if problem is None and not any(j.id in results for j in jobs):
        tail = errors.read_bytes()[-600:].decode("utf-8", "replace").strip().splitlines()
        problem = "the function runner failed: " + (tail[-1] if tail else f"exit {status}")
    return problem


def run_functions(jobs: list[FunctionJob], blocked: dict[str, str], sandbox: Sandbox,
                  reaper: ProcessReaper) -> dict[str, dict[str, Any]]:
    """Each job's outcome as the runner reported it; a job it never reached says why."""
    results: dict[str, dict[str, Any]] = {}
    pending, attempt = list(jobs), 0
    while pending:
        attempt += 1
        problem = _one_runner(pending, blocked, sandbox, sandbox.runtime / f"run{attempt}",
                              results)
        reaper.sweep()
        if problem is not None:
            for job in pending:
                results.setdefault(job.id, {"infrastructure": problem})
        pending = [j for j in pending if j.id not in results]
    return results
