"""An efficiency, applied by the one step-time formula, against arithmetic written out here.

`step_cost.step_time` under an `Efficiency` must be, for any parts and any fractions: each
part's max(FLOPs / (chips · C · mfu [· experts_mfu]), bytes / (chips · W · its bandwidth
fraction)), summed; the collectives' bytes over the link fraction, overlapped with that sum or
added to it as the efficiency (or the step) says; their latency plus a fixed cost per pass;
a fixed cost per layer of its phase and per routing layer. The bare roofline (`IDEAL`) adds
nothing, so every view of the sources is unchanged by it. And the collectives' latency:
hops per torus axis, NCCL's growing fixed cost through a switch.
"""

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.perf import comm_time
from inferbook.perf.efficiency import IDEAL, Efficiency, with_overrides
from inferbook.perf.hardware import CHIPS, chip_from_json
from inferbook.perf.roofline import roofline_time
from inferbook.perf.step_cost import StepCost, Work, step_time

fractions = st.floats(0.01, 1.0)
seconds = st.floats(0.0, 1e-3)
amounts = st.floats(0, 1e15, allow_nan=False)


@given(st.lists(st.tuples(amounts, amounts, st.sampled_from([None, "int8", "int4", "fp8"]),
                          st.booleans(), st.booleans()), min_size=1, max_size=3),
       st.sampled_from(["H100 SXM", "TPU v5e", "A100 80GB"]), st.integers(1, 16),
       st.sampled_from(["bf16", "int8"]), fractions, fractions, fractions, fractions,
       fractions, fractions, fractions, seconds, seconds, seconds, seconds,
       st.floats(0, 1e-2), st.floats(0, 1e-3), st.integers(0, 500), st.integers(0, 100),
       st.integers(0, 100), st.sampled_from(["decode", "prefill"]),
       st.sampled_from([None, True, False]), st.booleans())
def test_a_step_under_an_efficiency_is_the_arithmetic(
        parts, chip_name, n, compute, mbu, cache, mfu, int8, int4, experts, link, per_pass,
        decode_layer, prefill_layer, moe_layer, bw, lat, passes, layers, moe_layers, phase,
        overlap, default_overlap):
    chip = CHIPS[chip_name]
    eff = Efficiency(mbu=mbu, mbu_cache=cache, mfu_bf16=mfu, mfu_int8=mfu, weight_only_int8=int8,
                     weight_only_int4=int4, experts_mfu=experts, link=link,
                     pass_overhead_s=per_pass, decode_layer_s=decode_layer,
                     prefill_layer_s=prefill_layer, moe_layer_s=moe_layer,
                     decode_overlap=default_overlap, prefill_overlap=not default_overlap)
    works = tuple(Work(f"p{i}", f, b, fmt, grouped=g, cache=c)
                  for i, (f, b, fmt, g, c) in enumerate(parts))
    cost = StepCost(works, bw, lat, passes, layers, phase, overlap, moe_layers)
    C = n * (chip.bf16_flops_per_s if compute == "bf16" else chip.int8_ops_per_s)
    work = 0.0
    for f, b, fmt, grouped, is_cache in parts:
        fraction = cache if is_cache else mbu * {None: 1, "fp8": 1, "int8": int8,
                                                 "int4": int4}[fmt]
        work += max(f / (C * mfu * (experts if grouped else 1)),
                    b / (n * chip.hbm_bytes_per_s * fraction))
    comm = bw / link
    overlapped = overlap if overlap is not None else (
        default_overlap if phase == "decode" else not default_overlap)
    joined = max(work, comm) if overlapped else work + comm
    fixed = layers * (decode_layer if phase == "decode" else prefill_layer) \
        + moe_layers * moe_layer
    want = joined + lat + passes * per_pass + fixed
    assert step_time(cost, chip, n, compute, eff) == pytest.approx(want, rel=1e-9, abs=1e-300)


@given(st.lists(st.tuples(amounts, amounts), min_size=1, max_size=3),
       st.sampled_from(["H100 SXM", "TPU v5e"]), st.integers(1, 8), st.floats(0, 1e-2),
       st.floats(0, 1e-3), st.integers(0, 100), st.integers(0, 100))
