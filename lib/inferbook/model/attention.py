"""Reference attention and its masks.

Everything else in the library that computes attention — the blockwise FlashAttention, the
split-KV decoding kernels, paged attention, the sharded layouts — is tested against
`attention_reference`. It is written for clarity, not speed: it materialises the whole
[T, S] score matrix, which is exactly what the faster variants avoid.

Grouped-query attention needs no copies of K and V: the N query heads are viewed as K groups
of G = N / K heads, and each group attends to its own KV head. `group_queries` lays a group's
G heads side by side as M = G·T rows of one KV head, [B, K, M, H], the form every attention
here (the reference, the tiled and split kernels, the int8 reader) multiplies by the cache;
`ungroup_rows` puts the results back in [B, T, N, ...] and `group_mask` repeats a [B, T, S]
mask for the G heads of a group.

Two options of today's models change the scores, and both live here so that every caller gets
them: a scale other than 1/√H (Gemma-2's query_pre_attn_scalar, DeepSeek's YaRN temperature,
latent attention's scale of the full head), and soft-capping c·tanh(s / c) of the scores
(Gemma-2), which bounds each logit to (-c, c) before the mask and the softmax. Values may be
narrower or wider than queries and keys (latent attention: H_v ≠ H_nope + H_rope).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["attention_mask", "attention_reference", "attend", "merge_partials", "MASKED",
           "reference_at_positions", "split_heads", "merge_heads", "group_queries",
           "ungroup_rows", "group_mask"]

# A large negative number rather than -inf: a fully masked row then yields a uniform (and
# ignored) distribution instead of NaNs that would poison everything they touch.
MASKED = -1e30


def split_heads(x: jax.Array, H: int) -> jax.Array:
    """[..., n·H] to [..., n, H]: the heads of a projection's output, side by side."""
    return x.reshape(*x.shape[:-1], -1, H)


def merge_heads(x_BTnH: jax.Array) -> jax.Array:
    """[..., n, H] to [..., n·H], the inverse of `split_heads`."""
    return x_BTnH.reshape(*x_BTnH.shape[:-2], -1)


def group_queries(q_BTNH: jax.Array, K: int) -> jax.Array:
    """[B, T, N, H] to [B, K, M, H], M = G·T: each KV head's G query heads side by side.

    Row g·T + t of KV head k is query head k·G + g at token t. Every product with the cache
    then has B and K as leading batch dimensions on both sides, the form XLA maps straight
    onto a batched matmul (a five-letter einsum such as "BTKGH,BKSH->BKGTS" makes XLA:CPU
    shuffle the cache through memory first, several times slower).
    """
    B, T, N, H = q_BTNH.shape
    G = N // K
    return q_BTNH.reshape(B, T, K, G, H).transpose(0, 2, 3, 1, 4).reshape(B, K, G * T, H)


def ungroup_rows(rows: jax.Array, T: int) -> jax.Array:
    """The inverse of `group_queries` for anything with one entry per row: [B, K, G·T, ...]
    to [B, T, N, ...] (an output [..., H], or a log-sum-exp with no trailing axis)."""
    B, K, M = rows.shape[:3]
    G, rest = M // T, rows.shape[3:]
    x = rows.reshape(B, K, G, T, *rest)
    return x.transpose(0, 3, 1, 2, *range(4, x.ndim)).reshape(B, T, K * G, *rest)


def group_mask(mask_BTS: jax.Array, G: int, T: int | None = None) -> jax.Array:
    """A [B, T, S] mask for the rows of `group_queries`: [B, 1, G·T, S] (the same for each of
    a group's G heads, and broadcast over the K groups).

    A mask that is the same for every query may come as [B, 1, S]; pass T to spread it over
    the T queries."""
    B, T_mask, S = mask_BTS.shape
    T = T_mask if T is None else T
    return jnp.broadcast_to(mask_BTS[:, None, None], (B, 1, G, T, S)).reshape(B, 1, G * T, S)


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


