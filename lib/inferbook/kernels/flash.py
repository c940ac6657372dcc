"""Blockwise FlashAttention in pure JAX: exact attention without the [T, S] score matrix.

The reference (`attention.attention_reference`) computes all T·S scores, exponentiates them,
and multiplies by V: the score and probability matrices are written to memory and read back,
and at long sequence lengths they dwarf Q, K and V together. FlashAttention (Dao et al. 2022)
never forms them. It cuts Q into tiles of `block_q` rows and K, V into tiles of `block_k`
keys, and for one Q tile walks through the KV tiles keeping, per query row,

    m  the largest score seen so far,
    l  the sum of exp(score - m) over the keys seen so far,
    o  the sum of exp(score - m) · v over the same keys (an unnormalised output).

When a new tile raises the maximum from m to m', everything accumulated so far was scaled
by exp(-m) and must now be scaled by exp(-m'): multiply l and o by exp(m - m'). That one
rescaling ("online softmax", Milakov & Gimelshein 2018) makes the tile-by-tile result
exactly equal to the softmax over all keys. At the end, out = o / l and the log-sum-exp of
the row's scores is m + log l (FlashAttention-2, Dao 2023, Algorithm 1): dividing once at
the end rather than after every tile is one of FlashAttention-2's savings in non-matmul work.

Live memory is one Q tile's accumulators and one [block_q, block_k] score tile per KV head
and batch row, whatever S is. Causal masking also saves work: a Q tile stops at the last KV
tile its latest query can see, so roughly half the tiles are never visited.

Masks are given by positions (`attention.reference_at_positions` is the reference): key slot
s holds position s, query t of sequence b sits at q_pos[b, t], sequence b has kv_len[b] keys.
"""

from __future__ import annotations

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

__all__ = ["flash_attention", "online_softmax_init", "online_softmax_step",
           "online_softmax_result", "kv_tile_range"]


