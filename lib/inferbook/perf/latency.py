"""kipply's latency model ("Transformer Inference Arithmetic", Chen 2022), equation by equation.

Her model of a decode step on N tensor-parallel GPUs has two regimes:

* small batch — every weight is read once (bytes·P / (N · A_bm)) and each of the 4·L
  collectives per step pays a fixed latency; the two add up, because the next layer waits for
  each message;
* large batch — the step does B · 2·P FLOPs (over N · A_f) while the collectives move
  B · bytes · 4·D per layer (over A_c); compute and communication overlap, so the larger wins.

Each of her formulas is a view of the library's one step time: a function here builds the
step's parts and communication the way she counts them (a `StepCost`), and
`step_cost.step_time` prices it — her "total" — while `step_cost.work_time` is her "compute"
and the cost's `comm_s` her "comms".

Here A_bm is memory bandwidth, A_f peak FLOP/s, A_c interconnect bandwidth (one direction), all
read from a `Chip`, and the per-message latency is the chip's `hop_latency_s`. Her tensor
parallelism is Megatron's: two all-reduces of a [B, D] activation per layer (after the attention
output projection and after the MLP), each a reduce-scatter plus an all-gather — four
collectives, each moving (N-1)/N · D elements per chip per token.

The functions generalise her d_model² shapes to the library's configs (K·H may differ from D);
for her models, where N_heads·d_head = d_model, they reduce to her formulas exactly.
"""

from __future__ import annotations

import math
from dataclasses import replace

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import kv_bytes_per_token, param_bytes, param_count
from inferbook.perf.decode_roofline import decode_step_cost
from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import peak_flops_per_s
from inferbook.perf.step_cost import StepCost, Work

__all__ = ["kv_projection_flops", "kv_projection_times", "break_even_tokens",
           "kv_flops_saved", "kv_capacity_tokens", "min_chips_for_weights",
           "tp_comm_bytes_per_token", "small_batch_cost", "large_batch_cost",
           "tensor_parallel_cost",
           "flops_per_comm_byte", "comm_intensity",
           "layer_flop_breakdown", "intermediate_share_approx", "intermediate_share_at_width",
           "context_pass_ratio"]


# The kv cache: FLOPs against bytes --------------------------------------------------------------

def kv_projection_flops(cfg: ModelConfig) -> int:
    """2·2·L·D·(K·H): FLOPs to compute one token's keys and values in every layer.

    kipply's 2·2·n_layers·d_model² (section "kv cache"), with W_k, W_v of shape [D, K·H].
    """
    return 2 * 2 * cfg.L * cfg.D * cfg.K * cfg.H


def kv_projection_times(cfg: ModelConfig, chip: Chip, weight_bytes: float = 2,
                    compute: str = "bf16") -> tuple[float, float]:
    """(memory_s, compute_s) for one token's keys and values: load W_k, W_v vs do the FLOPs.

    memory = 2·L·D·K·H·bytes / A_bm, compute = 2·2·L·D·K·H / A_f. Their ratio is
    `break_even_tokens` whatever the model: "none of the model architecture matters".
    """
    weights = 2 * cfg.L * cfg.D * cfg.K * cfg.H
    return (weights * weight_bytes / chip.hbm_bytes_per_s,
            kv_projection_flops(cfg) / peak_flops_per_s(chip, compute))


def break_even_tokens(chip: Chip, weight_bytes: float = 2, compute: str = "bf16") -> float:
    """A_f / A_bm · bytes/2: tokens per step below which loading weights costs more than math.

    kipply's "ratio of 208" (312e12 / 1.5e12 for an A100) — the critical batch size of
    `roofline.critical_batch` seen from the other side.
    """
    return peak_flops_per_s(chip, compute) * weight_bytes / (2 * chip.hbm_bytes_per_s)


def kv_flops_saved(cfg: ModelConfig, context: int) -> int:
    """2·2·n_tokens·L·D·(K·H): the key/value FLOPs a cache saves on one step with `context`
    earlier tokens (kipply, "kv cache"). Grows with the context: without a cache, sampling
    is quadratic."""
    return context * kv_projection_flops(cfg)


# Capacity ---------------------------------------------------------------------------------------

