"""Where the orchestrator's clock comes from: measured on this device, or from a cost model.

The orchestrator is a single-threaded discrete-event simulation. It runs every engine call for
real — the tokens are the model's — and charges the call's duration to the server that made it.
Each server has its own clock; a request's token leaves when its server's clock says so. With
one server (static, interleaved and continuous batching) the clock is simply the sum of the
calls' durations plus idle gaps waiting for arrivals. With two (disaggregated serving) the
servers' clocks advance independently, as two machines would, though the calls ran one after
the other in this process.

A `Timer` decides the durations:

  * `WallClock()` measures each call on the device the book runs on (waiting for the result).
    Durations carry measurement noise, so with arrivals spread in time the exact schedule
    can differ between runs.
  * `MedianClock()` measures the same way but charges each call the median duration of its
    compiled program so far: what the chapters report, with the device named, because a
    machine shared with other work occasionally stalls a call for reasons of its own.
  * `CostTimer(cost)` runs the call but charges `cost(op)` seconds: deterministic. Tests use
    `LinearCost` (round numbers you can check by hand); `RooflineCost` asks the estimator what
    the same schedule would take on a named chip.

KV transfers between servers do no work in this process; they are always charged
latency + bytes / bandwidth of the link (disaggregated.py).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Protocol, TypeVar

from inferbook.model.config import ModelConfig
from inferbook.perf import counts, phase_time
from inferbook.perf.hardware import Chip
from inferbook.perf.step_cost import step_time
from inferbook.perf.timing import timed_call
from inferbook.serving.checks import finite_number

__all__ = ["Op", "Timer", "WallClock", "MedianClock", "CostTimer", "LinearCost",
           "RooflineCost"]

T = TypeVar("T")


@dataclass(frozen=True)
class Op:
    """One engine call, described well enough to price it.

    kind: "prefill", "insert", "generate", "save" or "load" (prefix-cache copies).
    batch: sequences in the call (generate: the number of slots, busy or not).
    tokens: new tokens processed per sequence, padded as the compiled program sees them.
    context: tokens already cached that the new ones attend to (generate: summed over slots).
    """

    kind: str
    batch: int = 1
    tokens: int = 0
    context: int = 0


class Timer(Protocol):
    def __call__(self, op: Op, fn: Callable[[], T]) -> tuple[T, float]:
        """Run fn() and return its result and the seconds to charge for it."""


class WallClock:
    """Measured durations: perf_counter around the call, after the device has finished."""

    measured = True

    def __call__(self, op: Op, fn: Callable[[], T]) -> tuple[T, float]:
        return timed_call(fn)


class MedianClock(WallClock):
    """Measured durations, robust to a busy machine.

    Each call is measured like `WallClock`, but charged the median of every measurement so far
    of the same compiled program (same kind of call and shapes). A call that the operating
    system happened to delay — other programs share this machine — then does not charge its
    delay to the design being measured. Programs are keyed by `Op.kind`, batch and padded
    tokens, plus the cached context for prefills that continue a prefix; a generate step's
    program is the same whatever its slots hold.
    """

    def __init__(self) -> None:
        self.samples: dict[tuple, list[float]] = {}

    def __call__(self, op: Op, fn: Callable[[], T]) -> tuple[T, float]:
        out, dt = super().__call__(op, fn)
        key = (op.kind, op.batch, op.tokens, 0 if op.kind == "generate" else op.context)
        seen = self.samples.setdefault(key, [])
        seen.append(dt)
        return out, statistics.median(seen)


class CostTimer:
    """Durations from a cost model; the call itself still runs (for its tokens)."""

    measured = False

    def __init__(self, cost: Callable[[Op], float]) -> None:
        self.cost = cost

    def __call__(self, op: Op, fn: Callable[[], T]) -> tuple[T, float]:
        return fn(), self.cost(op)


@dataclass(frozen=True)
class LinearCost:
    """Round-number costs: prefill = prefill_s + per_token_s · batch · tokens, a generate step
    = generate_s, everything else = copy_s. Deterministic, for tests and worked examples."""

    prefill_s: float = 1e-3
    per_token_s: float = 1e-4
    generate_s: float = 2e-3
    copy_s: float = 1e-4

    def __post_init__(self) -> None:
        for name in ("prefill_s", "per_token_s", "generate_s", "copy_s"):
            finite_number(name, getattr(self, name), minimum=0.0)

    def __call__(self, op: Op) -> float:
        if op.kind == "prefill":
            return self.prefill_s + self.per_token_s * op.batch * op.tokens
        if op.kind == "generate":
            return self.generate_s
        return self.copy_s


@dataclass(frozen=True)
class RooflineCost:
    """What each call would take on `chip`, by the estimator's roofline formulas."""

    cfg: ModelConfig
    chip: Chip
    weight_bytes: float = 2
    kv_bytes: float = 2

    def __post_init__(self) -> None:
        for name in ("weight_bytes", "kv_bytes"):
            finite_number(name, getattr(self, name), minimum=0.0, strictly=True)

    def __call__(self, op: Op) -> float:
        if op.kind == "prefill":
            return step_time(phase_time.prefill_step_cost(
                self.cfg, op.tokens, op.context, op.batch, self.weight_bytes, self.kv_bytes),
                self.chip)
        if op.kind == "generate":
            return step_time(phase_time.generate_step_cost(
                self.cfg, op.batch, op.context, self.weight_bytes, self.kv_bytes), self.chip)
        # Copies: read and write the moved KV once.
        moved = 2 * op.batch * op.tokens * counts.kv_bytes_per_token(self.cfg, self.kv_bytes)
        return moved / self.chip.hbm_bytes_per_s
