"""Weight-stationary layouts: the weights never move, the activations do.

A decode step reads every weight once to do two FLOPs per weight per sequence, so moving a
weight across the interconnect would cost far more than using it. Weight-stationary layouts
(Pope et al. 2022, §3.2) leave each device its block of every matrix for good and move only
activations, which are small when the batch is.

**1D** (Megatron; Shoeybi et al. 2019). Activations [B, T, D] are replicated on the M model
devices. Each device holds the heads N_M of W_Q, W_O and the slice F_M of the MLP, so it
computes a slice of the attention heads and of the hidden layer, and a *partial sum* of each
block's output. One AllReduce over M per block completes it:

    x [B, T, D] @ W_in [D, F_M] -> [B, T, F_M] @ W_out [F_M, D] -> [B, T, D]{partial over M}
    -> AllReduce_M -> [B, T, D]

The AllReduce moves B·T·D elements no matter how many devices share the work, so past some
degree the interconnect, not memory, sets the step time (chapter 9).

**2D** (the scaling book, appendix B and worked problem 7). Weights are split over both of
their dimensions, D over X and F (or heads) over YZ, so each block is closer to square, and
activations between blocks are split over D on every device, [B, T, D_XYZ]:

    In  [B, T, D_X]      = AllGather_YZ(In [B, T, D_XYZ])
    Tmp [B, T, F_YZ]     = AllReduce_X(In [B, T, D_X] @ W_in [D_X, F_YZ])
    Out [B, T, D_XYZ]    = ReduceScatter_YZ(Tmp [B, T, F_YZ] @ W_out [F_YZ, D_X])

Each collective now moves a 1/X or 1/YZ slice of the activations, so the traffic per device
falls as the chip count grows. Attention takes the same form with heads in place of F, and
splits the batch over X (its projections end in a ReduceScatter over X instead of an
AllReduce, and an AllGather over X brings the batch back before W_O), so that the X devices
neither repeat each other's attention nor hold copies of each other's cache.

Both bodies below are `shard_map` bodies: every array is one device's block (the comment on
each line gives its shape), and every collective is written out.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from inferbook.model.config import ModelConfig
from inferbook.model.decoder import (
    ACTIVATIONS,
    Attend,
    Params,
    merge_heads,
    mlp,
    rms_norm,
    rope,
    split_heads,
)
from inferbook.parallel.mesh import shard_map
from inferbook.parallel.sharding import Plan, batch_block, param_specs

__all__ = ["transformer_1d", "transformer_2d", "mlp_2d", "logits_1d", "logits_2d",
           "rms_norm_sharded", "psum", "mlp_program"]


def psum(plan: Plan, x: jax.Array, axes: tuple[str, ...], name: str = "psum") -> jax.Array:
    """AllReduce(sum) over `axes`, labelled `name` in the compiled program (`hlo` reads the
    label back); nothing at all when the axes hold one device."""
    if plan.size(axes) == 1:
        return x
    with jax.named_scope(name):
        return jax.lax.psum(x, axes)


def _all_gather(plan: Plan, x, axes, axis, name):
    if plan.size(axes) == 1:
        return x
    with jax.named_scope(name):
        return jax.lax.all_gather(x, axes, axis=axis, tiled=True)


def _psum_scatter(plan: Plan, x, axes, axis, name):
    if plan.size(axes) == 1:
        return x
    with jax.named_scope(name):
        return jax.lax.psum_scatter(x, axes, scatter_dimension=axis, tiled=True)


def rms_norm_sharded(plan: Plan, x_d: jax.Array, gain_d: jax.Array, eps: float,
                     axes: tuple[str, ...], D: int) -> jax.Array:
    """RMSNorm of activations split over D: one AllReduce of the sums of squares [.., 1]."""
    x32 = x_d.astype(jnp.float32)
    ss = psum(plan, jnp.sum(x32 * x32, axis=-1, keepdims=True), axes, "norm")   # [..., 1]
    return gain_d * (x32 * jax.lax.rsqrt(ss / D + eps)).astype(x_d.dtype)


# 1D weight-stationary -------------------------------------------------------------------------

def transformer_1d(plan: Plan, params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
                   pos_BT: jax.Array, attend: Attend,
                   mlp_block: Callable[[int, Params, jax.Array], jax.Array] | None = None
                   ) -> jax.Array:
    """Final hidden states [B, T, D] (replicated over the model axes M).

    `attend(i, q [B, T, N_M, H], k [B_Z, T, K_Y, H], v)` returns [B, T, N_M, H]; it owns the
    KV cache (see kv_sharding) and, for sequence parallelism, the ring (sequence_parallel).
    `mlp_block(i, p, h)` replaces layer i's MLP (default: the dense MLP on its F_M slice); it
    returns this device's partial sum [B, T, D]{U_M} (mixtures of experts: expert_parallel).
    """
    M, Z, H = plan.model, plan.kv_batch, cfg.H
    x_BTd = params["embed"][tokens_BT]                                  # [B, T, D_M]
    x_BTD = _all_gather(plan, x_BTd, M, 2, "embed")                     # [B, T, D]
    for i, p in enumerate(params["layers"]):
        h_BTD = rms_norm(x_BTD, p["attn_norm"], cfg.norm_eps)           # [B, T, D]
        q_BTNH = rope(split_heads(h_BTD @ p["wq"], H), pos_BT, cfg.rope_theta)  # [B, T, N_M, H]
        h_BzTD, pos_BzT = batch_block(plan, h_BTD, Z), batch_block(plan, pos_BT, Z)
        k_BzTKH = rope(split_heads(h_BzTD @ p["wk"], H), pos_BzT, cfg.rope_theta)
        v_BzTKH = split_heads(h_BzTD @ p["wv"], H)                      # [B_Z, T, K_Y, H]
        o_BTNH = attend(i, q_BTNH, k_BzTKH, v_BzTKH)                    # [B, T, N_M, H]
        out_BTD = merge_heads(o_BTNH) @ p["wo"]                         # [B, T, D]{U_M}
        x_BTD = x_BTD + psum(plan, out_BTD, M, "attn_out")              # AllReduce_M
        h_BTD = rms_norm(x_BTD, p["mlp_norm"], cfg.norm_eps)
        m_BTD = mlp(p, h_BTD, cfg) if mlp_block is None else mlp_block(i, p, h_BTD)
        x_BTD = x_BTD + psum(plan, m_BTD, M, "mlp_out")                  # [B, T, F_M] inside
    return x_BTD


def logits_1d(plan: Plan, params: Params, cfg: ModelConfig, x_BD: jax.Array,
              extra_axes: tuple[str, ...] = ()) -> jax.Array:
    """Float32 logits [B, V] from hidden states [B, D] replicated over M.

    The unembedding is split over D like the embedding ([D_M, V]), so each device multiplies
    its slice of D and one AllReduce adds the slices. `extra_axes` joins further axes to that
    sum (sequence parallelism, where only the device holding a prompt's last token has x).
    """
    x_BD = rms_norm(x_BD, params["final_norm"], cfg.norm_eps)
    x_Bd = batch_block(plan, x_BD, plan.model, axis=1)                  # [B, D_M]
    w_dV = params["embed"].T if cfg.tied_embeddings else params["unembed"]   # [D_M, V]
    part_BV = jnp.matmul(x_Bd, w_dV, preferred_element_type=jnp.float32)
    return psum(plan, part_BV, plan.model + tuple(extra_axes), "logits")   # AllReduce


# 2D weight-stationary -------------------------------------------------------------------------

def transformer_2d(plan: Plan, params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
                   pos_BT: jax.Array, attend: Attend) -> jax.Array:
    """Final hidden states [B, T, D_XYZ] (split over D on every device).

    `attend(i, q [B_X, T, N_YZ, H], k [B_XZ, T, K_Y, H], v)` returns [B_X, T, N_YZ, H]:
    heads over YZ as in transformer_1d, and the batch over X.
    """
    X, YZ, Z, H = plan.x, plan.model, plan.kv_batch, cfg.H
    XYZ, D = X + YZ, cfg.D
    x_BTd = params["embed"][tokens_BT]                                  # [B, T, D_XYZ]
    for i, p in enumerate(params["layers"]):
        h_BTd = rms_norm_sharded(plan, x_BTd, p["attn_norm"], cfg.norm_eps, XYZ, D)
        h_BTd = _all_gather(plan, h_BTd, YZ, 2, "block_in")             # [B, T, D_X]
        # Projections reduce over X and scatter the batch over X at once: attention and
        # the cache are split over the batch on X (never copied), over heads on YZ.
        q_BxTNH = _psum_scatter(plan, split_heads(h_BTd @ p["wq"], H), X, 0, "q_proj")
        q_BxTNH = rope(q_BxTNH, batch_block(plan, pos_BT, X), cfg.rope_theta)  # [B_X, T, N_YZ, H]
        h_BxzTd, pos_BxzT = _kv_rows(plan, h_BTd), batch_block(plan, pos_BT, X + Z)
        k_BxzTKH = _psum_scatter(plan, split_heads(h_BxzTd @ p["wk"], H), X, 0, "kv_proj")
        k_BxzTKH = rope(k_BxzTKH, pos_BxzT, cfg.rope_theta)             # [B_XZ, T, K_Y, H]
        v_BxzTKH = _psum_scatter(plan, split_heads(h_BxzTd @ p["wv"], H), X, 0, "kv_proj")
        o_BxTNH = attend(i, q_BxTNH, k_BxzTKH, v_BxzTKH)                # [B_X, T, N_YZ, H]
        o_BTNH = _all_gather(plan, o_BxTNH, X, 0, "attn_gather")         # [B, T, N_YZ, H]
        out_BTd = merge_heads(o_BTNH) @ p["wo"]                         # [B, T, D_X]{U_YZ}
        x_BTd = x_BTd + _psum_scatter(plan, out_BTd, YZ, 2, "block_out")   # [B, T, D_XYZ]

        x_BTd = x_BTd + mlp_2d(plan, p, x_BTd, cfg)                    # [B, T, D_XYZ]
    return x_BTd


def mlp_2d(plan: Plan, p: Params, x_BTd: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The MLP block of the 2D layout (worked problem 7's algorithm): x [B, T, D_XYZ] in,
    the block's output [B, T, D_XYZ] out (the caller adds the residual)."""
    X, YZ = plan.x, plan.model
    act = ACTIVATIONS[cfg.activation]
    h_BTd = rms_norm_sharded(plan, x_BTd, p["mlp_norm"], cfg.norm_eps, X + YZ, cfg.D)
    h_BTd = _all_gather(plan, h_BTd, YZ, 2, "block_in")                 # In [B, T, D_X]
    if cfg.mlp == "gated":
        gate_up = jnp.stack([h_BTd @ p["w_gate"], h_BTd @ p["w_up"]])   # [2, B, T, F_YZ]{U_X}
        gate_BTf, up_BTf = psum(plan, gate_up, X, "mlp_hidden")         # AllReduce_X
        t_BTf = act(gate_BTf) * up_BTf                                  # Tmp [B, T, F_YZ]
        w_fd = p["w_down"]                                              # [F_YZ, D_X]
    else:
        t_BTf = act(psum(plan, h_BTd @ p["w_in"], X, "mlp_hidden"))     # Tmp [B, T, F_YZ]
        w_fd = p["w_out"]                                               # [F_YZ, D_X]
    return _psum_scatter(plan, t_BTf @ w_fd, YZ, 2, "block_out")        # Out [B, T, D_XYZ]


def mlp_program(cfg: ModelConfig, plan: Plan) -> Callable:
    """One MLP block alone as a sharded program: (layer params, x) -> x + MLP(x), with x
    [B, T, D] laid out as the plan keeps activations. For reading one block's collectives."""
    specs = param_specs(cfg, plan)["layers"][0]
    if plan.x:                          # 2d-ws: activations split over D
        x_spec = P(None, None, plan.width_axes)

        def body(p, x_BTd):
            return x_BTd + mlp_2d(plan, p, x_BTd, cfg)
    else:
        x_spec = P()

        def body(p, x_BTD):
            h_BTD = rms_norm(x_BTD, p["mlp_norm"], cfg.norm_eps)
            return x_BTD + psum(plan, mlp(p, h_BTD, cfg), plan.model, "mlp_out")
    return shard_map(body, plan.mesh, in_specs=(specs, x_spec), out_specs=x_spec)


def _kv_rows(plan: Plan, h_BTd):
    """The rows whose keys and values this device's X group produces: batch blocks (x, z) for
    every x, so that a ReduceScatter over X leaves device (x, z) block x·Z + z."""
    X, Z = plan.size(plan.x), plan.size(plan.kv_batch)
    if Z == 1:
        return h_BTd
    B = h_BTd.shape[0]
    blocks = h_BTd.reshape(X, Z, B // (X * Z), *h_BTd.shape[1:])
    mine = jax.lax.dynamic_index_in_dim(blocks, jax.lax.axis_index(plan.kv_batch), 1, False)
    return mine.reshape(B // Z, *h_BTd.shape[1:])                      # [X·B_XZ, T, D_X]


def logits_2d(plan: Plan, params: Params, cfg: ModelConfig, x_Bd: jax.Array) -> jax.Array:
    """Float32 logits [B, V] from hidden states [B, D_XYZ]: each device multiplies its slice
    of D by its rows of the unembedding [D_XYZ, V]; one AllReduce over all axes adds them."""
    XYZ = plan.x + plan.model
    x_Bd = rms_norm_sharded(plan, x_Bd, params["final_norm"], cfg.norm_eps, XYZ, cfg.D)
    w_dV = params["embed"].T if cfg.tied_embeddings else params["unembed"]   # [D_XYZ, V]
    part_BV = jnp.matmul(x_Bd, w_dV, preferred_element_type=jnp.float32)
    return psum(plan, part_BV, XYZ, "logits")
