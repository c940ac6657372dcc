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
import math
from dataclasses import dataclass
from typing import Any, Literal

from inferbook.model.features import MLA, ConfigError, MoE, RopeScaling

__all__ = ["ModelConfig", "ConfigError", "ACTIVATION_NAMES"]

ACTIVATION_NAMES = ("silu", "gelu", "gelu_tanh", "relu")


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

    Switches of particular families (all off by default, which is LLaMA):
      qkv_bias, o_bias, mlp_bias: biases on the q/k/v projections (Qwen2, GPT-2), on the
        attention output (GPT-2) and on the MLP's matrices (GPT-2).
      qk_norm: an RMSNorm over each head's queries and keys, before the rotation (Qwen3).
      query_scale: the softmax's scale on q·k; None is 1/√H. Gemma-2 uses
        query_pre_attn_scalar^(-1/2).
      attn_softcap, final_softcap: soft-capping c·tanh(x / c) of the attention logits and of
        the output logits (Gemma-2: 50 and 30); None for none.
      layer_types: per layer "full" or "sliding" (Gemma-2 alternates; Qwen2 windows only the
        upper layers); None means every layer is "sliding" when `window` is set.
      positions: "rope" (rotary) or "learned" (absolute position embeddings, GPT-2).
      rope_scaling: how rotary frequencies are stretched for long contexts (`RopeScaling`).
      rope_interleaved: rotate adjacent channel pairs (2i, 2i+1) instead of halves (i, i+H/2)
        (DeepSeek's checkpoints).
      norm: "rms" (RMSNorm) or "layer" (LayerNorm with a bias, GPT-2).
      norm_plus_one: the norm's gain is (1 + w) rather than w (Gemma).
      sandwich_norm: each block's output is normalised too before the residual add (Gemma-2's
        post-attention and post-feedforward norms).
      embed_scale: embeddings are multiplied by √D (Gemma).
      moe: a mixture of experts in place of the MLP (`MoE`), or None.
      mla: multi-head latent attention (`MLA`), or None. Then K == N and H == H_nope + H_rope.
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
    norm: Literal["rms", "layer"] = "rms"
    norm_plus_one: bool = False
    sandwich_norm: bool = False
    embed_scale: bool = False
    moe: MoE | None = None
    mla: MLA | None = None

    def __post_init__(self) -> None:
        for letter in ("L", "D", "F", "N", "K", "H", "V", "max_seq_len"):
            value = getattr(self, letter)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{letter} must be a positive integer, got {value!r}")
        if self.N % self.K:
            raise ConfigError(f"N={self.N} query heads must be a multiple of K={self.K} KV heads")
        if self.positions == "rope" and self.mla is None and self.H % 2:
            raise ConfigError(f"H={self.H} must be even for rotary embeddings")
        if self.mlp not in ("gated", "plain"):
            raise ConfigError(f"mlp must be 'gated' or 'plain', got {self.mlp!r}")
        if self.activation not in ACTIVATION_NAMES:
            raise ConfigError(f"activation must be one of {', '.join(ACTIVATION_NAMES)}, "
                              f"got {self.activation!r}")
        if self.norm not in ("rms", "layer"):
            raise ConfigError(f"norm must be 'rms' or 'layer', got {self.norm!r}")
        if self.positions not in ("rope", "learned"):
            raise ConfigError(f"positions must be 'rope' or 'learned', got {self.positions!r}")
        if self.window is not None and (not isinstance(self.window, int)
                                        or isinstance(self.window, bool) or self.window <= 0):
            raise ConfigError(f"window must be a positive integer or None, got {self.window!r}")
        for name in ("norm_eps", "rope_theta", "query_scale", "attn_softcap", "final_softcap"):
            value = getattr(self, name)
            if value is None and name not in ("norm_eps", "rope_theta"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a positive finite number, got {value!r}")
        if self.layer_types is not None:
            if len(self.layer_types) != self.L or \
                    any(t not in ("full", "sliding") for t in self.layer_types):
                raise ConfigError(f"layer_types must give 'full' or 'sliding' for each of the "
                                  f"{self.L} layers, got {self.layer_types!r}")
            if "sliding" in self.layer_types and self.window is None:
                raise ConfigError("layer_types has sliding layers but no window is set")
        for name, kind in (("moe", MoE), ("mla", MLA), ("rope_scaling", RopeScaling)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise ConfigError(f"{name} must be a {kind.__name__} or None, got {value!r}")
        if self.moe is not None and any(i >= self.L for i in self.moe.dense_layers):
            raise ConfigError(f"moe.dense_layers {self.moe.dense_layers} name layers past "
                              f"L={self.L}")
        if self.mla is not None:
            if self.K != self.N:
                raise ConfigError(f"latent attention has one key per query head: K={self.K} "
                                  f"must equal N={self.N}")
            if self.H != self.mla.H_qk:
                raise ConfigError(f"with latent attention H is H_nope + H_rope = "
                                  f"{self.mla.H_qk}, got H={self.H}")
            if self.positions != "rope":
                raise ConfigError("latent attention needs rotary positions")

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
