"""The KV cache: every layer's keys and values for the tokens seen so far.

Layout: one [B, S, K, H] array of keys and one of values per layer, allocated once at the
largest length a request may reach (S), plus `lengths` [B], the number of tokens each
sequence has written. Slot s of sequence b holds position s; slots at or beyond lengths[b]
hold garbage that the attention mask never lets through. Allocating S up front is what lets
the decoding loop compile once: each step writes one slot per sequence in place instead of
growing an array (whose changing shape would force a recompile).

Its size, 2 · L · B · S · K · H · bytes, is the memory price of not recomputing the past.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .config import ModelConfig

__all__ = ["KVCache", "init_cache", "write", "cache_bytes"]


class KVCache(NamedTuple):
    """Keys and values per layer ([B, S, K, H] each) and tokens written per sequence [B]."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    lengths: jax.Array

    @property
    def max_len(self) -> int:
        """S, the number of slots per sequence."""
        return self.k[0].shape[1]

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype: Any = jnp.float32) -> KVCache:
    """An empty cache of `max_len` slots for `batch` sequences."""
    shape = (batch, max_len, cfg.K, cfg.H)

    def per_layer():
        return tuple(jnp.zeros(shape, dtype) for _ in range(cfg.L))

    return KVCache(k=per_layer(), v=per_layer(), lengths=jnp.zeros((batch,), jnp.int32))


def write(cache_BSKH: jax.Array, new_BTKH: jax.Array, start_B: jax.Array,
          n_valid_B: jax.Array | None = None) -> jax.Array:
    """Write T new entries of each sequence b at slots start_B[b], start_B[b] + 1, ...

    Entries t >= n_valid_B[b] (padding of a ragged batch), and any that would land past the
    end of the cache, are dropped rather than clamped onto valid slots.
    """
    B, T = new_BTKH.shape[:2]
    S = cache_BSKH.shape[1]
    slot_BT = start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    if n_valid_B is not None:
        slot_BT = jnp.where(jnp.arange(T)[None, :] < n_valid_B[:, None], slot_BT, S)
    batch_BT = jnp.broadcast_to(jnp.arange(B, dtype=jnp.int32)[:, None], (B, T))
    return cache_BSKH.at[batch_BT, slot_BT].set(new_BTKH.astype(cache_BSKH.dtype), mode="drop")


def cache_bytes(cache: KVCache) -> int:
    """Bytes held by the keys and values (the lengths vector is not counted)."""
    return sum(a.size * a.dtype.itemsize for a in cache.k + cache.v)
