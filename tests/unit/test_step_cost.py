"""The one step-time formula, and every source's formula as a view of it.

`step_cost.step_time` is checked against the roofline of each part computed on a chip that is
`chips` chips merged into one (an independent way to divide the work), and against what
overlapping and non-overlapping communication must do. Then each view — the scaling book's
decode step and lower bound, kipply's three latencies, the serving simulations' steps, the MoE
layouts, `inferbook estimate` — is rebuilt here by hand as a `StepCost`, and the view's cost,
priced by `step_time`, must give exactly its time; the sources' views must also give the
closed form their source writes, computed here from the chip's peaks. kipply's communication
is checked against the layout pricing of the collectives it names.
"""

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.model.presets import PRESETS
from inferbook.perf import counts, decode_roofline, latency, moe_layouts, params, phase_time
from inferbook.perf.collectives import Comm
from inferbook.perf.decode_attention_cost import decode_attention_flops
from inferbook.perf.estimator import estimate, weight_bytes_read
from inferbook.perf.hardware import CHIPS
from inferbook.perf.layout_comms import collective_time, expert_parallel_comms, layout_comms
from inferbook.perf.roofline import roofline_time
from inferbook.perf.step_cost import StepCost, Work, step_time, work_time

CHIP_NAMES = ["TPU v5e", "H100 SXM", "A100 40GB"]
amounts = st.floats(0, 1e16, allow_nan=False)


def merged(chip, n):
    """`n` chips seen as one with n times the bandwidth and FLOP/s."""
    return dataclasses.replace(chip, hbm_bytes_per_s=n * chip.hbm_bytes_per_s,
                               bf16_flops_per_s=n * chip.bf16_flops_per_s)


@given(st.lists(st.tuples(amounts, amounts), min_size=1, max_size=4),
       st.sampled_from(CHIP_NAMES), st.integers(1, 64), st.floats(0, 1), st.floats(0, 1e-3))
def test_a_step_is_its_parts_rooflines_then_the_collectives(parts, name, n, bw, lat):
    chip = CHIPS[name]
    cost = StepCost(tuple(Work(f"part {i}", f, b) for i, (f, b) in enumerate(parts)), bw, lat)
    work = sum(roofline_time(f, b, merged(chip, n)) for f, b in parts)
    assert work_time(cost, chip, n) == pytest.approx(work, rel=1e-12)
    t = step_time(cost, chip, n)
    assert t == pytest.approx(max(work, bw) + lat, rel=1e-12)
    # Bandwidth time hides behind the work (or the work behind it); latency never hides.
    assert t >= work + lat * (1 - 1e-12) and t >= bw + lat * (1 - 1e-12)
    assert step_time(dataclasses.replace(cost, comm_bandwidth_s=0.0), chip, n) \
        == pytest.approx(work + lat, rel=1e-12)
    assert cost.flops == pytest.approx(sum(f for f, _ in parts))
    assert cost.bytes == pytest.approx(sum(b for _, b in parts))


def test_int8_arithmetic_uses_the_int8_peak():
    chip = CHIPS["TPU v5e"]
    cost = StepCost((Work("matmuls", 1e15, 0.0),))
    assert step_time(cost, chip, compute="int8") == 1e15 / chip.int8_ops_per_s
    assert step_time(cost, chip) == 1e15 / chip.bf16_flops_per_s


CASES = [("llama-2-13b", "TPU v5e", 1, 1, 2048), ("llama-2-13b", "TPU v5e", 8, 64, 2048),
         ("gopher-280b", "A100 40GB", 16, 512, 0), ("llama-3-8b", "H100 SXM", 4, 256, 8192),
         ("kipply-52b", "A100 40GB", 4, 1, 1024)]


