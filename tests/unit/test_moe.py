"""Mixtures of experts: the router's rules, and dense dispatch = gather/scatter dispatch.

The router is checked against a per-token numpy transcription of the rules (softmax or
sigmoid scores, a selection bias, group-limited choice, renormalisation, the routed scale).
The two dispatches must agree on random configurations and inputs, and the sparse one must
not touch an expert no token chose: poisoning every unchosen expert with NaN leaves its
output unchanged (the dense reference, which runs every expert, turns to NaN).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.model import decoder, moe
from inferbook.model.config import ModelConfig
from inferbook.model.features import MoE


@st.composite
def moe_configs(draw):
    groups = draw(st.sampled_from([1, 2, 4]))
    E = groups * draw(st.integers(1, 3)) if groups > 1 else draw(st.integers(2, 6))
    topk_groups = draw(st.integers(1, groups))
    k = draw(st.integers(1, topk_groups * (E // groups)))
    score_bias = draw(st.booleans())
    shared_F = draw(st.sampled_from([0, 12]))
    spec = MoE(E=E, k=k, F=draw(st.sampled_from([8, 16])), shared_F=shared_F,
               shared_gate=shared_F > 0 and draw(st.booleans()),
               renormalize=draw(st.booleans()),
               scoring="sigmoid" if score_bias else draw(st.sampled_from(["softmax", "sigmoid"])),
               routed_scale=draw(st.sampled_from([1.0, 2.5])), groups=groups,
               topk_groups=topk_groups, score_bias=score_bias)
    return ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=16, moe=spec,
                       activation=draw(st.sampled_from(["silu", "gelu_tanh"])))


def layer(cfg, seed=0):
    return decoder.init_params(cfg, seed)["layers"][0]


def inputs(cfg, B, T, seed):
    return jax.random.normal(jax.random.key(seed), (B, T, cfg.D), jnp.float32)


def route_numpy(p, x_ND, cfg):
    """The routing rules, token by token, in float64."""
    m = cfg.moe
    logits = np.asarray(x_ND, np.float64) @ np.asarray(p["router"], np.float64)
    experts, weights = [], []
    for row in logits:
        if m.scoring == "softmax":
            scores = np.exp(row - row.max()) / np.exp(row - row.max()).sum()
        else:
            scores = 1 / (1 + np.exp(-row))
        choice = scores + np.asarray(p["router_bias"]) if m.score_bias else scores.copy()
        if m.groups > 1:
            per = m.E // m.groups
            by_group = choice.reshape(m.groups, per)
            rank = np.sort(by_group, 1)[:, ::-1]
            group_score = rank[:, :2].sum(1) if m.score_bias else rank[:, 0]
            kept = np.argsort(-group_score, kind="stable")[:m.topk_groups]
            allowed = np.isin(np.arange(m.E) // per, kept)
            choice = np.where(allowed, choice, -np.inf)
        chosen = np.argsort(-choice, kind="stable")[:m.k]
        w = scores[chosen]
        if m.renormalize:
            w = w / w.sum()
        experts.append(chosen)
        weights.append(w * m.routed_scale)
    return np.array(experts), np.array(weights)


@settings(max_examples=10)
@given(cfg=moe_configs(), seed=st.integers(0, 5))
def test_the_router_follows_the_rules(cfg, seed):
    p = layer(cfg, seed)
    x = inputs(cfg, 3, 5, seed).reshape(-1, cfg.D)
    weights, experts = moe.route(p, x, cfg)
    ref_experts, ref_weights = route_numpy(p, x, cfg)
    # Same experts (in any order), with the same weight each.
    order = np.argsort(np.asarray(experts), 1)
    ref_order = np.argsort(ref_experts, 1)
    np.testing.assert_array_equal(np.take_along_axis(np.asarray(experts), order, 1),
                                  np.take_along_axis(ref_experts, ref_order, 1))
    np.testing.assert_allclose(np.take_along_axis(np.asarray(weights), order, 1),
                               np.take_along_axis(ref_weights, ref_order, 1), rtol=1e-5,
                               atol=1e-6)


@settings(max_examples=10)
@given(cfg=moe_configs(), B=st.integers(1, 3), T=st.integers(1, 9), seed=st.integers(0, 5))
def test_gather_scatter_dispatch_equals_the_dense_reference(cfg, B, T, seed):
    p, x = layer(cfg, seed), inputs(cfg, B, T, seed + 1)
    dense = jax.jit(moe.moe_dense, static_argnums=2)(p, x, cfg)
    sparse = jax.jit(moe.moe_sparse, static_argnums=2)(p, x, cfg)
    np.testing.assert_allclose(np.asarray(sparse), np.asarray(dense), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("B, T", [(1, 1), (4, 1), (2, 6)])
def test_the_sparse_dispatch_never_touches_an_unchosen_expert(B, T):
    cfg = ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=16, moe=MoE(E=32, k=2, F=8))
    p, x = layer(cfg, 3), inputs(cfg, B, T, 4)
    _, experts = moe.route(p, x.reshape(-1, cfg.D), cfg)
    unused = np.setdiff1d(np.arange(cfg.moe.E), np.asarray(experts))
    assert unused.size > 0
    poisoned = dict(p)
    for name in ("we_gate", "we_up", "we_down"):
        poisoned[name] = p[name].at[unused].set(jnp.nan)
    clean = moe.moe_dense(p, x, cfg)
    np.testing.assert_allclose(np.asarray(moe.moe_sparse(poisoned, x, cfg)), np.asarray(clean),
                               rtol=1e-5, atol=1e-5)
    assert np.isnan(np.asarray(moe.moe_dense(poisoned, x, cfg))).all()


def test_tiles_hold_about_one_experts_share_of_the_assignments():
    assert moe.tile_rows(2, 8) == 8                 # decode: the smallest tile
    assert moe.tile_rows(4096 * 8, 64) == 256       # prefill: capped
    assert moe.tile_rows(24 * 2, 4) == 16           # 12 per expert, rounded up to a power of 2


def test_dense_layers_keep_the_mlp():
    cfg = ModelConfig(L=3, D=16, F=24, N=2, K=1, H=8, V=16,
                      moe=MoE(E=4, k=2, F=8, shared_F=8, dense_layers=(0,)))
    shapes = decoder.param_shapes(cfg)["layers"]
    assert "w_gate" in shapes[0] and "router" not in shapes[0]
    assert shapes[1]["we_down"] == (4, 8, 16) and shapes[2]["ws_down"] == (8, 16)


def test_code_for_the_plain_decoder_refuses_experts():
    from family_configs import FAMILY_CONFIGS

    from inferbook.memory import kv_quant
    from inferbook.model.config import ConfigError
    from inferbook.parallel.mesh import named_mesh
    from inferbook.parallel.sharding import make_plan
    cfg = FAMILY_CONFIGS["mixtral"]
    # The sharded layouts run experts on 1d-ws and expert-parallel only (test_expert_parallel).
    with pytest.raises(ConfigError, match="2d-ws does not run mixtures of experts"):
        make_plan(cfg, named_mesh("2x4"), "2d-ws")
    with pytest.raises(ConfigError, match="sharded layouts: written for the plain.*latent"):
        make_plan(FAMILY_CONFIGS["deepseek_v3"], named_mesh("2x4"), "expert-parallel")
    with pytest.raises(ConfigError, match="quantized KV cache: written for the plain decoder"):
        kv_quant.init_cache(cfg, 1, 8)
