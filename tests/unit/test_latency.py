"""kipply's latency model against independent computations.

Her small- and large-batch latencies are checked against the general roofline step time (two
formulations of the same physics), her tensor-parallel communication volume against a
simulated ring all-reduce that counts what each chip sends, and her capacity arithmetic
against exhaustive searches.
"""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.model.presets import PRESETS
from inferbook.perf import counts, decode_roofline, latency, roofline
from inferbook.perf.hardware import CHIPS
from inferbook.perf.step_cost import step_time, work_time

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

A100 = CHIPS["A100 40GB"]


def ring_all_reduce(chunks_per_chip: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """Reduce-scatter then all-gather around a ring; returns the results and the elements
    chip 0 sent."""
    n = len(chunks_per_chip)
    parts = [np.array_split(x.astype(float), n) for x in chunks_per_chip]
    sent = 0
    for step in range(n - 1):                  # reduce-scatter
        msgs = [(c, (c - step) % n, parts[c][(c - step) % n].copy()) for c in range(n)]
        for c, idx, data in msgs:
            parts[(c + 1) % n][idx] += data
            sent += data.size if c == 0 else 0
    for step in range(n - 1):                  # all-gather
        msgs = [(c, (c + 1 - step) % n, parts[c][(c + 1 - step) % n].copy()) for c in range(n)]
        for c, idx, data in msgs:
            parts[(c + 1) % n][idx] = data
            sent += data.size if c == 0 else 0
    return [np.concatenate(p) for p in parts], sent


@pytest.mark.parametrize("n", [2, 4, 8])
def test_tensor_parallel_comm_bytes_equal_two_ring_all_reduces_per_layer(n):
    cfg = PRESETS["kipply-13b"]
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(cfg.D) for _ in range(n)]
    reduced, sent = ring_all_reduce(xs)
    for r in reduced:
        np.testing.assert_allclose(r, sum(xs))
    per_layer_bytes = 2 * sent * 2           # two all-reduces (attention, MLP), 2 bytes each
    assert latency.tp_comm_bytes_per_token(cfg, n) == pytest.approx(cfg.L * per_layer_bytes)
    assert latency.tp_comm_bytes_per_token(cfg, n, exact=False) == cfg.L * 4 * cfg.D * 2


@given(name=st.sampled_from(["kipply-52b", "kipply-13b", "gopher-280b", "llama-2-13b"]),
       n=st.sampled_from([1, 2, 4, 8, 16]), wb=st.sampled_from([2, 1]))
def test_small_batch_compute_is_the_memory_bound_step_without_a_cache(name, n, wb):
    cfg = PRESETS[name]
    small = latency.small_batch_cost(cfg, dataclasses.replace(A100, hop_latency_s=8e-6), n, wb)
    bound = step_time(decode_roofline.lower_bound_step_cost(counts.param_bytes(cfg, wb), 0),
                      A100, n)
    assert work_time(small, A100, n) == pytest.approx(bound)
    assert small.comm_s == (0 if n == 1 else 4 * cfg.L * 8e-6)
    assert step_time(small, A100, n) == pytest.approx(work_time(small, A100, n) + small.comm_s)


@given(name=st.sampled_from(["kipply-52b", "gopher-280b"]), n=st.sampled_from([2, 4, 16]),
       batch=st.integers(1, 2048))
def test_large_batch_compute_is_the_flop_term_of_the_general_step_time(name, n, batch):
    cfg = PRESETS[name]
    large = latency.large_batch_cost(cfg, A100, n, batch)
    compute = work_time(large, A100, n)
    P = counts.param_count(cfg)
    flop_term = 2 * batch * P / (n * A100.bf16_flops_per_s)
    assert compute == pytest.approx(flop_term)
    # Her comms: B · 2 bytes · 4 · L · D over the chip's one-way link bandwidth.
    assert large.comm_s == pytest.approx(batch * 2 * 4 * cfg.L * cfg.D
                                         / (A100.link_bytes_per_s * A100.links))
    assert step_time(large, A100, n) == max(compute, large.comm_s)
    general = step_time(decode_roofline.decode_step_cost(P, counts.param_bytes(cfg), 0, batch),
                        A100, n)
    if batch >= roofline.critical_batch(A100):
        assert compute == pytest.approx(general)


def test_her_worked_examples_come_out_with_her_constants():
    """With her rounded A100 (1.5e12 B/s) and her round parameter counts."""
    a100 = dataclasses.replace(A100, hbm_bytes_per_s=1.5e12, hop_latency_s=8e-6)
    gopher = PRESETS["gopher-280b"]
    small = latency.small_batch_cost(gopher, a100, 16, params=260e9)
    assert work_time(small, a100, 16) == pytest.approx(2 * 260e9 / (16 * 1.5e12))
    assert small.comm_s == pytest.approx(4 * 80 * 8e-6)
    large = latency.large_batch_cost(gopher, a100, 16, 512, params=260e9)
    assert work_time(large, a100, 16) == pytest.approx(512 * 2 * 260e9 / (16 * 312e12))
    assert large.comm_s == pytest.approx(512 * 8 * 80 * 16384 / 300e9)
    assert latency.break_even_tokens(a100) == pytest.approx(208)
    assert latency.comm_intensity(a100) == pytest.approx(1040)


