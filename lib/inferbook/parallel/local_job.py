"""Processes of a job started and watched by one supervisor, which ends them all cleanly.

A multi-controller JAX job has no master: if one process dies, the others wait in their next
collective until JAX's heartbeat timeout, then abort with pages of C++ log. `run_workers`
starts the workers (one command per process, each handed its payload pickled on stdin),
passes process 0's output on, keeps the last lines of every worker's stderr, and watches
them: when one ends with an error the others are stopped at once (SIGTERM, then SIGKILL) and
reaped, and `failure_line` sums up the first failure in one line, naming the process and
why (its own one-line error, a signal, a lost peer, a job that never assembled, the last line
of a traceback). Each worker calls `die_with_parent` first, so that a killed supervisor
leaves no orphans. `inferbook generate --processes N` (`cli.launch`) and the book's
two-process demonstrations (`multihost_report`) both run their jobs through here.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Any, Sequence

__all__ = ["run_workers", "failure_line", "die_with_parent", "GRACE_S"]

GRACE_S = 3.0                 # between SIGTERM and SIGKILL for the survivors of a failed job
KEPT_LINES = 200              # of each worker's stderr, for the summary of a failure
FATAL = "Terminating process because the JAX distributed"   # JAX's abort on a lost peer


def die_with_parent() -> None:
    """Called first thing in a worker: be killed (SIGKILL) when the supervisor dies, through
    Linux's parent-death signal, so that no worker outlives its job; elsewhere a no-op. (Not
    a `preexec_fn`: forking a multithreaded JAX process to run Python code is unsafe.)"""
    parent = os.getppid()
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:          # the supervisor died before the signal was armed
        os._exit(1)


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", **(extra or {}))
    # Each worker sets its own device count; a forced count in XLA_FLAGS would fight it.
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "",
                   env.get("XLA_FLAGS", "")).strip()
    env["XLA_FLAGS"] = flags
    return env


def _drain(stream: Any, sink: Any, kept: deque) -> None:
    for line in iter(stream.readline, b""):
        text = line.decode(errors="replace")
        if sink is not None:
            sink.write(text)
            sink.flush()
        else:
            kept.append(text.rstrip("\n"))
    stream.close()


def run_workers(command: Sequence[str], payloads: Sequence[Any], ids: Sequence[int],
                num_processes: int, *, prefix: str = "error: ",
                env: dict[str, str] | None = None, stdout: Any = None,
                timeout_s: float | None = None, poll_s: float = 0.05) -> tuple[int, str]:
    """Run `command` once per payload (pickled to its stdin) until all end: (0, '') when
    every worker succeeds, else (exit code, one line about the first that failed, starting
    with `prefix`), the others stopped. The worker with id 0 writes to `stdout` (default
    ours); `env` adds to the workers' environment; `timeout_s` is the job's joining time,
    for the message."""
    sink = sys.stdout if stdout is None else stdout
    procs, threads, errors = [], [], []
    try:
        for payload, i in zip(payloads, ids):
            p = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=_environment(env))
            kept: deque = deque(maxlen=KEPT_LINES)
            for stream, out in ((p.stdout, sink if i == 0 else None), (p.stderr, None)):
                t = threading.Thread(target=_drain, args=(stream, out, kept), daemon=True)
                t.start()
                threads.append(t)
            p.stdin.write(pickle.dumps(payload))
            p.stdin.close()
            procs.append(p)
            errors.append(kept)
        failed = None
        while failed is None and any(p.poll() is None for p in procs):
            failed = next((k for k, p in enumerate(procs) if p.poll() not in (None, 0)), None)
            time.sleep(poll_s)
        if failed is None:
            failed = next((k for k, p in enumerate(procs) if p.returncode != 0), None)
        _stop(procs)
        for t in threads:
            t.join(timeout=5)
        if failed is None:
            return 0, ""
        return failure_line(ids[failed], num_processes, procs[failed].returncode,
                            list(errors[failed]), timeout_s, prefix)
    except BaseException:
        _stop(procs)
        raise


def _stop(procs: list) -> None:
    """End every worker still running: SIGTERM, then SIGKILL after GRACE_S; reap them all."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def failure_line(i: int, n: int, returncode: int, stderr: list[str],
                 timeout_s: float | None = None, prefix: str = "error: ") -> tuple[int, str]:
    """(exit code, one line starting with `prefix`) for worker `i` of `n` that ended with
    `returncode`, from the last lines it wrote to stderr: a line of its own that starts with
    `prefix` (its refusal of bad input, exit code 2) is passed on as it is."""
    who = f"process {i} of {n}"
    errors = [line for line in stderr if line.startswith(prefix)]
    if errors:                                   # the worker's own one-line refusal
        return (2 if returncode == 2 else 1), errors[-1]
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() \
            else f"signal {-returncode}"
        if not any(FATAL in s for s in stderr):
            return 1, f"{prefix}{who} was killed by {name}; the job's other processes " \
                      "were stopped"
    text = "\n".join(stderr)
    if FATAL in text:
        if "DEADLINE_EXCEEDED" in text and ("RegisterTask" in text or "barrier" in text.lower()):
            waited = f" within {timeout_s:g} s" if timeout_s else ""
            return 1, (f"{prefix}{who}: the job's processes did not all join{waited} "
                       "(is every --process-id of the job running?)")
        return 1, (f"{prefix}{who} lost the job: another process stopped sending heartbeats "
                   "(it died or hangs) or the coordinator went away")
    lines = [s.strip() for s in stderr if s.strip() and not s.startswith(("    ", "  File "))]
    last = lines[-1] if lines else f"exit code {returncode}"
    return 1, f"{prefix}{who} failed: {last[:300]}"
