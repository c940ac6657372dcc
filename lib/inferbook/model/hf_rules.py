"""Rules that turn a checkpoint's tensors into the library's leaves, for every packing.

A `Rule` names the checkpoint tensors it reads, the library leaves it yields, and how: a
transpose (Hugging Face's `weight[out, in]` to the library's `[in, out]`), a copy (vectors,
GPT-2's Conv1D weights, already `[in, out]`), a cut of one packed tensor into parts (Phi-3's
qkv_proj, GPT-2's c_attn, GPT-NeoX's query_key_value with its heads interleaved), a stack of
many tensors into one (a mixture's experts, StableLM's per-head norms). The rule sets of the
layouts that pack tensors their own way — latent attention, the experts of each MoE family,
GPT-2's layer — are here too; `hf_names` decides which family uses which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from inferbook.model.config import ModelConfig
from inferbook.model.safetensors_io import CheckpointError

__all__ = ["Rule", "linear", "same", "split", "per_head_qkv", "stacked_heads", "experts",
           "latent_attention_rules", "moe_rules", "gpt2_layer_rules"]


@dataclass(frozen=True)
class Rule:
    """Checkpoint tensors `sources` -> library `leaves`, by `build(arrays) -> {leaf: array}`.

    `mapping` says the same as `build` in a form that a reader of *part* of a leaf can
    follow (`parallel.checkpoint_shards` reads only a process's blocks): "transpose" (the
    leaf is the source transposed), "same", "split" (leaf `name` is columns
    [start, start + width) of the source, transposed first when `transposed`; `parts` lists
    (name, width) in order), "stack" (leaf[e] is sources[e] transposed), or "" where only
    `build` knows.
    """

    sources: tuple[str, ...]
    leaves: tuple[str, ...]
    build: Callable[[list[np.ndarray]], dict[str, np.ndarray]]
    mapping: str = ""
    parts: tuple[tuple[str, int], ...] = ()
    transposed: bool = False


def linear(src: str, lib: str) -> Rule:                 # [out, in] -> [in, out]
    return Rule((src,), (lib,), lambda ws: {lib: ws[0].T}, "transpose")


def same(src: str, lib: str) -> Rule:                   # vectors, and GPT-2's Conv1D
    return Rule((src,), (lib,), lambda ws: {lib: ws[0]}, "same")


def split(src: str, parts: dict[str, int], transpose: bool) -> Rule:
    """One packed tensor cut into consecutive parts of the given widths along its output
    dimension: rows of a [out, in] weight (transposed first), columns of GPT-2's [in, out]
    Conv1D weight, or a bias."""
    def build(ws):
        w = ws[0].T if transpose else ws[0]
        if w.shape[-1] != sum(parts.values()):
            return {name: w for name in parts}           # the shape check will name it
        edges = np.cumsum(list(parts.values()))[:-1]
        return dict(zip(parts, np.split(w, edges, axis=-1)))
    return Rule((src,), tuple(parts), build, "split", tuple(parts.items()), transpose)


def per_head_qkv(src: str, N: int, H: int, names: tuple[str, str, str]) -> Rule:
    """GPT-NeoX's query_key_value: its output rows are head 0's q, k, v (H each), then head
    1's, ...; a weight [3·N·H, D] (transposed first) or a bias [3·N·H]."""
    def build(ws):
        w = ws[0].T if ws[0].ndim == 2 else ws[0]
        if w.shape[-1] != 3 * N * H:
            return {name: w for name in names}           # the shape check will name it
        heads = w.reshape(*w.shape[:-1], N, 3, H)
        return {name: heads[..., j, :].reshape(*w.shape[:-1], N * H)
                for j, name in enumerate(names)}
    return Rule((src,), names, build)


def stacked_heads(pattern: str, heads: int, lib: str) -> Rule:
    """StableLM's per-head norms, `pattern.format(n)` [H] each, stacked into [heads, H]."""
    return Rule(tuple(pattern.format(n) for n in range(heads)), (lib,),
                lambda ws: {lib: np.stack(ws)})


def experts(pattern: str, E: int, lib: str) -> Rule:
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
    return Rule(sources, (lib,), build, "stack")


def latent_attention_rules(cfg: ModelConfig, a: str) -> list[Rule]:
    """DeepSeek's latent attention under the attention prefix `a`."""
    if cfg.mla.R_q is None:
        rules = [linear(a + "q_proj.weight", "wq")]
    else:
        rules = [linear(a + "q_a_proj.weight", "wq_a"), same(a + "q_a_layernorm.weight",
                                                                "q_a_norm"),
                 linear(a + "q_b_proj.weight", "wq_b")]
        if cfg.qkv_bias:
            rules.append(same(a + "q_a_proj.bias", "bq_a"))
    rules += [linear(a + "kv_a_proj_with_mqa.weight", "wkv_a"),
              same(a + "kv_a_layernorm.weight", "kv_a_norm"),
              linear(a + "kv_b_proj.weight", "wkv_b"), linear(a + "o_proj.weight", "wo")]
    if cfg.qkv_bias:
        rules.append(same(a + "kv_a_proj_with_mqa.bias", "bkv_a"))
    if cfg.o_bias:
        rules.append(same(a + "o_proj.bias", "bo"))
    return rules


def moe_rules(cfg: ModelConfig, family: str, p: str) -> list[Rule]:
    """A mixture of experts in layer prefix `p`: Mixtral's names, or Qwen's (and OLMoE's,
    DeepSeek's), with shared experts, their gate and DeepSeek-V3's score bias."""
    m = cfg.moe
    if family == "mixtral":
        b = p + "block_sparse_moe."
        return [linear(b + "gate.weight", "router"),
                experts(b + "experts.{}.w1.weight", m.E, "we_gate"),
                experts(b + "experts.{}.w3.weight", m.E, "we_up"),
                experts(b + "experts.{}.w2.weight", m.E, "we_down")]
    b = p + "mlp."
    rules = [linear(b + "gate.weight", "router")]
    rules += [experts(b + f"experts.{{}}.{x}_proj.weight", m.E, "we_" + x)
              for x in ("gate", "up", "down")]
    if m.score_bias:
        rules.append(same(b + "gate.e_score_correction_bias", "router_bias"))
    if m.shared_F:
        shared = b + ("shared_expert." if family == "qwen2_moe" else "shared_experts.")
        rules += [linear(shared + f"{x}_proj.weight", "ws_" + x) for x in ("gate", "up", "down")]
    if m.shared_gate:
        rules.append(linear(b + "shared_expert_gate.weight", "shared_gate"))
    return rules


def gpt2_layer_rules(cfg: ModelConfig, p: str) -> list[Rule]:
    """GPT-2's layer: Conv1D weights already [in, out], c_attn packing Q, K, V."""
    D = cfg.D
    return [same(p + "ln_1.weight", "attn_norm"), same(p + "ln_1.bias", "attn_norm_bias"),
            same(p + "ln_2.weight", "mlp_norm"), same(p + "ln_2.bias", "mlp_norm_bias"),
            split(p + "attn.c_attn.weight", {"wq": D, "wk": D, "wv": D}, False),
            split(p + "attn.c_attn.bias", {"bq": D, "bk": D, "bv": D}, False),
            same(p + "attn.c_proj.weight", "wo"), same(p + "attn.c_proj.bias", "bo"),
            same(p + "mlp.c_fc.weight", "w_in"), same(p + "mlp.c_fc.bias", "b_in"),
            same(p + "mlp.c_proj.weight", "w_out"), same(p + "mlp.c_proj.bias", "b_out")]
