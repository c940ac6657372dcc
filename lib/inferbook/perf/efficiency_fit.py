"""Calibration on published measurements: the efficiencies `inferbook calibrate` fits.

The bare roofline is optimistic for every published point (`published_baseline`). An
`efficiency.Efficiency` says what a deployment achieves of each roof and what fixed costs it
pays; this module fits one per chip to the points of the *fit* split only
(`published_points.split_of`, fixed by a hash of each point's name before any fit), and
reports the error on the *held-out* points, which the fit never sees.

What is fitted, and over which chips it is shared (`efficiency_defaults.PARAMETERS`):

    per chip group       mfu of each compute format the group's points ran in,
                         prefill_layer_s (A100 | Hopper: H100 and H200, one die | TPU v5e |
                         TPU v6e; the two TPUs share one mfu)
    per memory           mbu, the weights' bandwidth fraction (the NVIDIA GPUs | each TPU)
    per family           decode_layer_s, mbu_cache, collectives (pass_overhead_s, link), a
                         mixture's routing (moe_layer_s, experts_mfu), weight-only
                         dequantization (weight_only_int8, weight_only_int4)
                         (GPU: switched interconnects | TPU: a torus)

(`efficiency_defaults` says why the NVIDIA GPUs share their bandwidth fraction.)

Whether collectives overlap with the work is not fitted but taken from how the software
runs them: NCCL's all-reduces run between the matmuls that need them (no overlap on GPUs),
XLA issues collectives asynchronously beside the work (overlap on TPUs).

The fit is least squares in log(predicted time / measured time), each parameter mapped so
that it stays in range (a fraction through a logistic, seconds and scales through exp), a
parameter no fit point depends on left at the bare roofline's value. The design is the one
phase one of the issue set down: per chip an achieved bandwidth and FLOP/s fraction, fixed
costs per decode step and per prefill (per layer), a collective efficiency, a factor per
weight-only format.

For speed each point's steps (`published_baseline.point_costs`) are flattened into arrays
once (`FitData`) and priced with numpy; `FitData.seconds` is `step_cost.step_time` for every
step, which tests/unit/test_efficiency_fit.py checks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from inferbook.perf.efficiency import FRACTIONS, IDEAL, Efficiency
from inferbook.perf.efficiency_defaults import OVERLAP, PARAMETERS, family_of, group_of
from inferbook.perf.hardware import CHIPS
from inferbook.perf.published_baseline import PointCosts
from inferbook.perf.roofline import peak_flops_per_s

__all__ = ["FitData", "Parameter", "parameters_for", "efficiency_from", "fit_parameters"]

_PARTS = 4                                # attention, weights, experts, routed rows


@dataclass(frozen=True)
class Parameter:
    """One fitted number: an `Efficiency` field for every chip of `group`."""

    field: str
    group: str

    @property
    def is_fraction(self) -> bool:
        return self.field in FRACTIONS or self.field.startswith("mfu_")

    def value(self, z: float) -> float:
        """The parameter from its unbounded coordinate: a logistic for a fraction, exp
        otherwise (microseconds for seconds)."""
        if self.is_fraction:
            return 1 / (1 + math.exp(-z))
        return math.exp(z) * (1e-6 if self.field.endswith("_s") else 1.0)

    def coordinate(self, value: float) -> float:
        if self.is_fraction:
            value = min(max(value, 1e-9), 1 - 1e-9)
            return math.log(value / (1 - value))
        return math.log(max(value, 1e-18) / (1e-6 if self.field.endswith("_s") else 1.0))


def parameters_for(chip: str, compute: str) -> dict[str, Parameter]:
    """Efficiency field -> the parameter that sets it for a point on registry chip `chip`
    computing in `compute` (every field of `efficiency_defaults.PARAMETERS`)."""
    family = family_of(CHIPS[chip])
    out = {}
    for field, level in PARAMETERS:
        if level == "mfu":
            out[f"mfu_{compute}"] = Parameter(f"mfu_{compute}", group_of(chip, level))
        else:
            out[field] = Parameter(field, family if level == "family" else group_of(chip, level))
    return out


def efficiency_from(values: dict[Parameter, float], chip: str, compute: str,
                    name: str = "calibrated", source: str = "") -> Efficiency:
    """The `Efficiency` of a point on `chip` computing in `compute`: the fitted values of
    its parameters, the bare roofline's for those not fitted, its family's overlap."""
    fields = {f: values[p] for f, p in parameters_for(chip, compute).items() if p in values}
    overlap = OVERLAP[family_of(CHIPS[chip])]
    return Efficiency(**fields, decode_overlap=overlap, prefill_overlap=overlap, name=name,
                      source=source)


class FitData:
    """Every step of every point as arrays, priced under any parameter values at once."""

    def __init__(self, costs: list[PointCosts]) -> None:
        self.costs = costs
        rows: list[tuple] = []
        for i, pc in enumerate(costs):
            plan = pc.plan
            C, W = peak_flops_per_s(plan.chip, plan.compute), plan.chip.hbm_bytes_per_s
            for count, cost in pc.steps:
                rows.append((i, count, cost, plan.share.chips * C, plan.share.chips * W,
                             parameters_for(plan.chip.name, plan.compute), plan.chip.name))
        self.point = np.array([r[0] for r in rows])
        self.count = np.array([r[1] for r in rows], float)
        self.C = np.array([r[3] for r in rows])
        self.W = np.array([r[4] for r in rows])
        steps = [r[2] for r in rows]
        self.flops = np.zeros((len(rows), _PARTS))
        self.bytes = np.zeros((len(rows), _PARTS))
        self.kind = np.zeros((len(rows), _PARTS), int)     # 0 weights, 1 cache, 2 experts
        self.fmt = np.zeros((len(rows), _PARTS), int)      # 0 none, 1 int8, 2 int4, 3 fp8
        for r, s in enumerate(steps):
            for k, w in enumerate(s.parts):
                self.flops[r, k], self.bytes[r, k] = w.flops, w.bytes
                self.kind[r, k] = 1 if w.cache else 2 if w.grouped else 0
                self.fmt[r, k] = (None, "int8", "int4", "fp8").index(w.dequantized)
        self.comm_bw = np.array([s.comm_bandwidth_s for s in steps])
        self.comm_lat = np.array([s.comm_latency_s for s in steps])
        self.passes = np.array([s.passes for s in steps], float)
        self.layers = np.array([s.layers for s in steps], float)
        self.moe_layers = np.array([s.moe_layers for s in steps], float)
        self.prefill = np.array([s.phase == "prefill" for s in steps])
        family_overlap = np.array([OVERLAP[family_of(CHIPS[r[6]])] for r in rows])
        explicit = np.array([s.overlap is not None for s in steps])
        self.overlap = np.where(explicit, [bool(s.overlap) for s in steps], family_overlap)
        self.parameters = sorted({p for r in rows for p in r[5].values()},
                                 key=lambda p: (p.group, p.field))
        index = {p: j for j, p in enumerate(self.parameters)}
        fields = sorted({f for r in rows for f in r[5] if not f.startswith("mfu_")})
        # Per row, the slot of each field's parameter in `self.parameters`.
        self.slot = {f: np.array([index[r[5][f]] if f in r[5] else -1 for r in rows])
                     for f in fields}
        self.mfu_slot = np.array([index[r[5][next(f for f in r[5] if f.startswith("mfu_"))]]
                                  for r in rows])

    def _field(self, values: np.ndarray, field: str) -> np.ndarray:
        """The field's value for each row: its parameter's, or the bare roofline's when no
        parameter sets it."""
        if field not in self.slot:
            return np.full(len(self.point), float(getattr(IDEAL, field)))
        return values[self.slot[field]]

    def seconds(self, values: np.ndarray) -> np.ndarray:
        """Each point's time with parameter `values` (aligned with `self.parameters`):
        Σ count · step_time over its steps, every step priced as `step_cost.step_time`."""
        f = lambda name: self._field(values, name)            # noqa: E731
        mbu = f("mbu")
        bw = np.stack([mbu, mbu * f("weight_only_int8"), mbu * f("weight_only_int4"), mbu],
                      axis=1)
        part_bw = np.where(self.kind == 1, f("mbu_cache")[:, None],
                           np.take_along_axis(bw, self.fmt, axis=1))
        mfu = values[self.mfu_slot]
        part_c = np.where(self.kind == 2, (mfu * f("experts_mfu"))[:, None], mfu[:, None])
        work = np.maximum(self.flops / (self.C[:, None] * part_c),
                          self.bytes / (self.W[:, None] * part_bw)).sum(axis=1)
        comm = self.comm_bw / f("link")
        latency = self.comm_lat + self.passes * f("pass_overhead_s")
        joined = np.where(self.overlap, np.maximum(work, comm), work + comm)
        fixed = (self.layers * np.where(self.prefill, f("prefill_layer_s"), f("decode_layer_s"))
                 + self.moe_layers * f("moe_layer_s"))
        step = joined + latency + fixed
        return np.bincount(self.point, weights=self.count * step, minlength=len(self.costs))

    def ideal_values(self) -> np.ndarray:
        """Every parameter at the bare roofline's value."""
        return np.array([getattr(IDEAL, p.field) for p in self.parameters], float)


