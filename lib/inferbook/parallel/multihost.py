"""One process of a multi-controller JAX program: joining the job, the global mesh, local rows.

A TPU pod slice or a cluster of GPU servers runs JAX as one process per host. Every process
runs the same program on a mesh of *all* the job's devices, of which it addresses only its own
(`jax.local_devices()`). What changes against the one-process program is small and lives at
the edges:

  * **joining**: before any JAX work, each process calls `jax.distributed.initialize` with
    the coordinator's address (process 0 serves it), the number of processes and its own
    index; JAX then knows every process's devices (`jax.devices()` is the whole job's);
  * **inputs**: an array on the mesh is assembled from what each process holds. A process
    supplies only the rows its devices hold (`process_rows`, with
    `jax.make_array_from_process_local_data`), and reads only its blocks of each weight
    (`parallel.checkpoint_shards`, with `jax.make_array_from_callback`);
  * **output**: the sampled tokens come out of the program replicated (the all-gather is in
    the compiled program), so every process has them and process 0 alone prints.

Between those edges the program is `sharded_decode.generate`, unchanged: the same jitted
prefill and decode steps, compiled to the same collectives (chapter 10 compares the HLO of
one process and of two). On CPUs the processes' collectives go over gloo, which is how this
machine runs a two-process job on loopback; on a pod they go over ICI, NVLink and the
data-centre network, and the compiled program is the same.

A job must not hang when one of its processes dies. `join` refuses a coordinator it cannot
reach within the job's `timeout_s` (`JobError`, before JAX is touched) and gives JAX the same
limit for every process to join, and `heartbeat_s` as its heartbeat timeout: a process that
stops sending heartbeats for that long ends the job (JAX then aborts the surviving
processes, which `cli.launch` reports in one line).
"""

from __future__ import annotations

import errno
import math
import socket
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["JobError", "JobSpec", "parse_address", "wait_for_coordinator", "port_is_free",
           "free_port", "check_coordinator", "join", "global_mesh", "abstract_mesh",
           "process_rows", "is_primary", "addressable_bytes"]

MAX_PROCESSES = 4096         # more processes than any pod has hosts


class JobError(RuntimeError):
    """A multi-process job that cannot start or go on; the message is one line."""


@dataclass(frozen=True)
class JobSpec:
    """Where this process stands in the job: the coordinator's HOST:PORT, how many processes
    there are, this one's index, how long to wait for the others to join (`timeout_s`), and
    how long a process may stay silent before the job counts it dead (`heartbeat_s`)."""

    coordinator: str
    num_processes: int
    process_id: int
    timeout_s: float = 120.0
    heartbeat_s: float = 30.0

    def __post_init__(self) -> None:
        parse_address(self.coordinator)
        if not 1 <= self.num_processes <= MAX_PROCESSES:
            raise JobError(f"the number of processes must be 1 to {MAX_PROCESSES}, "
                           f"got {self.num_processes}")
        if not 0 <= self.process_id < self.num_processes:
            raise JobError(f"process id {self.process_id} is not one of the job's "
                           f"{self.num_processes} (0 to {self.num_processes - 1})")
        for what, seconds in (("timeout", self.timeout_s), ("heartbeat timeout",
                                                            self.heartbeat_s)):
            if not 0 < seconds < 1e6:
                raise JobError(f"the {what} must be a positive number of seconds below a "
                               f"million, got {seconds}")


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); '[::1]:PORT' for IPv6. JobError when malformed."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isascii() or not port.isdigit() \
            or not 0 < int(port) < 65536 or any(c.isspace() for c in host):
        raise JobError(f"coordinator address {text!r} is not HOST:PORT with a port from 1 "
                       "to 65535")
    return host, int(port)


def wait_for_coordinator(address: str, timeout_s: float) -> None:
    """Return once a TCP connection to `address` succeeds; JobError after `timeout_s`.

    The other hosts of a job may start before process 0 serves the coordinator, so a refused
    connection is tried again (every quarter second) until the time is up.
    """
    host, port = parse_address(address)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise JobError(f"cannot reach the coordinator {address} within {timeout_s:g} s "
                           f"({last}); is process 0 of the job running there?")
        try:
            with socket.create_connection((host, port), timeout=min(left, 2.0)):
                return
        except socket.gaierror as err:
            raise JobError(f"coordinator host {host!r} cannot be resolved: "
                           f"{err.strerror or err}") from None
        except OSError as err:
            last = err.strerror.lower() if err.strerror else type(err).__name__
        time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


