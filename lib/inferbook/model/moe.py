"""A mixture of experts in place of the MLP (Shazeer et al. 2017; Mixtral, Qwen-MoE, DeepSeek).

A router scores each token against E experts, each a gated MLP of width F_e, and sends it to
the k best; the block's output is the routing-weighted sum of those k experts' outputs, plus,
in Qwen-MoE and DeepSeek, shared experts that every token goes through. A token therefore
touches k·3·D·F_e expert weights out of E·3·D·F_e: the model is large, the work per token
small. The routing rules of the families (Hugging Face's modeling files are the reference):

    Mixtral     softmax over E, top k, weights renormalised to sum to 1
    Qwen-MoE    softmax over E, top k, renormalised if norm_topk_prob; Qwen2-MoE adds a shared
                expert scaled by sigmoid(x · w_gate)
    DeepSeek-V2 softmax, top k within the best `topk_groups` of `groups` expert groups (a
                group scores its best expert), weights × routed_scale; shared experts
    DeepSeek-V3 sigmoid scores; a learned per-expert bias shifts the *choice* but not the
                weights; a group scores the sum of its best two; renormalised, × routed_scale

Two ways to compute the block, equal up to rounding (the tests hold them to it):

  * `moe_dense`: every expert on every token, then the weighted sum over the k chosen (the
    others weigh zero). E/k times the FLOPs; a reference, and what a chapter derives first.
  * `moe_sparse`: gather the (token, expert) pairs, sort them by expert, run each expert on
    its own tokens only, scatter the results back. This is a grouped matmul written out: the
    sorted rows are cut into tiles that each belong to one expert, and a loop over the
    occupied tiles multiplies each tile by its expert's weights. Only the chosen experts'
    weights are read and only the chosen pairs computed (plus padding inside tiles); a
    decode step of B tokens reads the experts its tokens touched, E·(1 - (1 - k/E)^B) of
    them on average. (`jax.lax.ragged_dot` is the fused primitive for the same product; XLA
    on a CPU runs it as a masked product over all experts, which would hide the point.)

Weights of an MoE layer: router [D, E]; router_bias [E] (DeepSeek-V3); we_gate, we_up
[E, D, F_e], we_down [E, F_e, D]; shared experts ws_gate, ws_up [D, F_s], ws_down [F_s, D];
shared_gate [D, 1] (Qwen2-MoE).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from inferbook.model.config import ModelConfig
from inferbook.model.mlp import ACTIVATIONS, gated_mlp

__all__ = ["moe_shapes", "route", "weighted_expert_sum", "moe_dense", "moe_sparse", "moe_block",
           "tile_rows"]


def moe_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """One MoE layer's weights."""
    m, D = cfg.moe, cfg.D
    shapes = {"router": (D, m.E), "we_gate": (m.E, D, m.F), "we_up": (m.E, D, m.F),
              "we_down": (m.E, m.F, D)}
    if m.score_bias:
        shapes["router_bias"] = (m.E,)
    if m.shared_F:
        shapes |= {"ws_gate": (D, m.shared_F), "ws_up": (D, m.shared_F),
                   "ws_down": (m.shared_F, D)}
    if m.shared_gate:
        shapes["shared_gate"] = (D, 1)
    return shapes


def route(p: dict[str, Any], x_ND: jax.Array, cfg: ModelConfig) -> tuple[jax.Array, jax.Array]:
    """The router: each token's k experts [N, k] (int32) and their weights [N, k] (float32)."""
    m = cfg.moe
    logits_NE = jnp.matmul(x_ND, p["router"], preferred_element_type=jnp.float32)
    scores_NE = jax.nn.softmax(logits_NE, -1) if m.scoring == "softmax" else \
        jax.nn.sigmoid(logits_NE)
    choice_NE = scores_NE + p["router_bias"].astype(jnp.float32) if m.score_bias else scores_NE
    if m.groups > 1:
        N, per_group = x_ND.shape[0], m.E // m.groups
        grouped = choice_NE.reshape(N, m.groups, per_group)
        if m.score_bias:                 # DeepSeek-V3: a group's two best experts, summed
            group_NG = jax.lax.top_k(grouped, min(2, per_group))[0].sum(-1)
        else:                            # DeepSeek-V2: a group's best expert
            group_NG = grouped.max(-1)
        best_groups = jax.lax.top_k(group_NG, m.topk_groups)[1]
        allowed_NG = jnp.zeros_like(group_NG, bool).at[
            jnp.arange(N)[:, None], best_groups].set(True)
        allowed_NE = jnp.repeat(allowed_NG, per_group, axis=1)
        choice_NE = jnp.where(allowed_NE, choice_NE, -jnp.inf)
        if not m.score_bias:             # V2 zeroes the other groups' scores, weights too
            scores_NE = jnp.where(allowed_NE, scores_NE, 0.0)
    experts_Nk = jax.lax.top_k(choice_NE, m.k)[1]
    weights_Nk = jnp.take_along_axis(scores_NE, experts_Nk, axis=-1)
    if m.renormalize:
        weights_Nk = weights_Nk / weights_Nk.sum(-1, keepdims=True)
    return weights_Nk * m.routed_scale, experts_Nk.astype(jnp.int32)


