"""Hugging Face's tensor names for each family, and how each tensor becomes the library's.

A checkpoint stores a linear layer as `weight[out, in]` and computes `x @ weight.T`; the
library stores `[in, out]` (`x @ w`), so most tensors are transposed on the way in. Most
families name a layer's tensors as Llama does (self_attn.q_proj, mlp.gate_proj,
input_layernorm, ...); `LAYER_NAMES` lists, per family, the names that differ, and every
library leaf of a layer (`weights.layer_shapes`) is read from `<name>.weight`, its bias from
`<name>.bias` — so a new feature's tensors load as soon as its leaves have names. What is
packed or split differently gets a rule of its own:

    Phi-3                                 qkv_proj (rows: Q, then K, then V); gate_up_proj
    GPT-NeoX                              query_key_value, rows head by head (Q, K, V of head 0,
                                          then of head 1, ...); gpt_neox.* and embed_out
    StableLM                              q_layernorm.norms.{n}: one LayerNorm per head
    Mixtral                               block_sparse_moe.gate; experts.{e}.w1 (gate), w3 (up),
                                          w2 (down)
    Qwen-MoE, OLMoE, DeepSeek             mlp.gate; mlp.experts.{e}.*_proj; shared_expert(s)
    DeepSeek (latent attention)           q_proj or q_a_proj/q_a_layernorm/q_b_proj;
                                          kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
    GPT-2                                 Conv1D layers stored [in, out] (no transpose); c_attn
                                          packs Q, K, V side by side; wte, wpe, ln_f
    Gemma-3 (multimodal)                  the language model under model.language_model.
                                          (language_model.model. in older files); the vision
                                          tower and projector are not the decoder's

Gemma-2/3 and OLMo-2 rename the norms: their "post_attention_layernorm" normalises the
attention's output (Llama's name for the norm before the MLP), "pre_feedforward_layernorm" is
the norm before the MLP.

Each `Rule` (`hf_rules`) reads one or more checkpoint tensors and yields one or more library
leaves; `checkpoint.hf_to_params` applies them and checks every name and shape.
"""

from __future__ import annotations

from typing import Iterable

from inferbook.model.config import ModelConfig
from inferbook.model.hf_rules import (
    Rule,
    gpt2_layer_rules,
    latent_attention_rules,
    linear,
    moe_rules,
    per_head_qkv,
    same,
    split,
    stacked_heads,
)
from inferbook.model.weights import layer_shapes

__all__ = ["Rule", "layer_rules", "top_rules", "ignorable", "base_prefix", "LAYER_NAMES",
           "FAMILY_ARCHITECTURES"]

# model_type -> the architecture name transformers writes into config.json.
FAMILY_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "phi3": "Phi3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "gpt2": "GPT2LMHeadModel", "gemma3_text": "Gemma3ForCausalLM",
    "gemma3": "Gemma3ForConditionalGeneration", "olmo2": "Olmo2ForCausalLM",
    "olmoe": "OlmoeForCausalLM", "smollm3": "SmolLM3ForCausalLM",
    "gpt_neox": "GPTNeoXForCausalLM", "stablelm": "StableLmForCausalLM",
    "granite": "GraniteForCausalLM", "cohere": "CohereForCausalLM",
    "starcoder2": "Starcoder2ForCausalLM", "phi": "PhiForCausalLM",
}

# A layer's tensors by library leaf, relative to the layer: Llama's names ...
_LLAMA = {"attn_norm": "input_layernorm", "mlp_norm": "post_attention_layernorm",
          "wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj",
          "wo": "self_attn.o_proj", "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm",
          "w_gate": "mlp.gate_proj", "w_up": "mlp.up_proj", "w_down": "mlp.down_proj"}
_GEMMA2 = {"post_attn_norm": "post_attention_layernorm", "mlp_norm": "pre_feedforward_layernorm",
           "post_mlp_norm": "post_feedforward_layernorm"}
# ... and each family's differences from them.
LAYER_NAMES: dict[str, dict[str, str]] = {
    "gemma2": _GEMMA2, "gemma3_text": _GEMMA2, "gemma3": _GEMMA2,
    "olmo2": {"post_attn_norm": "post_attention_layernorm",
              "post_mlp_norm": "post_feedforward_layernorm"},
    "starcoder2": {"w_in": "mlp.c_fc", "w_out": "mlp.c_proj"},
    "phi": {"wo": "self_attn.dense", "w_in": "mlp.fc1", "w_out": "mlp.fc2",
            "q_norm": "self_attn.q_layernorm", "k_norm": "self_attn.k_layernorm"},
    "stablelm": {"q_norm": "self_attn.q_layernorm", "k_norm": "self_attn.k_layernorm"},
    "gpt_neox": {"wo": "attention.dense", "w_in": "mlp.dense_h_to_4h",
                 "w_out": "mlp.dense_4h_to_h"},
}
_BIAS_OF = {"bq": "wq", "bk": "wk", "bv": "wv", "bo": "wo"}


def _named(leaf: str, names: dict[str, str], p: str) -> Rule:
    """The generic rule for one leaf: a matrix (transposed), its bias, a norm's gain or bias."""
    if leaf.endswith("_bias"):                             # a norm's bias
        return same(p + names[leaf[:-len("_bias")]] + ".bias", leaf)
    if leaf in _BIAS_OF or leaf.startswith("b_"):          # a linear layer's bias
        return same(p + names[_BIAS_OF.get(leaf, "w_" + leaf[2:])] + ".bias", leaf)
    if leaf.endswith("norm"):
        return same(p + names[leaf] + ".weight", leaf)
    return linear(p + names[leaf] + ".weight", leaf)


