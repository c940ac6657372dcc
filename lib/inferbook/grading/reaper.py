"""Ending every process a submission started, even those that tried to get away.

A notebook can start processes that outlive its kernel: `subprocess.Popen(...,
start_new_session=True)`, or a double fork that leaves an orphan in a session of its own —
the "detached process" that rewrote results.json after an older grader had exited. Killing
the kernel's process group does not reach those.

`ProcessReaper` makes the grader a *child subreaper* (Linux's PR_SET_CHILD_SUBREAPER) for as
long as it is used: an orphan among its descendants is then re-parented to the grader rather
than to init, so it stays a descendant however it detached itself. `sweep()` walks /proc for
every descendant that was not there when the reaper started, kills it, and reaps the ones
that became the grader's children. The grader sweeps after each kernel it stops and before
it writes any result. (Under bubblewrap the PID namespace already ends them all; the sweep
costs nothing there and covers the fallback.)
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path

__all__ = ["ProcessReaper", "descendants"]

PR_SET_CHILD_SUBREAPER = 36


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a process, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()      # the name may hold spaces and ')'
    return int(fields[1]), int(fields[19])


def descendants(root: int) -> set[tuple[int, int]]:
    """Every process below `root`, as (pid, start time) so a reused pid is not mistaken."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(int(entry))) is not None:
            children.setdefault(info[0], []).append((int(entry), info[1]))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child[0])
    return found


def _set_subreaper(on: bool) -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on)) == 0
    except (OSError, AttributeError):
        return False


class ProcessReaper:
    """`with ProcessReaper() as reaper: ...; reaper.sweep()` — see the module doc."""

    def __init__(self) -> None:
        self.linux = os.path.isdir("/proc/self")
        self.before: set[tuple[int, int]] = set()
        self.subreaper = False

    def __enter__(self) -> "ProcessReaper":
        if self.linux:
            self.subreaper = _set_subreaper(True)
            self.before = descendants(os.getpid())
        return self

    def __exit__(self, *exc) -> None:
        self.sweep()
        if self.subreaper:
            _set_subreaper(False)

    def sweep(self, rounds: int = 20) -> int:
        """Kill every process started since the reaper began; the number killed."""
        if not self.linux:
            return 0
        killed = 0
        for _ in range(rounds):          # a process may fork while we kill its parent
            new = descendants(os.getpid()) - self.before
            if not new:
                break
            for pid, _start in new:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
            time.sleep(0.02)
            self._reap(new)
        return killed

    def _reap(self, processes: set[tuple[int, int]]) -> None:
        """Collect the exit status of the killed processes that are now our children."""
        me = os.getpid()
        for pid, _start in processes:
            info = _stat(pid)
            if info is not None and info[0] == me:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
