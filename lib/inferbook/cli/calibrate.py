"""`inferbook calibrate`: fit the estimator's efficiencies on published measurements.

The published points (book/data/published/) carry a fixed split: the *fit* points are fitted
(`perf.published_calibration.calibrate`), the *held-out* ones are only predicted, and their
error is the calibration's honest error. The command prints the fitted parameters beside the
registry's (`perf.efficiency_defaults.FITTED`, what `inferbook estimate` applies), the error
factor before (the bare roofline) and after, per split, and every point.

    inferbook calibrate                 # parameters, summary, every point
    inferbook calibrate --json          # the same as one JSON object
    inferbook calibrate --check         # exit 1 if the registry does not hold this fit
    inferbook calibrate --literal       # the fit as the registry's Python literal
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "calibrate", help="fit the estimator's efficiencies on published measurements",
        description="Fit each chip's efficiency (bandwidth and FLOP/s fractions, fixed costs, "
                    "collectives) on the fit split of the published points, and report the "
                    "error on the held-out split, which the fit never sees.",
        allow_abbrev=False)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if the registry's efficiencies are not this fit")
    p.add_argument("--literal", action="store_true",
                   help="print the fit as the Python literal efficiency_defaults.FITTED holds")
    p.set_defaults(run=run)


def _summary_lines(name: str, summary: dict) -> list[str]:
    out = [f"{name}:"]
    for key in ("all", "split fit", "split held_out"):
        s = summary[key]
        out.append(f"  {key:<16} {s['points']:>3} points  error factor "
                   f"{s['error_factor']:.3f}  worst {s['worst_factor']:.3f}  time ratio "
                   f"{s['time_ratio_min']:.3f}–{s['time_ratio_max']:.3f}")
    return out


def run(args: argparse.Namespace) -> int:
    from inferbook.perf.efficiency_defaults import FITTED
    from inferbook.perf.published_calibration import (
        TARGET_ERROR_FACTOR,
        TARGET_WORST_FACTOR,
        calibrate,
        fitted_literal,
        registry_differences,
    )

    sys.stderr.write("fitting the efficiencies on the published points of the fit split...\n")
    result = calibrate()
    differences = registry_differences(result.values)
    if args.json:
        print(json.dumps({**result.as_dict(), "registry_differences": differences},
                         allow_nan=False))
    elif args.literal:
        print(fitted_literal(result.values))
    else:
        lines = [f"{'group':<10} {'parameter':<18} {'fit':>11} {'registry':>11}"]
        for p, v in sorted(result.values.items(), key=lambda kv: (kv[0].group, kv[0].field)):
            held = FITTED.get((p.field, p.group))
            lines.append(f"{p.group:<10} {p.field:<18} {v:>11.4g} "
                         f"{'—' if held is None else format(held, '.4g'):>11}")
        lines += _summary_lines("before (the bare roofline, --ideal)", result.summary("ideal"))
        lines += _summary_lines("after (this fit)", result.summary())
        held = result.summary()["split held_out"]
        lines.append(f"target on the held-out points: error factor <= {TARGET_ERROR_FACTOR} "
                     f"({held['error_factor']:.3f}) and none off by more than "
                     f"{TARGET_WORST_FACTOR}x ({held['worst_factor']:.3f}): "
                     + ("met" if result.meets_target else "NOT met"))
        lines.append(f"\n{'point':<66} {'split':<8} {'measured':>10} {'ideal':>8} {'fit':>8}")
        for i, c in zip(result.ideal, result.calibrated):
            lines.append(f"{c.id:<66} {c.split:<8} {c.measured:>10,.4g} "
                         f"{i.time_ratio:>8.3f} {c.time_ratio:>8.3f}")
        lines.append("(ideal, fit: predicted time / measured time)")
        lines.append("the registry holds this fit" if not differences else
                     "the registry differs from this fit: " + "; ".join(differences))
        print("\n".join(lines))
    return 1 if args.check and differences else 0
