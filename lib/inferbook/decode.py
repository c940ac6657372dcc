"""Generating text: prefill, decode steps, and the loop around them.

Generation has two phases with very different costs (chapter 1):

  * prefill reads the whole prompt at once, T tokens per sequence, and fills the KV cache;
    it is a batch of large matrix multiplications, usually compute-bound;
  * each decode step feeds one new token per sequence, which attends to the cache and appends
    its own key and value; it reads every weight to do a few FLOPs per byte, so it is bound by
    memory bandwidth.

`generate` compiles the whole loop — prefill, then a `lax.while_loop` of decode steps over a
fixed-size cache — into one program, so no step recompiles. `naive_generate` is the baseline
that keeps no cache and recomputes the full prefix for every new token.

Ragged batches: prompts of different lengths are right-padded to a common T and carry their
true lengths; every sequence then writes and reads its own slots of the cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import kvcache
from .attention import attend as attend_reference
from .attention import attention_mask
from .config import ModelConfig
from .kvcache import KVCache
from .model import Params, forward, transformer, unembed
from .sampling import GREEDY, Sampler, sample

__all__ = ["prefill", "extend", "decode_step", "generate", "naive_generate", "pad_prompts",
           "GenerateResult"]


@partial(jax.jit, static_argnames=("cfg",))
def prefill(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, lengths_B: jax.Array,
            cache: KVCache) -> tuple[jax.Array, KVCache]:
    """Process whole prompts into an empty cache.

    Row b of `tokens_BT` holds lengths_B[b] prompt tokens, then padding. Returns the logits at
    each prompt's last position [B, V] — the distribution of the first new token — and the cache
    holding every layer's keys and values for the prompt tokens.

    The queries attend to this call's own keys (a T×T causal problem), not to the S slots of the
    cache: with an empty cache the two give the same answer, and this one does T/S of the work.
    """
    B, T = tokens_BT.shape
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    mask_BTS = attention_mask(pos_BT, pos_BT[0], lengths_B, cfg.window)
    new_k, new_v = list(cache.k), list(cache.v)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        new_k[i] = kvcache.write(cache.k[i], k_BTKH, jnp.zeros_like(lengths_B), lengths_B)
        new_v[i] = kvcache.write(cache.v[i], v_BTKH, jnp.zeros_like(lengths_B), lengths_B)
        return attend_reference(q_BTNH, k_BTKH, v_BTKH, mask_BTS)

    x_BTD = transformer(params, cfg, tokens_BT, pos_BT, attend)
    last_BD = x_BTD[jnp.arange(B), lengths_B - 1]
    return unembed(params, cfg, last_BD), KVCache(tuple(new_k), tuple(new_v), lengths_B)


@partial(jax.jit, static_argnames=("cfg",))
def extend(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, cache: KVCache,
           n_new_B: jax.Array | None = None) -> tuple[jax.Array, KVCache]:
    """Append T tokens per sequence to a cache and return their logits [B, T, V].

    Sequence b's tokens go to positions cache.lengths[b], cache.lengths[b] + 1, ...; only the
    first n_new_B[b] of them are real (default: all T). Each new token attends to everything
    cached before it and to the new tokens up to itself. T = 1 is a decode step; T > 1 serves
    chunked prefill, prompts that continue a cached prefix, and verifying speculated tokens.
    """
    B, T = tokens_BT.shape
    if n_new_B is None:
        n_new_B = jnp.full((B,), T, jnp.int32)
    start_B = cache.lengths
    pos_BT = start_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    slots_S = jnp.arange(cache.max_len, dtype=jnp.int32)
    mask_BTS = attention_mask(pos_BT, slots_S, start_B + n_new_B, cfg.window)
    new_k, new_v = list(cache.k), list(cache.v)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        new_k[i] = kvcache.write(cache.k[i], k_BTKH, start_B, n_new_B)
        new_v[i] = kvcache.write(cache.v[i], v_BTKH, start_B, n_new_B)
        return attend_reference(q_BTNH, new_k[i], new_v[i], mask_BTS)

    x_BTD = transformer(params, cfg, tokens_BT, pos_BT, attend)
    return unembed(params, cfg, x_BTD), KVCache(tuple(new_k), tuple(new_v), start_B + n_new_B)


@partial(jax.jit, static_argnames=("cfg",))
def decode_step(params: Params, cfg: ModelConfig, tokens_B: jax.Array,
                cache: KVCache) -> tuple[jax.Array, KVCache]:
    """One new token per sequence: logits [B, V] and the cache one token longer."""
    logits_BTV, cache = extend(params, cfg, tokens_B[:, None], cache)
    return logits_BTV[:, 0], cache


# The loop -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GenerateResult:
    """New tokens per sequence, each ending at (and including) EOS if one was produced."""

    tokens: list[list[int]]

    def padded(self, pad: int = -1) -> np.ndarray:
        width = max((len(t) for t in self.tokens), default=0)
        out = np.full((len(self.tokens), width), pad, np.int32)
        for b, t in enumerate(self.tokens):
            out[b, :len(t)] = t
        return out


def pad_prompts(prompts: Sequence[Sequence[int]], multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad prompts (with 0) to a common length, rounded up to `multiple`.

    Rounding the padded length to a few sizes means a new prompt length rarely recompiles.
    Returns tokens [B, T] and lengths [B].
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    lengths = np.array([len(p) for p in prompts], np.int32)
    T = -(-int(lengths.max()) // multiple) * multiple
    tokens = np.zeros((len(prompts), T), np.int32)
    for b, p in enumerate(prompts):
        tokens[b, :len(p)] = p
    return tokens, lengths


def _check_tokens(cfg: ModelConfig, prompts: Sequence[Sequence[int]]) -> None:
    for b, p in enumerate(prompts):
        bad = [t for t in p if not 0 <= int(t) < cfg.V]
        if bad:
            raise ValueError(f"prompt {b} has token ids outside the vocabulary [0, {cfg.V}): {bad[:5]}")


def _trim(tokens_BN: np.ndarray, eos_id: int | None) -> GenerateResult:
    out = []
    for row in tokens_BN.tolist():
        if eos_id is not None and eos_id in row:
            row = row[:row.index(eos_id) + 1]
        out.append(row)
    return GenerateResult(out)


@partial(jax.jit, static_argnames=("cfg", "max_new_tokens", "sampler", "eos_id", "cache_len"))
def _generate(params, tokens_BT, lengths_B, key, *, cfg, max_new_tokens, sampler, eos_id,
              cache_len):
    B = tokens_BT.shape[0]
    cache = kvcache.init_cache(cfg, B, cache_len, params["embed"].dtype)
    logits_BV, cache = prefill(params, cfg, tokens_BT, lengths_B, cache)
    key, sub = jax.random.split(key)
    tok_B = sample(logits_BV, sub, sampler)
    out_BN = jnp.zeros((B, max_new_tokens), jnp.int32).at[:, 0].set(tok_B)
    eos = -1 if eos_id is None else eos_id
    done_B = tok_B == eos

    def cond(state):
        step, _, _, _, done_B, _ = state
        return (step < max_new_tokens) & ~jnp.all(done_B)

    def body(state):
        step, tok_B, cache, out_BN, done_B, key = state
        logits_BV, cache = decode_step(params, cfg, tok_B, cache)
        key, sub = jax.random.split(key)
        tok_B = sample(logits_BV, sub, sampler)
        out_BN = out_BN.at[:, step].set(jnp.where(done_B, eos, tok_B))
        return step + 1, tok_B, cache, out_BN, done_B | (tok_B == eos), key

    state = (jnp.int32(1), tok_B, cache, out_BN, done_B, key)
    return jax.lax.while_loop(cond, body, state)[3]


def generate(params: Params, cfg: ModelConfig, prompts: Sequence[Sequence[int]],
             max_new_tokens: int, *, sampler: Sampler = GREEDY, key: jax.Array | None = None,
             eos_id: int | None = None, pad_multiple: int = 16) -> GenerateResult:
    """Generate up to `max_new_tokens` tokens after each prompt, with a KV cache.

    One compiled program does the prefill and every decode step. A sequence stops at `eos_id`
    (its remaining slots are not returned); the loop stops when all have stopped or after
    `max_new_tokens`. `key` drives sampling (ignored when greedy).
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
    _check_tokens(cfg, prompts)
    tokens_BT, lengths_B = pad_prompts(prompts, pad_multiple)
    key = jax.random.key(0) if key is None else key
    out_BN = _generate(params, tokens_BT, lengths_B, key, cfg=cfg, max_new_tokens=max_new_tokens,
                       sampler=sampler, eos_id=eos_id,
                       cache_len=tokens_BT.shape[1] + max_new_tokens)
    return _trim(np.asarray(out_BN), eos_id)


