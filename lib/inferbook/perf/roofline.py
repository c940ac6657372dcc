"""Rooflines: how long a step takes when either memory or arithmetic is the bottleneck.

An operation that performs `flops` FLOPs and moves `bytes` bytes through device memory takes at
least max(flops / C, bytes / W) on a chip with peak arithmetic C (FLOP/s) and memory bandwidth W
(B/s), assuming loads overlap with arithmetic (Williams et al. 2009; the scaling book, part 1).
Its *arithmetic intensity* flops / bytes decides which term wins: above the chip's C / W it is
compute-bound, below it memory-bound.

For decoding that gives the book's two central results (the scaling book, part 7, "linear
operations" and "theoretical estimates"):

* a weight matmul of B tokens does 2·B FLOPs per weight it reads, so it turns compute-bound
  at the *critical batch* B_crit = C · bytes_per_weight / (2 · W);
* attention against a KV cache does about one FLOP per byte of cache whatever the batch, so
  it is always memory-bound, and a step takes
  kv_bytes / W + max(2 · B · P / C, param_bytes / W) (`decode_roofline`, a view of the
  library's one step-time formula, `step_cost`).

Every function takes plain numbers or a `Chip` from `inferbook.perf.hardware`; `compute` picks the
chip's bfloat16 ("bf16") or int8 ("int8") peak.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Sequence

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import kv_bytes_per_token, param_bytes
from inferbook.perf.hardware import Chip

__all__ = ["peak_flops_per_s", "roofline_time", "matmul_flops", "matmul_bytes",
           "matmul_intensity", "critical_intensity", "critical_batch", "attention_cost",
           "attention_intensity", "tokens_per_s", "max_batch", "batches_that_fit",
           "pareto_frontier"]


def peak_flops_per_s(chip: Chip, compute: str = "bf16") -> float:
    """The chip's dense peak: bfloat16 FLOP/s ('bf16'), 8-bit floating-point FLOP/s ('fp8')
    or int8 op/s ('int8')."""
    if compute == "bf16":
        return chip.bf16_flops_per_s
    if compute in ("int8", "fp8"):
        peak = chip.int8_ops_per_s if compute == "int8" else chip.fp8_flops_per_s
        if peak is None:
            raise ValueError(f"{chip.name} has no {compute} peak in the registry")
        return peak
    raise ValueError(f"compute must be 'bf16', 'fp8' or 'int8', got {compute!r}")


def roofline_time(flops: float, nbytes: float, chip: Chip, compute: str = "bf16") -> float:
    """max(flops / C, bytes / W): the roofline lower bound on one operation's time."""
    return max(flops / peak_flops_per_s(chip, compute), nbytes / chip.hbm_bytes_per_s)


# Matmuls ------------------------------------------------------------------------------------

def matmul_flops(B: int, D: int, F: int) -> int:
    """2·B·D·F: one multiply and one add per (row, input, output) triple of [B,D]·[D,F].

    kipply, "kv cache" (2mnp for an m×n by n×p product); the scaling book, part 7, "linear
    operations" (T_math = 2BDF / C).
    """
    return 2 * B * D * F


def matmul_bytes(B: int, D: int, F: int, x_bytes: float = 2, w_bytes: float = 2,
                 out_bytes: float = 2) -> float:
    """B·D·x + D·F·w + B·F·out: read the input and the weight, write the output once.

    The scaling book's 2BD + 2DF + 2BF for bfloat16 everything (part 7, "linear operations").
    """
    return B * D * x_bytes + D * F * w_bytes + B * F * out_bytes


def matmul_intensity(B: int, D: int, F: int, x_bytes: float = 2, w_bytes: float = 2,
                     out_bytes: float = 2) -> float:
    """FLOPs per byte of [B,D]·[D,F]; tends to 2·B / w_bytes when B ≪ D, F (B in bf16).

    The scaling book, part 7, "linear operations": 2BDF / (2BD + 2DF + 2BF).
    """
    return matmul_flops(B, D, F) / matmul_bytes(B, D, F, x_bytes, w_bytes, out_bytes)


def critical_intensity(chip: Chip, compute: str = "bf16") -> float:
    """C / W, FLOPs per byte of memory traffic at which the chip's two roofs meet.

    The scaling book's α_hbm (240 for a TPU v5e), kipply's "ratio of 208" for an A100.
    """
    return peak_flops_per_s(chip, compute) / chip.hbm_bytes_per_s


