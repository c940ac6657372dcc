"""Communication of sharded inference: the sources' formulas, each named after its source.

  ws1d_comm_time            AllReduce of B·D per block: 2·B·D·bytes / (axes · W_ici)
  ws2d_comm_time            worked problem 7: 2BD/(X·W) + 4BF/(YZ·W) for bf16
  ws2d_optimal_x            X = sqrt(n·D/(2F)) (= sqrt(n/8) when F = 4D)
  ws2d_crossover_chips      n where 2D beats 1D: 32·(F/D)·(3/4)² chips
  model_parallel_limit      Y = F / (B·β), β = W_hbm / W_ici ("generation" section)
  prefill_model_parallel_limit   M = F / α, α = C / W_ici ("prefill": about F / 2200)
  ring_collective_time      appendix C: max(t_hop · n/2, bytes / W_ici)
  latency_bound_bytes       appendix C; see below for its two readings
  collective_pass_latency   one pass's fixed cost over a group: hops per torus axis
                            (appendix C, axis by axis), α0 + α1·(g − 1) through a switch
                            (NCCL's cost model), (m − 1) network steps between m hosts

Times follow the scaling book's convention: a collective over an array of A bytes takes
A / W on one bidirectional ring axis of bandwidth W (AllGather, ReduceScatter, AllToAll),
2·A / W for an AllReduce, and spreading it over k mesh axes divides by k.

The exact inventories of what the library's layouts send (checked byte for byte against
compiled programs) are in `collectives`.
"""

from __future__ import annotations

import math

from inferbook.model.config import ModelConfig
from inferbook.perf.hardware import Chip

__all__ = ["ici_bandwidth", "ws1d_comm_time", "ws2d_comm_time", "ws2d_optimal_x",
           "ws2d_best_split", "ws2d_crossover_chips", "model_parallel_limit",
           "prefill_model_parallel_limit", "ring_collective_time", "latency_bound_bytes",
           "torus_ring_lengths", "collective_pass_latency"]


def ici_bandwidth(chip: Chip, axes: int = 1) -> float:
    """W_ici over `axes` mesh axes: each axis a bidirectional ring (2 × one link, one way)."""
    if chip.link_bytes_per_s is None:
        raise ValueError(f"{chip.name} has no interconnect bandwidth in the registry")
    return 2 * chip.link_bytes_per_s * axes


def ws1d_comm_time(batch: int, D: int, W_ici: float, bytes_per_element: float = 2,
                   axes: int = 1) -> float:
    """One MLP block of 1D model parallelism: an AllReduce of [B, D], 2·B·D·bytes/(axes·W).

    With int8 and one axis this is the scaling book's T_ICI = 2BD / W_ici; with bfloat16 over
    the three axes of a TPU torus, worked problem 7's 4BD / (3·W_ici).
    """
    return 2 * batch * D * bytes_per_element / (axes * W_ici)


def ws2d_comm_time(batch: int, D: int, F: int, X: float, YZ: float, W_ici: float,
                   bytes_per_element: float = 2, x_axes: int = 1, yz_axes: int = 2) -> float:
    """One MLP block of 2D weight-stationary (worked problem 7): AllGather and ReduceScatter
    of [B, D_X] over YZ, AllReduce of [B, F_YZ] over X. For bf16, X on one axis and YZ on two:
    2BD/(X·W) + 4BF/(YZ·W). With X = 1 (or YZ = 1) the collectives over it vanish."""
    a = bytes_per_element
    # A collective over a single chip moves nothing (X = 1 or YZ = 1 drops its terms).
    gather_scatter = 2 * a * batch * D / X / (yz_axes * W_ici) if YZ != 1 else 0.0
    allreduce = 2 * a * batch * F / YZ / (x_axes * W_ici) if X != 1 else 0.0
    return gather_scatter + allreduce


