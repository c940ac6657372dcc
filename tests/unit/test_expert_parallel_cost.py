"""What expert parallelism holds and moves, from the formulas, against compiled programs.

Worked problem 6's layout [E_Z, D_X, F_Y] holds on each device the weight bytes the formula
says (the shardings of the full-size model, and a compiled program's arguments); one MoE
block, tensor-parallel or expert-parallel, moves in its compiled program the bytes of the
inventory at every batch; the priced collectives and the EP-vs-TP crossover follow from them.
"""

import math
from functools import lru_cache

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.model.config import ModelConfig
from inferbook.model.features import MoE
from inferbook.model.presets import get_preset
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.expert_parallel import moe_program
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import make_plan
from inferbook.perf import collectives, hlo, moe_layouts
from inferbook.perf.hardware import get_chip
from inferbook.perf.layout_comms import expert_parallel_comms
from inferbook.perf.step_cost import step_time


def problem6(L: int | None = None) -> ModelConfig:
    """Worked problem 5's model: the scaling book's 18B model with 16 experts, 2 per token."""
    cfg = get_preset("scaling-book-18b")
    return cfg.replace(moe=MoE(E=16, k=2, F=cfg.F), name="wp5-moe", L=L or cfg.L)


def shard_bytes(tree) -> int:
    return sum(math.prod(a.sharding.shard_shape(a.shape)) * a.dtype.itemsize
               for a in jax.tree.leaves(tree))


@pytest.mark.parametrize("mesh, layout, options, XYZ", [
    ("2x2x2", "expert-parallel", {"x": "x", "experts": "z"}, (2, 2, 2)),   # [E_Z, D_X, F_Y]
    ("2x4", "expert-parallel", {"experts": "y"}, (1, 2, 4)),              # X = 1, as served
    ("2x4", "1d-ws", {}, (1, 8, 1)),                                      # every F over 8
])
def test_each_device_holds_the_weight_bytes_of_the_formula(mesh, layout, options, XYZ):
    cfg = problem6()
    plan = make_plan(cfg, named_mesh(mesh), layout, **options)
    params, _ = sd.abstract_inputs(cfg, plan, 8, 16, jnp.bfloat16)      # nothing allocated
    X, Y, Z = XYZ
    assert shard_bytes(params) == moe_layouts.expert_parallel_param_bytes(cfg, X, Y, Z, 2)
    # First principles for the experts alone: 3·E·D·F per layer, split over all devices.
    experts = sum(shard_bytes(p[w]) for p in params["layers"] for w in ("we_gate", "we_up",
                                                                         "we_down"))
    assert experts == 3 * cfg.L * 16 * cfg.D * cfg.F * 2 // 8


