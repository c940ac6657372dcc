"""Hugging Face checkpoints of every supported family, read with numpy alone.

A checkpoint directory holds `config.json` and the weights in the safetensors format, either
one `model.safetensors` or several shards listed by `model.safetensors.index.json`
(`safetensors_io` reads the files). `config.json` says the family (``model_type``), which
`hf_config` turns into a `ModelConfig` and `hf_names` into the rules that map each of the
family's tensor names onto the library's params pytree. Loading checks every tensor: each
one the model needs must be there, with a floating-point dtype and the shape the config
implies, and a tensor the model would not use is an error too (it usually means an
architecture the config does not describe).

Hugging Face stores each linear layer as `weight[out, in]` and computes `x @ weight.T`; the
library stores `[in, out]`, so loading is mostly a transpose. `save_checkpoint` writes the
plain decoder (Llama, or Mistral with a window) in Hugging Face's layout.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.decoder import Params, param_shapes, special_features
from inferbook.model.family_table import PARTIAL_ROTARY_FAMILIES
from inferbook.model.hf_config import from_hf_config, read_hf_config
from inferbook.model.hf_names import (
    FAMILY_ARCHITECTURES,
    Rule,
    base_prefix,
    ignorable,
    layer_rules,
    top_rules,
)
from inferbook.model.safetensors_io import (
    CheckpointError,
    read_safetensors,
    require_floating,
    write_safetensors,
)

__all__ = ["CheckpointError", "read_safetensors", "write_safetensors", "load_checkpoint",
           "read_checkpoint_config", "read_checkpoint_family", "weight_files", "save_checkpoint",
           "hf_to_params", "params_to_hf", "SUPPORTED_ARCHITECTURES"]

SUPPORTED_ARCHITECTURES = tuple(FAMILY_ARCHITECTURES.values())


# Name and layout mapping --------------------------------------------------------------------

def _llama_layer_map() -> dict[str, str]:
    """Library name -> HF name of the plain decoder's layer (all matrices transposed)."""
    return {"attn_norm": "input_layernorm.weight", "wq": "self_attn.q_proj.weight",
            "wk": "self_attn.k_proj.weight", "wv": "self_attn.v_proj.weight",
            "wo": "self_attn.o_proj.weight", "mlp_norm": "post_attention_layernorm.weight",
            "w_gate": "mlp.gate_proj.weight", "w_up": "mlp.up_proj.weight",
            "w_down": "mlp.down_proj.weight"}


