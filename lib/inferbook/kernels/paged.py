"""Paged attention: the KV cache as fixed-size blocks of a shared pool (Kwon et al. 2023).

A contiguous cache (`inferbook.model.kvcache`) reserves S slots for every sequence up front, so a
request that stops early wastes the rest, and a batch of mixed lengths pays for its longest.
PagedAttention stores keys and values like an operating system stores a process's memory:
in blocks ("pages") of `block_size` tokens taken from one pool shared by all sequences, found
through a per-sequence block table. A sequence holds only ceil(length / block_size) blocks,
and sequences that share a prefix can point at the same blocks.

Layout and conventions (the engine's block manager and the KV-cache chapter build on these):

  * Pool, per layer: keys `k_pool` and values `v_pool`, each [num_blocks, K, block_size, H].
    Inside a block the layout is the contiguous cache's, head-major: one head's block_size
    keys are contiguous, so attention reads a block as a [K, block_size, H] tile with no
    transpose, exactly as it reads a chunk of the contiguous [B, K, S, H] cache.
  * Block table: int32 [B, max_blocks]. Entry [b, j] is the pool index of the block holding
    sequence b's positions j·block_size ... (j + 1)·block_size - 1; position p is at
    pool[table[b, p // block_size], :, p % block_size]. Only the first
    ceil(kv_len[b] / block_size) entries of a row are read; the rest must still be valid
    indices (0 by convention) and are masked out. Blocks may appear in several rows (shared
    prefixes); writing into a shared block is the block manager's business (copy on write).
  * Lengths: kv_len [B], tokens written per sequence, as in the contiguous cache; queries at
    positions q_pos [B, T]. The masks are those of `attention.reference_at_positions`.

`paged_attention_reference` gathers every sequence's blocks into a contiguous cache and runs
the reference: simple, and a full copy of the cache per step. `paged_attention` is the kernel:
it walks the logical blocks with the online softmax of `inferbook.kernels.flash`, fetching one block
per sequence per step straight from the pool, so nothing but the blocks in use is read and
nothing is copied into a contiguous cache.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from inferbook.kernels.flash import (
    kv_tile_range,
    online_softmax_init,
    online_softmax_result,
    online_softmax_step,
)
from inferbook.model.attention import (
    MASKED,
    attention_mask,
    group_mask,
    group_queries,
    reference_at_positions,
    ungroup_rows,
)

__all__ = ["gather_blocks", "paged_attention_reference", "paged_attention", "paged_write"]


def gather_blocks(pool: jax.Array, block_table_BJ: jax.Array) -> jax.Array:
    """Each sequence's blocks, in order, as a contiguous cache [B, K, J·block_size, H].

    `pool` is one layer's keys or values, [num_blocks, K, block_size, H]; the table is [B, J].
    """
    blocks_BJKCH = pool[block_table_BJ]
    B, J, K, C, H = blocks_BJKCH.shape
    return blocks_BJKCH.transpose(0, 2, 1, 3, 4).reshape(B, K, J * C, H)


def paged_attention_reference(q_BTNH: jax.Array, k_pool: jax.Array, v_pool: jax.Array,
                              block_table_BJ: jax.Array, q_pos_BT: jax.Array,
                              kv_len_B: jax.Array, window: int | None = None
                              ) -> tuple[jax.Array, jax.Array]:
    """Gather the blocks into a contiguous cache, then `reference_at_positions`."""
    return reference_at_positions(q_BTNH, gather_blocks(k_pool, block_table_BJ),
                                  gather_blocks(v_pool, block_table_BJ), q_pos_BT, kv_len_B,
                                  window)


def paged_attention(q_BTNH: jax.Array, k_pool: jax.Array, v_pool: jax.Array,
                    block_table_BJ: jax.Array, q_pos_BT: jax.Array, kv_len_B: jax.Array,
                    window: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Attention read block by block from the pool: output [B, T, N, H], lse [B, T, N].

    Step j fetches logical block j of every sequence (pool[table[:, j]], a [B, K, block_size,
    H] tile) and folds it into the running (o, m, l). Steps run only over blocks that some
    query can see. Queries that see no key get output 0 and log-sum-exp MASKED.
    """
    B, T, N, H = q_BTNH.shape
    _, K, C, _ = k_pool.shape
    G, J = N // K, block_table_BJ.shape[1]
    q_BKMH = group_queries(q_BTNH, K)
    scale = 1.0 / jnp.sqrt(jnp.float32(H))
    kv_len = kv_len_B.astype(jnp.int32)

    def visit(j, carry):
        blocks_B = block_table_BJ[:, j]
        k_BKCH, v_BKCH = k_pool[blocks_B], v_pool[blocks_B]
        s = jnp.einsum("BKMH,BKCH->BKMC", q_BKMH, k_BKCH,
                       preferred_element_type=jnp.float32) * scale
        mask_BTC = attention_mask(q_pos_BT, j * C + jnp.arange(C, dtype=jnp.int32), kv_len,
                                  window)
        s = jnp.where(group_mask(mask_BTC, G), s, MASKED)
        return online_softmax_step(carry, s, v_BKCH)

    lo, hi = kv_tile_range(q_pos_BT, kv_len, C, J, window)
    o, m, l = lax.fori_loop(lo, hi, visit, online_softmax_init((B, K, G * T), H))
    out, lse = online_softmax_result(o, m, l)
    return ungroup_rows(out, T).astype(q_BTNH.dtype), ungroup_rows(lse, T)


def paged_write(pool: jax.Array, block_table_BJ: jax.Array, new_BTKH: jax.Array,
                start_B: jax.Array) -> jax.Array:
    """Write T new entries of sequence b at positions start_B[b], ..., start_B[b] + T - 1.

    The paged twin of `kvcache.write`: position p lands in block table[b, p // block_size]
    at offset p % block_size. Positions past the table's last block are dropped. The caller
    (the block manager) has made sure the blocks written are allocated and not shared.
    """
    B, T = new_BTKH.shape[:2]
    C, J = pool.shape[2], block_table_BJ.shape[1]
    pos_BT = start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    logical_BT = pos_BT // C
    in_table = logical_BT < J
    block_BT = jnp.take_along_axis(block_table_BJ, jnp.minimum(logical_BT, J - 1), axis=1)
    # Out-of-table writes are sent past the pool's end, where mode="drop" discards them.
    block_BT = jnp.where(in_table, block_BT, pool.shape[0])
    return pool.at[block_BT, :, pos_BT % C].set(new_BTKH.astype(pool.dtype),
                                                     mode="drop")
