"""Every sharded layout equals the single-device model: logits, cache and greedy tokens.

Compilation dominates on a 2-core CPU, so each (layout, mesh, attention kind) combination
compiles its prefill and decode programs once and every assertion reuses them: generation
and the logit checks use the same shapes (8 prompts padded to 16 tokens, a cache of 20).
Each layout runs on every mesh (1x8, 2x4, 4x2, 2x2x2) and meets every attention kind (MHA,
GQA, MQA) on at least one of them.
"""

from functools import lru_cache

import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.mesh import MeshError, named_mesh, parse_mesh_shape
from inferbook.parallel.sharding import LayoutError, make_plan, shard_params

PROMPTS = [[1, 2, 3, 4, 5], [6, 7, 8], [9] * 11, [3, 1], [5, 5, 5, 5], [7], [2, 3, 4, 5, 6, 7],
           [8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]]
NEW = 4
ATOL = 1e-4


@lru_cache(maxsize=None)
def config(K: int, variant: bool = False) -> ModelConfig:
    """One layer with a gated SiLU MLP (compiles fast); or (variant) two layers with a plain
    GELU MLP, tied embeddings and a sliding window."""
    if variant:
        return ModelConfig(L=2, D=32, F=64, N=8, K=K, H=8, V=128, mlp="plain",
                           activation="gelu", tied_embeddings=True, window=6,
                           name=f"test-K{K}-variant")
    return ModelConfig(L=1, D=32, F=64, N=8, K=K, H=8, V=128, name=f"test-K{K}")


@lru_cache(maxsize=None)
def reference(K: int, variant: bool = False):
    """The unsharded model's prefill and decode steps: greedy tokens and the logits of the
    prompt and of the first decode step (the same two programs `decode.generate` runs)."""
    cfg = config(K, variant)
    params = decoder.init_params(cfg, seed=K)
    tokens_BT, lengths_B = decode.pad_prompts(PROMPTS, 16)
    cache = kvcache.init_cache(cfg, len(PROMPTS), tokens_BT.shape[1] + NEW)
    logits, cache = decode.prefill(params, cfg, tokens_BT, lengths_B, cache)
    all_logits, tokens = [np.asarray(logits)], []
    for step in range(NEW):
        tokens.append(jnp.argmax(logits, -1).astype(jnp.int32))
        if step < NEW - 1:
            logits, cache = decode.decode_step(params, cfg, tokens[-1], cache)
            all_logits.append(np.asarray(logits))
    greedy = np.stack(tokens, axis=1).tolist()
    return params, greedy, all_logits[0], all_logits[1], cache


GRID = [  # layout, mesh, K (8 = MHA, 2 = GQA, 1 = MQA), sequence axes, variant config
    ("1d-ws", "1x8", 8, (), False),
    ("1d-ws", "2x4", 2, (), False),
    ("1d-ws", "4x2", 1, (), False),
    ("1d-ws", "2x2x2", 2, (), False),
    ("2d-ws", "1x8", 1, (), False),
    ("2d-ws", "2x4", 8, (), True),
    ("2d-ws", "4x2", 2, (), False),
    ("2d-ws", "2x2x2", 1, (), False),
    ("1d-ws", "2x4", 8, ("x",), True),    # ring-attention prefill, sequence-sharded KV
    ("weight-gathered", "2x2x2", 2, (), False),
]


@pytest.mark.parametrize("layout, mesh, K, seq, variant", GRID,
                         ids=[f"{g[0]}-{g[1]}-K{g[2]}{'-seq' if g[3] else ''}"
                              f"{'-plain-tied-window' if g[4] else ''}" for g in GRID])