def min_chips_for_weights(cfg: ModelConfig, chip: Chip, weight_bytes: float = 2) -> int:
    """The fewest chips whose memory holds the weights alone (kipply: three A100s for 52B)."""
    return math.ceil(param_bytes(cfg, weight_bytes) / chip.hbm_bytes)


def kv_capacity_tokens(cfg: ModelConfig, chip: Chip, chips: int, weight_bytes: float = 2,
                       kv_bytes: float = 2) -> int:
    """Tokens of KV cache that fit beside the weights: (chips·HBM - param_bytes) / bytes_per_token.

    kipply, "capacity": the tokens can be spent on one long sequence or shared out as a batch.
    """
    free = chips * chip.hbm_bytes - param_bytes(cfg, weight_bytes)
    return max(0, math.floor(free / kv_bytes_per_token(cfg, kv_bytes)))


# Tensor-parallel communication and latency ---------------------------------------------------

def tp_comm_bytes_per_token(cfg: ModelConfig, chips: int, act_bytes: float = 2,
                                exact: bool = True) -> float:
    """Bytes each chip sends per token per step: L · 4 · (N-1)/N · D · bytes.

    kipply, "model parallelism": 4·(N-1)·d_model/N per layer (she counts elements). Her
    latency formulas round (N-1)/N up to 1 (`exact=False`).
    """
    share = (chips - 1) / chips if exact else 1.0
    return cfg.L * 4 * share * cfg.D * act_bytes


def _params(cfg: ModelConfig, params: float | None) -> float:
    return param_count(cfg) if params is None else params


def small_batch_cost(cfg: ModelConfig, chip: Chip, chips: int,
                     weight_bytes: float = 2, params: float | None = None,
                     hop_latency_s: float | None = None) -> StepCost:
    """compute = bytes·P / (N·A_bm); comms = 4·L·latency (kipply, "latency calculations"),
    as a cost: one weight-load part and 4·L message latencies.

    The step is bound by loading the weights; each of the 4·L collectives pays one message
    latency (none on a single chip), and the two add: the latencies are the step's
    communication, and nothing overlaps them. The KV cache and unembedding reads are left
    out, as she leaves them. `params` overrides P (she uses round numbers: 260e9).
    """
    latency = chip.hop_latency_s if hop_latency_s is None else hop_latency_s
    if latency is None and chips > 1:
        raise ValueError(f"{chip.name} has no per-message latency in the registry; "
                         "pass hop_latency_s")
    cost = StepCost((Work("weight load", 0.0, weight_bytes * _params(cfg, params)),),
                    comm_latency_s=4 * cfg.L * latency if chips > 1 else 0.0)
    return cost


def large_batch_cost(cfg: ModelConfig, chip: Chip, chips: int, batch: int,
                     act_bytes: float = 2, params: float | None = None) -> StepCost:
    """compute = B·2·P / (N·A_f); comms = B·bytes·4·L·D / A_c; total = the larger, as a
    cost: one matmul part and the collectives' bandwidth time.

    kipply, "latency calculations", large batch: FLOP-bound (the weight load left out),
    communication overlapped with compute, message latency dropped. A_c is one direction
    over all of a chip's links.
    """
    link = chip.interconnect_bytes_per_s
    comms = 0.0
    if chips > 1:
        if link is None:
            raise ValueError(f"{chip.name} has no interconnect bandwidth in the registry")
        comms = batch * tp_comm_bytes_per_token(cfg, chips, act_bytes, exact=False) / link
    return StepCost((Work("matmuls", batch * 2 * _params(cfg, params), 0.0),),
                    comm_bandwidth_s=comms)


def tensor_parallel_cost(cfg: ModelConfig, chip: Chip, chips: int, batch: int,
                         context: int, weight_bytes: float = 2, kv_bytes: float = 2,
                         act_bytes: float = 2) -> StepCost:
    """A decode step on `chips` tensor-parallel chips, kipply's two regimes in one cost.

    The work is the sources' decode step (`decode_roofline.decode_step_cost`: KV read + the
    larger of weight load and FLOPs, all divided over the chips); the communication is her
    all-reduce traffic, B · bytes · 4·L·D·(N-1)/N / A_c, which overlaps with the work, and
    4·L message latencies, which do not. Priced by `step_cost.step_time`: for one chip it is
    the roofline step time; for small batches kipply's small-batch latency plus the KV read;
    for large ones her large-batch latency plus the KV read.
    """
    kv = batch * context * kv_bytes_per_token(cfg, kv_bytes)
    cost = decode_step_cost(param_count(cfg), param_bytes(cfg, weight_bytes), kv, batch)
    if chips > 1:
        if chip.interconnect_bytes_per_s is None or chip.hop_latency_s is None:
            raise ValueError(f"{chip.name} lacks interconnect bandwidth or message latency")
        traffic = batch * tp_comm_bytes_per_token(cfg, chips, act_bytes)
        cost = replace(cost, comm_bandwidth_s=traffic / chip.interconnect_bytes_per_s,
                       comm_latency_s=4 * cfg.L * chip.hop_latency_s)
    return cost


