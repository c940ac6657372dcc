"""One step's cost, and the one formula that turns it into time.

Every time estimate of the book describes a step — a decode step, a prefill, a step of an MoE
on many chips — by what it computes and moves, and asks `step_time` how long that takes:

    step = max( Σ_parts max(FLOPs / C, bytes / W),  collectives' bandwidth time )
           + collectives' latency

with C and W the peak FLOP/s and memory bandwidth of all the chips together. Each *part*
(`Work`) is an operation that pays its own roofline (`roofline.roofline_time`, on the chips
together), and the parts run one after another: a decode step's attention, always
bandwidth-bound, does not hide behind its weight matmuls. The step's collectives are priced
before they get here (`layout_comms` for the library's layouts, or a source's closed form):
the bytes they move overlap with the work, their fixed latencies do not, because the next
layer waits for each message (the rule of "Transformer Inference Arithmetic", Chen 2022, and
of the scaling book's part 7, Austin et al. 2025).

The sources' formulas are views of this one: each builds a `StepCost` the way its source
counts, and calls `step_time`:

    decode_roofline.decode_step_time       the scaling book's eq. 1:
                                           KV read + max(2·B·P / C, weights / W)
    decode_roofline.step_time_lower_bound  every byte read once, nothing else
    latency.small_batch_latency            kipply: weight load + 4·L message latencies
    latency.large_batch_latency            kipply: max(2·B·P / C, all-reduce bytes / A_c)
    latency.tensor_parallel_step_time      both of her regimes, with the KV read
    phase_time.generate_step_seconds       the serving simulations' decode step
    phase_time.prefill_seconds             and their prefill
    moe_layouts.moe_decode_step            an MoE, tensor- against expert-parallel
    estimator.estimate                     `inferbook estimate`: decode, prefill, any layout

and tests/unit/test_step_cost.py checks each against a `StepCost` built here by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import peak_flops_per_s

__all__ = ["Work", "StepCost", "work_time", "step_time"]


@dataclass(frozen=True)
class Work:
    """One part of a step that pays its own roofline: `flops` FLOPs and `bytes` bytes of
    memory traffic, over all the chips that share it."""

    name: str
    flops: float
    bytes: float


@dataclass(frozen=True)
class StepCost:
    """What a step does: its parts, paid one after another, and its priced collectives.

    `comm_bandwidth_s` is the time the collectives' bytes take on the interconnect (it
    overlaps with the parts), `comm_latency_s` their fixed costs (it does not).
    """

    parts: tuple[Work, ...]
    comm_bandwidth_s: float = 0.0
    comm_latency_s: float = 0.0

    @property
    def flops(self) -> float:
        return sum(w.flops for w in self.parts)

    @property
    def bytes(self) -> float:
        return sum(w.bytes for w in self.parts)


def work_time(cost: StepCost, chip: Chip, chips: int = 1, compute: str = "bf16") -> float:
    """Σ over the parts of max(FLOPs / (chips·C), bytes / (chips·W)): the step's roofline,
    without its communication."""
    C = chips * peak_flops_per_s(chip, compute)
    W = chips * chip.hbm_bytes_per_s
    total = 0.0
    for w in cost.parts:
        total += max(w.flops / C, w.bytes / W)
    return total


def step_time(cost: StepCost, chip: Chip, chips: int = 1, compute: str = "bf16") -> float:
    """The time of one step: max(work, collectives' bandwidth time) + collectives' latency.

    `chips` chips share the work evenly (their FLOP/s and bandwidth add up); pass per-chip
    parts with `chips=1` when the chips' shares differ. `compute` picks the chip's bfloat16
    ('bf16') or int8 ('int8') peak.
    """
    return max(work_time(cost, chip, chips, compute), cost.comm_bandwidth_s) \
        + cost.comm_latency_s
