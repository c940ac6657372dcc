"""Cross-layer KV sharing: some layers read another layer's keys and values.

A model can be trained so that a group of adjacent layers uses one set of keys and values:
the first layer of the group computes and caches them, the others attend to that same cache
with their own queries (Brandon et al. 2024, "cross-layer attention"; Character.AI shares KV
between neighbouring layers, on top of mixing local and global ones). The cache then holds one
layer's worth of keys and values per group — memory falls by the group size.

The bytes a decode step *reads* do not fall, which is the scaling book's caveat: every layer
still attends to a whole cache, so a shared cache is read once per layer that uses it. Unless a
kernel serves several layers from one read (they run one after another, with an MLP between),
step time stays where it was. The chapter measures both.

`sources[i]` names the layer whose keys and values layer i uses; sources[i] == i means layer i
owns a cache. Only owners' caches are allocated. (The library's weights still hold W_K, W_V
for every layer; a model trained with sharing would drop the borrowers' ones. They are simply
ignored here.)
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from inferbook.model import kvcache
from inferbook.model.attention import attention_mask, attention_reference
from inferbook.model.config import ModelConfig
from inferbook.model.decode import attend_cached
from inferbook.model.decoder import (
    Attend,
    NewKV,
    Params,
    require_plain_decoder,
    run_keeping_kv,
    transformer,
    unembed,
)

__all__ = ["Sources", "share_adjacent", "owners", "SharedCache", "init_cache", "extend",
           "append", "forward_reference"]

Sources = tuple[int, ...]


def share_adjacent(L: int, group: int) -> Sources:
    """Groups of `group` consecutive layers share the first one's cache: (0, 0, 2, 2, ...)."""
    if group < 1:
        raise ValueError(f"group must be positive, got {group}")
    return tuple(i - i % group for i in range(L))


def owners(sources: Sources) -> list[int]:
    """The layers that own a cache, in order; borrowers point at one of them."""
    for i, s in enumerate(sources):
        if not (0 <= s <= i and sources[s] == s):
            raise ValueError(f"layer {i} borrows from layer {s}, which is not an earlier owner")
    return [i for i, s in enumerate(sources) if s == i]


class SharedCache(NamedTuple):
    """Keys and values [B, K, S, H] for each owner layer, and tokens written per sequence."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    lengths: jax.Array


def init_cache(cfg: ModelConfig, sources: Sources, batch: int, max_len: int,
               dtype: Any = jnp.float32) -> SharedCache:
    """An empty cache with one [B, K, S, H] pair per owner layer."""
    require_plain_decoder(cfg, "cross-layer KV sharing")
    n = len(owners(sources))
    shape = (batch, cfg.K, max_len, cfg.H)
    return SharedCache(tuple(jnp.zeros(shape, dtype) for _ in range(n)),
                       tuple(jnp.zeros(shape, dtype) for _ in range(n)),
                       jnp.zeros((batch,), jnp.int32))


def _attend_shared(sources: Sources, attend_one: Attend) -> Attend:
    """An `attend` callback: owners keep their k, v; borrowers swap in their owner's.

    `attend_one(j, ...)` attends with the keys and values of the j-th owner (its cache slot).
    """
    slot = {layer: j for j, layer in enumerate(owners(sources))}
    own_kv: dict[int, tuple[jax.Array, jax.Array]] = {}

    def attend(i: int, q_BTNH: jax.Array, k_BTKH: jax.Array, v_BTKH: jax.Array) -> jax.Array:
        if sources[i] == i:
            own_kv[i] = (k_BTKH, v_BTKH)
        k_BTKH, v_BTKH = own_kv[sources[i]]
        return attend_one(slot[sources[i]], q_BTNH, k_BTKH, v_BTKH)

    return attend


@partial(jax.jit, static_argnames=("cfg", "sources"))
def extend(params: Params, cfg: ModelConfig, sources: Sources, tokens_BT: jax.Array,
           cache: SharedCache, n_new_B: jax.Array | None = None) -> tuple[jax.Array, NewKV]:
    """`decode.extend` with shared caches: logits [B, T, V] and the owners' new keys and values
    (for `append`). Prefill is `extend` on an empty cache."""
    B, T = tokens_BT.shape
    if n_new_B is None:
        n_new_B = jnp.full((B,), T, jnp.int32)
    pos_BT = cache.lengths[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]

    def attend_one(j, q_BTNH, k_BTKH, v_BTKH):
        return attend_cached(q_BTNH, k_BTKH, v_BTKH, n_new_B, cfg.window, cache.k[j],
                             cache.v[j], cache.lengths)

    x_BTD, (new_k, new_v) = run_keeping_kv(params, cfg, tokens_BT, pos_BT,
                                           _attend_shared(sources, attend_one))
    mine = owners(sources)       # the borrowers' keys and values are never cached
    return unembed(params, cfg, x_BTD), (tuple(new_k[i] for i in mine),
                                         tuple(new_v[i] for i in mine))


@partial(jax.jit, donate_argnames=("cache",))
def append(cache: SharedCache, new_k: Sequence[jax.Array], new_v: Sequence[jax.Array],
           n_new_B: jax.Array | None = None) -> SharedCache:
    """The owners' caches with their new keys and values written in place."""
    full = kvcache.append(kvcache.KVCache(cache.k, cache.v, cache.lengths), new_k, new_v,
                          n_new_B)
    return SharedCache(full.k, full.v, full.lengths)


@partial(jax.jit, static_argnames=("cfg", "sources"))
def forward_reference(params: Params, cfg: ModelConfig, sources: Sources, tokens_BT: jax.Array,
                      lengths_B: jax.Array | None = None) -> jax.Array:
    """Logits [B, T, V] of the sharing model with no cache: borrowers attend to their owner's
    keys and values of the same pass."""
    B, T = tokens_BT.shape
    if lengths_B is None:
        lengths_B = jnp.full((B,), T, jnp.int32)
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    mask = attention_mask(pos_BT, pos_BT[0], lengths_B, cfg.window)

    def attend_one(j, q_BTNH, k_BTKH, v_BTKH):
        return attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2),
                                   mask)[0]

    return unembed(params, cfg, transformer(params, cfg, tokens_BT, pos_BT,
                                            _attend_shared(sources, attend_one)))
