"""The int8 KV cache: rounding error, the per-head reader against the reference attention, the
measured attention error against its a-priori bound, decoding against the float cache, and the
bytes the compiled decode step holds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.memory import kv_quant
from inferbook.model import decode, decoder, kvcache
from inferbook.model.attention import attention_mask, attention_reference
from inferbook.model.config import ModelConfig


@given(seed=st.integers(0, 10_000), spread=st.floats(0.01, 100.0))
def test_rounding_is_within_half_a_step(seed, spread):
    x = jax.random.normal(jax.random.key(seed), (3, 5, 16)) * spread
    x = x.at[0, 0].set(0.0)                    # an all-zero vector must survive too
    codes, scale = kv_quant.quantize(x)
    assert codes.dtype == jnp.int8 and scale.shape == (3, 5, 1)
    err = jnp.abs(kv_quant.dequantize(codes, scale) - x)
    assert bool(jnp.all(err <= jnp.abs(x).max(-1, keepdims=True) / 254 * (1 + 1e-5) + 1e-30))


def random_attention(seed, B=2, T=3, K=2, G=2, S=64, H=16, outliers=False):
    ks = jax.random.split(jax.random.key(seed), 4)
    q = jax.random.normal(ks[0], (B, T, K * G, H))
    k = jax.random.normal(ks[1], (B, K, S, H))
    v = jax.random.normal(ks[2], (B, K, S, H))
    if outliers:       # a few large channels, as real keys have
        k = k * jnp.where(jax.random.uniform(ks[3], (H,)) < 0.1, 20.0, 1.0)
    return q, k, v


@pytest.mark.parametrize("window,G", [(None, 2), (5, 2), (None, 1), (7, 3)])
def test_per_head_reader_equals_reference_on_a_float_cache(window, G):
    q, k, v = random_attention(0, G=G)
    lengths = jnp.array([37, 64])
    pos = lengths[:, None] + jnp.arange(q.shape[1])[None]      # queries after the cache
    out, lse = jax.jit(kv_quant.attend_per_head, static_argnames=("window",))(
        q, k, v, None, None, pos, lengths, window=window)
    mask = attention_mask(pos, jnp.arange(k.shape[2]), lengths, window)
    ref_out, ref_lse = attention_reference(q, k, v, mask)
    np.testing.assert_allclose(out, ref_out, atol=1e-5)
    np.testing.assert_allclose(lse, ref_lse, atol=1e-4)


@settings(max_examples=8)
@given(seed=st.integers(0, 1000), outliers=st.booleans(), scale=st.floats(0.1, 4.0))
def test_int8_attention_error_is_within_its_bound(seed, outliers, scale):
    q, k, v = random_attention(seed, outliers=outliers)
    q = q * scale
    lengths = jnp.array([50, 64])
    pos = lengths[:, None] + jnp.arange(q.shape[1])[None]
    kq, ks = kv_quant.quantize(k)
    vq, vs = kv_quant.quantize(v)
    out, _ = kv_quant.attend_per_head(q, kq, vq, ks, vs, pos, lengths)
    mask = attention_mask(pos, jnp.arange(k.shape[2]), lengths)
    exact, _ = attention_reference(q, k, v, mask)
    err_BTN = jnp.abs(out - exact).max(-1)
    bound_BTN = kv_quant.attention_error_bound(q, k, v, mask)
    assert bool(jnp.all(err_BTN <= bound_BTN + 1e-5)), float(jnp.max(err_BTN - bound_BTN))
    assert float(err_BTN.max()) > 0          # int8 is not exact: the comparison is real


CFG = ModelConfig(L=2, D=32, F=48, N=4, K=2, H=16, V=61, max_seq_len=64)


def decode_logits(params, cfg, seqs, n_prompt, cache, ext, app):
    tokens, lengths = decode.pad_prompts([s[:n] for s, n in zip(seqs, n_prompt)], 16)
    logits, new = ext(params, cfg, jnp.asarray(tokens), cache, jnp.asarray(lengths))
    cache = app(cache, *new, jnp.asarray(lengths))
    out = [[np.asarray(logits[b, n - 1])] for b, n in enumerate(n_prompt)]
    for step in range(max(len(s) - n for s, n in zip(seqs, n_prompt))):
        feed = [s[n + step] if n + step < len(s) else 0 for s, n in zip(seqs, n_prompt)]
        live = jnp.asarray([int(n + step < len(s)) for s, n in zip(seqs, n_prompt)], jnp.int32)
        logits, new = ext(params, cfg, jnp.asarray(feed)[:, None], cache, live)
        cache = app(cache, *new, live)
        for b, (s, n) in enumerate(zip(seqs, n_prompt)):
            if n + step < len(s):
                out[b].append(np.asarray(logits[b, 0]))
    return [np.stack(o) for o in out]


def test_decoding_with_int8_and_float_caches():
    cfg = CFG      # windows are covered by the reader test above
    params = decoder.init_params(cfg, seed=3)
    rng = np.random.default_rng(7)
    seqs = [rng.integers(0, cfg.V, n).tolist() for n in (13, 20)]
    n_prompt = [5, 12]
    ext = kv_quant.extend
    ref = decoder.forward(params, cfg, *map(jnp.asarray, decode.pad_prompts(seqs, 16)))
    f32 = decode_logits(params, cfg, seqs, n_prompt,
                        kv_quant.init_cache(cfg, 2, 32, jnp.float32), ext,
                        kv_quant.append)
    i8 = decode_logits(params, cfg, seqs, n_prompt, kv_quant.init_cache(cfg, 2, 32),
                       ext, kv_quant.append)
    for b, (s, n) in enumerate(zip(seqs, n_prompt)):
        exact = np.asarray(ref[b, n - 1:len(s)])
        np.testing.assert_allclose(f32[b], exact, atol=2e-4)        # float cache: exact
        rel = np.abs(i8[b] - exact).max() / np.abs(exact).max()
        assert 0 < rel < 0.02, rel                                   # int8: close, not equal


def test_int8_cache_holds_about_half_the_bytes_of_bfloat16():
    cfg = CFG.replace(H=64, N=4, K=4)
    caches = {d: kv_quant.init_cache(cfg, 2, 512, d) for d in (jnp.int8, jnp.bfloat16)}
    ratio = kvcache.cache_bytes(caches[jnp.int8]) / kvcache.cache_bytes(caches[jnp.bfloat16])
    assert ratio == kv_quant.bytes_per_element(64) / 2 <= 0.55
    assert kvcache.cache_bytes(caches[jnp.bfloat16]) == kvcache.cache_bytes(
        kvcache.init_cache(cfg, 2, 512, jnp.bfloat16))
    # The compiled step takes the int8 codes as its arguments and never makes a float copy of
    # the cache: its temporary buffers are far smaller than the cache.
    params = decoder.init_params(cfg)
    tok = jnp.zeros((2, 1), jnp.int32)
    mem = kv_quant.extend.lower(params, cfg, tok, caches[jnp.int8]).compile() \
        .memory_analysis()
    assert mem.argument_size_in_bytes >= kvcache.cache_bytes(caches[jnp.int8])
    assert mem.temp_size_in_bytes < 0.5 * kvcache.cache_bytes(caches[jnp.int8])
