"""Collectives and FLOPs read from compiled programs, against the mesh and the estimator.

The layouts' programs are compiled from shapes only (`abstract_inputs`), for a model wide
enough (D = 512) that the matmuls dominate its FLOPs, as they do in the estimator.
"""

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from inferbook.model.config import ModelConfig
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.mesh import named_mesh, shard_map
from inferbook.parallel.sharding import make_plan
from inferbook.perf import collectives, counts, hlo

B, T, S = 8, 32, 64


def test_every_collective_is_listed_with_its_kind_bytes_and_device_groups():
    mesh = named_mesh("2x4")
    ids = np.arange(8).reshape(2, 4)               # logical device ids of the mesh's positions
    rows = {tuple(r) for r in ids.tolist()}        # groups along y
    cols = {tuple(c) for c in ids.T.tolist()}      # groups along x

    def body(a, b):                                # a: [16, 8] replicated, b: [4, 4] block of y
        s = jax.lax.psum(a, ("x", "y"))
        g = jax.lax.all_gather(b, "y", axis=1, tiled=True)          # [4, 16]
        r = jax.lax.psum_scatter(g * 2, "y", scatter_dimension=1, tiled=True)
        t = jax.lax.all_to_all(a, "y", 0, 1, tiled=True)            # [4, 32]
        p = jax.lax.ppermute(b, "x", [(0, 1), (1, 0)])
        return s, r + p, t

    f = shard_map(body, mesh, in_specs=(P(), P(None, "y")),
                  out_specs=(P(), P(None, "y"), P(None, "y")))
    compiled = hlo.compile_fn(f, jnp.ones((16, 8)), jnp.ones((4, 16)))
    found = {c.kind: c for c in hlo.collectives(compiled)}
    assert set(found) == set(hlo.KINDS)
    f32 = 4
    assert found["all-reduce"].bytes == 16 * 8 * f32 and found["all-reduce"].group_size == 8
    assert found["all-gather"].bytes == 4 * 16 * f32
    assert {tuple(g) for g in found["all-gather"].groups} == rows
    assert found["reduce-scatter"].bytes == 4 * 16 * f32          # its input, before scattering
    assert found["all-to-all"].bytes == 16 * 8 * f32
    assert {tuple(g) for g in found["all-to-all"].groups} == rows
    assert found["collective-permute"].bytes == 4 * 4 * f32
    assert {tuple(sorted(p)) for p in found["collective-permute"].groups} == cols
    assert hlo.group_axes(found["all-gather"], mesh) == ("y",)
    assert hlo.group_axes(found["all-reduce"], mesh) == ("x", "y")
    assert hlo.group_axes(found["collective-permute"], mesh) == ("x",)
    # Ring algorithms: an AllReduce sends 2(n-1)/n of the array, an AllGather (n-1)/n.
    assert found["all-reduce"].wire_bytes == pytest.approx(2 * 7 / 8 * 16 * 8 * f32)
    assert found["all-gather"].wire_bytes == pytest.approx(3 / 4 * 4 * 16 * f32)
    assert hlo.flops(compiled) > 0


def test_compact_replica_groups_expand_like_xla_documents_them():
    # [G,S]<=[dims]T(perm): iota over dims, transposed by perm, cut into G groups of S.
    assert hlo._iota_groups("[2,4]<=[8]") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert hlo._iota_groups("[4,2]<=[2,4]T(1,0)") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    line = "x = f32[4] all-reduce(y), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=add"
    assert hlo._groups(line, 8) == ((0, 4), (1, 5), (2, 6), (3, 7))


@lru_cache(maxsize=None)
def config(K: int, mlp: str = "gated") -> ModelConfig:
    return ModelConfig(L=2, D=512, F=2048, N=8, K=K, H=64, V=512, mlp=mlp, name=f"wide-K{K}")


