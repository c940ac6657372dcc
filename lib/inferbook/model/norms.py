"""The normalisations in front of (or behind) every block, and of queries and keys.

Two kinds are in use:

  * RMSNorm (Zhang & Sennrich 2019): x / rms(x) · g. No mean is subtracted and there is no
    bias; LLaMA and nearly every model since use it.
  * LayerNorm (Ba et al. 2016): (x - mean(x)) / std(x) · g + b: GPT-2, GPT-NeoX, Phi,
    StableLM, StarCoder2; Cohere's has no bias b ("layer_no_bias").

Gemma stores its gain as an offset from one and computes x / rms(x) · (1 + w), so that a gain
initialised at zero leaves the signal unchanged (`ModelConfig.norm_plus_one`). All are
computed in float32, whatever the activations' dtype, as Hugging Face's modeling files do.

A norm's parameters sit in the layer's dict under its name (``attn_norm``, ``mlp_norm``,
``q_norm``, ...); LayerNorm's bias sits beside it under the name with ``_bias`` appended. The
gain may be wider than one vector: a per-head norm with one gain per head ([N, H], Cohere's
q/k norms) normalises the last axis and multiplies by the whole [N, H] gain.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from inferbook.model.config import ModelConfig

__all__ = ["rms_norm", "layer_norm", "norm", "norm_shapes", "apply_norm", "RESIDUAL_NORMS"]

# The norms `norm` applies with the config's kind (the q/k norms too, unless the config names
# another kind for them); the latent norms of mla.py are always plain RMSNorms.
RESIDUAL_NORMS = ("attn_norm", "mlp_norm", "post_attn_norm", "post_mlp_norm", "final_norm")


def rms_norm(x: jax.Array, gain: jax.Array, eps: float) -> jax.Array:
    """x / rms(x) · gain, computed in float32 and returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return gain * x32.astype(x.dtype)


def rms_norm_plus_one(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    """x / rms(x) · (1 + w), all in float32 (Gemma's RMSNorm)."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return (x32 * (1.0 + w.astype(jnp.float32))).astype(x.dtype)


def layer_norm(x: jax.Array, gain: jax.Array, bias: jax.Array | None, eps: float) -> jax.Array:
    """(x - mean) / sqrt(var + eps) · gain + bias, computed in float32 (GPT-2's LayerNorm;
    Cohere's and StableLM's q/k norms have no bias: pass None)."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps) * gain.astype(jnp.float32)
    return (y if bias is None else y + bias.astype(jnp.float32)).astype(x.dtype)


def apply_norm(kind: str, plus_one: bool, x: jax.Array, p: dict[str, Any], name: str,
               eps: float) -> jax.Array:
    """Normalise x's last axis with the norm `p[name]` (and `p[name + "_bias"]`) of `kind`:
    "rms", "layer" or "layer_no_bias"; `plus_one` for Gemma's (1 + w) RMSNorm gain."""
    if kind == "layer":
        return layer_norm(x, p[name], p[name + "_bias"], eps)
    if kind == "layer_no_bias":
        return layer_norm(x, p[name], None, eps)
    if plus_one:
        return rms_norm_plus_one(x, p[name], eps)
    return rms_norm(x, p[name], eps)


def norm(p: dict[str, Any], name: str, x: jax.Array, cfg: ModelConfig,
         eps: float | None = None) -> jax.Array:
    """Normalise x with the norm `p[name]` of the kind `cfg` says (`eps` defaults to cfg's)."""
    eps = cfg.norm_eps if eps is None else eps
    return apply_norm(cfg.norm, cfg.norm_plus_one, x, p, name, eps)


def norm_shapes(cfg: ModelConfig, name: str, width: int | tuple[int, ...],
                kind: str | None = None) -> dict[str, tuple[int, ...]]:
    """The parameters of one norm over `width` channels (a shape for a per-head gain): a
    gain, and LayerNorm's bias. `kind` defaults to the config's."""
    shape = width if isinstance(width, tuple) else (width,)
    shapes = {name: shape}
    if (kind or cfg.norm) == "layer":
        shapes[name + "_bias"] = shape
    return shapes
