"""Expert parallelism against the single-device model, the capacity rule and the compiled program.

Generation with experts split over the mesh (and, in the 1d-ws layout, every expert split over
F) gives the unsharded model's greedy tokens; one MoE block with a small capacity drops
exactly the assignments that arrive after an expert's C slots are full, and its output is the
dense reference without them; the collectives of the compiled programs are the inventory of
`collectives.expert_parallel_collectives`, byte for byte and label by label.
"""

import dataclasses
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.model import decode, decoder
from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.features import MoE
from inferbook.model.moe import moe_dense, route
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.expert_parallel import dispatch_slots, moe_program
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import LayoutError, make_plan, shard_params
from inferbook.perf import collectives, hlo

SEQUENCES = 8                            # prompts per batch: one per device of 8
NEW = 4
# A shared expert with Qwen2-MoE's gate and a dense first layer; DeepSeek-V3's routing
# (sigmoid scores, a selection bias, groups) with every layer an MoE.
SHARED = ModelConfig(L=2, D=32, F=48, N=8, K=2, H=4, V=64, name="moe-shared",
                     moe=MoE(E=8, k=2, F=16, shared_F=16, shared_gate=True, renormalize=False,
                             dense_layers=(0,)))
GROUPED = ModelConfig(L=2, D=32, F=48, N=8, K=2, H=4, V=64, name="moe-grouped",
                      moe=MoE(E=8, k=2, F=16, scoring="sigmoid", score_bias=True, groups=4,
                              topk_groups=2, routed_scale=2.5))


GRID = [  # config, mesh, layout, options: experts over 8 devices; [E_Z, D_X, F_Y]; F over 8
    (SHARED, "1x8", "expert-parallel", {}),
    (GROUPED, "2x2x2", "expert-parallel", {"x": "x", "experts": "z"}),
    (SHARED, "2x4", "1d-ws", {}),
]


@pytest.mark.parametrize("cfg, mesh, layout, options", GRID,
                         ids=[f"{g[2]}-{g[1]}-{g[0].name}" for g in GRID])
@settings(max_examples=4)       # each example after the first reuses the compiled programs
@given(seed=st.integers(0, 2 ** 16),
       lengths=st.lists(st.integers(1, 16), min_size=SEQUENCES, max_size=SEQUENCES))
def test_sharded_generation_equals_the_single_device_model(cfg, mesh, layout, options, seed,
                                                           lengths):
    params = decoder.init_params(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(0, cfg.V, n).tolist() for n in lengths]   # padded to 16 tokens
    plan = make_plan(cfg, named_mesh(mesh), layout, **options)
    assert sd.generate(params, cfg, prompts, NEW, plan=plan).tokens == \
        decode.generate(params, cfg, prompts, NEW).tokens


# One MoE block with a capacity: the dense reference minus the dropped assignments -----------

LAYER = ModelConfig(L=1, D=32, F=48, N=8, K=2, H=4, V=64, name="moe-layer",
                    moe=MoE(E=8, k=2, F=16, shared_F=16))
B, T = 8, 3                             # 8 sequences of 3 tokens: 6 tokens on each of 4 devices


@lru_cache(maxsize=None)
def layer_program(capacity_factor):
    plan = make_plan(LAYER, named_mesh("2x4"), "expert-parallel", experts="y",
                     capacity_factor=capacity_factor)          # E over y (4), F and heads over x
    return plan, jax.jit(moe_program(LAYER, plan))


def expected_drops(experts_Nk: np.ndarray, devices: int, C: int) -> np.ndarray:
    """Which assignments find their expert's C slots full, device by device, in token order."""
    dropped = np.zeros(experts_Nk.shape, bool)
    for block in np.split(np.arange(len(experts_Nk)), devices):
        taken: dict[int, int] = {}
        for n in block:
            for j, e in enumerate(experts_Nk[n]):
                dropped[n, j] = taken.get(e, 0) >= C
                taken[e] = taken.get(e, 0) + 1
    return dropped


@given(seed=st.integers(0, 2 ** 16), capacity_factor=st.sampled_from([None, 0.5, 1.0, 2.0]))
def test_a_capacity_drops_exactly_the_assignments_past_it(seed, capacity_factor):
    plan, program = layer_program(capacity_factor)
    every = decoder.init_params(LAYER, seed=seed)
    params = every["layers"][0]
    x_BTD = jax.random.normal(jax.random.key(seed), (B, T, LAYER.D))
    out_BTD, dropped_d = program(shard_params(every, LAYER, plan)["layers"][0], x_BTD)
    # The reference: on one device, every assignment; then take the dropped ones away.
    h_ND = decoder.rms_norm(x_BTD, params["mlp_norm"], LAYER.norm_eps).reshape(B * T, -1)
    weights_Nk, experts_Nk = (np.asarray(a) for a in route(params, h_ND, LAYER))
    devices, tokens = plan.size(plan.data), B * T // plan.size(plan.data)
    C = collectives.expert_capacity(tokens, LAYER.moe.E, LAYER.moe.k, capacity_factor)
    drop_Nk = expected_drops(experts_Nk, devices, C)
    assert dropped_d.tolist() == drop_Nk.reshape(devices, -1).sum(1).tolist()
    if capacity_factor is None:
        assert not drop_Nk.any()
    if capacity_factor == 0.5:   # C = 1: 12 assignments for 8 slots, at least 4 are dropped
        assert C == 1 and all(d >= tokens * LAYER.moe.k - LAYER.moe.E for d in dropped_d)
    expert = jax.vmap(lambda e, x: decoder.ACTIVATIONS["silu"](x @ params["we_gate"][e])
                      * (x @ params["we_up"][e]) @ params["we_down"][e])
    lost_ND = np.zeros(h_ND.shape, np.float32)
    for j in range(LAYER.moe.k):
        y_ND = np.asarray(expert(jnp.asarray(experts_Nk[:, j]), h_ND))
        lost_ND += np.where(drop_Nk[:, j, None], weights_Nk[:, j, None] * y_ND, 0)
    want = x_BTD + moe_dense(params, h_ND[None], LAYER)[0].reshape(B, T, -1) \
        - lost_ND.reshape(B, T, -1)
    np.testing.assert_allclose(out_BTD, want, atol=2e-5, rtol=2e-5)


