"""The block pool behind the prefix cache: KV blocks copied out of caches, and gathered back.

A running sequence keeps its keys and values in its row of the contiguous generate batch
(model_engine.py). What outlives it — the blocks the prefix cache keeps for later requests —
is copied into a pool of fixed-size blocks, per layer [num_blocks, K, block_size, H]: the
layout of `inferbook.kernels.paged`, where a paged-attention kernel (chapter 7) would read
them through a block table without copying. Here they move two ways:

  * `save_blocks`: cut a cache row [K, S, H] into S / block_size blocks and write the chosen
    ones to their pool blocks (the others are aimed past the pool and dropped);
  * `load_blocks`: gather pool blocks, in block-table order, into a batch-1 contiguous cache
    that a prefill can continue — exactly `kernels.paged.gather_blocks`.

The block manager decides which blocks; these functions only copy.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from inferbook.kernels.paged import gather_blocks
from inferbook.model import kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.kvcache import KVCache

__all__ = ["KVPool", "init_pool", "save_blocks", "load_blocks"]


class KVPool(NamedTuple):
    """Blocks for the prefix cache, in the layout of `inferbook.kernels.paged`."""

    k: tuple[jax.Array, ...]    # per layer [num_blocks, K, block_size, H]
    v: tuple[jax.Array, ...]

    @property
    def num_blocks(self) -> int:
        return self.k[0].shape[0]

    @property
    def block_size(self) -> int:
        return self.k[0].shape[2]


def init_pool(cfg: ModelConfig, num_blocks: int, block_size: int, dtype: Any) -> KVPool:
    """An empty pool: zeros, num_blocks blocks of block_size tokens per layer. With latent
    attention a block holds latents ((1, R_kv + H_rope) per token) and there are no values."""
    heads, width = kvcache.entry_shape(cfg)
    shape = (num_blocks, heads, block_size, width)

    def zeros() -> tuple[jax.Array, ...]:
        return tuple(jnp.zeros(shape, dtype) for _ in range(cfg.L))

    return KVPool(zeros(), () if cfg.mla is not None else zeros())


@jax.jit
def save_blocks(pool: KVPool, k: Sequence[jax.Array], v: Sequence[jax.Array], row: jax.Array,
                ids: jax.Array) -> KVPool:
    """Write row `row` of the caches k, v (per layer [B, K, S, H]) into the pool, block by block.

    ids [S / block_size]: the pool block for each block of the row; an id past the pool
    (num_blocks) skips that block. S must be a multiple of the block size.
    """
    def put(pool_l: jax.Array, cache_l: jax.Array) -> jax.Array:
        _, K, S, H = cache_l.shape
        bs = pool_l.shape[2]
        blocks = cache_l[row].reshape(K, S // bs, bs, H).transpose(1, 0, 2, 3)
        return pool_l.at[ids].set(blocks.astype(pool_l.dtype), mode="drop")
    return KVPool(tuple(map(put, pool.k, k)), tuple(map(put, pool.v, v)))


@jax.jit
def load_blocks(pool: KVPool, ids: jax.Array, n: jax.Array) -> KVCache:
    """A batch-1 cache [1, K, len(ids) · block_size, H] per layer of pool blocks `ids`, in
    order, holding n tokens."""
    def get(pool_l: jax.Array) -> jax.Array:
        return gather_blocks(pool_l, ids[None])            # [1, K, S, H]
    return KVCache(tuple(map(get, pool.k)), tuple(map(get, pool.v)), n[None])
