"""`inferbook calibrate`: the efficiencies fitted on the fit split, judged on the held-out one.

    calibrate()          fit (`efficiency_fit.fit_parameters`) on the points of the fit split,
                         each planned as the estimator plans it; plan them again under the
                         fitted efficiency (a mixture of experts may change layout once its
                         collectives cost what they cost) and refit, until the layouts hold
    Calibration          the fitted values, and every point predicted before (the bare
                         roofline) and after (the fit), with the error factor per split
    registry_differences the fitted values the registry (`efficiency_defaults.FITTED`) does
                         not hold, to a relative tolerance
    fitted_literal       the fit as the Python literal the registry holds

The held-out points are predicted, never fitted: their error factor is the calibration's
honest error. The issue's target is a geometric-mean factor of at most 1.15 and no point off
by more than 1.35x on them; `Calibration.meets_target` says whether the fit reaches it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from inferbook.perf.efficiency_defaults import FITTED
from inferbook.perf.efficiency_fit import FitData, Parameter, efficiency_from, fit_parameters
from inferbook.perf.published_baseline import (
    Comparison,
    baseline_summary,
    compare_points,
    measured_seconds,
    point_costs,
)
from inferbook.perf.published_points import PublishedPoint, load_points

__all__ = ["TARGET_ERROR_FACTOR", "TARGET_WORST_FACTOR", "Calibration", "calibrate",
           "registry_differences", "fitted_literal"]

TARGET_ERROR_FACTOR, TARGET_WORST_FACTOR = 1.15, 1.35
MAX_ROUNDS = 4


@dataclass(frozen=True)
class Calibration:
    """A fit and its judgement: `values` per parameter, the rounds of planning it took, and
    every point before (`ideal`) and after (`calibrated`) with their summaries."""

    values: dict[Parameter, float]
    rounds: int
    ideal: list[Comparison]
    calibrated: list[Comparison]

    def summary(self, which: str = "calibrated") -> dict[str, Any]:
        return baseline_summary(self.calibrated if which == "calibrated" else self.ideal)

    @property
    def meets_target(self) -> bool:
        held = self.summary()["split held_out"]
        return (held["error_factor"] <= TARGET_ERROR_FACTOR
                and held["worst_factor"] <= TARGET_WORST_FACTOR)

    def as_dict(self) -> dict[str, Any]:
        return {"parameters": [{"field": p.field, "group": p.group, "value": v}
                               for p, v in sorted(self.values.items(),
                                                  key=lambda kv: (kv[0].group, kv[0].field))],
                "rounds": self.rounds,
                "target": {"error_factor": TARGET_ERROR_FACTOR,
                           "worst_factor": TARGET_WORST_FACTOR, "met": self.meets_target},
                "rows": [{**asdict(i), "predicted_ideal": i.predicted,
                          "time_ratio_ideal": i.time_ratio, "predicted": c.predicted,
                          "time_ratio": c.time_ratio}
                         for i, c in zip(self.ideal, self.calibrated)],
                "summary_ideal": self.summary("ideal"), "summary": self.summary()}


def _layouts(costs: list) -> list[tuple[str, int]]:
    return [(c.plan.share.comms.layout, c.plan.share.split) for c in costs]


def calibrate(points: list[PublishedPoint] | None = None) -> Calibration:
    """Fit on the points of the fit split (every published point by default) and predict
    every point before and after."""
    points = load_points() if points is None else points
    fit = [p for p in points if p.split == "fit"]
    measured = np.array([measured_seconds(p) for p in fit])
    costs = [point_costs(p, "ideal") for p in fit]
    for rounds in range(1, MAX_ROUNDS + 1):
        values = fit_parameters(FitData(costs), measured)
        planned = [point_costs(p, efficiency_from(values, p.chip, p.compute)) for p in fit]
        if _layouts(planned) == _layouts(costs):
            break
        costs = planned
    return Calibration(values, rounds, compare_points(points, "ideal"),
                       compare_points(points, lambda p: efficiency_from(values, p.chip,
                                                                        p.compute)))


def registry_differences(values: dict[Parameter, float], rel: float = 1e-3) -> list[str]:
    """What the registry holds otherwise than `values`: a line per parameter that differs
    by more than `rel`, is missing, or is there without being fitted."""
    fitted = {(p.field, p.group): v for p, v in values.items()}
    out = []
    for key in sorted(set(fitted) | set(FITTED)):
        got, want = FITTED.get(key), fitted.get(key)
        if got is None or want is None or not math.isclose(got, want, rel_tol=rel,
                                                           abs_tol=1e-9):
            out.append(f"{key[1]} {key[0]}: registry {got!r}, fit {want!r}")
    return out


def fitted_literal(values: dict[Parameter, float]) -> str:
    """The fit as `efficiency_defaults.FITTED` holds it (four significant digits)."""
    lines = ["FITTED: dict[tuple[str, str], float] = {"]
    for p, v in sorted(values.items(), key=lambda kv: (kv[0].group, kv[0].field)):
        lines.append(f"    ({p.field!r}, {p.group!r}): {float(f'{v:.4g}')!r},")
    return "\n".join(lines + ["}"])
