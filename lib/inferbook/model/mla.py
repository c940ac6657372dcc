"""Multi-head latent attention (DeepSeek-V2, DeepSeek-AI 2024, §2.1; DeepSeek-V3).

Grouped-query attention shrinks the KV cache by sharing heads. Latent attention shrinks it by
compression: each token's keys and values for all N heads are decompressed from one latent
vector c of R_kv numbers, and only c is cached, with one small rotary key k_rope of H_rope
numbers that all heads share (a rotated key cannot be decompressed from c: the rotation
depends on the position, and would not commute with the up-projection).

    c      = RMSNorm(h · W_DKV)                         [B, T, R_kv]     cached
    k_rope = rotate(h · W_KR)                           [B, T, 1, H_rope] cached
    k_nope = c · W_UK,   v = c · W_UV                   [B, T, N, H_nope], [B, T, N, H_v]
    q      = h · W_Q  (or RMSNorm(h · W_DQ) · W_UQ)     [B, T, N, H_nope + H_rope]
    score  = q_nope · k_nope + q_rope · k_rope

Two ways to compute the same thing (the tests check they agree):

  * naive: decompress K and V for every cached token and run ordinary multi-head attention.
    Each decode step multiplies the whole cache by W_UK and W_UV again.
  * absorbed: q_nope · (c W_UK)ᵀ = (q_nope W_UKᵀ) · c, so fold W_UK into the query, and fold
    W_UV into the output, o = (softmax · c) W_UV. Attention then runs on the cache as it is:
    one "KV head" whose key is [c, k_rope] (R_kv + H_rope wide) and whose value is c itself,
    the first R_kv channels of that same key. That is multi-query attention with a wide head,
    and the cache holds R_kv + H_rope numbers per token per layer, nothing else.

Weights (Hugging Face's tensors, transposed): wq [D, N·(H_nope+H_rope)] or wq_a [D, R_q],
q_a_norm [R_q], wq_b [R_q, N·(H_nope+H_rope)]; wkv_a [D, R_kv + H_rope] (W_DKV and W_KR
side by side); kv_a_norm [R_kv]; wkv_b [R_kv, N·(H_nope + H_v)] (W_UK and W_UV, per head);
wo [N·H_v, D]. The softmax scale is `cfg.attention_scale`, 1/√(H_nope + H_rope) times
DeepSeek's YaRN temperature, in both forms.
"""

from __future__ import annotations

from typing import Any, Literal

import jax
import jax.numpy as jnp

from inferbook.model.attention import merge_heads, split_heads
from inferbook.model.config import ModelConfig
from inferbook.model.norms import rms_norm
from inferbook.model.rotary import rotate
from inferbook.model.self_attention import Attend

__all__ = ["mla_shapes", "latent_attention", "latent_inputs", "LATENT_NORM_EPS"]

# The latent norms use RMSNorm's default epsilon in DeepSeek's code, not the config's.
LATENT_NORM_EPS = 1e-6


def mla_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """One layer's latent-attention weights (and biases, where `cfg` has them)."""
    m, D, N = cfg.mla, cfg.D, cfg.N
    if m.R_q is None:
        shapes = {"wq": (D, N * m.H_qk)}
    else:
        shapes = {"wq_a": (D, m.R_q), "q_a_norm": (m.R_q,), "wq_b": (m.R_q, N * m.H_qk)}
    shapes |= {"wkv_a": (D, m.R_kv + m.H_rope), "kv_a_norm": (m.R_kv,),
               "wkv_b": (m.R_kv, N * (m.H_nope + m.H_v)), "wo": (N * m.H_v, D)}
    if cfg.qkv_bias:                     # DeepSeek's attention_bias: on the down-projections
        if m.R_q is not None:
            shapes["bq_a"] = (m.R_q,)
        shapes["bkv_a"] = (m.R_kv + m.H_rope,)
    if cfg.o_bias:
        shapes["bo"] = (D,)
    return shapes


