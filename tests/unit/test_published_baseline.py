"""The estimator's prediction for each published point, checked against arithmetic done here.

A generation rate sums hundreds of decode steps; the baseline prices groups of steps at their
middle context, so it is checked against the sum over every step. A decode rate on one chip
can be no faster than the chip's bandwidth over the bytes a step must read, counted here from
the parameter and cache counts. The error factor is checked on ratios whose answer is known.
"""

import contextlib
import dataclasses
import io
import json
import math
from functools import cache

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf import counts, published_baseline, quant
from inferbook.perf.estimator import estimate
from inferbook.perf.generation_time import MAX_STEP_SAMPLES, step_groups
from inferbook.perf.hardware import CHIPS
from inferbook.perf.published_baseline import (
    baseline_summary,
    compare_points,
    error_factor,
    predict,
)
from inferbook.perf.published_points import load_points

POINTS = {p.id: p for p in load_points()}


@cache
def rows_of_every_point():
    return compare_points()


def by_quantity(quantity):
    return next(p for p in POINTS.values() if p.quantity == quantity and p.tp == 1)


def test_a_long_generation_is_the_sum_over_every_one_of_its_steps():
    p = next(p for p in POINTS.values()
             if p.quantity == "output_tokens_per_s" and p.output >= 2000 and p.tp == 1)
    cfg, chip, B = get_preset(p.model), CHIPS[p.chip], p.batch
    args = dict(weights=p.weights, kv=p.kv, compute=p.compute, efficiency="ideal")
    seconds = estimate(cfg, chip, batch=B, context=p.prompt + p.output, prompt=p.prompt,
                       **args).prefill_time_s
    for i in range(1, p.output):                            # every decode step, one by one
        seconds += estimate(cfg, chip, batch=B, context=p.prompt + i, **args).step_time_s
    rate, _ = predict(p)
    assert rate == pytest.approx(B * p.output / seconds, rel=1e-4)


@pytest.mark.parametrize("steps", [1, 2, 63, 64, 65, 127, 2047])
def test_the_step_groups_cover_every_step_once(steps):
    groups = step_groups(steps)
    assert sum(count for count, _ in groups) == steps
    assert len(groups) == min(steps, MAX_STEP_SAMPLES)
    assert all(1 <= middle <= steps for _, middle in groups)


def test_a_decode_rate_is_no_faster_than_bandwidth_over_the_bytes_a_step_reads():
    """Every weight but the input embedding's unread rows, and the whole cache, each step."""
    p = next(p for p in POINTS.values() if p.quantity == "decode_tokens_per_s_per_sequence")
    p = dataclasses.replace(p, tp=1, dp=1, ep=1, chips=1, chip="H200", model="llama-3.1-8b",
                            batch=4, context=2048)
    cfg = get_preset(p.model)
    weights = quant.weight_bytes(cfg, quant.parse_weight_format(p.weights))
    unread = (cfg.V - p.batch) * cfg.D * 2                 # bf16 table, B rows looked up
    cache = counts.kv_cache_bytes(cfg, p.batch, p.context, quant.kv_element_bytes(cfg, p.kv))
    for efficiency in ("ideal", "calibrated"):
        rate, fits = predict(p, efficiency)
        assert fits
        assert rate <= CHIPS["H200"].hbm_bytes_per_s / (weights - unread + cache) * (1 + 1e-12)


def test_time_to_first_token_is_the_estimators_prefill_in_milliseconds():
    p = by_quantity("ttft_ms")
    for efficiency in ("ideal", "calibrated"):
        est = estimate(get_preset(p.model), CHIPS[p.chip], batch=1, context=p.prompt,
                       prompt=p.prompt, weights=p.weights, kv=p.kv, compute=p.compute,
                       efficiency=efficiency)
        assert predict(p, efficiency)[0] == pytest.approx(1000 * est.prefill_time_s)


def test_a_rate_per_chip_is_the_deployments_rate_over_its_chips():
    p = next(p for p in POINTS.values()
             if p.quantity == "output_tokens_per_s_per_chip" and p.chips > 1)
    whole = dataclasses.replace(p, quantity="output_tokens_per_s")
    assert predict(p)[0] == pytest.approx(predict(whole)[0] / p.chips)


def test_replicas_each_serve_their_share_of_the_batch():
    p = next(p for p in POINTS.values() if p.dp > 1)
    alone = dataclasses.replace(p, dp=1, chips=p.tp, batch=p.batch // p.dp)
    assert predict(p)[0] == pytest.approx(predict(alone)[0])


def test_the_time_ratio_is_predicted_time_over_measured_time():
    rows = {r.id: r for r in rows_of_every_point()}
    assert set(rows) == set(POINTS)
    for r in rows.values():
        p = POINTS[r.id]
        expected = (r.predicted / p.value if p.quantity == "ttft_ms"
                    else p.value / r.predicted)
        assert r.time_ratio == pytest.approx(expected)


def test_error_factor_of_known_ratios():
    assert error_factor([2.0, 0.5]) == pytest.approx(2.0)
    assert error_factor([1.0]) == 1.0
    assert error_factor([4.0, 1.0]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        error_factor([])
    with pytest.raises(ValueError):
        error_factor([0.0])


def test_the_summary_groups_by_split_chip_and_source():
    rows = rows_of_every_point()
    stats = baseline_summary(rows)
    assert stats["all"]["points"] == len(rows)
    assert stats["split fit"]["points"] + stats["split held_out"]["points"] == len(rows)
    held = [r.time_ratio for r in rows if r.split == "held_out"]
    assert stats["split held_out"]["error_factor"] == pytest.approx(
        math.exp(sum(abs(math.log(r)) for r in held) / len(held)))


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = published_baseline.main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_script_prints_json_and_refuses_a_stray_argument_in_one_line():
    code, out, _ = run(["--json"])
    assert code == 0
    data = json.loads(out)
    assert {r["id"] for r in data["rows"]} == set(POINTS)
    code, out, err = run(["--plot"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "--plot" in err
