"""Every parameter of a transformer, tensor by tensor, from its config alone.

`tensors(cfg)` lists the weights of each family the library describes (Llama, Qwen2/3 with
their biases and q/k norms of every scope, Gemma-2/3's four norms per layer, OLMo-2's two
after the branches, a parallel block's one or two, LayerNorms with and without biases,
GPT-2's learned positions, Phi's logit bias, mixtures of experts with routers, shared experts
and score biases, DeepSeek's latent attention) with their shapes, how many layers hold them
and the role they play. The
counts the rest of the book uses are sums over that one list, so a feature is counted in one
place: `param_counts` groups it by component, `param_count` adds it up, `active_param_count`
keeps what one token touches, and `quant.weight_bytes` prices it in any storage format.

Shapes follow Hugging Face's modeling files (transformers/models/<family>/modeling_<family>.py),
whose parameter counts the tests match for each family's published config.json.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferbook.model.config import ModelConfig

__all__ = ["Tensor", "tensors", "param_counts", "param_count", "active_param_count",
           "expected_experts", "params_read", "COMPONENTS"]

# Components, in the order tables print them.
COMPONENTS = ("embedding", "positions", "attention", "mlp", "experts", "shared_experts",
              "router", "norms", "unembedding")


@dataclass(frozen=True)
class Tensor:
    """`count` copies (one per layer that has it) of a weight of `shape`.

    role: "matrix" (a layer's matmul weight: what a quantized format stores in fewer bits),
    "expert" (a routed expert's matrix: a token reads only k of E), "vector" (norm gains,
    biases, score biases), "router" (the router's matrix, kept in full precision by every
    quantization recipe), "embedding" (a table a token looks one row up in) or "unembedding".
    """

    name: str
    component: str
    shape: tuple[int, ...]
    count: int
    role: str

    @property
    def size(self) -> int:
        """Elements of all copies together."""
        return math.prod(self.shape) * self.count


def _attention(cfg: ModelConfig, L: int) -> list[Tensor]:
    D, N, K, H = cfg.D, cfg.N, cfg.K, cfg.H
    out = []
    if cfg.mla is not None:
        # DeepSeek-V2/V3: queries through a rank-R_q bottleneck (or straight), keys and values
        # from a latent of R_kv numbers plus one shared rotary key of H_rope.
        m = cfg.mla
        if m.R_q is not None:
            out += [Tensor("q_a_proj", "attention", (D, m.R_q), L, "matrix"),
                    Tensor("q_a_norm", "attention", (m.R_q,), L, "vector"),
                    Tensor("q_b_proj", "attention", (m.R_q, N * m.H_qk), L, "matrix")]
        else:
            out.append(Tensor("q_proj", "attention", (D, N * m.H_qk), L, "matrix"))
        out += [Tensor("kv_a_proj", "attention", (D, m.R_kv + m.H_rope), L, "matrix"),
                Tensor("kv_a_norm", "attention", (m.R_kv,), L, "vector"),
                Tensor("kv_b_proj", "attention", (m.R_kv, N * (m.H_nope + m.H_v)), L, "matrix"),
                Tensor("o_proj", "attention", (N * m.H_v, D), L, "matrix")]
        if cfg.qkv_bias:
            out.append(Tensor("kv_a_bias", "attention", (m.R_kv + m.H_rope + (m.R_q or 0),),
                              L, "vector"))
    else:
        out += [Tensor("wq", "attention", (D, N * H), L, "matrix"),
                Tensor("wk", "attention", (D, K * H), L, "matrix"),
                Tensor("wv", "attention", (D, K * H), L, "matrix"),
                Tensor("wo", "attention", (N * H, D), L, "matrix")]
        if cfg.qkv_bias:
            out.append(Tensor("qkv_bias", "attention", (N * H + 2 * K * H,), L, "vector"))
        if cfg.qk_norm:
            # one gain of H shared by the heads, a gain per head, or one over the whole
            # projection (N·H and K·H: the same count); LayerNorm adds its bias.
            width = 2 * H if cfg.qk_norm_scope == "head" else (N + K) * H
            biased = (cfg.qk_norm_kind or cfg.norm) == "layer"
            out.append(Tensor("qk_norms", "attention", ((1 + biased) * width,), L, "vector"))
    if cfg.o_bias:
        out.append(Tensor("o_bias", "attention", (D,), L, "vector"))
    return out


def _mlp(cfg: ModelConfig, F: int, layers: int, component: str, role: str,
         copies: int = 1) -> list[Tensor]:
    """A gated (three matrices) or plain (two) MLP of width F in `layers` layers."""
    if not layers:
        return []
    D, n = cfg.D, 3 if cfg.mlp == "gated" else 2
    out = [Tensor(f"{component}_in", component, (D, (n - 1) * F), layers * copies, role),
           Tensor(f"{component}_out", component, (F, D), layers * copies, role)]
    if cfg.mlp_bias and component == "mlp":
        out.append(Tensor("mlp_bias", "mlp", ((n - 1) * F + D,), layers, "vector"))
    return out


def tensors(cfg: ModelConfig) -> list[Tensor]:
    """Every weight of `cfg`: name, component, shape, number of layers holding it, role."""
    D, V, L = cfg.D, cfg.V, cfg.L
    moe_layers = 0 if cfg.moe is None else L - len(set(cfg.moe.dense_layers))
    out = [Tensor("embed", "embedding", (V, D), 1, "embedding")]
    if cfg.positions == "learned":
        out.append(Tensor("positions", "positions", (cfg.max_seq_len, D), 1, "embedding"))
    out += _attention(cfg, L)
    out += _mlp(cfg, cfg.F, L - moe_layers, "mlp", "matrix")
    if cfg.moe is not None and moe_layers:
        moe = cfg.moe
        # Mixtral's experts are gated like its dense MLP; every family's experts are gated.
        out += [Tensor("experts_in", "experts", (D, 2 * moe.F), moe_layers * moe.E, "expert"),
                Tensor("experts_out", "experts", (moe.F, D), moe_layers * moe.E, "expert"),
                Tensor("router", "router", (D, moe.E), moe_layers, "router")]
        if moe.score_bias:
            out.append(Tensor("score_bias", "router", (moe.E,), moe_layers, "vector"))
        if moe.shared_F:
            out += [Tensor("shared_in", "shared_experts", (D, 2 * moe.shared_F), moe_layers,
                           "matrix"),
                    Tensor("shared_out", "shared_experts", (moe.shared_F, D), moe_layers,
                           "matrix")]
        if moe.shared_gate:
            out.append(Tensor("shared_gate", "shared_experts", (D, 1), moe_layers, "router"))
    per_norm = 2 if cfg.norm == "layer" else 1              # LayerNorm has a bias too
    block_norms = len(cfg.block_norms)                      # 1 (one parallel norm) to 4
    out.append(Tensor("norms", "norms", (per_norm * D,), block_norms * L + 1, "vector"))
    if not cfg.tied_embeddings:
        out.append(Tensor("unembed", "unembedding", (D, V), 1, "unembedding"))
    if cfg.unembed_bias:
        out.append(Tensor("unembed_bias", "unembedding", (V,), 1, "vector"))
    return out


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters per component (`COMPONENTS`); components a model lacks count 0.

    For LLaMA: attention = L·(2·D·N·H + 2·D·K·H), mlp = 3·L·D·F, norms = (2L + 1)·D, and the
    (un)embedding V·D each, the unembedding 0 when tied to the embedding.
    """
    out = dict.fromkeys(COMPONENTS, 0)
    for t in tensors(cfg):
        out[t.component] += t.size
    return out


def param_count(cfg: ModelConfig) -> int:
    """Total parameters, each tied tensor counted once (as ``model.num_parameters()``)."""
    return sum(t.size for t in tensors(cfg))


def active_param_count(cfg: ModelConfig) -> int:
    """Parameters one token uses: all of them, except that a token reaches k of the E routed
    experts of each MoE layer. Mixtral-8x7B: 12.9 of 46.7 billion; DeepSeek-V3: 37 of 671.
    The embedding table counts whole, as the model cards count it."""
    total = param_count(cfg)
    if cfg.moe is None:
        return total
    routed = sum(t.size for t in tensors(cfg) if t.role == "expert")
    return total - routed + routed * cfg.moe.k // cfg.moe.E


def expected_experts(E: int, k: int, tokens: int) -> float:
    """Expected number of distinct experts a batch of `tokens` tokens sends work to, in one
    layer that routes each token to k of E experts: E · (1 − (1 − k/E)^tokens).

    Derivation: a token picks k distinct experts; if routing is balanced (what the load-
    balancing losses of Mixtral, Qwen-MoE and DeepSeek train for), each expert is among its
    picks with probability k/E, and misses it with probability 1 − k/E. Tokens route
    independently, so an expert receives none of B tokens with probability (1 − k/E)^B, and
    by linearity of expectation the number of experts that receive at least one is E times
    the complement. It is k at B = 1 and tends to E: a decode step of a large batch reads
    every expert. Skewed routing touches fewer experts for the same marginals (1 − (1 − p)^B
    is concave in p), so this is an upper bound on the experts a step reads.
    """
    if E <= 0 or not 0 < k <= E or tokens < 0:
        raise ValueError(f"need 0 < k <= E and tokens >= 0, got E={E}, k={k}, tokens={tokens}")
    return E * -math.expm1(tokens * math.log1p(-k / E)) if k < E else float(E)


def params_read(cfg: ModelConfig, tokens: int) -> float:
    """Parameters a forward pass over `tokens` tokens reads from memory (in expectation).

    Dense models read every weight once whatever the batch. An MoE layer reads the experts
    its tokens were routed to: `expected_experts` of E, so a decode step's weight traffic
    grows with the batch from the active parameters (one token) to all of them.
    """
    total = param_count(cfg)
    if cfg.moe is None:
        return float(total)
    routed = sum(t.size for t in tensors(cfg) if t.role == "expert")
    touched = expected_experts(cfg.moe.E, cfg.moe.k, tokens) / cfg.moe.E
    return total - routed + routed * touched
