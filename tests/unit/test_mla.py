"""Multi-head latent attention: the absorbed form equals the naive one, and the cache holds
latents, (R_kv + H_rope) numbers per token per layer, not keys and values."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.model import decode, decoder, kvcache, mla
from inferbook.model.config import ModelConfig
from inferbook.model.features import MLA


@st.composite
def mla_configs(draw):
    spec = MLA(R_kv=draw(st.sampled_from([8, 16])), R_q=draw(st.sampled_from([None, 12])),
               H_nope=draw(st.sampled_from([4, 8])), H_rope=draw(st.sampled_from([2, 4])),
               H_v=draw(st.sampled_from([4, 12])))
    N = draw(st.sampled_from([1, 2, 4]))
    return ModelConfig(L=1, D=32, F=48, N=N, K=N, H=spec.H_qk, V=16, mla=spec,
                       rope_interleaved=draw(st.booleans()),
                       qkv_bias=draw(st.booleans()), o_bias=draw(st.booleans()),
                       query_scale=draw(st.sampled_from([None, 0.3])))


def causal_attend(cfg, lengths_B):
    """Attention of a (right-padded) batch to itself, either form: values None means the
    latent channels of the keys."""
    options = decode.layer_options(cfg)
    return lambda i, q, k, v: decode.attend_cached(q, k, v, lengths_B, **options)


@settings(max_examples=10)
@given(cfg=mla_configs(), B=st.integers(1, 3), T=st.integers(1, 8), seed=st.integers(0, 3))
def test_the_absorbed_form_equals_the_naive_form(cfg, B, T, seed):
    p = decoder.init_params(cfg, seed)["layers"][0]
    h = jax.random.normal(jax.random.key(seed), (B, T, cfg.D))
    pos = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    lengths = jnp.asarray(np.random.default_rng(seed).integers(1, T + 1, B), jnp.int32)

    @jax.jit
    def both(p, h, pos, lengths):
        attend = causal_attend(cfg, lengths)
        return [mla.latent_attention(p, cfg, 0, h, pos, attend, form=form)
                for form in ("naive", "absorbed")]

    naive, absorbed = both(p, h, pos, lengths)
    np.testing.assert_allclose(np.asarray(absorbed), np.asarray(naive), rtol=1e-4, atol=1e-5)


def test_the_cache_holds_the_latent_and_the_rotary_key_only():
    spec = MLA(R_kv=16, R_q=12, H_nope=8, H_rope=4, H_v=8)
    cfg = ModelConfig(L=3, D=32, F=48, N=4, K=4, H=12, V=16, mla=spec)
    B, S = 2, 10
    cache = kvcache.init_cache(cfg, B, S, jnp.bfloat16)
    assert cache.v == ()
    assert all(k.shape == (B, 1, S, 16 + 4) for k in cache.k)
    assert kvcache.cache_bytes(cache) == 3 * B * S * (16 + 4) * 2
    # Grouped-query attention of the same width would cache 2·K·H per token per layer.
    dense = kvcache.init_cache(cfg.replace(mla=None), B, S, jnp.bfloat16)
    assert kvcache.cache_bytes(dense) == 3 * B * S * 2 * 4 * 12 * 2


def test_a_decode_step_appends_one_latent_and_gives_the_logits_of_recomputation():
    spec = MLA(R_kv=16, H_nope=8, H_rope=4, H_v=8)
    cfg = ModelConfig(L=2, D=32, F=48, N=4, K=4, H=12, V=40, mla=spec, rope_interleaved=True)
    params = decoder.init_params(cfg, 2)
    seq = [3, 1, 4, 1, 5, 9, 2]
    cache = kvcache.init_cache(cfg, 1, 12)
    _, cache = decode.prefill(params, cfg, jnp.asarray([seq[:4]]), jnp.asarray([4]), cache)
    for t in range(4, len(seq)):
        logits, cache = decode.decode_step(params, cfg, jnp.asarray([seq[t]]), cache)
    assert int(cache.lengths[0]) == len(seq)
    full = decoder.forward(params, cfg, jnp.asarray([seq]))          # naive, no cache
    np.testing.assert_allclose(np.asarray(logits[0]), np.asarray(full[0, -1]), rtol=1e-4,
                               atol=1e-4)


def test_the_serving_engine_pages_latents_like_keys():
    """Continuous batching with a paged prefix cache of latents gives each request the tokens
    of `generate` alone (the pool's blocks are [num_blocks, 1, block, R_kv + H_rope])."""
    from family_configs import FAMILY_CONFIGS

    from inferbook.serving import ModelEngine, Request, serve
    cfg = FAMILY_CONFIGS["deepseek_v3"]
    params = decoder.init_params(cfg, 1)
    shared = [3, 1, 4, 1, 5, 9, 2, 6]
    trace = [Request(i, shared + [10 + i], 5, seed=i) for i in range(4)]
    engine = ModelEngine(cfg, 2, 32, min_bucket=16)
    pool = engine.init_pool(4, 4)
    assert pool.v == () and pool.k[0].shape == (4, 1, 4, cfg.mla.cache_width)
    result = serve(engine, params, trace, "continuous", num_blocks=12, block_size=4,
                   prefix_cache="hash")
    assert result.summary.cached_tokens > 0
    assert result.outputs() == {r.id: decode.generate(params, cfg, [r.prompt], 5).tokens[0]
                                for r in trace}
