"""Expert parallelism: each device holds whole experts, and the tokens travel to them.

Tensor parallelism (the 1D layout) splits every expert's F over the M model devices, as it
splits a dense MLP: each device reads a 1/M slice of every expert a step touches, and the
block ends in an AllReduce of all B·T tokens' activations. Expert parallelism (GShard,
Lepikhin et al. 2020; DeepSeek-V3's serving, DeepSeek-AI 2024) instead gives each of the Z
devices of the expert axes E/Z whole experts, and moves each token to the devices of the
experts its router chose:

    x       [N, D]           this device's N = B_XZ·T tokens, routed here (router replicated)
    send    [E, C, D]        token n's copy in slot c of its expert e's buffer; C slots each
    recv    [Z, E_Z, C, D]   = AllToAll_Z(send): every device's tokens for my E/Z experts
    y       [Z, E_Z, C, D]   my experts on what they received  (W_gate [E_Z, D, F_Y], ...)
    back    [E, C, D]        = AllToAll_Z(y): each token's expert outputs, home again
    out     [N, D]           Σ over the k choices of router weight × back[e, c]

The buffer has a fixed size, so each expert keeps C slots per source device (the capacity,
`collectives.expert_capacity`): assignments beyond it are dropped and counted, never silently
lost. The default capacity is dropless (C = N). A token's copies are placed in token order,
so the first C assignments to an expert keep their slots (GShard's rule).

Attention has no experts to split: here it runs data-parallel, the batch split over the
expert axes (and X), each device attending over the caches of its own sequences with whole
heads, as DeepSeek serves V3. The remaining mesh axes, Y, split the heads and every F as
the 1D layout does (worked problem 6's [E_Z, D_X, F_Y]); X, if given, splits each stored
expert over D and gathers it before use — the FSDP axis of training, which inference leaves
at 1 because it ships every expert over the interconnect at every step.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from inferbook.model.config import ModelConfig
from inferbook.model.decoder import Attend, Params, mlp, rms_norm
from inferbook.model.mlp import ACTIVATIONS, gated_mlp
from inferbook.model.moe import moe_block, route, weighted_expert_sum
from inferbook.parallel.mesh import shard_map
from inferbook.parallel.sharding import Plan, batch_block, param_specs
from inferbook.parallel.weight_stationary import psum, transformer_1d
from inferbook.perf.collectives import expert_capacity

__all__ = ["dispatch_slots", "moe_expert_parallel", "transformer_moe", "moe_program",
           "data_last_hidden"]


def dispatch_slots(experts_Nk: jax.Array, E: int) -> jax.Array:
    """Each assignment's slot in its expert's buffer [N, k]: the number of assignments before
    it, in token order, that chose the same expert. Slot ≥ C means dropped."""
    expert_A = experts_Nk.reshape(-1)
    onehot_AE = jax.nn.one_hot(expert_A, E, dtype=jnp.int32)
    before_AE = jnp.cumsum(onehot_AE, axis=0) - onehot_AE          # earlier assignments
    return jnp.take_along_axis(before_AE, expert_A[:, None], 1).reshape(experts_Nk.shape)


def _all_to_all(plan: Plan, x: jax.Array, axes: tuple[str, ...], name: str) -> jax.Array:
    """Block i of dimension 0 goes to device i of `axes`; block i of the result came from it."""
    if plan.size(axes) == 1:
        return x
    with jax.named_scope(name):
        return jax.lax.all_to_all(x, axes, split_axis=0, concat_axis=0, tiled=True)


def _gather(plan: Plan, w: jax.Array, axis: int) -> jax.Array:
    """A stored expert matrix whole over D again: AllGather over the X (FSDP) axes."""
    if plan.size(plan.fsdp) == 1:
        return w
    with jax.named_scope("fsdp_gather"):
        return jax.lax.all_gather(w, plan.fsdp, axis=axis, tiled=True)


def _shared(p: Params, x_ND: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The shared experts on this device's F_Y slice (partial over Y; zero without them)."""
    m = cfg.moe
    if not m.shared_F:
        return jnp.zeros_like(x_ND)
    y_ND = gated_mlp(x_ND, p["ws_gate"], p["ws_up"], p["ws_down"], cfg.activation)
    return jax.nn.sigmoid(x_ND @ p["shared_gate"]) * y_ND if m.shared_gate else y_ND


