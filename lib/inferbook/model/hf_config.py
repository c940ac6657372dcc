"""Reading a Hugging Face ``config.json`` into a `ModelConfig`.

Each family names the same letters differently (GPT-2's ``n_embd`` is everyone else's
``hidden_size``) and has its own defaults for keys a file may leave out — Gemma ties its
embeddings unless told otherwise, which is a 10% error in the parameter count if missed.
The defaults below are those of each family's configuration class in transformers, the
numerics those of its modeling file (transformers/models/<family>/modeling_<family>.py).

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

from inferbook.model.config import ACTIVATION_NAMES, ConfigError, ModelConfig
from inferbook.model.features import MLA, ROPE_KINDS, MoE, RopeScaling

__all__ = ["from_hf_config", "read_hf_config", "SUPPORTED_MODEL_TYPES"]

_MISSING = object()

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "relu": "relu"}
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "full": "full",
                "sliding": "sliding"}


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
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return hf


class _Keys:
    """Typed access to a config dictionary: every value is checked before it is used."""

    def __init__(self, hf: dict[str, Any], where: str = "config"):
        self.hf, self.where = hf, where

    def _get(self, key: str, default: Any) -> Any:
        value = self.hf.get(key, _MISSING)
        if value is _MISSING or value is None:
            if default is _MISSING:
                raise ConfigError(f"{self.where} is missing the key {key!r}")
            return default
        return value

    def int(self, key: str, default: Any = _MISSING, *, minimum: int = 1) -> Any:
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
        value = self._get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"{self.where} key {key!r} must be a positive finite number, "
                              f"got {value!r}")
        return float(value)

    def bool(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise ConfigError(f"{self.where} key {key!r} must be true or false, got {value!r}")
        return value

    def str(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is None:
            return None
        if not isinstance(value, str):
            raise ConfigError(f"{self.where} key {key!r} must be a string, got {value!r}")
        return value

    def floats(self, key: str) -> tuple[float, ...] | None:
        value = self.hf.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in value):
            raise ConfigError(f"{self.where} key {key!r} must be a list of numbers, got {value!r}")
        return tuple(float(v) for v in value)


def _rope_scaling(hf: _Keys, purpose: str) -> tuple[float, RopeScaling | None]:
    """rope_theta and the scaling rule, from ``rope_scaling`` or transformers 5's
    ``rope_parameters`` (which also holds rope_theta)."""
    params = hf.hf.get("rope_parameters")
    scaling = hf.hf.get("rope_scaling")
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(f"config key {key!r} must be an object, got {value!r}")
    params, scaling = params or {}, scaling or {}
    theta_source = hf if "rope_theta" in hf.hf else _Keys(params, "rope_parameters")
    theta = theta_source.float("rope_theta", 10_000.0)
    rule = scaling or params
    keys = _Keys(rule, "rope scaling")
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


def _activation(hf: _Keys, key: str, default: str, purpose: str) -> str:
    act = hf.str(key, default)
    if act in _ACTIVATIONS:
        return _ACTIVATIONS[act]
    if purpose == "estimate":
        return "silu"                    # the activation changes no count
    raise ConfigError(f"unsupported {key} {act!r}; supported: {', '.join(_ACTIVATIONS)}")


def _layer_types(hf: _Keys, L: int, default: Callable[[int], str] | None) -> tuple | None:
    raw = hf.hf.get("layer_types")
    if raw is None:
        return None if default is None else tuple(default(i) for i in range(L))
    if not isinstance(raw, list) or len(raw) != L or any(t not in _LAYER_TYPES for t in raw):
        raise ConfigError(f"config key 'layer_types' must list 'full_attention' or "
                          f"'sliding_attention' for each of the {L} layers")
    return tuple(_LAYER_TYPES[t] for t in raw)


def _common(hf: _Keys, purpose: str, *, tie: bool = False, act_key: str = "hidden_act",
            act_default: str = "silu") -> dict[str, Any]:
    """The keys every Llama-like family shares, with Llama's defaults."""
    L, D, N = hf.int("num_hidden_layers"), hf.int("hidden_size"), hf.int("num_attention_heads")
    theta, scaling = _rope_scaling(hf, purpose)
    head_dim = hf.int("head_dim", None)
    return dict(
        L=L, D=D, F=hf.int("intermediate_size"), N=N, K=hf.int("num_key_value_heads", N),
        H=head_dim if head_dim is not None else D // N, V=hf.int("vocab_size"),
        tied_embeddings=hf.bool("tie_word_embeddings", tie),
        norm_eps=hf.float("rms_norm_eps", 1e-6), rope_theta=theta, rope_scaling=scaling,
        window=hf.int("sliding_window", None, minimum=0) or None,   # 0 and null: no window
        max_seq_len=hf.int("max_position_embeddings", 4096),
        activation=_activation(hf, act_key, act_default, purpose),
        qkv_bias=hf.bool("attention_bias", False), o_bias=hf.bool("attention_bias", False),
        mlp_bias=hf.bool("mlp_bias", False))


def _llama(hf: _Keys, purpose: str) -> dict[str, Any]:
    return _common(hf, purpose)


def _qwen2(hf: _Keys, purpose: str) -> dict[str, Any]:
    out = _common(hf, purpose)
    out.update(qkv_bias=True, o_bias=False)
    window = (hf.int("sliding_window", None, minimum=0) or None
              if hf.bool("use_sliding_window", False) else None)
    first = hf.int("max_window_layers", 28, minimum=0)
    out["window"] = window
    out["layer_types"] = _layer_types(
        hf, out["L"], None if window is None else
        (lambda i: "sliding" if i >= first else "full"))
    if out["layer_types"] is not None and "sliding" not in out["layer_types"]:
        out["layer_types"], out["window"] = None, None
    return out


