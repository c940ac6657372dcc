"""A mixture's routed rows in the estimator: the (token, expert) pairs' activations, written
sorted by expert, read by the experts, written back and read to combine (four passes of
k·D bfloat16 numbers per token and routing layer), on every chip that works on them —
counted here by hand from the model's shapes and the layout's split."""

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf.estimate_plan import plan_estimate
from inferbook.perf.estimate_steps import ROUTED_ROWS
from inferbook.perf.hardware import get_chip
from inferbook.perf.step_breakdown import breakdown


def _rows(cost):
    return [w.bytes for w in cost.parts if w.name == ROUTED_ROWS]


def test_every_1d_chip_moves_every_routed_row():
    """DeepSeek-V3 on 64 chips, 1D (each chip a 32-column slice of all 256 experts): every
    chip handles all B·k = 1024 pairs of a 128-sequence decode step in each of its 58
    routing layers (61 layers, the first 3 dense) — 14,680,064 bytes a pass, not a 64th."""
    plan = plan_estimate(get_preset("deepseek-v3"), get_chip("TPU v5e"), batch=128,
                         context=512, chips=64, layout="1d-ws", weights="int8", kv="int8",
                         efficiency="ideal")
    one_pass = 128 * 8 * 7168 * 2
    assert one_pass == 14_680_064
    # The even layout's parts are totals over its 64 chips.
    assert _rows(plan.decode_cost()) == [64 * 4 * one_pass * 58]
    # Per chip it does not shrink with more chips: on 32 it is the same.
    fewer = plan_estimate(get_preset("deepseek-v3"), get_chip("TPU v5e"), batch=128,
                          context=512, chips=32, layout="1d-ws", weights="int8", kv="int8",
                          efficiency="ideal")
    assert _rows(fewer.decode_cost()) == [32 * 4 * one_pass * 58]


@pytest.mark.parametrize("B", [8, 64])
def test_an_expert_parallel_chip_moves_its_groups_pairs(B):
    """Mixtral on 8 chips, expert-parallel: each chip's part is its own (the layout is
    uneven); it works on the pairs routed to its group of E / Z experts, B·k / Z of them,
    in all 32 layers; the prefill of B·T tokens the same over its B·T·k pairs."""
    plan = plan_estimate(get_preset("mixtral-8x7b"), get_chip("H100 SXM"), batch=B,
                         context=1024, prompt=256, chips=8, layout="expert-parallel",
                         efficiency="ideal")
    Z = plan.share.experts_over
    assert Z > 1 and plan.share.chips == 1
    assert _rows(plan.decode_cost()) == [4 * (B * 2 / Z) * 4096 * 2 * 32]
    assert _rows(plan.prefill_cost()) == [4 * (B * 256 * 2 / Z) * 4096 * 2 * 32]


def test_a_dense_model_routes_nothing():
    plan = plan_estimate(get_preset("llama-2-7b"), get_chip("A100 80GB"), batch=8,
                         context=512, chips=2, efficiency="ideal")
    assert _rows(plan.decode_cost()) == []


def test_the_breakdown_counts_them_in_the_mlp_not_the_weights():
    """--breakdown: the rows' bytes at the bandwidth join mlp_s; weights_s stays the
    weights' bytes alone."""
    cfg, chip = get_preset("mixtral-8x7b"), get_chip("H100 SXM")
    plan = plan_estimate(cfg, chip, batch=64, context=1024, chips=2, layout="1d-ws",
                         efficiency="ideal")
    cost = plan.decode_cost()
    got = breakdown(cfg, cost, chip, 2, "bf16", plan.efficiency, 64, 1.0)
    rows = _rows(cost)[0]
    weights = sum(w.bytes for w in cost.parts[1:] if w.name != ROUTED_ROWS)
    W = 2 * chip.hbm_bytes_per_s
    assert got.weights_s == pytest.approx(weights / W, rel=1e-12)
    without = breakdown(cfg, cost.__class__(cost.parts[:-1], cost.comm_bandwidth_s,
                                            cost.comm_latency_s, cost.passes, cost.layers),
                        chip, 2, "bf16", plan.efficiency, 64, 1.0)
    assert got.mlp_s - without.mlp_s == pytest.approx(rows / W, rel=1e-12)