def port_is_free(port: int) -> bool:
    """Whether this host can serve on `port` (what process 0's coordinator will do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("", port))
        except OSError as err:
            if err.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def free_port() -> int:
    """A loopback port nobody listens on now (for a job of local processes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_coordinator(job: JobSpec) -> None:
    """JobError unless the job can start from here: process 0 needs the coordinator's port
    free on this host (it will serve there), the others need the coordinator to answer
    within the job's timeout."""
    port = parse_address(job.coordinator)[1]
    if job.process_id == 0:
        if not port_is_free(port):
            raise JobError(f"port {port} is in use on this host: process 0 serves the "
                           "coordinator there; choose another port")
    else:
        wait_for_coordinator(job.coordinator, job.timeout_s)


def join(job: JobSpec, cpu_devices: int | None = None) -> None:
    """Make this process part of `job`. Call it before anything else touches JAX.

    `cpu_devices` CPU devices are this process's share of an emulated mesh (each process of
    a CPU job brings its own); on hosts with accelerators JAX finds them itself. CPU
    collectives go over gloo. Raises JobError when the coordinator cannot be reached, or,
    for process 0, when its port is taken.
    """
    check_coordinator(job)
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", cpu_devices)
    jax.distributed.initialize(job.coordinator, num_processes=job.num_processes,
                               process_id=job.process_id,
                               initialization_timeout=max(1, math.ceil(job.timeout_s)),
                               heartbeat_timeout_seconds=max(1, math.ceil(job.heartbeat_s)))


def global_mesh(shape: Sequence[int]) -> Any:
    """The named mesh (axes x, y, ...) over every device of the job, process 0's first: with
    one process per row of a 2x4 mesh, X crosses the processes and Y stays inside each."""
    import jax

    from inferbook.parallel.mesh import MeshError, named_mesh
    n = math.prod(shape)
    if n != jax.device_count():
        raise MeshError(f"a {'x'.join(map(str, shape))} mesh needs {n} devices; the job's "
                        f"{jax.process_count()} processes have {jax.device_count()} "
                        f"({jax.local_device_count()} each)")
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return named_mesh(shape, devices=devices)


def abstract_mesh(shape: Sequence[int]) -> Any:
    """A mesh of `shape` (axes x, y, ...) with no devices behind it: enough for a sharding
    plan (`make_plan`) to check a layout before the job, or any JAX backend, has started."""
    from jax.sharding import AbstractMesh, AxisType

    from inferbook.parallel.mesh import AXIS_NAMES
    return AbstractMesh(tuple(shape), AXIS_NAMES[:len(shape)],
                        axis_types=(AxisType.Auto,) * len(shape))


def process_rows(sharding: Any, rows: np.ndarray) -> Any:
    """The array `rows` [B, ...] placed as `sharding` says, from this process's rows only.

    A process supplies the rows its own devices hold (all of them where the sharding
    replicates the batch) and JAX assembles the global array: this is how each host of a
    pod feeds its share of the batch. Where a process's devices hold rows that are not one
    contiguous run, it supplies all of them, as every process does for replicated arrays.
    """
    import jax
    indices = sharding.addressable_devices_indices_map(rows.shape).values()
    spans = {_span(index[0] if index else slice(None), rows.shape[0]) for index in indices}
    lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
    covered = sum(b - a for a, b in spans)
    local = rows[lo:hi] if covered == hi - lo else rows
    return jax.make_array_from_process_local_data(sharding, np.ascontiguousarray(local),
                                                  rows.shape)


def _span(index: slice, size: int) -> tuple[int, int]:
    start, stop, _ = index.indices(size)
    return start, stop


def is_primary() -> bool:
    """True in process 0, the process that writes the job's output."""
    import jax
    return jax.process_index() == 0


def addressable_bytes(tree: Any) -> int:
    """Bytes of the arrays of `tree` that this process's devices hold (each device's block
    counted once per device that holds it)."""
    import jax
    return sum(s.data.nbytes for leaf in jax.tree.leaves(tree)
               for s in leaf.addressable_shards)