@pytest.mark.parametrize("preset, chip_name, n, B, S", CASES)
def test_the_sources_decode_step_and_kipplys_latencies_are_views(preset, chip_name, n, B, S):
    cfg, chip = PRESETS[preset], CHIPS[chip_name]
    P, pbytes = counts.param_count(cfg), counts.param_bytes(cfg, 2)
    kv = B * S * counts.kv_bytes_per_token(cfg, 2)
    parts = (Work("attention", 0.0, kv), Work("weights", 2 * B * P, pbytes))
    W, C = n * chip.hbm_bytes_per_s, n * chip.bf16_flops_per_s
    # The scaling book's eq. 1 and its lower bound, as the source writes them.
    eq1 = kv / W + max(2 * B * P / C, pbytes / W)
    decode = step_time(decode_roofline.decode_step_cost(P, pbytes, kv, B), chip, n)
    assert decode == step_time(StepCost(parts), chip, n)
    assert decode == pytest.approx(eq1, rel=1e-12)
    lower = step_time(decode_roofline.lower_bound_step_cost(pbytes, kv), chip, n)
    assert lower == step_time(StepCost((Work("all", 0.0, kv + pbytes),)), chip, n)
    assert lower == pytest.approx((kv + pbytes) / W, rel=1e-12)
    if S:
        fp = decode_roofline.decode_footprint(cfg, chip, batch=B, context=S, chips=n)
        assert step_time(fp.step, chip, n) == decode
        assert step_time(fp.lower_bound, chip, n) == lower

    # kipply's small- and large-batch latencies and her two regimes joined, as she writes them.
    latency_s = 4 * cfg.L * chip.hop_latency_s if n > 1 else 0.0
    small = latency.small_batch_cost(cfg, chip, n)
    assert step_time(small, chip, n) == step_time(
        StepCost((Work("weights", 0.0, 2 * P),), comm_latency_s=latency_s), chip, n)
    assert step_time(small, chip, n) == pytest.approx(2 * P / W + latency_s, rel=1e-12)
    assert work_time(small, chip, n) == pytest.approx(2 * P / W, rel=1e-12)
    assert small.comm_s == latency_s
    traffic = B * cfg.L * 4 * cfg.D * 2 / chip.interconnect_bytes_per_s if n > 1 else 0.0
    large = latency.large_batch_cost(cfg, chip, n, B)
    assert step_time(large, chip, n) == step_time(
        StepCost((Work("matmuls", B * 2 * P, 0.0),), comm_bandwidth_s=traffic), chip, n)
    assert step_time(large, chip, n) == pytest.approx(max(B * 2 * P / C, traffic), rel=1e-12)
    assert large.comm_s == traffic
    joined = step_time(latency.tensor_parallel_cost(cfg, chip, n, B, S), chip, n)
    exact = traffic * (n - 1) / n
    assert joined == pytest.approx(step_time(StepCost(parts, exact, latency_s), chip, n),
                                   rel=1e-12)
    assert joined == pytest.approx(max(eq1, exact) + latency_s, rel=1e-12)
    assert joined >= max(work_time(small, chip, n), work_time(large, chip, n)) * (1 - 1e-12)


@pytest.mark.parametrize("chip_name", ["H100 SXM", "A100 40GB"])
@pytest.mark.parametrize("n, B", [(2, 1), (8, 64), (16, 512)])
def test_kipplys_communication_is_the_pricing_of_the_two_all_reduces_per_layer(chip_name, n, B):
    """On a switched interconnect her 4·L collectives of B·D are what the layout pricing
    charges for the attention and MLP outputs' all-reduces: the same bytes, and 4·L passes,
    each of which the pricing charges NCCL's 3.6 µs + 0.47 µs per further GPU where her model
    charges one fixed message latency (the registry's: that of 8 GPUs, on the H100)."""
    cfg, chip = PRESETS["gopher-280b"], CHIPS[chip_name]
    if chip.max_chips is not None and n > chip.max_chips:
        chip = dataclasses.replace(chip, max_chips=n)
    both = [collective_time(Comm(what, what, "all-reduce", n, B * cfg.D * 2, cfg.L), chip)
            for what in ("attention output", "MLP output")]
    bw, lat = sum(b for b, _ in both), sum(t for _, t in both)
    joined = latency.tensor_parallel_cost(cfg, chip, n, B, 0)
    assert joined.comm_s - 4 * cfg.L * chip.hop_latency_s == pytest.approx(bw, rel=1e-12)
    assert lat == pytest.approx(4 * cfg.L * (3.6e-6 + (n - 1) * 0.47e-6), rel=1e-12)
    if chip_name == "H100 SXM" and n == 8:         # 6.89 µs, which the registry rounds to 6.9
        assert lat == pytest.approx(4 * cfg.L * chip.hop_latency_s, rel=2e-3)


@pytest.mark.parametrize("preset", ["llama-2-13b", "mixtral-8x7b", "deepseek-v2-lite"])
@pytest.mark.parametrize("B, S, T", [(1, 512, 512), (32, 4096, 1024)])
def test_the_serving_steps_are_views(preset, B, S, T):
    cfg, chip = PRESETS[preset], CHIPS["H100 SXM"]
    kvpt, pbytes = counts.kv_bytes_per_token(cfg, 2), counts.param_bytes(cfg, 2)
    W, C = chip.hbm_bytes_per_s, chip.bf16_flops_per_s
    flops = counts.forward_flops(cfg, B, 1, 0, logits_for=1)
    step = step_time(phase_time.generate_step_cost(cfg, B, B * S), chip)
    assert step == step_time(StepCost((Work("attention", 0.0, B * S * kvpt),
                                       Work("weights", flops, pbytes))), chip)
    assert step == pytest.approx(B * S * kvpt / W + max(flops / C, pbytes / W), rel=1e-12)
    flops = counts.forward_flops(cfg, B, T, S, logits_for=1)
    prefill = step_time(phase_time.prefill_step_cost(cfg, T, S - T, B), chip)
    assert prefill == step_time(StepCost((Work("pass", flops, pbytes + B * S * kvpt),)), chip)
    assert prefill == pytest.approx(max(flops / C, (pbytes + B * S * kvpt) / W), rel=1e-12)


