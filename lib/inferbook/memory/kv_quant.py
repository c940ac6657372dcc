"""An int8 KV cache: quantize on write, dequantize on read.

Each key (and value) vector of H numbers, one per token and KV head, is stored as H int8 codes
and one float32 scale, its largest magnitude over 127 (absmax quantization, as in LLM.int8();
Dettmers et al. 2022). Writing rounds x / scale to the nearest integer, so no element is off by
more than half a step, scale / 2. Reading multiplies back. The bytes per cached element are
1 + 4/H instead of 2 for bfloat16: 53% of it for H = 64, 52% for H = 128. No calibration is
needed, since every vector carries its own scale — what TensorRT-LLM's and vLLM's int8/fp8 KV
caches do too.

How the cache is read matters as much as how it is stored. Converting the whole int8 cache to
float32 before the attention products (what `x.astype(float32)` followed by an einsum compiles
to on XLA:CPU) writes a float32 copy of the cache and reads it back: more memory traffic than a
float32 cache, not less. So `attend_per_head` reads the cache one KV head at a time: it
converts that head's block of codes and uses it at once, while it still sits in the
processor's caches. Main memory sees the int8 codes and the scales; at no time does a float
copy of the whole cache exist. Real int8-KV kernels do the same at a finer grain, in registers
and shared memory (and split long caches into chunks merged by their log-sum-exps, as
Flash-Decoding does).

The same function reads a float cache (scales None), so int8 and float caches can be compared
with identical code. `attention_error_bound` gives an a-priori bound on the attention output's
error, which the tests check against the measured error.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from inferbook.model import kvcache
from inferbook.model.attention import (
    MASKED,
    attention_mask,
    attention_reference,
    group_mask,
    group_queries,
    merge_partials,
    ungroup_rows,
)
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import NewKV, Params, require_plain_decoder, run_keeping_kv, unembed

__all__ = ["quantize", "dequantize", "QuantCache", "init_cache", "attend_per_head", "extend",
           "append", "bytes_per_element", "attention_error_bound"]


def quantize(x_H: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Absmax int8 codes [..., H] and float32 scales [..., 1] of each H-vector."""
    x = x_H.astype(jnp.float32)
    scale = jnp.max(jnp.abs(x), axis=-1, keepdims=True) / 127.0
    codes = jnp.round(x / jnp.where(scale > 0, scale, 1.0))
    return jnp.clip(codes, -127, 127).astype(jnp.int8), scale


def dequantize(codes_H: jax.Array, scale_1: jax.Array) -> jax.Array:
    """codes · scale, in float32."""
    return codes_H.astype(jnp.float32) * scale_1


def bytes_per_element(H: int, scale_bytes: float = 4) -> float:
    """Stored bytes per cached element: one int8 code plus its share of the vector's scale."""
    return 1 + scale_bytes / H


class QuantCache(NamedTuple):
    """Per layer codes [B, K, S, H] and scales [B, K, S, 1] (None for a float cache), and
    tokens written per sequence [B]. Scales keep a trailing axis so `kvcache.write` fits."""

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    k_scale: tuple[jax.Array, ...] | None
    v_scale: tuple[jax.Array, ...] | None
    lengths: jax.Array


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype: Any = jnp.int8
               ) -> QuantCache:
    """An empty cache of int8 codes with scales, or of floats (dtype float32/bfloat16)."""
    require_plain_decoder(cfg, "the quantized KV cache")
    S = max_len
    zeros = lambda shape, dt: tuple(jnp.zeros(shape, dt) for _ in range(cfg.L))  # noqa: E731
    codes = (batch, cfg.K, S, cfg.H)
    quant = jnp.dtype(dtype) == jnp.int8
    scales = zeros(codes[:3] + (1,), jnp.float32) if quant else None
    return QuantCache(zeros(codes, dtype), zeros(codes, dtype), scales,
                      None if scales is None else zeros(codes[:3] + (1,), jnp.float32),
                      jnp.zeros((batch,), jnp.int32))


def attend_per_head(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                    k_scale: jax.Array | None, v_scale: jax.Array | None, pos_BT: jax.Array,
                    cache_len_B: jax.Array, window: int | None = None
                    ) -> tuple[jax.Array, jax.Array]:
    """Attention of queries at positions pos_BT to a (possibly int8) cache, one KV head at a time.

    Returns the output [B, T, N, H] and the log-sum-exp [B, T, N], like `attention_reference`
    (which it equals for a float cache). `lax.map` walks over the B·K heads; the head-major
    layout makes each head's [S, H] keys one contiguous block, converted to float32 on its own
    (a few MB at most, which the processor's caches hold) and used at once by that head's G
    queries. The scales multiply the scores and the probabilities rather than the codes:
    q·(s·k) = s·(q·k), so the codes are only converted, never scaled element by element.
    """
    B, T, N, H = q_BTNH.shape
    K, S = k_BKSH.shape[1], k_BKSH.shape[2]
    G = N // K
    # The B·K heads in one leading axis, which lax.map walks.
    flat = lambda x: None if x is None else x.reshape((B * K,) + x.shape[2:])  # noqa: E731
    q_BKMH = group_queries(q_BTNH.astype(jnp.float32) / jnp.sqrt(jnp.float32(H)), K)
    mask_BTS = attention_mask(pos_BT, jnp.arange(S, dtype=jnp.int32), cache_len_B, window)
    mask_BKMS = jnp.broadcast_to(group_mask(mask_BTS, G), (B, K, G * T, S))

    def one_head(args):
        q_MH, k_SH, v_SH, ks_S1, vs_S1, mask_MS = args
        s_MS = q_MH @ k_SH.astype(jnp.float32).T
        if ks_S1 is not None:
            s_MS = s_MS * ks_S1[:, 0][None, :]
        s_MS = jnp.where(mask_MS, s_MS, MASKED)
        lse_M = jax.nn.logsumexp(s_MS, axis=-1)
        p_MS = jnp.exp(s_MS - lse_M[:, None])
        if vs_S1 is not None:
            p_MS = p_MS * vs_S1[:, 0][None, :]
        return p_MS @ v_SH.astype(jnp.float32), lse_M

    out, lse = jax.lax.map(one_head, (flat(q_BKMH), flat(k_BKSH), flat(v_BKSH), flat(k_scale),
                                      flat(v_scale), flat(mask_BKMS)))
    out_BKMH, lse_BKM = out.reshape(B, K, G * T, H), lse.reshape(B, K, G * T)
    return ungroup_rows(out_BKMH, T).astype(q_BTNH.dtype), ungroup_rows(lse_BKM, T)


