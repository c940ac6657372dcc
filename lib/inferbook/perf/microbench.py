"""The device's two roofs, measured: read bandwidth W and matmul FLOP/s C.

The roofline predicts a step from two constants. A datasheet gives them for a named chip
(`inferbook.perf.hardware`); for the reader's own device they are measured here, by the
smallest programs that can reach each roof.

* Bandwidth — the best of several read kernels, each the fastest of several runs
  (`inferbook.perf.read_roof`): the one bandwidth measurement of the library, which the
  chapters, the calibration and `inferbook bench` all call.
* FLOP/s — [rows, D]·[D, F] products on weights too large to stay in cache
  (`measure_matmul`); C is the best over large row counts, where a product is compute-bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from inferbook.perf.hardware import Chip
from inferbook.perf.timing import device_name, time_fn

__all__ = ["default_dtype", "MatmulTiming", "measure_matmul", "peak_matmul_flops",
           "measured_chip"]


def default_dtype() -> Any:
    """float32 on a CPU (XLA:CPU's bfloat16 matmuls are ~20× slower), bfloat16 elsewhere."""
    return jnp.float32 if jax.devices()[0].platform == "cpu" else jnp.bfloat16


@dataclass(frozen=True)
class MatmulTiming:
    """One matmul shape, timed: seconds per [rows, D]·[D, F] product and what that achieves."""

    rows: int
    D: int
    F: int
    seconds: float
    weight_bytes: float

    @property
    def flops_per_s(self) -> float:
        """2·rows·D·F FLOPs per product, per second."""
        return 2 * self.rows * self.D * self.F / self.seconds

    @property
    def weight_bytes_per_s(self) -> float:
        """Weight bytes streamed per second: the bandwidth the product achieves when B is small."""
        return self.D * self.F * self.weight_bytes / self.seconds


def measure_matmul(rows: int, D: int, F: int, dtype: Any = None, total_bytes: int = 1 << 27,
                   repeats: int = 3) -> MatmulTiming:
    """Time [rows, D]·[D, F] on distinct weight matrices of `total_bytes` together.

    One compiled program multiplies the same input by n = total_bytes / (D·F·bytes) separate
    matrices (at most 16), so the weights come from memory rather than cache (as in a real
    model, whose weights are far larger than any cache) and one dispatch is shared by n products.
    The fastest of `repeats` runs: other work on the machine can only slow a run down.
    """
    dtype = default_dtype() if dtype is None else dtype
    itemsize = jnp.dtype(dtype).itemsize
    n = int(min(max(1, total_bytes // (D * F * itemsize)), 16))   # a few programs' worth
    keys = jax.random.split(jax.random.key(0), n + 1)
    ws = [jax.random.normal(k, (D, F), dtype) for k in keys[1:]]
    x = jax.random.normal(keys[0], (rows, D), dtype)
    products = jax.jit(lambda x, ws: [x @ w for w in ws])
    seconds = time_fn(lambda: products(x, ws), repeats=repeats).min_s / n
    return MatmulTiming(rows, D, F, seconds, itemsize)


def peak_matmul_flops(D: int = 1024, F: int = 4096, rows: Sequence[int] = (256, 512),
                      dtype: Any = None) -> float:
    """C: the best FLOP/s over large row counts, where a product is compute-bound."""
    return max(measure_matmul(r, D, F, dtype, total_bytes=1 << 25).flops_per_s for r in rows)


def measured_chip(bandwidth: float, flops: float, name: str | None = None,
                  memory_bytes: float = math.inf) -> Chip:
    """The current device as a `Chip`, for the estimator's functions."""
    return Chip(name=name or device_name(), hbm_bytes=memory_bytes,
                hbm_bytes_per_s=bandwidth, bf16_flops_per_s=flops, int8_ops_per_s=None,
                source="measured by inferbook.perf.microbench")
