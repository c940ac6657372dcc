"""Rotary position embeddings, and the rules that stretch them past the training context.

RoPE (Su et al. 2021) encodes position p by rotating each pair of channels of a query or key
by the angle p·ω_i, where ω_i = θ^(-2i/d) for pair i of a d-wide head. A query at p and a key
at p' then meet at an angle (p - p')·ω_i: attention sees only their distance.

A model trained on contexts up to L_orig has never seen the slow rotations of distances beyond
it. The scaling rules stretch the frequencies so that a longer context maps onto angles the
model knows (`features.RopeScaling`; the formulas are those of Hugging Face's
``modeling_rope_utils.py``, which every checkpoint we load was validated against):

    linear    ω_i / factor for every pair (position interpolation, Chen et al. 2023)
    dynamic   θ grows with the call's length s once s > L:  θ·(factor·s/L - factor + 1)^(d/(d-2))
    llama3    pairs with wavelength 2π/ω beyond L_orig/low_freq_factor are divided by factor,
              those below L_orig/high_freq_factor kept, a linear blend in between
    yarn      the same idea with the blend measured in rotations (beta_fast, beta_slow), plus a
              temperature: cos and sin are multiplied by an attention factor (Peng et al. 2023)
    longrope  one divisor per pair, a "short" set up to L_orig and a "long" set beyond, and an
              attention factor (Ding et al. 2024, Phi-3)

"dynamic" and "longrope" depend on the length s of the call, taken (as Hugging Face does) as
one more than the largest position the call is given.

Three per-model choices decide which channels rotate and by what base. A partial rotary
width (`ModelConfig.rotary_fraction`: GPT-NeoX's 0.25, Phi-2's 0.4) rotates only the first
⌊H·f⌋ channels of each head and passes the rest through, carrying no position. A layer
without positions (`nope_layers`, SmolLM3's every fourth) is not rotated at all. And a
sliding-window layer may have its own, unscaled base (`local_rope_theta`: Gemma-3 rotates its
local layers with θ = 10,000 and its global ones with 1,000,000, stretched 8× linearly) —
`ModelConfig.layer_rope(i)` says which, layer by layer.

Channel pairs are (i, i + d/2), the "rotate half" layout of Hugging Face's Llama. DeepSeek's
checkpoints pair adjacent channels (2i, 2i + 1) instead (`ModelConfig.rope_interleaved`): we
gather the even channels, then the odd ones, and rotate halves. The output's channel order then
differs from DeepSeek's, but queries and keys are permuted alike, so every q·k is the same.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from inferbook.model.config import ConfigError, ModelConfig

__all__ = ["rope", "rotate", "frequencies", "length_dependent", "rotary_positions"]


def rope(x_BTnH: jax.Array, pos_BT: jax.Array, theta: float) -> jax.Array:
    """Rotary position embedding (Su et al. 2021) in the "rotate half" layout of HF Llama.

    Channel i and channel i + H/2 form a pair rotated by the angle pos · θ^(-2i/H).
    """
    H = x_BTnH.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, H, 2, dtype=jnp.float32) / H))   # [H/2]
    angles_BTh = pos_BT.astype(jnp.float32)[..., None] * inv_freq
    angles_BTH = jnp.concatenate([angles_BTh, angles_BTh], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles_BTH).astype(x_BTnH.dtype), jnp.sin(angles_BTH).astype(x_BTnH.dtype)
    x1, x2 = jnp.split(x_BTnH, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return x_BTnH * cos + rotated * sin


def length_dependent(cfg: ModelConfig) -> bool:
    """True when the frequencies depend on the length of the call ("dynamic", "longrope")."""
    return cfg.rope_scaling is not None and cfg.rope_scaling.kind in ("dynamic", "longrope")


def rotary_positions(cfg: ModelConfig, pos_BT: jax.Array, n_real_B: jax.Array) -> jax.Array:
    """The positions to rotate by: `pos_BT`, with padding (t >= n_real_B[b]) moved to 0 when
    the rule depends on the call's length, so that a right-padded batch is as long as its
    longest real row, as in Hugging Face (which left-pads). Padding's own rotation is never
    seen: padding is masked out of every attention."""
    if not length_dependent(cfg):
        return pos_BT
    real_BT = jnp.arange(pos_BT.shape[1], dtype=jnp.int32)[None, :] < n_real_B[:, None]
    return jnp.where(real_BT, pos_BT, 0)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    """YaRN's temperature, 0.1·mscale·ln(factor) + 1 (1 when the context is not stretched)."""
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def frequencies(cfg: ModelConfig, d: int, seq_len: jax.Array | None = None,
                layer: int | None = None) -> tuple[jax.Array, float]:
    """The d/2 angular frequencies ω_i of a d-wide rotary head, and the factor on cos and sin.

    `seq_len` (a scalar, possibly traced) is the call's length, used by "dynamic" and
    "longrope" only. `layer` picks that layer's base and rule (`ModelConfig.layer_rope`);
    None takes the model's global ones.
    """
    theta, sc = _layer_rope(cfg, layer)
    exponent = jnp.arange(0, d, 2, dtype=jnp.float32) / d                  # 2i/d, [d/2]
    inv_freq = 1.0 / (theta ** exponent)
    if sc is None:
        return inv_freq, 1.0
    original = sc.original_max_len or cfg.max_seq_len
    if sc.kind == "linear":
        return inv_freq / sc.factor, 1.0
    if sc.kind == "dynamic":
        s = cfg.max_seq_len if seq_len is None else \
            jnp.maximum(jnp.asarray(seq_len, jnp.float32), cfg.max_seq_len)
        base = theta * (sc.factor * s / cfg.max_seq_len - (sc.factor - 1)) ** (d / (d - 2))
        return 1.0 / (base ** exponent), 1.0
    if sc.kind == "llama3":
        low_wavelen = original / sc.low_freq_factor
        high_wavelen = original / sc.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = jnp.where(wavelen > low_wavelen, inv_freq / sc.factor, inv_freq)
        smooth = (original / wavelen - sc.low_freq_factor) / (sc.high_freq_factor
                                                              - sc.low_freq_factor)
        blended = (1 - smooth) * scaled / sc.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return jnp.where(medium, blended, scaled), 1.0
    if sc.kind == "yarn":
        return _yarn(inv_freq, theta, d, original, sc)
    # longrope: per-pair divisors, the long set once the call runs past the original context.
    for name, factors in (("short_factor", sc.short_factor), ("long_factor", sc.long_factor)):
        if factors is None or len(factors) != d // 2:
            raise ConfigError(f"rope scaling {name} needs {d // 2} numbers (one per pair of a "
                              f"{d}-wide head), got {None if factors is None else len(factors)}")
    short = jnp.asarray(sc.short_factor, jnp.float32)
    long = jnp.asarray(sc.long_factor, jnp.float32)
    divisor = short if seq_len is None else jnp.where(seq_len > original, long, short)
    factor = sc.factor
    attention = sc.attention_factor
    if attention is None:
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))
    return inv_freq / divisor, attention