def _start(p: Parameter) -> float:
    """Where the fit starts: fractions at 0.7, fixed costs at 10 µs, scales at 1."""
    return 0.7 if p.is_fraction else 1e-5 if p.field.endswith("_s") else 1.0


def fit_parameters(data: FitData, measured_s: np.ndarray) -> dict[Parameter, float]:
    """The parameter values minimising Σ log²(predicted / measured time) over `data`'s
    points. A parameter no point's time depends on where the fit starts (its column of the
    Jacobian is zero there: int4 weights on a TPU, experts' arithmetic in a memory-bound
    decode) is not determined by the points: it is left out, at the bare roofline's value."""
    from scipy.optimize import least_squares  # only the calibration needs scipy

    ideal = dict(zip(data.parameters, data.ideal_values()))
    log_measured = np.log(measured_s)

    def residuals_for(free: list[Parameter]):
        def residuals(z: np.ndarray) -> np.ndarray:
            fitted = {p: p.value(v) for p, v in zip(free, z)}
            values = np.array([fitted.get(p, ideal[p]) for p in data.parameters])
            return np.log(data.seconds(values)) - log_measured
        return residuals

    every = list(data.parameters)
    z0 = np.array([p.coordinate(_start(p)) for p in every])
    # Probed at the start and with the arithmetic far slower (FLOP/s fractions at 0.05), so
    # that a roof a max() hides at the start still counts.
    z_low = np.array([p.coordinate(0.05) if "mfu" in p.field else z for p, z in zip(every, z0)])
    free = []
    for j, p in enumerate(every):
        for start in (z0, z_low):
            z = start.copy()
            z[j] += 0.1
            if np.max(np.abs(residuals_for(every)(z) - residuals_for(every)(start))) > 1e-9:
                free.append(p)
                break
    result = least_squares(residuals_for(free), np.array([z0[every.index(p)] for p in free]),
                           diff_step=1e-4, xtol=1e-10, ftol=1e-12)
    fitted = {p: p.value(v) for p, v in zip(free, result.x)}
    # A parameter that moves no residual at the solution (the roof it sets is hidden there)
    # is not determined either: the bare roofline's value changes nothing (a higher fraction
    # or a smaller cost binds no more), so it is given back.
    at = residuals_for(free)(result.x)
    for j, p in enumerate(free):
        z = result.x.copy()
        z[j] += 0.1
        if np.max(np.abs(residuals_for(free)(z) - at)) <= 1e-9:
            del fitted[p]
    return fitted
