"""Model configurations in the book's notation.

A transformer, for the purposes of this book, is a handful of integers:

    L layers · D model width · F MLP hidden width · N query heads · K key/value heads ·
    H head dimension · V vocabulary

plus switches for the ways today's models differ (gated or plain MLP, biases, norms, soft-
capping, sliding windows, rotary scaling) and three optional records for what a letter cannot
say (`features`: a mixture of experts, latent attention, rotary scaling). Everything the book
predicts — parameter bytes, KV-cache bytes, FLOPs, step times — is a function of a
`ModelConfig`, and so is everything the library allocates. That is what lets a chapter check a
prediction against the arrays the model really holds.

Named configurations live in `presets` (the models the sources discuss, their invented models,
today's families, tiny ones for a laptop CPU); `hf_config` reads a Hugging Face ``config.json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from inferbook.model.config_checks import ACTIVATION_NAMES, check_config
from inferbook.model.features import MLA, ConfigError, MoE, RopeScaling

__all__ = ["ModelConfig", "ConfigError", "ACTIVATION_NAMES"]


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer, in the book's letters.

    Attributes:
      L: number of layers.
      D: model width (d_model).
      F: hidden width of the MLP.
      N: number of query heads.
      K: number of key/value heads. K == N is multi-head attention, 1 < K < N grouped-query
        attention, K == 1 multi-query attention. N must be a multiple of K.
      H: head dimension. Not necessarily D // N (the worked problems' model has N·H = 2·D).
      V: vocabulary size.
      mlp: "gated" (SwiGLU/GeGLU: down(act(gate x) * up x), three matrices, as in LLaMA) or
        "plain" (out(act(in x)), two matrices, as in GPT-2, GPT-3, OPT and kipply's models).
      activation: "silu", "gelu" (exact), "gelu_tanh" (the tanh approximation: GPT-2's
        "gelu_new", Gemma's "gelu_pytorch_tanh") or "relu".
      tied_embeddings: if True the unembedding is the transpose of the embedding.
      norm_eps: epsilon of the norms.
      rope_theta: base of the rotary position embedding's frequencies.
      window: sliding-window length for local attention, or None for full attention.
      max_seq_len: the context length the model was trained for; the number of position
        embeddings when `positions` is "learned".
      name: a label for tables and plots.

    Switches of particular families (all off by default, which is LLaMA), grouped by the part
    of the model they change:

    The block. norm_position: where each block's norms sit, "pre" (before attention and
      MLP: Llama), "post" (on their outputs, before the residual add: OLMo-2) or "both"
      (Gemma-2/3's sandwich). residual: "sequential" (x + attn, then + mlp) or "parallel"
      (x + attn(norm x) + mlp(norm' x): GPT-NeoX, Phi, StableLM, Cohere); shared_norm: the
      parallel branches read one norm's output (Phi, StableLM, Cohere) instead of two
      (GPT-NeoX). residual_multiplier: a factor on each branch before the add (Granite).
    Norms. norm: "rms" (RMSNorm), "layer" (LayerNorm with a bias: GPT-2, GPT-NeoX, Phi,
      StableLM, StarCoder2) or "layer_no_bias" (Cohere); norm_plus_one: the gain is (1 + w)
      (Gemma).
    Attention. qkv_bias, o_bias: biases on the q/k/v projections and on the output.
      qk_norm: queries and keys are normalised before the rotation; qk_norm_scope says over
      what: "head" (each head, one gain of H shared by the heads: Qwen3, Gemma-3, Phi),
      "each_head" (each head with its own gain, [N, H]: Cohere, StableLM) or "whole" (the
      whole projection, N·H and K·H wide: OLMo-2, OLMoE); qk_norm_kind: its norm when not
      the model's own (StableLM's LayerNorm without a bias). qkv_clip: q, k and v clipped to
      ±c (OLMoE's clip_qkv). query_scale: the softmax's scale on q·k; None is 1/√H (Gemma's
      query_pre_attn_scalar^(-1/2), Granite's attention_multiplier). attn_softcap,
      final_softcap: c·tanh(x / c) of the attention and output logits (Gemma-2).
    Positions. positions: "rope" or "learned" (GPT-2). rotary_fraction: the share of each
      head rotated, the first ⌊H·f⌋ channels (GPT-NeoX 0.25, Phi-2 0.4); the rest carry no
      position. rope_scaling (`RopeScaling`) and rope_interleaved (rotate pairs (2i, 2i+1):
      DeepSeek, Cohere). nope_layers: layers with no positions at all (SmolLM3's every
      fourth). local_rope_theta: the rotary base of sliding-window layers, which are then
      unscaled (Gemma-3: 10,000 locally, 1,000,000 with linear scaling globally).
    Windows. layer_types: per layer "full" or "sliding" (Gemma-2/3, Qwen2); None means every
      layer is "sliding" when `window` is set.
    Embeddings and logits. embed_scale: embeddings × √D (Gemma); embed_multiplier: a further
      factor (Granite). unembed_bias: a bias on the logits (Phi). logit_multiplier: a factor
      on the logits (Cohere's logit_scale, 1 / Granite's logits_scaling).
    Experts and latents. moe: a mixture of experts in place of the MLP (`MoE`); mla:
      multi-head latent attention (`MLA`), then K == N and H == H_nope + H_rope.
    """

    L: int
    D: int
    F: int
    N: int
    K: int
    H: int
    V: int
    mlp: Literal["gated", "plain"] = "gated"
    activation: Literal["silu", "gelu", "gelu_tanh", "relu"] = "silu"
    tied_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10_000.0
    window: int | None = None
    max_seq_len: int = 4096
    name: str = "custom"
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    query_scale: float | None = None
    attn_softcap: float | None = None
    final_softcap: float | None = None
    layer_types: tuple[Literal["full", "sliding"], ...] | None = None
    positions: Literal["rope", "learned"] = "rope"
    rope_scaling: RopeScaling | None = None
    rope_interleaved: bool = False
    norm: Literal["rms", "layer", "layer_no_bias"] = "rms"
    norm_plus_one: bool = False
    embed_scale: bool = False
    moe: MoE | None = None
    mla: MLA | None = None
    norm_position: Literal["pre", "post", "both"] = "pre"
    residual: Literal["sequential", "parallel"] = "sequential"
    shared_norm: bool = False
    qk_norm_scope: Literal["head", "each_head", "whole"] = "head"
    qk_norm_kind: Literal["rms", "layer", "layer_no_bias"] | None = None
    qkv_clip: float | None = None
    rotary_fraction: float = 1.0
    nope_layers: tuple[int, ...] = ()
    local_rope_theta: float | None = None
    unembed_bias: bool = False
    embed_multiplier: float = 1.0
    residual_multiplier: float = 1.0
    logit_multiplier: float = 1.0

    def __post_init__(self) -> None:
        check_config(self)

    # Derived sizes -------------------------------------------------------------------------

    @property
    def G(self) -> int:
        """Query heads per KV head (the GQA group size), N / K."""
        return self.N // self.K

    @property
    def q_dim(self) -> int:
        """Width of all query heads together, N·H."""
        return self.N * self.H

    @property
    def kv_dim(self) -> int:
        """Width of all key (or value) heads together, K·H."""
        return self.K * self.H

    @property
    def attention_kind(self) -> str:
        """'MLA', 'MHA', 'GQA' or 'MQA'."""
        if self.mla is not None:
            return "MLA"
        if self.K == self.N:
            return "MHA"
        return "MQA" if self.K == 1 else "GQA"

    def layer_window(self, i: int) -> int | None:
        """The sliding window of layer i, or None where the layer attends to the whole past."""
        if self.window is None:
            return None
        if self.layer_types is None or self.layer_types[i] == "sliding":
            return self.window
        return None

    @property
    def windows(self) -> tuple[int | None, ...]:
        """Each layer's window (None: full attention), layer by layer."""
        return tuple(self.layer_window(i) for i in range(self.L))

    @property
    def rotary_dim(self) -> int:
        """Channels of each head that rotate, ⌊H · rotary_fraction⌋ (as transformers rounds)."""
        return int(self.H * self.rotary_fraction)

    def layer_rope(self, i: int) -> tuple[float, RopeScaling | None] | None:
        """Layer i's rotary base and scaling rule; None for a layer without positions (NoPE,
        or learned positions). Sliding layers use `local_rope_theta`, unscaled, when set."""
        if self.positions != "rope" or i in self.nope_layers:
            return None
        if self.local_rope_theta is not None and self.layer_window(i) is not None:
            return self.local_rope_theta, None
        return self.rope_theta, self.rope_scaling

    @property
    def block_norms(self) -> tuple[str, ...]:
        """The norms of each layer's block, by name: "attn_norm" and "mlp_norm" before the
        branches, "post_attn_norm" and "post_mlp_norm" after them."""
        if self.residual == "parallel":
            return ("attn_norm",) if self.shared_norm else ("attn_norm", "mlp_norm")
        pre, post = ("attn_norm", "mlp_norm"), ("post_attn_norm", "post_mlp_norm")
        return {"pre": pre, "post": post, "both": pre + post}[self.norm_position]

    @property
    def sandwich_norm(self) -> bool:
        """Each branch normalised both before and after (Gemma-2/3): norm_position "both"."""
        return self.norm_position == "both"

    def is_moe_layer(self, i: int) -> bool:
        """True when layer i's MLP is a mixture of experts."""
        return self.moe is not None and i not in self.moe.dense_layers

    @property
    def position_limit(self) -> int | None:
        """The most tokens (prompt plus new) one sequence may hold: `max_seq_len`, or None
        under dynamic rotary scaling, which exists to run past the trained context (its base
        grows with the length, so there `max_seq_len` is where scaling starts, not a limit)."""
        if self.rope_scaling is not None and self.rope_scaling.kind == "dynamic":
            return None
        return self.max_seq_len

    @property
    def attention_scale(self) -> float:
        """The factor on q·k before the softmax: `query_scale`, or 1/√H."""
        return self.query_scale if self.query_scale is not None else self.H ** -0.5

    def replace(self, **changes: Any) -> "ModelConfig":
        """A copy with some fields changed, e.g. ``cfg.replace(K=1)`` for the MQA variant."""
        return dataclasses.replace(self, **changes)
