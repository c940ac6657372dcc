"""Decoding kernels: Flash-Decoding's split KV and FlashDecoding++'s unified maximum.

At decode time each sequence brings one query (T = 1, or a few when verifying speculated
tokens) against a long cache. FlashAttention parallelises over batch, heads and query tiles;
with one query tile per head, a batch of one keeps only K·G programs busy while the GPU has
a hundred-odd multiprocessors. Flash-Decoding (Dao, Haziza, Massa & Sizov 2023) adds the one
long dimension left, the cache: split it into P chunks, let every chunk compute its own
partial attention and log-sum-exp, then combine the P partials by rescaling each with
exp(lse_p - lse) (`combine_chunks`). Chunks are independent, so the P·B·K pieces can run at
once; the combine is a small reduction over P.

FlashDecoding++ (Hong et al. 2024) removes the one thing chunks still compute for each other:
each chunk subtracts its *own* maximum, which the combine then reconciles. If instead every
chunk subtracts the same fixed number φ chosen in advance for the model — softmax is
unchanged by any shift — the partial sums simply add up, with no rescaling. The price is
numerical range: exp(s - φ) overflows when a score lies far above φ, and a row whose scores
all lie far below φ sums to nearly nothing. `unified_max_attention` checks every row's range,
and if any row falls outside it the whole step is recomputed with the safe per-chunk maxima,
so the result is always exact.

Masks are given by positions as in `inferbook.kernels.flash`; shapes are the library's: q [B, T, N,
H], cache [B, K, S, H].
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from inferbook.model.attention import (
    MASKED,
    attention_mask,
    group_mask,
    group_queries,
    ungroup_rows,
)

__all__ = ["chunk_scores", "partial_attention", "combine_chunks", "flash_decoding",
           "unified_max_attention", "rows_to_heads"]


def chunk_scores(q_BTNH: jax.Array, k_BKSH: jax.Array, q_pos_BT: jax.Array,
                 kv_len_B: jax.Array, num_splits: int, window: int | None = None) -> jax.Array:
    """Masked, scaled scores laid out by chunk: [B, K, P, G·T, C] with C = S / P.

    Splitting is a reshape of the cache's sequence axis, so no key moves: chunk p is slots
    p·C ... (p + 1)·C - 1. Rows are one KV head's G query heads side by side (row g·T + t).
    """
    B, T, N, H = q_BTNH.shape
    K, S = k_BKSH.shape[1], k_BKSH.shape[2]
    G, P = N // K, num_splits
    if S % P:
        raise ValueError(f"num_splits={P} must divide the cache length S={S}")
    q_BKMH = group_queries(q_BTNH, K)
    s_BKMS = jnp.einsum("BKMH,BKSH->BKMS", q_BKMH, k_BKSH,
                        preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(H))
    mask_BTS = attention_mask(q_pos_BT, jnp.arange(S, dtype=jnp.int32), kv_len_B, window)
    s_BKMS = jnp.where(group_mask(mask_BTS, G), s_BKMS, -jnp.inf)
    return s_BKMS.reshape(B, K, G * T, P, S // P).transpose(0, 1, 3, 2, 4)


def partial_attention(s_BKPMC: jax.Array, v_BKSH: jax.Array,
                      shift_BKPM: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Each chunk's attention over its own keys: unnormalised output and sum of weights.

    Weights are exp(s - shift); by default the shift is the chunk's own row maximum (Flash-
    Decoding), FlashDecoding++ passes its fixed φ. Returns o [B, K, P, M, H] (Σ weight · v)
    and l [B, K, P, M] (Σ weight), float32. Masked scores are -inf and weigh nothing.
    """
    B, K, P, M, C = s_BKPMC.shape
    if shift_BKPM is None:
        shift_BKPM = s_BKPMC.max(axis=-1)
        shift_BKPM = jnp.where(jnp.isfinite(shift_BKPM), shift_BKPM, 0.0)  # empty chunk
    w = jnp.exp(s_BKPMC - shift_BKPM[..., None])
    v_BKPCH = v_BKSH.reshape(B, K, P, C, v_BKSH.shape[-1])
    o = jnp.einsum("BKPMC,BKPCH->BKPMH", w.astype(v_BKSH.dtype), v_BKPCH,
                   preferred_element_type=jnp.float32)
    return o, w.sum(axis=-1)