def test_kv_flops_and_memory_keep_the_hardware_ratio_whatever_the_model():
    for name in ("kipply-52b", "llama-2-13b", "tiny"):
        memory, compute = latency.kv_projection_times(PRESETS[name], A100)
        assert memory / compute == pytest.approx(latency.break_even_tokens(A100))
    cfg = PRESETS["kipply-52b"]
    assert latency.kv_projection_flops(cfg) == 2 * 2 * cfg.L * cfg.D ** 2
    assert latency.kv_flops_saved(cfg, 100) == 100 * latency.kv_projection_flops(cfg)


def test_flops_per_comm_byte_divide_each_matmul_by_the_activation_it_receives():
    cfg = PRESETS["kipply-52b"]
    B = 7
    out = {"qkv": cfg.N * cfg.H + 2 * cfg.K * cfg.H, "o": cfg.D, "w1": cfg.F, "w2": cfg.F}
    got = latency.flops_per_comm_byte(cfg)
    for name, width in out.items():
        fan_in = cfg.F if name == "w2" else cfg.D
        flops = roofline.matmul_flops(B, fan_in, width if name != "w2" else cfg.D)
        assert got[name] == pytest.approx(flops / (B * cfg.D * 2))
    assert got == {"qkv": 3 * cfg.D, "o": cfg.D, "w1": 4 * cfg.D, "w2": 4 * cfg.D}


@given(name=st.sampled_from(["kipply-52b", "llama-2-13b", "llama-3-70b"]),
       chip=st.sampled_from(sorted(CHIPS)), wb=st.sampled_from([2, 1, 0.5]))
def test_min_chips_and_capacity_agree_with_searches(name, chip, wb):
    cfg, chip = PRESETS[name], CHIPS[chip]
    n = latency.min_chips_for_weights(cfg, chip, wb)
    assert n * chip.hbm_bytes >= counts.param_bytes(cfg, wb)
    assert n == 1 or (n - 1) * chip.hbm_bytes < counts.param_bytes(cfg, wb)
    for chips in (n, n + 1, 2 * n):
        tokens = latency.kv_capacity_tokens(cfg, chip, chips, wb)
        for context in (1, 2048, 4096):
            assert tokens // context == roofline.max_batch(cfg, chip, context, chips, wb)


def test_intermediate_share_follows_the_time_model_it_describes():
    """Element-wise time ∝ D, matmul time ∝ D²: simulate the two and read off the share."""
    share, d0, d1 = 0.43, 1024, 8192
    elementwise, matmul = share * d1 / d0, (1 - share) * (d1 / d0) ** 2
    assert latency.intermediate_share_at_width(share, d0, d1) == pytest.approx(
        elementwise / (elementwise + matmul))
    assert latency.intermediate_share_approx(share, d0, d1) == pytest.approx(share * 8 / 64)
    assert latency.intermediate_share_at_width(share, d0, d0) == pytest.approx(share)


def test_context_time_is_the_flop_bound_prefill():
    cfg = PRESETS["kipply-13b"]
    step = work_time(latency.small_batch_cost(cfg, A100, 1), A100)
    prefill = step * 512 / latency.context_pass_ratio(A100)
    assert prefill == pytest.approx(2 * counts.param_count(cfg) * 512 / A100.bf16_flops_per_s)
    assert math.isclose(step * 512 / latency.context_pass_ratio(A100, 0.9), prefill * 0.9)
    assert latency.context_pass_ratio(dataclasses.replace(A100, hbm_bytes_per_s=1.5e12), 0.9) \
        == pytest.approx(231, abs=0.2)


@given(name=st.sampled_from(["llama-2-13b", "llama-3-70b", "kipply-52b"]),
       chip=st.sampled_from(["TPU v5e", "A100 40GB", "TPU v6e"]), n=st.sampled_from([1, 2, 8, 64]),
       batch=st.integers(1, 1024), context=st.integers(1, 8192))
def test_tensor_parallel_cost_joins_the_roofline_and_both_of_kipplys_regimes(
        name, chip, n, batch, context):
    cfg, chip = PRESETS[name], CHIPS[chip]
    est = step_time(latency.tensor_parallel_cost(cfg, chip, n, batch, context), chip, n)
    kv = counts.kv_cache_bytes(cfg, batch, context)
    roof = step_time(decode_roofline.decode_footprint(cfg, chip, batch=batch, context=context,
                                                      chips=n).step, chip, n)
    if n == 1:
        assert est == pytest.approx(roof)
        return
    hops = 4 * cfg.L * chip.hop_latency_s
    small = step_time(latency.small_batch_cost(cfg, chip, n), chip, n)
    large = step_time(latency.large_batch_cost(cfg, chip, n, batch), chip, n)
    traffic = batch * 2 * 4 * cfg.L * cfg.D * (n - 1) / n / chip.interconnect_bytes_per_s
    assert est == pytest.approx(max(roof, traffic) + hops)
    if batch <= roofline.critical_batch(chip):     # memory-bound: her small batch + the cache
        assert est >= small + kv / (n * chip.hbm_bytes_per_s) - 1e-12
    else:                                          # FLOP-bound: her large batch + the cache
        assert max(roof, traffic) >= large * (n - 1) / n - 1e-12
