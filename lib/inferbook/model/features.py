"""The optional parts of a transformer that a few integers do not describe.

`ModelConfig` holds the letters every transformer has (L, D, F, N, K, H, V). Three features
of today's models need more than a letter, so each gets a small frozen record of its own:

* `RopeScaling` — how a model stretches its rotary frequencies past the context it was
  trained on (Llama-3.x's "llama3", Qwen's and DeepSeek's "yarn", Phi-3's "longrope", the
  older "linear" and "dynamic" NTK). It changes the angles, never a shape or a byte.
* `MoE` — a mixture of experts in place of the MLP (Mixtral, Qwen-MoE, DeepSeek): E experts
  of width F_e, of which a router picks k per token, plus experts every token uses.
* `MLA` — DeepSeek's multi-head latent attention: keys and values are decompressed from a
  shared latent of R_kv numbers per token, and the cache holds that latent (plus one small
  rotary key) instead of K and V.

All are frozen and hashable, like `ModelConfig`, so a config can be a static argument of a
jitted function. Hugging Face's names for each field are given beside it. `ConfigError`, what
every check of a configuration raises, is defined here, where the first checks live
(`config` imports it from here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["RopeScaling", "MoE", "MLA", "ROPE_KINDS", "ConfigError",
           "CheckpointError"]

ROPE_KINDS = ("linear", "dynamic", "llama3", "yarn", "longrope")


class ConfigError(ValueError):
    """A configuration the library cannot build, with a message that names the problem."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded, with a message naming the file or tensor.

    Defined here, with no import beyond the standard library, so that what only names the
    book's models (the command line's parser, the estimator page in the browser) can catch it
    without importing numpy; `safetensors_io` and `model_store` raise it."""


def _positive(owner: str, **values: float | int | None) -> None:
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                or value != value or value == float("inf"):
            raise ConfigError(f"{owner}.{name} must be a positive finite number, got {value!r}")


@dataclass(frozen=True)
class RopeScaling:
    """A rotary-embedding scaling rule, as Hugging Face's ``rope_scaling`` / ``rope_parameters``.

    Attributes:
      kind: "linear" (positions divided by `factor`), "dynamic" (NTK-aware base that grows
        with the sequence), "llama3" (low frequencies divided by `factor`, high ones kept,
        a smooth ramp between), "yarn" (NTK-by-parts plus an attention temperature) or
        "longrope" (per-frequency factors, short or long).
      factor: the context extension factor (``factor``).
      original_max_len: the context the model was pre-trained on
        (``original_max_position_embeddings``).
      low_freq_factor, high_freq_factor: llama3's ramp (``low_freq_factor``,
        ``high_freq_factor``).
      beta_fast, beta_slow: yarn's ramp, in rotations (``beta_fast``, ``beta_slow``).
      attention_factor: yarn's and longrope's scale on cos and sin (``attention_factor``);
        None means the rule's own default.
      mscale, mscale_all_dim: DeepSeek's yarn variant (``mscale``, ``mscale_all_dim``).
      short_factor, long_factor: longrope's per-frequency factors (H/2 each).
    """

    kind: Literal["linear", "dynamic", "llama3", "yarn", "longrope"]
    factor: float = 1.0
    original_max_len: int | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    short_factor: tuple[float, ...] | None = None
    long_factor: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in ROPE_KINDS:
            raise ConfigError(f"rope scaling kind must be one of {', '.join(ROPE_KINDS)}, "
                              f"got {self.kind!r}")
        _positive("rope_scaling", factor=self.factor, original_max_len=self.original_max_len,
                  low_freq_factor=self.low_freq_factor, high_freq_factor=self.high_freq_factor,
                  beta_fast=self.beta_fast, beta_slow=self.beta_slow,
                  attention_factor=self.attention_factor)
        if self.kind == "llama3" and not self.high_freq_factor > self.low_freq_factor:
            raise ConfigError("rope_scaling: llama3 needs high_freq_factor > low_freq_factor")
        if self.kind == "longrope" and (self.short_factor is None or self.long_factor is None):
            raise ConfigError("rope_scaling: longrope needs short_factor and long_factor")


@dataclass(frozen=True)
class MoE:
    """A mixture-of-experts MLP: a router sends each token to k of E experts.

    Attributes:
      E: routed experts per MoE layer (``num_local_experts``, ``num_experts``,
        ``n_routed_experts``).
      k: experts each token is routed to (``num_experts_per_tok``).
      F: hidden width of one routed expert (Mixtral: ``intermediate_size``; Qwen-MoE and
        DeepSeek: ``moe_intermediate_size``). Experts are gated (SwiGLU) MLPs.
      shared_F: total hidden width of the expert(s) every token also goes through, 0 if none
        (Qwen2-MoE: ``shared_expert_intermediate_size``; DeepSeek: ``n_shared_experts`` ×
        ``moe_intermediate_size``, computed as one MLP of that width).
      shared_gate: Qwen2-MoE scales the shared expert by sigmoid(x · w), a learned gate.
      renormalize: the k selected weights are divided by their sum (``norm_topk_prob``;
        Mixtral always does, by a softmax over the selected logits).
      scoring: "softmax" (Mixtral, Qwen, DeepSeek-V2) or "sigmoid" (DeepSeek-V3) router scores.
      routed_scale: factor on the routed experts' sum (``routed_scaling_factor``).
      groups, topk_groups: group-limited routing (``n_group``, ``topk_group``): experts come in
        `groups` groups and a token may use only its `topk_groups` best groups (DeepSeek).
      score_bias: DeepSeek-V3's per-expert bias added to the scores for selection only
        (``e_score_correction_bias``), a parameter of E numbers per layer.
      dense_layers: indices of layers that keep a dense MLP of width `ModelConfig.F`
        (DeepSeek: the first ``first_k_dense_replace``; Qwen-MoE: ``mlp_only_layers`` and
        ``decoder_sparse_step``).
    """

    E: int
    k: int
    F: int
    shared_F: int = 0
    shared_gate: bool = False
    renormalize: bool = True
    scoring: Literal["softmax", "sigmoid"] = "softmax"
    routed_scale: float = 1.0
    groups: int = 1
    topk_groups: int = 1
    score_bias: bool = False
    dense_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("E", "k", "F", "groups", "topk_groups"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"moe.{name} must be a positive integer, got {v!r}")
        if self.k > self.E:
            raise ConfigError(f"moe.k={self.k} experts per token exceeds E={self.E} experts")
        if not isinstance(self.shared_F, int) or isinstance(self.shared_F, bool) \
                or self.shared_F < 0:
            raise ConfigError(f"moe.shared_F must be a non-negative integer, got {self.shared_F!r}")
        if self.scoring not in ("softmax", "sigmoid"):
            raise ConfigError(f"moe.scoring must be 'softmax' or 'sigmoid', got {self.scoring!r}")
        _positive("moe", routed_scale=self.routed_scale)
        if self.E % self.groups or self.topk_groups > self.groups:
            raise ConfigError(f"moe: {self.E} experts in {self.groups} groups, "
                              f"{self.topk_groups} chosen, is not a valid grouping")
        if self.shared_gate and not self.shared_F:
            raise ConfigError("moe.shared_gate needs a shared expert (shared_F > 0)")
        if any(not isinstance(i, int) or i < 0 for i in self.dense_layers):
            raise ConfigError(f"moe.dense_layers must be layer indices, got {self.dense_layers!r}")


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2, DeepSeek-V3).

    Each token's keys and values for all N heads are decompressed from one latent vector of
    R_kv numbers; a separate rotary key of H_rope numbers is shared by all heads. The cache
    holds only the latent and the rotary key: (R_kv + H_rope) numbers per token per layer,
    against 2·K·H for grouped-query attention.

    Attributes:
      R_kv: latent width (``kv_lora_rank``).
      R_q: the queries' own low-rank width (``q_lora_rank``); None projects queries directly.
      H_nope: per-head query/key dimensions without rotary embedding (``qk_nope_head_dim``).
      H_rope: per-head query/key dimensions with rotary embedding (``qk_rope_head_dim``).
      H_v: per-head value dimension (``v_head_dim``).
    """

    R_kv: int
    H_nope: int
    H_rope: int
    H_v: int
    R_q: int | None = None

    def __post_init__(self) -> None:
        for name in ("R_kv", "H_nope", "H_rope", "H_v", "R_q"):
            v = getattr(self, name)
            if v is None and name == "R_q":
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"mla.{name} must be a positive integer, got {v!r}")
        if self.H_rope % 2:
            raise ConfigError(f"mla.H_rope={self.H_rope} must be even for rotary embeddings")

    @property
    def H_qk(self) -> int:
        """Per-head query/key dimension, H_nope + H_rope: what the softmax scale uses."""
        return self.H_nope + self.H_rope

    @property
    def cache_width(self) -> int:
        """Numbers cached per token per layer: the latent and the shared rotary key."""
        return self.R_kv + self.H_rope
