"""Model configurations in the book's notation.

A transformer, for the purposes of this book, is a handful of integers:

    L layers · D model width · F MLP hidden width · N query heads · K key/value heads ·
    H head dimension · V vocabulary

plus a few switches (gated or plain MLP, tied embeddings, sliding window). Everything the book
predicts — parameter bytes, KV-cache bytes, FLOPs, step times — is a function of a `ModelConfig`,
and so is everything the library allocates. That is what lets a chapter check a prediction
against the arrays the model really holds.

Named configurations live in `presets` (the models the sources discuss, their invented models,
tiny ones for a laptop CPU); `hf_config` reads a Hugging Face ``config.json``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["ModelConfig", "ConfigError"]


class ConfigError(ValueError):
    """A configuration the library cannot build, with a message that names the problem."""


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
      mlp: "gated" (SwiGLU: down(act(gate x) * up x), three matrices, as in LLaMA) or "plain"
        (out(act(in x)), two matrices, as in GPT-3, OPT and kipply's models).
      activation: "silu", "gelu" or "relu".
      tied_embeddings: if True the unembedding is the transpose of the embedding.
      norm_eps: epsilon of RMSNorm.
      rope_theta: base of the rotary position embedding's frequencies.
      window: sliding-window length for local attention, or None for full attention.
      max_seq_len: the context length the model was trained for (informational).
      name: a label for tables and plots.
    """

    L: int
    D: int
    F: int
    N: int
    K: int
    H: int
    V: int
    mlp: Literal["gated", "plain"] = "gated"
    activation: Literal["silu", "gelu", "relu"] = "silu"
    tied_embeddings: bool = False
    norm_eps: float = 1e-5
    rope_theta: float = 10_000.0
    window: int | None = None
    max_seq_len: int = 4096
    name: str = "custom"

    def __post_init__(self) -> None:
        for letter in ("L", "D", "F", "N", "K", "H", "V"):
            value = getattr(self, letter)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{letter} must be a positive integer, got {value!r}")
        if self.N % self.K:
            raise ConfigError(f"N={self.N} query heads must be a multiple of K={self.K} KV heads")
        if self.H % 2:
            raise ConfigError(f"H={self.H} must be even for rotary embeddings")
        if self.mlp not in ("gated", "plain"):
            raise ConfigError(f"mlp must be 'gated' or 'plain', got {self.mlp!r}")
        if self.activation not in ("silu", "gelu", "relu"):
            raise ConfigError(f"activation must be silu, gelu or relu, got {self.activation!r}")
        if self.window is not None and self.window <= 0:
            raise ConfigError(f"window must be positive or None, got {self.window!r}")

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
        """'MHA', 'GQA' or 'MQA'."""
        if self.K == self.N:
            return "MHA"
        return "MQA" if self.K == 1 else "GQA"

    def replace(self, **changes: Any) -> "ModelConfig":
        """A copy with some fields changed, e.g. ``cfg.replace(K=1)`` for the MQA variant."""
        return dataclasses.replace(self, **changes)
