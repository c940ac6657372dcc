"""Serving a mixture of experts on many chips: tensor-parallel against expert-parallel.

Two ways to split an MoE over n chips (`parallel.expert_parallel` runs both):

* **tensor-parallel** (the 1D layout): every weight split n ways, every expert's F too. Each
  chip reads 1/n of every expert a step touches; each layer ends its attention block and its
  MoE block with an AllReduce of all B tokens' activations.
* **expert-parallel**: each chip holds E/n whole experts, and attention runs data-parallel
  with a copy of its weights on every chip, each chip serving B/n of the sequences. A MoE
  layer sends each chip's tokens to their experts and back (two AllToAlls of an [E, C, D]
  buffer), and no AllReduce remains.

Per decode step the experts cost both layouts the same bytes on average (a chip reads its
share of the experts the batch touched, `params.expected_experts`); expert parallelism reads
n copies of the attention weights and moves fewer, smaller collectives. So tensor parallelism
wins at small batches, where reading weights is the step, and expert parallelism once the
communication it saves outweighs the copies it reads: `crossover_batch` finds that batch.

`moe_decode_step` builds one chip's share of the step as a cost, which the library's one
step time prices (`step_cost.step_time(step.cost, chip)`): the roofline of the bytes it
reads and the FLOPs it does, overlapped with the collectives' bandwidth time, plus their
latencies. It assumes balanced routing: in expectation every chip gets its share of tokens
and experts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf import counts, params
from inferbook.perf.decode_attention_cost import decode_attention_flops
from inferbook.perf.hardware import Chip
from inferbook.perf.layout_comms import LayoutComms, expert_parallel_comms, layout_comms
from inferbook.perf.step_cost import StepCost, Work, step_time

__all__ = ["expert_parallel_param_bytes", "MoEStep", "moe_decode_step", "crossover_batch",
           "MOE_LAYOUTS"]

MOE_LAYOUTS = ("1d-ws", "expert-parallel")


def expert_parallel_param_bytes(cfg: ModelConfig, X: int = 1, Y: int = 1, Z: int = 1,
                                bytes_per_param: float = 2, kv_heads: int = 0) -> float:
    """Weight bytes one device holds in the expert-parallel layout on X·Y·Z devices.

    Routed experts [E_Z, D_X, F_Y] are split over all three (worked problem 6); every other
    matrix as the 1D layout over Y: heads, F and the embedding's D over Y, W_K and W_V over
    the `kv_heads` of them that split the KV heads (default gcd(K, Y)); norms and routers
    whole. With X = Z = 1 this is the 1D layout on Y devices (tensor parallelism).
    """
    if cfg.moe is None:
        raise ValueError(f"{cfg.name} has no mixture of experts")
    Yk = kv_heads or math.gcd(cfg.K, Y)
    held = 0.0
    for t in params.tensors(cfg):
        if t.role == "expert":
            held += t.size / (X * Y * Z)
        elif t.name in ("wk", "wv"):
            held += t.size / Yk
        elif t.role in ("vector", "router"):
            held += t.size
        else:
            held += t.size / Y
    return held * bytes_per_param


@dataclass(frozen=True)
class MoEStep:
    """One decode step of an MoE on `chips` chips, per chip: what it reads, computes and
    sends, and all of it as one chip's `cost` (price it with `step_cost.step_time(cost,
    chip)`, one chip: the shares are already per chip)."""

    layout: str
    batch: int
    weight_bytes: float     # weights read (experts in expectation)
    kv_bytes: float         # cache read
    flops: float
    comm: LayoutComms
    cost: StepCost


def moe_decode_step(cfg: ModelConfig, chip: Chip, chips: int, batch: int, layout: str, *,
                    context: int = 0, capacity_factor: float | None = None,
                    weight_bytes: float = 2, act_bytes: float = 2) -> MoEStep:
    """A decode step of `batch` sequences with `context` cached tokens each, tensor-parallel
    ("1d-ws") or expert-parallel over all `chips`, as one chip's share; its time,
    max(roofline, comm bandwidth) + latency, is `step_time(step.cost, chip)`."""
    if layout not in MOE_LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(MOE_LAYOUTS)}, got {layout!r}")
    if cfg.moe is None:
        raise ValueError(f"{cfg.name} has no mixture of experts")
    tp = layout == "1d-ws"
    held = expert_parallel_param_bytes(cfg, Y=chips if tp else 1, Z=1 if tp else chips,
                                       bytes_per_param=weight_bytes)
    routed = sum(t.size for t in params.tensors(cfg) if t.role == "expert")
    untouched = 1 - params.expected_experts(cfg.moe.E, cfg.moe.k, batch) / cfg.moe.E
    read = held - routed * weight_bytes / chips * untouched
    kv = counts.kv_cache_bytes(cfg, batch, context, act_bytes) / chips if context else 0.0
    flops = (2 * params.active_param_count(cfg) * batch
             + decode_attention_flops(cfg, batch, context)) / chips
    comm = (layout_comms(cfg, chip, chips, batch, 1, "1d-ws", act_bytes=act_bytes) if tp else
            expert_parallel_comms(cfg, chip, chips, batch, 1, capacity_factor=capacity_factor,
                                  act_bytes=act_bytes))
    # One chip's share, one roofline over it (chips=1: the shares are already per chip).
    cost = StepCost((Work("decode step", flops, read + kv),), comm.bandwidth_s, comm.latency_s)
    return MoEStep(layout, batch, read, kv, flops, comm, cost)


def crossover_batch(cfg: ModelConfig, chip: Chip, chips: int, *, max_batch: int = 2 ** 20,
                    compute: str = "bf16", **step_options: float) -> int | None:
    """The smallest batch (a multiple of `chips`, so that every chip serves whole sequences)
    from which the expert-parallel step is no slower than the tensor-parallel one; None if
    tensor parallelism stays faster up to `max_batch`. Both steps are priced in `compute`.

    Doubles the batch until expert parallelism wins, then bisects the last doubling: the
    search assumes one crossing, which `moe_decode_step`'s terms give (expert parallelism
    adds a fixed cost and saves one that grows with the batch).
    """
    def ep_wins(B: int) -> bool:
        ep = moe_decode_step(cfg, chip, chips, B, "expert-parallel", **step_options)
        tp = moe_decode_step(cfg, chip, chips, B, "1d-ws", **step_options)
        return step_time(ep.cost, chip, 1, compute) <= step_time(tp.cost, chip, 1, compute)

    lo, hi = 0, 1                                       # in units of `chips` sequences
    while not ep_wins(hi * chips):
        if hi * chips >= max_batch:
            return None
        lo, hi = hi, 2 * hi
    while hi - lo > 1:                                  # ep loses at lo, wins at hi
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ep_wins(mid * chips) else (mid, hi)
    return hi * chips