def moe_expert_parallel(plan: Plan, p: Params, h_BTD: jax.Array, cfg: ModelConfig
                        ) -> tuple[jax.Array, jax.Array]:
    """One MoE block, expert-parallel, in a shard_map body: this device's tokens h
    [B_XZ, T, D] in, their block output [B_XZ, T, D]{partial over Y} and the number of
    (token, expert) assignments dropped for want of capacity out."""
    m, Z = cfg.moe, plan.experts
    nz, (B, T, D) = plan.size(Z), h_BTD.shape
    N, E_z = B * T, m.E // nz
    x_ND = h_BTD.reshape(N, D)
    weights_Nk, experts_Nk = route(p, x_ND, cfg)                     # [N, k] each
    C = expert_capacity(N, m.E, m.k, plan.capacity_factor)
    slot_Nk = dispatch_slots(experts_Nk, m.E)
    kept_Nk = slot_Nk < C
    token_Nk = jnp.broadcast_to(jnp.arange(N)[:, None], experts_Nk.shape)
    # Writes to slots past C land outside the buffer and are dropped (mode="drop").
    send_ECD = jnp.zeros((m.E, C, D), x_ND.dtype).at[experts_Nk, slot_Nk].set(
        x_ND[token_Nk], mode="drop")
    recv_ZeCD = _all_to_all(plan, send_ECD.reshape(nz, E_z, C, D), Z, "dispatch")
    # My experts' slots from every device, C per device: [E_Z, Z·C, D].
    x_eCD = recv_ZeCD.transpose(1, 0, 2, 3).reshape(E_z, nz * C, D)
    w_gate = _gather(plan, p["we_gate"], 1)                          # [E_Z, D, F_Y]
    w_up = _gather(plan, p["we_up"], 1)                              # [E_Z, D, F_Y]
    w_down = _gather(plan, p["we_down"], 2)                          # [E_Z, F_Y, D]
    act = ACTIVATIONS[cfg.activation]
    h_eCF = act(jnp.einsum("eCD,eDF->eCF", x_eCD, w_gate)) * \
        jnp.einsum("eCD,eDF->eCF", x_eCD, w_up)
    y_eCD = jnp.einsum("eCF,eFD->eCD", h_eCF, w_down)                # {partial over Y}
    y_ZeCD = y_eCD.reshape(E_z, nz, C, D).transpose(1, 0, 2, 3)
    y_ECD = _all_to_all(plan, y_ZeCD, Z, "return").reshape(m.E, C, D)
    # Combine: each kept assignment's output, weighted by the router; dropped ones add 0.
    out_NkD = y_ECD[experts_Nk, jnp.minimum(slot_Nk, C - 1)]
    y_ND = weighted_expert_sum(jnp.where(kept_Nk, weights_Nk, 0.0), out_NkD)
    y_ND = y_ND.astype(x_ND.dtype) + _shared(p, x_ND, cfg)
    return y_ND.reshape(B, T, D), jnp.sum(~kept_Nk)


def _mixture(plan: Plan, cfg: ModelConfig) -> Callable[[int, Params, jax.Array], jax.Array]:
    """Layer i's MLP block on one device: dense layers as 1d-ws; MoE layers expert-parallel,
    or, in 1d-ws, the unsharded dispatch on every expert's F_M slice (tensor-parallel)."""
    def block(i: int, p: Params, h_BTD: jax.Array) -> jax.Array:
        if not cfg.is_moe_layer(i):
            return mlp(p, h_BTD, cfg)
        if plan.layout == "expert-parallel":
            return moe_expert_parallel(plan, p, h_BTD, cfg)[0]
        return moe_block(p, h_BTD, cfg)
    return block


def transformer_moe(plan: Plan, params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
                    pos_BT: jax.Array, attend: Attend) -> jax.Array:
    """Final hidden states [B_XZ, T, D] of this device's sequences (replicated over Y).

    The 1D layout over Y (`transformer_1d`) on the sequences of this device's data block,
    with MoE layers expert-parallel; in the 1d-ws layout (no data axes) the same function runs
    tensor-parallel experts. `attend` gets q [B_XZ, T, N_Y, H] and k, v split further over
    the batch where Y has more devices than KV heads.
    """
    tokens_BT = batch_block(plan, tokens_BT, plan.data)               # [B_XZ, T]
    pos_BT = batch_block(plan, pos_BT, plan.data)
    block = _mixture(plan, cfg) if cfg.moe is not None else None
    return transformer_1d(plan, params, cfg, tokens_BT, pos_BT, attend, mlp_block=block)


def data_last_hidden(plan: Plan, x_BTD: jax.Array, last_B: jax.Array) -> jax.Array:
    """Row last_B[b] of each of this device's sequences (`last_B` holds the whole batch)."""
    mine_B = batch_block(plan, last_B, plan.data)
    return x_BTD[jnp.arange(x_BTD.shape[0]), mine_B]


def moe_program(cfg: ModelConfig, plan: Plan, layer: int | None = None) -> Callable:
    """One MoE block alone as a sharded program: (layer params, x [B, T, D]) ->
    (x + MoE(norm(x)), assignments dropped on each data-parallel device [X·Z]).

    x is split over the data axes (expert-parallel) or whole on every device (1d-ws). Layer
    `layer` (default: the first MoE layer) gives the weights' specs. For reading one block's
    collectives and counting what a capacity drops.
    """
    if cfg.moe is None:
        raise ValueError(f"{cfg.name} has no mixture of experts")
    layer = next(i for i in range(cfg.L) if cfg.is_moe_layer(i)) if layer is None else layer
    if not cfg.is_moe_layer(layer):
        raise ValueError(f"layer {layer} of {cfg.name} is not a mixture of experts")
    specs, rows = param_specs(cfg, plan)["layers"][layer], P(plan.data) if plan.data else P()

    def body(p: Any, x_BTD: jax.Array) -> tuple[jax.Array, jax.Array]:
        h_BTD = rms_norm(x_BTD, p["mlp_norm"], cfg.norm_eps)
        if plan.layout == "expert-parallel":
            y_BTD, dropped = moe_expert_parallel(plan, p, h_BTD, cfg)
        else:
            y_BTD, dropped = moe_block(p, h_BTD, cfg), jnp.zeros((), jnp.int32)
        return x_BTD + psum(plan, y_BTD, plan.model, "mlp_out"), dropped[None]

    return shard_map(body, plan.mesh, in_specs=(specs, rows), out_specs=(rows, rows))
