"""Paged attention against the reference on a contiguous cache, and paged writes.

A random pool holds every sequence's blocks in shuffled order (some shared between
sequences, as prefix sharing does); gathering them must rebuild the contiguous cache, the
paged kernel must equal the reference on it, and writing new tokens through the block table
must land exactly where `kvcache.write` puts them in the contiguous cache.
"""

import jax
import jax.numpy as jnp
import numpy as np
from attention_cases import Case, assert_matches_reference, cases
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.kernels import paged
from inferbook.memory.kv_usage import blocks_for
from inferbook.model import kvcache

kernel = jax.jit(paged.paged_attention, static_argnames=("window",))
reference = jax.jit(paged.paged_attention_reference, static_argnames=("window",))
gather = jax.jit(paged.gather_blocks)
write = jax.jit(paged.paged_write)


def to_pool(case: Case, block_size: int, rng: np.random.Generator, share: bool):
    """Scatter a contiguous cache into a shuffled pool (with spare blocks); return the table."""
    B, K, S, H = case.k.shape
    J = S // block_size
    num_blocks = B * J + 3
    table = rng.permutation(num_blocks)[:B * J].reshape(B, J)
    if share and B > 1:
        # Sequence 1 shares sequence 0's first block: make their caches agree there.
        table[1, 0] = table[0, 0]
        k, v = np.array(case.k), np.array(case.v)
        k[1, :, :block_size], v[1, :, :block_size] = k[0, :, :block_size], v[0, :, :block_size]
        case = case._replace(k=jnp.asarray(k), v=jnp.asarray(v))
    pools = []
    for cache in (case.k, case.v):      # numpy: eager jnp ops would compile for every shape
        pool = rng.normal(size=(num_blocks, K, block_size, H)).astype(cache.dtype)
        pool[table] = np.asarray(cache).reshape(B, K, J, block_size, H).transpose(0, 2, 1, 3, 4)
        pools.append(jnp.asarray(pool))
    return case, pools[0], pools[1], jnp.asarray(table, jnp.int32)


@settings(max_examples=8)
@given(case=cases(), block_size=st.sampled_from([4, 8]), share=st.booleans(),
       seed=st.integers(0, 99))
def test_paged_attention_matches_the_reference_on_the_contiguous_cache(case, block_size, share,
                                                                       seed):
    case, k_pool, v_pool, table = to_pool(case, block_size, np.random.default_rng(seed), share)
    np.testing.assert_array_equal(gather(k_pool, table), case.k)
    args = (case.q, k_pool, v_pool, table, case.q_pos, case.kv_len)
    assert_matches_reference(case, *kernel(*args, window=case.window))
    assert_matches_reference(case, *reference(*args, window=case.window))


@settings(max_examples=8)
@given(case=cases(dtypes=("float32",)), block_size=st.sampled_from([4, 8]), seed=st.integers(0, 99),
       T=st.integers(1, 5))
def test_paged_write_puts_tokens_where_the_contiguous_cache_does(case, block_size, seed, T):
    rng = np.random.default_rng(seed)
    case, k_pool, _, table = to_pool(case, block_size, rng, share=False)
    B, K, S, H = case.k.shape
    new = jnp.asarray(rng.normal(size=(B, T, K, H)), jnp.float32)
    start = jnp.asarray(rng.integers(0, S + 1, size=B), jnp.int32)   # some writes fall off the end
    written = gather(write(k_pool, table, new, start), table)
    np.testing.assert_array_equal(written, jax.jit(kvcache.write)(case.k, new, start))


def test_blocks_for_rounds_up():
    assert [blocks_for(n, 16) for n in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]
