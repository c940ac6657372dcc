"""Running `inferbook generate` as a multi-process JAX job, and ending it cleanly when it fails.

Two ways in, both with --mesh:

    inferbook generate ... --mesh 2x4 --layout 2d-ws --processes 2
        starts 2 processes on this machine, each with 4 CPU devices, a coordinator on a free
        loopback port and gloo collectives between them: the pod's program, on one host;

    inferbook generate ... --mesh 2x4 --layout 2d-ws \\
        --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0
        runs process 0 of a real multi-host job; each host types the same line with its own
        --process-id (process 0's host serves the coordinator at the address).

Either way this process only supervises: it starts the worker processes
(`cli.multihost_generate`, which run `parallel.multihost` and `sharded_decode.generate`), hands
each its arguments, passes process 0's output through (the only process that prints), and
watches them. A process that ends with an error ends the job: the others are stopped at once
(SIGTERM, then SIGKILL), and one line says which process failed and why, as the rest of the
command line does (exit code 2 for bad input, 1 for a job that broke). A JAX process whose
peer dies aborts itself after the heartbeat timeout with pages of C++ log; that log stays
here, summarised. Workers die with this process (`die_with_parent`, Linux's parent-death
signal), so a killed supervisor leaves no orphans.
"""

from __future__ import annotations

import argparse
import copy
import math
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

from . import UsageError
from . import args as types

__all__ = ["add_job_arguments", "requested", "run", "run_workers", "failure_line",
           "die_with_parent", "DEFAULT_TIMEOUT_S", "DEFAULT_HEARTBEAT_S", "WORKER"]

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_HEARTBEAT_S = 30.0
WORKER = [sys.executable, "-u", "-m", "inferbook.cli.multihost_generate"]
GRACE_S = 3.0                 # between SIGTERM and SIGKILL for the survivors of a failed job
KEPT_LINES = 200              # of each worker's stderr, for the summary of a failure


def add_job_arguments(p: argparse.ArgumentParser) -> None:
    """The multi-process flags of `inferbook generate`."""
    job = p.add_mutually_exclusive_group()
    job.add_argument("--processes", type=types.integer(1, 64), metavar="N",
                     help="with --mesh: run as N local processes (JAX multi-controller, CPU "
                          "devices split evenly, gloo collectives on loopback)")
    job.add_argument("--coordinator", metavar="HOST:PORT",
                     help="with --mesh: run one process of a multi-host job whose process 0 "
                          "serves the coordinator at HOST:PORT")
    p.add_argument("--num-processes", type=types.integer(1, 4096), metavar="N",
                   help="with --coordinator: processes in the job")
    p.add_argument("--process-id", type=types.nonnegative_int(), metavar="I",
                   help="with --coordinator: this process's index, 0 to N-1")
    p.add_argument("--timeout", type=types.finite_float(0.0, above=True), metavar="S",
                   default=DEFAULT_TIMEOUT_S,
                   help="seconds to wait for every process of the job to join "
                        f"(default {DEFAULT_TIMEOUT_S:g})")
    p.add_argument("--heartbeat-timeout", type=types.finite_float(0.0, above=True),
                   metavar="S", default=DEFAULT_HEARTBEAT_S,
                   help="seconds a process may go silent before the job counts it dead and "
                        f"ends (default {DEFAULT_HEARTBEAT_S:g})")


def requested(args: argparse.Namespace) -> bool:
    """Whether the arguments ask for a multi-process job (checked by `run`)."""
    return any(getattr(args, k, None) is not None
               for k in ("processes", "coordinator", "num_processes", "process_id"))


def _job_payloads(args: argparse.Namespace) -> list[argparse.Namespace]:
    from inferbook.parallel.mesh import MeshError, parse_mesh_shape
    from inferbook.parallel.multihost import JobError, JobSpec, free_port
    if args.mesh is None:
        raise UsageError("--processes and --coordinator need --mesh (the job's whole mesh)")
    if args.coordinator is None and (args.num_processes is not None
                                     or args.process_id is not None):
        raise UsageError("--num-processes and --process-id go with --coordinator HOST:PORT")
    if args.coordinator is not None and (args.num_processes is None or args.process_id is None):
        raise UsageError("--coordinator needs --num-processes N and --process-id I")
    try:
        devices = math.prod(parse_mesh_shape(args.mesh))
    except MeshError as err:
        raise UsageError(f"--mesh {args.mesh}: {err}") from None
    n = args.processes or args.num_processes
    if devices % n:
        raise UsageError(f"--mesh {args.mesh}: {devices} devices do not split evenly over "
                         f"{n} processes")
    coordinator = args.coordinator or f"127.0.0.1:{free_port()}"
    ids = range(n) if args.processes else [args.process_id]
    payloads = []
    for i in ids:
        try:
            spec = JobSpec(coordinator, n, i, args.timeout, args.heartbeat_timeout)
        except JobError as err:
            raise UsageError(str(err)) from None
        worker = copy.copy(args)
        worker.job, worker.cpu_devices = spec, devices // n
        payloads.append(worker)
    return payloads