def weighted_expert_sum(weights_Nk: jax.Array, out_NkD: jax.Array) -> jax.Array:
    """The routed experts' output per token [N, D], in float32: the sum over its k chosen
    experts of the router's weight times that expert's output. Every dispatch (sparse here,
    expert-parallel in `parallel.expert_parallel`) ends with it; a weight of 0 drops an
    assignment. `moe_dense`, the reference, writes the same sum over all E experts."""
    return jnp.einsum("Nk,NkD->ND", weights_Nk, out_NkD.astype(jnp.float32))


def _shared(p: dict[str, Any], x_ND: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The shared experts' output (zero when there are none), gated in Qwen2-MoE."""
    m = cfg.moe
    if not m.shared_F:
        return jnp.zeros_like(x_ND)
    y_ND = gated_mlp(x_ND, p["ws_gate"], p["ws_up"], p["ws_down"], cfg.activation)
    if m.shared_gate:
        y_ND = jax.nn.sigmoid(x_ND @ p["shared_gate"]) * y_ND
    return y_ND


def moe_dense(p: dict[str, Any], x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The reference: all E experts on every token, weighted by the router (zero if unchosen)."""
    B, T, D = x_BTD.shape
    x_ND = x_BTD.reshape(B * T, D)
    weights_Nk, experts_Nk = route(p, x_ND, cfg)
    combine_NE = jnp.einsum("Nk,NkE->NE", weights_Nk,
                            jax.nn.one_hot(experts_Nk, cfg.moe.E, dtype=jnp.float32))
    act = ACTIVATIONS[cfg.activation]
    h_NEF = act(jnp.einsum("ND,EDF->NEF", x_ND, p["we_gate"])) * \
        jnp.einsum("ND,EDF->NEF", x_ND, p["we_up"])
    y_NED = jnp.einsum("NEF,EFD->NED", h_NEF, p["we_down"])
    y_ND = jnp.einsum("NE,NED->ND", combine_NE, y_NED.astype(jnp.float32))
    return (y_ND.astype(x_ND.dtype) + _shared(p, x_ND, cfg)).reshape(B, T, D)


def tile_rows(assignments: int, experts: int) -> int:
    """Rows per tile of the grouped matmul: about one expert's share of the assignments, a
    power of two between 8 (decode: a tile is mostly padding, but weights dominate) and 256."""
    share = -(-assignments // experts)
    return int(min(256, max(8, 1 << (share - 1).bit_length())))


def moe_sparse(p: dict[str, Any], x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    """Gather, compute only the chosen (token, expert) pairs, scatter: equal to `moe_dense`."""
    m = cfg.moe
    B, T, D = x_BTD.shape
    N, A = B * T, B * T * m.k                        # tokens, (token, expert) assignments
    x_ND = x_BTD.reshape(N, D)
    weights_Nk, experts_Nk = route(p, x_ND, cfg)
    # Sort the assignments by expert: each expert's tokens become one contiguous run.
    expert_A = experts_Nk.reshape(A)
    order_A = jnp.argsort(expert_A, stable=True)
    expert_s, token_s = expert_A[order_A], (order_A // m.k).astype(jnp.int32)
    # Pad each expert's run to whole tiles of t rows: tile j then belongs to one expert.
    t = tile_rows(A, m.E)
    count_E = jnp.zeros((m.E,), jnp.int32).at[expert_A].add(1)
    tiles_E = (count_E + t - 1) // t
    first_tile_E = jnp.cumsum(tiles_E) - tiles_E
    first_row_E = jnp.cumsum(count_E) - count_E
    slot_s = first_tile_E[expert_s] * t + jnp.arange(A, dtype=jnp.int32) - first_row_E[expert_s]
    max_tiles = -(-A // t) + min(m.E, A)             # each occupied expert pads < one tile
    x_RD = jnp.zeros((max_tiles * t, D), x_ND.dtype).at[slot_s].set(x_ND[token_s])
    # Tile j belongs to the expert whose run of tiles contains it: count the runs ending at
    # or before j.
    end_tile_E = jnp.cumsum(tiles_E)
    tile_expert = (end_tile_E[None, :] <= jnp.arange(max_tiles)[:, None]).sum(1)

    def one_tile(j, y_RD):
        e = tile_expert[j]                           # this tile's expert: read its weights
        rows_rD = jax.lax.dynamic_slice_in_dim(x_RD, j * t, t)
        out_rD = gated_mlp(rows_rD, p["we_gate"][e], p["we_up"][e], p["we_down"][e],
                           cfg.activation)
        return jax.lax.dynamic_update_slice_in_dim(y_RD, out_rD, j * t, 0)

    # The loop runs over the occupied tiles only: its trip count is known at run time.
    y_RD = jax.lax.fori_loop(0, jnp.sum(tiles_E), one_tile, jnp.zeros_like(x_RD))
    # Back to token order: assignment a = n·k + j is expert_Nk[n, j]'s output for token n.
    slot_A = jnp.zeros((A,), jnp.int32).at[order_A].set(slot_s)
    y_ND = weighted_expert_sum(weights_Nk, y_RD[slot_A].reshape(N, m.k, D))
    return (y_ND.astype(x_ND.dtype) + _shared(p, x_ND, cfg)).reshape(B, T, D)


def moe_block(p: dict[str, Any], x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The MoE feed-forward block the decoder runs: the sparse dispatch."""
    return moe_sparse(p, x_BTD, cfg)