@partial(jax.jit, static_argnames=("cfg",))
def extend(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, cache: QuantCache,
           n_new_B: jax.Array | None = None) -> tuple[jax.Array, NewKV]:
    """`decode.extend` over a QuantCache: logits [B, T, V] and every layer's new keys and
    values (full precision; `append` quantizes them). The new tokens attend to each other
    exactly and to the cache through `attend_per_head`."""
    B, T = tokens_BT.shape
    if n_new_B is None:
        n_new_B = jnp.full((B,), T, jnp.int32)
    rel_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    pos_BT = cache.lengths[:, None] + rel_BT
    mask_new = attention_mask(rel_BT, rel_BT[0], n_new_B, cfg.window)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        out_n, lse_n = attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2),
                                           v_BTKH.swapaxes(1, 2), mask_new)
        scales = (None, None) if cache.k_scale is None else (cache.k_scale[i],
                                                              cache.v_scale[i])
        out_c, lse_c = attend_per_head(q_BTNH, cache.k[i], cache.v[i], *scales, pos_BT,
                                       cache.lengths, cfg.window)
        return merge_partials(out_c, lse_c, out_n, lse_n)[0]

    x_BTD, new_kv = run_keeping_kv(params, cfg, tokens_BT, pos_BT, attend)
    return unembed(params, cfg, x_BTD), new_kv


@partial(jax.jit, donate_argnames=("cache",))
def append(cache: QuantCache, new_k: Sequence[jax.Array], new_v: Sequence[jax.Array],
           n_new_B: jax.Array | None = None) -> QuantCache:
    """Quantize (for an int8 cache) and write the new keys and values [B, T, K, H] in place."""
    if n_new_B is None:
        n_new_B = jnp.full_like(cache.lengths, new_k[0].shape[1])
    if cache.k_scale is None:
        full = kvcache.append(kvcache.KVCache(cache.k, cache.v, cache.lengths), new_k, new_v,
                              n_new_B)
        return cache._replace(k=full.k, v=full.v, lengths=full.lengths)
    put = lambda c, x: kvcache.write(c, x, cache.lengths)  # noqa: E731
    qk, qv = [quantize(k) for k in new_k], [quantize(v) for v in new_v]
    return QuantCache(tuple(put(c, q) for c, (q, _) in zip(cache.k, qk)),
                      tuple(put(c, q) for c, (q, _) in zip(cache.v, qv)),
                      tuple(put(c, s) for c, (_, s) in zip(cache.k_scale, qk)),
                      tuple(put(c, s) for c, (_, s) in zip(cache.v_scale, qv)),
                      cache.lengths + n_new_B)


def attention_error_bound(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                          mask_BTS: jax.Array) -> jax.Array:
    """A bound [B, T, N] on max_h |attention(int8 cache) - attention(exact cache)|.

    Rounding moves each key element by at most absmax(k_s)/254, so the scaled score of key s
    moves by at most ε_s = ‖q‖₁ · absmax(k_s) / (254 √H); let ε be the largest over the
    visible keys. Scores off by at most ε change each probability by a factor within e^{±2ε},
    so the probabilities move by at most (e^{2ε} - 1) in total; the values themselves are off by
    at most δ = max_s absmax(v_s)/254. Hence |Δout| ≤ (e^{2ε} - 1) · max|v| + δ.
    """
    B, T, N, H = q_BTNH.shape
    K = k_BKSH.shape[1]
    q1_BKGT = jnp.abs(q_BTNH).sum(-1).reshape(B, T, K, N // K).transpose(0, 2, 3, 1)
    kmax_BKS = jnp.abs(k_BKSH).max(-1)
    vmax_BKS = jnp.abs(v_BKSH).max(-1)
    vis_B1TS = mask_BTS[:, None]
    worst = lambda x_BKS: jnp.max(jnp.where(vis_B1TS, x_BKS[:, :, None, :], 0.0), -1)  # noqa
    eps_BKGT = q1_BKGT * worst(kmax_BKS)[:, :, None, :] / (254 * jnp.sqrt(jnp.float32(H)))
    bound_BKGT = jnp.expm1(2 * eps_BKGT) * worst(vmax_BKS)[:, :, None, :] \
        + worst(vmax_BKS)[:, :, None, :] / 254
    return bound_BKGT.transpose(0, 3, 1, 2).reshape(B, T, N)