def combine_chunks(out_BKPMH: jax.Array, lse_BKPM: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Merge P normalised partial attentions over disjoint key chunks (axis 2) into one.

    The rule of `attention.merge_partials`, applied to P parts at once: the union's log-sum-
    exp is the log-sum-exp of the parts', and part p contributes with weight
    exp(lse_p - lse). Empty chunks carry lse = -inf and weight 0.
    """
    lse = jax.nn.logsumexp(lse_BKPM, axis=2)                          # [B, K, M]
    lse_safe = jnp.where(jnp.isfinite(lse), lse, 0.0)
    w = jnp.exp(lse_BKPM - lse_safe[:, :, None])                      # [B, K, P, M]
    return jnp.einsum("BKPM,BKPMH->BKMH", w, out_BKPMH), lse


def rows_to_heads(out_BKMH: jax.Array, lse_BKM: jax.Array, T: int,
                  dtype: Any) -> tuple[jax.Array, jax.Array]:
    """Rows g·T + t of each KV head back to [B, T, N, H]; rows that saw no key get 0, MASKED."""
    ok = jnp.isfinite(lse_BKM)                  # rows that saw at least one key
    out = jnp.where(ok[..., None], out_BKMH, 0.0)
    lse = jnp.where(ok, lse_BKM, MASKED)
    return ungroup_rows(out, T).astype(dtype), ungroup_rows(lse, T)


def flash_decoding(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                   q_pos_BT: jax.Array, kv_len_B: jax.Array, num_splits: int = 16,
                   window: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Split-KV attention: P chunk partials (output and lse each), combined by lse rescaling.

    Returns output [B, T, N, H] and log-sum-exp [B, T, N], equal to the reference for every
    query that sees a key. `num_splits` must divide S.
    """
    T = q_BTNH.shape[1]
    s = chunk_scores(q_BTNH, k_BKSH, q_pos_BT, kv_len_B, num_splits, window)
    o, l = partial_attention(s, v_BKSH)
    m = s.max(axis=-1)                                        # the shifts used above
    lse_p = jnp.where(l > 0, jnp.where(jnp.isfinite(m), m, 0.0) + jnp.log(l), -jnp.inf)
    out_p = o / jnp.where(l > 0, l, 1.0)[..., None]
    out, lse = combine_chunks(out_p, lse_p)
    return rows_to_heads(out, lse, T, q_BTNH.dtype)


def unified_max_attention(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                          q_pos_BT: jax.Array, kv_len_B: jax.Array, phi: float,
                          num_splits: int = 16, window: int | None = None,
                          bounds: tuple[float, float] = (-60.0, 60.0)
                          ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """FlashDecoding++'s partial softmax with one unified maximum φ, exact by recomputation.

    Every chunk weighs its keys by exp(s - φ); the P partial sums add with no rescaling.
    That is exact as long as each row's largest score s_max satisfies a <= s_max - φ <= b
    (`bounds`): above b the weights overflow float32 when summed over a long cache; below a
    every weight is tiny and the row's sum loses its precision. Each chunk can check its own
    rows without asking any other chunk; if any row anywhere is out of range, the step is
    recomputed by `flash_decoding`. Returns output, log-sum-exp and whether it recomputed.
    The defaults suit float32 weights; FlashDecoding++ uses a far narrower range for fp16.
    """
    T = q_BTNH.shape[1]
    lo, hi = bounds
    s = chunk_scores(q_BTNH, k_BKSH, q_pos_BT, kv_len_B, num_splits, window)
    row_max = s.max(axis=-1)                            # each chunk's own check: no exchange
    too_high = jnp.any(row_max - phi > hi)
    seen = jnp.any(jnp.isfinite(row_max), axis=2)        # rows with at least one key
    too_low = jnp.any(seen & jnp.all(row_max - phi < lo, axis=2))

    def fast():
        o, l = partial_attention(s, v_BKSH, jnp.full(row_max.shape, phi, jnp.float32))
        o, l = o.sum(axis=2), l.sum(axis=2)             # plain sums: the point of φ
        lse = jnp.where(l > 0, phi + jnp.log(jnp.where(l > 0, l, 1.0)), -jnp.inf)
        return rows_to_heads(o / jnp.where(l > 0, l, 1.0)[..., None], lse, T, q_BTNH.dtype)

    def safe():
        return flash_decoding(q_BTNH, k_BKSH, v_BKSH, q_pos_BT, kv_len_B, num_splits, window)

    recompute = too_high | too_low
    out, lse = lax.cond(recompute, safe, fast)
    return out, lse, recompute
