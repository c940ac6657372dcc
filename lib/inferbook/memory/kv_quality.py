"""What a cheaper KV cache costs in quality: attention maps, perplexity, greedy agreement.

Chapter 5 shrinks the cache by keeping fewer tokens (`kv_evict`) or fewer bits per number
(`kv_quant`). Bytes are exact; what they cost has to be measured on a trained model, with
three instruments:

* `attention_probs` — every layer's attention probabilities [L, B, N, T, T], the map on which a
  trained model's *attention sink* (most of a head's attention on token 0) is plain to see.
* `forward_kv_bits` — the model's logits when every cached key and value is stored with
  `bits` bits (symmetric absmax codes, one scale per `group` numbers) and read back, the way
  a token-by-token decode with a quantized cache computes them: each token attends to the
  earlier tokens' stored keys and values and to its own exact ones.
* `perplexity` and `greedy_agreement` — how well logits predict a text, exp of the mean
  negative log-likelihood of each next token; and how often their top token is the one the
  full cache's greedy continuation chose.

All three run the library's decoder through `decoder.transformer`'s `attend` hook, so the
rest of the model is the same code as `decoder.forward`.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from inferbook.model.attention import attention_mask, attention_reference
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import Params, require_plain_decoder, transformer, unembed

__all__ = ["quantize_roundtrip", "attention_probs", "sink_share", "forward_kv_bits", "token_nll",
           "perplexity", "greedy_agreement", "kv_bits_bytes_per_element"]


def quantize_roundtrip(x: jax.Array, bits: int, group: int | None = None) -> jax.Array:
    """x [..., H] stored as `bits`-bit symmetric codes, one float32 scale per `group`
    consecutive numbers (None: the whole vector), and read back in float32.

    The scale is the group's largest magnitude over 2^(bits-1) - 1 (127 for int8, 7 for int4),
    so no number moves by more than half a step. For bits=8 and group None this is
    `kv_quant.dequantize(*kv_quant.quantize(x))`.
    """
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be between 2 and 8, got {bits}")
    H = x.shape[-1]
    group = H if group is None else group
    if group <= 0 or H % group:
        raise ValueError(f"group must divide the vector length {H}, got {group}")
    levels = 2 ** (bits - 1) - 1
    xg = x.astype(jnp.float32).reshape(*x.shape[:-1], H // group, group)
    scale = jnp.max(jnp.abs(xg), axis=-1, keepdims=True) / levels
    codes = jnp.clip(jnp.round(xg / jnp.where(scale > 0, scale, 1.0)), -levels, levels)
    return (codes * scale).reshape(x.shape)


def kv_bits_bytes_per_element(bits: int, group: int, scale_bytes: float = 4) -> float:
    """Stored bytes per cached number: the code's bits plus its share of the group's scale."""
    return bits / 8 + scale_bytes / group


def _scale(cfg: ModelConfig) -> float:
    require_plain_decoder(cfg, "kv_quality")
    return cfg.attention_scale


@partial(jax.jit, static_argnames=("cfg",))
def attention_probs(params: Params, cfg: ModelConfig, tokens_BT: jax.Array) -> jax.Array:
    """Every layer's causal attention probabilities [L, B, N, T, T] (query t, key s) over
    tokens_BT: row t sums to one over s ≤ t."""
    B, T = tokens_BT.shape
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    causal = attention_mask(pos_BT, pos_BT[0], jnp.full((B,), T, jnp.int32))
    scale, found = _scale(cfg), []

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        k_BTNH = jnp.repeat(k_BTKH, cfg.N // cfg.K, axis=2)
        s = jnp.einsum("BTNH,BSNH->BNTS", q_BTNH, k_BTNH).astype(jnp.float32) * scale
        found.append(jax.nn.softmax(jnp.where(causal[:, None], s, -jnp.inf), axis=-1))
        return attention_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2),
                                   causal, scale=scale)[0]

    transformer(params, cfg, tokens_BT, pos_BT, attend)
    return jnp.stack(found)


def sink_share(probs_BNTS: jax.Array, start: int = 1) -> tuple[float, float]:
    """Mean share of attention on token 0 over queries t ≥ start (all heads and sequences),
    and the same mean if each query spread its attention evenly over its t + 1 keys."""
    T = probs_BNTS.shape[-1]
    if not 0 <= start < T:
        raise ValueError(f"start must be a query position below {T}, got {start}")
    uniform = jnp.mean(1.0 / (jnp.arange(start, T) + 1))
    return float(jnp.mean(probs_BNTS[..., start:, 0])), float(uniform)


@partial(jax.jit, static_argnames=("cfg", "bits", "group"))
def forward_kv_bits(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, bits: int,
                    group: int | None = None) -> jax.Array:
    """Logits [B, T, V] when the cache holds `bits`-bit keys and values (`quantize_roundtrip`):
    token t attends to tokens s < t through their stored keys and values, and to itself exactly,
    as each step of a decode with a quantized cache does."""
    B, T = tokens_BT.shape
    G, scale = cfg.N // cfg.K, _scale(cfg)
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    self_TS = jnp.eye(T, dtype=bool)
    causal_TS = jnp.tril(jnp.ones((T, T), bool))

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        q = q_BTNH.astype(jnp.float32).reshape(B, T, cfg.K, G, cfg.H)
        k, v = k_BTKH.astype(jnp.float32), v_BTKH.astype(jnp.float32)
        kq, vq = quantize_roundtrip(k, bits, group), quantize_roundtrip(v, bits, group)
        s_stored = jnp.einsum("BTKGH,BSKH->BKGTS", q, kq) * scale
        s_self = jnp.einsum("BTKGH,BTKH->BKGT", q, k) * scale
        s = jnp.where(self_TS, s_self[..., None], s_stored)
        p = jax.nn.softmax(jnp.where(causal_TS, s, -jnp.inf), axis=-1)
        out = (jnp.einsum("BKGTS,BSKH->BTKGH", jnp.where(self_TS, 0.0, p), vq)
               + jnp.einsum("BKGT,BTKH->BTKGH", jnp.diagonal(p, axis1=-2, axis2=-1), v))
        return out.reshape(B, T, cfg.N, cfg.H).astype(q_BTNH.dtype)

    return unembed(params, cfg, transformer(params, cfg, tokens_BT, pos_BT, attend))


def token_nll(logits_BTV: jax.Array, tokens_BT: jax.Array) -> jax.Array:
    """Negative log-likelihood [B, T-1] of each next token: -log softmax(logits[t])[tokens[t+1]]."""
    logp = jax.nn.log_softmax(logits_BTV[:, :-1].astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, tokens_BT[:, 1:, None], axis=-1)[..., 0]


def perplexity(logits_BTV: jax.Array, tokens_BT: jax.Array, start: int = 0) -> float:
    """exp of the mean NLL of the tokens predicted from positions start, start+1, ..."""
    if not 0 <= start < tokens_BT.shape[1] - 1:
        raise ValueError(f"start must leave a token to predict, got {start}")
    return float(jnp.exp(jnp.mean(token_nll(logits_BTV, tokens_BT)[:, start:])))


def greedy_agreement(logits_BTV: jax.Array, tokens_BT: jax.Array, start: int) -> float:
    """Share of positions t ≥ start whose top logit picks tokens[t+1]: fed the full cache's
    greedy continuation, how often a cheaper cache would have chosen the same next token."""
    if not 0 <= start < tokens_BT.shape[1] - 1:
        raise ValueError(f"start must leave a token to predict, got {start}")
    top = jnp.argmax(logits_BTV[:, start:-1], axis=-1)
    return float(jnp.mean(top == tokens_BT[:, start + 1:]))
