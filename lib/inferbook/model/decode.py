"""Generating text: prefill, decode steps, and the loop around them.

Generation has two phases with very different costs (chapter 1):

  * prefill reads the whole prompt at once, T tokens per sequence, and fills the KV cache;
    it is a batch of large matrix multiplications, usually compute-bound;
  * each decode step feeds one new token per sequence, which attends to the cache and appends
    its own key and value; it reads every weight to do a few FLOPs per byte, so it is bound by
    memory bandwidth.

New tokens attend to two sets of keys: those already in the cache, and their own (causally,
among themselves). `attend_cached` computes the two partial attentions and merges them with
their log-sum-exps — the same identity FlashAttention and Flash-Decoding are built on. Keeping
the two apart means a step *reads* the cache without writing it; the new keys and values are
appended afterwards (`kvcache.append`). Besides being clearer, that matters for speed: XLA:CPU
copies the whole cache when one program both updates it and reads the updated version.

`generate` runs three programs, each compiled once for a given shape: prefill, a decode step
that samples the next token (`next_token`), and an in-place append to the cache
(`append_in_place`). The loop around them is `decode_loop.decode_loop`, which the
sharded `parallel.sharded_decode.generate` runs too. `naive_generate` is the baseline
that keeps no cache and recomputes the whole prefix for every new token. Ragged batches:
prompts of different lengths are right-padded to a common T and carry their true lengths;
every sequence then writes and reads its own slots of the cache.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model import kvcache
from inferbook.model.attention import attention_mask, attention_reference, merge_partials
from inferbook.model.config import ModelConfig
from inferbook.model.decode_loop import (
    GenerateResult,
    OnStep,
    decode_loop,
    emitted_tokens,
    is_eos,
    trim_at_eos,
)
from inferbook.model.decoder import (
    NewKV,
    Params,
    attention_options,
    forward,
    run_keeping_kv,
    unembed,
)
from inferbook.model.generate_args import check_generate_args, eos_tuple, pad_prompts
from inferbook.model.kvcache import KVCache
from inferbook.model.rotary import rotary_positions
from inferbook.model.sampling import GREEDY, Sampler, sample

__all__ = ["attend_cached", "layer_options", "prefill", "extend",
           "decode_step", "next_token", "append_in_place", "generate", "last_logits",
           "naive_generate", "pad_prompts", "GenerateResult", "eos_tuple", "OnStep"]


def attend_cached(q_BTNH: jax.Array, k_BTKH: jax.Array, v_BTKH: jax.Array | None,
                  n_new_B: jax.Array, window: int | None = None,
                  cache_k_BKSH: jax.Array | None = None, cache_v_BKSH: jax.Array | None = None,
                  cache_len_B: jax.Array | None = None, *, scale: float | None = None,
                  softcap: float | None = None, value_width: int | None = None) -> jax.Array:
    """Attention of T new tokens to the cached tokens and to each other.

    The new tokens of sequence b sit at positions cache_len_B[b] + t; only the first n_new_B[b]
    are real. Without a cache (prefill) only the second part exists. `scale` and `softcap` are
    those of `attention.attention_reference`. With `v_BTKH` None the values are the first
    `value_width` channels of the keys, in the new tokens and in the cache (latent attention:
    the cache holds one array per layer, see mla.py).
    """
    T = q_BTNH.shape[1]
    opts = dict(scale=scale, softcap=softcap)
    if v_BTKH is None:
        v_BTKH = k_BTKH[..., :value_width]
        if cache_k_BKSH is not None:
            cache_v_BKSH = cache_k_BKSH[..., :value_width]
    rel_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), q_BTNH.shape[:2])
    # New keys: causal among the new tokens, padding excluded. Positions relative to the
    # chunk's start give the same mask (and the same window) as absolute ones.
    mask_new_BTT = attention_mask(rel_BT, rel_BT[0], n_new_B, window)
    out_BTNH, lse_BTN = attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2),
                                            v_BTKH.swapaxes(1, 2), mask_new_BTT, **opts)
    if cache_k_BKSH is None:
        return out_BTNH
    # Cached keys: every one is in the past; those past the sequence's length are padding.
    pos_BT = cache_len_B[:, None] + rel_BT
    slots_S = jnp.arange(cache_k_BKSH.shape[2], dtype=jnp.int32)
    mask_cache_BTS = attention_mask(pos_BT, slots_S, cache_len_B, window)
    out_c, lse_c = attention_reference(q_BTNH, cache_k_BKSH, cache_v_BKSH, mask_cache_BTS,
                                       **opts)
    return merge_partials(out_c, lse_c, out_BTNH, lse_BTN)[0]


def layer_options(cfg: ModelConfig) -> dict[str, Any]:
    """`attend_cached`'s keyword options for `cfg`: scale, soft cap, latent value width."""
    width = cfg.mla.R_kv if cfg.mla is not None else None
    return attention_options(cfg) | {"value_width": width}