@pytest.mark.parametrize("layout", moe_layouts.MOE_LAYOUTS)
@pytest.mark.parametrize("B", [8, 256])
def test_the_moe_layouts_step_is_a_view(layout, B):
    cfg, chip, n, S = PRESETS["mixtral-8x7b"], CHIPS["H100 SXM"], 8, 2048
    got = moe_layouts.moe_decode_step(cfg, chip, n, B, layout, context=S)
    comm = (layout_comms(cfg, chip, n, B, 1, "1d-ws") if layout == "1d-ws"
            else expert_parallel_comms(cfg, chip, n, B, 1))
    flops = (2 * params.active_param_count(cfg) * B + decode_attention_flops(cfg, B, S)) / n
    kv = counts.kv_cache_bytes(cfg, B, S, 2) / n
    assert got.comm == comm and got.flops == flops and got.kv_bytes == kv
    assert step_time(got.cost, chip) == step_time(
        StepCost((Work("step", flops, got.weight_bytes + kv),), comm.bandwidth_s,
                 comm.latency_s), chip)
    roof = max(flops / chip.bf16_flops_per_s, (got.weight_bytes + kv) / chip.hbm_bytes_per_s)
    assert step_time(got.cost, chip) == pytest.approx(
        max(roof, comm.bandwidth_s) + comm.latency_s, rel=1e-12)


@pytest.mark.parametrize("preset, chip_name, n, B, S, T", [
    ("llama-2-13b", "TPU v5e", 1, 8, 2048, 512), ("llama-2-70b", "TPU v5e", 16, 64, 4096, 1024),
    ("mixtral-8x7b", "H100 SXM", 8, 32, 4096, 4096), ("deepseek-v2-lite", "H100 SXM", 2, 4,
                                                        1024, 256)])
def test_the_estimator_composes_the_core(preset, chip_name, n, B, S, T):
    """The bare-roofline estimate, in the 1D or 2D layout, rebuilt as StepCosts: attention
    over the cache; the dense weights (the input embedding read B rows deep) and, for a
    mixture, the routed experts the batch touches as a part of their own; the prefill the
    same over its B·T tokens with the cache it writes; and a mixture's routed rows: each
    of n chips in the 1D layout holds a slice of every expert, so each writes, reads, writes
    and reads back all tokens · k rows of D bfloat16 numbers in every routing layer."""
    cfg, chip = PRESETS[preset], CHIPS[chip_name]
    est = estimate(cfg, chip, batch=B, context=S, prompt=T, chips=n, weight_bytes=2,
                   kv_bytes=2, efficiency="ideal", layout="1d-ws" if n > 1 else None)
    copies = n if cfg.mla is not None else 1
    routed = sum(t.size for t in params.tensors(cfg) if t.role == "expert")
    experts = routed * 2
    table = 0 if cfg.tied_embeddings else cfg.V * cfg.D * 2

    def parts(tokens, flops, extra, name):
        touched = weight_bytes_read(cfg, experts, experts, tokens) if cfg.moe else 0.0
        dense = est.param_bytes - experts - table + min(tokens, cfg.V) * cfg.D * 2 * (
            table > 0)
        expert_flops = 2 * tokens * routed * cfg.moe.k / cfg.moe.E if cfg.moe else 0.0
        out = [Work(name, flops - expert_flops, dense + extra)]
        if cfg.moe is None:
            return out
        routing_layers = cfg.L - len(set(cfg.moe.dense_layers))
        rows = n * 4 * (tokens * cfg.moe.k) * cfg.D * 2 * routing_layers
        return out + [Work("experts", expert_flops, touched, grouped=True),
                      Work("routed rows", 0.0, rows)]

    kv = counts.kv_cache_bytes(cfg, B, S, 2)
    decode = (Work("attention", decode_attention_flops(cfg, B, S), copies * kv, cache=True),
              *parts(B, 2 * B * counts.matmul_params(cfg), 0.0, "weights"))
    comm = (layout_comms(cfg, chip, n, B, 1, est.layout, est.layout_x) if n > 1 else None)
    bw, lat = (comm.bandwidth_s, comm.latency_s) if comm else (0.0, 0.0)
    assert est.step_time_s == pytest.approx(step_time(StepCost(decode, bw, lat), chip, n),
                                            rel=1e-12)
    pre = layout_comms(cfg, chip, n, B, T, est.layout, est.layout_x) if n > 1 else None
    prefill = StepCost(tuple(parts(B * T, counts.forward_flops(cfg, B, T, T, logits_for=1),
                                   copies * counts.kv_cache_bytes(cfg, B, T, 2), "pass")),
                       pre.bandwidth_s if pre else 0.0, pre.latency_s if pre else 0.0)
    assert est.prefill_time_s == pytest.approx(step_time(prefill, chip, n), rel=1e-12)