def _special(cfg: ModelConfig, family: str, i: int, p: str) -> list[Rule]:
    """The rules for what a family packs or splits its own way (the rest is `_named`)."""
    rules: list[Rule] = []
    if cfg.mla is not None:
        rules += latent_attention_rules(cfg, p + "self_attn.")
    if cfg.is_moe_layer(i):
        rules += moe_rules(cfg, family, p)
    if family == "phi3":
        N, K, F = cfg.N * cfg.H, cfg.K * cfg.H, cfg.F
        rules += [split(p + "self_attn.qkv_proj.weight", {"wq": N, "wk": K, "wv": K}, True)]
        if not cfg.is_moe_layer(i):
            rules.append(split(p + "mlp.gate_up_proj.weight", {"w_gate": F, "w_up": F}, True))
    if family == "gpt_neox":
        qkv = p + "attention.query_key_value."
        rules.append(per_head_qkv(qkv + "weight", cfg.N, cfg.H, ("wq", "wk", "wv")))
        if cfg.qkv_bias:
            rules.append(per_head_qkv(qkv + "bias", cfg.N, cfg.H, ("bq", "bk", "bv")))
    if family == "stablelm" and cfg.qk_norm:
        a = p + "self_attn."
        rules += [stacked_heads(a + "q_layernorm.norms.{}.weight", cfg.N, "q_norm"),
                  stacked_heads(a + "k_layernorm.norms.{}.weight", cfg.K, "k_norm")]
    return rules


def layer_rules(cfg: ModelConfig, family: str, i: int, prefix: str | None = None) -> list[Rule]:
    """The rules that fill layer i's dict; `prefix` is where the decoder's tensors sit in the
    checkpoint (default: `base_prefix` of a file without surprises)."""
    prefix = base_prefix(family, ()) if prefix is None else prefix
    if family == "gpt2":
        return gpt2_layer_rules(cfg, f"{prefix}h.{i}.")
    p = f"{prefix}layers.{i}."
    rules = _special(cfg, family, i, p)
    done = {leaf for rule in rules for leaf in rule.leaves}
    names = {**_LLAMA, **LAYER_NAMES.get(family, {})}
    rules += [_named(leaf, names, p) for leaf in layer_shapes(cfg, i) if leaf not in done]
    return rules


def base_prefix(family: str, tensor_names: Iterable[str]) -> str:
    """Where a checkpoint keeps the decoder's embedding, layers and final norm: "model." for
    most families, "gpt_neox." for GPT-NeoX, GPT-2's optional "transformer.", and a
    multimodal Gemma-3's language model ("model.language_model." or, in files written by
    transformers 4, "language_model.model.")."""
    names = set(tensor_names)
    if family == "gpt2":
        return "transformer." if "transformer.wte.weight" in names else ""
    if family == "gpt_neox":
        return "gpt_neox."
    if family == "gemma3":
        old = "language_model.model."
        return old if old + "embed_tokens.weight" in names else "model.language_model."
    return "model."


def top_rules(cfg: ModelConfig, family: str, prefix: str | None = None) -> list[Rule]:
    """The rules for the embedding, the final norm, the unembedding and learned positions."""
    prefix = base_prefix(family, ()) if prefix is None else prefix
    if family == "gpt2":
        rules = [same(prefix + "wte.weight", "embed"), same(prefix + "wpe.weight", "pos_embed")]
        names = {"final_norm": prefix + "ln_f"}
    else:
        embed = {"gpt_neox": "embed_in"}.get(family, "embed_tokens")
        rules = [same(prefix + embed + ".weight", "embed")]
        final = {"gpt_neox": "final_layer_norm", "phi": "final_layernorm"}.get(family, "norm")
        names = {"final_norm": prefix + final}
    rules += [_named(leaf, names, "") for leaf in ("final_norm", "final_norm_bias")
              if leaf != "final_norm_bias" or cfg.norm == "layer"]
    head = _unembedding_name(family, prefix)
    if not cfg.tied_embeddings:
        rules.append(linear(head + ".weight", "unembed"))
    if cfg.unembed_bias:
        rules.append(same(head + ".bias", "unembed_bias"))
    return rules


def _unembedding_name(family: str, prefix: str) -> str:
    if family == "gpt_neox":
        return "embed_out"
    return "language_model.lm_head" if prefix == "language_model.model." else "lm_head"


def ignorable(cfg: ModelConfig, family: str, name: str) -> bool:
    """Tensors a checkpoint may carry that the model does not use: rotary caches, a copy of
    tied embeddings, GPT-2's and Pythia's stored causal masks, DeepSeek-V3's multi-token-prediction
    layers (used for speculative decoding, past layer L), a multimodal Gemma-3's vision
    encoder and projector."""
    if name.endswith("rotary_emb.inv_freq") or (cfg.tied_embeddings and name.endswith(
            "lm_head.weight")):
        return True
    if family == "gpt2" and (name.endswith(".attn.bias") or name.endswith(".attn.masked_bias")):
        return True
    if family == "gpt_neox" and (name.endswith(".attention.bias")
                                 or name.endswith(".attention.masked_bias")):
        return True                          # Pythia's files keep its causal masks too
    if family == "gemma3" and any(part in name.split(".")[:2] for part in (
            "vision_tower", "multi_modal_projector")):
        return True
    if family == "deepseek_v3" and name.startswith("model.layers."):
        index = name.split(".")[2]
        return index.isdigit() and int(index) >= cfg.L
    return False
