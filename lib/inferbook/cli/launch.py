"""Running `inferbook generate` as a multi-process JAX job, and ending it cleanly when it fails.

Two ways in, both with --mesh:

    inferbook generate ... --mesh 2x4 --layout 2d-ws --processes 2
        starts 2 processes on this machine, each with 4 CPU devices, a coordinator on a free
        loopback port and gloo collectives between them: the pod's program, on one host;

    inferbook generate ... --mesh 2x4 --layout 2d-ws \\
        --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0
        runs process 0 of a real multi-host job; each host types the same line with its own
        --process-id (process 0's host serves the coordinator at the address).

Either way this process only supervises (`parallel.local_job.run_workers`): it refuses bad
input before anything starts, starts the worker processes (`cli.multihost_generate`, which
run `parallel.multihost` and `sharded_decode.generate`), hands each its arguments, passes
process 0's output through (the only process that prints), and watches them. A process that
ends with an error ends the job: the others are stopped at once, and one line says which
process failed and why, as the rest of the command line does (exit code 2 for bad input, 1
for a job that broke). With --processes the workers use CPU devices only
(``JAX_PLATFORMS=cpu``): the local job emulates the pod, whatever accelerator this host has.
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
from typing import Any

from . import UsageError
from . import args as types

__all__ = ["add_job_arguments", "requested", "run", "DEFAULT_TIMEOUT_S", "DEFAULT_HEARTBEAT_S",
           "WORKER", "ERROR"]

DEFAULT_TIMEOUT_S = 120.0
DEFAULT_HEARTBEAT_S = 30.0
WORKER = [sys.executable, "-u", "-m", "inferbook.cli.multihost_generate"]
ERROR = "inferbook generate: error: "      # how the command, and each worker, says what failed


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
    from inferbook.parallel.local_job import run_workers
    code, line = run_workers(WORKER, payloads, [p.job.process_id for p in payloads],
                             payloads[0].job.num_processes, prefix=ERROR,
                             env={"JAX_PLATFORMS": "cpu"} if args.processes else None,
                             timeout_s=args.timeout)
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
