"""Local (sliding-window) attention, and models that mix local and global layers.

A local layer lets the query at position p see only the keys at positions p - W + 1 ... p
(Mistral 7B: W = 4,096; Jiang et al. 2023). A key older than W positions is never looked at
again, so that layer's cache needs W slots, not one per token: slot p mod W holds position p,
and writing position p overwrites position p - W — a ring buffer. The cache stops growing at
W tokens, however long the sequence gets.

Mixing local and global layers (Gemma 2 alternates them one to one, Gemma 3 uses five local
layers per global one, Character.AI's serving stack a similar ratio) keeps a few layers with
the whole context and caps all the others. The pattern is a tuple with one entry per layer:
the window of a local layer, or None for a global one. `ModelConfig.window` is the special
case of the same window in every layer.

Decoding follows `decode.py`: `extend` reads the cache and returns the new keys and values,
`append` writes them. A ring's slots hold positions out of order, so the mask is built from the
position each slot holds (`slot_positions`) rather than from the slot index.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from inferbook.model.attention import attention_mask, attention_reference, merge_partials
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import (
    NewKV,
    Params,
    require_plain_decoder,
    run_keeping_kv,
    transformer,
    unembed,
)
from inferbook.perf import counts

__all__ = ["Windows", "layer_windows", "RingCache", "init_cache", "slot_positions",
           "attend_window", "extend", "append", "forward_reference", "kv_bytes_per_sequence"]

Windows = tuple[int | None, ...]


def layer_windows(L: int, window: int, local_per_global: int | None = None) -> Windows:
    """A pattern of L layers: `local_per_global` local layers, then one global, repeated.

    None makes every layer local. (5, say, gives Gemma 3's L L L L L G L L L L L G ...)
    """
    if local_per_global is None:
        return (window,) * L
    period = local_per_global + 1
    return tuple(None if (i + 1) % period == 0 else window for i in range(L))


class RingCache(NamedTuple):
    """Per layer keys and values [B, K, C_i, H], C_i = window (local) or max_len (global),
    and tokens seen per sequence [B]."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    lengths: jax.Array


def init_cache(cfg: ModelConfig, windows: Windows, batch: int, max_len: int,
               dtype: Any = jnp.float32) -> RingCache:
    """An empty cache: W slots for a local layer (fewer if max_len is smaller), max_len for a
    global one."""
    require_plain_decoder(cfg, "the ring-buffer window cache")
    if len(windows) != cfg.L:
        raise ValueError(f"{len(windows)} windows for {cfg.L} layers")
    sizes = [max_len if w is None else min(w, max_len) for w in windows]
    zeros = lambda c: jnp.zeros((batch, cfg.K, c, cfg.H), dtype)  # noqa: E731
    return RingCache(tuple(zeros(c) for c in sizes), tuple(zeros(c) for c in sizes),
                     jnp.zeros((batch,), jnp.int32))


def slot_positions(lengths_B: jax.Array, capacity: int, ring: bool) -> jax.Array:
    """The position each slot holds after lengths_B[b] tokens were written, -1 if empty [B, C].

    A plain cache holds position s in slot s. A ring holds, in slot s, the latest position
    p < length with p mod C = s: p = (length - 1) - ((length - 1 - s) mod C).
    """
    s = jnp.arange(capacity, dtype=jnp.int32)[None, :]
    last = lengths_B[:, None] - 1
    pos = last - jnp.mod(last - s, capacity) if ring else s + 0 * last
    return jnp.where((pos >= 0) & (pos <= last), pos, -1)


def attend_window(q_BTNH: jax.Array, k_BTKH: jax.Array, v_BTKH: jax.Array, n_new_B: jax.Array,
                  window: int | None, cache_k: jax.Array, cache_v: jax.Array,
                  cache_len_B: jax.Array, ring: bool) -> jax.Array:
    """T new tokens attend to each other (causally, within the window) and to the cache.

    The two partial attentions are merged by their log-sum-exps, as `decode.attend_cached`
    does; the cache part masks each slot by the position it holds.
    """
    T = q_BTNH.shape[1]
    rel_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), q_BTNH.shape[:2])
    mask_new = attention_mask(rel_BT, rel_BT[0], n_new_B, window)
    out_new, lse_new = attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2),
                                           mask_new)
    q_pos_BT1 = (cache_len_B[:, None] + rel_BT)[:, :, None]
    k_pos_B1C = slot_positions(cache_len_B, cache_k.shape[2], ring)[:, None, :]
    mask_cache = k_pos_B1C >= 0                     # every cached position is in the past
    if window is not None:
        mask_cache &= q_pos_BT1 - k_pos_B1C < window
    out_c, lse_c = attention_reference(q_BTNH, cache_k, cache_v, mask_cache)
    return merge_partials(out_c, lse_c, out_new, lse_new)[0]


