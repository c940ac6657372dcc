"""Calibration: the roofline's constants measured on the device you are running on.

The estimator predicts a decode step from a chip's memory bandwidth W and peak FLOP/s C. For a
datasheet chip those come from `inferbook.perf.hardware`; for the reader's own device they are
measured here, and the library's real decode step is timed beside the prediction.

What is measured, and how:

* the two roofs, read bandwidth W and matmul FLOP/s C, come from `inferbook.perf.microbench`;
* `model_matmul_program` — *all* the weight matmuls of one decode step of a model (its own
  weights, its own shapes, its own order, in one compiled program) and nothing else; timed at
  each batch it gives the achieved matmul throughput at the model's shapes as a function of
  rows.
* `attention_program` — the time of every layer's attention over the KV caches, alone: what
  reading the cache achieves at the model's shapes.
* `step_overhead` — the cost of a step that moves almost no bytes: the decode step of a model
  with the same layers and operations but tiny widths (dispatch, launches, small ops).
* `time_decode_step` — the library's decode step as `decode.generate` runs it: `next_token`
  (read the cache, sample), then `append_in_place`, the new keys and values written.

Two predictions come out of `decode_sweep`:

* the *roofline* — kv_bytes / W + max(2·B·P / C, weight_bytes / W), two measured constants;
* the *calibrated* prediction — the measured matmul time at B rows + the measured attention
  time over B caches + the measured step overhead. It keeps the roofline's decomposition of a
  step (weights, KV cache) but replaces each term's ideal by what the device's kernels
  actually achieve at the model's shapes. Accelerators come close to the roofline; XLA on a CPU
  does not: its products with 2–16 rows run far below both roofs, a valley the two-constant
  roofline cannot see. Nothing in the calibrated prediction is fitted to the decode step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp

from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import init_params
from inferbook.perf import timing
from inferbook.perf.counts import kv_cache_bytes, matmul_params
from inferbook.perf.microbench import default_dtype, measure_bandwidth

__all__ = ["model_matmuls", "model_matmul_program", "model_matmul_time", "attention_program",
           "step_overhead", "decode_stepper", "time_decode_step", "SweepPoint", "Sweep",
           "decode_sweep"]


def model_matmuls(params: dict, cfg: ModelConfig) -> list[Any]:
    """The weight matrices one decode step multiplies by, as 2-D [in, out] arrays, in order."""
    mats = []
    for p in params["layers"]:
        mats += [p["wq"], p["wk"], p["wv"], p["wo"]]
        mats += [p[k] for k in ("w_gate", "w_up", "w_down", "w_in", "w_out") if k in p]
    mats.append(params["embed"].T if cfg.tied_embeddings else params["unembed"])
    return mats


def model_matmul_program(params: dict, cfg: ModelConfig, batch: int) -> Callable[[], Any]:
    """A function running all weight matmuls of one decode step at `batch` rows, in one program.

    The matrices of `model_matmuls`, multiplied in the order and with the dependencies the
    model has — queries, keys and values from the same input, the output projection after
    them, the MLP after that, layer after layer, the unembedding last — but with nothing else:
    no attention, no norms, no rotary embedding, no sampling. A residual add and a zero-weighted
    sum stand in for what was left out, so that no product can be skipped or reordered.
    """
    dtype = params["embed"].dtype
    x = jax.random.normal(jax.random.key(0), (batch, cfg.D), dtype)
    zero = jnp.zeros((), dtype)           # an argument, so the compiler cannot fold it away
    unembed = params["embed"].T if cfg.tied_embeddings else params["unembed"]

    @jax.jit
    def run(x, layers, unembed, zero):
        for p in layers:
            q = x @ p["wq"]
            k = x @ p["wk"]
            v = x @ p["wv"]
            a = q + zero * (k.sum(-1, keepdims=True) + v.sum(-1, keepdims=True))
            x = x + a @ p["wo"]
            if cfg.mlp == "gated":
                h = (x @ p["w_gate"]) * (x @ p["w_up"])
                x = x + h @ p["w_down"]
            else:
                x = x + (x @ p["w_in"]) @ p["w_out"]
        return x @ unembed

    return partial(run, x, params["layers"], unembed, zero)


def attention_program(cfg: ModelConfig, batch: int, context: int, dtype: Any = None,
                      layers: int | None = None) -> Callable[[], Any]:
    """A function running one decode step's attention in `layers` layers (default: all L), and
    nothing else.

    Each layer's single new query per sequence attends to a full cache of `context` tokens and
    to itself (`decode.attend_cached`, the decode step's own code): the part of the step that
    reads the KV cache. Layers are alike, so one layer's time times L is the step's.
    """
    layers = cfg.L if layers is None else layers
    dtype = default_dtype() if dtype is None else dtype
    cache = kvcache.init_cache(cfg.replace(L=layers), batch, context, dtype)
    cache = cache._replace(lengths=jnp.full((batch,), context, jnp.int32))
    q = jax.random.normal(jax.random.key(1), (batch, 1, cfg.N, cfg.H), dtype)
    kv = jax.random.normal(jax.random.key(2), (batch, 1, cfg.K, cfg.H), dtype)
    one = jnp.ones((batch,), jnp.int32)

    @jax.jit
    def run(q, kv, cache):
        return [decode.attend_cached(q, kv, kv, one, cfg.window, cache.k[i], cache.v[i],
                                     cache.lengths) for i in range(layers)]
    return partial(run, q, kv, cache)


def model_matmul_time(params: dict, cfg: ModelConfig, batch: int, repeats: int = 3) -> float:
    """Seconds for all weight matmuls of one decode step at `batch` rows (fastest of `repeats`)."""
    return timing.time_fn(model_matmul_program(params, cfg, batch), repeats=repeats).min_s


def decode_stepper(params: dict, cfg: ModelConfig, batch: int, context: int) -> Callable[[], Any]:
    """A function that runs one decode step of `batch` sequences with `context` cached tokens.

    It calls what `decode.generate` calls for every new token — `next_token` (read the cache,
    compute logits, sample greedily), then `append_in_place` (write the new keys and values)
    — through `timing.decode_step_timer`, which rewinds the cache after each call so that every
    step attends to the same `context` tokens plus its own.
    """
    return timing.decode_step_timer(params, cfg, batch, context + 1, filled=context)


def time_decode_step(params: dict, cfg: ModelConfig, batch: int, context: int,
                     repeats: int = 3) -> timing.Timing:
    """Timing of the library's decode step at this batch and context (see `decode_stepper`)."""
    return timing.time_fn(decode_stepper(params, cfg, batch, context), repeats=repeats)


def step_overhead(cfg: ModelConfig, batch: int = 1, context: int = 16,
                  repeats: int = 5) -> float:
    """Seconds of a decode step that moves almost nothing: same layers, same operations, tiny
    widths. What a step costs beyond its bytes and FLOPs (dispatch, kernel launches, small ops).
    """
    tiny = cfg.replace(D=16, F=16, N=cfg.G, K=1, H=8, V=16, name=f"{cfg.name}-skeleton")
    params = init_params(tiny, 0, default_dtype())
    return time_decode_step(params, tiny, batch, context, repeats).median_s


@dataclass(frozen=True)
class SweepPoint:
    """One batch size: the measured step and its two predictions, with their parts."""

    batch: int
    measured_s: float
    predicted_s: float      # calibrated: measured matmuls + measured attention + overhead
    roofline_s: float       # kv_bytes / W + max(2·B·P / C, weight_bytes / W)
    matmul_s: float         # the model's weight matmuls at B rows, alone
    attention_s: float      # the model's attention over B caches, alone
    kv_bytes: float
    overhead_s: float

    @property
    def attention_bytes_per_s(self) -> float:
        """The bandwidth attention achieved reading the KV cache."""
        return self.kv_bytes / self.attention_s

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1


@dataclass(frozen=True)
class Sweep:
    """`decode_sweep`'s result: constants measured, then one point per batch size."""

    model: str
    context: int
    device: str
    bandwidth: float              # W, B/s
    peak_flops: float             # C, FLOP/s
    weight_bytes: float           # bytes of the matmul weights
    params: int                   # matmul parameters P
    overhead_s: float
    points: list[SweepPoint] = field(default_factory=list)

    @property
    def critical_batch(self) -> float:
        """Where the roofline's two terms meet: C · bytes_per_weight / (2·W)."""
        return self.peak_flops * (self.weight_bytes / self.params) / (2 * self.bandwidth)

    @property
    def max_abs_error(self) -> float:
        return max(abs(p.error) for p in self.points)

    def column(self, name: str) -> list[float]:
        return [getattr(p, name) for p in self.points]


def decode_sweep(cfg: ModelConfig, batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
                 context: int = 128, dtype: Any = None, seed: int = 0,
                 repeats: int = 3) -> Sweep:
    """Time the decode step across batch sizes beside the roofline and calibrated predictions.

    For each batch size, times the model's matmuls alone, one layer's attention alone (times
    L) and the whole decode step in alternation, so that all three see the same machine, and
    keeps the median of `repeats` rounds of each. The step overhead is measured once.

    The roofline's two constants come from the same measurements, as an empirical roofline
    does: W is the better of the device's plain reads (`microbench.measure_bandwidth`) and the
    weight bytes the matmuls stream per second at the smallest batch; C is the best FLOP/s the
    matmuls reach at any batch. Returns a `Sweep`.
    """
    dtype = default_dtype() if dtype is None else dtype
    params = init_params(cfg, seed, dtype)
    P = matmul_params(cfg)
    itemsize = params["embed"].dtype.itemsize
    overhead = step_overhead(cfg)
    timed = []
    for B in batches:
        matmul, attention_layer, step = (t.median_s for t in timing.time_alternating(
            [model_matmul_program(params, cfg, B),
             attention_program(cfg, B, context, dtype, layers=1),
             decode_stepper(params, cfg, B, context)], repeats))
        timed.append((B, matmul, cfg.L * attention_layer, step))
    smallest = min(timed)                 # the batch with the fewest rows
    W = max(measure_bandwidth(1 << 28, repeats).best, P * itemsize / smallest[1])
    C = max(2 * B * P / matmul for B, matmul, _, _ in timed)
    sweep = Sweep(cfg.name, context, timing.device_name(), W, C, P * itemsize, P, overhead)
    for B, matmul, attention, measured in timed:
        kv = kv_cache_bytes(cfg, B, context, itemsize)
        roofline = kv / W + max(2 * B * P / C, P * itemsize / W)
        sweep.points.append(SweepPoint(B, measured, matmul + attention + overhead, roofline,
                                       matmul, attention, kv, overhead))
    return sweep
