"""Hugging Face Llama-family checkpoints, read and written with numpy alone.

A checkpoint directory holds `config.json` and the weights in the safetensors format, either
one `model.safetensors` or several shards listed by `model.safetensors.index.json`
(`safetensors_io` reads and writes the files).

Hugging Face stores each linear layer as `weight[out, in]` and computes `x @ weight.T`; the
library stores `[in, out]`, so loading is a transpose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np

from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.decoder import Params, param_shapes
from inferbook.model.hf_config import from_hf_config, read_hf_config
from inferbook.model.safetensors_io import (
    CheckpointError,
    read_safetensors,
    require_floating,
    write_safetensors,
)

__all__ = ["CheckpointError", "read_safetensors", "write_safetensors", "load_checkpoint",
           "save_checkpoint", "hf_to_params", "params_to_hf"]


# Name and layout mapping --------------------------------------------------------------------

def _hf_layer_map(cfg: ModelConfig) -> dict[str, tuple[str, Callable, Callable]]:
    """Library name -> (HF name, HF-to-library transform, library-to-HF transform)."""
    same = (lambda w: w, lambda w: w)
    return {
        "attn_norm": ("input_layernorm.weight", *same),
        "wq": ("self_attn.q_proj.weight", lambda w: w.T, lambda w: w.T),
        "wk": ("self_attn.k_proj.weight", lambda w: w.T, lambda w: w.T),
        "wv": ("self_attn.v_proj.weight", lambda w: w.T, lambda w: w.T),
        "wo": ("self_attn.o_proj.weight", lambda w: w.T, lambda w: w.T),
        "mlp_norm": ("post_attention_layernorm.weight", *same),
        "w_gate": ("mlp.gate_proj.weight", lambda w: w.T, lambda w: w.T),
        "w_up": ("mlp.up_proj.weight", lambda w: w.T, lambda w: w.T),
        "w_down": ("mlp.down_proj.weight", lambda w: w.T, lambda w: w.T),
    }


def hf_to_params(cfg: ModelConfig, tensors: dict[str, np.ndarray], dtype: Any = None) -> Params:
    """Arrange Hugging Face tensors into the library's params pytree, checking every shape."""
    if cfg.mlp != "gated":
        raise CheckpointError("only gated-MLP (Llama-family) checkpoints are supported")
    expected = param_shapes(cfg)
    used: set[str] = set()

    def take(hf_name: str, transform: Callable, shape: tuple[int, ...]):
        if hf_name not in tensors:
            raise CheckpointError(f"checkpoint is missing tensor {hf_name!r}")
        used.add(hf_name)
        require_floating(hf_name, tensors[hf_name])
        try:
            w = transform(tensors[hf_name])
        except ValueError:
            w = None
        if w is None or tuple(w.shape) != tuple(shape):
            got = tuple(tensors[hf_name].shape)
            raise CheckpointError(f"tensor {hf_name!r} has shape {got}, which does not fit the "
                                  f"config (library shape {tuple(shape)})")
        return jnp.asarray(w, dtype=dtype or w.dtype)

    mapping = _hf_layer_map(cfg)
    params: Params = {
        "embed": take("model.embed_tokens.weight", lambda w: w, expected["embed"]),
        "layers": [{name: take(f"model.layers.{i}.{hf}", to_lib, shape[name])
                    for name, (hf, to_lib, _) in mapping.items()}
                   for i, shape in enumerate(expected["layers"])],
        "final_norm": take("model.norm.weight", lambda w: w, expected["final_norm"]),
    }
    if not cfg.tied_embeddings:
        params["unembed"] = take("lm_head.weight", lambda w: w.T, expected["unembed"])
    ignorable = {"lm_head.weight"} if cfg.tied_embeddings else set()
    unexpected = sorted(n for n in tensors if n not in used and n not in ignorable
                        and not n.endswith("rotary_emb.inv_freq"))
    if unexpected:
        raise CheckpointError(f"checkpoint has tensors the model does not use, e.g. "
                              f"{unexpected[0]!r} (an unsupported architecture?)")
    return params


def params_to_hf(cfg: ModelConfig, params: Params) -> dict[str, np.ndarray]:
    """The inverse of `hf_to_params`: Hugging Face names and layouts."""
    out = {"model.embed_tokens.weight": np.asarray(params["embed"]),
           "model.norm.weight": np.asarray(params["final_norm"])}
    for i, layer in enumerate(params["layers"]):
        for name, (hf, _, to_hf) in _hf_layer_map(cfg).items():
            out[f"model.layers.{i}.{hf}"] = np.ascontiguousarray(to_hf(np.asarray(layer[name])))
    if not cfg.tied_embeddings:
        out["lm_head.weight"] = np.ascontiguousarray(np.asarray(params["unembed"]).T)
    return out


# Directories --------------------------------------------------------------------------------

def _weight_files(directory: Path) -> list[Path]:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (OSError, ValueError, KeyError) as err:
            raise CheckpointError(f"cannot read {index}: {err}") from None
        files = [directory / f for f in dict.fromkeys(weight_map.values())]
    else:
        files = [directory / "model.safetensors"]
    for f in files:
        if not f.is_file():
            raise CheckpointError(f"missing weight file {f}")
    return files


def load_checkpoint(directory: str | Path, dtype: Any = None) -> tuple[ModelConfig, Params]:
    """Load a Llama-family checkpoint directory: (config, params).

    `dtype` casts the weights (e.g. jnp.float32); by default they keep the checkpoint's dtype.
    Raises CheckpointError or ConfigError naming what is missing, misshapen or unsupported.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    hf = read_hf_config(directory)
    archs = hf.get("architectures") or []
    if archs and not any(a in ("LlamaForCausalLM", "MistralForCausalLM") for a in archs):
        raise ConfigError(f"unsupported architecture {archs[0]!r}; supported: "
                          "LlamaForCausalLM, MistralForCausalLM")
    cfg = from_hf_config(hf, name=directory.name)
    tensors: dict[str, np.ndarray] = {}
    for f in _weight_files(directory):
        tensors.update(read_safetensors(f))
    return cfg, hf_to_params(cfg, tensors, dtype)


def save_checkpoint(directory: str | Path, cfg: ModelConfig, params: Params) -> Path:
    """Write params as a Hugging Face Llama checkpoint (config.json + model.safetensors)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if cfg.mlp != "gated":
        raise CheckpointError("only gated-MLP models can be saved as Llama checkpoints")
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
