"""The sources' communication formulas, checked against independent computations."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.model.presets import get_preset
from inferbook.perf import collectives, comm_time
from inferbook.perf.hardware import get_chip

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax


@given(n=st.integers(1, 4096), ratio=st.sampled_from([2, 3, 3.5, 4, 8]))
def test_the_optimal_x_minimises_the_2d_communication_time(n, ratio):
    D, F = 1024, int(1024 * ratio)
    x_opt = comm_time.ws2d_optimal_x(n, D, F)
    grid = np.geomspace(x_opt / 50, x_opt * 50, 20001)
    times = [comm_time.ws2d_comm_time(1, D, F, x, n / x, 1.0) for x in grid]
    assert x_opt == pytest.approx(grid[int(np.argmin(times))], rel=1e-3)


def test_at_f_equal_4d_the_optimum_is_the_sources_closed_form():
    # Worked problem 7: X = sqrt(n/8), YZ = sqrt(8n), T = sqrt(128)·B·D / (sqrt(n)·W) for bf16.
    B, D, W = 16, 4096, 9e10
    for n in (16, 64, 256, 1024):
        x = comm_time.ws2d_optimal_x(n, D, 4 * D)
        assert x == pytest.approx(math.sqrt(n / 8)) and n / x == pytest.approx(math.sqrt(8 * n))
        t = comm_time.ws2d_comm_time(B, D, 4 * D, x, n / x, W)
        assert t == pytest.approx(math.sqrt(128) * B * D / (math.sqrt(n) * W))


@given(ratio=st.sampled_from([2, 3, 4, 8]))
def test_the_crossover_is_where_1d_and_the_optimal_2d_cost_the_same(ratio):
    D = 2048
    F = int(ratio * D)
    n_star = comm_time.ws2d_crossover_chips(D, F)

    def gap(n):       # 2D at its optimum minus 1D over three axes (bf16, per the sources)
        x = comm_time.ws2d_optimal_x(n, D, F)
        two_d = comm_time.ws2d_comm_time(1, D, F, x, n / x, 1.0)
        return two_d - comm_time.ws1d_comm_time(1, D, 1.0, axes=3)

    assert gap(n_star * 0.99) > 0 > gap(n_star * 1.01)
    assert n_star == pytest.approx(32 * ratio * (3 / 4) ** 2)


def test_the_best_integer_split_is_the_best_divisor_pair():
    for n in (8, 64, 96, 128):
        x, yz = comm_time.ws2d_best_split(n, 1024, 4096)
        assert x * yz == n
        for d in range(1, n + 1):
            if n % d == 0:
                assert (comm_time.ws2d_comm_time(1, 1024, 4096, x, yz, 1.0)
                        <= comm_time.ws2d_comm_time(1, 1024, 4096, d, n // d, 1.0))


def test_model_parallel_limit_is_where_the_allreduce_outlasts_the_weight_load():
    chip, cfg, B = get_chip("TPU v5e"), get_preset("scaling-book-18b"), 32
    W_ici = comm_time.ici_bandwidth(chip)
    y_max = comm_time.model_parallel_limit(cfg.F, B, chip)
    for Y, ici_wins in ((y_max * 0.9, False), (y_max * 1.1, True)):
        t_hbm = 2 * cfg.D * cfg.F / (Y * chip.hbm_bytes_per_s)     # int8 MLP weights per chip
        t_ici = comm_time.ws1d_comm_time(B, cfg.D, W_ici, bytes_per_element=1)
        assert (t_ici > t_hbm) == ici_wins


def test_the_latency_threshold_has_two_readings_that_differ_by_the_shard_count():
    chip = get_chip("TPU v5e")
    whole = comm_time.latency_bound_bytes(chip, 8)
    per_shard = comm_time.latency_bound_bytes(chip, 8, reading="per-shard")
    assert whole == pytest.approx(8 * per_shard)
    # At the threshold one hop's share takes exactly the per-hop latency.
    assert (whole / 8) / chip.link_bytes_per_s == pytest.approx(chip.hop_latency_s)
    with pytest.raises(ValueError):
        comm_time.latency_bound_bytes(chip, 8, reading="both")
    with pytest.raises(ValueError):       # a chip whose latency nobody measured
        comm_time.latency_bound_bytes(dataclasses.replace(get_chip("H100 SXM"),
                                                          hop_latency_s=None), 8)


def test_inventories_drop_collectives_over_a_single_device():
    cfg = get_preset("tiny")
    assert collectives.total_bytes(collectives.ws1d_collectives(cfg, 4, 1, 1)) == {}
    one_axis = collectives.total_bytes(collectives.ws2d_collectives(cfg, 4, 1, 1, 4, kv_heads=2))
    assert "reduce-scatter" in one_axis and set(one_axis) <= {"all-reduce", "all-gather",
                                                               "reduce-scatter", "all-to-all"}


def test_the_latency_threshold_is_where_appendix_cs_two_terms_meet():
    chip = get_chip("TPU v5e")
    for shards in (4, 8, 16):
        at = comm_time.latency_bound_bytes(chip, shards)
        latency_only = chip.hop_latency_s * shards / 2
        assert comm_time.ring_collective_time(at, chip, shards) == pytest.approx(latency_only)
        assert comm_time.ring_collective_time(at / 2, chip, shards) == pytest.approx(latency_only)
        assert comm_time.ring_collective_time(at * 2, chip, shards) == pytest.approx(
            2 * latency_only)


def test_the_prefill_limit_is_where_the_allreduce_matches_the_mlp_arithmetic():
    chip = get_chip("TPU v5e")
    for name in ("llama-2-13b", "kipply-52b"):
        cfg = get_preset(name)
        m_star = comm_time.prefill_model_parallel_limit(cfg, chip)
        matrices = 3 if cfg.mlp == "gated" else 2
        tokens = 4096
        t_math = 2 * tokens * matrices * cfg.D * cfg.F / (m_star * chip.bf16_flops_per_s)
        t_comm = 2 * tokens * cfg.D * 2 / comm_time.ici_bandwidth(chip)
        assert t_math == pytest.approx(t_comm)
