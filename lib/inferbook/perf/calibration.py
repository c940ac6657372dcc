"""Calibration: a step predicted from its parts, each timed alone on this device.

The estimator predicts a decode step from a chip's memory bandwidth W and peak FLOP/s C. On
a real device the kernels reach neither roof at every shape — XLA:CPU's products with a few
rows run far below both — so the library also predicts a step from its parts *measured*
(`inferbook.perf.step_programs` builds them): the model's weight matmuls at the step's rows,
its attention over the step's caches, and a skeleton of the step.

Every program timed alone carries costs that are not its work: the call, the dispatch, on an
accelerator a launch per kernel and a wait at the end. Adding up parts timed alone adds those
costs once per part, and once per layer when one layer's attention is timed and multiplied
by L: on an H200, where each program call costs a fraction of a millisecond, that sum
predicted three times the measured step. So each part enters by its *work* — its time minus
the time of the same program for the skeleton model (the same layers and operations at tiny
widths) — and the fixed costs enter once, as the skeleton's own step:

    predicted = step(skeleton) + [matmuls − matmuls(skeleton)] + L·[attention − attention(skeleton)]

for a decode step of B sequences over S cached tokens, every term at the same B and S; a
prefill of T tokens is the same with T rows and a prompt's causal attention. Nothing is
fitted to the step: every term is timed, in alternation with the step itself, so that other
work on the machine falls on all of them alike. The *roofline* beside it uses two measured
constants: kv_bytes / W + max(2·B·P / C, weight_bytes / W).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from inferbook.model.config import ModelConfig
from inferbook.model.decode_layout import for_batch
from inferbook.model.decoder import init_params
from inferbook.perf import step_programs, timing
from inferbook.perf.counts import kv_cache_bytes, matmul_params
from inferbook.perf.microbench import default_dtype
from inferbook.perf.read_roof import measure_read_roof
from inferbook.perf.step_programs import (
    attention_program,
    decode_stepper,
    model_matmul_program,
    model_matmuls,
)

__all__ = ["Parts", "decode_parts", "prefill_parts", "time_parts", "model_matmuls",
           "model_matmul_program", "attention_program", "decode_stepper", "SweepPoint",
           "Sweep", "decode_sweep"]

PART_NAMES = ("measured", "matmul", "attention", "overhead", "matmul_skeleton",
              "attention_skeleton")


@dataclass(frozen=True)
class Parts:
    """One configuration timed: the step, its parts, and the skeleton's (seconds, medians).

    `attention_s` and `attention_skeleton_s` are already for all L layers.
    """

    measured_s: float
    matmul_s: float
    attention_s: float
    overhead_s: float                 # the skeleton's whole step
    matmul_skeleton_s: float
    attention_skeleton_s: float

    @property
    def matmul_work_s(self) -> float:
        """What the model's widths add to the matmuls: their time beyond the skeleton's."""
        return max(self.matmul_s - self.matmul_skeleton_s, 0.0)

    @property
    def attention_work_s(self) -> float:
        """What the model's caches add to attention: its time beyond the skeleton's."""
        return max(self.attention_s - self.attention_skeleton_s, 0.0)

    @property
    def predicted_s(self) -> float:
        """The calibrated prediction: the skeleton's step plus each part's work."""
        return self.overhead_s + self.matmul_work_s + self.attention_work_s

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.predicted_s / self.measured_s - 1

    @property
    def overlapped_s(self) -> float:
        """The prediction if the fixed costs overlap the work instead of adding to it:
        max(skeleton's step, matmuls' work + attention's work). An accelerator runs kernels
        while the host launches the next ones, so its step may take the longer of the two;
        recorded beside `predicted_s` so that a GPU run can say which describes it."""
        return max(self.overhead_s, self.matmul_work_s + self.attention_work_s)

    def as_record(self) -> dict[str, float]:
        """The fields `inferbook bench` saves for a calibrated row."""
        return {f"{name}_s": getattr(self, f"{name}_s") for name in PART_NAMES} | {
            "predicted_s": self.predicted_s, "error": self.error,
            "overlapped_s": self.overlapped_s}


def decode_parts(params: dict, skeleton_params: dict, cfg: ModelConfig, batch: int,
                 context: int, skeleton: ModelConfig | None = None
                 ) -> list[Callable[[], Any]]:
    """The six programs of a decode step, in `Parts` order: the step, the matmuls at `batch`
    rows, one layer's attention over `batch` caches of `context` tokens, and the same three
    for the skeleton model (`skeleton_params` of `skeleton`, default
    `step_programs.skeleton(cfg)`)."""
    tiny = step_programs.skeleton(cfg) if skeleton is None else skeleton
    return [decode_stepper(params, cfg, batch, context),
            model_matmul_program(params, cfg, batch),
            attention_program(cfg, batch, context, params["embed"].dtype, layers=1),
            decode_stepper(skeleton_params, tiny, batch, context),
            model_matmul_program(skeleton_params, tiny, batch),
            attention_program(tiny, batch, context, skeleton_params["embed"].dtype, layers=1)]


def prefill_parts(params: dict, skeleton_params: dict, cfg: ModelConfig, length: int,
                  skeleton: ModelConfig | None = None) -> list[Callable[[], Any]]:
    """The six programs of a prefill of one `length`-token prompt, in `Parts` order."""
    tiny = step_programs.skeleton(cfg) if skeleton is None else skeleton
    return [step_programs.prefill_runner(params, cfg, length),
            model_matmul_program(params, cfg, length, unembed_rows=1),
            step_programs.prefill_attention_program(cfg, length, params["embed"].dtype, 1),
            step_programs.prefill_runner(skeleton_params, tiny, length),
            model_matmul_program(skeleton_params, tiny, length, unembed_rows=1),
            step_programs.prefill_attention_program(tiny, length,
                                                    skeleton_params["embed"].dtype, 1)]


def time_parts(programs: Sequence[Callable[[], Any]], layers: int, repeats: int,
               others: Sequence[Callable[[], Any]] = ()
               ) -> tuple[Parts, list[timing.Timing]]:
    """Time the six programs of `decode_parts` or `prefill_parts` (their attention for one
    layer, scaled to `layers`) and any `others`, all in alternation; medians of `repeats`
    rounds after one warm-up round. Returns the parts and every program's `Timing`, the six
    first and the others after them."""
    timed = timing.time_alternating([*programs, *others], repeats, warmup=1)
    step, mm, attn, step0, mm0, attn0 = (t.median_s for t in timed[:6])
    parts = Parts(step, mm, layers * attn, step0, mm0, layers * attn0)
    return parts, timed


@dataclass(frozen=True)
class SweepPoint:
    """One batch size: the measured step and its two predictions, with their parts."""

    batch: int
    parts: Parts
    roofline_s: float       # kv_bytes / W + max(2·B·P / C, weight_bytes / W)
    kv_bytes: float

    @property
    def measured_s(self) -> float:
        return self.parts.measured_s

    @property
    def predicted_s(self) -> float:
        """Calibrated: the skeleton's step plus the matmuls' and attention's work."""
        return self.parts.predicted_s

    @property
    def matmul_s(self) -> float:
        return self.parts.matmul_s

    @property
    def attention_s(self) -> float:
        return self.parts.attention_s

    @property
    def overhead_s(self) -> float:
        return self.parts.overhead_s

    @property
    def attention_bytes_per_s(self) -> float:
        """The bandwidth attention's work achieved reading the KV cache (its time alone where
        that was no longer than the skeleton's)."""
        work = self.parts.attention_work_s
        return self.kv_bytes / (work if work > 0 else self.parts.attention_s)

    @property
    def error(self) -> float:
        """predicted / measured - 1."""
        return self.parts.error


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

    For each batch size, times the six programs of `decode_parts` in alternation and keeps
    the median of `repeats` rounds of each, the weights in the layout the step reads fastest
    at that batch (`decode_layout.for_batch`). The roofline's two constants come from the same
    measurements, as an empirical roofline does: W is the best of the device's read kernels
    (`read_roof.measure_read_roof`) and of the weight bytes the matmuls stream per second at
    the smallest batch; C is the best FLOP/s the matmuls reach at any batch. Returns a `Sweep`.
    """
    dtype = default_dtype() if dtype is None else dtype
    params = init_params(cfg, seed, dtype)
    tiny = init_params(step_programs.skeleton(cfg), seed, dtype)
    P = matmul_params(cfg)
    itemsize = params["embed"].dtype.itemsize
    tiny_cfg = step_programs.skeleton(cfg)
    timed = [(B, time_parts(decode_parts(for_batch(params, cfg, B),
                                         for_batch(tiny, tiny_cfg, B), cfg, B, context),
                            cfg.L, repeats)[0]) for B in batches]
    smallest = min(timed, key=lambda bp: bp[0])[1]
    W = measure_read_roof(1 << 28).with_program("weight streaming at the smallest batch",
                                                P * itemsize / smallest.matmul_s).best
    C = max(2 * B * P / parts.matmul_s for B, parts in timed)
    sweep = Sweep(cfg.name, context, timing.device_name(), W, C, P * itemsize, P)
    for B, parts in timed:
        kv = kv_cache_bytes(cfg, B, context, itemsize)
        roofline = kv / W + max(2 * B * P / C, P * itemsize / W)
        sweep.points.append(SweepPoint(B, parts, roofline, kv))
    return sweep