def flops_per_comm_byte(cfg: ModelConfig, act_bytes: float = 2) -> dict[str, float]:
    """FLOPs per byte communicated for each matmul of a layer (kipply, "batch sizes").

    A [B, D] activation (B·D·bytes sent) feeds 2·B·D·out FLOPs: qkv → 2·(N·H + 2·K·H)/bytes
    (3·D for her models), o → 2·D/bytes, w1 and w2 → 2·F/bytes (4·D). Divide by the number
    of chips for the per-chip figure; compare with `comm_intensity`.
    """
    per = lambda out: 2 * out / act_bytes  # noqa: E731
    return {"qkv": per(cfg.N * cfg.H + 2 * cfg.K * cfg.H), "o": per(cfg.D),
            "w1": per(cfg.F), "w2": per(cfg.F)}


def comm_intensity(chip: Chip, compute: str = "bf16") -> float:
    """A_f / A_c: FLOPs a chip must do per byte it sends to stay compute-bound (kipply: 1040)."""
    if chip.interconnect_bytes_per_s is None:
        raise ValueError(f"{chip.name} has no interconnect bandwidth in the registry")
    return peak_flops_per_s(chip, compute) / chip.interconnect_bytes_per_s


# Flop counting and intermediate memory ----------------------------------------------------------

def layer_flop_breakdown(cfg: ModelConfig) -> dict[str, int]:
    """FLOPs per token per layer by block (kipply, "flops counting"): qkv 2·D·(N·H + 2·K·H),
    output projection 2·N·H·D, MLP 2·(2 or 3)·D·F. For her models 6·D², 2·D², 16·D²."""
    D, F = cfg.D, cfg.F
    return {"qkv": 2 * D * (cfg.N * cfg.H + 2 * cfg.K * cfg.H), "o": 2 * cfg.N * cfg.H * D,
            "mlp": 2 * (3 if cfg.mlp == "gated" else 2) * D * F}


def intermediate_share_approx(share: float, d_from: int, d_to: int) -> float:
    """kipply's scaling of a measured share of memory-bound element-wise time to a wider model:
    share · (d_to/d_from) / (d_to/d_from)² ("intermediate memory costs": 43% at D = 1024
    becomes 0.43 · 8 / 64 ≈ 5% at D = 8192).

    It scales the element-wise time like D and divides by the matmul time scaled like D², but
    takes the old matmul time to be the whole step (1) rather than 1 - share; see
    `intermediate_share_at_width` for the share of the new step time.
    """
    r = d_to / d_from
    return share * r / r ** 2


def intermediate_share_at_width(share: float, d_from: int, d_to: int) -> float:
    """The share of step time left to element-wise work when the model widens from d_from to d_to.

    Element-wise time scales like D (vectors), matmul time like D² (per layer):
    share·r / (share·r + (1 - share)·r²) with r = d_to / d_from.
    """
    r = d_to / d_from
    return share * r / (share * r + (1 - share) * r ** 2)


def context_pass_ratio(chip: Chip, bandwidth_share: float = 1.0,
                       compute: str = "bf16") -> float:
    """A_f / (A_bm · share): how many context tokens a FLOP-bound forward pass processes in
    the time of one memory-bound decode step.

    kipply, "comparing against real benchmarks": a pass over T tokens takes T divided by this
    ratio times as long as a decode step that reads the weights (she uses 90% of the
    bandwidth: 312e12 / (1.5e12 · 0.9) = 231).
    """
    return peak_flops_per_s(chip, compute) / (chip.hbm_bytes_per_s * bandwidth_share)