def _yarn(inv_freq: jax.Array, theta: float, d: int, original: int, sc) -> tuple[jax.Array, float]:
    """YaRN's "NTK-by-parts" frequencies and temperature (Peng et al. 2023, eq. 17-23)."""
    factor = sc.factor
    attention = sc.attention_factor
    if attention is None:
        if sc.mscale and sc.mscale_all_dim:     # DeepSeek's variant
            attention = _yarn_mscale(factor, sc.mscale) / _yarn_mscale(factor, sc.mscale_all_dim)
        else:
            attention = _yarn_mscale(factor)

    def pair_with_rotations(rotations: float) -> float:
        # The pair index whose wavelength fits `rotations` times into the original context.
        return d * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(pair_with_rotations(sc.beta_fast)), 0)
    high = min(math.ceil(pair_with_rotations(sc.beta_slow)), d - 1)
    if low == high:
        high += 0.001                          # a ramp of width zero would divide by zero
    ramp = jnp.clip((jnp.arange(d // 2, dtype=jnp.float32) - low) / (high - low), 0, 1)
    keep = 1 - ramp                            # 1: extrapolate (fast pairs), 0: interpolate
    return inv_freq / factor * (1 - keep) + inv_freq * keep, float(attention)


def _layer_rope(cfg: ModelConfig, layer: int | None) -> tuple[float, object]:
    if layer is None:
        return cfg.rope_theta, cfg.rope_scaling
    rope_of_layer = cfg.layer_rope(layer)
    if rope_of_layer is None:
        raise ConfigError(f"layer {layer} of {cfg.name} has no rotary positions")
    return rope_of_layer


def rotate(x_BTnd: jax.Array, pos_BT: jax.Array, cfg: ModelConfig,
           layer: int | None = None) -> jax.Array:
    """Rotate queries or keys [B, T, n, d] at positions [B, T] as `cfg` says for `layer`
    (None: the model's global base and rule, for every channel of a latent's rotary part).

    A layer without positions comes back unchanged; with a partial rotary width only the
    first ⌊d·rotary_fraction⌋ channels turn. Without a scaling rule or interleaved pairs this
    is exactly `rope` (so the plain model's program is what it always was).
    """
    if layer is not None and cfg.layer_rope(layer) is None:
        return x_BTnd                          # NoPE: this layer sees no positions
    width = x_BTnd.shape[-1]
    d = int(width * cfg.rotary_fraction)
    if d < width:                              # partial rotary: the rest passes through
        turned = _rotate_every_channel(x_BTnd[..., :d], pos_BT, cfg, layer)
        return jnp.concatenate([turned, x_BTnd[..., d:]], axis=-1)
    return _rotate_every_channel(x_BTnd, pos_BT, cfg, layer)


def _rotate_every_channel(x_BTnd: jax.Array, pos_BT: jax.Array, cfg: ModelConfig,
                          layer: int | None) -> jax.Array:
    theta, scaling = _layer_rope(cfg, layer)
    if scaling is None and not cfg.rope_interleaved:
        return rope(x_BTnd, pos_BT, theta)
    d = x_BTnd.shape[-1]
    seq_len = jnp.max(pos_BT) + 1 if length_dependent(cfg) else None
    inv_freq, attention = frequencies(cfg, d, seq_len, layer)
    if cfg.rope_interleaved:                   # pairs (2i, 2i+1) become (i, i + d/2)
        x_BTnd = jnp.concatenate([x_BTnd[..., 0::2], x_BTnd[..., 1::2]], axis=-1)
    angles_BTh = pos_BT.astype(jnp.float32)[..., None] * inv_freq
    angles_BTd = jnp.concatenate([angles_BTh, angles_BTh], axis=-1)[:, :, None, :]
    cos = (jnp.cos(angles_BTd) * attention).astype(x_BTnd.dtype)
    sin = (jnp.sin(angles_BTd) * attention).astype(x_BTnd.dtype)
    x1, x2 = jnp.split(x_BTnd, 2, axis=-1)
    return x_BTnd * cos + jnp.concatenate([-x2, x1], axis=-1) * sin
