"""Sizes and FLOPs of a transformer, from its config alone.

Counts are exact for the library's model (`inferbook.model.decoder`): `param_count(cfg)` equals the
number of elements `init_params(cfg)` allocates, and `kv_cache_bytes` the bytes of
`init_cache`. The sources' rules of thumb are here too, named after them: "2 FLOPs per
parameter per token" (kipply; the scaling book) and kipply's 24·D² FLOPs per layer.
"""

from __future__ import annotations

from inferbook.model.config import ModelConfig

__all__ = ["param_counts", "param_count", "param_bytes", "matmul_params",
           "kv_bytes_per_token", "kv_cache_bytes", "flops_per_token", "attention_flops",
           "forward_flops", "approx_flops_per_token",
           "DTYPE_BYTES", "dtype_bytes", "kv_bytes_per_token_per_shard",
           "kv_cache_bytes_per_shard", "memory_bytes"]

# Quantization enters every estimate as a number of bytes: per weight, and per KV element.
# int4 packs two values in a byte. (Scales and zero points of a quantized format add a little;
# the sources ignore them and so do we.)
DTYPE_BYTES: dict[str, float] = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1,
                                 "int8": 1, "int4": 0.5}


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Parameters per component: embedding, attention, mlp, norms, unembedding.

    attention = L·(D·N·H [W_Q] + 2·D·K·H [W_K, W_V] + N·H·D [W_O]); mlp = L·(3 or 2)·D·F;
    norms = 2·D per layer plus the final one; unembedding is 0 when tied to the embedding.
    """
    L, D, F, N, K, H, V = cfg.L, cfg.D, cfg.F, cfg.N, cfg.K, cfg.H, cfg.V
    return {
        "embedding": V * D,
        "attention": L * (2 * D * N * H + 2 * D * K * H),
        "mlp": L * (3 if cfg.mlp == "gated" else 2) * D * F,
        "norms": L * 2 * D + D,
        "unembedding": 0 if cfg.tied_embeddings else D * V,
    }


def param_count(cfg: ModelConfig) -> int:
    """Total parameters: exactly the elements the library's model allocates."""
    return sum(param_counts(cfg).values())


def param_bytes(cfg: ModelConfig, bytes_per_param: float = 2) -> float:
    """Bytes of all weights at `bytes_per_param` (2 for bfloat16, 1 for int8, 4 for float32)."""
    return param_count(cfg) * bytes_per_param


def matmul_params(cfg: ModelConfig) -> int:
    """Parameters that take part in a matrix multiplication for every token.

    Everything but the embedding table (a lookup, no FLOPs) and the norm gains; with tied
    embeddings the table still serves as the unembedding matrix.
    """
    c = param_counts(cfg)
    return c["attention"] + c["mlp"] + (cfg.D * cfg.V)


def kv_bytes_per_token(cfg: ModelConfig, bytes_per_element: float = 2) -> float:
    """2·L·K·H·bytes: a key and a value vector per KV head, per layer, for one token."""
    return 2 * cfg.L * cfg.K * cfg.H * bytes_per_element


def kv_cache_bytes(cfg: ModelConfig, batch: int, seq_len: int,
                   bytes_per_element: float = 2) -> float:
    """B·S·2·L·K·H·bytes: the KV cache of `batch` sequences of `seq_len` tokens."""
    return batch * seq_len * kv_bytes_per_token(cfg, bytes_per_element)


def flops_per_token(cfg: ModelConfig) -> int:
    """2 FLOPs per matmul parameter: one multiply and one add per weight per token.

    This is the "2P" rule of the sources, with P counted as the parameters that multiply
    (`matmul_params`); it leaves out attention's score and value products, which grow with
    context (see `attention_flops`).
    """
    return 2 * matmul_params(cfg)


def attention_flops(cfg: ModelConfig, batch: int, q_len: int, kv_len: int) -> int:
    """FLOPs of the two attention products, Q·Kᵀ and P·V, over all layers.

    Each is 2·B·T·S·N·H per layer, where T queries meet S keys. This counts the full T×S
    rectangle, which is what a dense kernel computes even when the causal mask throws away
    half of it in prefill.
    """
    return cfg.L * 2 * (2 * batch * q_len * kv_len * cfg.N * cfg.H)