def ws2d_optimal_x(n: float, D: int, F: int, x_axes: int = 1, yz_axes: int = 2) -> float:
    """The X minimising ws2d_comm_time at X·YZ = n: sqrt(n·D·x_axes / (F·yz_axes)).

    The scaling book's sqrt(n/8) for F = 4D (its YZ = sqrt(8n)); not necessarily an integer.
    """
    return math.sqrt(n * D * x_axes / (F * yz_axes))


def ws2d_best_split(n: int, D: int, F: int, **kw: float) -> tuple[int, int]:
    """The integer split X·YZ = n with the least ws2d_comm_time (X dividing n)."""
    return min(((x, n // x) for x in range(1, n + 1) if n % x == 0),
               key=lambda s: ws2d_comm_time(1, D, F, s[0], s[1], 1.0, **kw))


def ws2d_crossover_chips(D: int, F: int, axes_1d: int = 3, x_axes: int = 1,
                         yz_axes: int = 2) -> float:
    """Chips beyond which 2D (at its optimal split) moves less than 1D over `axes_1d` axes.

    Per B·bytes/W, 1D costs t1 = 2D/axes_1d and 2D costs g/X + r·X/n with g = 2D/yz_axes
    and r = 2F/x_axes, whose minimum over X is 2·sqrt(g·r/n). They are equal at
    n = 4·g·r/t1²: 18·F/D = 32·(F/D)·(3/4)² for the sources' axes, 72 chips when F = 4D.
    (Worked problem 7 prints 81; its own formula gives 72.)
    """
    t1 = 2 * D / axes_1d                                 # per B·a/W
    g = 2 * D / yz_axes                                  # AllGather + ReduceScatter coefficient
    r = 2 * F / x_axes                                   # AllReduce coefficient
    # min over X of g/X + r·X/n is 2·sqrt(g·r/n); equal to t1 at n = 4·g·r / t1².
    return 4 * g * r / t1 ** 2


def model_parallel_limit(F: int, batch: int, chip: Chip, axes: int = 1) -> float:
    """How far 1D model parallelism goes in decode before the AllReduce outlasts the weight
    load: T_HBM = 2DF/(Y·W_hbm) < T_ICI = 2BD/W_ici when Y > F/(B·β), β = W_hbm / W_ici."""
    beta = chip.hbm_bytes_per_s / ici_bandwidth(chip, axes)
    return F / (batch * beta)


def prefill_model_parallel_limit(cfg: ModelConfig, chip: Chip, axes: int = 1,
                                 bytes_per_element: float = 2) -> float:
    """Model-parallel degree beyond which a prefill MLP block waits for the interconnect.

    Per block and token, each of M devices does 2·(matrices)·D·F/M FLOPs and the block ends
    in an AllReduce of D activations (2·D·bytes / (axes·W_ici)). Communication outlasts the
    arithmetic when M > matrices·F·axes·W_ici / (bytes·C): for a plain two-matrix MLP in
    bfloat16 on one axis, M > F / α with α = C / W_ici (the sources' "F / 2200" on TPU v5e).
    """
    matrices = 3 if cfg.mlp == "gated" else 2
    W = ici_bandwidth(chip, axes)
    return matrices * cfg.F * W / (bytes_per_element * chip.bf16_flops_per_s)


def ring_collective_time(nbytes: float, chip: Chip, shards: int, kind: str = "all-gather",
                    axes: int = 1) -> float:
    """Appendix C's model of one collective on a bidirectional ring of `shards` devices:
    max(t_hop · shards/2, bytes / W_ici) — a fixed cost per hop, or bandwidth, whichever is
    larger; an AllReduce (ReduceScatter then AllGather) costs twice as much."""
    if chip.hop_latency_s is None:
        raise ValueError(f"{chip.name} has no per-hop latency in the registry")
    factor = 2 if kind == "all-reduce" else 1
    latency = chip.hop_latency_s * shards / 2
    return factor * max(latency, nbytes / ici_bandwidth(chip, axes))


def latency_bound_bytes(chip: Chip, shards: int, reading: str = "whole") -> float:
    """Below this size a collective over `shards` devices is latency-bound (appendix C).

    Each hop costs at least `chip.hop_latency_s`; a hop moves one shard, bytes / shards, over
    one link (one way). So the collective is latency-bound when
    (bytes / shards) / W_link < t_hop. Seed 000 states the threshold for the *whole buffer*,
    bytes < shards · W_link · t_hop (360 kB for 8 shards on TPU v5e); seed 002 for *one
    shard*, W_link · t_hop (45 kB). `reading` picks "whole" or "per-shard".
    """
    if chip.link_bytes_per_s is None or chip.hop_latency_s is None:
        raise ValueError(f"{chip.name} has no link bandwidth or hop latency in the registry")
    per_shard = chip.link_bytes_per_s * chip.hop_latency_s
    if reading == "per-shard":
        return per_shard
    if reading != "whole":
        raise ValueError(f"reading must be 'whole' or 'per-shard', got {reading!r}")
    return shards * per_shard


def torus_ring_lengths(group: int, axes: int) -> list[int]:
    """The rings a compact group of `group` chips forms on `axes` torus axes: `axes` whole
    numbers whose product is `group`, as equal as they can be (16 on two axes: 4 × 4; 8 on
    two: 4 × 2), longest first."""
    if group < 1 or axes < 1:
        raise ValueError(f"need a group and axes of at least 1, got {group}, {axes}")
    if axes == 1:
        return [group]
    target = group ** (1 / axes)
    # The divisor nearest the axes' geometric mean takes this axis; the rest share the others.
    first = min((d for d in range(1, group + 1) if group % d == 0),
                key=lambda d: (abs(math.log(d / target)), -d))
    return sorted([first, *torus_ring_lengths(group // first, axes - 1)], reverse=True)


def collective_pass_latency(chip: Chip, group: int, axes: int = 1,
                            between_hosts: bool = False) -> float:
    """The fixed cost of one pass of a collective (an AllGather, a ReduceScatter; an AllReduce
    makes two) over `group` chips, which spans `axes` axes of a torus — or, `between_hosts`,
    over `group` hosts on the data-centre network.

    * On a torus (ICI) a pass runs ring by ring over the axes the group spans, and a
      bidirectional ring of m chips takes m/2 hops of `hop_latency_s` (appendix C of the
      scaling book): 16 chips on a 4 × 4 torus pay 2 + 2 hops, not 16/2.
    * Through a switch, where the registry gives them, NCCL's ring model (RCCL's for AMD):
      `pass_latency_s` + (group − 1) · `step_latency_s`, a fixed cost that grows with the
      group (6.9 µs for 8 NVLink GPUs, 4.1 µs for 2);
    * otherwise one message latency, `hop_latency_s` (kipply's model), whatever the group;
    * between hosts (the phase of a hierarchical collective that crosses the data-centre
      network, `dcn_comms`): a ring over m hosts makes m − 1 steps a pass, each one message
      across the network, (m − 1) · `dcn_latency_s` (NCCL's network ring step).

    This is the one place a collective's latency is modelled; the layouts' pricing
    (`layout_comms.collective_time`) and every estimate call it. A group of one chip costs 0.
    """
    if group <= 1:
        return 0.0
    if between_hosts:
        if chip.dcn_latency_s is None:
            raise ValueError(f"{chip.name} has no data-centre network latency (dcn_latency_s) "
                             "in the registry; a --hardware-config file can give it")
        return (group - 1) * chip.dcn_latency_s
    if chip.torus_axes is not None:
        if chip.hop_latency_s is None:
            raise ValueError(f"{chip.name} has no per-hop latency in the registry")
        return chip.hop_latency_s * sum(m / 2 for m in torus_ring_lengths(group, axes)
                                         if m > 1)
    if chip.pass_latency_s is not None and chip.step_latency_s is not None:
        return chip.pass_latency_s + (group - 1) * chip.step_latency_s
    if chip.hop_latency_s is None:
        raise ValueError(f"{chip.name} has no collective latency in the registry")
    return chip.hop_latency_s
