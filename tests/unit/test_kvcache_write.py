"""The cache write: what it stores, and that it stores it in place under every JAX we support.

Appending one token per sequence must cost about the bytes of that token. Under jax 0.7.2
(Colab's) a scatter whose indexed axes are not the leading ones was compiled as a transpose of
the whole cache, the write, and a transpose back: two copies of every layer's cache per decode
step, which made the batch-8 decode step several times slower than under newer JAX.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.model import kvcache
from inferbook.model.presets import get_preset


@pytest.mark.parametrize("B,T", [(3, 1), (2, 5)])
def test_write_stores_each_new_entry_at_its_sequences_slots(B, T):
    K, S, H = 2, 9, 4
    rng = np.random.default_rng(0)
    cache = rng.standard_normal((B, K, S, H)).astype(np.float32)
    new = rng.standard_normal((B, T, K, H)).astype(np.float32)
    start = rng.integers(0, S - T + 1, size=B).astype(np.int32)
    expected = cache.copy()
    for b in range(B):                 # the definition, one entry at a time
        for t in range(T):
            expected[b, :, start[b] + t, :] = new[b, t]
    out = kvcache.write(jnp.asarray(cache), jnp.asarray(new), jnp.asarray(start))
    np.testing.assert_array_equal(np.asarray(out), expected)


def test_appending_a_token_copies_no_cache():
    cfg = get_preset("tiny")
    B, S = 4, 33
    cache = kvcache.init_cache(cfg, B, S)._replace(lengths=jnp.full((B,), 7, jnp.int32))
    new = [jnp.ones((B, 1, cfg.K, cfg.H))] * cfg.L
    # Compiled with XLA:CPU's fusion emitters, as a reader's JAX compiles it (the suite's
    # faster compiles turn them off, tests/conftest.py, and the older emitters write the
    # cache with dynamic-update-slices instead of scatters).
    hlo = jax.jit(kvcache.append, donate_argnames=("cache",)).lower(cache, new, new) \
        .compile(compiler_options={"xla_cpu_use_fusion_emitters": True}).as_text()
    cache_elements = B * cfg.K * S * cfg.H
    big_ops = []
    for line in hlo.splitlines():
        m = re.search(r"= f32\[([\d,]+)\]\S* (\w[\w-]*)\(", line)
        if m and np.prod([int(d) for d in m[1].split(",")]) == cache_elements:
            big_ops.append(m[2])
    # Parameters, free reshapes, the scatter itself (maybe wrapped in a fusion): nothing else
    # may produce a cache-sized array.
    assert set(big_ops) <= {"parameter", "bitcast", "scatter", "fusion", "tuple"}, big_ops
    assert "transpose(" not in hlo and big_ops.count("scatter") == 2 * cfg.L
