"""The sealed grader's sandboxed process that runs a student's functions on hidden inputs.

    python -m inferbook.grading.function_runner FOLDER

The grader writes FOLDER/request.pkl: for each coding question of the notebook, the part of
the notebook that defines the answer (`slicing.AnswerProgram`), the inputs it drew for this
run, and the per-call time limit. This process — started in the same sandbox as the kernel,
the answer keys refused, and the library's own answers to these questions replaced by stubs
that raise (`sealed_guards.block_library_answers`) — runs each program in a fresh namespace, calls
the function on every input, and appends to FOLDER/results.jsonl one line when a question
starts and one with its outcomes: each output as plain data (`plain_answers.encode`), or the
error (with the student's line), or the time limit it ran past. The grader compares the
outputs with the references in its own process; nothing here ever sees a reference.

(The request is a pickle because it comes from the grader and holds the library's own
objects — model configs, chips, JAX arrays; the way back is JSON only.)
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import pickle
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "REQUEST", "RESULTS", "ABANDONED_EXIT"]

REQUEST, RESULTS = "request.pkl", "results.jsonl"
ABANDONED_EXIT = 3          # a call is still running in the background: start afresh


def _write(path: Path, event: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(event, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _program(job: dict[str, Any]) -> Any:
    """Run the answer's cells in a fresh namespace; return the value of the checked expression."""
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    for index, source in job["cells"]:
        filename = f"<cell {index + 1}>"
        lines = [line + "\n" for line in source.splitlines()]
        linecache.cache[filename] = (len(source), None, lines, filename)
        exec(compile(source, filename, "exec"), namespace)   # noqa: S102 - the sandbox's job
    return eval(compile(job["expression"], "<check>", "eval"), namespace)  # noqa: S307


def _run(job: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The outcomes of one question; True if a call was left running in the background."""
    # Imported here, after `main` has put the seal in place, like everything of the library.
    from .compare import as_numpy, describe, error_line
    from .plain_answers import encode
    from .timelimit import call_with_time_limit

    built = call_with_time_limit(_program, (job,), seconds=job["setup_limit_s"])
    if built.timed_out:
        return {"setup_timeout": job["setup_limit_s"]}, built.abandoned
    if built.error is not None:
        return {"setup_error": error_line(built.error)}, False
    fn = built.value
    if not callable(fn):
        return {"not_callable": describe(fn)}, False
    outcomes = []
    for args in job["cases"]:
        out = call_with_time_limit(lambda *a: as_numpy(fn(*a)), args,
                                   seconds=job["time_limit_s"])
        if out.timed_out:
            outcomes.append({"timed_out": True, "abandoned": out.abandoned})
            return {"outcomes": outcomes}, out.abandoned
        if out.error is not None:
            outcomes.append({"error": error_line(out.error),
                             "not_implemented": isinstance(out.error, NotImplementedError)})
            break
        try:
            value = encode(out.value)
            if len(json.dumps(value, allow_nan=False)) > 16 * 2**20:
                value = {"__unsupported__": "an output too large to send to the grader"}
        except Exception:  # noqa: BLE001 - whatever the student returned
            value = {"__unsupported__": "an output that cannot be sent to the grader"}
        outcomes.append({"value": value})
    return {"outcomes": outcomes}, False


def main(folder: str) -> int:
    from . import sealed_check, sealed_guards
    sealed_guards.guard_answer_keys()
    sealed_check.activate()                   # a check() left in the answer's cells does nothing
    import inferbook
    inferbook.setup()                    # before the request's JAX arrays start a backend
    folder_path = Path(folder)
    with open(folder_path / REQUEST, "rb") as f:
        request = pickle.load(f)
    sealed_guards.block_library_answers(request["blocked"])
    results = folder_path / RESULTS
    sys.stdout = open(os.devnull, "w")      # the student's prints go nowhere
    for job in request["jobs"]:
        _write(results, {"event": "start", "id": job["id"]})
        outcome, abandoned = _run(job)
        _write(results, {"event": "result", "id": job["id"], **outcome})
        if abandoned:
            os._exit(ABANDONED_EXIT)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
