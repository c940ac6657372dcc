"""Cross-layer KV sharing: cached decoding equals the sharing model run without a cache, no
sharing equals the library's model, and the cache shrinks by the group size while the bytes a
decode step reads (XLA's count of the compiled program) do not."""

import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.memory import kv_share
from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.perf import compiled

CFG = ModelConfig(L=4, D=32, F=48, N=4, K=2, H=8, V=61, max_seq_len=64)


@pytest.mark.parametrize("sources", [(0, 0, 2, 2), (0, 0, 0, 3), (0, 1, 2, 3)])
def test_cached_sharing_equals_recomputation(sources):
    params = decoder.init_params(CFG, seed=1)
    rng = np.random.default_rng(sum(sources))
    seqs = [rng.integers(0, CFG.V, n).tolist() for n in (9, 14)]
    n_prompt = [4, 11]
    tokens, lengths = decode.pad_prompts([s[:n] for s, n in zip(seqs, n_prompt)], 16)
    cache = kv_share.init_cache(CFG, sources, 2, 32)
    logits, new = kv_share.extend(params, CFG, sources, jnp.asarray(tokens), cache,
                                  jnp.asarray(lengths))
    cache = kv_share.append(cache, *new, jnp.asarray(lengths))
    got = [[np.asarray(logits[b, n - 1])] for b, n in enumerate(n_prompt)]
    for step in range(max(len(s) - n for s, n in zip(seqs, n_prompt))):
        feed = [s[n + step] if n + step < len(s) else 0 for s, n in zip(seqs, n_prompt)]
        live = jnp.asarray([int(n + step < len(s)) for s, n in zip(seqs, n_prompt)], jnp.int32)
        logits, new = kv_share.extend(params, CFG, sources, jnp.asarray(feed)[:, None], cache,
                                      live)
        cache = kv_share.append(cache, *new, live)
        for b, (s, n) in enumerate(zip(seqs, n_prompt)):
            if n + step < len(s):
                got[b].append(np.asarray(logits[b, 0]))
    full, full_len = decode.pad_prompts(seqs, 16)
    ref = kv_share.forward_reference(params, CFG, sources, jnp.asarray(full),
                                     jnp.asarray(full_len))
    if sources == (0, 1, 2, 3):
        lib = decoder.forward(params, CFG, jnp.asarray(full), jnp.asarray(full_len))
        np.testing.assert_allclose(ref, lib, atol=1e-5)
    else:       # sharing changes the model: the reference must differ from the plain one
        lib = decoder.forward(params, CFG, jnp.asarray(full), jnp.asarray(full_len))
        assert not np.allclose(ref, lib, atol=1e-3)
    for b, (s, n) in enumerate(zip(seqs, n_prompt)):
        np.testing.assert_allclose(np.stack(got[b]), ref[b, n - 1:len(s)], atol=2e-4)


def test_memory_falls_reads_do_not():
    cfg = CFG.replace(D=16, F=16, V=32)      # tiny weights: the cache dominates the traffic
    params = decoder.init_params(cfg)
    shared, plain = kv_share.share_adjacent(cfg.L, 2), kv_share.share_adjacent(cfg.L, 1)
    assert shared == (0, 0, 2, 2) and plain == (0, 1, 2, 3)
    caches = {s: kv_share.init_cache(cfg, s, 2, 512) for s in (shared, plain)}
    assert kvcache.cache_bytes(caches[shared]) * 2 == kvcache.cache_bytes(caches[plain])
    assert kvcache.cache_bytes(caches[plain]) == kvcache.cache_bytes(
        kvcache.init_cache(cfg, 2, 512))
    tok = jnp.zeros((2, 1), jnp.int32)
    read = {s: compiled.compiled_cost(kv_share.extend, params, cfg, s, tok, caches[s])[
        "bytes_accessed"] for s in (shared, plain)}
    cache_read = kvcache.cache_bytes(caches[plain])       # every layer reads a whole cache
    assert read[shared] >= 0.95 * cache_read and read[plain] >= 0.95 * cache_read
    assert read[shared] > 0.9 * read[plain]


def test_bad_sources_are_refused():
    with pytest.raises(ValueError):
        kv_share.owners((0, 2, 2))
    with pytest.raises(ValueError):
        kv_share.owners((0, 0, 1))
