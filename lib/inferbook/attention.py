"""Reference attention and its masks.

Everything else in the library that computes attention — the blockwise FlashAttention, the
split-KV decoding kernels, paged attention, the sharded layouts — is tested against
`attention_reference`. It is written for clarity, not speed: it materialises the whole
[T, S] score matrix, which is exactly what the faster variants avoid.

Grouped-query attention needs no copies of K and V: the N query heads are viewed as K groups
of G = N / K heads, and each group attends to its own KV head (einsum letters "BTKGH").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["attention_mask", "attention_reference", "attend"]

# A large negative number rather than -inf: a fully masked row then yields a uniform (and
# ignored) distribution instead of NaNs that would poison everything they touch.
MASKED = -1e30


def attention_mask(q_pos_BT: jax.Array, k_pos_S: jax.Array, kv_len_B: jax.Array,
                   window: int | None = None) -> jax.Array:
    """Which keys each query may see: a boolean [B, T, S] mask.

    Query t of sequence b sits at position q_pos[b, t]; key slot s holds position k_pos[s].
    The key is visible when it exists for that sequence (k_pos < kv_len[b]: this is the padding
    mask of a ragged batch), is not in the future (k_pos <= q_pos: the causal mask), and, for
    local attention, is less than `window` positions back.
    """
    q = q_pos_BT[:, :, None]
    k = k_pos_S[None, None, :]
    mask = (k <= q) & (k < kv_len_B[:, None, None])
    if window is not None:
        mask &= q - k < window
    return mask


def attention_reference(q_BTNH: jax.Array, k_BSKH: jax.Array, v_BSKH: jax.Array,
                        mask_BTS: jax.Array) -> tuple[jax.Array, jax.Array]:
    """softmax(Q Kᵀ / √H) V, with grouped-query heads, in one piece.

    Returns the output [B, T, N, H] (in q's dtype) and the log-sum-exp of the scaled, masked
    scores [B, T, N] (float32). The log-sum-exp is what lets partial results over different key
    blocks be combined exactly (FlashAttention, Flash-Decoding).
    """
    B, T, N, H = q_BTNH.shape
    K = k_BSKH.shape[2]
    q_BTKGH = q_BTNH.reshape(B, T, K, N // K, H)
    scores_BKGTS = jnp.einsum("BTKGH,BSKH->BKGTS", q_BTKGH, k_BSKH,
                              preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(H))
    scores_BKGTS = jnp.where(mask_BTS[:, None, None, :, :], scores_BKGTS, MASKED)
    lse_BKGT = jax.nn.logsumexp(scores_BKGTS, axis=-1)
    probs_BKGTS = jnp.exp(scores_BKGTS - lse_BKGT[..., None])
    out_BTKGH = jnp.einsum("BKGTS,BSKH->BTKGH", probs_BKGTS.astype(v_BSKH.dtype), v_BSKH,
                           preferred_element_type=jnp.float32)
    out_BTNH = out_BTKGH.reshape(B, T, N, H).astype(q_BTNH.dtype)
    lse_BTN = jnp.moveaxis(lse_BKGT, -1, 1).reshape(B, T, N)
    return out_BTNH, lse_BTN


def attend(q_BTNH: jax.Array, k_BSKH: jax.Array, v_BSKH: jax.Array,
           mask_BTS: jax.Array) -> jax.Array:
    """The attention output alone (what the model needs)."""
    return attention_reference(q_BTNH, k_BSKH, v_BSKH, mask_BTS)[0]