def _qwen3(hf: _Keys, purpose: str) -> dict[str, Any]:
    out = _qwen2(hf, purpose)
    bias = hf.bool("attention_bias", False)
    out.update(qkv_bias=bias, o_bias=bias, qk_norm=True)
    return out


def _qwen_moe(hf: _Keys, L: int, shared: bool) -> MoE:
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


def _qwen2_moe(hf: _Keys, purpose: str) -> dict[str, Any]:
    out = _qwen2(hf, purpose)
    out["qkv_bias"] = hf.bool("qkv_bias", True)
    out["moe"] = _qwen_moe(hf, out["L"], shared=True)
    return out


def _qwen3_moe(hf: _Keys, purpose: str) -> dict[str, Any]:
    out = _qwen3(hf, purpose)
    out["moe"] = _qwen_moe(hf, out["L"], shared=False)
    if hf.bool("use_sliding_window", False) and "layer_types" not in hf.hf:
        # Qwen3-MoE windows every layer (no max_window_layers, modeling_qwen3_moe.py).
        out["window"] = hf.int("sliding_window", None, minimum=0) or None
        out["layer_types"] = None
    return out


def _mixtral(hf: _Keys, purpose: str) -> dict[str, Any]:
    out = _common(hf, purpose)
    out["moe"] = MoE(E=hf.int("num_local_experts"), k=hf.int("num_experts_per_tok"),
                     F=out["F"], renormalize=True)
    return out


def _gemma(hf: _Keys, purpose: str) -> dict[str, Any]:
    act_key = "hidden_activation" if hf.hf.get("hidden_activation") else "hidden_act"
    out = _common(hf, purpose, tie=True, act_key=act_key, act_default="gelu_pytorch_tanh")
    if out["activation"] == "gelu":       # Gemma's modeling file always uses the tanh form
        out["activation"] = "gelu_tanh"
    out.update(norm_plus_one=True, embed_scale=True)
    return out


def _gemma2(hf: _Keys, purpose: str) -> dict[str, Any]:
    out = _gemma(hf, purpose)
    out.update(sandwich_norm=True,
               query_scale=hf.float("query_pre_attn_scalar", 256.0) ** -0.5,
               attn_softcap=hf.float("attn_logit_softcapping", None),
               final_softcap=hf.float("final_logit_softcapping", None))
    out["layer_types"] = _layer_types(
        hf, out["L"], None if out["window"] is None else
        (lambda i: "sliding" if (i + 1) % 2 else "full"))
    return out


def _phi3(hf: _Keys, purpose: str) -> dict[str, Any]:
    return _common(hf, purpose)


def _deepseek(hf: _Keys, purpose: str, v3: bool) -> dict[str, Any]:
    out = _common(hf, purpose)
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


def _gpt2(hf: _Keys, purpose: str) -> dict[str, Any]:
    D, N = hf.int("n_embd", 768), hf.int("n_head", 12)
    if D % N:
        raise ConfigError(f"n_embd={D} is not a multiple of n_head={N}")
    return dict(
        L=hf.int("n_layer", 12), D=D, F=hf.int("n_inner", 4 * D), N=N, K=N, H=D // N,
        V=hf.int("vocab_size", 50257), mlp="plain",
        activation=_activation(hf, "activation_function", "gelu_new", purpose),
        tied_embeddings=hf.bool("tie_word_embeddings", True),
        norm_eps=hf.float("layer_norm_epsilon", 1e-5), max_seq_len=hf.int("n_positions", 1024),
        positions="learned", norm="layer", qkv_bias=True, o_bias=True, mlp_bias=True)


_FAMILIES: dict[str, Callable[[_Keys, str], dict[str, Any]]] = {
    "llama": _llama, "mistral": _llama, "mixtral": _mixtral, "qwen2": _qwen2,
    "qwen3": _qwen3, "qwen2_moe": _qwen2_moe, "qwen3_moe": _qwen3_moe, "gemma": _gemma,
    "gemma2": _gemma2, "phi3": _phi3,
    "deepseek_v2": lambda hf, p: _deepseek(hf, p, v3=False),
    "deepseek_v3": lambda hf, p: _deepseek(hf, p, v3=True),
    "gpt2": _gpt2,
}
SUPPORTED_MODEL_TYPES = tuple(_FAMILIES)


def from_hf_config(source: str | Path | dict[str, Any], *, name: str | None = None,
                   purpose: Literal["run", "estimate"] = "run") -> ModelConfig:
    """Build a ModelConfig from a Hugging Face ``config.json`` of a supported family.

    `source` is a path to the file, a directory holding it, or the parsed dictionary. The
    family comes from ``model_type`` (a file without one is read as Llama). Supported:
    Llama (1-3.x), Mistral, Mixtral, Qwen2/2.5, Qwen3, Qwen2-MoE, Qwen3-MoE, Gemma, Gemma-2,
    Phi-3, DeepSeek-V2/V3 and GPT-2.

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
    keys = _Keys(hf)
    model_type = hf.get("model_type", "llama")
    if model_type not in _FAMILIES:
        raise ConfigError(f"unsupported architecture model_type={model_type!r}; "
                          f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    fields = _FAMILIES[model_type](keys, purpose)
    if fields.get("activation") not in ACTIVATION_NAMES:
        raise ConfigError(f"unsupported activation {fields.get('activation')!r}")
    return ModelConfig(**fields, name=label)
