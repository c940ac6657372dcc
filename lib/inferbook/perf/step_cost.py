"""One step's cost, and the one formula that turns it into time.

Every time estimate of the book describes a step — a decode step, a prefill, a step of an MoE
on many chips — by what it computes and moves, and asks `step_time` how long that takes:

    step = max( Σ_parts max(FLOPs / C, bytes / W),  collectives' bandwidth time )
           + collectives' latency

with C and W the peak FLOP/s and memory bandwidth of all the chips together (or the fractions
of them an `efficiency.Efficiency` says a deployment achieves; the default is the bare
roofline, `efficiency.IDEAL`, which adds nothing). Each *part*
(`Work`) is an operation that pays its own roofline (`roofline.roofline_time`, on the chips
together), and the parts run one after another: a decode step's attention, always
bandwidth-bound, does not hide behind its weight matmuls. The step's collectives are priced
before they get here (`layout_comms` for the library's layouts, or a source's closed form):
the bytes they move overlap with the work, their fixed latencies do not, because the next
layer waits for each message (the rule of "Transformer Inference Arithmetic", Chen 2022, and
of the scaling book's part 7, Austin et al. 2025). A step may instead wait for its collectives'
bytes too (`overlap=False`: a prefill whose all-reduces run between its matmuls), and under an
efficiency each pass through the model's layers pays a fixed cost per layer.

`step_time` is one of the library's two public functions that compute a step time; the
other is `estimator.estimate`, which builds a deployment's steps (`estimate_steps`) and
prices them here. Everything else that speaks of a step's time builds the step's cost and
leaves the pricing to `step_time`; the sources' formulas are such named views, each building
a `StepCost` the way its source counts:

    decode_roofline.decode_step_cost       the scaling book's eq. 1:
                                           KV read + max(2·B·P / C, weights / W)
    decode_roofline.lower_bound_step_cost  every byte read once, nothing else
    latency.small_batch_cost               kipply: weight load + 4·L message latencies
    latency.large_batch_cost               kipply: max(2·B·P / C, all-reduce bytes / A_c)
    latency.tensor_parallel_cost           both of her regimes, with the KV read
    phase_time.generate_step_cost          the serving simulations' decode step
    phase_time.prefill_step_cost           and their prefill
    moe_layouts.moe_decode_step            an MoE, tensor- against expert-parallel

tests/unit/test_step_cost.py checks each against a `StepCost` built here by hand, and
tests/unit/test_step_time_entry_points.py that no other public function of perf/ or
parallel/ prices a step.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferbook.perf.efficiency import IDEAL, Efficiency
from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import peak_flops_per_s

__all__ = ["Work", "StepCost", "work_time", "step_time"]


@dataclass(frozen=True)
class Work:
    """One part of a step that pays its own roofline: `flops` FLOPs and `bytes` bytes of
    memory traffic, over all the chips that share it. `dequantized` names the storage format
    of weights the part unpacks into bf16 matmuls as it reads them (weight-only
    quantization, 'int8', 'int4' or 'fp8'), whose read an efficiency may price apart;
    `grouped` marks the grouped matmuls of a mixture's routed experts, whose arithmetic an
    efficiency may price apart too, and `cache` a part whose bytes are the KV cache
    attention reads."""

    name: str
    flops: float
    bytes: float
    dequantized: str | None = None
    grouped: bool = False
    cache: bool = False


@dataclass(frozen=True)
class StepCost:
    """What a step does: its parts, paid one after another, and its priced collectives.

    `comm_bandwidth_s` is the time the collectives' bytes take on the interconnect (it
    overlaps with the parts if `overlap`, or by default as the efficiency says for the
    step's phase: the bare roofline always overlaps), `comm_latency_s` their fixed costs
    (it does not), `passes` how many collective passes pay them. `layers` is how many layers
    the step runs through, `moe_layers` how many of them route tokens to experts, and
    `phase` ('decode' or 'prefill') which kind of pass it is: an efficiency charges a fixed
    cost per layer of each, and per routing layer.
    """

    parts: tuple[Work, ...]
    comm_bandwidth_s: float = 0.0
    comm_latency_s: float = 0.0
    passes: int = 0
    layers: int = 0
    phase: str = "decode"
    overlap: bool | None = None
    moe_layers: int = 0

    @property
    def flops(self) -> float:
        return sum(w.flops for w in self.parts)

    @property
    def bytes(self) -> float:
        return sum(w.bytes for w in self.parts)

    @property
    def comm_s(self) -> float:
        """The collectives' time on the bare roofline: bandwidth time plus latencies (what
        kipply calls a step's "comms"; `step_time` overlaps the first with the work)."""
        return self.comm_bandwidth_s + self.comm_latency_s


def work_time(cost: StepCost, chip: Chip, chips: int = 1, compute: str = "bf16",
              efficiency: Efficiency = IDEAL) -> float:
    """Σ over the parts of max(FLOPs / (chips·C), bytes / (chips·W)): the step's roofline,
    without its communication; C and W the fractions of the peaks `efficiency` achieves."""
    C = chips * peak_flops_per_s(chip, compute) * efficiency.mfu(compute)
    total = 0.0
    for w in cost.parts:
        W = chips * chip.hbm_bytes_per_s * efficiency.bandwidth(w.dequantized, w.cache)
        total += max(w.flops / (C * (efficiency.experts_mfu if w.grouped else 1.0)),
                     w.bytes / W)
    return total


def step_time(cost: StepCost, chip: Chip, chips: int = 1, compute: str = "bf16",
              efficiency: Efficiency = IDEAL) -> float:
    """The time of one step: max(work, collectives' bandwidth time) + collectives' latency
    (work + bandwidth time + latency when the step does not overlap them), plus the fixed
    cost of its layers under `efficiency` (none for the bare roofline, the default).

    `chips` chips share the work evenly (their FLOP/s and bandwidth add up); pass per-chip
    parts with `chips=1` when the chips' shares differ. `compute` picks the chip's bfloat16
    ('bf16'), fp8 ('fp8') or int8 ('int8') peak.
    """
    e = efficiency
    work = work_time(cost, chip, chips, compute, e)
    bandwidth = cost.comm_bandwidth_s / e.link
    latency = cost.comm_latency_s + cost.passes * e.pass_overhead_s
    overlap = e.overlaps(cost.phase) if cost.overlap is None else cost.overlap
    joined = max(work, bandwidth) if overlap else work + bandwidth
    return joined + latency + e.fixed_s(cost.phase, cost.layers, cost.moe_layers)