def online_softmax_init(rows: tuple[int, ...], H: int
                        ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The running (o, m, l) before any tile: nothing accumulated, maximum MASKED, sum 0."""
    return (jnp.zeros((*rows, H), jnp.float32), jnp.full(rows, MASKED, jnp.float32),
            jnp.zeros(rows, jnp.float32))


def online_softmax_step(carry: tuple[jax.Array, jax.Array, jax.Array], scores_RC: jax.Array,
                        v_CH: jax.Array, dims: str = "BKMC,BKCH->BKMH"
                        ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Fold one tile of (already masked) scores and its values into the running (o, m, l).

    Shapes: o [..., R, H], m and l [..., R], scores [..., R, C], values [..., C, H]; `dims`
    is the einsum of the probabilities with the values. Float32 throughout except the
    product with V, which runs in V's dtype like the reference.
    """
    o, m, l = carry
    m_new = jnp.maximum(m, scores_RC.max(axis=-1))
    alpha = jnp.exp(m - m_new)                      # rescales what was accumulated so far
    p = jnp.exp(scores_RC - m_new[..., None])
    l_new = alpha * l + p.sum(axis=-1)
    pv = jnp.einsum(dims, p.astype(v_CH.dtype), v_CH, preferred_element_type=jnp.float32)
    return alpha[..., None] * o + pv, m_new, l_new


def online_softmax_result(o: jax.Array, m: jax.Array, l: jax.Array, empty: float = MASKED
                          ) -> tuple[jax.Array, jax.Array]:
    """Output and log-sum-exp from the final (o, m, l).

    A row that saw no key (l = 0) gets output 0 and log-sum-exp `empty`, so that merging it
    with other partial results (`attention.merge_partials`) gives it no weight.
    """
    seen = l > 0
    l_safe = jnp.where(seen, l, 1.0)
    return o / l_safe[..., None], jnp.where(seen, m + jnp.log(l_safe), empty)


def kv_tile_range(q_pos: jax.Array, kv_len: jax.Array, block_k: int, num_tiles: int,
                  window: int | None = None) -> tuple[jax.Array, jax.Array]:
    """The KV tiles [lo, hi) that queries at positions `q_pos` ([..., T]) can see at all.

    `kv_len` has q_pos's leading shape. Tile hi - 1 holds the latest key any sequence's
    queries can see (causal and padding bounds together); with a window, tile lo holds the
    earliest key still inside the window of the earliest query.
    """
    last_key = jnp.max(jnp.minimum(jnp.max(q_pos, axis=-1), kv_len - 1))
    hi = jnp.clip(last_key // block_k + 1, 0, num_tiles)
    lo = jnp.int32(0)
    if window is not None:
        lo = jnp.clip((jnp.min(q_pos) - window + 1) // block_k, 0, num_tiles)
    return lo, hi


def _pad_to(x: jax.Array, axis: int, multiple: int, mode: str = "constant") -> jax.Array:
    extra = -x.shape[axis] % multiple
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, mode=mode)


def flash_attention(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                    q_pos_BT: jax.Array, kv_len_B: jax.Array, window: int | None = None,
                    block_q: int = 512, block_k: int = 512) -> tuple[jax.Array, jax.Array]:
    """Exact attention, tile by tile: the output [B, T, N, H] and log-sum-exp [B, T, N].

    Equals `reference_at_positions(q, k, v, q_pos, kv_len, window)` for every query that can
    see at least one key (a query that sees none gets output 0 and log-sum-exp MASKED).
    T and S need not be multiples of the block sizes (they are padded; padding the cache
    copies it, so callers that care pick blocks that divide S). Jit it with `window`,
    `block_q` and `block_k` static.
    """
    B, T, N, H = q_BTNH.shape
    K, S = k_BKSH.shape[1], k_BKSH.shape[2]
    G = N // K
    bq, bk = min(block_q, T), min(block_k, S)
    q = _pad_to(q_BTNH, 1, bq)
    q_pos = _pad_to(q_pos_BT.astype(jnp.int32), 1, bq, mode="edge")
    k, v = _pad_to(k_BKSH, 2, bk), _pad_to(v_BKSH, 2, bk)
    nq, nk = q.shape[1] // bq, k.shape[2] // bk
    scale = 1.0 / jnp.sqrt(jnp.float32(H))
    kv_len = kv_len_B.astype(jnp.int32)

    # Q tiles with one KV head's G query heads side by side, as in the reference:
    # [nq, B, K, G·bq, H] (row r of a tile is head g = r // bq, token r % bq).
    per_tile = q.reshape(B, nq, bq, N, H).swapaxes(0, 1).reshape(nq * B, bq, N, H)
    q_tiles = group_queries(per_tile, K).reshape(nq, B, K, G * bq, H)
    pos_tiles = q_pos.reshape(B, nq, bq).transpose(1, 0, 2)

    def one_q_tile(tile):
        q_BKMH, pos_Bq = tile

        def visit(j, carry):
            k_BKCH = lax.dynamic_slice_in_dim(k, j * bk, bk, axis=2)
            v_BKCH = lax.dynamic_slice_in_dim(v, j * bk, bk, axis=2)
            s = jnp.einsum("BKMH,BKCH->BKMC", q_BKMH, k_BKCH,
                           preferred_element_type=jnp.float32) * scale
            k_pos = j * bk + jnp.arange(bk, dtype=jnp.int32)
            mask_BqC = attention_mask(pos_Bq, k_pos, kv_len, window)
            s = jnp.where(group_mask(mask_BqC, G), s, MASKED)
            return online_softmax_step(carry, s, v_BKCH)

        lo, hi = kv_tile_range(pos_Bq, kv_len, bk, nk, window)
        o, m, l = lax.fori_loop(lo, hi, visit, online_softmax_init((B, K, G * bq), H))
        return online_softmax_result(o, m, l)

    out, lse = lax.map(one_q_tile, (q_tiles, pos_tiles))   # [nq, B, K, G·bq, H], [nq, B, K, G·bq]
    def untile(x):              # [nq, B, K, G·bq, ...] back to [B, T, N, ...]
        x = ungroup_rows(x.reshape(nq * B, *x.shape[2:]), bq)          # [nq·B, bq, N, ...]
        x = x.reshape(nq, B, bq, *x.shape[2:]).swapaxes(0, 1)
        return x.reshape(B, nq * bq, *x.shape[3:])[:, :T]

    return untile(out).astype(q_BTNH.dtype), untile(lse)
