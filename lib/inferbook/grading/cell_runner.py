"""Running a notebook's cells in a sandboxed kernel, whatever they do.

`run_cells` runs every code cell in order, each with its own time limit and all of them
within the notebook's, and turns whatever happens into a line of the report:

- an error in a cell is noted (the questions whose check sits in that cell fail with it);
  later cells still run;
- a cell past its limit is interrupted, as Jupyter's stop button does, and noted the same
  way; the kernel keeps what the cell did before it was stopped;
- a cell that cannot be interrupted (it ignores SIGINT, or is stuck inside XLA) or that kills
  its kernel (out of memory, ``os._exit``, a signal) costs that cell only: the kernel is
  restarted, the cells that had completed are run again to rebuild its state, and grading
  goes on with the next cell. If the state cannot be rebuilt, the run stops there;
- past the notebook's limit the run stops; questions never reached are "not run".

A sealed kernel's recorded answers are collected per cell (the answers a cell sends while
its earlier cells are replayed are ignored: the first run is the one graded).
"""

from __future__ import annotations

import time
from typing import Any

from .reaper import ProcessReaper
from .report import Run
from .sandboxed_kernel import INTERRUPT_GRACE_S, Kernel, KernelStartError

__all__ = ["run_cells", "where"]


def where(nb: Any, index: int) -> str:
    """'cell 7 (`check("ch01.x", ...)`)': notebooks show no cell numbers, so quote the cell."""
    first = next((line.strip() for line in nb.cells[index].source.splitlines() if line.strip()),
                 "")
    return f"cell {index + 1} (`{first[:60]}{'…' if len(first) > 60 else ''}`)"


def _replay(kernel: Kernel, nb: Any, done: list[int], cell_limit_s: float,
            deadline: float) -> str | None:
    """Restart the kernel and run the completed cells again; None, or why it failed."""
    try:
        kernel.restart()
    except KernelStartError as err:
        return f"the kernel could not be restarted ({err})"
    for index in done:
        left = deadline - time.monotonic()
        if left <= 0:
            return "the notebook ran out of time while its earlier cells ran again"
        out = kernel.execute(nb.cells[index].source, min(cell_limit_s, left))
        if out.status not in ("ok", "error"):
            return f"{where(nb, index)} did not run again ({out.status})"
    return None


def run_cells(nb: Any, kernel: Kernel, reaper: ProcessReaper, cell_limit_s: float,
              total_limit_s: float) -> Run:
    """Execute the notebook's code cells in `kernel` (started here, stopped here); never raises."""
    run = Run(isolation=kernel.sandbox.isolation)
    start = time.monotonic()
    try:
        kernel.start()
    except KernelStartError as err:
        run.stopped = f"the grader could not start a kernel: {err}"
        run.infrastructure_error = True
        run.seconds = time.monotonic() - start
        return run
    deadline = time.monotonic() + total_limit_s       # the kernel has started
    done: list[int] = []
    try:
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or not cell.source.strip():
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                run.stopped = (f"the notebook ran out of time ({total_limit_s:g} s) before "
                               f"{where(nb, index)}")
                break
            per_cell = left > cell_limit_s
            out = kernel.execute(cell.source, min(cell_limit_s, left))
            run.answers += [(index, answer) for answer in out.answers]
            if out.status == "ok":
                done.append(index)
                continue
            if out.status == "error":
                done.append(index)
                run.cell_errors[index] = f"{where(nb, index)} raised {out.error}"
                if out.ename == "SealedError":
                    run.sealed_refusals.add(index)
                continue
            if not per_cell and out.status != "died":
                run.stopped = (f"the notebook ran out of time ({total_limit_s:g} s) in "
                               f"{where(nb, index)}")
                run.cell_errors[index] = run.stopped
                break
            run.cell_errors[index] = {
                "timeout": f"{where(nb, index)} ran past the per-cell time limit "
                           f"({cell_limit_s:g} s) and was interrupted",
                "stuck": f"{where(nb, index)} ran past the per-cell time limit "
                         f"({cell_limit_s:g} s) and did not stop when interrupted "
                         f"({INTERRUPT_GRACE_S:g} s); the kernel was restarted",
                "died": f"the kernel died in {where(nb, index)} (out of memory, or the code "
                        f"ended the process); it was restarted",
            }[out.status]
            if out.status in ("stuck", "died"):
                run.restarts += 1
                kernel.stop()
                reaper.sweep()
                problem = _replay(kernel, nb, done, cell_limit_s, deadline)
                if problem:
                    run.stopped = f"after {where(nb, index)}, {problem}"
                    break
    finally:
        kernel.stop()
        reaper.sweep()
        run.seconds = time.monotonic() - start
    return run