@partial(jax.jit, static_argnames=("cfg",))
def prefill(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, lengths_B: jax.Array,
            cache: KVCache) -> tuple[jax.Array, KVCache]:
    """Process whole prompts into an empty cache.

    Row b of `tokens_BT` holds lengths_B[b] prompt tokens, then padding. Returns the logits at
    each prompt's last position [B, V] — the distribution of the first new token — and the cache
    holding every layer's keys and values for the prompt tokens.
    """
    B, T = tokens_BT.shape
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    options = layer_options(cfg)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        return attend_cached(q_BTNH, k_BTKH, v_BTKH, lengths_B, cfg.layer_window(i), **options)

    x_BTD, (new_k, new_v) = run_keeping_kv(params, cfg, tokens_BT,
                                           rotary_positions(cfg, pos_BT, lengths_B), attend)
    logits_BV = unembed(params, cfg, x_BTD[jnp.arange(B), lengths_B - 1])
    empty = cache._replace(lengths=jnp.zeros_like(lengths_B))
    return logits_BV, kvcache.append(empty, new_k, new_v, lengths_B)


@partial(jax.jit, static_argnames=("cfg",))
def extend(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, cache: KVCache,
           n_new_B: jax.Array | None = None) -> tuple[jax.Array, NewKV]:
    """Run T new tokens per sequence against a cache, without writing it.

    Sequence b's tokens sit at positions cache.lengths[b], cache.lengths[b] + 1, ...; only the
    first n_new_B[b] of them are real (default: all T). Returns their logits [B, T, V] and the
    new keys and values of every layer ([B, T, K, H] each), for `kvcache.append`. T = 1 is a
    decode step; T > 1 serves chunked prefill, prompts that continue a cached prefix, and the
    verification of speculated tokens.
    """
    B, T = tokens_BT.shape
    if n_new_B is None:
        n_new_B = jnp.full((B,), T, jnp.int32)
    pos_BT = cache.lengths[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    options = layer_options(cfg)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        return attend_cached(q_BTNH, k_BTKH, v_BTKH, n_new_B, cfg.layer_window(i),
                             cache.k[i], cache.v[i] if cache.v else None, cache.lengths,
                             **options)

    x_BTD, new_kv = run_keeping_kv(params, cfg, tokens_BT,
                                   rotary_positions(cfg, pos_BT, n_new_B), attend)
    return unembed(params, cfg, x_BTD), new_kv


@partial(jax.jit, static_argnames=("cfg",))
def decode_step(params: Params, cfg: ModelConfig, tokens_B: jax.Array,
                cache: KVCache) -> tuple[jax.Array, KVCache]:
    """One new token per sequence: logits [B, V] and the cache one token longer."""
    logits_BTV, (new_k, new_v) = extend(params, cfg, tokens_B[:, None], cache)
    return logits_BTV[:, 0], kvcache.append(cache, new_k, new_v)


# The loop -----------------------------------------------------------------------------------

@partial(jax.jit, static_argnames=("cfg", "sampler", "eos"))
def _first_token(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, lengths_B: jax.Array,
                 cache: KVCache, key: jax.Array, sampler: Sampler, eos: int | tuple[int, ...]
                 ) -> tuple[jax.Array, jax.Array, KVCache]:
    """Prefill and sample each sequence's first new token; whether it is one of `eos`."""
    logits_BV, cache = prefill(params, cfg, tokens_BT, lengths_B, cache)
    tok_B = sample(logits_BV, key, sampler)
    return tok_B, is_eos(tok_B, eos), cache


@partial(jax.jit, static_argnames=("cfg", "sampler", "eos"))
def next_token(params: Params, cfg: ModelConfig, tok_B: jax.Array, done_B: jax.Array,
               cache: KVCache, key: jax.Array, sampler: Sampler, eos: int | tuple[int, ...]
               ) -> tuple[jax.Array, jax.Array, jax.Array, NewKV]:
    """One decode step of `generate`: feed each sequence's last token, sample the next.

    Returns the sampled tokens [B], which sequences are done (they sampled an `eos` id — one,
    or a tuple — now or earlier) [B], the tokens to emit [B] (the first `eos` id as padding
    once a sequence is done), and the new keys and values. It reads the cache and leaves it
    as it was: the caller writes the new keys and values afterwards, with `append_in_place`.
    """
    logits_BTV, new_kv = extend(params, cfg, tok_B[:, None], cache)
    tok_B = sample(logits_BTV[:, 0], key, sampler)
    return tok_B, *emitted_tokens(tok_B, done_B, eos), new_kv


# `kvcache.append` compiled on its own, with the old cache's buffers donated to the new one:
# each step writes its keys and values in place instead of copying the cache.
append_in_place = jax.jit(kvcache.append, donate_argnames=("cache",))


def generate(params: Params, cfg: ModelConfig, prompts: Sequence[Sequence[int]],
             max_new_tokens: int, *, sampler: Sampler = GREEDY, key: jax.Array | None = None,
             eos_id: int | Sequence[int] | None = None, pad_multiple: int = 16,
             on_step: OnStep | None = None, step_params: Params | None = None
             ) -> GenerateResult:
    """Generate up to `max_new_tokens` tokens after each prompt, with a KV cache.

    The cache is allocated once, at prompt length + max_new_tokens, so every step has the same
    shapes: prefill, the decode step and the append each compile once. A sequence stops at
    `eos_id` — one id or any of a list — (its remaining slots are not returned); the loop
    stops when all have stopped or after `max_new_tokens`. `key` drives sampling (ignored when
    greedy); token i is drawn with the i-th of `jax.random.split(key, max_new_tokens)`.
    `on_step(i, tokens_B)`, if given, sees step i's tokens (numpy [B]; a finished sequence
    shows its first EOS id) as they come — to stream text or time steps, waiting for the
    device at every step; returning True stops the loop there. `step_params`: the same
    weights in another layout for the decode steps only (`decode_layout.for_batch`).
    """
    check_generate_args(cfg, prompts, max_new_tokens, sampler, eos_id)
    tokens_BT, lengths_B = pad_prompts(prompts, pad_multiple)
    eos = eos_tuple(eos_id)
    step_params = params if step_params is None else step_params

    def first(key0):
        cache = kvcache.init_cache(cfg, len(prompts), tokens_BT.shape[1] + max_new_tokens,
                                   params["embed"].dtype)
        tok_B, done_B, cache = _first_token(params, cfg, tokens_BT, lengths_B, cache, key0,
                                            sampler, eos)
        return cache, tok_B, done_B

    def step(cache, tok_B, done_B, key_i):
        tok_B, done_B, out_B, (new_k, new_v) = next_token(step_params, cfg, tok_B, done_B,
                                                           cache, key_i, sampler, eos)
        return append_in_place(cache, new_k, new_v), tok_B, done_B, out_B

    return decode_loop(first, step, max_new_tokens, key, eos, on_step)


@partial(jax.jit, static_argnames=("cfg",))
def last_logits(params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
                lengths_B: jax.Array) -> jax.Array:
    """Logits [B, V] at each sequence's last real position, with no cache: the whole forward
    pass of `decoder.forward` for one new token (a step of `naive_generate`)."""
    logits_BTV = forward(params, cfg, tokens_BT, lengths_B)
    return logits_BTV[jnp.arange(tokens_BT.shape[0]), lengths_B - 1]


def naive_generate(params: Params, cfg: ModelConfig, prompts: Sequence[Sequence[int]],
                   max_new_tokens: int, *, sampler: Sampler = GREEDY, key: jax.Array | None = None,
                   eos_id: int | Sequence[int] | None = None, bucket: int = 64
                   ) -> GenerateResult:
    """Generate without a cache: every step runs the model over the whole sequence so far.

    Step t costs a forward pass over (prompt + t) tokens, so the total grows quadratically in the
    generated length (cubically in the attention part). Sequences are padded to a multiple of
    `bucket` tokens so that only one program per bucket is compiled. Draws the same random keys
    as `generate`, so both produce the same tokens from the same key.
    """
    check_generate_args(cfg, prompts, max_new_tokens, sampler, eos_id)
    keys = jax.random.split(jax.random.key(0) if key is None else key, max_new_tokens)
    seqs = [list(map(int, p)) for p in prompts]
    lengths = np.array([len(s) for s in seqs], np.int32)
    eos = eos_tuple(eos_id)
    done = np.zeros(len(seqs), bool)
    out = np.zeros((len(seqs), max_new_tokens), np.int32)
    for step in range(max_new_tokens):
        tokens_BT, _ = pad_prompts(seqs, bucket)
        logits_BV = last_logits(params, cfg, tokens_BT, lengths)
        tok = np.asarray(sample(logits_BV, keys[step], sampler))
        out[:, step] = np.where(done, (eos or (-1,))[0], tok)
        done |= np.isin(tok, eos)
        for s, t in zip(seqs, tok.tolist()):
            s.append(t)
        lengths += 1
        if done.all():
            out = out[:, :step + 1]
            break
    return trim_at_eos(out, eos)
