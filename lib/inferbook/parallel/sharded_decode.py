"""Prefill, decode steps and generation on a device mesh, for every layout.

The sharded twins of `decode.prefill`, `decode.decode_step` and `decode.generate` (whose
loop, `decode_loop.decode_loop`, `generate` reuses with the sharded steps). Each wraps
one `shard_map` program whose body is the layout's transformer (`weight_stationary`,
`weight_gathered`) with an `attend` callback that owns the sharded KV cache
(`kv_sharding`, `sequence_parallel`):

    layout              prefill attention                 decode attention
    1d-ws               heads, then batch (AllToAll)      heads, then batch (AllToAll)
    2d-ws               the same, batch also over X       the same, batch also over X
    1d-ws + seq axes    ring over striped prompt shards   cache split over positions
    weight-gathered     local (batch-sharded)             local (batch-sharded)
    expert-parallel     1d-ws over Y, batch over X and Z  1d-ws over Y, batch over X and Z

The cache is allocated once, already split as `sharding.cache_spec` says, and each program
writes its new keys and values into the blocks in place (the cache is donated). Logits come
out whole on every device, so sampling is the unsharded `sampling.sample`; generation
therefore produces exactly the tokens of `decode.generate` (the tests check it). (Where the
model runs data-parallel, expert-parallel, each device's logits are its own sequences' rows
of the whole [B, V] array.)

`generate` is also the loop of a multi-controller job (`multihost`): its prompts enter the
mesh as rows each process supplies for its own devices (`multihost.process_rows`), and the
sampled tokens leave it replicated, so that any process, process 0 in particular, can read
them. In one process the same calls place and read whole arrays.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from inferbook.model.config import ModelConfig
from inferbook.model.decode_loop import GenerateResult, decode_loop, emitted_tokens, is_eos
from inferbook.model.decoder import param_shapes
from inferbook.model.generate_args import eos_tuple, pad_prompts
from inferbook.model.kvcache import KVCache
from inferbook.model.sampling import GREEDY, Sampler, sample
from inferbook.parallel.layout_steps import last_hidden, steps_of
from inferbook.parallel.mesh import shard_map
from inferbook.parallel.multihost import process_rows
from inferbook.parallel.sequence_parallel import stripe_order
from inferbook.parallel.sharding import (
    LayoutError,
    Plan,
    cache_spec,
    logits_spec,
    make_plan,
    param_specs,
    rows_spec,
    shard_params,
)

__all__ = ["batch_multiple", "init_cache", "abstract_inputs", "prefill", "decode_step",
           "next_tokens", "generate", "prefill_program", "decode_program"]


def batch_multiple(plan: Plan) -> int:
    """The batch must be a multiple of this (the devices that split sequences)."""
    return plan.size(plan.cache_batch)


def _check(plan: Plan, B: int, S: int | None = None, T: int | None = None) -> None:
    mult = batch_multiple(plan)
    if B % mult:
        raise LayoutError(f"{plan.describe()}: a batch of {B} does not split over {mult} "
                          "devices (pad it, as generate does)")
    Q = plan.size(plan.seq)
    for what, n in (("cache length", S), ("prompt length", T)):
        if n is not None and n % Q:
            raise LayoutError(f"{plan.describe()}: the {what} {n} does not split {Q} ways")


def init_cache(cfg: ModelConfig, plan: Plan, batch: int, max_len: int,
               dtype: Any = jnp.float32) -> KVCache:
    """An empty cache of `max_len` slots, created already split over the mesh."""
    _check(plan, batch, S=max_len)
    kv = NamedSharding(plan.mesh, cache_spec(plan))

    def zeros():
        return jnp.zeros((batch, cfg.K, max_len, cfg.H), dtype, device=kv)

    return KVCache(k=tuple(zeros() for _ in range(cfg.L)), v=tuple(zeros() for _ in range(cfg.L)),
                   lengths=jnp.zeros((batch,), jnp.int32, device=NamedSharding(plan.mesh, P())))


def abstract_inputs(cfg: ModelConfig, plan: Plan, batch: int, max_len: int,
                    dtype: Any = jnp.float32) -> tuple[dict, KVCache]:
    """Params and cache as shapes with shardings (`jax.ShapeDtypeStruct`), nothing allocated.

    Enough to compile `prefill` or `decode_step` (`hlo.compile_fn`) and read the program's
    collectives and FLOPs for a model far too large for this machine.
    """
    _check(plan, batch, S=max_len)

    def sds(shape, spec, dt=dtype):
        return jax.ShapeDtypeStruct(shape, dt, sharding=NamedSharding(plan.mesh, spec))

    def is_shape(x):
        return isinstance(x, tuple) and all(isinstance(d, int) for d in x)

    params = jax.tree.map(sds, param_shapes(cfg), param_specs(cfg, plan), is_leaf=is_shape)
    kv = [sds((batch, cfg.K, max_len, cfg.H), cache_spec(plan)) for _ in range(cfg.L)]
    return params, KVCache(tuple(kv), tuple(kv), sds((batch,), P(), jnp.int32))


def prefill_program(cfg: ModelConfig, plan: Plan) -> Callable:
    """The shard_map'd prefill: (params, tokens [B, T], lengths [B], cache k, cache v) ->
    (logits [B, V], k, v). Tokens arrive in stripe order when the plan has sequence axes."""
    steps, rows, kv = steps_of(plan), rows_spec(plan), (cache_spec(plan),) * cfg.L
    Q = plan.size(plan.seq)

    def body(params, tokens_BT, lengths_B, ck, cv):
        B, T = tokens_BT.shape                      # T is this device's stripe with seq axes
        pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        if plan.seq:
            pos_BT = pos_BT * Q + jax.lax.axis_index(plan.seq)
        new_k, new_v = list(ck), list(cv)

        def attend(i, q, k, v):
            o, new_k[i], new_v[i] = steps.prefill_attend(plan, cfg, q, k, v, ck[i], cv[i],
                                                         lengths_B)
            return o

        x_BTd, head = steps.forward(plan, params, cfg, tokens_BT, pos_BT, attend)
        x_Bd = last_hidden(steps, plan, x_BTd, lengths_B - 1)
        logits = (steps.prefill_logits or steps.logits)(plan, head, cfg, x_Bd)
        return logits, tuple(new_k), tuple(new_v)

    tok_spec = P(None, plan.seq) if plan.seq else rows
    return shard_map(body, plan.mesh, in_specs=(param_specs(cfg, plan), tok_spec, rows, kv, kv),
                     out_specs=(logits_spec(plan), kv, kv))


def decode_program(cfg: ModelConfig, plan: Plan) -> Callable:
    """The shard_map'd decode step: (params, tokens [B], lengths [B], k, v) ->
    (logits [B, V], k, v), the new token's key and value written into the cache."""
    steps, rows, kv = steps_of(plan), rows_spec(plan), (cache_spec(plan),) * cfg.L

    def body(params, tokens_B, cache_len_B, ck, cv):
        new_k, new_v = list(ck), list(cv)

        def attend(i, q, k, v):
            o, new_k[i], new_v[i] = steps.decode_attend(plan, cfg, q, k, v, ck[i], cv[i],
                                                        cache_len_B)
            return o

        x_BTd, head = steps.forward(plan, params, cfg, tokens_B[:, None], cache_len_B[:, None],
                                    attend)
        return steps.logits(plan, head, cfg, x_BTd[:, 0]), tuple(new_k), tuple(new_v)

    return shard_map(body, plan.mesh, in_specs=(param_specs(cfg, plan), rows, rows, kv, kv),
                     out_specs=(logits_spec(plan), kv, kv))


