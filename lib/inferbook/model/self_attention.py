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

Weights are matrices, heads are split from the activations (see decoder.py for why).
"""

from __future__ import annotations

from typing import Any, Callable

import jax

from inferbook.model.attention import merge_heads, split_heads
from inferbook.model.config import ModelConfig
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


def _heads(p: dict[str, Any], w: str, b: str, h_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    x = h_BTD @ p[w]
    if cfg.qkv_bias:
        x = x + p[b]
    return split_heads(x, cfg.H)


def self_attention(p: dict[str, Any], cfg: ModelConfig, i: int, h_BTD: jax.Array,
                   pos_BT: jax.Array, attend: Attend) -> jax.Array:
    """Layer i's attention block on normalised inputs h [B, T, D]: its output [B, T, D]."""
    q_BTNH = _heads(p, "wq", "bq", h_BTD, cfg)
    k_BTKH = _heads(p, "wk", "bk", h_BTD, cfg)
    v_BTKH = _heads(p, "wv", "bv", h_BTD, cfg)
    if cfg.qk_norm:                      # Qwen3: each head's query and key, before rotating
        q_BTNH = rms_norm(q_BTNH, p["q_norm"], cfg.norm_eps)
        k_BTKH = rms_norm(k_BTKH, p["k_norm"], cfg.norm_eps)
    if cfg.positions == "rope":
        q_BTNH = rotate(q_BTNH, pos_BT, cfg)
        k_BTKH = rotate(k_BTKH, pos_BT, cfg)
    out_BTD = merge_heads(attend(i, q_BTNH, k_BTKH, v_BTKH)) @ p["wo"]
    return out_BTD + p["bo"] if cfg.o_bias else out_BTD
