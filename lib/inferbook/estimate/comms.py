"""Communication of sharded inference: which collectives, how many bytes, how long.

Two kinds of function live here.

*Exact inventories* (`ws1d_collectives`, `ws2d_collectives`, `weight_gathered_collectives`,
`ring_attention_collectives`) list every collective one forward pass of the library's
layouts performs, with the bytes of the array it works on (the convention of
`inferbook.hlo`): the tests check them, byte for byte, against the compiled programs.

*The sources' formulas* for reasoning at scale, each named after its source:

  ws1d_comm_time            AllReduce of B·D per block: 2·B·D·bytes / (axes · W_ici)
  ws2d_comm_time            worked problem 7: 2BD/(X·W) + 4BF/(YZ·W) for bf16
  ws2d_optimal_x            X = sqrt(n·D/(2F)) (= sqrt(n/8) when F = 4D)
  ws2d_crossover_chips      n where 2D beats 1D: 32·(F/D)·(3/4)² chips
  model_parallel_limit      Y = F / (B·β), β = W_hbm / W_ici ("generation" section)
  prefill_model_parallel_limit   M = F / α, α = C / W_ici ("prefill": about F / 2200)
  collective_time           appendix C: max(t_hop · n/2, bytes / W_ici)
  latency_bound_bytes       appendix C; see below for its two readings

Times follow the scaling book's convention: a collective over an array of A bytes takes
A / W on one bidirectional ring axis of bandwidth W (AllGather, ReduceScatter, AllToAll),
2·A / W for an AllReduce, and spreading it over k mesh axes divides by k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..config import ModelConfig

__all__ = ["Comm", "total_bytes", "format_comms", "ws1d_collectives", "ws2d_collectives",
           "weight_gathered_collectives", "ring_attention_collectives",
           "seq_sharded_decode_collectives", "ici_bandwidth", "ws1d_comm_time",
           "ws2d_comm_time", "ws2d_optimal_x", "ws2d_best_split", "ws2d_crossover_chips",
           "model_parallel_limit", "prefill_model_parallel_limit", "collective_time",
           "latency_bound_bytes"]

F32 = 4


@dataclass(frozen=True)
class Comm:
    """`count` collectives of one kind over groups of `group` devices, `bytes` each.

    `scope` is the label the layout gives the collective in the compiled program
    (`hlo.Collective.scope`), so prediction and program can be matched line by line.
    """

    what: str
    scope: str
    kind: str
    group: int
    bytes: int
    count: int = 1

    @property
    def total(self) -> int:
        return self.bytes * self.count


def total_bytes(comms: list[Comm], by: str = "kind") -> dict:
    """Bytes summed per kind (or per (scope, kind) with by="scope"), as `hlo.bytes_by_kind`
    and `hlo.bytes_by_scope` return them. Collectives over one device are dropped."""
    out: dict = {}
    for c in comms:
        if c.group > 1 and c.count:
            key = c.kind if by == "kind" else (c.scope, c.kind)
            out[key] = out.get(key, 0) + c.total
    return out


def format_comms(comms: list[Comm], compiled: dict | None = None) -> str:
    """A table of predicted collectives per (label, kind); with `compiled` (from
    `hlo.bytes_by_scope`) a column of what the compiled program moves beside it."""
    rows, seen = [], {}
    for c in comms:
        if c.group > 1 and c.count:
            key = (c.scope, c.kind)
            if key not in seen:
                seen[key] = [c.what, c.group, 0, 0]
                rows.append(key)
            seen[key][2] += c.count
            seen[key][3] += c.total
    head = f"{'label':<13} {'kind':<18} {'group':>5} {'count':>5} {'predicted':>11}"
    lines = [head + (f" {'compiled':>11}" if compiled is not None else "") + "  what"]
    for key in rows:
        what, group, count, total = seen[key]
        line = f"{key[0]:<13} {key[1]:<18} {group:>5} {count:>5} {total:>11,}"
        if compiled is not None:
            line += f" {compiled.get(key, 0):>11,}"
        lines.append(f"{line}  {what}")
    return "\n".join(lines)


def ws1d_collectives(cfg: ModelConfig, batch: int, tokens: int, m: int, kv_heads: int = 0,
                     bytes_per_element: float = 2, logit_rows: int | None = None) -> list[Comm]:
    """One forward pass of the 1D weight-stationary layout (`weight_stationary.transformer_1d`).

    `batch` sequences of `tokens` new tokens each; `m` model-parallel devices, of which the
    KV heads split over `kv_heads` (default: as far as K allows) and the batch over the rest.
    Logits are float32 for `logit_rows` rows (default: one per sequence).
    """
    B, T, a = batch, tokens, bytes_per_element
    Y = kv_heads or math.gcd(cfg.K, m)
    Z = m // Y
    rows = batch if logit_rows is None else logit_rows
    act = int(B * T * cfg.D * a)
    return [
        Comm("embedding: AllGather of D", "embed", "all-gather", m, act),
        Comm("attention output: AllReduce", "attn_out", "all-reduce", m, act, cfg.L),
        Comm("MLP output: AllReduce", "mlp_out", "all-reduce", m, act, cfg.L),
        Comm("logits: AllReduce", "logits", "all-reduce", m, rows * cfg.V * F32),
        Comm("Q to batch-sharded: AllToAll", "q_to_batch", "all-to-all", Z,
             int(B * T * cfg.N * cfg.H // m * a), cfg.L),
        Comm("output to head-sharded: AllToAll", "out_to_heads", "all-to-all", Z,
             int(B * T * cfg.N * cfg.H // m * a), cfg.L),
    ]


def ws2d_collectives(cfg: ModelConfig, batch: int, tokens: int, X: int, YZ: int,
                     kv_heads: int = 0, bytes_per_element: float = 2,
                     logit_rows: int | None = None) -> list[Comm]:
    """One forward pass of the 2D weight-stationary layout (`transformer_2d`).

    D is split over X·YZ devices between blocks, F and the heads over YZ; the KV heads over
    `kv_heads` of the YZ devices (default: as far as K allows). Attention splits the batch
    over X and the remaining YZ devices (Z).
    """
    B, T, a, L = batch, tokens, bytes_per_element, cfg.L
    Y = kv_heads or math.gcd(cfg.K, YZ)
    Z, n = YZ // Y, X * YZ
    rows = batch if logit_rows is None else logit_rows
    gathered = int(B * T * cfg.D // X * a)            # [B, T, D_X]
    q = int(B * T * cfg.N * cfg.H // YZ * a)          # [B, T, N_YZ, H]
    mlp_in = (2 if cfg.mlp == "gated" else 1) * int(B * T * cfg.F // YZ * a)
    return [
        Comm("norm statistics: AllReduce", "norm", "all-reduce", n, B * T * F32, 2 * L),
        Comm("final norm statistics: AllReduce", "norm", "all-reduce", n, rows * F32),
        Comm("block input: AllGather over YZ", "block_in", "all-gather", YZ, gathered, 2 * L),
        Comm("Q projection: ReduceScatter over X (batch)", "q_proj", "reduce-scatter", X, q, L),
        Comm("K and V projections: ReduceScatter over X (batch)", "kv_proj",
             "reduce-scatter", X,
             int(B // Z * T * cfg.K * cfg.H // Y * a), 2 * L),
        Comm("Q to batch-sharded: AllToAll over Z", "q_to_batch", "all-to-all", Z, q // X, L),
        Comm("output to head-sharded: AllToAll over Z", "out_to_heads", "all-to-all", Z,
             q // X, L),
        Comm("attention output: AllGather over X (batch)", "attn_gather", "all-gather", X, q, L),
        Comm("MLP hidden: AllReduce over X", "mlp_hidden", "all-reduce", X, mlp_in, L),
        Comm("block output: ReduceScatter over YZ", "block_out", "reduce-scatter", YZ,
             gathered, 2 * L),
        Comm("logits: AllReduce", "logits", "all-reduce", n, rows * cfg.V * F32),
    ]


def weight_gathered_collectives(cfg: ModelConfig, n: int, kv_heads: int = 0,
                                bytes_per_param: float = 2) -> list[Comm]:
    """One forward pass of the weight-gathered layout: every stored-split weight, gathered.

    Independent of the batch: that is the point of the layout. Norm gains are replicated and
    not gathered; W_K and W_V are split only over the `kv_heads` devices (default gcd(K, n)).
    """
    from .params import param_counts
    c = param_counts(cfg)
    Y = kv_heads or math.gcd(cfg.K, n)
    kv = cfg.L * 2 * cfg.D * cfg.K * cfg.H
    split = c["attention"] - (0 if Y > 1 else kv) + c["mlp"] + c["embedding"] + c["unembedding"]
    return [Comm("weights: AllGather", "gather_weights", "all-gather", n,
                 int(split * bytes_per_param))]


def ring_attention_collectives(cfg: ModelConfig, batch: int, tokens: int, Q: int, m: int,
                               bytes_per_element: float = 2) -> list[Comm]:
    """Sequence-parallel prefill over Q devices (with m-way model parallelism inside).

    Each device holds tokens/Q positions: the 1D layout's collectives on its stripe, plus
    Q - 1 ring steps passing its K and V blocks, per layer.
    """
    a, T_local = bytes_per_element, tokens // Q
    block = int(batch * T_local * (cfg.K // m) * cfg.H * a)
    comms = [c for c in ws1d_collectives(cfg, batch, T_local, m, bytes_per_element=a)
             if c.kind != "all-to-all" and not c.what.startswith("logits")]
    comms.append(Comm("logits: AllReduce", "logits", "all-reduce", m * Q, batch * cfg.V * F32))
    comms.append(Comm("K and V around the ring", "ring", "collective-permute", 2, block,
                      2 * cfg.L * (Q - 1)))
    return comms


def seq_sharded_decode_collectives(cfg: ModelConfig, batch: int, Q: int, m: int,
                                   bytes_per_element: float = 2) -> list[Comm]:
    """A decode step with the cache split over positions on Q devices (m-way model parallel):
    the 1D layout's collectives plus, per layer, the max and two sums that merge the Q
    partial attentions (float32)."""
    heads = batch * (cfg.N // m)
    comms = ws1d_collectives(cfg, batch, 1, m, bytes_per_element=bytes_per_element)
    comms = [c for c in comms if c.kind != "all-to-all"]
    comms += [Comm("partials: AllReduce(max) of log-sum-exps", "combine", "all-reduce", Q,
                   heads * F32, cfg.L),
              Comm("partials: AllReduce of outputs", "combine", "all-reduce", Q,
                   heads * cfg.H * F32, cfg.L),
              Comm("partials: AllReduce of weights", "combine", "all-reduce", Q,
                   heads * F32, cfg.L)]
    return comms


# The sources' formulas ---------------------------------------------------------------------

def ici_bandwidth(chip, axes: int = 1) -> float:
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


def ws2d_best_split(n: int, D: int, F: int, **kw) -> tuple[int, int]:
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


def model_parallel_limit(F: int, batch: int, chip, axes: int = 1) -> float:
    """How far 1D model parallelism goes in decode before the AllReduce outlasts the weight
    load: T_HBM = 2DF/(Y·W_hbm) < T_ICI = 2BD/W_ici when Y > F/(B·β), β = W_hbm / W_ici."""
    beta = chip.hbm_bytes_per_s / ici_bandwidth(chip, axes)
    return F / (batch * beta)


def prefill_model_parallel_limit(cfg: ModelConfig, chip, axes: int = 1,
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


def collective_time(nbytes: float, chip, shards: int, kind: str = "all-gather",
                    axes: int = 1) -> float:
    """Appendix C's model of one collective on a bidirectional ring of `shards` devices:
    max(t_hop · shards/2, bytes / W_ici) — a fixed cost per hop, or bandwidth, whichever is
    larger; an AllReduce (ReduceScatter then AllGather) costs twice as much."""
    if chip.hop_latency_s is None:
        raise ValueError(f"{chip.name} has no per-hop latency in the registry")
    factor = 2 if kind == "all-reduce" else 1
    latency = chip.hop_latency_s * shards / 2
    return factor * max(latency, nbytes / ici_bandwidth(chip, axes))


def latency_bound_bytes(chip, shards: int, reading: str = "whole") -> float:
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
