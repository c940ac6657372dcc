"""Calibration: a step predicted from its parts, each timed alone on this device.

The estimator predicts a decode step from a chip's memory bandwidth W and peak FLOP/s C. On
a real device the kernels reach neither roof at every shape — XLA:CPU's products with a few
rows run far below both — so the library also predicts a step from its parts *measured*
(`inferbook.perf.step_programs` builds them): the model's weight matmuls at the step's rows,
its attention over the step's caches, and a skeleton of the step.

Every program timed alone carries costs that are not its work: the call, the dispatch, on an
accelerator a launch per kernel and a wait at the end. Adding up parts timed alone adds those
costs once per part: on an H200, where each program call costs a fraction of a millisecond,
that sum predicted three times the measured step. So each part enters by its *work* — its
time minus the time of the same program for the skeleton model (the same layers and
operations at tiny widths) — and the fixed costs enter once, as the skeleton's own step.
Attention's work is measured the same way but inside a step: the step of the
`attention_skeleton` (the skeleton with the model's heads and caches) minus the skeleton's
step. Attention timed in a program of its own need not be the step's attention: in profiles
taken while writing this (XLA:CPU, jax 0.10.2, 2 cores), the cache products of such a program
ran on one core, and inside the step on both.

    predicted = step(skeleton) + [matmuls − matmuls(skeleton)]
                               + [step(attention skeleton) − step(skeleton)]

for a decode step of B sequences over S cached tokens, every term at the same B and S; a
prefill of T tokens is the same with T rows and prefills in place of steps. Nothing is
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
    attention_skeleton,
    decode_stepper,
    model_matmul_program,
    model_matmuls,
)

__all__ = ["Parts", "decode_parts", "prefill_parts", "time_parts", "model_matmuls",
           "model_matmul_program", "attention_skeleton", "decode_stepper", "SweepPoint",
           "Sweep", "decode_sweep", "PROGRAMS"]

PROGRAMS = 5        # the programs of `decode_parts` and `prefill_parts`, in `time_parts` order
# How attention's work is timed, as benchmark records say it (`inferbook bench`).
ATTENTION_TIMED = "in a step: the attention skeleton's step minus the skeleton's"

PART_NAMES = ("measured", "matmul", "attention", "overhead", "matmul_skeleton",
              "attention_skeleton")


@dataclass(frozen=True)
class Parts:
    """One configuration timed: the step, its parts, and the skeleton's (seconds, medians).

    `attention_s` is the attention skeleton's step (the skeleton with the model's heads and
    caches, `step_programs.attention_skeleton`) and `attention_skeleton_s` the skeleton's
    step, which it exceeds by attention's work in all L layers. (Benchmark records without
    an `attention_timed` field hold L times one layer's attention timed in a program of its
    own, and the same for the skeleton.)
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


def _attention_params(params: dict, cfg: ModelConfig, batch: int) -> tuple[ModelConfig, dict]:
    """The attention skeleton of `cfg` and its weights, in `params`' dtype and the layout the
    step reads fastest at `batch` (its weights are tiny: they are made here)."""
    acfg = attention_skeleton(cfg)
    return acfg, for_batch(init_params(acfg, 0, params["embed"].dtype), acfg, batch)


def decode_parts(params: dict, skeleton_params: dict, cfg: ModelConfig, batch: int,
                 context: int, skeleton: ModelConfig | None = None
                 ) -> list[Callable[[], Any]]:
    """The five programs of a decode step, in `Parts` order: the step, the matmuls at `batch`
    rows, the attention skeleton's step (the model's attention over `batch` caches of
    `context` tokens, around tiny matmuls), then the skeleton's step and matmuls
    (`skeleton_params` of `skeleton`, default `step_programs.skeleton(cfg)`)."""
    tiny = step_programs.skeleton(cfg) if skeleton is None else skeleton
    acfg, aparams = _attention_params(params, cfg, batch)
    return [decode_stepper(params, cfg, batch, context),
            model_matmul_program(params, cfg, batch),
            decode_stepper(aparams, acfg, batch, context),
            decode_stepper(skeleton_params, tiny, batch, context),
            model_matmul_program(skeleton_params, tiny, batch)]


def prefill_parts(params: dict, skeleton_params: dict, cfg: ModelConfig, length: int,
                  skeleton: ModelConfig | None = None) -> list[Callable[[], Any]]:
    """The five programs of a prefill of one `length`-token prompt, in `Parts` order."""
    tiny = step_programs.skeleton(cfg) if skeleton is None else skeleton
    acfg, aparams = _attention_params(params, cfg, length)
    return [step_programs.prefill_runner(params, cfg, length),
            model_matmul_program(params, cfg, length, unembed_rows=1),
            step_programs.prefill_runner(aparams, acfg, length),
            step_programs.prefill_runner(skeleton_params, tiny, length),
            model_matmul_program(skeleton_params, tiny, length, unembed_rows=1)]


def time_parts(programs: Sequence[Callable[[], Any]], repeats: int,
               others: Sequence[Callable[[], Any]] = (), budget_s: float = 0.0,
               lead_in: int = 0) -> tuple[Parts, list[timing.Timing]]:
    """Time the five programs of `decode_parts` or `prefill_parts` and any `others`, all in
    alternation; medians of `repeats` rounds after one warm-up round — more, up to four
    times as many, while all timed runs add up to less than `budget_s`; each timed call
    after `lead_in` untimed calls of its own program (`timing.time_alternating`). Returns
    the parts and every program's `Timing`, the five first (`PROGRAMS`) and the others
    after them."""
    timed = timing.time_alternating([*programs, *others], repeats, warmup=1,
                                    budget_s=budget_s, lead_in=lead_in)
    step, mm, attn, step0, mm0 = (t.median_s for t in timed[:PROGRAMS])
    return Parts(step, mm, attn, step0, mm0, step0), timed


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
                 repeats: int = 3, lead_in: int = 0, budget_s: float = 0.0) -> Sweep:
    """Time the decode step across batch sizes beside the roofline and calibrated predictions.

    For each batch size, times the five programs of `decode_parts` in alternation and keeps
    the median of `repeats` rounds of each (more while a batch size's timed runs add up to
    less than `budget_s`; each timed call after `lead_in` untimed calls of its own program, as
    `time_parts` does), the weights in the layout the step reads fastest
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
                            repeats, budget_s=budget_s, lead_in=lead_in)[0])
             for B in batches]
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