def test_slots_count_earlier_assignments_to_the_same_expert():
    experts_Nk = jnp.asarray([[0, 1], [1, 2], [0, 1], [3, 0]])
    assert dispatch_slots(experts_Nk, 4).tolist() == [[0, 0], [1, 0], [1, 2], [0, 2]]
    for tokens, E, k in [(6, 8, 2), (1, 256, 8), (1000, 8, 2)]:
        assert collectives.expert_capacity(tokens, E, k) == tokens     # dropless
        assert collectives.expert_capacity(tokens, E, k, 1.0) == min(tokens,
                                                                      -(-tokens * k // E))
        assert collectives.expert_capacity(tokens, E, k, 1e-9) == 1


# Collectives of the compiled programs = the inventory --------------------------------------

WIDE = ModelConfig(L=2, D=256, F=512, N=8, K=2, H=32, V=256, name="moe-wide",
                   moe=MoE(E=8, k=2, F=128, shared_F=128, dense_layers=(0,)))
PROGRAMS = [  # mesh, layout, options, phase
    ("1x8", "expert-parallel", {"capacity_factor": 1.5}, "decode"),
    ("2x2x2", "expert-parallel", {"x": "x", "experts": "z"}, "decode"),
    ("2x4", "expert-parallel", {"experts": "y"}, "prefill"),
    ("2x4", "1d-ws", {}, "decode"),
]
BATCH, PROMPT, S = 8, 8, 16


def inventory(cfg, plan, tokens):
    Y = plan.size(plan.kv_heads)
    if plan.layout == "1d-ws":
        return collectives.ws1d_collectives(cfg, BATCH, tokens, plan.m, Y, 4)
    return collectives.expert_parallel_collectives(
        cfg, BATCH, tokens, plan.size(plan.experts), plan.m, plan.size(plan.fsdp), Y,
        plan.capacity_factor, 4, 4)


@pytest.mark.parametrize("mesh, layout, options, phase", PROGRAMS,
                         ids=[f"{p[1]}-{p[0]}-{p[3]}" for p in PROGRAMS])
def test_the_compiled_programs_move_what_the_inventory_says(mesh, layout, options, phase):
    plan = make_plan(WIDE, named_mesh(mesh), layout, **options)
    params, cache = sd.abstract_inputs(WIDE, plan, BATCH, S)
    if phase == "prefill":
        tokens = jax.ShapeDtypeStruct((BATCH, PROMPT), jnp.int32)
        compiled = hlo.compile_fn(sd.prefill, params, WIDE, plan, tokens,
                                  jax.ShapeDtypeStruct((BATCH,), jnp.int32), cache)
    else:
        compiled = hlo.compile_fn(sd.decode_step, params, WIDE, plan,
                                  jax.ShapeDtypeStruct((BATCH,), jnp.int32), cache)
    colls = hlo.collectives(compiled)
    predicted = inventory(WIDE, plan, PROMPT if phase == "prefill" else 1)
    assert hlo.bytes_by_scope(colls) == collectives.total_bytes(predicted, by="scope")
    if layout == "expert-parallel":              # tokens travel along the expert axes only
        for c in [c for c in colls if c.scope in ("dispatch", "return")]:
            assert set(hlo.group_axes(c, plan.mesh)) <= set(plan.experts)
            assert c.group_size == plan.size(plan.experts)


def test_experts_over_Z_dispatch_over_Z_only_and_hold_their_share_of_the_weights():
    plan = make_plan(WIDE, named_mesh("2x2x2"), "expert-parallel", x="x", experts="z")
    params, _ = sd.abstract_inputs(WIDE, plan, BATCH, S)
    block = params["layers"][1]["we_gate"]                       # [E, D, F] -> [E_Z, D_X, F_Y]
    assert block.sharding.shard_shape(block.shape) == (4, 128, 64)


def test_what_the_layouts_cannot_run_is_refused_clearly():
    dense = dataclasses.replace(WIDE, moe=None)
    with pytest.raises(ConfigError, match="no mixture of experts"):
        make_plan(dense, named_mesh("2x4"), "expert-parallel")
    with pytest.raises(LayoutError, match="E=8 experts do not split 3 ways"):
        make_plan(WIDE, named_mesh("3"), "expert-parallel")
    with pytest.raises(ConfigError, match="with sequence axes does not run mixtures"):
        make_plan(WIDE, named_mesh("2x4"), "1d-ws", seq="x")
    with pytest.raises(ConfigError, match="q/k/v biases"):
        make_plan(WIDE.replace(qkv_bias=True), named_mesh("2x4"), "expert-parallel")
    with pytest.raises(LayoutError, match="capacity_factor must be a positive number"):
        make_plan(WIDE, named_mesh("2x4"), "expert-parallel", capacity_factor=0)
    with pytest.raises(LayoutError, match="distinct axes"):
        make_plan(WIDE, named_mesh("2x4"), "expert-parallel", x="x", experts="x")
