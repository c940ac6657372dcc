"""One Jupyter kernel in a sandbox: start it, run a cell with a time limit, stop it.

The grader talks to the kernel the way Jupyter does (jupyter_client), over Unix sockets in
the runtime folder rather than TCP — under bubblewrap the kernel has no network at all. The
kernel is this module's `main` (ipykernel, sealed or not) started through `Sandbox.command`.

`execute(code, limit_s)` returns a `CellOutcome`: the cell finished (with or without an
error), ran past its limit, or the kernel died under it. Past the limit the kernel is sent
an interrupt request (a KeyboardInterrupt in the cell, as Jupyter's "stop" button); if the
cell has not stopped a few seconds later — it ignores SIGINT, or is stuck inside XLA — the
outcome says so and the caller restarts the kernel. While a cell runs, its output is read and
dropped — all but its errors and the answers a sealed `check` sends (`sealed_check.MIME`).

The kernel's side, ``python -m inferbook.grading.sandboxed_kernel [--sealed] -f CONNECTION``
in the sandbox: with ``--sealed`` the answer keys are refused before any of the student's
code runs (`sealed_guards.guard_answer_keys`; the sandbox also hides their files where it
can) and `check` records answers for the grader instead of grading them
(`sealed_check.activate`). Then it is an ordinary IPython kernel:
the notebook sees nothing else different.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from . import sealed_check, sealed_guards
from .sandbox import Sandbox
from .sealed_check import MIME

__all__ = ["CellOutcome", "Kernel", "KernelStartError", "INTERRUPT_GRACE_S", "main"]

INTERRUPT_GRACE_S = 5.0         # how long an interrupted cell gets to stop
START_TIMEOUT_S = 120.0
MAX_ANSWERS = 10_000            # per run: a notebook that floods the grader with answers


class KernelStartError(RuntimeError):
    """No kernel could be started (a broken installation, not the submission's fault)."""


@dataclass
class CellOutcome:
    """What happened to one cell."""

    status: str                   # ok | error | timeout (interrupted) | stuck | died
    error: str = ""               # "NameError: name 'x' is not defined", for status error
    ename: str = ""
    answers: list[Any] = field(default_factory=list)     # sealed check() messages, in order
    seconds: float = 0.0


class Kernel:
    """A sandboxed IPython kernel (`with Kernel(sandbox, sealed) as k: k.execute(...)`)."""

    def __init__(self, sandbox: Sandbox, sealed: bool, env: dict[str, str]) -> None:
        self.sandbox, self.sealed, self.env = sandbox, sealed, env
        self.km = self.kc = None
        self.starts = self.answers_seen = 0

    def __enter__(self) -> "Kernel":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        # Jupyter's client is an optional dependency: `inferbook grade` checks it is there.
        from jupyter_client import KernelManager
        from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

        self.starts += 1
        boot = [sys.executable, "-m", "inferbook.grading.sandboxed_kernel",
                *(["--sealed"] if self.sealed else []), "-f", "{connection_file}"]
        spec = KernelSpec(argv=self.sandbox.command(boot), display_name="inferbook grader",
                          language="python", interrupt_mode="message", env={})

        class OneSpec(KernelSpecManager):
            def get_kernel_spec(self, kernel_name: str) -> KernelSpec:
                return spec

        run = self.sandbox.runtime
        self.km = KernelManager(kernel_name="inferbook", kernel_spec_manager=OneSpec(),
                                transport="ipc", ip=str(run / f"k{self.starts}"),
                                connection_file=str(run / f"kernel{self.starts}.json"))
        log = run / f"kernel{self.starts}.stderr"      # read only if the start fails
        try:
            if self.sandbox.user:        # the kernel's account must read its connection file
                self.km.write_connection_file()
                os.chown(self.km.connection_file, *self.sandbox.user[:2])
            with open(log, "wb") as stderr:
                self.km.start_kernel(env=self.env, cwd=str(self.sandbox.scratch),
                                     stdout=subprocess.DEVNULL, stderr=stderr)
            self.kc = self.km.client()
            self.kc.start_channels()
            self.kc.wait_for_ready(timeout=START_TIMEOUT_S)
        except Exception as err:  # noqa: BLE001 - whatever broke, it was not the student
            self.stop()
            tail = log.read_bytes()[-400:].decode("utf-8", "replace").strip().splitlines()
            raise KernelStartError(f"{type(err).__name__}: {err}".strip()
                                   + (f" ({tail[-1]})" if tail else "")) from None

    def stop(self) -> None:
        """Stop the kernel at once (the sandbox and the reaper end what it started)."""
        if self.kc is not None:
            self.kc.stop_channels()
            self.kc = None
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - it is already gone
                pass
            try:
                self.km.cleanup_resources()
            except Exception:  # noqa: BLE001
                pass
            self.km = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def alive(self) -> bool:
        try:
            return self.km is not None and bool(self.km.is_alive())
        except Exception:  # noqa: BLE001
            return False

    def execute(self, code: str, limit_s: float) -> CellOutcome:
        """Run one cell; never raises. The caller restarts the kernel after stuck or died."""
        start = time.monotonic()
        out = CellOutcome("ok")
        msg_id = self.kc.execute(code, store_history=False, allow_stdin=False,
                                 stop_on_error=False)
        deadline, interrupted, last_alive_check = start + limit_s, False, start
        while True:
            now = time.monotonic()
            if now >= deadline:
                if interrupted:
                    out.status = "stuck"
                    break
                try:
                    self.km.interrupt_kernel()
                except Exception:  # noqa: BLE001 - a dead kernel is found below
                    pass
                interrupted, deadline = True, now + INTERRUPT_GRACE_S
                continue
            if now - last_alive_check > 1.0:
                last_alive_check = now
                if not self.alive():
                    out.status = "died"
                    break
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.01, min(0.5, deadline - now)))
            except queue.Empty:
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "display_data" and MIME in content.get("data", {}):
                if self.answers_seen < MAX_ANSWERS:      # gets no more of our memory
                    out.answers.append(content["data"][MIME])
                self.answers_seen += 1
            elif kind == "error":
                out.ename = str(content.get("ename", "Error"))
                value = str(content.get("evalue", "")).strip().splitlines()
                out.error = out.ename + (f": {value[0][:200]}" if value else "")
            elif kind == "status" and content.get("execution_state") == "idle":
                if interrupted:
                    out.status = "timeout"
                elif out.error:
                    out.status = "error"
                break
        self._drain_shell()
        out.seconds = time.monotonic() - start
        return out

    def _drain_shell(self) -> None:
        """Drop the shell channel's replies (we read the outcome from the output channel)."""
        try:
            while True:
                self.kc.get_shell_msg(timeout=0)
        except (queue.Empty, Exception):  # noqa: BLE001
            pass


def main(argv: list[str]) -> None:
    """The kernel's side (see the module doc)."""
    sealed = "--sealed" in argv
    argv = [a for a in argv if a != "--sealed"]
    if sealed:
        sealed_guards.guard_answer_keys()
        sealed_check.activate()
    # ipykernel ends itself when its parent changes; inside a PID namespace the grader's pid
    # means nothing, and the sandbox's launcher already ends the kernel with the grader.
    os.environ.pop("JPY_PARENT_PID", None)
    from ipykernel import kernelapp
    sys.argv = [sys.argv[0], *argv]
    kernelapp.launch_new_instance()


if __name__ == "__main__":
    main(sys.argv[1:])
