"""Sequence parallelism for long prompts: ring attention over striped shards.

Prefill looks like training (the scaling book, "prefill"): a long prompt is a big batch of
tokens, and beyond the degree of model parallelism the interconnect can feed, the next way to
use more chips is to split the *sequence*. Everything position-wise — projections, MLP,
norms — is then local. Attention is not: every query needs the keys of all earlier positions.

Ring attention (Liu et al. 2023) passes the key/value blocks around a ring of the Q devices of
the sequence axes. At step r each device holds the block that started r devices back,
computes the partial attention of its own queries over it, and merges the partial into its
running result with the log-sum-exp rule of FlashAttention (`merge_partials`). After Q - 1
`ppermute`s every query has met every key, and no device ever held more than two blocks.

Which positions a device holds matters. With contiguous blocks under a causal mask the last
device does Q times the useful work of the first. Striping — position p on device p mod Q,
as in striped attention (Brandon et al. 2023) — gives every device the same share of
unmasked pairs, and it is also the layout of the sequence-sharded cache that decoding reads
afterwards (`kv_sharding.attend_positions`), so prefill writes its keys where they stay.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from inferbook.model.attention import attention_mask, attention_reference, merge_partials
from inferbook.parallel.kv_sharding import stripe_positions
from inferbook.parallel.sharding import Plan, local_index

__all__ = ["stripe_order", "ring_attention"]


def stripe_order(T: int, Q: int) -> np.ndarray:
    """The permutation that puts stripe q (positions q, q + Q, ...) in contiguous block q.

    ``tokens[:, stripe_order(T, Q)]`` sharded in Q contiguous blocks gives device q its stripe.
    """
    if T % Q:
        raise ValueError(f"a prompt of {T} tokens does not split into {Q} stripes")
    return np.arange(T).reshape(T // Q, Q).T.reshape(-1)


def ring_attention(plan: Plan, q_BTNH: Array, k_BTKH: Array, v_BTKH: Array, lengths_B: Array,
                   window: int | None = None) -> Array:
    """Causal attention of this device's stripe of queries to the whole prompt.

    Per device: q [B, T_Q, N_M, H]; k, v [B, T_Q, K_M, H] (this device's stripe of positions);
    lengths [B] (real tokens per prompt, replicated). Returns o [B, T_Q, N_M, H].
    """
    axes = plan.seq
    Q, T_local = plan.size(axes), q_BTNH.shape[1]
    me = local_index(plan, axes)
    q_pos_T = stripe_positions(plan, axes, T_local)
    q_pos_BT = jnp.broadcast_to(q_pos_T, q_BTNH.shape[:2])
    ring = [(i, (i + 1) % Q) for i in range(Q)]            # device i sends to device i + 1
    k_BKTH, v_BKTH = k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2)   # [B, K_M, T_Q, H]
    out_BTNH = lse_BTN = None
    for r in range(Q):
        # The block held now started r devices back: its stripe of positions.
        k_pos_T = stripe_positions(plan, axes, T_local, source=(me - r) % Q)
        mask_BTT = attention_mask(q_pos_BT, k_pos_T, lengths_B, window)
        o_r, lse_r = attention_reference(q_BTNH, k_BKTH, v_BKTH, mask_BTT)
        if out_BTNH is None:
            out_BTNH, lse_BTN = o_r, lse_r
        else:
            out_BTNH, lse_BTN = merge_partials(out_BTNH, lse_BTN, o_r, lse_r)
        if r < Q - 1:
            # k, v: [B, K_M, T_Q, H] from device i to device i + 1
            with jax.named_scope("ring"):
                k_BKTH = jax.lax.ppermute(k_BKTH, axes, ring)
                v_BKTH = jax.lax.ppermute(v_BKTH, axes, ring)
    return out_BTNH
