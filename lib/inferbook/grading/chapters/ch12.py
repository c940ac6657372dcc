"""Questions of chapter 12, "Paged KV memory and prefix caching" (exercises/11_serving.py).

Blocks a batch of sequences needs, the memory paging wastes inside its last blocks against
what a contiguous reservation wastes, and two functions: the block-table lookup from a
token's logical position to its physical slot in the pool, and the prefix-cache match (how
many tokens of a new prompt are already cached, in whole blocks). References come from the
library: `serving.block_manager`, `paged.gather_blocks` and `serving.prefix_cache`.
"""

from __future__ import annotations

import numpy as np

from ..compare import allclose
from ..questions import Exact, Function, Mistake, Numeric

LENGTHS = (37, 512, 129, 16, 1000, 250, 3, 64)     # tokens held by each sequence
BLOCK, MAX_LEN = 16, 2048


def _blocks() -> int:
    from inferbook.memory.kv_usage import blocks_for
    return sum(blocks_for(n, BLOCK) for n in LENGTHS)


def _paged_waste() -> float:
    from inferbook.memory.kv_usage import paged_usage
    return paged_usage(LENGTHS, BLOCK).waste


def _contiguous_waste() -> float:
    from inferbook.memory.kv_usage import contiguous_usage
    return contiguous_usage(LENGTHS, MAX_LEN).waste


# The block-table lookup ------------------------------------------------------------------

def _slot_cases(rng):
    import jax.numpy as jnp
    cases = []
    for n_blocks, C, B, J, T in [(12, 4, 3, 4, 5), (12, 4, 3, 4, 5), (6, 2, 2, 3, 6),
                                 (20, 8, 1, 2, 3)]:
        table = rng.permutation(n_blocks)[:B * J].reshape(B, J).astype(np.int32)
        pos = rng.integers(0, J * C, (B, T)).astype(np.int32)
        cases.append((jnp.asarray(table), jnp.asarray(pos), C))
    return cases


def _slot_reference(block_table_BJ, pos_BT, block_size):
    """Fill a pool with each slot's own index, gather it through the table, read positions.

    (gather_blocks only indexes and reshapes, so it runs on NumPy arrays as well: no
    compilation per shape.)"""
    from inferbook.kernels.paged import gather_blocks
    table = np.asarray(block_table_BJ)
    n_blocks = int(table.max()) + 1
    pool = np.arange(n_blocks * block_size, dtype=np.int32).reshape(n_blocks, 1, block_size, 1)
    slots_BS = gather_blocks(pool, table)[:, 0, :, 0]                   # [B, J·C]
    return np.take_along_axis(slots_BS, np.asarray(pos_BT), axis=1)


def _describe_slot(args):
    table, pos, C = args
    return (f"block_size={C}, table {np.asarray(table).tolist()}, "
            f"positions {np.asarray(pos).tolist()}")


# The prefix-cache match ------------------------------------------------------------------

def _match_cases(rng):
    cases = []
    for bs, n_cached in [(4, 3), (4, 3), (2, 4), (8, 2), (4, 0)]:
        base = [int(t) for t in rng.integers(0, 5, 40)]
        cached = []
        for _ in range(n_cached):           # prompts that share a prefix with each other
            cut = int(rng.integers(0, 30))
            tail = [int(t) for t in rng.integers(0, 5, int(rng.integers(0, 15)))]
            cached.append(base[:cut] + tail)
        cut = int(rng.integers(8, 36))
        prompt = base[:cut] + [int(t) for t in rng.integers(0, 5, int(rng.integers(1, 10)))]
        cases.append((cached, prompt, bs))
    cases.append((cases[1][0], list(cases[1][0][0]), 4))    # a prompt seen before, whole
    return cases


def _match_reference(cached_prompts, prompt, block_size):
    """Insert the cached prompts into the library's hash-chain cache; ask it about `prompt`."""
    from inferbook.serving import BlockManager, HashChainCache
    bm = BlockManager(1000, block_size)
    cache = HashChainCache(bm)
    for p in cached_prompts:
        table: list[int] = []
        bm.grow(table, len(p))
        cache.insert(p, table)
        bm.release(table)               # the request ends; the cache keeps its full blocks
    return cache.peek(prompt)


def _describe_match(args):
    cached, prompt, bs = args
    return f"block_size={bs}, {len(cached)} cached prompts, a prompt of {len(prompt)} tokens"


QUESTIONS = [
    Exact("ch12.blocks_needed", "Blocks the eight sequences occupy", 1,
          "each sequence takes ceil(length / block_size) blocks of its own",
          reference=_blocks),
    Numeric("ch12.paged_waste", "Share of the paged reservation that holds nothing", 1,
            "reserved = blocks × block_size token slots; waste = 1 − tokens / reserved",
            reference=_paged_waste, rel_tol=0.01, abs_tol=1e-4),
    Numeric("ch12.contiguous_waste", "... and of a contiguous reservation of 2,048 each", 1,
            "every sequence reserves max_len slots up front: waste = 1 − tokens / (B·max_len)",
            reference=_contiguous_waste, rel_tol=0.01,
            mistakes=[Mistake(lambda r: 1 - r, "that is the share in use; the question asks "
                              "for the share wasted")]),
    Function("ch12.physical_slot", "Logical position → physical slot", 3,
             "position p of sequence b sits in block table[b, p // block_size] at offset "
             "p % block_size; number the pool's slots block by block: block · block_size + "
             "offset",
             reference=_slot_reference, cases=_slot_cases, compare=allclose(0, 0),
             describe_case=_describe_slot),
    Function("ch12.prefix_match", "Tokens of a prompt found in the prefix cache", 3,
             "only full blocks are cached, and block i matches only if blocks 0 … i match "
             "too; for each cached prompt count the leading blocks of block_size tokens that "
             "are equal in both (and full in both), take the best, and return it in tokens",
             library_answers=("inferbook.serving.hash_chain_cache.HashChainCache",
                              "inferbook.serving.radix_cache.RadixCache"),
             reference=_match_reference, cases=_match_cases, compare=allclose(0, 0),
             describe_case=_describe_match),
]