def forward_flops(cfg: ModelConfig, batch: int, q_len: int, kv_len: int | None = None,
                  logits_for: int | None = None) -> int:
    """Matmul FLOPs of one forward pass of `batch` sequences, `q_len` new tokens each.

    `kv_len` is the number of keys each query attends to (q_len for a forward pass without
    a cache; cached + new tokens, or the cache's capacity, with one). `logits_for` is how many
    positions per sequence are unembedded (all q_len by default; prefill needs only the last).
    """
    kv_len = q_len if kv_len is None else kv_len
    logits_for = q_len if logits_for is None else logits_for
    c = param_counts(cfg)
    per_token = 2 * (c["attention"] + c["mlp"])
    return (batch * q_len * per_token + attention_flops(cfg, batch, q_len, kv_len)
            + 2 * batch * logits_for * cfg.D * cfg.V)


def approx_flops_per_token(cfg: ModelConfig) -> int:
    """kipply's 24·D² per layer: 2 FLOPs × 12·D² weights (4·D² attention, 8·D² MLP).

    Exact for a plain MLP with F = 4·D and multi-head attention with N·H = D; it leaves out the
    (un)embeddings and the attention products.
    """
    return 24 * cfg.D ** 2 * cfg.L


def dtype_bytes(dtype: str | float) -> float:
    """Bytes per element of a storage format: 'bfloat16' -> 2, 'int8' -> 1, 'int4' -> 0.5.

    A number passes through unchanged, so every function that takes `bytes_per_...` accepts
    either. NumPy/JAX dtypes work too (`jnp.bfloat16` -> 2).
    """
    if isinstance(dtype, (int, float)) and not isinstance(dtype, bool):
        if dtype <= 0:
            raise ValueError(f"bytes per element must be positive, got {dtype!r}")
        return dtype
    name = getattr(dtype, "__name__", None) or getattr(dtype, "name", None) or str(dtype)
    name = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}.get(name, name)
    if name not in DTYPE_BYTES:
        raise ValueError(f"unknown storage format {dtype!r}; known: {', '.join(DTYPE_BYTES)}")
    return DTYPE_BYTES[name]


def kv_bytes_per_token_per_shard(cfg: ModelConfig, shards: int,
                                 bytes_per_element: float = 2) -> float:
    """KV bytes per token held by one of `shards` chips when the cache is split over KV heads.

    Each chip keeps ceil(K / shards) heads: 2·L·ceil(K/shards)·H·bytes. Splitting by heads is
    what kipply ("the kv cache is split across heads by GPU") and the scaling book's Megatron
    layout do. It stops helping at K shards — with more chips than KV heads every chip still
    holds a whole head (the scaling book then shards the *batch* of the cache instead; see
    `kv_cache_bytes_per_shard`).
    """
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    heads = -(-cfg.K // shards)
    return 2 * cfg.L * heads * cfg.H * bytes_per_element


def kv_cache_bytes_per_shard(cfg: ModelConfig, batch: int, seq_len: int, head_shards: int = 1,
                             batch_shards: int = 1, bytes_per_element: float = 2) -> float:
    """Bytes of the KV cache on one chip of a [batch_shards × head_shards] layout.

    The scaling book's KV[2, B_Z, S, K_Y, H]: heads split `head_shards` ways (ceil(K/Y) per
    chip), sequences split `batch_shards` ways (ceil(B/Z) per chip).
    """
    if batch_shards < 1:
        raise ValueError(f"batch_shards must be at least 1, got {batch_shards}")
    per_chip_batch = -(-batch // batch_shards)
    return per_chip_batch * seq_len * kv_bytes_per_token_per_shard(cfg, head_shards,
                                                                   bytes_per_element)


def memory_bytes(cfg: ModelConfig, batch: int, seq_len: int, bytes_per_param: float = 2,
                 kv_bytes_per_element: float = 2) -> float:
    """Weights plus KV cache: what inference must hold in device memory.

    Activations are left out on purpose: with a KV cache and a fused attention they are a few
    vectors per token (the scaling book: about 80 MB for an 8k-token prefill of LLaMA-2 13B),
    negligible beside either term.
    """
    return (param_bytes(cfg, bytes_per_param)
            + kv_cache_bytes(cfg, batch, seq_len, kv_bytes_per_element))
