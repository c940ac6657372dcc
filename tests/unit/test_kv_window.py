"""Local attention with a ring-buffer cache must equal full attention under the window mask.

References: `decoder.forward` of `cfg.replace(window=W)` (the library's own window mask) for a
model whose layers are all local, and `kv_window.forward_reference` (per-layer window masks)
for mixed local/global models; the ring buffer's slot positions against a brute-force replay.
"""

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.memory import kv_window
from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig


def small_cfg(K=2, G=2, L=2):
    return ModelConfig(L=L, D=32, F=48, N=K * G, K=K, H=8, V=61, max_seq_len=64)


def run_cached(params, cfg, windows, seqs, n_prompt, max_len):
    """Prefill the first n_prompt[b] tokens (one extend on an empty cache), then one decode step
    per further token; the logits for every position after the prompt, per sequence."""
    tokens, lengths = decode.pad_prompts([s[:n] for s, n in zip(seqs, n_prompt)], 16)
    cache = kv_window.init_cache(cfg, windows, len(seqs), max_len)
    logits, new = kv_window.extend(params, cfg, windows, jnp.asarray(tokens), cache,
                                   jnp.asarray(lengths))
    cache = kv_window.append(cache, windows, *new, jnp.asarray(lengths))
    out = [[np.asarray(logits[b, n - 1])] for b, n in enumerate(lengths)]
    for step in range(max(len(s) - n for s, n in zip(seqs, n_prompt))):
        feed = [s[n + step] if n + step < len(s) else 0 for s, n in zip(seqs, n_prompt)]
        live = jnp.asarray([int(n + step < len(s)) for s, n in zip(seqs, n_prompt)], jnp.int32)
        logits, new = kv_window.extend(params, cfg, windows, jnp.asarray(feed)[:, None], cache,
                                       live)
        cache = kv_window.append(cache, windows, *new, live)
        for b, (s, n) in enumerate(zip(seqs, n_prompt)):
            if n + step < len(s):
                out[b].append(np.asarray(logits[b, 0]))
    return out, cache


# Shapes are fixed per case (prompts padded to 16 tokens, two sequences) so that each case
# compiles once; the lengths, prompt splits and tokens vary.
@pytest.mark.parametrize("window,pattern,K", [(3, None, 2), (2, 1, 1), (5, 2, 2)])
def test_ring_cache_equals_window_mask(window, pattern, K):
    cfg = small_cfg(K=K, L=3)
    windows = kv_window.layer_windows(cfg.L, window, pattern)
    params = decoder.init_params(cfg, seed=window)
    rng = np.random.default_rng(window)
    for trial in range(2):
        seqs = [rng.integers(0, cfg.V, rng.integers(2, 16)).tolist() for _ in range(2)]
        n_prompt = [int(rng.integers(1, len(s) + 1)) for s in seqs]
        check_against_reference(params, cfg, windows, seqs, n_prompt, pattern, window)


def check_against_reference(params, cfg, windows, seqs, n_prompt, pattern, window):
    got, cache = run_cached(params, cfg, windows, seqs, n_prompt, max_len=24)
    tokens, lengths = decode.pad_prompts(seqs, 16)
    ref = kv_window.forward_reference(params, cfg, windows, jnp.asarray(tokens),
                                      jnp.asarray(lengths))
    if pattern is None:      # all layers local: the library's own window mask agrees
        lib = decoder.forward(params, cfg.replace(window=window), jnp.asarray(tokens),
                            jnp.asarray(lengths))
        np.testing.assert_allclose(ref, lib, atol=1e-5)
    for b, (s, n) in enumerate(zip(seqs, n_prompt)):
        np.testing.assert_allclose(np.stack(got[b]), ref[b, n - 1:len(s)], atol=2e-4)
    # The cache never holds more than the window in a local layer.
    for w, k in zip(windows, cache.k):
        assert k.shape[2] == (24 if w is None else min(w, 24))


@given(lengths=st.lists(st.integers(0, 30), min_size=1, max_size=3), C=st.integers(1, 7))
def test_slot_positions_match_a_replay(lengths, C):
    got = np.asarray(kv_window.slot_positions(jnp.asarray(lengths, jnp.int32), C, ring=True))
    for b, n in enumerate(lengths):
        ring = [-1] * C
        for p in range(n):
            ring[p % C] = p
        assert got[b].tolist() == ring


def test_bytes_formula_matches_the_cache():
    cfg = small_cfg(L=4)
    windows = kv_window.layer_windows(cfg.L, 6, 1)
    assert windows == (6, None, 6, None)
    cache = kv_window.init_cache(cfg, windows, 3, 40)
    assert kvcache.cache_bytes(cache) == 3 * kv_window.kv_bytes_per_sequence(cfg, windows, 40, 4)
    assert kv_window.kv_bytes_per_sequence(cfg, (None,) * 4, 40) == 40 * 2 * 4 * cfg.K * cfg.H * 2