def run(args: argparse.Namespace) -> int:
    """`inferbook generate` as a job: start the workers, relay process 0, report a failure."""
    payloads = _job_payloads(args)
    _check_inputs(args)
    if args.coordinator is not None:     # refuse an unreachable coordinator before starting
        _check_coordinator(payloads[0].job)
    code, line = run_workers(WORKER, payloads, [p.job.process_id for p in payloads],
                             payloads[0].job.num_processes)
    if line:
        sys.stderr.write(line + "\n")
    return code


def _check_inputs(args: argparse.Namespace) -> None:
    """Refuse bad input once, here, before any worker starts (each would refuse it alike):
    the model, the prompts and the layout on a mesh of the job's shape without devices."""
    from inferbook.model.config import ConfigError
    from inferbook.parallel.mesh import parse_mesh_shape
    from inferbook.parallel.multihost import abstract_mesh
    from inferbook.parallel.sharding import LayoutError

    from .multihost_generate import checked_inputs
    try:
        checked_inputs(args, abstract_mesh(parse_mesh_shape(args.mesh)))
    except (LayoutError, ConfigError) as err:
        raise UsageError(str(err)) from None


def _check_coordinator(job: Any) -> None:
    """`multihost.check_coordinator` here too, so that a wrong address is refused without
    waiting for a worker to start."""
    from inferbook.parallel.multihost import JobError, check_coordinator
    try:
        check_coordinator(job)
    except JobError as err:
        raise UsageError(str(err)) from None


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


def _environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
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
                num_processes: int, poll_s: float = 0.05) -> tuple[int, str]:
    """Run `command` once per payload (pickled to its stdin) until all end: (exit code, '')
    when every worker succeeds, else (code, one line about the first that failed), the
    others stopped. The worker with id 0 has its stdout passed through to ours."""
    procs, threads, errors = [], [], []
    try:
        for payload, i in zip(payloads, ids):
            p = subprocess.Popen(list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=_environment())
            kept: deque = deque(maxlen=KEPT_LINES)
            for stream, sink in ((p.stdout, sys.stdout if i == 0 else None), (p.stderr, None)):
                t = threading.Thread(target=_drain, args=(stream, sink, kept), daemon=True)
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
                            list(errors[failed]), getattr(payloads[failed], "timeout", None))
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
                 timeout_s: float | None = None) -> tuple[int, str]:
    """(exit code, one line) for worker `i` of `n` that ended with `returncode`, from the
    last lines it wrote to stderr."""
    who = f"process {i} of {n}"
    errors = [line for line in stderr if re.match(r"inferbook [a-z-]+: error: ", line)]
    if errors:                                   # the worker's own one-line refusal
        return (2 if returncode == 2 else 1), errors[-1]
    prefix = "inferbook generate: error: "
    if returncode < 0:
        name = signal.Signals(-returncode).name if -returncode in signal.valid_signals() \
            else f"signal {-returncode}"
        if not any("Terminating process because the JAX distributed" in s for s in stderr):
            return 1, f"{prefix}{who} was killed by {name}; the job's other processes " \
                      "were stopped"
    text = "\n".join(stderr)
    if "Terminating process because the JAX distributed" in text:
        if "DEADLINE_EXCEEDED" in text and ("RegisterTask" in text or "barrier" in text.lower()):
            waited = f" within {timeout_s:g} s" if timeout_s else ""
            return 1, (f"{prefix}{who}: the job's processes did not all join{waited} "
                       "(is every --process-id of the job running?)")
        return 1, (f"{prefix}{who} lost the job: another process stopped sending heartbeats "
                   "(it died or hangs) or the coordinator went away")
    lines = [s.strip() for s in stderr if s.strip() and not s.startswith(("    ", "  File "))]
    last = lines[-1] if lines else f"exit code {returncode}"
    return 1, f"{prefix}{who} failed: {last[:300]}"