@partial(jax.jit, static_argnames=("cfg", "plan"), donate_argnames=("cache",))
def prefill(params: dict, cfg: ModelConfig, plan: Plan, tokens_BT: jax.Array,
            lengths_B: jax.Array, cache: KVCache) -> tuple[jax.Array, KVCache]:
    """The sharded `decode.prefill`: logits [B, V] at each prompt's last token, and the cache
    holding the prompts' keys and values (in place, split as the plan says)."""
    _check(plan, tokens_BT.shape[0], S=cache.max_len, T=tokens_BT.shape[1])
    if plan.seq:
        tokens_BT = tokens_BT[:, stripe_order(tokens_BT.shape[1], plan.size(plan.seq))]
    logits, k, v = prefill_program(cfg, plan)(params, tokens_BT, lengths_B, cache.k, cache.v)
    return logits, KVCache(k, v, lengths_B)


@partial(jax.jit, static_argnames=("cfg", "plan"), donate_argnames=("cache",))
def decode_step(params: dict, cfg: ModelConfig, plan: Plan, tokens_B: jax.Array,
                cache: KVCache) -> tuple[jax.Array, KVCache]:
    """The sharded `decode.decode_step`: logits [B, V] and the cache one token longer."""
    _check(plan, tokens_B.shape[0], S=cache.max_len)
    logits, k, v = decode_program(cfg, plan)(params, tokens_B, cache.lengths, cache.k, cache.v)
    return logits, KVCache(k, v, cache.lengths + 1)


