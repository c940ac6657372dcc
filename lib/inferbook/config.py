"""Model configurations in the book's notation.

A transformer, for the purposes of this book, is a handful of integers:

    L layers · D model width · F MLP hidden width · N query heads · K key/value heads ·
    H head dimension · V vocabulary

plus a few switches (gated or plain MLP, tied embeddings, sliding window). Everything the book
predicts — parameter bytes, KV-cache bytes, FLOPs, step times — is a function of a `ModelConfig`,
and so is everything the library allocates. That is what lets a chapter check a prediction
against the arrays the model really holds.

Presets cover the real models the sources discuss, the invented models of their worked
problems, and tiny models that decode on a laptop CPU in seconds.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = ["ModelConfig", "PRESETS", "get_preset", "from_hf_config", "read_hf_config",
           "ConfigError"]


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


# Presets ------------------------------------------------------------------------------------
# Real models: numbers from each model's published config.json / paper.
# The sources' invented models: numbers from the source that defines them.

def _llama(name, L, D, F, N, K, V, *, theta=10_000.0, seq=4096, eps=1e-5, window=None):
    return ModelConfig(L=L, D=D, F=F, N=N, K=K, H=D // N, V=V, rope_theta=theta, norm_eps=eps,
                       max_seq_len=seq, window=window, name=name)


PRESETS: dict[str, ModelConfig] = {
    # Meta's LLaMA 2 (Touvron et al. 2023), config.json on the Hugging Face hub.
    "llama-2-7b": _llama("llama-2-7b", 32, 4096, 11008, 32, 32, 32000),
    "llama-2-13b": _llama("llama-2-13b", 40, 5120, 13824, 40, 40, 32000),
    "llama-2-70b": _llama("llama-2-70b", 80, 8192, 28672, 64, 8, 32000),
    # Meta's LLaMA 3, config.json on the hub (rope_theta 500,000, 128k vocabulary).
    "llama-3-8b": _llama("llama-3-8b", 32, 4096, 14336, 32, 8, 128256, theta=500_000.0,
                         seq=8192),
    "llama-3-70b": _llama("llama-3-70b", 80, 8192, 28672, 64, 8, 128256, theta=500_000.0,
                          seq=8192),
    # Mistral 7B v0.1 (Jiang et al. 2023): GQA with K=8 and a 4,096-token sliding window.
    "mistral-7b": _llama("mistral-7b", 32, 4096, 14336, 32, 8, 32000, seq=32768, window=4096),
    # The multi-head models of the KV-caching article's table (seed 003), sizes from each
    # config.json on the Hugging Face hub. Biases, learned or ALiBi positions and parallel
    # attention blocks are not modelled: they leave the KV cache exact and move the parameter
    # count by well under 1%. Meta's OPT (Zhang et al. 2022): ReLU MLP of 4·D, tied output.
    "opt-13b": ModelConfig(L=40, D=5120, F=20480, N=40, K=40, H=128, V=50272, mlp="plain",
                           activation="relu", tied_embeddings=True, max_seq_len=2048,
                           name="opt-13b"),
    "opt-30b": ModelConfig(L=48, D=7168, F=28672, N=56, K=56, H=128, V=50272, mlp="plain",
                           activation="relu", tied_embeddings=True, max_seq_len=2048,
                           name="opt-30b"),
    "opt-66b": ModelConfig(L=64, D=9216, F=36864, N=72, K=72, H=128, V=50272, mlp="plain",
                           activation="relu", tied_embeddings=True, max_seq_len=2048,
                           name="opt-66b"),
    # MosaicML's MPT (release posts, May and June 2023): GELU MLP of 4·D, tied output, ALiBi.
    "mpt-7b": ModelConfig(L=32, D=4096, F=16384, N=32, K=32, H=128, V=50432, mlp="plain",
                          activation="gelu", tied_embeddings=True, max_seq_len=2048,
                          name="mpt-7b"),
    "mpt-30b": ModelConfig(L=48, D=7168, F=28672, N=64, K=64, H=112, V=50432, mlp="plain",
                           activation="gelu", tied_embeddings=True, max_seq_len=8192,
                           name="mpt-30b"),
    # TII's Falcon (Almazrouei et al. 2023): 7B is multi-query (one KV head for 71 query heads
    # of 64), 40B grouped-query with 8 KV heads; GELU MLP of 4·D.
    "falcon-7b": ModelConfig(L=32, D=4544, F=18176, N=71, K=1, H=64, V=65024, mlp="plain",
                             activation="gelu", tied_embeddings=True, max_seq_len=2048,
                             name="falcon-7b"),
    "falcon-40b": ModelConfig(L=60, D=8192, F=32768, N=128, K=8, H=64, V=65024, mlp="plain",
                              activation="gelu", tied_embeddings=True, max_seq_len=2048,
                              name="falcon-40b"),
    # The model invented for the scaling book's worked problems (seed 000, "worked problems"):
    # LLaMA-2-13B-like, with shared input/output embeddings.
    "scaling-book-18b": ModelConfig(L=64, D=4096, F=16384, N=32, K=8, H=256, V=32128,
                                    tied_embeddings=True, name="scaling-book-18b"),
    # kipply's 52B (Anthropic's, seed 004): d_model 8192, 64 layers, plain 4·D MLP. The post
    # gives no vocabulary; 65,536 makes the (un)embeddings "nearly a billion parameters".
    "kipply-52b": ModelConfig(L=64, D=8192, F=4 * 8192, N=64, K=64, H=128, V=65536, mlp="plain",
                              activation="gelu", max_seq_len=2048, name="kipply-52b"),
    # The 13B of kipply's FasterTransformer comparison: 40 layers, 40 heads of 128, D = 5120.
    # A GPT-style model; the vocabulary (GPT-2's 50,257) is our assumption.
    "kipply-13b": ModelConfig(L=40, D=5120, F=4 * 5120, N=40, K=40, H=128, V=50257, mlp="plain",
                              activation="gelu", max_seq_len=2048, name="kipply-13b"),
    # A Gopher-size model (Rae et al. 2021, table 1): 80 layers, D = 16384, 128 heads of 128.
    "gopher-280b": ModelConfig(L=80, D=16384, F=4 * 16384, N=128, K=128, H=128, V=32000,
                               mlp="plain", activation="gelu", max_seq_len=2048,
                               name="gopher-280b"),
    # BigScience's BLOOM (2022; config.json on the hub): 70 layers, D = 14336, 112 heads of
    # 128, a 250,880-token vocabulary tied to the output. Its ALiBi positions and biases do not
    # change the sizes the book computes (the KV-caching article, seed 003, uses its 4 MB/token).
    "bloom-176b": ModelConfig(L=70, D=14336, F=4 * 14336, N=112, K=112, H=128, V=250880,
                              mlp="plain", activation="gelu", tied_embeddings=True,
                              max_seq_len=2048, name="bloom-176b"),
    # Meta's LLaMA 3.2 1B (config.json on the hub): 1.24 billion parameters, the output tied to
    # the embedding; its long-context rope scaling is not modelled. The GPU benchmark's model.
    "llama-3.2-1b": ModelConfig(L=16, D=2048, F=8192, N=32, K=8, H=64, V=128256,
                                rope_theta=500_000.0, tied_embeddings=True, max_seq_len=8192,
                                name="llama-3.2-1b"),
    # Tiny models for tests and for chapters that run on a laptop CPU.
    "tiny": ModelConfig(L=2, D=64, F=192, N=4, K=2, H=16, V=256, max_seq_len=512, name="tiny"),
    "tiny-mha": ModelConfig(L=2, D=64, F=192, N=4, K=4, H=16, V=256, max_seq_len=512,
                            name="tiny-mha"),
    "tiny-mqa": ModelConfig(L=2, D=64, F=192, N=4, K=1, H=16, V=256, max_seq_len=512,
                            name="tiny-mqa"),
    "small": ModelConfig(L=4, D=256, F=768, N=8, K=4, H=32, V=2048, max_seq_len=2048,
                         name="small"),
    # About 84M parameters: 336 MB in float32, big enough that a CPU decode step is bound by
    # memory bandwidth rather than by dispatch overhead.
    "cpu-336mb": ModelConfig(L=4, D=1024, F=4096, N=16, K=16, H=64, V=8192, max_seq_len=4096,
                             name="cpu-336mb"),
}


def get_preset(name: str) -> ModelConfig:
    """The preset called `name`; a ConfigError listing the known names otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; known models: {', '.join(PRESETS)}") from None


