"""Reading a Hugging Face ``config.json`` into a `ModelConfig`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferbook.model.config import ConfigError, ModelConfig

__all__ = ["from_hf_config", "read_hf_config"]


_SUPPORTED_HF_TYPES = ("llama", "mistral")
_HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu",
                   "gelu_pytorch_tanh": "gelu", "relu": "relu"}


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` at `path` (a file, or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"no config file at {path}")
    try:
        hf = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"cannot read {path} as JSON: {err}") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return hf


def from_hf_config(source: str | Path | dict[str, Any], *, name: str | None = None) -> ModelConfig:
    """Build a ModelConfig from a Llama-family Hugging Face ``config.json``.

    `source` is a path to the file, a directory holding it, or the parsed dictionary. Keys read:
    num_hidden_layers, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads
    (default: num_attention_heads), head_dim (default: hidden_size / num_attention_heads),
    vocab_size, tie_word_embeddings, rms_norm_eps, rope_theta (or rope_parameters.rope_theta in
    newer files), sliding_window, hidden_act, max_position_embeddings.

    Raises ConfigError naming the missing key or the unsupported feature.
    """
    if isinstance(source, dict):
        hf = source
        label = name or str(source.get("_name_or_path") or "hf-config")
    else:
        path = Path(source)
        hf = read_hf_config(path)
        label = name or (path if path.is_dir() else path.parent).name or "hf-config"

    model_type = hf.get("model_type")
    if model_type is not None and model_type not in _SUPPORTED_HF_TYPES:
        raise ConfigError(f"unsupported architecture model_type={model_type!r}; "
                          f"supported: {', '.join(_SUPPORTED_HF_TYPES)}")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise ConfigError(f"{key}=true is not supported (the library's model has no biases)")

    def need(key: str) -> int:
        if key not in hf:
            raise ConfigError(f"config is missing the key {key!r}")
        value = hf[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"config key {key!r} must be a positive integer, got {value!r}")
        return value

    L, D, F = need("num_hidden_layers"), need("hidden_size"), need("intermediate_size")
    N, V = need("num_attention_heads"), need("vocab_size")
    K = need("num_key_value_heads") if hf.get("num_key_value_heads") is not None else N
    H = need("head_dim") if hf.get("head_dim") is not None else D // N

    rope = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or rope
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if rope_type not in ("default", None):
        raise ConfigError(f"rope scaling of type {rope_type!r} is not supported")
    theta = hf.get("rope_theta", rope.get("rope_theta", 10_000.0))

    act = hf.get("hidden_act", "silu")
    if act not in _HF_ACTIVATIONS:
        raise ConfigError(f"unsupported hidden_act {act!r}")

    return ModelConfig(
        L=L, D=D, F=F, N=N, K=K, H=H, V=V,
        mlp="gated",
        activation=_HF_ACTIVATIONS[act],
        tied_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        window=hf.get("sliding_window") or None,
        max_seq_len=int(hf.get("max_position_embeddings", 4096)),
        name=label,
    )