@partial(jax.jit, static_argnames=("cfg",))
def _last_logits(params, cfg, tokens_BT, lengths_B):
    logits_BTV = forward(params, cfg, tokens_BT, lengths_B)
    return logits_BTV[jnp.arange(tokens_BT.shape[0]), lengths_B - 1]


def naive_generate(params: Params, cfg: ModelConfig, prompts: Sequence[Sequence[int]],
                   max_new_tokens: int, *, sampler: Sampler = GREEDY, key: jax.Array | None = None,
                   eos_id: int | None = None, bucket: int = 64) -> GenerateResult:
    """Generate without a cache: every step runs the model over the whole sequence so far.

    Step t costs a forward pass over (prompt + t) tokens, so the total grows quadratically in the
    generated length (cubically in the attention part). Sequences are padded to a multiple of
    `bucket` tokens so that only one program per bucket is compiled. Draws the same random keys
    as `generate`, so both produce the same tokens from the same key.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
    _check_tokens(cfg, prompts)
    key = jax.random.key(0) if key is None else key
    seqs = [list(map(int, p)) for p in prompts]
    lengths = np.array([len(s) for s in seqs], np.int32)
    eos = -1 if eos_id is None else eos_id
    done = np.zeros(len(seqs), bool)
    out = np.zeros((len(seqs), max_new_tokens), np.int32)
    for step in range(max_new_tokens):
        tokens_BT, _ = pad_prompts(seqs, bucket)
        logits_BV = _last_logits(params, cfg, tokens_BT, lengths)
        key, sub = jax.random.split(key)
        tok = np.asarray(sample(logits_BV, sub, sampler))
        out[:, step] = np.where(done, eos, tok)
        done |= tok == eos
        for s, t in zip(seqs, tok.tolist()):
            s.append(t)
        lengths += 1
        if done.all():
            out = out[:, :step + 1]
            break
    return _trim(out, eos_id)
