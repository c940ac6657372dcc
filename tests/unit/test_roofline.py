"""The roofline functions against brute-force and independent computations.

Bytes and FLOPs of single operations are checked against what XLA reports for the compiled
operation; critical batches against a search for the roofline crossing; the general step time
against a matrix-by-matrix roofline over the model's real weight shapes; maximum batch and the
Pareto frontier against exhaustive searches.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.model import decoder
from inferbook.model.presets import PRESETS
from inferbook.perf import counts, decode_roofline, roofline
from inferbook.perf.hardware import CHIPS
from inferbook.perf.step_cost import step_time

chips = st.sampled_from(sorted(CHIPS))


def xla_cost(fn, *shapes):
    cost = jax.jit(fn).lower(*shapes).compile().cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0]
    return cost


@pytest.mark.parametrize("B, D, F", [(1, 256, 512), (8, 128, 384), (64, 256, 256)])
@pytest.mark.parametrize("x_dtype, w_dtype", [(jnp.float32, jnp.float32),
                                              (jnp.bfloat16, jnp.int8)])
def test_matmul_flops_are_what_xla_counts_and_bytes_are_each_tensor_once(B, D, F, x_dtype,
                                                                          w_dtype):
    x = jax.ShapeDtypeStruct((B, D), x_dtype)
    w = jax.ShapeDtypeStruct((D, F), w_dtype)
    def matmul(x, w):
        return jnp.matmul(x, w.astype(x.dtype))
    if x_dtype == w_dtype == jnp.float32:     # (XLA:CPU counts bf16 conversions as FLOPs too)
        assert xla_cost(matmul, x, w)["flops"] == roofline.matmul_flops(B, D, F)
    out = jax.eval_shape(matmul, x, w)
    def nbytes(a):
        return math.prod(a.shape) * jnp.dtype(a.dtype).itemsize
    assert roofline.matmul_bytes(B, D, F, jnp.dtype(x_dtype).itemsize,
                                 jnp.dtype(w_dtype).itemsize,
                                 jnp.dtype(out.dtype).itemsize) == \
        nbytes(x) + nbytes(w) + nbytes(out)


@given(B=st.integers(1, 4096), D=st.integers(1, 8192), F=st.integers(1, 8192))
def test_matmul_intensity_tends_to_2b_over_weight_bytes(B, D, F):
    intensity = roofline.matmul_intensity(B, D, F)
    assert intensity < B                                  # 2·B / 2 bytes, minus activations
    if B * 100 <= min(D, F):
        assert intensity > 0.98 * B


@pytest.mark.parametrize("name", sorted(CHIPS))
@pytest.mark.parametrize("weight_bytes", [2, 1, 0.5])
def test_critical_batch_is_where_a_large_matmul_turns_compute_bound(name, weight_bytes):
    """Search B = 1, 2, ... for the first batch whose matmul FLOP time reaches its memory time,
    counting the activations too; B_crit (which drops them) is a slight underestimate."""
    chip = CHIPS[name]
    D = F = 16384
    def compute_bound(B):
        t_math = roofline.matmul_flops(B, D, F) / chip.bf16_flops_per_s
        t_mem = roofline.matmul_bytes(B, D, F, 2, weight_bytes, 2) / chip.hbm_bytes_per_s
        return t_math >= t_mem
    B = 1
    while not compute_bound(B):
        B += 1
    b_crit = roofline.critical_batch(chip, weight_bytes)
    assert b_crit <= B <= 1.1 * b_crit + 1


def test_int8_weights_halve_b_crit_and_int8_arithmetic_doubles_it():
    chip = CHIPS["TPU v5e"]
    bf16 = roofline.critical_batch(chip, 2)
    assert roofline.critical_batch(chip, 1) == pytest.approx(bf16 / 2)
    assert roofline.critical_batch(chip, 1, "int8") == pytest.approx(
        bf16 / 2 * chip.int8_ops_per_s / chip.bf16_flops_per_s)
    assert roofline.critical_intensity(chip) == pytest.approx(bf16)


@pytest.mark.parametrize("B, T, S, N, K, H", [(1, 1, 64, 4, 4, 32), (2, 16, 48, 8, 2, 16),
                                              (3, 8, 8, 4, 1, 64)])
def test_attention_cost_counts_both_products_and_every_tensor_once(B, T, S, N, K, H):
    q = jax.ShapeDtypeStruct((B, K, (N // K) * T, H), jnp.float32)
    k = jax.ShapeDtypeStruct((B, K, S, H), jnp.float32)

    def products(q, k, v):
        return jnp.einsum("BKMS,BKSH->BKMH", jnp.einsum("BKMH,BKSH->BKMS", q, k), v)

    flops, nbytes = roofline.attention_cost(T, S, N, K, H, B, 4, 4)
    assert xla_cost(products, q, k, k)["flops"] == flops
    tensors = [q, k, k, q]           # read Q, K, V; write an output shaped like Q
    assert nbytes == sum(math.prod(t.shape) * 4 for t in tensors)


@given(T=st.integers(1, 4096), S=st.integers(1, 65536), G=st.sampled_from([1, 2, 4, 8]),
       H=st.sampled_from([64, 128]))
def test_attention_intensity_is_flops_over_bytes(T, S, G, H):
    flops, nbytes = roofline.attention_cost(T, S, N=4 * G, K=4, H=H, B=3)
    assert roofline.attention_intensity(T, S, G) == pytest.approx(flops / nbytes)
    if G == 1:
        assert roofline.attention_intensity(T, S) == pytest.approx(S * T / (S + T))
        assert roofline.attention_intensity(1, S) < 1                  # generate
        assert roofline.attention_intensity(T, T) == pytest.approx(T / 2)   # prefill
    assert roofline.attention_intensity(1, S, G) < G


def per_matrix_step_time(cfg, chip, batch, kv_bytes, weight_bytes, chips):
    """A roofline per weight matrix of the model, summed: read it, or do 2·B FLOPs per weight."""
    shapes = decoder.param_shapes(cfg)
    matrices = [s for layer in shapes["layers"] for name, s in layer.items()
                if not name.endswith("norm")]
    matrices.append((cfg.D, cfg.V))           # the unembedding (the embedding when tied)
    W, C = chips * chip.hbm_bytes_per_s, chips * chip.bf16_flops_per_s
    total = kv_bytes / W
    for shape in matrices:
        n = math.prod(shape)
        total += max(2 * batch * n / C, n * weight_bytes / W)
    return total


@given(name=st.sampled_from(["llama-2-13b", "llama-3-8b", "kipply-52b", "scaling-book-18b"]),
       chip=chips, batch=st.integers(1, 1024), context=st.integers(1, 32768),
       weight_bytes=st.sampled_from([2, 1]), n=st.sampled_from([1, 4, 8]))
def test_general_step_time_equals_a_roofline_per_weight_matrix(name, chip, batch, context,
                                                                 weight_bytes, n):
    cfg, chip = PRESETS[name], CHIPS[chip]
    P = counts.matmul_params(cfg)
    kv = counts.kv_cache_bytes(cfg, batch, context)
    predicted = step_time(decode_roofline.decode_step_cost(P, P * weight_bytes, kv, batch),
                          chip, n)
    assert predicted == pytest.approx(per_matrix_step_time(cfg, chip, batch, kv, weight_bytes, n))
    lower = step_time(decode_roofline.lower_bound_step_cost(P * weight_bytes, kv), chip, n)
    assert predicted >= lower * (1 - 1e-12)
    if batch <= roofline.critical_batch(chip, weight_bytes):
        assert predicted == pytest.approx(lower)


@given(name=st.sampled_from(["llama-2-13b", "llama-2-70b", "mistral-7b", "scaling-book-18b"]),
       chip=chips, n=st.integers(1, 16), context=st.integers(1, 200_000),
       weight_bytes=st.sampled_from([2, 1, 0.5]), kv_bytes=st.sampled_from([2, 1]))
def test_max_batch_is_the_largest_batch_that_fits(name, chip, n, context, weight_bytes, kv_bytes):
    cfg, chip = PRESETS[name], CHIPS[chip]
    def fits(B):
        return decode_roofline.decode_footprint(cfg, chip, batch=B, context=context, chips=n,
                                                weight_bytes=weight_bytes, kv_bytes=kv_bytes).fits

    best = roofline.max_batch(cfg, chip, context, n, weight_bytes, kv_bytes)
    if best == 0:
        assert not fits(1)
    else:
        assert fits(best) and not fits(best + 1)


def test_decode_footprint_follows_its_definitions():
    cfg, chip = PRESETS["llama-2-13b"], CHIPS["TPU v5e"]
    est = decode_roofline.decode_footprint(cfg, chip, batch=16, context=8192, chips=8,
                                           weight_bytes=1, kv_bytes=2)
    L, K, H = 40, 40, 128
    params = 40 * (4 * 5120 * 5120 + 3 * 5120 * 13824 + 2 * 5120) + 2 * 32000 * 5120 + 5120
    assert est.params == params and est.param_bytes == params
    assert est.kv_bytes_per_token == 2 * L * K * H * 2
    assert est.kv_bytes == 16 * 8192 * 2 * L * K * H * 2
    assert est.total_bytes == est.param_bytes + est.kv_bytes
    assert est.hbm_bytes == 8 * chip.hbm_bytes
    assert est.fits == (est.total_bytes <= est.hbm_bytes)
    W, C = chip.hbm_bytes_per_s, chip.bf16_flops_per_s
    assert est.critical_batch == pytest.approx(C * 1 / (2 * W))
    assert step_time(est.lower_bound, chip, 8) == pytest.approx(est.total_bytes / (8 * W))
    assert step_time(est.step, chip, 8) == pytest.approx(
        est.kv_bytes / (8 * W) + max(2 * 16 * params / (8 * C), params / (8 * W)))


points = st.lists(st.tuples(st.floats(0.001, 10), st.floats(1, 1e6)), min_size=1, max_size=40)


@given(pts=points)
def test_pareto_frontier_is_exactly_the_undominated_points(pts):
    lat, thr = zip(*pts)
    front = roofline.pareto_frontier(lat, thr)

    def dominated(i):
        return any(lat[j] <= lat[i] and thr[j] >= thr[i] and (lat[j], thr[j]) != (lat[i], thr[i])
                   for j in range(len(pts)))
    undominated = {pts[i] for i in range(len(pts)) if not dominated(i)}
    assert {pts[i] for i in front} == undominated
    assert [lat[i] for i in front] == sorted(lat[i] for i in front)
    assert all(thr[a] < thr[b] for a, b in zip(front, front[1:]))


def test_bigger_batches_trade_latency_for_throughput_until_b_crit():
    cfg, chip = PRESETS["llama-3-8b"], CHIPS["H100 SXM"]
    batches = (1, 8, 64, 256)
    lat = [step_time(decode_roofline.decode_footprint(cfg, chip, batch=b, context=1024).step,
                     chip) for b in batches]
    thr = [roofline.tokens_per_s(b, t) for b, t in zip(batches, lat)]
    assert lat == sorted(lat) and thr == sorted(thr)
    assert roofline.pareto_frontier(lat, thr) == [0, 1, 2, 3]


def test_chip_is_a_plain_dataclass_so_estimates_take_custom_hardware():
    chip = dataclasses.replace(CHIPS["A100 40GB"], hbm_bytes_per_s=1.5e12)
    assert roofline.critical_batch(chip) == pytest.approx(208)


@pytest.mark.parametrize("kv_bytes, chips", [(1e-20, 1), (1e-300, 1), (2, 10 ** 31)])
def test_max_batch_of_huge_ratios_is_exact_and_immediate(kv_bytes, chips):
    """Issue 15: ±1 steps on a float of 1e20 never ended. The floor is taken on the exact
    rationals of the two sizes, at once."""
    from fractions import Fraction
    cfg, chip = PRESETS["tiny"], CHIPS["TPU v5e"]
    got = roofline.max_batch(cfg, chip, 100, chips, 2, kv_bytes)
    free = chips * chip.hbm_bytes - counts.param_bytes(cfg, 2)
    per_seq = counts.kv_cache_bytes(cfg, 1, 100, kv_bytes)
    assert got == math.floor(Fraction(free) / Fraction(per_seq))
    assert got * Fraction(per_seq) <= Fraction(free) < (got + 1) * Fraction(per_seq)
