"""The families whose config.json needs more than a table entry: GPT-NeoX and Gemma-3.

GPT-NeoX (Pythia) names everything its own way — ``rotary_pct`` and ``rotary_emb_base`` for
the rotary width and base, ``use_parallel_residual`` for its block — and is multi-head with
no ``num_key_value_heads``. Gemma-3 keeps two rotary bases, one for its local (sliding)
layers and one, possibly scaled, for its global ones: written ``rope_theta``,
``rope_local_base_freq`` and ``rope_scaling`` by transformers 4, and ``rope_parameters`` with
a "full_attention" and a "sliding_attention" entry by transformers 5. Its multimodal configs
(``model_type`` "gemma3") hold the language model under ``text_config``, often with only the
keys that differ from `Gemma3TextConfig`'s defaults, which are therefore written out here.
Defaults are transformers' (configuration_gpt_neox.py, configuration_gemma3.py).
"""

from __future__ import annotations

from typing import Any

from inferbook.model.features import ConfigError
from inferbook.model.hf_keys import (
    ConfigKeys,
    activation,
    layer_types,
    llama_like,
    rope_settings,
    rotary_fraction,
)

__all__ = ["gpt_neox", "gemma3_text", "gemma3", "GEMMA3_TEXT_DEFAULTS"]


def gpt_neox(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    """GPT-NeoX / Pythia: LayerNorm, parallel branches with two norms by default, a quarter
    of each head rotated, biases everywhere, a plain GELU MLP."""
    D, N = hf.int("hidden_size"), hf.int("num_attention_heads")
    if D % N:
        raise ConfigError(f"hidden_size={D} is not a multiple of num_attention_heads={N}")
    base = hf.hf.get("rotary_emb_base")
    if "rope_theta" not in hf.hf and base is not None:
        hf = ConfigKeys({**hf.hf, "rope_theta": base}, hf.where)
    theta, scaling = rope_settings(hf, purpose)
    bias = hf.bool("attention_bias", True)
    return dict(
        L=hf.int("num_hidden_layers"), D=D, F=hf.int("intermediate_size"), N=N, K=N, H=D // N,
        V=hf.int("vocab_size"), mlp="plain", activation=activation(hf, "hidden_act", "gelu",
                                                                   purpose),
        tied_embeddings=hf.bool("tie_word_embeddings", False),
        norm_eps=hf.float("layer_norm_eps", 1e-5), norm="layer",
        max_seq_len=hf.int("max_position_embeddings", 2048), rope_theta=theta,
        rope_scaling=scaling, rotary_fraction=rotary_fraction(hf, 0.25, "rotary_pct"),
        residual="parallel" if hf.bool("use_parallel_residual", True) else "sequential",
        qkv_bias=bias, o_bias=bias, mlp_bias=True)


# Gemma3TextConfig's defaults for the keys a gemma3 config's text_config usually omits.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208, "hidden_size": 2304, "intermediate_size": 9216,
    "num_hidden_layers": 26, "num_attention_heads": 8, "num_key_value_heads": 4,
    "head_dim": 256, "max_position_embeddings": 131_072, "rms_norm_eps": 1e-6,
    "query_pre_attn_scalar": 256, "sliding_window": 4096}


def _gemma3_rope(hf: ConfigKeys, purpose: str) -> tuple[ConfigKeys, float]:
    """The keys with the global layers' rotary settings in the places `rope_settings` reads,
    and the local layers' base."""
    params = hf.hf.get("rope_parameters")
    if isinstance(params, dict) and ("full_attention" in params
                                     or "sliding_attention" in params):
        full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
        for name, value in (("full_attention", full), ("sliding_attention", local)):
            if not isinstance(value, dict):
                raise ConfigError(f"config key 'rope_parameters' entry {name!r} must be an "
                                  f"object, got {value!r}")
        local_keys = ConfigKeys(local, "rope_parameters.sliding_attention")
        if local_keys.str("rope_type", "default") != "default" and purpose == "run":
            raise ConfigError("Gemma-3's local layers rotate unscaled here; "
                              f"rope_parameters.sliding_attention is {local!r}")
        local_theta = local_keys.float("rope_theta", 10_000.0)
        full = {"rope_theta": 1_000_000.0, **full}
        rest = {k: v for k, v in hf.hf.items() if k not in ("rope_parameters", "rope_theta",
                                                            "rope_scaling")}
        return ConfigKeys({**rest, "rope_parameters": full}, hf.where), local_theta
    local_theta = hf.float("rope_local_base_freq", 10_000.0)
    theta = hf.float("rope_theta", 1_000_000.0)
    return ConfigKeys({**hf.hf, "rope_theta": theta}, hf.where), local_theta


def gemma3_text(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    """Gemma-3's language model: Gemma-2's block (sandwich norms, (1 + w) gains, √D
    embeddings, query_pre_attn_scalar) with per-head q/k norms, five local layers to each
    global one, and a rotary base of its own for the local layers."""
    hf = ConfigKeys({**GEMMA3_TEXT_DEFAULTS, **hf.hf}, hf.where)
    hf, local_theta = _gemma3_rope(hf, purpose)
    act_key = "hidden_activation" if hf.hf.get("hidden_activation") else "hidden_act"
    out = llama_like(hf, purpose, tie=True, act_key=act_key, act_default="gelu_pytorch_tanh")
    pattern = hf.int("sliding_window_pattern", None) or hf.int("_sliding_window_pattern", 6)
    types = layer_types(hf, out["L"], lambda i: "sliding" if (i + 1) % pattern else "full")
    if "sliding" in types and out["window"] is None:
        raise ConfigError("Gemma-3 config has sliding layers but sliding_window is null")
    if "sliding" not in types:
        types, local_theta = None, None
    out.update(norm_plus_one=True, embed_scale=True, norm_position="both", qk_norm=True,
               qk_norm_scope="head", layer_types=types, local_rope_theta=local_theta,
               query_scale=hf.float("query_pre_attn_scalar") ** -0.5,
               attn_softcap=hf.float("attn_logit_softcapping", None),
               final_softcap=hf.float("final_logit_softcapping", None))
    if types is None:
        out["window"] = None
    return out


def gemma3(hf: ConfigKeys, purpose: str) -> dict[str, Any]:
    """A multimodal Gemma-3 config: its language model, from ``text_config`` (the vision
    encoder is not part of the decoder and is not counted)."""
    text = hf.hf.get("text_config") or {}
    if not isinstance(text, dict):
        raise ConfigError(f"config key 'text_config' must be an object, got {text!r}")
    if "tie_word_embeddings" not in text and "tie_word_embeddings" in hf.hf:
        text = {**text, "tie_word_embeddings": hf.hf["tie_word_embeddings"]}
    return gemma3_text(ConfigKeys(text, "text_config"), purpose)
