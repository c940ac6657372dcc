"""Sizes and FLOPs of a transformer, from its config alone.

Counts are exact for the library's model (`inferbook.model.decoder`): `param_count(cfg)` equals the
number of elements `init_params(cfg)` allocates, and `kv_cache_bytes` the bytes of
`init_cache`. Parameters are listed tensor by tensor in `params` (every family's biases, norms,
experts and latent projections); this module adds the KV cache and the FLOPs. The sources'
rules of thumb are here too, named after them: "2 FLOPs per parameter per token" (kipply; the
scaling book) and kipply's 24·D² FLOPs per layer.
"""

from __future__ import annotations

from inferbook.model.config import ModelConfig
from inferbook.perf.params import param_count, param_counts, tensors

__all__ = ["param_counts", "param_count", "param_bytes", "matmul_params",
           "matmul_params_per_token", "kv_bytes_per_layer_token", "kv_bytes_per_token",
           "cached_layer_tokens", "kv_cache_bytes", "flops_per_token", "attention_flops",
           "forward_flops", "approx_flops_per_token",
           "DTYPE_BYTES", "dtype_bytes", "kv_bytes_per_token_per_shard",
           "kv_cache_bytes_per_shard", "memory_bytes"]

# Quantization enters these counts as a number of bytes: per weight, and per KV element.
# int4 packs two values in a byte. (Formats with scales, and what they add, are in `quant`.)
DTYPE_BYTES: dict[str, float] = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1,
                                 "int8": 1, "int4": 0.5}


def param_bytes(cfg: ModelConfig, bytes_per_param: float = 2) -> float:
    """Bytes of all weights at `bytes_per_param` (2 for bfloat16, 1 for int8, 4 for float32)."""
    return param_count(cfg) * bytes_per_param


def matmul_params_per_token(cfg: ModelConfig) -> int:
    """Weights one token multiplies inside the layers: every matrix (attention, MLP, shared
    experts, router) and, of a mixture of experts, the k routed experts it is sent to.

    Leaves out the embedding (a lookup), the unembedding (counted per logit row by
    `forward_flops`), norms and biases (element-wise).
    """
    n = 0
    for t in tensors(cfg):
        if t.role in ("matrix", "router"):
            n += t.size
        elif t.role == "expert":              # E copies per layer: exact in integers
            n += t.size * cfg.moe.k // cfg.moe.E
    return n


def matmul_params(cfg: ModelConfig) -> int:
    """Parameters that take part in a matrix multiplication for every token.

    Everything but the embedding table (a lookup, no FLOPs) and the norm gains; with tied
    embeddings the table still serves as the unembedding matrix. For a mixture of experts,
    the k experts a token uses.
    """
    return matmul_params_per_token(cfg) + cfg.D * cfg.V


def kv_bytes_per_layer_token(cfg: ModelConfig, bytes_per_element: float = 2) -> float:
    """Bytes one token adds to one layer's cache: a key and a value per KV head, 2·K·H
    elements; with latent attention the latent and the shared rotary key, R_kv + H_rope."""
    if cfg.mla is not None:
        return cfg.mla.cache_width * bytes_per_element
    return 2 * cfg.K * cfg.H * bytes_per_element


def kv_bytes_per_token(cfg: ModelConfig, bytes_per_element: float = 2) -> float:
    """2·L·K·H·bytes: what one token adds to the cache of every layer (MLA: L·(R_kv + H_rope)).

    A sliding-window layer stops growing once it holds its window, so a long sequence's cache
    is less than its length times this: see `kv_cache_bytes`.
    """
    return cfg.L * kv_bytes_per_layer_token(cfg, bytes_per_element)


def cached_layer_tokens(cfg: ModelConfig, seq_len: int) -> int:
    """Σ over layers of the tokens each layer keeps for a `seq_len`-token sequence: seq_len in a
    full-attention layer, min(seq_len, W) in a sliding-window layer of window W (its ring
    buffer, `memory.kv_window`). L·seq_len for a model without windows."""
    if cfg.window is None:
        return cfg.L * seq_len
    if cfg.layer_types is None:                  # every layer slides
        return cfg.L * min(seq_len, cfg.window)
    local = sum(t == "sliding" for t in cfg.layer_types)
    return (cfg.L - local) * seq_len + local * min(seq_len, cfg.window)


def kv_cache_bytes(cfg: ModelConfig, batch: int, seq_len: int,
                   bytes_per_element: float = 2) -> float:
    """The KV cache of `batch` sequences of `seq_len` tokens.

    B·S·2·L·K·H·bytes for a model without windows (what `kvcache.init_cache` allocates);
    sliding-window layers hold min(S, W) tokens each (`kv_window.init_cache`), so the
    context-dependent form is B · Σ_layers min(S, W_i) · kv_bytes_per_layer_token.
    """
    return batch * cached_layer_tokens(cfg, seq_len) * kv_bytes_per_layer_token(
        cfg, bytes_per_element)


def flops_per_token(cfg: ModelConfig) -> int:
    """2 FLOPs per matmul parameter: one multiply and one add per weight per token.

    This is the "2P" rule of the sources, with P counted as the parameters that multiply
    (`matmul_params`; a mixture of experts' active ones); it leaves out attention's score and
    value products, which grow with context (see `attention_flops`).
    """
    return 2 * matmul_params(cfg)


def attention_flops(cfg: ModelConfig, batch: int, q_len: int, kv_len: int) -> int:
    """FLOPs of the two attention products, Q·Kᵀ and P·V, over all layers.

    Each is 2·B·T·S·N·H per layer, where T queries meet S keys (latent attention: H_qk for
    the scores, H_v for the values). This counts the full T×S rectangle, which is what a dense
    kernel computes even when the causal mask (or a window) throws away part of it in prefill.
    """
    width = cfg.mla.H_qk + cfg.mla.H_v if cfg.mla is not None else 2 * cfg.H
    return cfg.L * 2 * batch * q_len * kv_len * cfg.N * width


def forward_flops(cfg: ModelConfig, batch: int, q_len: int, kv_len: int | None = None,
                  logits_for: int | None = None) -> int:
    """Matmul FLOPs of one forward pass of `batch` sequences, `q_len` new tokens each.

    `kv_len` is the number of keys each query attends to (q_len for a forward pass without
    a cache; cached + new tokens, or the cache's capacity, with one). `logits_for` is how many
    positions per sequence are unembedded (all q_len by default; prefill needs only the last).
    """
    kv_len = q_len if kv_len is None else kv_len
    logits_for = q_len if logits_for is None else logits_for
    per_token = 2 * matmul_params_per_token(cfg)
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
    `kv_cache_bytes_per_shard`). A latent-attention cache has no heads to split: every chip of
    a head-split layout holds the whole latent.
    """
    if shards < 1:
        raise ValueError(f"shards must be at least 1, got {shards}")
    if cfg.mla is not None:
        return kv_bytes_per_token(cfg, bytes_per_element)
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
