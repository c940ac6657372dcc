"""Exact inventories of the collectives each sharded layout of the library performs.

`ws1d_collectives`, `ws2d_collectives`, `weight_gathered_collectives`,
`ring_attention_collectives`, `seq_sharded_decode_collectives` and
`expert_parallel_collectives` list every collective of one forward pass, with the bytes of
the array it works on (the convention of `inferbook.perf.hlo`) and the label the layout
gives it in the compiled program. The tests and the chapters check them, byte for byte and
label by label, against the compiled programs. `wire_bytes` is what one device sends for
each; `layout_comms` prices them on a chip, and the sources' closed-form times are in
`comm_time`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import param_counts

__all__ = ["Comm", "wire_bytes", "total_bytes", "format_comms", "ws1d_collectives",
           "ws2d_collectives", "weight_gathered_collectives", "ring_attention_collectives",
           "seq_sharded_decode_collectives", "expert_capacity", "dropped_assignments",
           "expert_parallel_collectives"]

F32 = 4


def wire_bytes(kind: str, nbytes: float, group: int) -> float:
    """Bytes one device sends for a collective over `group` devices on an array of `nbytes`,
    with the bandwidth-optimal ring algorithms: (n−1)/n of the array for an AllGather, a
    ReduceScatter or an AllToAll, twice that for an AllReduce (a ReduceScatter, then an
    AllGather), all of it for a permute; nothing over a group of one."""
    if group <= 1:
        return 0.0
    if kind == "collective-permute":
        return float(nbytes)
    return (2 if kind == "all-reduce" else 1) * nbytes * (group - 1) / group


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


def expert_capacity(tokens: int, E: int, k: int, capacity_factor: float | None = None) -> int:
    """C, the slots each expert keeps for the tokens of one device: the AllToAll's buffer is
    [E, C, D] whatever the routing, and an assignment beyond its expert's C is dropped.

    A balanced router sends tokens·k/E assignments to each expert; the capacity factor is the
    headroom over that, C = ceil(factor · tokens · k / E) (GShard, Lepikhin et al. 2020;
    Switch, Fedus et al. 2021), at least 1. None means dropless: C = tokens, since a token
    picks an expert at most once, so no expert can receive more.
    """
    if capacity_factor is None:
        return tokens
    return max(1, min(tokens, math.ceil(capacity_factor * tokens * k / E)))


def dropped_assignments(counts: Sequence[int], capacity: int) -> int:
    """Assignments a device drops when its router sends counts[e] tokens to expert e and each
    expert keeps `capacity` slots: Σ_e max(0, counts[e] − capacity). (A full expert's spare
    slots cannot take another expert's tokens.)"""
    return sum(max(0, int(n) - capacity) for n in counts)


def expert_parallel_collectives(cfg: ModelConfig, batch: int, tokens: int, Z: int, Y: int = 1,
                                X: int = 1, kv_heads: int = 0,
                                capacity_factor: float | None = None,
                                bytes_per_element: float = 2,
                                bytes_per_param: float = 2) -> list[Comm]:
    """One forward pass of the expert-parallel layout (`expert_parallel.transformer_moe`).

    The batch is split over the X·Z data-parallel devices; within each, attention, dense MLPs
    and shared experts are the 1D layout over Y (its collectives on batch / (X·Z) sequences).
    Each MoE layer sends an [E, C, D] buffer of tokens to the experts' devices and the same
    back (AllToAll over Z; C = `expert_capacity` of the device's tokens) and, when X splits
    the stored experts over D, gathers this device's E/Z experts' three matrices over X.
    """
    m, a = cfg.moe, bytes_per_element
    rows = batch // (X * Z)
    layers = cfg.L - len(set(m.dense_layers))
    C = expert_capacity(rows * tokens, m.E, m.k, capacity_factor)
    buffer = int(m.E * C * cfg.D * a)
    return ws1d_collectives(cfg, rows, tokens, Y, kv_heads, a) + [
        Comm("tokens to their experts: AllToAll over Z", "dispatch", "all-to-all", Z, buffer,
             layers),
        Comm("expert outputs back: AllToAll over Z", "return", "all-to-all", Z, buffer, layers),
        Comm("experts' D gathered over X (FSDP)", "fsdp_gather", "all-gather", X,
             int(m.E // Z * cfg.D * (m.F // Y) * bytes_per_param), 3 * layers),
    ]
