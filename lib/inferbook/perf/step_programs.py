"""The parts of a step, each as a program of its own: what calibration times.

A decode step (or a prefill) is the model's weight matmuls, its attention, and everything
else — norms, rotary embedding, residual adds, sampling, the cache write, dispatching the
programs. `inferbook.perf.calibration` predicts the step from these parts timed alone; this
module builds them, every one a zero-argument function whose call runs one compiled program
and returns its result:

* `model_matmul_program` — every weight matmul of the step, at the step's rows, in the
  model's order and with its dependencies, and nothing else;
* `decode_stepper`, `prefill_runner` — the library's own step and prefill, as
  `decode.generate` runs them;
* `skeleton` — the same model at tiny widths: the same layers, the same operations, the same
  programs, almost no bytes or FLOPs. Timed through the same functions, it gives each part's
  cost that is not work: dispatch, kernel launches, small operations;
* `attention_skeleton` — the skeleton with the model's own attention: its heads, head width
  and caches, around matmuls of tiny width. Its step is the skeleton's step plus the model's
  attention, run where the step runs it — inside a whole step, between the projections that
  feed it and the sampling after it — rather than in a program of its own.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp

from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.decode_layout import linear
from inferbook.perf import timing

__all__ = ["skeleton", "attention_skeleton", "model_matmuls", "model_matmul_program",
           "decode_stepper", "prefill_runner"]


def skeleton(cfg: ModelConfig, width: int = 16) -> ModelConfig:
    """`cfg` at tiny widths (D = F = V = `width`, one KV head of 8 channels): the same layers
    and operations, so the same programs, with almost nothing to move. (A compiler may treat
    the tiniest products differently — inline them rather than call a matrix kernel — which
    a wider skeleton avoids at the cost of a little work of its own.)"""
    return cfg.replace(D=width, F=width, N=cfg.G, K=1, H=8, V=width,
                       name=f"{cfg.name}-skeleton")


def attention_skeleton(cfg: ModelConfig, width: int = 16) -> ModelConfig:
    """`cfg` with tiny matmuls (D = F = V = `width`) and its own attention: the same query and
    KV heads, head width, windows and caches. A step of it does the model's attention — every
    byte of the caches read, every score computed — with almost no weights to read.

    Its step minus the `skeleton`'s step is attention's work *as the step does it*. Timing
    attention in a program of its own can measure something else: in profiles taken while
    writing this (XLA:CPU, jax 0.10.2, a 2-core machine) the cache products of a program
    holding only attention ran on one core, and inside the whole step on both, up to twice
    as fast.
    """
    return cfg.replace(D=width, F=width, V=width, name=f"{cfg.name}-attention-skeleton")


MATMUL_NAMES = ("wq", "wk", "wv", "wqkv", "wo", "w_gate", "w_up", "w_gate_up", "w_down",
                "w_in", "w_out")


def _unembedding(params: dict, cfg: ModelConfig) -> dict:
    """The unembedding as a one-weight dict for `decode_layout.linear` (a tied one is the
    embedding, [V, D]: already [out, in])."""
    if cfg.tied_embeddings:
        return {"unembed_t": params["embed"]}
    return {k: params[k] for k in ("unembed", "unembed_t") if k in params}


def model_matmuls(params: dict, cfg: ModelConfig) -> list[Any]:
    """The weight matrices one decode step multiplies by, as stored (2-D, in the weights'
    layout or the decode layout, `model.decode_layout`), in order."""
    mats = []
    for p in params["layers"]:
        mats += [p[k + t] for k in MATMUL_NAMES for t in ("", "_t") if k + t in p]
    return mats + list(_unembedding(params, cfg).values())


def model_matmul_program(params: dict, cfg: ModelConfig, batch: int,
                         unembed_rows: int | None = None) -> Callable[[], Any]:
    """A function running all weight matmuls of one step at `batch` rows, in one program.

    The matrices of `model_matmuls`, multiplied as the model multiplies them (`linear`, in
    whichever layout the weights are), in its order and with its dependencies — queries, keys
    and values from the same input, the output projection after them, the MLP after that,
    layer after layer, the unembedding last (at `unembed_rows` rows: default `batch`; a
    prefill computes logits for one position) — but with nothing else: no attention, no
    norms, no rotary embedding, no sampling. A residual add and a zero-weighted sum stand in
    for what was left out, so that no product can be skipped or reordered.
    """
    dtype = params["embed"].dtype
    x = jax.random.normal(jax.random.key(0), (batch, cfg.D), dtype)
    zero = jnp.zeros((), dtype)           # an argument, so the compiler cannot fold it away
    last = batch if unembed_rows is None else unembed_rows
    NH = cfg.N * cfg.H

    @jax.jit
    def run(x, layers, unembedding, zero):
        for p in layers:
            if "wqkv" in p or "wqkv_t" in p:
                qkv = linear(p, "wqkv", x)
                q, kv = qkv[:, :NH], qkv[:, NH:]
            else:
                q, kv = linear(p, "wq", x), linear(p, "wk", x) + linear(p, "wv", x)
            a = q + zero * kv.sum(-1, keepdims=True)
            x = x + linear(p, "wo", a)
            if cfg.mlp != "gated":
                x = x + linear(p, "w_out", linear(p, "w_in", x))
            elif "w_gate_up" in p or "w_gate_up_t" in p:
                gate_up = linear(p, "w_gate_up", x)
                x = x + linear(p, "w_down", gate_up[:, :cfg.F] * gate_up[:, cfg.F:])
            else:
                x = x + linear(p, "w_down", linear(p, "w_gate", x) * linear(p, "w_up", x))
        return linear(unembedding, "unembed", x[-last:])

    return partial(run, x, params["layers"], _unembedding(params, cfg), zero)


def decode_stepper(params: dict, cfg: ModelConfig, batch: int, context: int) -> Callable[[], Any]:
    """A function that runs one decode step of `batch` sequences with `context` cached tokens.

    It calls what `decode.generate` calls for every new token — `next_token` (read the cache,
    compute logits, sample greedily), then `append_in_place` (write the new keys and values)
    — through `timing.decode_step_timer`, which rewinds the cache after each call so that every
    step attends to the same `context` tokens plus its own.
    """
    return timing.decode_step_timer(params, cfg, batch, context + 1, filled=context)


def prefill_runner(params: dict, cfg: ModelConfig, length: int) -> Callable[[], Any]:
    """A function running `decode.prefill` of one prompt of `length` tokens into an empty
    cache of as many slots."""
    tokens = jnp.zeros((1, length), jnp.int32)
    lengths = jnp.full((1,), length, jnp.int32)
    cache = kvcache.init_cache(cfg, 1, length, params["embed"].dtype)
    return partial(decode.prefill, params, cfg, tokens, lengths, cache)