@partial(jax.jit, static_argnames=("cfg", "windows"))
def extend(params: Params, cfg: ModelConfig, windows: Windows, tokens_BT: jax.Array,
           cache: RingCache, n_new_B: jax.Array | None = None) -> tuple[jax.Array, NewKV]:
    """`decode.extend` for a mixed local/global model: logits [B, T, V] and the new keys and
    values of every layer, without writing the cache. Prefill is `extend` on an empty cache."""
    B, T = tokens_BT.shape
    if n_new_B is None:
        n_new_B = jnp.full((B,), T, jnp.int32)
    pos_BT = cache.lengths[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        return attend_window(q_BTNH, k_BTKH, v_BTKH, n_new_B, windows[i], cache.k[i],
                             cache.v[i], cache.lengths, ring=windows[i] is not None)

    x_BTD, new_kv = run_keeping_kv(params, cfg, tokens_BT, pos_BT, attend)
    return unembed(params, cfg, x_BTD), new_kv


def _write(cache_BKCH: jax.Array, new_BTKH: jax.Array, start_B: jax.Array, n_new_B: jax.Array,
           ring: bool) -> jax.Array:
    B, T = new_BTKH.shape[:2]
    C = cache_BKCH.shape[2]
    pos_BT = start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    keep = jnp.arange(T)[None, :] < n_new_B[:, None]
    if ring:
        # Of the new positions, only the last C survive; writing the others would collide
        # (scatter order is undefined), so they are dropped rather than overwritten.
        keep &= pos_BT >= (start_B + n_new_B)[:, None] - C
        slot_BT = jnp.mod(pos_BT, C)
    else:
        slot_BT = pos_BT
    slot_BT = jnp.where(keep, slot_BT, C)           # out of range: dropped
    batch_BT = jnp.broadcast_to(jnp.arange(B)[:, None], (B, T))
    return cache_BKCH.at[batch_BT, :, slot_BT].set(new_BTKH.astype(cache_BKCH.dtype),
                                                   mode="drop")


@partial(jax.jit, static_argnames=("windows",), donate_argnames=("cache",))
def append(cache: RingCache, windows: Windows, new_k: Sequence[jax.Array],
           new_v: Sequence[jax.Array], n_new_B: jax.Array | None = None) -> RingCache:
    """The cache with each layer's new keys and values [B, T, K, H] written (in place)."""
    if n_new_B is None:
        n_new_B = jnp.full_like(cache.lengths, new_k[0].shape[1])
    w = lambda c, x, win: _write(c, x, cache.lengths, n_new_B, win is not None)  # noqa: E731
    return RingCache(tuple(w(c, x, win) for c, x, win in zip(cache.k, new_k, windows)),
                     tuple(w(c, x, win) for c, x, win in zip(cache.v, new_v, windows)),
                     cache.lengths + n_new_B)


@partial(jax.jit, static_argnames=("cfg", "windows"))
def forward_reference(params: Params, cfg: ModelConfig, windows: Windows, tokens_BT: jax.Array,
                      lengths_B: jax.Array | None = None) -> jax.Array:
    """Logits [B, T, V] with no cache: layer i masks with `attention_mask(..., windows[i])`.

    With the same window in every layer this is `decoder.forward` of `cfg.replace(window=W)`.
    """
    B, T = tokens_BT.shape
    if lengths_B is None:
        lengths_B = jnp.full((B,), T, jnp.int32)
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        mask = attention_mask(pos_BT, pos_BT[0], lengths_B, windows[i])
        return attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2),
                                   mask)[0]

    return unembed(params, cfg, transformer(params, cfg, tokens_BT, pos_BT, attend))


def kv_bytes_per_sequence(cfg: ModelConfig, windows: Windows, seq_len: int,
                          bytes_per_element: float = 2) -> float:
    """KV bytes of one sequence of seq_len tokens: each layer stores min(W_i, seq_len) tokens.

    The estimator's bytes per token per layer, 2·K·H·bytes, times the tokens each layer keeps.
    """
    per_layer_token = counts.kv_bytes_per_token(cfg, bytes_per_element) / cfg.L
    return per_layer_token * sum(seq_len if w is None else min(w, seq_len) for w in windows)
