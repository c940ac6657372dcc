"""KV-cache eviction: keep a fixed budget of tokens, chosen by StreamingLLM's or H2O's rule.

Attention in trained models is far from uniform: a few positions collect most of it. Two
observations lead to two policies that need no retraining:

* StreamingLLM (Xiao et al. 2023): the first few tokens draw large attention whatever they
  say ("attention sinks"), and so do the most recent ones. Keep `n_sink` initial tokens and a
  sliding window of recent ones; evict the oldest token outside the sinks.
* H2O, the heavy-hitter oracle (Zhang et al. 2023): tokens that received much attention so far
  keep receiving it. Keep the `n_recent` newest tokens, and among the rest keep those with the
  largest attention accumulated over all steps so far; evict the one with the smallest.

Both run per KV head: each head of each sequence keeps its own set of tokens (the cache is
[B, K, C, H] with the position each slot holds in `pos` [B, K, C]). After every step the cache
holds at most `budget` tokens per head — the new token first attends to the cache and to
itself, then one of those budget + 1 tokens is dropped. Keys keep the rotary phase of their
original position, as H2O does (StreamingLLM re-numbers positions inside the cache so that a
model can run past its training length; that changes nothing about which tokens are kept).

`budget` may be smaller than the array's capacity C: the slots past it are disabled. A sweep
over budgets then compiles once.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from inferbook.model.attention import MASKED
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import Params, require_plain_decoder, rope, transformer, unembed

__all__ = ["EvictCache", "init_cache", "step", "attend_stream", "model_logits",
           "structured_stream", "relative_error", "POLICIES"]

POLICIES = ("streaming", "h2o")
_EMPTY, _DISABLED = -1, -2


class EvictCache(NamedTuple):
    """Keys and values [B, K, C, H]; position held per slot [B, K, C] (-1 empty, -2 disabled);
    attention accumulated per slot [B, K, C]; tokens seen per sequence [B]."""

    k: jax.Array
    v: jax.Array
    pos: jax.Array
    score: jax.Array
    seen: jax.Array


def init_cache(batch: int, K: int, H: int, capacity: int, budget: int | jax.Array | None = None,
               dtype: Any = jnp.float32) -> EvictCache:
    """An empty cache of `capacity` slots per head, of which the first `budget` are usable."""
    budget = capacity if budget is None else budget
    slots = jnp.arange(capacity)
    pos = jnp.broadcast_to(jnp.where(slots < budget, _EMPTY, _DISABLED), (batch, K, capacity))
    zeros = jnp.zeros((batch, K, capacity, H), dtype)
    return EvictCache(zeros, zeros, pos.astype(jnp.int32), jnp.zeros(pos.shape, jnp.float32),
                      jnp.zeros((batch,), jnp.int32))


def step(cache: EvictCache, q_BNH: jax.Array, k_BKH: jax.Array, v_BKH: jax.Array, policy: str,
         n_sink: int = 4, n_recent: int = 0) -> tuple[jax.Array, EvictCache]:
    """One new token per sequence: attend to the kept tokens and itself, then evict one.

    Returns the attention output [B, N, H] and the updated cache. Priorities decide who stays
    (the lowest is dropped): empty slots lowest, disabled slots never; StreamingLLM ranks sinks
    first and the rest by recency; H2O ranks the n_recent newest first and the rest by
    accumulated attention.
    """
    B, N, H = q_BNH.shape
    K, C = cache.k.shape[1], cache.k.shape[2]
    G = N // K
    keys = jnp.concatenate([cache.k, k_BKH[:, :, None]], axis=2)          # [B, K, C+1, H]
    vals = jnp.concatenate([cache.v, v_BKH[:, :, None]], axis=2)
    seen = jnp.broadcast_to(cache.seen[:, None, None], (B, K, 1))
    pos = jnp.concatenate([cache.pos, seen], axis=2)                        # [B, K, C+1]
    q_BKGH = q_BNH.reshape(B, K, G, H).astype(jnp.float32)
    s = jnp.einsum("BKGH,BKSH->BKGS", q_BKGH, keys.astype(jnp.float32)) / jnp.sqrt(
        jnp.float32(H))
    s = jnp.where((pos >= 0)[:, :, None, :], s, MASKED)
    p = jax.nn.softmax(s, axis=-1)
    out = jnp.einsum("BKGS,BKSH->BKGH", p, vals.astype(jnp.float32)).reshape(B, N, H)
    acc = jnp.concatenate([cache.score, jnp.zeros((B, K, 1))], axis=2) + p.sum(2)

    if policy == "streaming":
        rank = jnp.where(pos < n_sink, jnp.inf, pos.astype(jnp.float32))
    elif policy == "h2o":
        rank = jnp.where(pos > seen - n_recent, jnp.inf, acc)
    else:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    rank = jnp.where(pos == _EMPTY, -jnp.inf, rank)
    rank = jnp.where(pos == _DISABLED, jnp.inf, rank)
    victim_BK = jnp.argmin(rank, axis=-1)          # == C: the new token itself is dropped
    b_idx, k_idx = jnp.meshgrid(jnp.arange(B), jnp.arange(K), indexing="ij")
    put = lambda a, x: a.at[b_idx, k_idx, victim_BK].set(x, mode="drop")  # noqa: E731
    new = EvictCache(put(cache.k, k_BKH.astype(cache.k.dtype)),
                     put(cache.v, v_BKH.astype(cache.v.dtype)),
                     put(cache.pos, seen[..., 0]), put(acc[..., :C], acc[..., C]),
                     cache.seen + 1)
    return out.astype(q_BNH.dtype), new


@partial(jax.jit, static_argnames=("capacity", "policy"))
def attend_stream(q_BTNH: jax.Array, k_BTKH: jax.Array, v_BTKH: jax.Array, capacity: int,
                  budget: int | jax.Array, policy: str, n_sink: int = 4, n_recent: int = 0
                  ) -> tuple[jax.Array, EvictCache]:
    """Decode a whole stream one token at a time under a budget: outputs [B, T, N, H] and the
    final cache. With budget ≥ T nothing is evicted and this is causal attention."""
    B, T, N, H = q_BTNH.shape
    cache = init_cache(B, k_BTKH.shape[2], H, capacity, budget, k_BTKH.dtype)

    def body(cache, qkv):
        out, cache = step(cache, *qkv, policy, n_sink, n_recent)
        return cache, out

    cache, out_TBNH = jax.lax.scan(body, cache, (q_BTNH.swapaxes(0, 1), k_BTKH.swapaxes(0, 1),
                                                 v_BTKH.swapaxes(0, 1)))
    return out_TBNH.swapaxes(0, 1), cache


@partial(jax.jit, static_argnames=("cfg", "capacity", "policy"))
def model_logits(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, capacity: int,
                 budget: int | jax.Array, policy: str, n_sink: int = 4, n_recent: int = 0
                 ) -> jax.Array:
    """The library's model decoding tokens_BT one at a time, every layer under the budget:
    logits [B, T, V] (to compare with `decoder.forward`)."""
    require_plain_decoder(cfg, "KV eviction")
    B, T = tokens_BT.shape
    caches = tuple(init_cache(B, cfg.K, cfg.H, capacity, budget) for _ in range(cfg.L))

    def body(caches, t):
        new = list(caches)

        def attend(i, q_B1NH, k_B1KH, v_B1KH):
            out, new[i] = step(caches[i], q_B1NH[:, 0], k_B1KH[:, 0], v_B1KH[:, 0], policy,
                               n_sink, n_recent)
            return out[:, None]

        x = transformer(params, cfg, tokens_BT[:, t][:, None], jnp.full((B, 1), t), attend)
        return tuple(new), unembed(params, cfg, x[:, 0])

    _, logits_TBV = jax.lax.scan(body, caches, jnp.arange(T))
    return logits_TBV.swapaxes(0, 1)


@partial(jax.jit, static_argnames=("B", "T", "K", "G", "H"))
def structured_stream(key: jax.Array, B: int, T: int, K: int, G: int, H: int,
                      heavy_fraction: float = 0.05, sink: float = 5.0, heavy: float = 3.0,
                      recency: float = 1.0, noise: float = 1.0, theta: float = 10_000.0
                      ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Queries [B, T, N, H], keys and values [B, T, K, H] whose attention looks like a trained
    model's: a sink at position 0, a few heavy hitters, a preference for recent tokens.

    One direction u (the slowest-rotating channel pair, so RoPE hardly turns it) is shared by
    every query; the first key has a large component along it (the sink) and a random
    `heavy_fraction` of keys a moderate one (heavy hitters). A constant vector in the fast
    channel pairs of both queries and keys gives, after RoPE, scores that peak at distance
    zero and fade with distance (recency). Everything else is Gaussian noise.
    """
    kq, kk, kv, kh = jax.random.split(key, 4)
    N, h2 = K * G, H // 2
    q = noise * jax.random.normal(kq, (B, T, N, H)) / jnp.sqrt(H)
    k = noise * jax.random.normal(kk, (B, T, K, H)) / jnp.sqrt(H)
    v = jax.random.normal(kv, (B, T, K, H))
    u = jnp.zeros(H).at[h2 - 1].set(1.0).at[H - 1].set(1.0) / jnp.sqrt(2.0)  # slowest pair
    fast = jnp.zeros(H).at[: h2 // 2].set(1.0).at[h2: h2 + h2 // 2].set(1.0)
    fast = fast / jnp.linalg.norm(fast)
    weight_BT = jnp.where(jax.random.uniform(kh, (B, T)) < heavy_fraction, heavy, 0.0)
    weight_BT = weight_BT.at[:, 0].set(sink)
    q = q + jnp.sqrt(H) ** 0.5 * (u + recency * fast)
    k = k + jnp.sqrt(H) ** 0.5 * (weight_BT[..., None, None] * u + recency * fast)
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    return rope(q, pos, theta), rope(k, pos, theta), v


def relative_error(out_BTNH: jax.Array, ref_BTNH: jax.Array, v_BTKH: jax.Array,
                   start: int = 0) -> float:
    """Mean over positions t ≥ start and heads of ‖out - ref‖ / (RMS norm of a value vector).

    An attention output is an average of value vectors, so its error is measured in units of
    a typical value: 1.0 means off by a whole value vector. (Dividing by ‖ref‖ instead would
    reward nothing: an average over many unrelated values has a small norm.)
    """
    err = jnp.linalg.norm((out_BTNH - ref_BTNH)[:, start:].astype(jnp.float32), axis=-1)
    scale = jnp.sqrt(jnp.mean(jnp.sum(v_BTKH.astype(jnp.float32) ** 2, axis=-1)))
    return float(jnp.mean(err) / scale)