def critical_batch(chip: Chip, weight_bytes: float = 2, compute: str = "bf16") -> float:
    """B_crit = C · bytes_per_weight / (2 · W): tokens per step above which matmuls are
    compute-bound.

    From 2·B·D·F FLOPs ≥ (C / W) · D·F·bytes_per_weight, dropping the activations (B ≪ D, F).
    The scaling book writes it β·α_hbm with β = bits per weight / bits per activation: int8
    weights halve B_crit, int8 arithmetic (compute='int8') doubles C and with it B_crit.
    """
    return peak_flops_per_s(chip, compute) * weight_bytes / (2 * chip.hbm_bytes_per_s)


# Attention ----------------------------------------------------------------------------------

def attention_cost(T: int, S: int, N: int, K: int, H: int, B: int = 1, act_bytes: float = 2,
                   kv_bytes: float = 2) -> tuple[float, float]:
    """(FLOPs, bytes) of one layer's attention: T queries per sequence against S keys.

    FLOPs: Q·Kᵀ and P·V, 2·B·T·S·N·H each. Bytes (a fused kernel that never writes the score
    matrix): read Q and write the output, B·T·N·H·act_bytes each; read K and V,
    B·S·K·H·kv_bytes each. The scaling book, part 7, "what about attention?".
    """
    flops = 4 * B * T * S * N * H
    nbytes = 2 * B * T * N * H * act_bytes + 2 * B * S * K * H * kv_bytes
    return flops, nbytes


def attention_intensity(T: int, S: int, G: int = 1, act_bytes: float = 2,
                        kv_bytes: float = 2) -> float:
    """FLOPs per byte of attention: 2·T·S·G / (T·G·act_bytes + S·kv_bytes).

    With G = N/K = 1 and bfloat16 this is the scaling book's S·T / (S + T): T / 2 in prefill
    (S = T), so long prompts are compute-bound; S / (S + 1) < 1 in generation (T = 1), so
    decoding attention is memory-bound at any batch size. Grouped queries raise it to ≈ G.
    """
    return 2 * T * S * G / (T * G * act_bytes + S * kv_bytes)


# Throughput and capacity -----------------------------------------------------------------------

def tokens_per_s(batch: int, step_s: float) -> float:
    """B / step time: one new token per sequence per step.

    With the lower-bound step time this is the scaling book's "theoretical max tokens/s"
    (part 7, "theoretical estimates"): B·W / (B·KV bytes + weight bytes).
    """
    return batch / step_s


def batches_that_fit(free_bytes: float, bytes_per_sequence: float) -> int:
    """floor(free / per_sequence), exactly and at once: the most sequences whose caches fit
    in `free_bytes` (0 when nothing is free).

    Computed on the exact rationals of the two floats, so it never rounds either way and never
    loops, whatever their size. Raises ValueError on non-finite or non-positive sizes.
    """
    for name, value in (("free bytes", free_bytes), ("bytes per sequence", bytes_per_sequence)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
    if bytes_per_sequence <= 0:
        raise ValueError(f"bytes per sequence must be positive, got {bytes_per_sequence!r}")
    if free_bytes <= 0:
        return 0
    return math.floor(Fraction(free_bytes) / Fraction(bytes_per_sequence))


def max_batch(cfg: ModelConfig, chip: Chip, context: int, chips: int = 1,
              weight_bytes: float = 2, kv_bytes: float = 2) -> int:
    """The largest B with param_bytes + B·(one sequence's cache) ≤ chips · HBM (0: none fits).

    Weights and KV caches are what inference holds (the scaling book, part 7, "what about
    memory?"; kipply, "capacity"); activations are left out as negligible. As in the sources,
    every cached token costs `kv_bytes_per_token` (`perf.estimator`, behind `inferbook
    estimate`, caps sliding-window layers at their window).
    """
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be a positive integer, got {context!r}")
    if isinstance(chips, bool) or not isinstance(chips, int) or chips < 1:
        raise ValueError(f"chips must be a positive integer, got {chips!r}")
    free = chips * chip.hbm_bytes - param_bytes(cfg, weight_bytes)
    return batches_that_fit(free, context * kv_bytes_per_token(cfg, kv_bytes))


# The latency-throughput trade-off ----------------------------------------------------------

def pareto_frontier(latencies: Sequence[float], throughputs: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats, in order of increasing latency.

    A point (latency, throughput) is dominated when another has latency ≤ and throughput ≥
    with one of them strict. What remains is the frontier of the scaling book's
    latency-cost figure: every setting (batch size, chip count) on it is the cheapest way to
    reach its latency. Ties keep the first point.
    """
    if len(latencies) != len(throughputs):
        raise ValueError("latencies and throughputs must have the same length")
    order = sorted(range(len(latencies)), key=lambda i: (latencies[i], -throughputs[i]))
    frontier: list[int] = []
    best = -math.inf
    for i in order:
        if throughputs[i] > best:
            frontier.append(i)
            best = throughputs[i]
    return frontier
