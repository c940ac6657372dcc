"""What a decode step's attention costs: FLOPs and bytes per cached token, and per step.

During decoding each new query reads every cached token of every layer once. Per cached
token, per layer and per query token (bytes b per cached number):

  grouped-query (K KV heads of H)   reads 2·K·H·b; scores and values 4·N·H FLOPs
                                    -> 2·G / b FLOPs per byte, G = N / K
  latent, naive                     reads (R_kv + H_rope)·b; decompresses the latent into N
                                    keys and values, 2·R_kv·N·(H_nope + H_v) FLOPs, then
                                    attends, 2·N·(H_nope + H_rope) + 2·N·H_v
  latent, absorbed                  reads the same; scores over the latent and the rotary
                                    key, 2·N·(R_kv + H_rope), values from the latent,
                                    2·N·R_kv (W_UK folded into the query, W_UV into the
                                    output, once per query: `model.mla`)

So latent attention trades bytes for FLOPs twice over: its cache is a small fraction of
multi-head attention's, and in the absorbed form every head works on the whole latent, which
raises the FLOPs per byte of cache from about G to about 2·N — near the ridge of current
chips, where decoding attention stops being purely memory-bound (DeepSeek-AI 2024, §2.1;
the per-step folding is in `model.mla`).
"""

from __future__ import annotations

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import cached_layer_tokens

__all__ = ["decode_attention_per_cached_token", "decode_attention_flops", "FORMS"]

FORMS = ("naive", "absorbed")


def decode_attention_per_cached_token(cfg: ModelConfig, form: str | None = None,
                                      bytes_per_element: float = 2) -> tuple[float, float]:
    """(FLOPs, bytes) of one query's attention per cached token per layer.

    `form` is "naive" or "absorbed" for latent attention (default absorbed, the form the
    library decodes with) and must be None otherwise.
    """
    if cfg.mla is None:
        if form is not None:
            raise ValueError(f"{cfg.name} has no latent attention; form must be None")
        return 4.0 * cfg.N * cfg.H, 2.0 * cfg.K * cfg.H * bytes_per_element
    form = form or "absorbed"
    if form not in FORMS:
        raise ValueError(f"form must be one of {', '.join(FORMS)}, got {form!r}")
    m, N = cfg.mla, cfg.N
    read = float(m.cache_width * bytes_per_element)
    if form == "absorbed":
        return 2.0 * N * (2 * m.R_kv + m.H_rope), read
    decompress = 2.0 * m.R_kv * N * (m.H_nope + m.H_v)
    return decompress + 2.0 * N * m.H_qk + 2.0 * N * m.H_v, read


def decode_attention_flops(cfg: ModelConfig, batch: int, context: int) -> float:
    """FLOPs of one decode step's attention against `context` cached tokens per sequence:
    `decode_attention_per_cached_token` (the form the library decodes with) for every token
    each layer keeps (a window caps a sliding layer), for each of the `batch` sequences."""
    flops_per_token, _ = decode_attention_per_cached_token(cfg)
    return batch * cached_layer_tokens(cfg, context) * flops_per_token
