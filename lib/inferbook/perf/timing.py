"""Honest timings: medians after warm-up, compilation apart, the device named.

A JAX function's first call compiles it, which can take far longer than running it; later
calls reuse the compiled program. JAX also dispatches asynchronously, so a timer must wait for
the result (`block_until_ready`). Every timing in the book goes through `time_fn`, which does
both, repeats the measurement, and reports the median together with the device it ran on.

Wall-clock time on emulated CPU devices (the mesh chapters) measures nothing a reader cares
about and is never reported; these helpers time single-device work.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Timing", "time_fn", "device_name", "memory_bandwidth", "progress", "compiled_cost",
           "decode_step_timer"]


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
        return min(self.times_s)

    def describe(self) -> str:
        from inferbook.book.present import fmt_seconds
        return (f"{fmt_seconds(self.median_s)} (median of {len(self.times_s)} runs on "
                f"{self.device}; compile {fmt_seconds(self.compile_s)})")


def _block(out: Any) -> Any:
    import jax
    return jax.block_until_ready(out)


def time_fn(fn: Callable[..., Any], *args: Any, repeats: int = 10, warmup: int = 1,
            min_time_s: float = 0.0, **kwargs: Any) -> Timing:
    """Time ``fn(*args, **kwargs)``: one compiling call, `warmup` more, then `repeats` timed.

    Keeps repeating until at least `min_time_s` has been measured (for very fast functions).
    """
    t0 = time.perf_counter()
    _block(fn(*args, **kwargs))
    first = time.perf_counter() - t0
    for _ in range(warmup):
        _block(fn(*args, **kwargs))
    times: list[float] = []
    while len(times) < repeats or sum(times) < min_time_s:
        t0 = time.perf_counter()
        _block(fn(*args, **kwargs))
        times.append(time.perf_counter() - t0)
    return Timing(statistics.median(times), tuple(times), first, device_name())


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
    import jax
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return f"CPU: {_cpu_model()} ({os.cpu_count()} cores)"
    return dev.device_kind


def memory_bandwidth(nbytes: int = 1 << 29, repeats: int = 10) -> tuple[float, Timing]:
    """Achieved memory-read bandwidth (B/s): the time to sum a large float32 array.

    A reduction reads every byte once and writes almost nothing, so bytes / time is the read
    bandwidth the device actually delivers — the number a memory-bound decode step is held to.
    Returns (bytes per second, the timing).
    """
    import jax
    import jax.numpy as jnp
    x = jnp.ones((nbytes // 4,), jnp.float32)
    timing = time_fn(jax.jit(jnp.sum), x, repeats=repeats)
    return x.nbytes / timing.median_s, timing


def progress(iterable, desc: str = "", total: int | None = None):
    """A text progress bar (tqdm) for long measurements; plain text, no widgets."""
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, total=total, leave=False, ascii=True, mininterval=1.0)


def compiled_cost(fn: Callable[..., Any], *args: Any, optimized: bool = True,
                  **kwargs: Any) -> dict[str, float]:
    """XLA's own count of FLOPs and bytes accessed for the program of a jitted `fn`.

    These are exact properties of the program (not measurements), the same on every run; they
    are what the book compares its formulas against. With optimized=False the count is taken
    before XLA's optimisations, without compiling: the FLOPs are the same to a fraction of a
    percent and it is several times faster, but bytes are counted before fusion (too high).
    Returns {"flops", "bytes_accessed"}.
    """
    lowered = fn.lower(*args, **kwargs)
    analysis = (lowered.compile() if optimized else lowered).cost_analysis()
    if isinstance(analysis, (list, tuple)):       # older JAX: one dict per computation
        analysis = analysis[0]
    return {"flops": float(analysis.get("flops", 0.0)),
            "bytes_accessed": float(analysis.get("bytes accessed", 0.0))}


def decode_step_timer(params: Any, cfg: Any, batch: int, cache_len: int,
                      filled: int | None = None) -> Callable[[], Any]:
    """A zero-argument callable that runs one decode step exactly as `decode.generate` does.

    The cache holds `cache_len` slots with `filled` (default cache_len - 1) tokens per sequence;
    each call samples the next token (greedy) and appends its keys and values in place, then
    rewinds the lengths so that every call does the same work. Use with `time_fn`.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from inferbook.model import decode, kvcache
    from inferbook.model.sampling import GREEDY
    filled = cache_len - 1 if filled is None else filled
    lengths = np.full((batch,), filled, np.int32)    # host copy: the device one is donated
    state = {"cache": kvcache.init_cache(cfg, batch, cache_len, params["embed"].dtype)
             ._replace(lengths=jnp.asarray(lengths)),
             "tok": jnp.zeros((batch,), jnp.int32), "done": jnp.zeros((batch,), bool)}
    key = jax.random.key(0)

    def step():
        tok, done, _, (new_k, new_v) = decode._next_token(params, cfg, state["tok"],
                                                          state["done"], state["cache"], key,
                                                          GREEDY, -1)
        state["cache"] = decode._append(state["cache"], new_k, new_v)._replace(
            lengths=jnp.asarray(lengths))
        state["tok"], state["done"] = tok, done
        return tok

    return step
