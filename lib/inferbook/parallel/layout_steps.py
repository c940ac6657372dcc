"""What each sharded layout computes, as a table: `STEPS[name]`.

`sharding.LAYOUTS` says where a layout puts every array (the `Plan` it builds); once placed,
layouts differ in four things, gathered here so that a new layout is one entry:

  * `forward` — the transformer body that runs on the blocks (`weight_stationary`'s 1D and 2D
    bodies, `weight_gathered`'s, `expert_parallel`'s 1D body with its mixtures of experts),
    returning the hidden states and what `logits` needs;
  * `logits` — how the last tokens' hidden states become logits [B, V];
  * `prefill_attend` / `decode_attend` — how one layer's attention meets the sharded cache:
    heads then batch (`kv_sharding`), locally (weight-gathered), around a ring of prompt
    stripes or over a cache split by positions (`sequence_parallel`, `kv_sharding`).

Each attention function takes one layer's (q, k, v), its cache blocks (ck, cv) and the
sequences' lengths, and returns the output and the cache blocks with the new keys and values
written. `sharded_decode` wraps them in `shard_map` programs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp

from inferbook.model.config import ModelConfig
from inferbook.model.decode import attend_cached
from inferbook.model.kvcache import write
from inferbook.parallel.expert_parallel import data_last_hidden, transformer_moe
from inferbook.parallel.kv_sharding import attend_heads_then_batch, attend_positions
from inferbook.parallel.sequence_parallel import ring_attention
from inferbook.parallel.sharding import Plan
from inferbook.parallel.weight_gathered import logits_wg, transformer_wg
from inferbook.parallel.weight_stationary import (
    logits_1d,
    logits_2d,
    transformer_1d,
    transformer_2d,
)

__all__ = ["Steps", "STEPS", "steps_of", "last_hidden"]

@dataclass(frozen=True)
class Steps:
    """One layout's computations (`STEPS`); `sharding.LAYOUTS` holds its placement."""

    forward: Callable[..., tuple[jax.Array, Any]]   # -> (hidden states, what `logits` needs)
    logits: Callable[..., jax.Array]                # (plan, head, cfg, x of the last tokens)
    prefill_attend: Callable[..., tuple]            # (plan, cfg, q, k, v, ck, cv, lengths)
    decode_attend: Callable[..., tuple]             # (plan, cfg, q, k, v, ck, cv, cache_len)
    # Prefill only: where each prompt's last hidden state is, and its logits (default: the
    # row at the prompt's length, and `logits`).
    last_hidden: Callable[..., jax.Array] | None = None   # (plan, x_BTd, last_B)
    prefill_logits: Callable[..., jax.Array] | None = None


def last_hidden(steps: Steps, plan: Plan, x_BTd: jax.Array, last_B: jax.Array) -> jax.Array:
    """Row last_B[b] of sequence b's hidden states, as the layout finds it."""
    if steps.last_hidden is not None:
        return steps.last_hidden(plan, x_BTd, last_B)
    return x_BTd[jnp.arange(x_BTd.shape[0]), last_B]


def _stationary(transformer: Callable) -> Callable:
    def forward(plan: Plan, params: Any, cfg: ModelConfig, tokens_BT: jax.Array,
                pos_BT: jax.Array, attend: Callable) -> tuple[jax.Array, Any]:
        return transformer(plan, params, cfg, tokens_BT, pos_BT, attend), params
    return forward


def _heads_prefill(plan, cfg, q, k, v, ck, cv, lengths_B):
    return attend_heads_then_batch(plan, q, k, v, ck, cv, jnp.zeros_like(lengths_B), lengths_B,
                                   cfg.window, read_cache=False)


def _heads_decode(plan, cfg, q, k, v, ck, cv, cache_len_B):
    return attend_heads_then_batch(plan, q, k, v, ck, cv, cache_len_B,
                                   jnp.ones_like(cache_len_B), cfg.window)


def _local_prefill(plan, cfg, q, k, v, ck, cv, lengths_B):
    zeros_B = jnp.zeros_like(lengths_B)
    return (attend_cached(q, k, v, lengths_B, cfg.window), write(ck, k, zeros_B),
            write(cv, v, zeros_B))


def _local_decode(plan, cfg, q, k, v, ck, cv, cache_len_B):
    o = attend_cached(q, k, v, jnp.ones_like(cache_len_B), cfg.window, ck, cv, cache_len_B)
    return o, write(ck, k, cache_len_B), write(cv, v, cache_len_B)


def _ring_prefill(plan, cfg, q, k, v, ck, cv, lengths_B):
    zeros_B = jnp.zeros_like(lengths_B)
    return (ring_attention(plan, q, k, v, lengths_B, cfg.window), write(ck, k, zeros_B),
            write(cv, v, zeros_B))


def _positions_decode(plan, cfg, q, k, v, ck, cv, cache_len_B):
    return attend_positions(plan, q, k, v, ck, cv, cache_len_B, jnp.ones_like(cache_len_B),
                            cfg.window)


def _stripe_last(plan: Plan, x_BTD: jax.Array, last_B: jax.Array) -> jax.Array:
    # Only the device whose stripe holds a prompt's last token contributes its row.
    Q = plan.size(plan.seq)
    mine_B = last_B % Q == jax.lax.axis_index(plan.seq)
    return jnp.where(mine_B[:, None], x_BTD[jnp.arange(x_BTD.shape[0]), last_B // Q], 0)


def _seq_logits(plan, params, cfg, x_BD):
    # The rows are zero on every device but the one holding the token: sum over the stripes.
    return logits_1d(plan, params, cfg, x_BD, extra_axes=plan.seq)


def _wg_logits(plan, full_params, cfg, x_BD):
    return logits_wg(full_params, cfg, x_BD)


STEPS: dict[str, Steps] = {
    # transformer_moe is transformer_1d, with its MoE layers' experts split over F.
    "1d-ws": Steps(_stationary(transformer_moe), logits_1d, _heads_prefill, _heads_decode),
    "2d-ws": Steps(_stationary(transformer_2d), logits_2d, _heads_prefill, _heads_decode),
    "weight-gathered": Steps(transformer_wg, _wg_logits, _local_prefill, _local_decode),
    # 1d-ws over Y on each data-parallel device's sequences; MoE layers dispatch to experts.
    "expert-parallel": Steps(_stationary(transformer_moe), logits_1d, _heads_prefill,
                             _heads_decode, data_last_hidden),
    # A 1d-ws plan with sequence axes: ring attention over the prompt's stripes, a cache
    # split over positions.
    "sequence": Steps(_stationary(transformer_1d), logits_1d, _ring_prefill,
                      _positions_decode, _stripe_last, _seq_logits),
}


def steps_of(plan: Plan) -> Steps:
    """The computations `plan` runs: its layout's, or the sequence-parallel ones."""
    return STEPS["sequence" if plan.seq else plan.layout]
