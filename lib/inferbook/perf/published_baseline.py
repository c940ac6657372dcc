"""The estimator beside the world's published measurements: what it predicts for each point.

For every point of `inferbook.perf.published_points` this runs the estimate `inferbook estimate`
gives — the bare roofline (`efficiency="ideal"`, the default here: the baseline) or under an
efficiency, the chip's calibrated one or any other — with the point's chip, chips per
replica, model, formats, compute format, batch and lengths, and converts it into the quantity
the source measured:

    decode rate         1 / step(B, S)                    (one sequence's tokens per second)
    generation rate     dp · B · O / (prefill(B, P) + Σ_{i=1}^{O−1} step(B, P + i))
    time to first token prefill(B, P)

with B the sequences each replica serves (batch / dp), P the prompt and O the output. The
decode steps of a long generation are summed as `generation_time` sums them (at most
`MAX_STEP_SAMPLES` groups of consecutive steps, each priced at its middle context). Each point
is a `PointCosts`: its estimate's plan and the steps whose times add up to what was measured,
so that a calibration (`efficiency_fit`) can price them under many efficiencies at once.

Every point gets a *time ratio*, predicted time over measured time (for a rate, measured rate
over predicted rate): below 1 the estimate is optimistic. `error_factor` is the geometric
mean of max(r, 1/r), the factor by which a typical prediction is off.

    python -m inferbook.perf.published_baseline          # a table, then the summary
    python -m inferbook.perf.published_baseline --json   # every row and the summary
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass
from typing import Any, Callable

from inferbook.model.presets import get_preset
from inferbook.perf.efficiency import Efficiency
from inferbook.perf.estimate_plan import EstimatePlan, plan_estimate
from inferbook.perf.generation_time import MAX_STEP_SAMPLES, step_groups
from inferbook.perf.hardware import CHIPS
from inferbook.perf.published_points import PublishedPoint, load_points
from inferbook.perf.step_cost import StepCost, step_time

__all__ = ["Comparison", "MAX_STEP_SAMPLES", "PointCosts", "point_costs", "measured_seconds",
           "predict",
           "compare_points", "error_factor", "baseline_summary", "main"]


@dataclass(frozen=True)
class Comparison:
    """One point: what was measured, what the estimator predicts, and their time ratio."""

    id: str
    chip: str
    quantity: str
    split: str
    measured: float
    predicted: float
    time_ratio: float        # predicted time / measured time
    fits: bool               # the estimator finds weights and cache fit the chips


def _plan(p: PublishedPoint, batch: int, context: int, prompt: int | None,
          efficiency: Efficiency | str, output: int | None = None) -> EstimatePlan:
    """`inferbook estimate`'s plan for one replica of the point: its tensor-parallel chips, the
    layout the source says ran (else the 1D weight-stationary layout that tensor parallelism
    is, or the estimator's own choice where the experts are split), the formats and compute
    format it ran."""
    layout = p.layout or ("1d-ws" if p.tp > 1 and p.ep == 1 else None)
    layout = layout if p.tp > 1 else None
    return plan_estimate(get_preset(p.model), CHIPS[p.chip], batch=batch, context=context,
                         prompt=prompt, chips=p.tp, layout=layout, weights=p.weights, kv=p.kv,
                         compute=p.compute, efficiency=efficiency, output=output)


@dataclass(frozen=True)
class PointCosts:
    """A point's plan and the steps its measured time spans: (count, step) pairs whose
    times add up, and whether the deployment fits in memory by the estimator's count."""

    point: PublishedPoint
    plan: EstimatePlan
    steps: tuple[tuple[int, StepCost], ...]
    fits: bool

    def _seconds(self, efficiency: Efficiency | None = None) -> float:
        """The time the steps take under `efficiency` (default: the plan's)."""
        plan = self.plan
        e = plan.efficiency if efficiency is None else efficiency
        return sum(count * step_time(cost, plan.chip, plan.share.chips, plan.compute, e)
                   for count, cost in self.steps)

    def value(self, efficiency: Efficiency | None = None) -> float:
        """The point's quantity, in its unit, under `efficiency`."""
        p, seconds = self.point, self._seconds(efficiency)
        if p.quantity == "decode_tokens_per_s_per_sequence":
            return 1 / seconds
        if p.quantity == "ttft_ms":
            return 1000 * seconds
        rate = p.batch * p.output / seconds
        return rate / p.chips if p.quantity == "output_tokens_per_s_per_chip" else rate


def point_costs(p: PublishedPoint, efficiency: Efficiency | str = "ideal") -> PointCosts:
    """The steps of the point's measured quantity, planned under `efficiency`."""
    B = p.batch // p.dp
    if p.quantity == "decode_tokens_per_s_per_sequence":
        plan = _plan(p, B, p.context, None, efficiency)
        return PointCosts(p, plan, ((1, plan.decode_cost()),), plan.fits)
    if p.quantity == "ttft_ms":
        plan = _plan(p, B, p.prompt, p.prompt, efficiency)
        return PointCosts(p, plan, ((1, plan.prefill_cost()),), plan.fits)
    plan = _plan(p, B, p.prompt + p.output, p.prompt, efficiency, p.output)
    steps = [(1, plan.prefill_cost())]
    steps += [(count, plan.decode_cost(p.prompt + middle))
              for count, middle in step_groups(p.output - 1)]
    return PointCosts(p, plan, tuple(steps), plan.fits)


def measured_seconds(p: PublishedPoint) -> float:
    """The time the point's measured quantity stands for: a decode step (1 / rate), the
    prefill (ms / 1000), or the whole generation (batch · output / deployment's rate)."""
    if p.quantity == "decode_tokens_per_s_per_sequence":
        return 1 / p.value
    if p.quantity == "ttft_ms":
        return p.value / 1000
    rate = p.value * (p.chips if p.quantity == "output_tokens_per_s_per_chip" else 1)
    return p.batch * p.output / rate


def predict(p: PublishedPoint, efficiency: Efficiency | str = "ideal") -> tuple[float, bool]:
    """The estimator's value of the point's quantity, in the point's unit, and whether the
    deployment fits in memory by the estimator's count."""
    costs = point_costs(p, efficiency)
    return costs.value(), costs.fits


def compare_points(points: list[PublishedPoint] | None = None,
                   efficiency: Efficiency | str | Callable[[PublishedPoint], Efficiency]
                   = "ideal") -> list[Comparison]:
    """A Comparison for every point (every published point by default), the estimator
    under `efficiency` (default the bare roofline; "calibrated" for each chip's registry
    efficiency; or a function giving each point's)."""
    rows = []
    for p in load_points() if points is None else points:
        value, fits = predict(p, efficiency(p) if callable(efficiency) else efficiency)
        is_time = p.quantity == "ttft_ms"
        ratio = value / p.value if is_time else p.value / value
        rows.append(Comparison(p.id, p.chip, p.quantity, p.split, p.value, value, ratio, fits))
    return rows


def error_factor(ratios: list[float]) -> float:
    """exp(mean |ln r|): the geometric mean of how many times too fast or too slow."""
    if not ratios or any(not r > 0 for r in ratios):
        raise ValueError("error_factor needs at least one positive ratio")
    return math.exp(sum(abs(math.log(r)) for r in ratios) / len(ratios))


def baseline_summary(rows: list[Comparison]) -> dict[str, Any]:
    """Error factor, worst factor and the range of time ratios: over all points, per split,
    per chip and per source (the first part of a point's name)."""
    groups: dict[str, list[Comparison]] = {"all": rows}
    for r in rows:
        for key in (f"split {r.split}", f"chip {r.chip}", f"source {r.id.split('/')[0]}"):
            groups.setdefault(key, []).append(r)
    out = {}
    for key, members in groups.items():
        ratios = [m.time_ratio for m in members]
        out[key] = {"points": len(members), "error_factor": error_factor(ratios),
                    "worst_factor": max(max(r, 1 / r) for r in ratios),
                    "time_ratio_min": min(ratios), "time_ratio_max": max(ratios)}
    return out


def _table(rows: list[Comparison]) -> str:
    lines = [f"{'point':<64} {'measured':>11} {'predicted':>11} {'time ratio':>10}"]
    lines += [f"{r.id:<64} {r.measured:>11,.4g} {r.predicted:>11,.4g} {r.time_ratio:>10.3f}"
              + ("" if r.fits else "  (does not fit)") for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print the comparison; `--json` prints {"rows": [...], "baseline_summary": {...}} instead."""
    args = sys.argv[1:] if argv is None else argv
    if any(a != "--json" for a in args):
        bad = next(a for a in args if a != "--json")
        sys.stderr.write(f"published_baseline: unknown argument {bad!r} (only --json)\n")
        return 2
    rows = compare_points()
    stats = baseline_summary(rows)
    if args:
        print(json.dumps({"rows": [asdict(r) for r in rows], "baseline_summary": stats}, indent=1))
        return 0
    print(_table(rows))
    for key, s in stats.items():
        print(f"{key:<28} {s['points']:>3} points  error factor {s['error_factor']:.3f}  "
              f"worst {s['worst_factor']:.3f}  time ratio {s['time_ratio_min']:.3f}"
              f"–{s['time_ratio_max']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
