"""Serving-time estimates the engine's simulations need: step costs and KV transfers.

The orchestrator (`inferbook.serving.scheduler`) advances time by what each engine call costs.
On the reader's own device that is measured; to ask "what would this schedule do on a TPU v5e
or an H100?" it uses these roofline estimates instead. They follow the scaling book's model
(Austin et al. 2025, "All About Transformer Inference", theoretical estimates): an operation
takes as long as the slower of its arithmetic and its memory traffic, and a decode step reads
every weight once plus the KV cache of every sequence in the batch.

Both steps are built here as costs (`StepCost`) and priced by the library's one formula,
`step_cost.step_time(cost, chip)`: a prefill is one roofline over the whole forward pass, a
decode step two (the cache read, then the weights). Disaggregated serving adds one more
cost: the prefill server's KV cache crosses a link to the generate server,
kv_bytes_per_token · tokens bytes of it.
"""

from __future__ import annotations

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import forward_flops, kv_bytes_per_token, param_bytes
from inferbook.perf.step_cost import StepCost, Work

__all__ = ["kv_transfer_seconds", "prefill_step_cost", "generate_step_cost"]


def kv_transfer_seconds(cfg: ModelConfig, tokens: int, link_bytes_per_s: float,
                        kv_bytes: float = 2, latency_s: float = 0.0) -> float:
    """latency + tokens · 2·L·K·H·kv_bytes / bandwidth: shipping a prefix's KV cache."""
    return latency_s + tokens * kv_bytes_per_token(cfg, kv_bytes) / link_bytes_per_s


def prefill_step_cost(cfg: ModelConfig, tokens: int, cached: int = 0, batch: int = 1,
                      weight_bytes: float = 2, kv_bytes: float = 2) -> StepCost:
    """Prefilling `tokens` new tokens per sequence after `cached` ones, as one part.

    Priced by `step_cost.step_time`: max(FLOPs / peak, bytes / bandwidth), where the bytes
    are the weights, the cached KV read and the new KV written. Prefill of a few hundred
    tokens or more is compute-bound.
    """
    flops = forward_flops(cfg, batch, tokens, cached + tokens, logits_for=1)
    moved = (param_bytes(cfg, weight_bytes)
             + batch * (cached + tokens) * kv_bytes_per_token(cfg, kv_bytes))
    return StepCost((Work("forward pass", flops, moved),))


def generate_step_cost(cfg: ModelConfig, batch: int, context_tokens: int,
                       weight_bytes: float = 2, kv_bytes: float = 2) -> StepCost:
    """One decode step of `batch` sequences holding `context_tokens` KV entries in total.

    The cost of one step of `decode.generate`'s loop (the engines' `generate`), not of a
    whole generation. Priced by `step_cost.step_time` it is the KV read time plus
    max(matmul time, weight read time), the scaling book's form: the KV cache is read at
    memory speed whatever the batch, the weights are read once and shared.
    """
    return StepCost((
        Work("attention", 0.0, context_tokens * kv_bytes_per_token(cfg, kv_bytes)),
        Work("weights", forward_flops(cfg, batch, 1, 0, logits_for=1),
             param_bytes(cfg, weight_bytes))))
