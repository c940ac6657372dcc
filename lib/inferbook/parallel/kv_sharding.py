"""Attention against a sharded KV cache: over heads, then batch; or over positions.

During generation the KV cache is the largest thing read every step besides the weights, so
no layout copies it: it is split over the devices, and the queries travel to it.

**Heads, then batch** (the scaling book, "sharding the KV cache"; Pope et al. 2022, §3.3).
Megatron sharding splits the N query heads over all M model-parallel devices. The cache can
follow only as far as there are KV heads: K ways at most (one way for multi-query attention).
So the model axes are split in two, Y (its size divides K) and Z (the rest), and the cache is
laid out [B_Z, K_Y, S, H]: over heads on Y, over the batch on Z. Queries come out of the
projection as [B, T, N_YZ, H] — every sequence, a slice of heads — and must become
[B_Z, T, N_Y, H] — a slice of sequences, the heads of this device's KV heads — to meet the
cache. One AllToAll over Z does exactly that, and a second one brings the output back:

    q [B, T, N_YZ, H]   --AllToAll_Z (split B, gather N)-->   q [B_Z, T, N_Y, H]
    o [B_Z, T, N_Y, H]  = attention(q, K [B_Z, K_Y, S, H], V [B_Z, K_Y, S, H])
    o [B_Z, T, N_Y, H]  --AllToAll_Z (split N, gather B)-->   o [B, T, N_YZ, H]

Both move only activations (a few kB per sequence), while each device reads only its own
1/M of the cache. With Z = 1 (K divisible by M) both AllToAlls vanish. The 2D layout adds
its X axes to the batch split, so there too every device holds 1/n of the cache.

**Positions** (sequence-sharded KV, for contexts too long for one device's memory). Every
device holds a stripe of positions (position p on device p mod Q) and computes attention of
the same queries over its own keys; the partial results are combined with their log-sum-exps
across devices, exactly as Flash-Decoding combines chunks on one device.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array

from inferbook.model import kvcache
from inferbook.model.attention import attention_mask, attention_reference, merge_partials
from inferbook.model.decode import attend_cached
from inferbook.parallel.sharding import Plan, batch_block, local_index

__all__ = ["attend_heads_then_batch", "attend_positions", "combine_over", "write_slots",
           "stripe_positions"]


def attend_heads_then_batch(plan: Plan, q_BTNH: Array, k_BTKH: Array, v_BTKH: Array,
                            ck_BKSH: Array, cv_BKSH: Array, cache_len_B: Array, n_new_B: Array,
                            window: int | None = None, read_cache: bool = True
                            ) -> tuple[Array, Array, Array]:
    """Attention of new tokens to a cache laid out [B_Z, K_Y, S, H]; the body of a layer.

    Per device: q [B, T, N_YZ, H] (all sequences); k, v [B_Z, T, K_Y, H] (this device's
    sequences, already); cache [B_Z, K_Y, S, H]; lengths [B] (replicated). Returns the
    output [B, T, N_YZ, H] and the cache blocks with the new keys and values written.
    `read_cache=False` is prefill: the cache is empty and only written.

    In 2d-ws the X axes split the batch first: q arrives [B_X, T, N_YZ, H], k and v
    [B_XZ, T, K_Y, H], the cache is [B_XZ, K_Y, S, H], and the output leaves [B_X, T, N_YZ, H].
    """
    Z = plan.kv_batch
    len_B = batch_block(plan, cache_len_B, plan.cache_batch)      # [B_Z]
    n_new_B = batch_block(plan, n_new_B, plan.cache_batch)        # [B_Z]
    if plan.size(Z) > 1:
        # q: [B, T, N_YZ, H] -> [B_Z, T, N_Y, H]
        with jax.named_scope("q_to_batch"):
            q_BTNH = jax.lax.all_to_all(q_BTNH, Z, split_axis=0, concat_axis=2, tiled=True)
    o_BTNH = attend_cached(q_BTNH, k_BTKH, v_BTKH, n_new_B, window,
                           ck_BKSH if read_cache else None, cv_BKSH if read_cache else None,
                           len_B)                                 # o: [B_Z, T, N_Y, H]
    ck_BKSH = kvcache.write(ck_BKSH, k_BTKH, len_B)               # cache: [B_Z, K_Y, S, H]
    cv_BKSH = kvcache.write(cv_BKSH, v_BTKH, len_B)
    if plan.size(Z) > 1:
        # o: [B_Z, T, N_Y, H] -> [B, T, N_YZ, H]
        with jax.named_scope("out_to_heads"):
            o_BTNH = jax.lax.all_to_all(o_BTNH, Z, split_axis=2, concat_axis=0, tiled=True)
    return o_BTNH, ck_BKSH, cv_BKSH


def stripe_positions(plan: Plan, axes: tuple[str, ...], n_local: int,
                     source: Array | int | None = None) -> Array:
    """Positions held by a device in the striped layout: source, source + Q, source + 2Q, ...

    `source` defaults to this device's own index along `axes`.
    """
    Q = plan.size(axes)
    src = local_index(plan, axes) if source is None else source
    return src + Q * jnp.arange(n_local, dtype=jnp.int32)


def combine_over(axes: tuple[str, ...], out_BTNH: Array, lse_BTN: Array
                 ) -> tuple[Array, Array]:
    """Merge attention partials held by the devices along `axes` (log-sum-exp weights).

    The cross-device form of `merge_partials`: rescale every partial by exp(lse - max),
    then one sum for the numerators and one for the weights.
    """
    with jax.named_scope("combine"):
        m_BTN = jax.lax.pmax(lse_BTN, axes)
        w_BTN = jnp.exp(lse_BTN - m_BTN)
        num = jax.lax.psum(out_BTNH.astype(jnp.float32) * w_BTN[..., None], axes)
        den_BTN = jax.lax.psum(w_BTN, axes)
    return (num / den_BTN[..., None]).astype(out_BTNH.dtype), m_BTN + jnp.log(den_BTN)


def write_slots(cache_BKSH: Array, new_BTKH: Array, slot_BT: Array) -> Array:
    """Write entry (b, t) at local slot slot_BT[b, t]; slots past the end are dropped."""
    B, T = slot_BT.shape
    batch_BT = jnp.broadcast_to(jnp.arange(B, dtype=jnp.int32)[:, None], (B, T))
    return cache_BKSH.at[batch_BT, :, slot_BT].set(new_BTKH.astype(cache_BKSH.dtype),
                                                   mode="drop")


def attend_positions(plan: Plan, q_BTNH: Array, k_BTKH: Array, v_BTKH: Array,
                     ck_BKSH: Array, cv_BKSH: Array, cache_len_B: Array, n_new_B: Array,
                     window: int | None = None) -> tuple[Array, Array, Array]:
    """Attention of new tokens to a cache split over positions (decode with long contexts).

    Per device: q [B, T, N_M, H] and k, v [B, T, K_M, H] (the same on every device of the
    sequence axes); cache [B, K_M, S_Q, H] holding positions stripe_positions(...). Returns
    the output [B, T, N_M, H] and the cache with each new entry written on the one device
    that owns its position.
    """
    Q_axes = plan.seq
    Q, S_local = plan.size(Q_axes), ck_BKSH.shape[2]
    T = q_BTNH.shape[1]
    pos_BT = cache_len_B[:, None] + jnp.arange(T, dtype=jnp.int32)[None, :]
    mine_S = stripe_positions(plan, Q_axes, S_local)              # [S_Q] positions held here
    # This device's keys: a partial over 1/Q of the positions, then merged across devices.
    mask_c = attention_mask(pos_BT, mine_S, cache_len_B, window)
    out_c, lse_c = attention_reference(q_BTNH, ck_BKSH, cv_BKSH, mask_c)
    out_c, lse_c = combine_over(Q_axes, out_c, lse_c)
    # The new tokens among themselves (every device has them), then the union.
    rel_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), pos_BT.shape)
    mask_n = attention_mask(rel_BT, rel_BT[0], n_new_B, window)
    out_n, lse_n = attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2),
                                       mask_n)
    o_BTNH = merge_partials(out_c, lse_c, out_n, lse_n)[0]
    # Position p lives on device p mod Q at slot p // Q; every other device drops the write.
    owner_BT = pos_BT % Q == local_index(plan, Q_axes)
    slot_BT = jnp.where(owner_BT, pos_BT // Q, S_local)
    return o_BTNH, write_slots(ck_BKSH, k_BTKH, slot_BT), write_slots(cv_BKSH, v_BTKH, slot_BT)
