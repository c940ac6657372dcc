"""`ModelEngine`: the Engine interface over the library's transformer.

The generate batch is a contiguous KV cache with one row per slot ([slots, K, max_len, H] per
layer, kvcache.py) plus, per slot, the token to feed next, the sampling step it has reached,
its requests' PRNG keys and whether it is in use. That is JetStream's layout too: the decode
program sees fixed shapes no matter which requests come and go, so it compiles once.

Prompts are padded to a few bucket lengths (powers of two from `min_bucket`), so prefill
compiles once per bucket rather than once per prompt length; a prefix is a batch-1 cache whose
length is its bucket, and `insert` copies it into the first bucket positions of a slot.

The decode step follows `decode.generate`: one program reads the cache and samples, a second
appends the new keys and values in place (its input buffers are donated), because XLA:CPU
copies the whole cache when one program both reads and updates it.

Paged memory in this engine is bookkeeping: the block manager decides who may run, but a
running sequence's KV stays in its contiguous slot. Blocks become physical only in the block
pool that backs the prefix cache ([num_blocks, K, block_size, H] per layer): `save_blocks`
copies a prefix's or slot's blocks there, `load_prefix` gathers them back into a prefix.
A paged-attention kernel (`inferbook.kernels.paged`, chapter 7) reads such a pool directly through
block tables; the pool here has its layout.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.kernels.paged import gather_blocks
from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.kvcache import KVCache
from inferbook.model.sampling import GREEDY, Sampler, sample
from inferbook.perf.counts import kv_bytes_per_token
from inferbook.serving.api import Engine

__all__ = ["ModelEngine", "ModelPrefix", "SlotState", "KVPool"]


class ModelPrefix(NamedTuple):
    """A prefill's result: a batch-1 cache [1, K, P, H] per layer, and what insert needs."""

    cache: KVCache
    keys: jax.Array         # [max_len, 2] the request's per-step key data
    token: int              # the token prefill sampled: the slot's first input
    step: int               # index of the key that token used


class SlotState(NamedTuple):
    """The generate batch."""

    cache: KVCache          # [slots, K, max_len, H] per layer; lengths [slots]
    tokens: jax.Array       # [slots] next input token
    steps: jax.Array        # [slots] index of the key the next sample uses
    keys: jax.Array         # [slots, max_len, 2] per-step key data
    active: jax.Array       # [slots] bool


class KVPool(NamedTuple):
    """Blocks for the prefix cache, in the layout of `inferbook.kernels.paged`."""

    k: tuple[jax.Array, ...]    # per layer [num_blocks, K, block_size, H]
    v: tuple[jax.Array, ...]


def _sample_rows(logits_BV, keys_B2, sampler):
    """Sample each row with its own key, exactly as a batch of one would."""
    one = lambda kd, l: sample(l[None], jax.random.wrap_key_data(kd), sampler)[0]
    return jax.vmap(one)(keys_B2, logits_BV)


