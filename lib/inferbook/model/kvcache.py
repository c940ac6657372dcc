"""The KV cache: every layer's keys and values for the tokens seen so far.

Layout: one [B, K, S, H] array of keys and one of values per layer, allocated once at the
largest length a request may reach (S), plus `lengths` [B], the number of tokens each
sequence has written. Heads come before positions so that each head's keys sit together in
memory: the attention products then read the cache where it lies, with no transposed copy.
Slot s of sequence b holds position s; slots at or beyond lengths[b] hold garbage that the
attention mask never lets through. Allocating S up front is what lets the decoding loop compile
once: each step writes one slot per sequence in place instead of growing an array (whose
changing shape would force a recompile).

Its size, 2 · L · B · S · K · H · bytes, is the memory price of not recomputing the past.

Latent attention (DeepSeek, mla.py) caches no keys and values but one latent per token: `k`
then holds [B, 1, S, R_kv + H_rope] per layer (the latent and the shared rotary key side by
side), `v` is empty, and the attention reads its values from the latent's channels of `k`.
Its size is L · B · S · (R_kv + H_rope) · bytes.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from inferbook.model.config import ModelConfig

__all__ = ["KVCache", "init_cache", "write", "append", "cache_bytes", "entry_shape"]


class KVCache(NamedTuple):
    """Keys and values per layer ([B, K, S, H] each) and tokens written per sequence [B].

    With latent attention `v` is the empty tuple and `k` holds the latents (see above)."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    lengths: jax.Array

    @property
    def max_len(self) -> int:
        """S, the number of slots per sequence."""
        return self.k[0].shape[2]

    @property
    def batch(self) -> int:
        return self.k[0].shape[0]


def entry_shape(cfg: ModelConfig) -> tuple[int, int]:
    """(heads, width) of one token's cached key in one layer: (K, H), or (1, R_kv + H_rope)
    for latent attention."""
    if cfg.mla is not None:
        return 1, cfg.mla.cache_width
    return cfg.K, cfg.H


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype: Any = jnp.float32) -> KVCache:
    """An empty cache of `max_len` slots for `batch` sequences."""
    heads, width = entry_shape(cfg)
    shape = (batch, heads, max_len, width)

    def per_layer():
        return tuple(jnp.zeros(shape, dtype) for _ in range(cfg.L))

    return KVCache(k=per_layer(), v=() if cfg.mla is not None else per_layer(),
                   lengths=jnp.zeros((batch,), jnp.int32))


def write(cache_BKSH: jax.Array, new_BTKH: jax.Array, start_B: jax.Array) -> jax.Array:
    """Write T new entries of each sequence b at slots start_B[b], ..., start_B[b] + T - 1.

    Writes that would land past the end of the cache are dropped (never clamped back onto
    valid slots). Padding entries of a ragged batch are written like the rest: they sit beyond
    their sequence's length, where the attention mask ignores them and the next real token
    overwrites them.
    """
    B, T, K, H = new_BTKH.shape
    S = cache_BKSH.shape[2]
    # Written as a scatter into rows of the cache viewed as [B·K, S, H] (a free reshape), not
    # as `cache.at[b, :, slot].set(...)`: XLA in jax 0.7.2 (Colab's) first moves the indexed
    # axes of a scatter to the front, which here would copy the whole cache to [B, S, K, H]
    # and back around every write. With the indexed axes (row, slot) already in front, each
    # [H] vector is written in place.
    row_BK = jnp.arange(B * K, dtype=jnp.int32).reshape(B, K)
    slot_BT = start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    index_BKT2 = jnp.stack(jnp.broadcast_arrays(row_BK[:, :, None], slot_BT[:, None, :]), -1)
    where = jax.lax.ScatterDimensionNumbers(update_window_dims=(3,), inserted_window_dims=(0, 1),
                                            scatter_dims_to_operand_dims=(0, 1))
    rows = jax.lax.scatter(cache_BKSH.reshape(B * K, S, H), index_BKT2,
                           new_BTKH.swapaxes(1, 2).astype(cache_BKSH.dtype), where,
                           unique_indices=True, mode=jax.lax.GatherScatterMode.FILL_OR_DROP)
    return rows.reshape(B, K, S, H)


def append(cache: KVCache, new_k: Sequence[jax.Array], new_v: Sequence[jax.Array],
           n_new_B: jax.Array | None = None) -> KVCache:
    """The cache with each layer's new keys and values ([B, T, K, H]) appended.

    Sequence b gains n_new_B[b] tokens (default: all T). The caller makes sure they fit:
    lengths + T <= max_len. A cache without values (latent attention) ignores `new_v`.
    """
    if n_new_B is None:
        n_new_B = jnp.full_like(cache.lengths, new_k[0].shape[1])
    return KVCache(k=tuple(write(c, k, cache.lengths) for c, k in zip(cache.k, new_k)),
                   v=tuple(write(c, v, cache.lengths) for c, v in zip(cache.v, new_v)),
                   lengths=cache.lengths + n_new_B)


def cache_bytes(cache: NamedTuple) -> int:
    """Bytes held by a cache's arrays, whatever kind of cache it is: every field but the
    `lengths` vector, summed over its arrays. One definition for every cache of the library —
    `KVCache` (keys and values, or latents), and the windowed, quantized (codes and scales)
    and shared caches of `inferbook.memory`."""
    parts = [part for name, part in cache._asdict().items() if name != "lengths"]
    return sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(parts))
