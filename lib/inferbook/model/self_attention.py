"""The attention block of a decoder layer: project, rotate, attend, project back.

    q = rotate(norm_q(split_heads(h · W_Q + b_Q)))       [B, T, N, H]
    k = rotate(norm_k(split_heads(h · W_K + b_K)))       [B, T, K, H]
    v = split_heads(h · W_V + b_V)                       [B, T, K, H]
    out = merge_heads(attend(q, k, v)) · W_O + b_O        [B, T, D]

Everything but the matrices is optional and switched by the config: the biases (Qwen2's on
q/k/v, GPT-2's everywhere), the per-head RMSNorm of queries and keys before the rotation
(Qwen3, `qk_norm`), the rotary scaling rule (`rotary.rotate`) and the learned positions that
replace rotation altogether (GPT-2, added to the embeddings instead). What the queries look
at is the caller's `attend` callback: the whole prompt, a KV cache, a sharded cache.

Weights are matrices, heads are split from the activations (see decoder.py for why); in the
decode layout (`decode_layout.py`) W_Q, W_K and W_V are one matrix, and every matrix is
stored [out, in].
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model.attention import merge_heads, split_heads
from inferbook.model.config import ModelConfig
from inferbook.model.decode_layout import fused_widths, linear
from inferbook.model.norms import rms_norm
from inferbook.model.rotary import rotate

__all__ = ["attention_shapes", "self_attention", "Attend"]

# attend(i, q [B, T, N, H], k [B, T, K, H], v [B, T, K, H] or None) -> [B, T, N, H_v]
Attend = Callable[[int, jax.Array, jax.Array, jax.Array | None], jax.Array]


def attention_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """One layer's attention weights: W_Q [D, N·H], W_K, W_V [D, K·H], W_O [N·H, D], and
    the biases and q/k norm gains the config asks for."""
    D, N, K, H = cfg.D, cfg.N, cfg.K, cfg.H
    shapes = {"wq": (D, N * H), "wk": (D, K * H), "wv": (D, K * H), "wo": (N * H, D)}
    if cfg.qkv_bias:
        shapes |= {"bq": (N * H,), "bk": (K * H,), "bv": (K * H,)}
    if cfg.o_bias:
        shapes["bo"] = (D,)
    if cfg.qk_norm:
        shapes |= {"q_norm": (H,), "k_norm": (H,)}
    return shapes


def _projections(p: dict[str, Any], h_BTD: jax.Array, cfg: ModelConfig) -> list[jax.Array]:
    """h · W_Q, h · W_K, h · W_V (plus their biases): three products, or one product with the
    three matrices side by side in the decode layout (`decode_layout`), split after."""
    if "wqkv_t" in p or "wqkv" in p:
        qkv = linear(p, "wqkv", h_BTD)
        xs = jnp.split(qkv, np.cumsum(fused_widths(cfg, "wqkv"))[:-1].tolist(), axis=-1)
    else:
        xs = [linear(p, w, h_BTD) for w in ("wq", "wk", "wv")]
    if cfg.qkv_bias:
        xs = [x + p[b] for x, b in zip(xs, ("bq", "bk", "bv"))]
    return [split_heads(x, cfg.H) for x in xs]


def self_attention(p: dict[str, Any], cfg: ModelConfig, i: int, h_BTD: jax.Array,
                   pos_BT: jax.Array, attend: Attend) -> jax.Array:
    """Layer i's attention block on normalised inputs h [B, T, D]: its output [B, T, D]."""
    q_BTNH, k_BTKH, v_BTKH = _projections(p, h_BTD, cfg)
    if cfg.qk_norm:                      # Qwen3: each head's query and key, before rotating
        q_BTNH = rms_norm(q_BTNH, p["q_norm"], cfg.norm_eps)
        k_BTKH = rms_norm(k_BTKH, p["k_norm"], cfg.norm_eps)
    if cfg.positions == "rope":
        q_BTNH = rotate(q_BTNH, pos_BT, cfg)
        k_BTKH = rotate(k_BTKH, pos_BT, cfg)
    out_BTD = linear(p, "wo", merge_heads(attend(i, q_BTNH, k_BTKH, v_BTKH)))
    return out_BTD + p["bo"] if cfg.o_bias else out_BTD