def test_layout_equals_the_single_device_model(layout, mesh, K, seq, variant):
    cfg = config(K, variant)
    params, ref_tokens, ref_logits1, ref_logits2, ref_cache = reference(K, variant)
    plan = make_plan(cfg, named_mesh(mesh), layout, seq=seq)

    # Greedy generation: the same tokens.
    assert sd.generate(params, cfg, PROMPTS, NEW, plan=plan).tokens == ref_tokens

    # Prefill and one decode step (the programs generation compiled): the same logits.
    sharded = shard_params(params, cfg, plan)
    tokens_BT, lengths_B = decode.pad_prompts(PROMPTS, 16)
    cache = sd.init_cache(cfg, plan, len(PROMPTS), tokens_BT.shape[1] + NEW)
    logits1, cache = sd.prefill(sharded, cfg, plan, tokens_BT, lengths_B, cache)
    np.testing.assert_allclose(logits1, ref_logits1, atol=ATOL, rtol=ATOL)
    first = jnp.argmax(ref_logits1, -1).astype(jnp.int32)
    logits2, cache = sd.decode_step(sharded, cfg, plan, first, cache)
    np.testing.assert_allclose(logits2, ref_logits2, atol=ATOL, rtol=ATOL)
    # The cache after one step: the prompt and the first new token, as the unsharded
    # decoder wrote them (its later steps only append beyond).
    np.testing.assert_array_equal(cache.lengths, lengths_B + 1)
    if not seq:   # a sequence-sharded cache stores positions striped, not in order
        for got, want in zip(cache.k + cache.v, ref_cache.k + ref_cache.v):
            for b, n in enumerate(np.asarray(cache.lengths)):
                np.testing.assert_allclose(np.asarray(got)[b, :, :n], np.asarray(want)[b, :, :n],
                                           atol=ATOL)


def test_a_batch_that_does_not_split_is_padded_by_generate_and_refused_by_prefill():
    cfg = config(1)                      # MQA on 4x2: the cache is split over the batch 8 ways
    params, greedy, *_ = reference(1)
    plan = make_plan(cfg, named_mesh("4x2"), "1d-ws")
    assert plan.size(plan.kv_batch) == 8
    three = PROMPTS[:3]
    # Rows of a batch never interact, so the first three rows of the 8-prompt reference are
    # the unsharded answer for these three prompts.
    assert sd.generate(params, cfg, three, NEW, plan=plan).tokens == greedy[:3]
    with pytest.raises(LayoutError, match="batch of 3 does not split over 8"):
        sd.init_cache(cfg, plan, 3, 20)


@pytest.mark.parametrize("N, K, mesh, layout, message", [
    (4, 4, "2x4", "1d-ws", "N=4 query heads do not split 8 ways"),
    (6, 2, "2x4", "2d-ws", "N=6 query heads do not split 4 ways"),
    (8, 8, "8", "2d-ws", "at least two axes"),
])
def test_head_counts_that_do_not_divide_the_mesh_are_refused_clearly(N, K, mesh, layout, message):
    cfg = ModelConfig(L=1, D=48, F=96, N=N, K=K, H=8, V=64)
    with pytest.raises(LayoutError, match=message):
        make_plan(cfg, named_mesh(mesh), layout)


def test_kv_heads_split_as_far_as_K_allows_and_the_batch_takes_the_rest():
    for K, mesh, heads, batch in [(8, "2x4", 8, 1), (2, "2x4", 2, 4), (1, "2x2x2", 1, 8),
                                  (4, "2x2x2", 4, 2), (2, "1x8", 1, 8)]:
        plan = make_plan(config(K), named_mesh(mesh), "1d-ws")
        assert (plan.size(plan.kv_heads), plan.size(plan.kv_batch)) == (heads, batch), (K, mesh)
        assert plan.m == 8 and K % plan.size(plan.kv_heads) == 0


def test_sequence_sharding_needs_the_kv_heads_to_split_over_the_model_axes():
    with pytest.raises(LayoutError, match="sequence sharding needs K=1"):
        make_plan(config(1), named_mesh("2x4"), "1d-ws", seq="x")


def test_mesh_shapes_parse_and_oversized_meshes_are_refused():
    assert parse_mesh_shape("8") == (8,) and parse_mesh_shape("2x2x2") == (2, 2, 2)
    for bad in ("", "0x4", "2y4", "2x", "1x2x1x2x2"):
        with pytest.raises(MeshError):
            parse_mesh_shape(bad)
    with pytest.raises(MeshError, match="needs 16 devices"):
        named_mesh("4x4")
