"""The read roof W: the fastest any program of ours has read this device's memory.

MBU divides what a step achieved by the bandwidth the memory can deliver. If that bandwidth is
measured badly — a read that happens to run on one core, a moment when another program took
the memory — the step looks better than it is, and an MBU above 100% is the tell: a "roof"
the step itself beat is no roof. So the roof here is the best of several read kernels, each
the fastest of several runs after a warm-up (other work can only slow a run down):

* XLA reduction — `jnp.sum` over a large float32 array: reads every byte once, writes one
  number. XLA:CPU may run it on one thread;
* XLA copy — an array of the same size scaled by one in place: it reads every byte and writes
  it back, and counts the bytes it reads (the roof is for reads: a decode step reads its
  weights and caches and writes almost nothing);
* weight streaming — [1, D]·[D, F] products over distinct matrices: what a decode step's
  weight reads are, and on some CPUs the only one of XLA's kernels that uses every core;
* host threads (CPU only) — numpy taking the maximum of one slice of the array per core, in
  threads (numpy releases Python's lock while it reduces): the read a C programmer would
  write.

`ReadRoof` keeps each kernel's best rate, and merges with later measurements (`inferbook
bench` reads again beside every configuration) and with any program known to be
memory-bound (`with_program`: the decode step itself). Its `best` is then, by construction,
at least what every one of those achieved: MBU against it cannot exceed 100%.

A best run is also the one most likely to have caught the memory at a lucky moment (on some
machines it is briefly faster than usual). `measure_beside` times a program in turns with the
read kernels and keeps, besides the roof, each kernel's median run from the same rounds as
the program's median: a like-for-like rate that moves with whatever the machine is doing.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.perf.timing import Timing, time_alternating

__all__ = ["Read", "read_programs", "ReadRoof", "best_rates", "best_and_median_rates",
           "measure_read_roof", "host_threads", "ReadsBeside", "measure_beside"]


@dataclass(frozen=True)
class Read:
    """A program that moves `nbytes` of memory per call (a zero-argument function)."""

    name: str
    run: Callable[[], Any]
    nbytes: int


def host_threads() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                 # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def _host_read(array: np.ndarray, threads: int) -> Callable[[], Any]:
    """The largest element of `array`, in `threads` slices at once, one thread per slice (a
    maximum vectorises to pure loads; numpy's sum adds pairwise and runs slower)."""
    slices = np.array_split(array, threads)
    pool = ThreadPoolExecutor(threads, thread_name_prefix="inferbook-read")
    return lambda: max(pool.map(np.maximum.reduce, slices))


def _in_place_copy(nbytes: int) -> Callable[[], Any]:
    """Scale a float32 array of `nbytes` by one into its own buffer (donated, so XLA writes
    in place): a read and a write of every byte, and no fresh memory to fault in per call."""
    scale = jax.jit(lambda x, s: x * s, donate_argnums=0)
    state = {"x": jnp.ones((nbytes // 4,), jnp.float32)}
    one = jnp.ones((), jnp.float32)          # an argument, so XLA cannot skip the work

    def run():
        state["x"] = scale(state["x"], one)
        return state["x"]
    return run


def read_programs(nbytes: int, D: int = 1024, F: int = 4096, host: bool | None = None,
                  copy: bool = True) -> list[Read]:
    """The read kernels over about `nbytes` of float32: reduction, copy, weight streaming
    (distinct [D, F] matrices of about nbytes / 2 together, at least one) and, with `host`
    (default: on a CPU), the threaded host read. `copy=False` leaves out the copy, which
    holds an array of its own."""
    host = jax.devices()[0].platform == "cpu" if host is None else host
    x = jnp.ones((nbytes // 4,), jnp.float32)
    total = jax.jit(jnp.sum)
    n = max(1, nbytes // 2 // (D * F * 4))
    ws = [jnp.full((D, F), i, jnp.float32) for i in range(n)]
    v = jnp.ones((1, D), jnp.float32)
    products = jax.jit(lambda v, ws: [v @ w for w in ws])
    reads = [Read("XLA reduction", lambda: total(x), x.nbytes)]
    if copy:
        reads.append(Read("XLA copy", _in_place_copy(x.nbytes), x.nbytes))
    reads.append(Read("weight streaming", lambda: products(v, ws), n * D * F * 4))
    if host:
        reads.append(Read("host threads", _host_read(np.asarray(x), host_threads()), x.nbytes))
    return reads


@dataclass(frozen=True)
class ReadRoof:
    """The best rate (bytes per second) each read kernel, or program, has reached."""

    rates: dict[str, float] = field(default_factory=dict)

    @property
    def best(self) -> float:
        """W: the fastest read seen; 0.0 before anything was measured."""
        return max(self.rates.values(), default=0.0)

    @property
    def kernel(self) -> str | None:
        """The name of the kernel (or program) that set `best`."""
        return max(self.rates, key=self.rates.get) if self.rates else None

    def merge(self, other: "ReadRoof") -> "ReadRoof":
        """Each kernel's best over both measurements."""
        names = self.rates.keys() | other.rates.keys()
        return ReadRoof({k: max(self.rates.get(k, 0.0), other.rates.get(k, 0.0))
                         for k in sorted(names)})

    def with_program(self, name: str, bytes_per_s: float) -> "ReadRoof":
        """The roof raised, if need be, to what a memory-bound program achieved: a roof the
        program beat was not one."""
        return self.merge(ReadRoof({name: bytes_per_s}))

    def as_record(self) -> dict[str, Any]:
        """The fields `inferbook bench` saves."""
        return {"read_bytes_per_s": self.best, "read_kernel": self.kernel,
                "read_kernels": dict(self.rates)}


def best_rates(reads: Sequence[Read], seconds: Sequence[float]) -> ReadRoof:
    """The roof from each read's best time (seconds per call, in `reads`' order)."""
    return ReadRoof({read.name: read.nbytes / t for read, t in zip(reads, seconds)})


def best_and_median_rates(reads: Sequence[Read],
                          timings: Sequence[Timing]) -> tuple[ReadRoof, ReadRoof]:
    """Each read's rate at its fastest call (the roof) and at its median call (what the
    memory typically delivered over the same rounds), from its `Timing` (in `reads`' order)."""
    return (best_rates(reads, [t.min_s for t in timings]),
            best_rates(reads, [t.median_s for t in timings]))


def measure_read_roof(nbytes: int = 1 << 28, repeats: int = 6, warmup: int = 2,
                      reads: Sequence[Read] | None = None) -> ReadRoof:
    """Every read kernel, in alternation: the fastest of `repeats` runs of each after
    compilation and `warmup` untimed rounds."""
    reads = read_programs(nbytes) if reads is None else reads
    timings = time_alternating([read.run for read in reads], repeats, warmup=warmup)
    return best_rates(reads, [t.min_s for t in timings])


@dataclass(frozen=True)
class ReadsBeside:
    """A memory-bound program timed in turns with the read kernels (`measure_beside`)."""

    roof: ReadRoof        # each kernel's best run, raised to the program's best run
    typical: ReadRoof     # each kernel's median run, from the same rounds as the program's
    program: Timing       # the program's own timing (median, every run, compile call)
    program_bytes: int    # what one call of the program reads

    @property
    def program_rate(self) -> float:
        """The program's median rate: its bytes over its median time."""
        return self.program_bytes / self.program.median_s

    @property
    def utilisation(self) -> float:
        """The program's median rate over the roof (MBU): at most 1 by construction."""
        return self.program_rate / self.roof.best

    @property
    def share_of_typical(self) -> float:
        """The program's median rate over the fastest kernel's median rate in the same
        rounds: how close it reads to the memory as the machine delivered it meanwhile."""
        return self.program_rate / self.typical.best


def measure_beside(program: Callable[[], Any], program_bytes: int,
                   reads: Sequence[Read] | None = None, rounds: int = 9, warmup: int = 1,
                   lead_in: int = 1, name: str = "the program",
                   nbytes: int = 1 << 28) -> ReadsBeside:
    """Time `program` (a zero-argument function reading `program_bytes` per call) and the read
    kernels (default `read_programs(nbytes)`) in alternation, each timed call right after
    `lead_in` untimed calls of its own (as a decode step follows a decode step)."""
    reads = read_programs(nbytes) if reads is None else reads
    *read_times, timed = time_alternating([read.run for read in reads] + [program], rounds,
                                          warmup=warmup, lead_in=lead_in)
    roof, typical = best_and_median_rates(reads, read_times)
    return ReadsBeside(roof.with_program(name, program_bytes / timed.min_s), typical, timed,
                       program_bytes)
