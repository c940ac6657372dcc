"""Serving-time estimates: the formulas behind the engine's simulated clocks."""

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf import counts, phase_time
from inferbook.perf.hardware import get_chip
from inferbook.perf.step_cost import step_time
from inferbook.serving import CostTimer, MockEngine, Request, RooflineCost, serve

CFG = get_preset("llama-2-13b")
CHIP = get_chip("TPU v5e")


def test_kv_transfer_is_bytes_over_bandwidth_plus_latency():
    t = phase_time.kv_transfer_seconds(CFG, 1000, 1e10, kv_bytes=2, latency_s=1e-3)
    assert t == pytest.approx(1e-3 + 1000 * 2 * CFG.L * CFG.K * CFG.H * 2 / 1e10)


def test_long_prefills_are_compute_bound_and_decode_steps_memory_bound():
    long = step_time(phase_time.prefill_step_cost(CFG, 4096), CHIP)
    flops = counts.forward_flops(CFG, 1, 4096, 4096, logits_for=1)
    assert long == pytest.approx(flops / CHIP.bf16_flops_per_s)
    step = step_time(phase_time.generate_step_cost(CFG, 1, 0), CHIP)
    assert step == pytest.approx(counts.param_bytes(CFG, 2) / CHIP.hbm_bytes_per_s)
    # Batching is nearly free until the matmuls catch up with the weight reads ...
    assert step_time(phase_time.generate_step_cost(CFG, 16, 0), CHIP) == pytest.approx(step)
    # ... while every sequence's KV cache must still be read.
    with_kv = step_time(phase_time.generate_step_cost(CFG, 16, 16 * 2048), CHIP)
    assert with_kv - step == pytest.approx(16 * 2048 * counts.kv_bytes_per_token(CFG, 2)
                                           / CHIP.hbm_bytes_per_s)


def test_roofline_clock_charges_each_engine_call_its_estimate():
    cost = RooflineCost(CFG, CHIP)
    run = serve(MockEngine(2, 64), None, [Request(0, [1] * 20, 4), Request(1, [2] * 9, 3)],
                "interleaved", timer=CostTimer(cost))
    for e in run.events:
        if e.kind == "prefill":
            assert e.end - e.start == pytest.approx(
                step_time(phase_time.prefill_step_cost(CFG, e.tokens), CHIP))
        if e.kind == "generate":     # weights once, plus the KV of at most 2 × 64 tokens
            lo = step_time(phase_time.generate_step_cost(CFG, 2, 0), CHIP)
            hi = step_time(phase_time.generate_step_cost(CFG, 2, 2 * 64), CHIP)
            assert lo < e.end - e.start <= hi
    assert run.summary.makespan_s > 0