# Hugging Face configs ----------------------------------------------------------------------

_SUPPORTED_HF_TYPES = ("llama", "mistral")
_HF_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_new": "gelu",
                   "gelu_pytorch_tanh": "gelu", "relu": "relu"}


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The parsed ``config.json`` at `path` (a file, or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ConfigError(f"no config file at {path}")
    try:
        hf = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"cannot read {path} as JSON: {err}") from None
    if not isinstance(hf, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return hf


def from_hf_config(source: str | Path | dict[str, Any], *, name: str | None = None) -> ModelConfig:
    """Build a ModelConfig from a Llama-family Hugging Face ``config.json``.

    `source` is a path to the file, a directory holding it, or the parsed dictionary. Keys read:
    num_hidden_layers, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads
    (default: num_attention_heads), head_dim (default: hidden_size / num_attention_heads),
    vocab_size, tie_word_embeddings, rms_norm_eps, rope_theta (or rope_parameters.rope_theta in
    newer files), sliding_window, hidden_act, max_position_embeddings.

    Raises ConfigError naming the missing key or the unsupported feature.
    """
    if isinstance(source, dict):
        hf = source
        label = name or str(source.get("_name_or_path") or "hf-config")
    else:
        path = Path(source)
        hf = read_hf_config(path)
        label = name or (path if path.is_dir() else path.parent).name or "hf-config"

    model_type = hf.get("model_type")
    if model_type is not None and model_type not in _SUPPORTED_HF_TYPES:
        raise ConfigError(f"unsupported architecture model_type={model_type!r}; "
                          f"supported: {', '.join(_SUPPORTED_HF_TYPES)}")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise ConfigError(f"{key}=true is not supported (the library's model has no biases)")

    def need(key: str) -> int:
        if key not in hf:
            raise ConfigError(f"config is missing the key {key!r}")
        value = hf[key]
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ConfigError(f"config key {key!r} must be a positive integer, got {value!r}")
        return value

    L, D, F = need("num_hidden_layers"), need("hidden_size"), need("intermediate_size")
    N, V = need("num_attention_heads"), need("vocab_size")
    K = need("num_key_value_heads") if hf.get("num_key_value_heads") is not None else N
    H = need("head_dim") if hf.get("head_dim") is not None else D // N

    rope = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or rope
    rope_type = scaling.get("rope_type", scaling.get("type", "default")) if scaling else "default"
    if rope_type not in ("default", None):
        raise ConfigError(f"rope scaling of type {rope_type!r} is not supported")
    theta = hf.get("rope_theta", rope.get("rope_theta", 10_000.0))

    act = hf.get("hidden_act", "silu")
    if act not in _HF_ACTIVATIONS:
        raise ConfigError(f"unsupported hidden_act {act!r}")

    return ModelConfig(
        L=L, D=D, F=F, N=N, K=K, H=H, V=V,
        mlp="gated",
        activation=_HF_ACTIVATIONS[act],
        tied_embeddings=bool(hf.get("tie_word_embeddings", False)),
        norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        window=hf.get("sliding_window") or None,
        max_seq_len=int(hf.get("max_position_embeddings", 4096)),
        name=label,
    )
