"""Hugging Face's tensor names for each family, and how each tensor becomes the library's.

A checkpoint stores a linear layer as `weight[out, in]` and computes `x @ weight.T`; the
library stores `[in, out]` (`x @ w`), so most tensors are transposed on the way in. Beyond
that the families differ in names and in how they pack weights:

    Llama, Mistral, Qwen2/3, Gemma(-2)   q_proj, k_proj, v_proj, o_proj; gate/up/down_proj
    Phi-3                                 qkv_proj (rows: Q, then K, then V); gate_up_proj
    Mixtral                               block_sparse_moe.gate; experts.{e}.w1 (gate), w3 (up),
                                          w2 (down)
    Qwen-MoE, DeepSeek                    mlp.gate; mlp.experts.{e}.*_proj; shared_expert(s)
    DeepSeek (latent attention)           q_proj or q_a_proj/q_a_layernorm/q_b_proj;
                                          kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj
    GPT-2                                 Conv1D layers stored [in, out] (no transpose); c_attn
                                          packs Q, K, V side by side; wte, wpe, ln_f

Gemma-2 also renames the norms: its "post_attention_layernorm" normalises the attention's
output (Llama's name for the norm before the MLP), "pre_feedforward_layernorm" is the norm
before the MLP.

Each `Rule` reads one or more checkpoint tensors and yields one or more library leaves;
`checkpoint.hf_to_params` applies them and checks every name and shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from inferbook.model.config import ModelConfig
from inferbook.model.safetensors_io import CheckpointError

__all__ = ["Rule", "layer_rules", "top_rules", "ignorable", "FAMILY_ARCHITECTURES"]

# model_type -> the architecture name transformers writes into config.json.
FAMILY_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
    "mixtral": "MixtralForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "phi3": "Phi3ForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
}


@dataclass(frozen=True)
class Rule:
    """Checkpoint tensors `sources` -> library leaves, by `build(arrays) -> {name: array}`.

    `mapping` says the same as `build` in a form that a reader of *part* of a leaf can
    follow (`parallel.checkpoint_shards` reads only a process's blocks): "transpose" (the
    leaf is the source transposed), "same", "split" (leaf `name` is columns
    [start, start + width) of the source, transposed first when `transposed`; `parts` lists
    (name, width) in order), "stack" (leaf[e] is sources[e] transposed), or "" where only
    `build` knows.
    """

    sources: tuple[str, ...]
    build: Callable[[list[np.ndarray]], dict[str, np.ndarray]]
    mapping: str = ""
    parts: tuple[tuple[str, int], ...] = ()
    transposed: bool = False


def _linear(src: str, lib: str) -> Rule:                 # [out, in] -> [in, out]
    return Rule((src,), lambda ws: {lib: ws[0].T}, "transpose", ((lib, 0),))


def _same(src: str, lib: str) -> Rule:                   # vectors, and GPT-2's Conv1D
    return Rule((src,), lambda ws: {lib: ws[0]}, "same", ((lib, 0),))


def _split(src: str, parts: dict[str, int], transpose: bool) -> Rule:
    """One packed tensor cut into consecutive parts of the given widths along its output
    dimension: rows of a [out, in] weight (transposed first), columns of GPT-2's [in, out]
    Conv1D weight, or a bias."""
    def build(ws):
        w = ws[0].T if transpose else ws[0]
        if w.shape[-1] != sum(parts.values()):
            return {name: w for name in parts}           # the shape check will name it
        edges = np.cumsum(list(parts.values()))[:-1]
        return dict(zip(parts, np.split(w, edges, axis=-1)))
    return Rule((src,), build, "split", tuple(parts.items()), transpose)


def _experts(pattern: str, E: int, lib: str) -> Rule:
    """E per-expert matrices `pattern.format(e)` stacked into [E, in, out]."""
    sources = tuple(pattern.format(e) for e in range(E))

    def build(ws):
        shapes = [w.shape for w in ws]
        common = max(set(shapes), key=shapes.count)
        for name, shape in zip(sources, shapes):
            if shape != common:
                raise CheckpointError(f"tensor {name!r} has shape {shape}, unlike the other "
                                      f"experts' {common}")
        return {lib: np.stack([w.T for w in ws])}
    return Rule(sources, build, "stack", ((lib, 0),))


def _norm(cfg: ModelConfig, src: str, lib: str) -> list[Rule]:
    rules = [_same(src + ".weight", lib)]
    if cfg.norm == "layer":
        rules.append(_same(src + ".bias", lib + "_bias"))
    return rules


def _attention(cfg: ModelConfig, family: str, a: str) -> list[Rule]:
    N, K = cfg.N * cfg.H, cfg.K * cfg.H
    if family == "phi3":
        rules = [_split(a + "qkv_proj.weight", {"wq": N, "wk": K, "wv": K}, True)]
    else:
        rules = [_linear(a + f"{x}_proj.weight", "w" + x) for x in "qkv"]
    rules.append(_linear(a + "o_proj.weight", "wo"))
    if cfg.qkv_bias:
        rules += [_same(a + f"{x}_proj.bias", "b" + x) for x in "qkv"]
    if cfg.o_bias:
        rules.append(_same(a + "o_proj.bias", "bo"))
    if cfg.qk_norm:
        rules += [_same(a + "q_norm.weight", "q_norm"), _same(a + "k_norm.weight", "k_norm")]
    return rules


def _latent_attention(cfg: ModelConfig, a: str) -> list[Rule]:
    if cfg.mla.R_q is None:
        rules = [_linear(a + "q_proj.weight", "wq")]
    else:
        rules = [_linear(a + "q_a_proj.weight", "wq_a"), _same(a + "q_a_layernorm.weight",
                                                                "q_a_norm"),
                 _linear(a + "q_b_proj.weight", "wq_b")]
        if cfg.qkv_bias:
            rules.append(_same(a + "q_a_proj.bias", "bq_a"))
    rules += [_linear(a + "kv_a_proj_with_mqa.weight", "wkv_a"),
              _same(a + "kv_a_layernorm.weight", "kv_a_norm"),
              _linear(a + "kv_b_proj.weight", "wkv_b"), _linear(a + "o_proj.weight", "wo")]
    if cfg.qkv_bias:
        rules.append(_same(a + "kv_a_proj_with_mqa.bias", "bkv_a"))
    if cfg.o_bias:
        rules.append(_same(a + "o_proj.bias", "bo"))
    return rules


def _mlp(cfg: ModelConfig, family: str, m: str, F: int) -> list[Rule]:
    if family == "phi3":
        return [_split(m + "gate_up_proj.weight", {"w_gate": F, "w_up": F}, True),
                _linear(m + "down_proj.weight", "w_down")]
    rules = [_linear(m + f"{x}_proj.weight", "w_" + x) for x in ("gate", "up", "down")]
    if cfg.mlp_bias:
        rules += [_same(m + f"{x}_proj.bias", "b_" + x) for x in ("gate", "up", "down")]
    return rules


def _moe(cfg: ModelConfig, family: str, p: str) -> list[Rule]:
    m = cfg.moe
    if family == "mixtral":
        b = p + "block_sparse_moe."
        return [_linear(b + "gate.weight", "router"),
                _experts(b + "experts.{}.w1.weight", m.E, "we_gate"),
                _experts(b + "experts.{}.w3.weight", m.E, "we_up"),
                _experts(b + "experts.{}.w2.weight", m.E, "we_down")]
    b = p + "mlp."
    rules = [_linear(b + "gate.weight", "router")]
    rules += [_experts(b + f"experts.{{}}.{x}_proj.weight", m.E, "we_" + x)
              for x in ("gate", "up", "down")]
    if m.score_bias:
        rules.append(_same(b + "gate.e_score_correction_bias", "router_bias"))
    if m.shared_F:
        shared = b + ("shared_expert." if family == "qwen2_moe" else "shared_experts.")
        rules += [_linear(shared + f"{x}_proj.weight", "ws_" + x) for x in ("gate", "up", "down")]
    if m.shared_gate:
        rules.append(_linear(b + "shared_expert_gate.weight", "shared_gate"))
    return rules


def _gpt2_layer(cfg: ModelConfig, p: str) -> list[Rule]:
    D = cfg.D
    return [*_norm(cfg, p + "ln_1", "attn_norm"), *_norm(cfg, p + "ln_2", "mlp_norm"),
            _split(p + "attn.c_attn.weight", {"wq": D, "wk": D, "wv": D}, False),
            _split(p + "attn.c_attn.bias", {"bq": D, "bk": D, "bv": D}, False),
            _same(p + "attn.c_proj.weight", "wo"), _same(p + "attn.c_proj.bias", "bo"),
            _same(p + "mlp.c_fc.weight", "w_in"), _same(p + "mlp.c_fc.bias", "b_in"),
            _same(p + "mlp.c_proj.weight", "w_out"), _same(p + "mlp.c_proj.bias", "b_out")]


def layer_rules(cfg: ModelConfig, family: str, i: int, prefix: str = "") -> list[Rule]:
    """The rules that fill layer i's dict (`prefix` is GPT-2's optional "transformer.")."""
    if family == "gpt2":
        return _gpt2_layer(cfg, f"{prefix}h.{i}.")
    p = f"model.layers.{i}."
    rules = _norm(cfg, p + "input_layernorm", "attn_norm")
    if family == "gemma2":
        rules += [_same(p + "post_attention_layernorm.weight", "post_attn_norm"),
                  _same(p + "pre_feedforward_layernorm.weight", "mlp_norm"),
                  _same(p + "post_feedforward_layernorm.weight", "post_mlp_norm")]
    else:
        rules += _norm(cfg, p + "post_attention_layernorm", "mlp_norm")
    a = p + "self_attn."
    rules += _latent_attention(cfg, a) if cfg.mla is not None else _attention(cfg, family, a)
    rules += _moe(cfg, family, p) if cfg.is_moe_layer(i) else _mlp(cfg, family, p + "mlp.",
                                                                     cfg.F)
    return rules


def top_rules(cfg: ModelConfig, family: str, prefix: str = "") -> list[Rule]:
    """The rules for the embedding, the final norm, the unembedding and learned positions."""
    if family == "gpt2":
        rules = [_same(prefix + "wte.weight", "embed"), _same(prefix + "wpe.weight", "pos_embed"),
                 *_norm(cfg, prefix + "ln_f", "final_norm")]
    else:
        rules = [_same("model.embed_tokens.weight", "embed"),
                 *_norm(cfg, "model.norm", "final_norm")]
    if not cfg.tied_embeddings:
        rules.append(_linear("lm_head.weight", "unembed"))
    return rules


def ignorable(cfg: ModelConfig, family: str, name: str) -> bool:
    """Tensors a checkpoint may carry that the model does not use: rotary caches, a copy of
    tied embeddings, GPT-2's stored causal masks, DeepSeek-V3's multi-token-prediction
    layers (used for speculative decoding, past layer L)."""
    if name.endswith("rotary_emb.inv_freq") or (cfg.tied_embeddings and name == "lm_head.weight"):
        return True
    if family == "gpt2" and (name.endswith(".attn.bias") or name.endswith(".attn.masked_bias")):
        return True
    if family == "deepseek_v3" and name.startswith("model.layers."):
        index = name.split(".")[2]
        return index.isdigit() and int(index) >= cfg.L
    return False
