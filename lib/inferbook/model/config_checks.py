"""Whether a `ModelConfig` describes a transformer the library can build.

`ModelConfig.__post_init__` calls `check_config`, so a config that exists is a config that
makes sense: every letter a positive integer, N a multiple of K, each switch one of its
values, each feature consistent with the others (a parallel block normalises before its
branches, a partial rotary width is even, a NoPE layer exists). Every refusal is one
`ConfigError` naming the field and the value.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from inferbook.model.features import MLA, ConfigError, MoE, RopeScaling

if TYPE_CHECKING:
    from inferbook.model.config import ModelConfig

__all__ = ["check_config", "ACTIVATION_NAMES", "NORM_KINDS", "NORM_POSITIONS",
           "QK_NORM_SCOPES"]

ACTIVATION_NAMES = ("silu", "gelu", "gelu_tanh", "relu")
NORM_KINDS = ("rms", "layer", "layer_no_bias")
NORM_POSITIONS = ("pre", "post", "both")
QK_NORM_SCOPES = ("head", "each_head", "whole")

# field -> the values it may take
_CHOICES = {"mlp": ("gated", "plain"), "activation": ACTIVATION_NAMES, "norm": NORM_KINDS,
            "positions": ("rope", "learned"), "norm_position": NORM_POSITIONS,
            "residual": ("sequential", "parallel"), "qk_norm_scope": QK_NORM_SCOPES}


def _positive_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive finite number, got {value!r}")


def _check_values(cfg: ModelConfig) -> None:
    for letter in ("L", "D", "F", "N", "K", "H", "V", "max_seq_len"):
        value = getattr(cfg, letter)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"{letter} must be a positive integer, got {value!r}")
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(map(repr, choices))}, "
                              f"got {getattr(cfg, name)!r}")
    if cfg.qk_norm_kind is not None and cfg.qk_norm_kind not in NORM_KINDS:
        raise ConfigError(f"qk_norm_kind must be None or one of {', '.join(NORM_KINDS)}, "
                          f"got {cfg.qk_norm_kind!r}")
    if cfg.window is not None and (not isinstance(cfg.window, int)
                                   or isinstance(cfg.window, bool) or cfg.window <= 0):
        raise ConfigError(f"window must be a positive integer or None, got {cfg.window!r}")
    for name in ("norm_eps", "rope_theta", "rotary_fraction", "embed_multiplier",
                 "residual_multiplier", "logit_multiplier"):
        _positive_number(name, getattr(cfg, name))
    for name in ("query_scale", "attn_softcap", "final_softcap", "local_rope_theta",
                 "qkv_clip"):
        if getattr(cfg, name) is not None:
            _positive_number(name, getattr(cfg, name))
    for name, kind in (("moe", MoE), ("mla", MLA), ("rope_scaling", RopeScaling)):
        value = getattr(cfg, name)
        if value is not None and not isinstance(value, kind):
            raise ConfigError(f"{name} must be a {kind.__name__} or None, got {value!r}")


def _check_layers(cfg: ModelConfig) -> None:
    if cfg.layer_types is not None:
        if len(cfg.layer_types) != cfg.L or \
                any(t not in ("full", "sliding") for t in cfg.layer_types):
            raise ConfigError(f"layer_types must give 'full' or 'sliding' for each of the "
                              f"{cfg.L} layers, got {cfg.layer_types!r}")
        if "sliding" in cfg.layer_types and cfg.window is None:
            raise ConfigError("layer_types has sliding layers but no window is set")
    for name in ("nope_layers",):
        layers = getattr(cfg, name)
        if not isinstance(layers, tuple) or any(
                not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < cfg.L
                for i in layers):
            raise ConfigError(f"{name} must be a tuple of layer indices below L={cfg.L}, "
                              f"got {layers!r}")
    if cfg.moe is not None and any(i >= cfg.L for i in cfg.moe.dense_layers):
        raise ConfigError(f"moe.dense_layers {cfg.moe.dense_layers} name layers past L={cfg.L}")


def _check_positions(cfg: ModelConfig) -> None:
    if cfg.rotary_fraction > 1:
        raise ConfigError(f"rotary_fraction must be at most 1, got {cfg.rotary_fraction}")
    if cfg.positions == "rope" and cfg.mla is None and cfg.rotary_dim % 2:
        raise ConfigError(f"rotary embeddings need an even width; H={cfg.H} with "
                          f"rotary_fraction={cfg.rotary_fraction} rotates {cfg.rotary_dim}")
    if cfg.positions == "rope" and cfg.mla is None and cfg.rotary_dim <= 0:
        raise ConfigError(f"rotary_fraction={cfg.rotary_fraction} of H={cfg.H} rotates nothing")
    if cfg.positions != "rope" and (cfg.nope_layers or cfg.local_rope_theta is not None
                                    or cfg.rotary_fraction != 1):
        raise ConfigError("nope_layers, local_rope_theta and rotary_fraction need rotary "
                          "positions")
    if cfg.local_rope_theta is not None and cfg.window is None:
        raise ConfigError("local_rope_theta is the rotary base of sliding layers; no window "
                          "is set")


def _check_block(cfg: ModelConfig) -> None:
    if cfg.residual == "parallel" and cfg.norm_position != "pre":
        raise ConfigError("a parallel block normalises its input once, before both branches: "
                          f"norm_position must be 'pre', got {cfg.norm_position!r}")
    if cfg.shared_norm and cfg.residual != "parallel":
        raise ConfigError("shared_norm (one norm for attention and MLP) needs residual="
                          "'parallel'")
    if cfg.norm_plus_one and cfg.norm != "rms":
        raise ConfigError("norm_plus_one is a (1 + w) gain of RMSNorm; norm is "
                          f"{cfg.norm!r}")


def _check_attention(cfg: ModelConfig) -> None:
    if cfg.N % cfg.K:
        raise ConfigError(f"N={cfg.N} query heads must be a multiple of K={cfg.K} KV heads")
    if cfg.mla is None:
        return
    if cfg.K != cfg.N:
        raise ConfigError(f"latent attention has one key per query head: K={cfg.K} must "
                          f"equal N={cfg.N}")
    if cfg.H != cfg.mla.H_qk:
        raise ConfigError(f"with latent attention H is H_nope + H_rope = {cfg.mla.H_qk}, "
                          f"got H={cfg.H}")
    if cfg.positions != "rope":
        raise ConfigError("latent attention needs rotary positions")
    if cfg.qk_norm or cfg.rotary_fraction != 1 or cfg.qkv_clip is not None:
        raise ConfigError("latent attention has its own norms and rotary split: qk_norm, "
                          "rotary_fraction and qkv_clip do not apply")


def check_config(cfg: ModelConfig) -> None:
    """Raise ConfigError unless `cfg` describes a model the library can build."""
    _check_values(cfg)
    _check_attention(cfg)
    _check_layers(cfg)
    _check_positions(cfg)
    _check_block(cfg)