class ModelEngine(Engine):
    """Serve `cfg` with `slots` decode slots of `max_len` tokens, sampling with `sampler`."""

    def __init__(self, cfg: ModelConfig, slots: int, max_len: int, *,
                 sampler: Sampler = GREEDY, min_bucket: int = 16, dtype: Any = jnp.float32):
        if max_len % min_bucket:
            raise ValueError(f"max_len={max_len} must be a multiple of min_bucket={min_bucket}")
        self.cfg, self.sampler, self.dtype = cfg, sampler, dtype
        self.max_concurrent_decodes, self.max_len, self.min_bucket = slots, max_len, min_bucket

    def bucket(self, n: int) -> int:
        """The padded length for n tokens: a power of two times min_bucket, at most max_len."""
        if n > self.max_len:
            raise ValueError(f"{n} tokens do not fit in a slot of {self.max_len}")
        b = self.min_bucket
        while b < n:
            b *= 2
        return min(b, self.max_len)

    def _keys(self, keys: np.ndarray | None) -> jax.Array:
        out = np.zeros((self.max_len, 2), np.uint32)
        if keys is not None:
            out[:len(keys)] = keys
        return jnp.asarray(out)

    # prefill ------------------------------------------------------------------------------

    def prefill(self, params, tokens, *, existing_prefix=None, keys=None, step=0):
        tokens = np.asarray(tokens, np.int32)
        n = len(tokens)
        if keys is not None or existing_prefix is None:
            key_rows = self._keys(keys)
        else:
            key_rows = existing_prefix.keys
        if existing_prefix is None:
            padded = np.zeros((1, self.bucket(n)), np.int32)
            padded[0, :n] = tokens
            cache, tok = _prefill(params, self.cfg, jnp.asarray(padded), jnp.int32(n),
                                  key_rows[step], self.sampler, self.dtype)
        else:
            cache = existing_prefix.cache
            total = self.prefix_length(existing_prefix) + n
            cache = _grow(cache, self.bucket(total))
            padded = np.zeros((1, self.bucket(n)), np.int32)
            padded[0, :n] = tokens
            cache, tok = _extend(params, self.cfg, cache, jnp.asarray(padded), jnp.int32(n),
                                 key_rows[step], self.sampler)
        return ModelPrefix(cache, key_rows, int(tok), step), int(tok)

    def prefill_batch(self, params, prompts, keys):
        """One padded prefill for all prompts; rows are padded up to `slots` so each prompt
        bucket compiles once. Every prefix keeps the batch's padded length."""
        B = self.max_concurrent_decodes
        if len(prompts) > B:
            raise ValueError(f"{len(prompts)} prompts but only {B} slots")
        P = self.bucket(max(len(p) for p in prompts))
        tokens = np.zeros((B, P), np.int32)
        lengths = np.ones(B, np.int32)
        key_rows = jnp.stack([self._keys(k) for k in keys] +
                             [self._keys(None)] * (B - len(prompts)))
        for b, p in enumerate(prompts):
            tokens[b, :len(p)], lengths[b] = p, len(p)
        cache, toks = _prefill_batch(params, self.cfg, jnp.asarray(tokens),
                                     jnp.asarray(lengths), key_rows[:, 0], self.sampler,
                                     self.dtype)
        toks = np.asarray(toks)
        out = []
        for b in range(len(prompts)):
            row = KVCache(tuple(k[b:b + 1] for k in cache.k), tuple(v[b:b + 1] for v in cache.v),
                          cache.lengths[b:b + 1])
            out.append((ModelPrefix(row, key_rows[b], int(toks[b]), 0), int(toks[b])))
        return out

    # insert / generate / free -----------------------------------------------------------

    def init_decode_state(self) -> SlotState:
        B = self.max_concurrent_decodes
        return SlotState(kvcache.init_cache(self.cfg, B, self.max_len, self.dtype),
                         jnp.zeros(B, jnp.int32), jnp.zeros(B, jnp.int32),
                         jnp.zeros((B, self.max_len, 2), jnp.uint32), jnp.zeros(B, bool))

    def insert(self, prefix, decode_state, slot):
        return _insert(decode_state, prefix.cache, prefix.keys, jnp.int32(prefix.token),
                       jnp.int32(prefix.step + 1), jnp.int32(slot))

    def generate(self, params, decode_state):
        tok, new_k, new_v = _generate(params, self.cfg, decode_state, self.sampler)
        return _commit(decode_state, tok, new_k, new_v), np.asarray(tok)

    def free(self, decode_state, slot):
        return decode_state._replace(active=decode_state.active.at[slot].set(False))

    # moving KV ----------------------------------------------------------------------------

    def prefix_length(self, prefix) -> int:
        return int(prefix.cache.lengths[0])

    def prefix_bytes(self, prefix) -> int:
        return int(self.prefix_length(prefix) *
                   kv_bytes_per_token(self.cfg, jnp.dtype(self.dtype).itemsize))

    def init_pool(self, num_blocks, block_size) -> KVPool:
        if self.min_bucket % block_size:
            raise ValueError(f"block_size={block_size} must divide min_bucket={self.min_bucket}")
        heads, width = kvcache.entry_shape(self.cfg)     # latent attention: (1, R_kv + H_rope)
        shape = (num_blocks, heads, block_size, width)
        zeros = lambda: tuple(jnp.zeros(shape, self.dtype) for _ in range(self.cfg.L))
        return KVPool(zeros(), () if self.cfg.mla is not None else zeros())

    def save_blocks(self, pool, source, blocks, first):
        if isinstance(source, ModelPrefix):
            k, v = source.cache.k, source.cache.v
            row = jnp.int32(0)
        else:
            state, slot = source
            k, v, row = state.cache.k, state.cache.v, jnp.int32(slot)
        bs, S = pool.k[0].shape[2], k[0].shape[2]
        ids = np.full(S // bs, pool.k[0].shape[0], np.int32)       # out of range: not saved
        ids[first:first + len(blocks)] = blocks
        return _save(pool, k, v, row, jnp.asarray(ids))

    def load_prefix(self, pool, blocks, n_tokens, capacity):
        bs = pool.k[0].shape[2]
        P = self.bucket(capacity)
        ids = np.zeros(P // bs, np.int32)
        ids[:len(blocks)] = blocks
        cache = _load(pool, jnp.asarray(ids), jnp.int32(n_tokens))
        return ModelPrefix(cache, self._keys(None), -1, -1)


# The compiled programs ------------------------------------------------------------------

@partial(jax.jit, static_argnames=("cfg", "sampler", "dtype"))
def _prefill(params, cfg, tokens_1P, n, key, sampler, dtype):
    cache = kvcache.init_cache(cfg, 1, tokens_1P.shape[1], dtype)
    logits_1V, cache = decode.prefill(params, cfg, tokens_1P, n[None], cache)
    return cache, _sample_rows(logits_1V, key[None], sampler)[0]


@partial(jax.jit, static_argnames=("cfg", "sampler", "dtype"))
def _prefill_batch(params, cfg, tokens_BP, lengths_B, keys_B2, sampler, dtype):
    cache = kvcache.init_cache(cfg, tokens_BP.shape[0], tokens_BP.shape[1], dtype)
    logits_BV, cache = decode.prefill(params, cfg, tokens_BP, lengths_B, cache)
    return cache, _sample_rows(logits_BV, keys_B2, sampler)


@partial(jax.jit, static_argnames=("cfg", "sampler"))
def _extend(params, cfg, cache, tokens_1T, n, key, sampler):
    logits_1TV, (new_k, new_v) = decode.extend(params, cfg, tokens_1T, cache, n[None])
    cache = kvcache.append(cache, new_k, new_v, n[None])
    return cache, _sample_rows(logits_1TV[:, n - 1], key[None], sampler)[0]


def _grow(cache: KVCache, S: int) -> KVCache:
    pad = S - cache.max_len
    if pad <= 0:
        return cache
    widen = lambda a: jnp.pad(a, ((0, 0), (0, 0), (0, pad), (0, 0)))
    return KVCache(tuple(map(widen, cache.k)), tuple(map(widen, cache.v)), cache.lengths)


@partial(jax.jit, donate_argnames=("state",))
def _insert(state, cache, keys, token, step, slot):
    put = lambda big, small: jax.lax.dynamic_update_slice(big, small.astype(big.dtype),
                                                         (slot, 0, 0, 0))
    big = state.cache
    new_cache = KVCache(tuple(map(put, big.k, cache.k)), tuple(map(put, big.v, cache.v)),
                        big.lengths.at[slot].set(cache.lengths[0]))
    return SlotState(new_cache, state.tokens.at[slot].set(token),
                     state.steps.at[slot].set(step), state.keys.at[slot].set(keys),
                     state.active.at[slot].set(True))


@partial(jax.jit, static_argnames=("cfg", "sampler"))
def _generate(params, cfg, state, sampler):
    logits_BTV, (new_k, new_v) = decode.extend(params, cfg, state.tokens[:, None], state.cache)
    B = state.tokens.shape[0]
    step_keys = state.keys[jnp.arange(B), jnp.minimum(state.steps, state.keys.shape[1] - 1)]
    return _sample_rows(logits_BTV[:, 0], step_keys, sampler), new_k, new_v


@partial(jax.jit, donate_argnames=("state",))
def _commit(state, tok, new_k, new_v):
    grow = state.active.astype(jnp.int32)       # free slots do not grow
    cache = kvcache.append(state.cache, new_k, new_v, grow)
    return SlotState(cache, jnp.where(state.active, tok, state.tokens), state.steps + grow,
                     state.keys, state.active)


@jax.jit
def _save(pool, k, v, row, ids):
    def put(pool_l, cache_l):
        _, K, S, H = cache_l.shape
        bs = pool_l.shape[2]
        blocks = cache_l[row].reshape(K, S // bs, bs, H).transpose(1, 0, 2, 3)
        return pool_l.at[ids].set(blocks.astype(pool_l.dtype), mode="drop")
    return KVPool(tuple(map(put, pool.k, k)), tuple(map(put, pool.v, v)))


@jax.jit
def _load(pool, ids, n):
    # The pool has paged.py's layout, so its gather turns blocks into a contiguous cache.
    get = lambda pool_l: gather_blocks(pool_l, ids[None])            # [1, K, P, H]
    return KVCache(tuple(map(get, pool.k)), tuple(map(get, pool.v)), n[None])
