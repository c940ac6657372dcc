"""The block manager and both prefix caches, against a shadow of what each block holds.

Random workloads of overlapping prompts (a tiny alphabet makes shared prefixes common) run
through a small block pool so that eviction happens all the time. A shadow dictionary records
the exact token prefix whose KV each block was written with; every block a cache returns must
hold exactly the queried prefix. At the end, once every sequence has released its blocks and
the cache is cleared, every reference count must be zero.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.memory.kv_usage import blocks_for, contiguous_usage, paged_usage
from inferbook.serving.block_manager import BlockManager, OutOfBlocks
from inferbook.serving.hash_chain_cache import HashChainCache
from inferbook.serving.radix_cache import RadixCache
from inferbook.serving.workloads import affinity_route


def weak_hash(parent, tokens):
    """A hash that collides constantly: correctness must not depend on the hash."""
    return (sum(tokens) + (0 if parent is None else parent)) % 3


def depth_hash(parent, tokens):
    """Worse still: every block at the same depth collides, whatever its tokens."""
    return 0 if parent is None else parent + 1


CACHES = {"hash-chain": HashChainCache,
          "hash-chain-weak": lambda bm: HashChainCache(bm, hash_fn=weak_hash),
          "hash-chain-depth": lambda bm: HashChainCache(bm, hash_fn=depth_hash),
          "radix": RadixCache}

prompts = st.lists(st.integers(0, 2), min_size=1, max_size=14)
# Each step admits a prompt, then completes up to two of the admitted ones (oldest first):
# sequences overlap, so two of them can miss the cache for the same prefix and race to fill it.
ops = st.lists(st.tuples(prompts, st.integers(0, 2), st.booleans()), min_size=1, max_size=25)


def run_workload(make_cache, block_size, num_blocks, workload):
    bm = BlockManager(num_blocks, block_size)
    cache = make_cache(bm)
    shadow = {}                    # block -> the token prefix its KV was computed for
    admitted, live = [], []        # (tokens, table) being prefilled; tables kept after that

    def complete(keep):
        tokens, table = admitted.pop(0)
        cache.insert(tokens, table)
        (live.append(table) if keep else bm.release(table))
        if len(live) > 2:
            bm.release(live.pop(0))

    for tokens, n_complete, keep in workload:
        table = cache.match(tokens, max_tokens=len(tokens) - 1)
        assert len(table) * block_size <= len(tokens) - 1
        for i, b in enumerate(table):
            assert shadow[b] == tuple(tokens[:(i + 1) * block_size]), "wrong prefix returned"
        first_new = len(table)
        if bm.grow(table, len(tokens)):
            for i in range(first_new, len(table)):
                end = (i + 1) * block_size
                shadow[table[i]] = tuple(tokens[:end]) if end <= len(tokens) else None
            admitted.append((tokens, table))
        else:
            bm.release(table)              # admission refused: nothing may be held
        for _ in range(min(n_complete, len(admitted))):
            complete(keep)
        bm.check()
        assert bm.num_used <= num_blocks
    while admitted:
        complete(False)
    for table in live:
        bm.release(table)
    cache.clear()
    bm.check()
    assert cache.cached_blocks == 0
    assert bm.all_free(), "a block leaked"
    return cache


@pytest.mark.parametrize("kind", CACHES)
@given(block_size=st.integers(1, 3), num_blocks=st.integers(4, 12), workload=ops)
def test_cache_returns_only_exact_prefixes_and_leaks_nothing(kind, block_size, num_blocks,
                                                            workload):
    run_workload(CACHES[kind], block_size, num_blocks, workload)


@pytest.mark.parametrize("kind", ["hash-chain", "radix"])
def test_a_repeated_prompt_hits_and_the_hit_is_whole_blocks(kind):
    bm = BlockManager(16, 4)
    cache = CACHES[kind](bm)
    prompt = list(range(10))               # 2 full blocks + 2 tokens
    table = cache.match(prompt)
    assert table == []
    assert bm.grow(table, len(prompt))
    assert cache.insert(prompt, table) == 2
    again = cache.match(prompt + [99])
    assert again == table[:2]
    assert cache.peek(prompt[:7]) == 4      # only whole blocks count
    assert cache.peek([0, 1, 2, 5]) == 0    # first block differs
    bm.release(table)
    bm.release(again)
    assert cache.evictable() == 2
    cache.clear()
    assert bm.all_free()


@pytest.mark.parametrize("kind", ["hash-chain", "radix"])
def test_eviction_is_least_recently_used(kind):
    bm = BlockManager(4, 2)
    cache = CACHES[kind](bm)
    for prompt in ([1, 1, 1, 1], [2, 2, 2, 2]):
        t = []
        bm.grow(t, 4)
        cache.insert(prompt, t)
        bm.release(t)
    bm.release(cache.match([1, 1, 1, 1, 9]))   # touch the first prompt
    t = []
    assert bm.grow(t, 4)                        # needs the two blocks of the older prompt
    assert cache.peek([1, 1, 1, 1]) == 4 and cache.peek([2, 2, 2, 2]) == 0
    bm.release(t)


def test_allocation_fails_cleanly_when_the_pool_is_exhausted():
    bm = BlockManager(3, 4)
    a, b = [], []
    assert bm.grow(a, 9)                        # 3 blocks
    assert not bm.grow(b, 1) and b == []        # all or nothing
    with pytest.raises(OutOfBlocks):
        bm.allocate()
    bm.release(a)
    with pytest.raises(ValueError):
        bm.decref(0)                            # double free is caught
    assert bm.all_free()


def test_fragmentation_accounting():
    lengths = [5, 17, 32]
    paged = paged_usage(lengths, 16)
    assert paged.reserved == 16 * (1 + 2 + 2) and paged.tokens == 54
    assert blocks_for(17, 16) == 2
    contiguous = contiguous_usage(lengths, 64)
    assert contiguous.reserved == 3 * 64
    assert paged.waste < contiguous.waste
    # Waste below one block per sequence, whatever the lengths.
    assert paged.reserved - paged.tokens < 16 * len(lengths)


def test_affinity_routing_is_a_function_of_the_prefix():
    a = affinity_route(list(range(100)) + [1], 4)
    b = affinity_route(list(range(100)) + [2], 4)
    assert a == b and 0 <= a < 4
    spread = {affinity_route([i] * 80, 4) for i in range(40)}
    assert len(spread) > 1


def test_evicting_a_block_invalidates_its_descendants():
    """A cached child must not outlive its parent's eviction: the parent's block id can be
    reused for other tokens, and the stale child would then be served after the wrong prefix.
    (Every block at one depth collides under depth_hash, so only the parent checks stand.)"""
    bm = BlockManager(5, 1)
    cache = HashChainCache(bm, hash_fn=depth_hash)
    x = cache.match([1, 2, 3])
    bm.grow(x, 3)                          # X misses: blocks 0, 1, 2, not yet cached
    y = cache.match([1, 2], max_tokens=1)
    bm.grow(y, 2)
    cache.insert([1, 2], y)                # Y caches [1] [2] in blocks 3, 4
    bm.release(y)
    cache.insert([1, 2, 3], x)             # X adds its block 2 ([3]) under parent 4
    z = cache.match([1, 5], max_tokens=1)  # Z shares [1]; growing evicts block 4
    assert bm.grow(z, 2)
    assert z == [3, 4]
    cache.insert([1, 5], z)                # block 4 now holds [5] after [1]
    got = cache.match([1, 5, 3, 9])
    assert got == [3, 4], "block 2 holds the KV of [1, 2, 3], not of [1, 5, 3]"
    for t in (x, z, got):
        bm.release(t)
    cache.clear()
    assert bm.all_free()
