"""A Hugging Face ``config.json``, key by key: typed values, and what Llama-like families share.

Every value a family reads goes through `ConfigKeys`, which checks its type and range and
names the key in its error; a missing key is an error unless the family has a default. The
pieces most families have in common — rotary settings (``rope_scaling`` or transformers 5's
``rope_parameters``), activation names, per-layer attention types, and the Llama-like set of
keys — are here; `hf_config` maps each family's file onto a `ModelConfig` with them.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from inferbook.model.config import ConfigError
from inferbook.model.features import ROPE_KINDS, RopeScaling

__all__ = ["ConfigKeys", "rope_settings", "activation", "layer_types", "llama_like",
           "rotary_fraction"]

_MISSING = object()

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "full": "full",
                "sliding": "sliding"}


class ConfigKeys:
    """Typed access to a config dictionary: every value is checked before it is used."""

    def __init__(self, hf: dict[str, Any], where: str = "config"):
        self.hf, self.where = hf, where

    def _get(self, key: str, default: Any) -> Any:
        """The value under `key`; `default` where it is absent or null (an error if there is
        no default)."""
        value = self.hf.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise ConfigError(f"{self.where} is missing the key {key!r}")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> Any:
        """An integer ≥ `minimum` (a float with no fraction passes)."""
        value = self._get(key, default)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigError(f"{self.where} key {key!r} must be an integer ≥ {minimum}, "
                              f"got {value!r}")
        return value

    def float(self, key: str, default: Any = _MISSING) -> Any:
        """A positive finite number."""
        value = self._get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{self.where} key {key!r} must be a positive finite number, "
                              f"got {value!r}")
        return float(value)

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        """true or false."""
        value = self._get(key, default)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where} key {key!r} must be true or false, got {value!r}")
        return value

    def str(self, key: str, default: Any = _MISSING) -> Any:
        """A string."""
        value = self._get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{self.where} key {key!r} must be a string, got {value!r}")
        return value

    def floats(self, key: str) -> tuple[float, ...] | None:
        """A list of finite numbers, as a tuple; None where absent."""
        value = self.hf.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in value):
            raise ConfigError(f"{self.where} key {key!r} must be a list of numbers, got {value!r}")
        return tuple(float(v) for v in value)


def rope_settings(hf: ConfigKeys, purpose: str, theta_default: float = 10_000.0
                  ) -> tuple[float, RopeScaling | None]:
    """rope_theta and the scaling rule, from ``rope_scaling`` or transformers 5's
    ``rope_parameters`` (which also holds rope_theta)."""
    params = hf.hf.get("rope_parameters")
    scaling = hf.hf.get("rope_scaling")
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"config key {key!r} must be an object, got {value!r}")
    params, scaling = params or {}, scaling or {}
    theta_source = hf if "rope_theta" in hf.hf else ConfigKeys(params, "rope_parameters")
    theta = theta_source.float("rope_theta", theta_default)
    rule = scaling or params
    keys = ConfigKeys(rule, "rope scaling")
    kind = keys.str("rope_type", None) or keys.str("type", "default")
    kind = {"su": "longrope"}.get(kind, kind)
    if kind == "default":
        return theta, None
    if kind not in ROPE_KINDS:
        if purpose == "estimate":        # the angles do not change a byte or a FLOP
            return theta, None
        raise ConfigError(f"rope scaling of type {kind!r} is not supported; supported: "
                          f"{', '.join(ROPE_KINDS)}")
    original = keys.int("original_max_position_embeddings",
                        hf.int("original_max_position_embeddings", None))
    # Without a factor, yarn and longrope stretch the original context to the full one
    # (transformers' modeling_rope_utils); longrope's attention factor depends on it.
    stretch = (hf.int("max_position_embeddings", original) / original
               if kind in ("yarn", "longrope") and original else 1.0)
    return theta, RopeScaling(
        kind=kind, factor=keys.float("factor", stretch), original_max_len=original,
        low_freq_factor=keys.float("low_freq_factor", 1.0),
        high_freq_factor=keys.float("high_freq_factor", 4.0),
        beta_fast=keys.float("beta_fast", 32.0), beta_slow=keys.float("beta_slow", 1.0),
        attention_factor=keys.float("attention_factor", None),
        mscale=keys.float("mscale", None), mscale_all_dim=keys.float("mscale_all_dim", None),
        short_factor=keys.floats("short_factor"), long_factor=keys.floats("long_factor"))


def activation(hf: ConfigKeys, key: str, default: str, purpose: str) -> str:
    """The library's name of the activation under `key` (transformers has several names for
    each); for an estimate, an unknown one stands as SiLU, since it changes no count."""
    act = hf.str(key, default)
    if act in _ACTIVATIONS:
        return _ACTIVATIONS[act]
    if purpose == "estimate":
        return "silu"                    # the activation changes no count
    raise ConfigError(f"unsupported {key} {act!r}; supported: {', '.join(_ACTIVATIONS)}")


def layer_types(hf: ConfigKeys, L: int, default: Callable[[int], str] | None) -> tuple | None:
    """Each layer's attention, "full" or "sliding", from ``layer_types`` or else `default`(i);
    None when neither says (every layer alike)."""
    raw = hf.hf.get("layer_types")
    if raw is None:
        return None if default is None else tuple(default(i) for i in range(L))
    if not isinstance(raw, list) or len(raw) != L or any(t not in _LAYER_TYPES for t in raw):
        raise ConfigError(f"config key 'layer_types' must list 'full_attention' or "
                          f"'sliding_attention' for each of the {L} layers")
    return tuple(_LAYER_TYPES[t] for t in raw)


def rotary_fraction(hf: ConfigKeys, default: float, legacy_key: str | None = None) -> float:
    """The share of each head that rotates: ``partial_rotary_factor`` at the top level or in
    ``rope_parameters`` / ``rope_scaling`` (transformers 5 moves it there), or a family's
    older key (GPT-NeoX's ``rotary_pct``); `default` where none is given."""
    for source in ("rope_parameters", "rope_scaling"):
        inner = hf.hf.get(source)
        if isinstance(inner, dict) and inner.get("partial_rotary_factor") is not None:
            fraction = ConfigKeys(inner, source).float("partial_rotary_factor")
            break
    else:
        key = "partial_rotary_factor" if legacy_key is None or \
            "partial_rotary_factor" in hf.hf else legacy_key
        fraction = hf.float(key, default)
    if fraction > 1:
        raise ConfigError(f"partial_rotary_factor must be at most 1, got {fraction!r}")
    return fraction


def llama_like(hf: ConfigKeys, purpose: str, *, tie: bool = False, act_key: str = "hidden_act",
               act_default: str = "silu", eps_key: str = "rms_norm_eps",
               eps_default: float = 1e-6, theta_default: float = 10_000.0) -> dict[str, Any]:
    """The keys every Llama-like family shares, with Llama's defaults (a family names its
    norm's epsilon `eps_key`)."""
    L, D, N = hf.int("num_hidden_layers"), hf.int("hidden_size"), hf.int("num_attention_heads")
    theta, scaling = rope_settings(hf, purpose, theta_default)
    head_dim = hf.int("head_dim", None)
    return dict(
        L=L, D=D, F=hf.int("intermediate_size"), N=N, K=hf.int("num_key_value_heads", N),
        H=head_dim if head_dim is not None else D // N, V=hf.int("vocab_size"),
        tied_embeddings=hf.bool("tie_word_embeddings", tie),
        norm_eps=hf.float(eps_key, eps_default), rope_theta=theta, rope_scaling=scaling,
        window=hf.int("sliding_window", None, minimum=0) or None,   # 0 and null: no window
        max_seq_len=hf.int("max_position_embeddings", 4096),
        activation=activation(hf, act_key, act_default, purpose),
        qkv_bias=hf.bool("attention_bias", False), o_bias=hf.bool("attention_bias", False),
        mlp_bias=hf.bool("mlp_bias", False))
