"""Reading a Hugging Face ``config.json`` into a `ModelConfig`.

Each family names the same letters differently (GPT-2's ``n_embd`` is everyone else's
``hidden_size``) and has its own defaults for keys a file may leave out — Gemma ties its
embeddings unless told otherwise, which is a 10% error in the parameter count if missed.
The defaults below are those of each family's configuration class in transformers, the
numerics those of its modeling file (transformers/models/<family>/modeling_<family>.py).
Each family is a function from the file's keys (`hf_keys.ConfigKeys`, every value checked
before use) to the fields of a `ModelConfig`; most start from the keys Llama-like families
share (`hf_keys.llama_like`).

`from_hf_config(path)` is strict: whatever the library cannot run is refused with one line
naming the key and the value. `from_hf_config(path, purpose="estimate")` relaxes what does not
change an estimate (an unknown rotary-scaling rule or activation) so that the estimator can
still size a model the runtime cannot execute.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Literal

from inferbook.model import family_readers
from inferbook.model.config import ACTIVATION_NAMES, ConfigError, ModelConfig
from inferbook.model.family_table import FAMILIES as TABLE_FAMILIES
from inferbook.model.features import MLA, MoE
from inferbook.model.hf_keys import ConfigKeys, activation, layer_types, llama_like

__all__ = ["from_hf_config", "read_hf_config", "SUPPORTED_MODEL_TYPES"]


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` at `path` (a file, or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"no config file at {path}")
    try:
        hf = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"cannot read {path} as JSON: {str(err).splitlines()[0]}") from None
    except RecursionError:                  # json's parser recurses once per nesting level
        raise ConfigError(f"{path} nests too deeply to be a config") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return hf


def _llama(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    return llama_like(hf, purpose)


def _qwen2(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    out = llama_like(hf, purpose)
    out.update(qkv_bias=True, o_bias=False)
    window = (hf.int("sliding_window", None, minimum=0) or None
              if hf.bool("use_sliding_window", False) else None)
    first = hf.int("max_window_layers", 28, minimum=0)
    out["window"] = window
    out["layer_types"] = layer_types(
        hf, out["L"], None if window is None else
        (lambda i: "sliding" if i >= first else "full"))
    if out["layer_types"] is not None and "sliding" not in out["layer_types"]:
        out["layer_types"], out["window"] = None, None
    return out


def _qwen3(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    out = _qwen2(hf, purpose)
    bias = hf.bool("attention_bias", False)
    out.update(qkv_bias=bias, o_bias=bias, qk_norm=True)
    return out


def _qwen_moe(hf: ConfigKeys, L: int, shared: bool) -> MoE:
    step = hf.int("decoder_sparse_step", 1)
    only = hf.hf.get("mlp_only_layers") or []
    if not isinstance(only, list) or any(not isinstance(i, int) for i in only):
        raise ConfigError(f"config key 'mlp_only_layers' must list layer indices, got {only!r}")
    dense = tuple(i for i in range(L) if i in only or (i + 1) % step)
    shared_F = hf.int("shared_expert_intermediate_size", 0, minimum=0) if shared else 0
    # transformers 5 writes Qwen3-MoE's expert count as num_local_experts (an alias).
    E = hf.int("num_local_experts") if "num_experts" not in hf.hf else hf.int("num_experts")
    return MoE(E=E, k=hf.int("num_experts_per_tok"),
               F=hf.int("moe_intermediate_size"), shared_F=shared_F, shared_gate=shared_F > 0,
               renormalize=hf.bool("norm_topk_prob", False), dense_layers=dense)


def _qwen2_moe(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    out = _qwen2(hf, purpose)
    out["qkv_bias"] = hf.bool("qkv_bias", True)
    out["moe"] = _qwen_moe(hf, out["L"], shared=True)
    return out


def _qwen3_moe(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    out = _qwen3(hf, purpose)
    out["moe"] = _qwen_moe(hf, out["L"], shared=False)
    if hf.bool("use_sliding_window", False) and "layer_types" not in hf.hf:
        # Qwen3-MoE windows every layer (no max_window_layers, modeling_qwen3_moe.py).
        out["window"] = hf.int("sliding_window", None, minimum=0) or None
        out["layer_types"] = None
    return out


def _mixtral(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    out = llama_like(hf, purpose)
    out["moe"] = MoE(E=hf.int("num_local_experts"), k=hf.int("num_experts_per_tok"),
                     F=out["F"], renormalize=True)
    return out


def _gemma(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    act_key = "hidden_activation" if hf.hf.get("hidden_activation") else "hidden_act"
    out = llama_like(hf, purpose, tie=True, act_key=act_key, act_default="gelu_pytorch_tanh")
    if out["activation"] == "gelu":       # Gemma's modeling file always uses the tanh form
        out["activation"] = "gelu_tanh"
    out.update(norm_plus_one=True, embed_scale=True)
    return out


def _gemma2(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    out = _gemma(hf, purpose)
    out.update(norm_position="both",
               query_scale=hf.float("query_pre_attn_scalar", 256.0) ** -0.5,
               attn_softcap=hf.float("attn_logit_softcapping", None),
               final_softcap=hf.float("final_logit_softcapping", None))
    out["layer_types"] = layer_types(
        hf, out["L"], None if out["window"] is None else
        (lambda i: "sliding" if (i + 1) % 2 else "full"))
    return out


def _phi3(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    return llama_like(hf, purpose)


def _deepseek(hf: ConfigKeys, purpose: str, v3: bool) -> dict[str, Any]:
    out = llama_like(hf, purpose)
    mla = MLA(R_kv=hf.int("kv_lora_rank"), R_q=hf.int("q_lora_rank", None),
              H_nope=hf.int("qk_nope_head_dim"), H_rope=hf.int("qk_rope_head_dim"),
              H_v=hf.int("v_head_dim"))
    method = hf.str("topk_method", "noaux_tc" if v3 else "greedy")
    grouped = method in ("group_limited_greedy", "noaux_tc")
    L, E = out["L"], hf.int("n_routed_experts")
    dense = hf.int("first_k_dense_replace", 0, minimum=0)
    freq = hf.int("moe_layer_freq", 1)
    F_e = hf.int("moe_intermediate_size")
    moe = MoE(E=E, k=hf.int("num_experts_per_tok"), F=F_e,
              shared_F=hf.int("n_shared_experts", 0, minimum=0) * F_e,
              renormalize=hf.bool("norm_topk_prob", False),
              scoring="sigmoid" if method == "noaux_tc" else "softmax",
              routed_scale=hf.float("routed_scaling_factor", 1.0),
              groups=hf.int("n_group", 1) if grouped else 1,
              topk_groups=hf.int("topk_group", 1) if grouped else 1,
              score_bias=method == "noaux_tc",
              dense_layers=tuple(i for i in range(L) if i < dense or i % freq))
    out.update(N=out["N"], K=out["N"], H=mla.H_qk, mla=mla, moe=moe,
               rope_interleaved=hf.bool("rope_interleave", True))
    scaling = out["rope_scaling"]
    if scaling is not None and scaling.kind == "yarn" and scaling.mscale_all_dim:
        # DeepSeek's yarn sharpens the softmax by mscale² (modeling_deepseek_v2.py).
        m = 0.1 * scaling.mscale_all_dim * math.log(scaling.factor) + 1.0 \
            if scaling.factor > 1 else 1.0
        out["query_scale"] = mla.H_qk ** -0.5 * m * m
    return out


def _gpt2(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    D, N = hf.int("n_embd", 768), hf.int("n_head", 12)
    if D % N:
        raise ConfigError(f"n_embd={D} is not a multiple of n_head={N}")
    return dict(
        L=hf.int("n_layer", 12), D=D, F=hf.int("n_inner", 4 * D), N=N, K=N, H=D // N,
        V=hf.int("vocab_size", 50257), mlp="plain",
        activation=activation(hf, "activation_function", "gelu_new", purpose),
        tied_embeddings=hf.bool("tie_word_embeddings", True),
        norm_eps=hf.float("layer_norm_epsilon", 1e-5), max_seq_len=hf.int("n_positions", 1024),
        positions="learned", norm="layer", qkv_bias=True, o_bias=True, mlp_bias=True)


_FAMILIES: dict[str, Callable[[ConfigKeys, str], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "mixtral": _mixtral, "qwen2": _qwen2,
    "qwen3": _qwen3, "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "gemma": _gemma,
    "gemma2": _gemma2, "phi3": _phi3,
    "deepseek_v2": lambda hf, p: _deepseek(hf, p, v3=False),
    "deepseek_v3": lambda hf, p: _deepseek(hf, p, v3=True),
    "gpt2": _gpt2,
    "gpt_neox": family_readers.gpt_neox, "gemma3_text": family_readers.gemma3_text,
    "gemma3": family_readers.gemma3,
    **{name: family.read for name, family in TABLE_FAMILIES.items()},
}
SUPPORTED_MODEL_TYPES = tuple(_FAMILIES)


def from_hf_config(source: str | Path | dict[str, Any], *, name: str | None = None,
                   purpose: Literal["run", "estimate"] = "run") -> ModelConfig:
    """Build a ModelConfig from a Hugging Face ``config.json`` of a supported family.

    `source` is a path to the file, a directory holding it, or the parsed dictionary. The
    family comes from ``model_type`` (a file without one is read as Llama). Supported:
    Llama (1-3.x), Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen2-MoE, Qwen3-MoE, Gemma, Gemma-2,
    Gemma-3 (text, and the language model of a multimodal config), Phi-2 (and Phi-1.5),
    Phi-3, DeepSeek-V2/V3, GPT-2, GPT-NeoX (Pythia), OLMo-2, OLMoE, SmolLM3, StableLM,
    Granite, Cohere (Command-R) and StarCoder2.

    Raises ConfigError naming the missing or malformed key, or the unsupported feature.
    With ``purpose="estimate"`` features that change no size or FLOP count (rotary-scaling
    rules and activations the runtime lacks) are accepted and left out.
    """
    if isinstance(source, dict):
        hf = source
        label = name or str(source.get("_name_or_path") or "hf-config")
    else:
        path = Path(source)
        hf = read_hf_config(path)
        label = name or (path if path.is_dir() else path.parent).name or "hf-config"
    keys = ConfigKeys(hf)
    model_type = hf.get("model_type", "llama")
    if not isinstance(model_type, str):             # a list or dict could not even be looked up
        raise ConfigError(f"model_type must be a string, got {model_type!r}")
    if model_type not in _FAMILIES:
        raise ConfigError(f"unsupported architecture model_type={model_type!r}; "
                          f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    fields = _FAMILIES[model_type](keys, purpose)
    if fields.get("activation") not in ACTIVATION_NAMES:
        raise ConfigError(f"unsupported activation {fields.get('activation')!r}")
    return ModelConfig(**fields, name=label)
