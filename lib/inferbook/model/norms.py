"""The normalisations in front of (and, in Gemma-2, behind) every block.

Two kinds are in use:

  * RMSNorm (Zhang & Sennrich 2019): x / rms(x) · g. No mean is subtracted and there is no
    bias; LLaMA and nearly every model since use it.
  * LayerNorm (Ba et al. 2016): (x - mean(x)) / std(x) · g + b, GPT-2's choice.

Gemma stores its gain as an offset from one and computes x / rms(x) · (1 + w), so that a gain
initialised at zero leaves the signal unchanged (`ModelConfig.norm_plus_one`). Both norms are
computed in float32, whatever the activations' dtype, as Hugging Face's modeling files do.

A norm's parameters sit in the layer's dict under its name (``attn_norm``, ``mlp_norm``, ...);
LayerNorm's bias sits beside it under the name with ``_bias`` appended.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from inferbook.model.config import ModelConfig

__all__ = ["rms_norm", "layer_norm", "norm", "norm_shapes", "RESIDUAL_NORMS"]

# The norms `norm` applies with the config's kind; the per-head q/k norms and the latent
# norms of mla.py are always plain RMSNorms.
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


def layer_norm(x: jax.Array, gain: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
    """(x - mean) / sqrt(var + eps) · gain + bias, computed in float32 (GPT-2's LayerNorm)."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * gain.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def norm(p: dict[str, Any], name: str, x: jax.Array, cfg: ModelConfig,
         eps: float | None = None) -> jax.Array:
    """Normalise x with the norm `p[name]` of the kind `cfg` says (`eps` defaults to cfg's)."""
    eps = cfg.norm_eps if eps is None else eps
    if cfg.norm == "layer":
        return layer_norm(x, p[name], p[name + "_bias"], eps)
    if cfg.norm_plus_one:
        return rms_norm_plus_one(x, p[name], eps)
    return rms_norm(x, p[name], eps)


def norm_shapes(cfg: ModelConfig, name: str, width: int) -> dict[str, tuple[int, ...]]:
    """The parameters of one norm over `width` channels: a gain, and LayerNorm's bias."""
    shapes = {name: (width,)}
    if cfg.norm == "layer":
        shapes[name + "_bias"] = (width,)
    return shapes