def hf_to_params(cfg: ModelConfig, tensors: dict[str, np.ndarray], dtype: Any = None,
                 family: str = "llama") -> Params:
    """Arrange a `family`'s Hugging Face tensors into the library's params pytree.

    Every tensor the model needs is checked by name, dtype (floating point) and shape; a
    tensor left over is an error. `dtype` casts the weights (default: the checkpoint's).
    """
    expected = param_shapes(cfg)
    prefix = base_prefix(family, tensors)
    used: set[str] = set()

    def apply(rules: list[Rule], shapes: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for rule in rules:
            arrays = []
            for name in rule.sources:
                if name not in tensors:
                    raise CheckpointError(f"checkpoint is missing tensor {name!r}")
                arrays.append(require_floating(name, tensors[name]))
                used.add(name)
            for lib, w in rule.build(arrays).items():
                if tuple(w.shape) != tuple(shapes[lib]):
                    got = tuple(tensors[rule.sources[0]].shape)
                    raise CheckpointError(
                        f"tensor {rule.sources[0]!r} has shape {got}, which does not fit the "
                        f"config (library {lib} {tuple(shapes[lib])})")
                # A copy: the file's tensors are memory-mapped, and an array that aliased
                # the map would change (or fault) when the file is rewritten.
                out[lib] = jnp.array(w, dtype=dtype or w.dtype, copy=True)
        assert set(out) == set(shapes), f"rules and shapes disagree: {set(out) ^ set(shapes)}"
        return out

    top_shapes = {k: v for k, v in expected.items() if k != "layers"}
    params: Params = apply(top_rules(cfg, family, prefix), top_shapes)
    params["layers"] = [apply(layer_rules(cfg, family, i, prefix), shapes)
                        for i, shapes in enumerate(expected["layers"])]
    unexpected = sorted(n for n in tensors if n not in used and not ignorable(cfg, family, n))
    if unexpected:
        raise CheckpointError(f"checkpoint has tensors the model does not use, e.g. "
                              f"{unexpected[0]!r} (an unsupported architecture?)")
    return params


def params_to_hf(cfg: ModelConfig, params: Params) -> dict[str, np.ndarray]:
    """The inverse of `hf_to_params` for the plain decoder: Llama's names and layouts."""
    _require_llama(cfg)
    out = {"model.embed_tokens.weight": np.asarray(params["embed"]),
           "model.norm.weight": np.asarray(params["final_norm"])}
    for i, layer in enumerate(params["layers"]):
        for name, hf in _llama_layer_map().items():
            w = np.asarray(layer[name])
            out[f"model.layers.{i}.{hf}"] = np.ascontiguousarray(w.T if w.ndim == 2 else w)
    if not cfg.tied_embeddings:
        out["lm_head.weight"] = np.ascontiguousarray(np.asarray(params["unembed"]).T)
    return out


# Directories --------------------------------------------------------------------------------

def weight_files(directory: Path) -> list[Path]:
    """The checkpoint's .safetensors files: those its index lists, or model.safetensors."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as err:
            raise CheckpointError(f"cannot read {index}: {err}") from None
        files = [directory / f for f in dict.fromkeys(weight_map.values())]
    else:
        files = [directory / "model.safetensors"]
    for f in files:
        if not f.is_file():
            raise CheckpointError(f"missing weight file {f}")
    return files


def _check_runtime_keys(hf: dict[str, Any], family: str) -> None:
    """Keys of a family that change the numerics in ways the model does not compute."""
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    partial = hf.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0)
                     if isinstance(rope, dict) else 1.0)
    if partial not in (None, 1, 1.0) and family not in PARTIAL_ROTARY_FAMILIES:
        raise ConfigError(f"partial_rotary_factor={partial!r} is not supported (rotary "
                          "embeddings over the whole head only)")
    if family == "gpt2" and (hf.get("scale_attn_weights") is False
                             or hf.get("scale_attn_by_inverse_layer_idx")):
        raise ConfigError("GPT-2's scale_attn_weights=false / scale_attn_by_inverse_layer_idx "
                          "are not supported")
    if hf.get("use_bidirectional_attention"):
        raise ConfigError("use_bidirectional_attention=true is not supported (a decoder is "
                          "causal)")


def _read_config(directory: Path) -> tuple[ModelConfig, str]:
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    hf = read_hf_config(directory)
    archs = hf.get("architectures") or []
    family = hf.get("model_type", "llama")
    if not isinstance(family, str):
        raise ConfigError(f"model_type must be a string, got {family!r}")
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ConfigError(f"architectures must be a list of names, got {archs!r}")
    if archs and not any(a in SUPPORTED_ARCHITECTURES for a in archs):
        raise ConfigError(f"unsupported architecture {archs[0]!r}; supported: "
                          f"{', '.join(SUPPORTED_ARCHITECTURES)}")
    if family not in FAMILY_ARCHITECTURES:
        raise ConfigError(f"unsupported architecture model_type={family!r}; supported: "
                          f"{', '.join(FAMILY_ARCHITECTURES)}")
    _check_runtime_keys(hf, family)
    return from_hf_config(hf, name=directory.name), family


def read_checkpoint_config(directory: str | Path) -> ModelConfig:
    """The config of a checkpoint directory, checked as `load_checkpoint` checks it, without
    reading a weight."""
    return _read_config(Path(directory))[0]


def read_checkpoint_family(directory: str | Path) -> tuple[ModelConfig, str]:
    """The config of a checkpoint directory and its family (``model_type``), checked as
    `load_checkpoint` checks them, without reading a weight (`parallel.checkpoint_shards`
    reads the weights block by block with the family's name rules)."""
    return _read_config(Path(directory))


def load_checkpoint(directory: str | Path, dtype: Any = None) -> tuple[ModelConfig, Params]:
    """Load a checkpoint directory of a supported family: (config, params).

    `dtype` casts the weights (e.g. jnp.float32); by default they keep the checkpoint's dtype.
    Raises CheckpointError or ConfigError naming what is missing, misshapen or unsupported.
    """
    directory = Path(directory)
    cfg, family = _read_config(directory)
    tensors: dict[str, np.ndarray] = {}
    for f in weight_files(Path(directory)):
        tensors.update(read_safetensors(f))
    return cfg, hf_to_params(cfg, tensors, dtype, family)


def _require_llama(cfg: ModelConfig) -> None:
    extra = special_features(cfg) + (["a plain MLP"] if cfg.mlp != "gated" else [])
    if extra:
        raise CheckpointError(f"save_checkpoint writes Llama/Mistral checkpoints; {cfg.name} "
                              f"uses {', '.join(extra)}")


def save_checkpoint(directory: str | Path, cfg: ModelConfig, params: Params) -> Path:
    """Write params as a Hugging Face Llama checkpoint (config.json + model.safetensors).

    Only the plain decoder (a Llama, or a Mistral with one window) is written; any other
    config is refused with a CheckpointError naming its features."""
    _require_llama(cfg)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype(params["embed"].dtype)
    arch, kind = ("MistralForCausalLM", "mistral") if cfg.window else ("LlamaForCausalLM", "llama")
    hf = {"architectures": [arch], "model_type": kind, "sliding_window": cfg.window,
          "num_hidden_layers": cfg.L, "hidden_size": cfg.D, "intermediate_size": cfg.F,
          "num_attention_heads": cfg.N, "num_key_value_heads": cfg.K, "head_dim": cfg.H,
          "vocab_size": cfg.V, "tie_word_embeddings": cfg.tied_embeddings,
          "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta, "hidden_act": cfg.activation,
          "max_position_embeddings": cfg.max_seq_len, "attention_bias": False, "mlp_bias": False,
          "torch_dtype": {"bfloat16": "bfloat16", "float16": "float16"}.get(dtype.name, "float32")}
    (directory / "config.json").write_text(json.dumps(hf, indent=2))
    write_safetensors(directory / "model.safetensors", params_to_hf(cfg, params))
    return directory