def attention_reference(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                        mask_BTS: jax.Array, *, scale: float | None = None,
                        softcap: float | None = None) -> tuple[jax.Array, jax.Array]:
    """softmax(Q Kᵀ / √H) V, with grouped-query heads, in one piece.

    `scale` replaces 1/√H; `softcap` c caps the scaled scores at c·tanh(s / c).

    Keys and values come head-major, [B, K, S, H], the layout of the library's KV cache: each
    head's keys are contiguous, so both products read the cache in place (a [B, S, K, H] cache
    would be transposed — copied — on every decode step).

    Returns the output [B, T, N, H] (in q's dtype) and the log-sum-exp of the scaled, masked
    scores [B, T, N] (float32). The log-sum-exp is what lets partial results over different key
    blocks be combined exactly (FlashAttention, Flash-Decoding).
    """
    B, T, N, H = q_BTNH.shape
    K = k_BKSH.shape[1]
    q_BKMH = group_queries(q_BTNH, K)         # one KV head's queries side by side, M = G·T
    scores_BKMS = jnp.einsum("BKMH,BKSH->BKMS", q_BKMH, k_BKSH,
                             preferred_element_type=jnp.float32)
    if scale is None:
        scores_BKMS = scores_BKMS / jnp.sqrt(jnp.float32(H))
    else:
        scores_BKMS = scores_BKMS * jnp.float32(scale)
    if softcap is not None:
        scores_BKMS = softcap * jnp.tanh(scores_BKMS / softcap)
    scores_BKMS = jnp.where(group_mask(mask_BTS, N // K, T), scores_BKMS, MASKED)
    lse_BKM = jax.nn.logsumexp(scores_BKMS, axis=-1)
    probs_BKMS = jnp.exp(scores_BKMS - lse_BKM[..., None])
    out_BKMH = jnp.einsum("BKMS,BKSH->BKMH", probs_BKMS.astype(v_BKSH.dtype), v_BKSH,
                          preferred_element_type=jnp.float32)
    return ungroup_rows(out_BKMH, T).astype(q_BTNH.dtype), ungroup_rows(lse_BKM, T)


def attend(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
           mask_BTS: jax.Array, *, scale: float | None = None,
           softcap: float | None = None) -> jax.Array:
    """The attention output alone (what the model needs)."""
    return attention_reference(q_BTNH, k_BKSH, v_BKSH, mask_BTS, scale=scale,
                               softcap=softcap)[0]


def merge_partials(out1_BTNH: jax.Array, lse1_BTN: jax.Array, out2_BTNH: jax.Array,
                   lse2_BTN: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Combine attention over two disjoint sets of keys into attention over their union.

    Each part is softmax-normalised over its own keys; its log-sum-exp says how much total
    weight it carries. Rescaling each part by exp(lse_part - lse_union) gives exactly the
    attention over all keys. FlashAttention applies this block by block, Flash-Decoding across
    chunks of the cache, and the decoder to "the cache" and "this step's new tokens".
    """
    lse_BTN = jnp.logaddexp(lse1_BTN, lse2_BTN)
    w1 = jnp.exp(lse1_BTN - lse_BTN)[..., None]
    w2 = jnp.exp(lse2_BTN - lse_BTN)[..., None]
    out = out1_BTNH.astype(jnp.float32) * w1 + out2_BTNH.astype(jnp.float32) * w2
    return out.astype(out1_BTNH.dtype), lse_BTN


def reference_at_positions(q_BTNH: jax.Array, k_BKSH: jax.Array, v_BKSH: jax.Array,
                           q_pos_BT: jax.Array, kv_len_B: jax.Array,
                           window: int | None = None) -> tuple[jax.Array, jax.Array]:
    """`attention_reference` with its mask described by positions, as the kernels take it.

    Key slot s holds position s (the KV cache's convention); query t of sequence b sits at
    position q_pos[b, t]; sequence b has kv_len[b] keys. The blockwise and split-KV kernels
    (`inferbook.kernels`: flash, flash_decoding, paged) take exactly these arguments and
    build each tile's piece of this mask on the fly instead of all of it.
    """
    S = k_BKSH.shape[2]
    mask_BTS = attention_mask(q_pos_BT, jnp.arange(S, dtype=jnp.int32), kv_len_B, window)
    return attention_reference(q_BTNH, k_BKSH, v_BKSH, mask_BTS)