@partial(jax.jit, static_argnames=("plan", "sampler", "B"))
def next_tokens(logits: jax.Array, key: jax.Array, plan: Plan, sampler: Sampler,
                B: int) -> jax.Array:
    """Sample the first B rows' next tokens, replicated on every device of the mesh (and so
    readable in every process of a multi-controller job, whatever split the logits had)."""
    tok_B = sample(logits[:B], key, sampler)
    return jax.lax.with_sharding_constraint(tok_B, NamedSharding(plan.mesh, P()))


def generate(params: dict, cfg: ModelConfig, prompts: Sequence[Sequence[int]],
             max_new_tokens: int, *, plan: Plan | None = None, mesh: Any = None,
             layout: str = "1d-ws",
             sampler: Sampler = GREEDY, key: jax.Array | None = None,
             eos_id: int | Sequence[int] | None = None, pad_multiple: int = 16
             ) -> GenerateResult:
    """`decode.generate` on a mesh: the same tokens, from sharded weights and cache.

    The loop is `decode_loop.decode_loop`, the one `decode.generate` runs; this function
    supplies its two steps: the sharded `prefill` and `decode_step`, each followed by
    `next_tokens`.

    Give a `plan`, or a `mesh` and a `layout` name. The batch is padded with copies of the
    first prompt up to a multiple of the devices that split it, and those rows are dropped;
    sampling uses only the real rows, so random draws match the unsharded loop.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
    for b, p in enumerate(prompts):
        if any(not 0 <= int(t) < cfg.V for t in p):
            raise ValueError(f"prompt {b} has token ids outside the vocabulary [0, {cfg.V})")
    plan = plan or make_plan(cfg, mesh, layout)
    B, Q = len(prompts), plan.size(plan.seq)
    mult = batch_multiple(plan)
    rows = list(prompts) + [prompts[0]] * (-B % mult)
    tokens_BT, lengths_B = pad_prompts(rows, math.lcm(pad_multiple, Q))
    row_sharding = NamedSharding(plan.mesh, rows_spec(plan))
    tokens_BT, lengths_B = (process_rows(row_sharding, a) for a in (tokens_BT, lengths_B))
    S = -(-(tokens_BT.shape[1] + max_new_tokens) // Q) * Q
    params = shard_params(params, cfg, plan)
    eos, pad_rows = eos_tuple(eos_id), jnp.zeros((len(rows) - B,), jnp.int32)

    def first(key0):
        cache = init_cache(cfg, plan, len(rows), S, params["embed"].dtype)
        logits, cache = prefill(params, cfg, plan, tokens_BT, lengths_B, cache)
        tok_B = next_tokens(logits, key0, plan, sampler, B)
        return cache, tok_B, is_eos(tok_B, eos)

    def step(cache, tok_B, done_B, key_i):
        feed = jnp.concatenate([tok_B, pad_rows])
        logits, cache = decode_step(params, cfg, plan, feed, cache)
        tok_B = next_tokens(logits, key_i, plan, sampler, B)
        return cache, tok_B, *emitted_tokens(tok_B, done_B, eos)

    return decode_loop(first, step, max_new_tokens, key, eos)
