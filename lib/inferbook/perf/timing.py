"""Honest timings: medians after warm-up, compilation apart, the device named.

A JAX function's first call compiles it, which can take far longer than running it; later
calls reuse the compiled program. JAX also dispatches asynchronously, so a timer must wait for
the result (`jax.block_until_ready`). Every timing in the library goes through one loop,
`time_alternating`: each function's first (compiling) call is timed apart, then the functions
run in rounds, and each one's median is reported with the device it ran on. `time_fn` is the
loop for one function.

Wall-clock time on emulated CPU devices (the mesh chapters) measures nothing a reader cares
about and is never reported; these helpers time single-device work.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from tqdm import tqdm

from inferbook.book.present import fmt_seconds
from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.sampling import GREEDY

__all__ = ["Timing", "timed_call", "time_fn", "time_alternating", "device_name", "progress",
           "decode_step_timer"]

R = TypeVar("R")


@dataclass(frozen=True)
class Timing:
    """The result of timing one function."""

    median_s: float
    times_s: tuple[float, ...] = field(repr=False)
    first_call_s: float            # compile + one run (the first call after a fresh jit)
    device: str

    @property
    def compile_s(self) -> float:
        """Time the first call spent beyond a normal run: compilation and setup."""
        return max(self.first_call_s - self.median_s, 0.0)

    @property
    def min_s(self) -> float:
        """The fastest run: on a shared machine, the least disturbed one."""
        return min(self.times_s)

    def describe(self) -> str:
        """One line for the reader: median, runs, device and compile time."""
        return (f"{fmt_seconds(self.median_s)} (median of {len(self.times_s)} runs on "
                f"{self.device}; compile {fmt_seconds(self.compile_s)})")


def timed_call(fn: Callable[[], R]) -> tuple[R, float]:
    """Run `fn()`, wait until the device has finished, and return its result and the seconds
    it took (dispatch is asynchronous: without the wait a timer measures only the launch)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - t0


def time_alternating(fns: Sequence[Callable[[], Any]], rounds: int, warmup: int = 0,
                     min_time_s: float = 0.0, budget_s: float = 0.0,
                     max_rounds: int | None = None, lead_in: int = 0) -> list[Timing]:
    """Time several zero-argument functions in alternation: one `Timing` each.

    Each function's first call (which compiles it) is timed apart, then `warmup` untimed
    rounds, then `rounds` timed rounds that run every function once — more while any
    function's timed runs add up to less than `min_time_s`, and more while all timed runs
    together add up to less than `budget_s` (up to `max_rounds`, default 4·`rounds`): cheap
    functions get more rounds, so their medians are as steady as expensive ones'. In
    alternation, whatever else the machine is doing falls on all of them alike, so their
    medians stay comparable even on a busy machine, where each one's minimum would pick a
    different stroke of luck.

    With `lead_in`, each timed call follows that many untimed calls of the same function,
    so it runs as it would in a loop of itself — a decode step right after a decode step,
    as `decode.generate` runs it — rather than right after another program, whose traces
    (what it left in the caches, a thread pool gone idle) it would otherwise pay for.
    """
    first = [timed_call(fn)[1] for fn in fns]
    for _ in range(warmup):
        for fn in fns:
            jax.block_until_ready(fn())
    runs: list[list[float]] = [[] for _ in fns]
    cap = 4 * rounds if max_rounds is None else max_rounds

    def more() -> bool:
        if len(runs[0]) < rounds or min(sum(r) for r in runs) < min_time_s:
            return True
        return len(runs[0]) < cap and sum(map(sum, runs)) < budget_s

    while more():
        for fn, times in zip(fns, runs):
            for _ in range(lead_in):
                jax.block_until_ready(fn())
            times.append(timed_call(fn)[1])
    device = device_name()
    return [Timing(statistics.median(times), tuple(times), f, device)
            for times, f in zip(runs, first)]


def time_fn(fn: Callable[..., Any], *args: Any, repeats: int = 10, warmup: int = 1,
            min_time_s: float = 0.0, **kwargs: Any) -> Timing:
    """Time ``fn(*args, **kwargs)``: one compiling call, `warmup` more, then `repeats` timed.

    Keeps repeating until at least `min_time_s` has been measured (for very fast functions).
    """
    return time_alternating([lambda: fn(*args, **kwargs)], repeats, warmup, min_time_s)[0]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name() -> str:
    """The default device, e.g. 'NVIDIA H100 80GB HBM3' or 'CPU: <model> (2 cores)'."""
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return f"CPU: {_cpu_model()} ({os.cpu_count()} cores)"
    return dev.device_kind


def progress(iterable: Iterable[R], desc: str = "", total: int | None = None) -> Iterator[R]:
    """A text progress bar (tqdm) for long measurements; plain text, no widgets."""
    return tqdm(iterable, desc=desc, total=total, leave=False, ascii=True, mininterval=1.0)


def decode_step_timer(params: Any, cfg: ModelConfig, batch: int, cache_len: int,
                      filled: int | None = None) -> Callable[[], Any]:
    """A zero-argument callable that runs one decode step exactly as `decode.generate` does.

    The cache holds `cache_len` slots with `filled` (default cache_len - 1) tokens per sequence;
    each call samples the next token (greedy) and appends its keys and values in place, then
    rewinds the lengths so that every call does the same work. Use with `time_fn`.
    """
    filled = cache_len - 1 if filled is None else filled
    lengths = np.full((batch,), filled, np.int32)    # host copy: the device one is donated
    state = {"cache": kvcache.init_cache(cfg, batch, cache_len, params["embed"].dtype)
             ._replace(lengths=jnp.asarray(lengths)),
             "tok": jnp.zeros((batch,), jnp.int32), "done": jnp.zeros((batch,), bool)}
    key = jax.random.key(0)

    def step():
        tok, done, _, (new_k, new_v) = decode.next_token(params, cfg, state["tok"],
                                                         state["done"], state["cache"], key,
                                                         GREEDY, -1)
        state["cache"] = decode.append_in_place(state["cache"], new_k, new_v)._replace(
            lengths=jnp.asarray(lengths))
        state["tok"], state["done"] = tok, done
        return tok

    return step
