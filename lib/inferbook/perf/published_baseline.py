"""The estimator beside the world's published measurements: what it predicts for each point.

For every point of `inferbook.perf.published_points` this runs the estimate `inferbook estimate`
gives — the bare roofline, no efficiency applied — with the point's chip, chips per replica,
model, formats, batch and lengths, and converts it into the quantity the source measured:

    decode rate         1 / step(B, S)                    (one sequence's tokens per second)
    generation rate     dp · B · O / (prefill(B, P) + Σ_{i=1}^{O−1} step(B, P + i))
    time to first token prefill(B, P)

with B the sequences each replica serves (batch / dp), P the prompt and O the output. The
decode steps of a long generation are summed over at most `MAX_STEP_SAMPLES` groups of
consecutive steps, each group priced at its middle context: a step's time is piecewise linear
in the context, so the sum is exact but for the kinks.

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
from typing import Any

from inferbook.model.presets import get_preset
from inferbook.perf.estimator import Estimate, estimate
from inferbook.perf.hardware import CHIPS
from inferbook.perf.published_points import PublishedPoint, load_points

__all__ = ["Comparison", "MAX_STEP_SAMPLES", "predict", "compare_points", "error_factor",
           "baseline_summary", "main"]

MAX_STEP_SAMPLES = 64


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


def _estimate(p: PublishedPoint, batch: int, context: int, prompt: int | None = None
              ) -> Estimate:
    """`inferbook estimate` for one replica of the point: its tensor-parallel chips, the 1D
    weight-stationary layout that tensor parallelism is (the estimator's own choice where the
    experts are split instead, a layout it does not have)."""
    layout = "1d-ws" if p.tp > 1 and p.ep == 1 else None
    return estimate(get_preset(p.model), CHIPS[p.chip], batch=batch, context=context,
                    prompt=prompt, chips=p.tp, layout=layout, weights=p.weights, kv=p.kv)


def _step_groups(steps: int) -> list[tuple[int, int]]:
    """(count, middle step) of at most MAX_STEP_SAMPLES runs of consecutive steps 1..steps."""
    groups = min(steps, MAX_STEP_SAMPLES)
    if groups < 1:
        return []
    edges = [1 + steps * g // groups for g in range(groups + 1)]
    return [(hi - lo, (lo + hi - 1) // 2) for lo, hi in zip(edges, edges[1:])]


def _generation_s(p: PublishedPoint, B: int) -> tuple[float, bool]:
    """Seconds to prefill B prompts and decode the rest of `output` tokens, and whether the
    longest context fits."""
    prompt, output = p.prompt, p.output
    first = _estimate(p, B, prompt + output, prompt=prompt)
    total = first.prefill_time_s
    for count, middle in _step_groups(output - 1):
        total += count * _estimate(p, B, prompt + middle).step_time_s
    return total, first.fits


def predict(p: PublishedPoint) -> tuple[float, bool]:
    """The estimator's value of the point's quantity, in the point's unit, and whether the
    deployment fits in memory by the estimator's count."""
    B = p.batch // p.dp
    if p.quantity == "decode_tokens_per_s_per_sequence":
        est = _estimate(p, B, p.context)
        return 1 / est.step_time_s, est.fits
    if p.quantity == "ttft_ms":
        est = _estimate(p, B, p.prompt, prompt=p.prompt)
        return 1000 * est.prefill_time_s, est.fits
    seconds, fits = _generation_s(p, B)
    rate = p.batch * p.output / seconds
    if p.quantity == "output_tokens_per_s_per_chip":
        rate /= p.chips
    return rate, fits


def compare_points(points: list[PublishedPoint] | None = None) -> list[Comparison]:
    """A Comparison for every point (every published point by default)."""
    rows = []
    for p in load_points() if points is None else points:
        value, fits = predict(p)
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
