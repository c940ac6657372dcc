"""The weight-gathered layout: move the weights, keep the tokens still.

Weight-stationary layouts move activations, whose size grows with the number of tokens in
flight, B·T. With a large enough batch of prompt tokens (large-batch prefill) the weights
become the smaller thing to move, and the better layout turns around (Pope et al. 2022,
§3.2.3, "weight-gathered"): split the *batch* over every device, keep the weights stored
split as in the 1D layout, and AllGather each weight matrix just before it is used. Each
device then runs the whole unsharded model on its own sequences — here literally
`decoder.transformer` — and attention needs no communication at all, since a sequence's cache
lives on one device.

Per forward pass every device receives (n - 1)/n of all the weights, whatever the batch;
the 1D layout's AllReduces move 2·L·B·T·D elements, growing with the tokens. The crossover
is where B·T·D·L·2 ≈ the parameters, a few thousand tokens for real models (chapter 8). For
decoding this is the FSDP-like layout the sources warn against: a decode step would ship
every weight over the interconnect to process a handful of tokens.
"""

from __future__ import annotations

import jax

from inferbook.model.config import ModelConfig
from inferbook.model.decoder import Attend, Params, rms_norm, transformer, unembed
from inferbook.parallel.sharding import Plan, param_specs

__all__ = ["gather_weights", "transformer_wg", "logits_wg"]


def gather_weights(plan: Plan, params: Params, cfg: ModelConfig) -> Params:
    """Every weight whole on every device: one AllGather per split dimension."""
    def gather(w, spec):
        for dim, axes in enumerate(spec):
            if axes is not None and plan.size(axes) > 1:
                with jax.named_scope("gather_weights"):
                    w = jax.lax.all_gather(w, axes, axis=dim, tiled=True)
        return w
    return jax.tree.map(gather, params, param_specs(cfg, plan))


def transformer_wg(plan: Plan, params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
                   pos_BT: jax.Array, attend: Attend) -> tuple[jax.Array, Params]:
    """Final hidden states [B_n, T, D] of this device's sequences (B split over all n devices).

    `attend(i, q, k, v)` sees whole heads: q [B_n, T, N, H], k, v [B_n, T, K, H].
    """
    full = gather_weights(plan, params, cfg)                     # every W whole: AllGather
    return transformer(full, cfg, tokens_BT, pos_BT, attend), full


def logits_wg(full_params: Params, cfg: ModelConfig, x_BD: jax.Array) -> jax.Array:
    """Float32 logits [B_n, V] of this device's sequences (no communication)."""
    return unembed(full_params, cfg, rms_norm(x_BD, full_params["final_norm"], cfg.norm_eps))