def test_a_compiled_decode_step_takes_those_bytes_as_its_arguments():
    cfg = problem6(L=2)                  # two of the 64 identical layers: a quick compile
    plan = make_plan(cfg, named_mesh("2x2x2"), "expert-parallel", x="x", experts="z")
    B, S = 8, 16
    params, cache = sd.abstract_inputs(cfg, plan, B, S, jnp.bfloat16)
    compiled = hlo.compile_fn(sd.decode_step, params, cfg, plan,
                              jax.ShapeDtypeStruct((B,), jnp.int32), cache)
    # The cache [B_XZ, K_Y, S, H] of keys and values per layer, lengths and tokens [B] int32.
    cache_bytes = 2 * cfg.L * (B // 4) * (cfg.K // 2) * S * cfg.H * 2 + 2 * B * 4
    assert compiled.memory_analysis().argument_size_in_bytes == \
        moe_layouts.expert_parallel_param_bytes(cfg, 2, 2, 2, 2) + cache_bytes


# One MoE block, tensor-parallel and expert-parallel, at several batches ----------------------

BLOCK = ModelConfig(L=1, D=128, F=256, N=8, K=8, H=16, V=128, name="moe-block",
                    moe=MoE(E=8, k=2, F=64))


@lru_cache(maxsize=None)
def block_program(layout: str, batch: int, capacity_factor):
    plan = make_plan(BLOCK, named_mesh("2x4"), layout, capacity_factor=capacity_factor) \
        if layout == "expert-parallel" else make_plan(BLOCK, named_mesh("2x4"), layout)
    params, _ = sd.abstract_inputs(BLOCK, plan, 8, 8)
    x = jax.ShapeDtypeStruct((batch, 1, BLOCK.D), jnp.float32)
    return plan, hlo.compile_fn(moe_program(BLOCK, plan), params["layers"][0], x)


@given(batch=st.sampled_from([8, 16, 64]), capacity_factor=st.sampled_from([None, 1.0, 1.25]))
def test_each_layout_moves_the_bytes_of_its_formula_at_every_batch(batch, capacity_factor):
    for layout in ("1d-ws", "expert-parallel"):
        plan, compiled = block_program(layout, batch, capacity_factor)
        moved = hlo.bytes_by_scope(hlo.collectives(compiled))
        if layout == "1d-ws":            # one AllReduce of every token's [D], f32
            assert moved == {("mlp_out", "all-reduce"): batch * BLOCK.D * 4}
        else:                            # [E, C, D] to the experts and back, C per device
            C = collectives.expert_capacity(batch // 8, 8, 2, capacity_factor)
            assert moved == {("dispatch", "all-to-all"): 8 * C * BLOCK.D * 4,
                             ("return", "all-to-all"): 8 * C * BLOCK.D * 4}
        predicted = collectives.total_bytes(
            collectives.ws1d_collectives(BLOCK, batch, 1, 8, 8, 4) if layout == "1d-ws" else
            collectives.expert_parallel_collectives(BLOCK, batch, 1, 8, capacity_factor=
                                                    capacity_factor, bytes_per_element=4),
            by="scope")
        assert all(predicted[key] == value for key, value in moved.items())


def test_the_priced_dispatch_is_its_bytes_over_the_links_plus_one_latency_each():
    cfg, h100 = get_preset("mixtral-8x7b"), get_chip("H100 SXM")
    batch, cf = 64, 1.25
    C = collectives.expert_capacity(batch // 8, 8, 2, cf)
    priced = expert_parallel_comms(cfg, h100, 8, batch, 1, capacity_factor=cf)
    sent = 2 * cfg.L * 7 / 8 * (8 * C * cfg.D * 2)            # two AllToAlls per layer, bf16
    assert priced.bytes_sent == pytest.approx(sent)
    assert priced.bandwidth_s == pytest.approx(sent / (h100.link_bytes_per_s * h100.links))
    # each AllToAll one pass over the 8 GPUs at NCCL's ring latency, written out from the registry
    one_pass = h100.pass_latency_s + (8 - 1) * h100.step_latency_s
    assert priced.latency_s == pytest.approx(2 * cfg.L * one_pass)
    assert priced.collectives == 2 * cfg.L


@pytest.mark.parametrize("model, chip", [("mixtral-8x7b", "H100 SXM"),
                                         ("qwen3-30b-a3b", "TPU v5e")])
def test_the_crossover_is_the_first_batch_where_expert_parallelism_is_no_slower(model, chip):
    cfg, hw = get_preset(model), get_chip(chip)
    B = moe_layouts.crossover_batch(cfg, hw, 8, capacity_factor=1.25)
    assert B is not None and B % 8 == 0

    def step(batch, layout):
        return step_time(moe_layouts.moe_decode_step(cfg, hw, 8, batch, layout,
                                                     capacity_factor=1.25).cost, hw)

    assert step(B, "expert-parallel") <= step(B, "1d-ws")
    assert B == 8 or step(B - 8, "expert-parallel") > step(B - 8, "1d-ws")
    # The two differ by what each chip reads: n copies of everything but the experts.
    ep, tp = (moe_layouts.moe_decode_step(cfg, hw, 8, 8, lay) for lay in ("expert-parallel",
                                                                          "1d-ws"))
    held_1 = moe_layouts.expert_parallel_param_bytes(cfg, Y=1)          # one chip, all of it
    routed = cfg.L * 3 * cfg.moe.E * cfg.D * cfg.moe.F * 2           # no dense layers here
    assert ep.weight_bytes - tp.weight_bytes == pytest.approx(
        (held_1 - routed) - (moe_layouts.expert_parallel_param_bytes(cfg, Y=8)
                             - routed / 8), rel=1e-9)