def test_the_bare_roofline_adds_nothing(parts, chip_name, n, bw, lat, passes, layers):
    """Under IDEAL a step is max(Σ rooflines, bandwidth) + latency, however many passes and
    layers it counts: the views of the sources stay what they were."""
    chip = CHIPS[chip_name]
    cost = StepCost(tuple(Work("p", f, b) for f, b in parts), bw, lat, passes, layers,
                    "prefill")
    merged = dataclasses.replace(chip, hbm_bytes_per_s=n * chip.hbm_bytes_per_s,
                                 bf16_flops_per_s=n * chip.bf16_flops_per_s)
    work = sum(roofline_time(f, b, merged) for f, b in parts)
    assert step_time(cost, chip, n) == pytest.approx(max(work, bw) + lat, rel=1e-12)
    assert step_time(cost, chip, n) == step_time(cost, chip, n, efficiency=IDEAL)


def test_fp8_arithmetic_uses_the_fp8_peak_and_a_chip_without_one_refuses():
    cost = StepCost((Work("matmuls", 1e15, 0.0),))
    h100 = CHIPS["H100 SXM"]
    assert step_time(cost, h100, compute="fp8") == 1e15 / h100.fp8_flops_per_s
    with pytest.raises(ValueError, match="no fp8 peak"):
        step_time(cost, CHIPS["A100 80GB"], compute="fp8")


@pytest.mark.parametrize("field, value", [("mbu", 0.0), ("mbu", 1.01), ("mfu_fp8", -0.1),
                                          ("link", math.nan), ("decode_layer_s", -1e-6),
                                          ("moe_layer_s", math.inf)])
def test_an_efficiency_out_of_range_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        Efficiency(**{field: value})


def test_overrides_replace_the_fractions_and_say_so():
    eff = Efficiency(mbu=0.7, mbu_cache=0.8, mfu_bf16=0.6, mfu_fp8=0.5, decode_layer_s=1e-5,
                     name="fit", source="a fit")
    both = with_overrides(eff, mbu=0.5, mfu=0.9)
    assert (both.mbu, both.mbu_cache) == (0.5, 0.5)
    assert both.mfu("bf16") == both.mfu("fp8") == both.mfu("int8") == 0.9
    assert both.decode_layer_s == 1e-5 and "mbu 0.5" in both.name and "mfu 0.9" in both.source
    assert with_overrides(eff) is eff


@pytest.mark.parametrize("group, axes, hops", [(2, 1, 1), (4, 2, 2), (8, 2, 3), (16, 2, 4),
                                               (64, 2, 8), (64, 3, 6), (16, 1, 8)])
def test_a_torus_pass_takes_half_of_each_rings_length_in_hops(group, axes, hops):
    """A group spanning `axes` axes forms one ring per axis; a bidirectional ring of m chips
    takes m/2 hops: 16 chips on a 4 × 4 torus pay 2 + 2, not the one ring's 16/2."""
    chip = CHIPS["TPU v4"]
    rings = comm_time.torus_ring_lengths(group, axes)
    assert math.prod(rings) == group and len(rings) == axes
    assert comm_time.collective_pass_latency(chip, group, axes) == \
        pytest.approx(hops * chip.hop_latency_s)


@pytest.mark.parametrize("chip_name, base, step", [("H100 SXM", 3.6e-6, 0.47e-6),
                                                   ("L4", 3.6e-6, 1.0e-6),
                                                   ("MI300X", 12e-6, 0.8e-6)])
@pytest.mark.parametrize("group", [2, 4, 8])
def test_a_switched_pass_grows_with_the_group(chip_name, base, step, group):
    """NCCL's (RCCL's) ring model: a fixed cost plus one per ring step, g − 1 of them."""
    chip = CHIPS[chip_name]
    assert comm_time.collective_pass_latency(chip, group) == \
        pytest.approx(base + (group - 1) * step)
    assert comm_time.collective_pass_latency(chip, 1) == 0.0


def test_a_chip_without_the_growth_pays_one_message_latency_per_pass():
    chip = chip_from_json({"hbm_bytes": 8e10, "hbm_bandwidth": 2e12, "flops": 3e14,
                           "interconnect": "NVLink", "link_bytes_per_s": 2.5e10, "links": 12,
                           "hop_latency_s": 9e-6})
    assert [comm_time.collective_pass_latency(chip, g) for g in (2, 8)] == [9e-6, 9e-6]
