"""The attention block of a decoder layer: project, normalise, rotate, attend, project back.

    q = rotate_i(norm_q(split_heads(h · W_Q + b_Q)))     [B, T, N, H]
    k = rotate_i(norm_k(split_heads(h · W_K + b_K)))     [B, T, K, H]
    v = split_heads(h · W_V + b_V)                       [B, T, K, H]
    out = merge_heads(attend(q, k, v)) · W_O + b_O        [B, T, D]

Everything but the matrices is optional and switched by the config:

  * biases on q/k/v (Qwen2, GPT-NeoX, Phi, StarCoder2) and on the output (GPT-2, Phi);
  * a norm of queries and keys before the rotation (`qk_norm`), over one of three scopes:
    each head with one gain of H that all heads share (Qwen3, Gemma-3, Phi), each head with
    a gain of its own ([N, H]: Cohere, StableLM), or the whole projection before it is split
    into heads (N·H and K·H wide: OLMo-2, OLMoE) — the last normalises across heads, which
    the first two never do;
  * q, k and v clipped to ±c (OLMoE's `clip_qkv`);
  * the rotation of layer i (`rotary.rotate`): its base and scaling rule, only part of each
    head (GPT-NeoX, Phi, StableLM), or none at all (SmolLM3's NoPE layers); learned positions
    replace rotation altogether (GPT-2, added to the embeddings instead).

What the queries look at is the caller's `attend` callback: the whole prompt, a KV cache, a
sharded cache. Weights are matrices, heads are split from the activations (see decoder.py
for why).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from inferbook.model.attention import merge_heads, split_heads
from inferbook.model.config import ModelConfig
from inferbook.model.norms import apply_norm, norm_shapes
from inferbook.model.rotary import rotate

__all__ = ["attention_shapes", "self_attention", "Attend", "qk_norm_widths"]

# attend(i, q [B, T, N, H], k [B, T, K, H], v [B, T, K, H] or None) -> [B, T, N, H_v]
Attend = Callable[[int, jax.Array, jax.Array, jax.Array | None], jax.Array]


def qk_norm_widths(cfg: ModelConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The shapes of the query and key norms' gains: (H,) and (H,) per head, (N, H) and
    (K, H) with a gain per head, (N·H,) and (K·H,) over the whole projection."""
    N, K, H = cfg.N, cfg.K, cfg.H
    return {"head": ((H,), (H,)), "each_head": ((N, H), (K, H)),
            "whole": ((N * H,), (K * H,))}[cfg.qk_norm_scope]


def attention_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """One layer's attention weights: W_Q [D, N·H], W_K, W_V [D, K·H], W_O [N·H, D], and
    the biases and q/k norm parameters the config asks for."""
    D, N, K, H = cfg.D, cfg.N, cfg.K, cfg.H
    shapes = {"wq": (D, N * H), "wk": (D, K * H), "wv": (D, K * H), "wo": (N * H, D)}
    if cfg.qkv_bias:
        shapes |= {"bq": (N * H,), "bk": (K * H,), "bv": (K * H,)}
    if cfg.o_bias:
        shapes["bo"] = (D,)
    if cfg.qk_norm:
        q_shape, k_shape = qk_norm_widths(cfg)
        shapes |= norm_shapes(cfg, "q_norm", q_shape, cfg.qk_norm_kind)
        shapes |= norm_shapes(cfg, "k_norm", k_shape, cfg.qk_norm_kind)
    return shapes


def _project(p: dict[str, Any], w: str, b: str, h_BTD: jax.Array, cfg: ModelConfig
             ) -> jax.Array:
    x = h_BTD @ p[w]
    return x + p[b] if cfg.qkv_bias else x


def _qk_norm(p: dict[str, Any], name: str, x: jax.Array, cfg: ModelConfig) -> jax.Array:
    kind = cfg.qk_norm_kind or cfg.norm
    return apply_norm(kind, cfg.norm_plus_one, x, p, name, cfg.norm_eps)


def self_attention(p: dict[str, Any], cfg: ModelConfig, i: int, h_BTD: jax.Array,
                   pos_BT: jax.Array, attend: Attend) -> jax.Array:
    """Layer i's attention block on normalised inputs h [B, T, D]: its output [B, T, D]."""
    q, k, v = (_project(p, "w" + x, "b" + x, h_BTD, cfg) for x in "qkv")
    if cfg.qk_norm and cfg.qk_norm_scope == "whole":      # OLMo-2: across all heads at once
        q, k = _qk_norm(p, "q_norm", q, cfg), _qk_norm(p, "k_norm", k, cfg)
    if cfg.qkv_clip is not None:                           # OLMoE's clip_qkv
        q, k, v = (jnp.clip(x, -cfg.qkv_clip, cfg.qkv_clip) for x in (q, k, v))
    q_BTNH, k_BTKH, v_BTKH = (split_heads(x, cfg.H) for x in (q, k, v))
    if cfg.qk_norm and cfg.qk_norm_scope != "whole":      # Qwen3, Gemma-3: head by head
        q_BTNH = _qk_norm(p, "q_norm", q_BTNH, cfg)
        k_BTKH = _qk_norm(p, "k_norm", k_BTKH, cfg)
    if cfg.positions == "rope":
        q_BTNH = rotate(q_BTNH, pos_BT, cfg, i)
        k_BTKH = rotate(k_BTKH, pos_BT, cfg, i)
    out_BTD = merge_heads(attend(i, q_BTNH, k_BTKH, v_BTKH)) @ p["wo"]
    return out_BTD + p["bo"] if cfg.o_bias else out_BTD