def latent_inputs(p: dict[str, Any], cfg: ModelConfig, h_BTD: jax.Array, pos_BT: jax.Array
                  ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Queries (q_nope [B, T, N, H_nope], rotated q_rope [B, T, N, H_rope]), the latent
    c [B, T, R_kv] and the rotated shared key k_rope [B, T, 1, H_rope]."""
    m = cfg.mla
    if m.R_q is None:
        q = h_BTD @ p["wq"]
    else:
        q_a = h_BTD @ p["wq_a"]
        if cfg.qkv_bias:
            q_a = q_a + p["bq_a"]
        q = rms_norm(q_a, p["q_a_norm"], LATENT_NORM_EPS) @ p["wq_b"]
    q_BTNH = split_heads(q, m.H_qk)
    q_nope, q_rope = q_BTNH[..., :m.H_nope], rotate(q_BTNH[..., m.H_nope:], pos_BT, cfg)
    kv_a = h_BTD @ p["wkv_a"]
    if cfg.qkv_bias:
        kv_a = kv_a + p["bkv_a"]
    c_BTR = rms_norm(kv_a[..., :m.R_kv], p["kv_a_norm"], LATENT_NORM_EPS)
    k_rope = rotate(kv_a[..., None, m.R_kv:], pos_BT, cfg)
    return q_nope, q_rope, c_BTR, k_rope


def latent_attention(p: dict[str, Any], cfg: ModelConfig, i: int, h_BTD: jax.Array,
                     pos_BT: jax.Array, attend: Attend,
                     form: Literal["absorbed", "naive"] = "absorbed") -> jax.Array:
    """Layer i's latent-attention block on normalised inputs h [B, T, D]: output [B, T, D].

    absorbed: `attend(i, q [B, T, N, R_kv + H_rope], key [B, T, 1, R_kv + H_rope], None)`,
      where None says the values are the key's first R_kv channels (the latent); it returns
      [B, T, N, R_kv]. This is what a cache of latents serves.
    naive: `attend(i, q [B, T, N, H_qk], k [B, T, N, H_qk], v [B, T, N, H_v])`, ordinary
      multi-head attention on the decompressed keys and values.
    """
    m, N = cfg.mla, cfg.N
    q_nope, q_rope, c_BTR, k_rope = latent_inputs(p, cfg, h_BTD, pos_BT)
    w_kv_b = p["wkv_b"].reshape(m.R_kv, N, m.H_nope + m.H_v)       # [R, N, H_nope + H_v]
    w_uk_RNh, w_uv_RNh = w_kv_b[..., :m.H_nope], w_kv_b[..., m.H_nope:]
    if form == "naive":
        kv = split_heads(c_BTR @ p["wkv_b"], m.H_nope + m.H_v)        # [B, T, N, H_nope + H_v]
        k_nope, v_BTNH = kv[..., :m.H_nope], kv[..., m.H_nope:]
        k_BTNH = jnp.concatenate([k_nope, jnp.broadcast_to(k_rope, q_rope.shape)], axis=-1)
        o_BTNH = attend(i, jnp.concatenate([q_nope, q_rope], axis=-1), k_BTNH, v_BTNH)
    elif form == "absorbed":
        q_lat_BTNR = jnp.einsum("BTNh,RNh->BTNR", q_nope, w_uk_RNh)
        q_absorbed = jnp.concatenate([q_lat_BTNR, q_rope], axis=-1)   # [B, T, N, R + H_rope]
        key = jnp.concatenate([c_BTR[:, :, None, :], k_rope], axis=-1)  # [B, T, 1, R + H_rope]
        o_lat_BTNR = attend(i, q_absorbed, key, None)
        o_BTNH = jnp.einsum("BTNR,RNh->BTNh", o_lat_BTNR, w_uv_RNh)
    else:
        raise ValueError(f"latent attention form must be 'absorbed' or 'naive', got {form!r}")
    out_BTD = merge_heads(o_BTNH) @ p["wo"]
    return out_BTD + p["bo"] if cfg.o_bias else out_BTD