@lru_cache(maxsize=None)
def program(layout: str, mesh: str, K: int, phase: str, mlp: str = "gated", seq=()):
    cfg = config(K, mlp)
    plan = make_plan(cfg, named_mesh(mesh), layout, seq=seq)
    params, cache = sd.abstract_inputs(cfg, plan, B, S)
    if phase == "prefill":
        tokens = jax.ShapeDtypeStruct((B, T), jnp.int32)
        lengths = jax.ShapeDtypeStruct((B,), jnp.int32)
        compiled = hlo.compile_fn(sd.prefill, params, cfg, plan, tokens, lengths, cache)
    else:
        tokens = jax.ShapeDtypeStruct((B,), jnp.int32)
        compiled = hlo.compile_fn(sd.decode_step, params, cfg, plan, tokens, cache)
    return cfg, plan, compiled


def expected(cfg, plan, phase):
    """The estimator's inventory for this program (float32 weights and activations)."""
    tokens = T if phase == "prefill" else 1
    Y = plan.size(plan.kv_heads)
    if plan.layout == "weight-gathered":
        return collectives.weight_gathered_collectives(cfg, plan.devices, Y, 4)
    if plan.seq:
        Q = plan.size(plan.seq)
        if phase == "prefill":
            return collectives.ring_attention_collectives(cfg, B, T, Q, plan.m, 4)
        return collectives.seq_sharded_decode_collectives(cfg, B, Q, plan.m, 4)
    if plan.layout == "1d-ws":
        return collectives.ws1d_collectives(cfg, B, tokens, plan.m, Y, 4)
    return collectives.ws2d_collectives(cfg, B, tokens, plan.size(plan.x), plan.m, Y, 4)


PROGRAMS = [
    ("1d-ws", "2x4", 2, "prefill", "gated", ()),      # KV heads over x, batch over y: AllToAll
    ("1d-ws", "2x4", 2, "decode", "gated", ()),
    ("1d-ws", "8", 8, "decode", "plain", ()),
    ("2d-ws", "2x2x2", 1, "prefill", "gated", ()),    # MQA: the cache split over the batch
    ("2d-ws", "2x2x2", 1, "decode", "gated", ()),
    ("2d-ws", "4x2", 8, "decode", "plain", ()),
    ("weight-gathered", "2x4", 2, "decode", "gated", ()),
    ("1d-ws", "2x4", 8, "prefill", "gated", ("x",)),  # ring attention
    ("1d-ws", "2x4", 8, "decode", "gated", ("x",)),   # sequence-sharded KV
]


@pytest.mark.parametrize("layout, mesh, K, phase, mlp, seq", PROGRAMS,
                         ids=["-".join(map(str, p[:5])) + ("-seq" if p[5] else "")
                              for p in PROGRAMS])
def test_communication_in_the_compiled_program_equals_the_estimator(layout, mesh, K, phase,
                                                                    mlp, seq):
    cfg, plan, compiled = program(layout, mesh, K, phase, mlp, seq)
    colls, predicted = hlo.collectives(compiled), expected(cfg, plan, phase)
    assert hlo.bytes_by_kind(colls) == collectives.total_bytes(predicted)
    # Line by line: each labelled part of the layout moves what its formula says.
    assert hlo.bytes_by_scope(colls) == collectives.total_bytes(predicted, by="scope")


@pytest.mark.parametrize("layout, mesh, K, phase, mlp, seq",
                         [p for p in PROGRAMS if not p[5]],
                         ids=["-".join(map(str, p[:5])) for p in PROGRAMS if not p[5]])
def test_flops_per_device_match_the_estimator(layout, mesh, K, phase, mlp, seq):
    """Every layout divides the matmuls evenly: FLOPs per device = model FLOPs / devices."""
    cfg, plan, compiled = program(layout, mesh, K, phase, mlp, seq)
    if phase == "prefill":
        model_flops = counts.forward_flops(cfg, B, T, T, logits_for=1)
    else:
        model_flops = counts.forward_flops(cfg, B, 1, S + 1)
    assert hlo.flops(compiled) == pytest.approx(model_flops / plan.devices, rel=0.05)
