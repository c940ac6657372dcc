"""Collectives that cross hosts: the data-centre network (DCN), the estimate's second tier.

Inside a host the chips share their own interconnect (NVLink through NVSwitches on an HGX
board; ICI across the hosts of a TPU slice, so for TPUs read "slice" for "host"); between
hosts they talk over the data-centre network, InfiniBand or Ethernet, some ten times slower
per chip (`Chip.dcn_bytes_per_s`, `Chip.dcn_latency_s`). A collective whose group spans
hosts runs hierarchically (NCCL's rings over hosts, the scaling book's multislice):

    AllReduce      ReduceScatter over the h chips of each host     (fast interconnect)
                   AllReduce of A/h over the m hosts              (DCN)
                   AllGather over the h chips                     (fast interconnect)
    AllGather      AllGather of A/h over the m hosts (DCN), then over the h chips
    ReduceScatter  over the h chips, then of A/h over the m hosts (DCN)
    AllToAll       (h−1)/g of each chip's array to its own host's chips, (g−h)/g over DCN
    Permute        all of it over DCN

for a group of g = h·m chips holding (or producing) an array of A bytes. So one chip sends

    over DCN   (m−1)/m · A/h      (AllGather, ReduceScatter; twice that for an AllReduce;
                                   (m−1)/m · A for an AllToAll)
    in-host    (h−1)/h · A        (twice for an AllReduce; (h−1)/g · A for an AllToAll)

and the two add up to the flat ring's (g−1)/g · A (`collectives.wire_bytes`): going through
hosts sends no more bytes, it sends only a 1/h share of them over the slow network. The
phases run one after another, so a collective takes

    t = (in-host phases, priced by `layout_comms.collective_time` on groups of h)
        + DCN bytes / dcn_bytes_per_s + passes · collective_pass_latency(m hosts)

(passes: 2 for an AllReduce, else 1; `comm_time.collective_pass_latency` with
`between_hosts`, the one place latency is modelled, charges a ring over m hosts its m − 1
network steps of `dcn_latency_s`). Every phase's passes count among the layout's
(`LayoutComms.passes`), so an estimate's efficiency applies to the network as to the
interconnect: its `link` fraction to the DCN bandwidth time, its software cost
`pass_overhead_s` to each DCN pass (`step_cost.step_time`). `HostsComms` keeps the DCN's share
apart, bandwidth, latency and passes, so the estimate can say how much of the step it is.

Where a group lies follows from the mesh: its chips are numbered in row-major order (the last
axis fastest) and host j holds chips [j·H, (j+1)·H), which is how `parallel.multihost`
builds the job's mesh, process by process. A group of g chips spaced s apart (s the product
of the sizes of the axes after its own) has min(g, max(1, H / s)) chips on each host it
spans. The 2D layout puts X first: its X groups (spaced YZ apart) are the ones that leave
the host first. The expert-parallel layout puts Z first: its Y groups (the 1D layout's
collectives) stay in a host as far as they can, the AllToAlls over Z (spaced Y apart) cross.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf.collectives import (
    Comm,
    expert_parallel_collectives,
    wire_bytes,
    ws1d_collectives,
    ws2d_collectives,
)
from inferbook.perf.comm_time import collective_pass_latency
from inferbook.perf.hardware import Chip
from inferbook.perf.layout_comms import (
    LayoutComms,
    collective_passes,
    collective_time,
    expert_parallel_comms,
    layout_comms,
)

__all__ = ["WS2D_X_SCOPES", "EP_Z_SCOPES", "host_split", "host_phases", "dcn_time",
           "TwoTier", "two_tier_time", "HostsComms", "layout_host_problem", "hosts_layout_comms",
           "priced_layout"]

# The collectives of `collectives.ws2d_collectives` over X (the rest run over YZ, over Z
# inside YZ, or over every chip); a test keeps this set and the inventory in step.
WS2D_X_SCOPES = frozenset({"q_proj", "kv_proj", "attn_gather", "mlp_hidden"})
# The expert-parallel layout's collectives over Z (`collectives.expert_parallel_collectives`).
EP_Z_SCOPES = frozenset({"dispatch", "return"})


def host_split(group: int, stride: int, chips_per_host: int) -> tuple[int, int]:
    """(chips of the group on each host, hosts it spans) for `group` chips spaced `stride`
    apart in row-major order, `chips_per_host` to a host. ValueError when the group and the
    hosts do not line up (neither of stride and host size divides the other)."""
    H = chips_per_host
    if stride % H and H % stride:
        raise ValueError(f"a group of chips {stride} apart does not line up with hosts of {H}")
    per_host = min(group, max(1, H // stride))
    if group % per_host:
        raise ValueError(f"a group of {group} chips does not split evenly over hosts of {H}")
    return per_host, group // per_host


def host_phases(kind: str, nbytes: float, per_host: int, hosts: int
                ) -> list[tuple[str, str, float, int]]:
    """The hierarchical algorithm's phases: (tier "host" or "dcn", kind, array bytes, group)
    for one collective over `per_host` × `hosts` chips (see the module's docstring)."""
    h, m = per_host, hosts
    if m == 1:
        return [("host", kind, nbytes, h)]
    if kind == "all-reduce":
        return [("host", "reduce-scatter", nbytes, h), ("dcn", "all-reduce", nbytes / h, m),
                ("host", "all-gather", nbytes, h)]
    if kind == "all-gather":
        return [("dcn", "all-gather", nbytes / h, m), ("host", "all-gather", nbytes, h)]
    if kind == "reduce-scatter":
        return [("host", "reduce-scatter", nbytes, h), ("dcn", "reduce-scatter", nbytes / h, m)]
    if kind == "all-to-all":
        return [("host", "all-to-all", nbytes / m, h), ("dcn", "all-to-all", nbytes, m)]
    if kind == "collective-permute":
        return [("dcn", kind, nbytes, 2)]
    raise ValueError(f"unknown collective kind {kind!r}")


def dcn_time(kind: str, nbytes: float, hosts: int, chip: Chip) -> tuple[float, float]:
    """(bandwidth seconds, latency seconds) of one collective phase over `hosts` hosts on the
    data-centre network: wire bytes / dcn_bytes_per_s, and each pass's latency between hosts
    (`comm_time.collective_pass_latency`)."""
    if chip.dcn_bytes_per_s is None or chip.dcn_latency_s is None:
        raise ValueError(f"{chip.name} has no data-centre network figures in the registry "
                         "(dcn_bytes_per_s, dcn_latency_s); a --hardware-config file can give "
                         "them")
    passes = 2 if kind == "all-reduce" else 1
    return (wire_bytes(kind, nbytes, hosts) / chip.dcn_bytes_per_s,
            passes * collective_pass_latency(chip, hosts, between_hosts=True))


def _torus_axes(chip: Chip, group: int) -> int:
    # As layout_comms lays out a compact group: min(axes of the torus, log2 of its chips).
    return 1 if chip.torus_axes is None else max(1, min(chip.torus_axes, int(math.log2(group))))


@dataclass(frozen=True)
class TwoTier:
    """`comm.count` collectives priced on both tiers: all of it (bandwidth s, latency s,
    passes) and the DCN's share (its bandwidth s, latency s, passes and the wire bytes one
    chip sends over it)."""

    bandwidth_s: float = 0.0
    latency_s: float = 0.0
    passes: int = 0
    dcn_bandwidth_s: float = 0.0
    dcn_latency_s: float = 0.0
    dcn_passes: int = 0
    dcn_bytes: float = 0.0

    def __add__(self, other: "TwoTier") -> "TwoTier":
        return TwoTier(*(a + b for a, b in zip(astuple(self), astuple(other))))


def two_tier_time(comm: Comm, chip: Chip, chips_per_host: int, stride: int = 1) -> TwoTier:
    """`comm.count` collectives of `comm` over groups spaced `stride` apart, priced phase by
    phase on both tiers (see the module's docstring)."""
    if comm.group <= 1 or comm.count == 0:
        return TwoTier()
    h, m = host_split(comm.group, stride, chips_per_host)
    out = TwoTier()
    for tier, kind, nbytes, group in host_phases(comm.kind, comm.bytes, h, m):
        phase = Comm(comm.what, comm.scope, kind, group, nbytes, comm.count)
        passes = collective_passes(phase)
        if tier == "host":
            b, t = collective_time(phase, chip, _torus_axes(chip, group))
            out += TwoTier(b, t, passes)
        else:
            b, t = (comm.count * x for x in dcn_time(kind, nbytes, group, chip))
            out += TwoTier(b, t, passes, b, t, passes,
                           comm.count * wire_bytes(kind, nbytes, group))
    return out


@dataclass(frozen=True)
class HostsComms(LayoutComms):
    """A layout's priced collectives on chips spread over hosts of `chips_per_host`: the
    totals of `LayoutComms` (the DCN's phases included), and the DCN's share of them."""

    chips_per_host: int = 1
    dcn_bandwidth_s: float = 0.0     # DCN wire bytes over the DCN bandwidth, the pass
    dcn_latency_s: float = 0.0       # DCN passes' latency
    dcn_passes: int = 0              # passes over the DCN (among `passes`)
    dcn_bytes_sent: float = 0.0      # wire bytes one chip sends over the DCN

    @property
    def dcn_s(self) -> float:
        """The DCN's seconds on the bare roofline: bandwidth time and latency."""
        return self.dcn_bandwidth_s + self.dcn_latency_s


def _groups(layout: str, chips: int, X: int) -> list[tuple[int, int]]:
    """(group, stride) of each kind of group of the layout (X is Y for expert-parallel)."""
    if layout == "2d-ws":
        return [(chips // X, 1), (X, chips // X)]
    if layout == "expert-parallel":
        return [(X, 1), (chips // X, X)]
    return [(chips, 1)]


def _stride(layout: str, X: int, YZ: int, comm: Comm) -> int:
    if layout == "2d-ws":
        return YZ if comm.scope in WS2D_X_SCOPES else 1
    if layout == "expert-parallel":                     # X is Y; Z groups are Y apart
        return X if comm.scope in EP_Z_SCOPES else 1
    return 1                        # 1d-ws: the whole mesh, or its trailing Z axes


def layout_host_problem(layout: str, chips: int, chips_per_host: int, X: int = 1) -> str | None:
    """Why `layout` (with its X, or Y for expert-parallel) does not line up with hosts of
    `chips_per_host` (None when it does, or when the chips fit in one host)."""
    if chips <= chips_per_host:
        return None
    if chips % chips_per_host:
        return f"{chips} chips do not fill whole hosts of {chips_per_host}"
    for group, stride in _groups(layout, chips, X):
        try:
            host_split(group, stride, chips_per_host)
        except ValueError as err:
            return f"{layout} with {'Y' if layout == 'expert-parallel' else 'X'}={X} on " \
                   f"{chips} chips: {err}"
    return None


def hosts_layout_comms(cfg: ModelConfig, chip: Chip, chips: int, chips_per_host: int,
                       batch: int, tokens: int, layout: str, X: int = 1,
                       act_bytes: float = 2) -> HostsComms:
    """The layout's collectives (`layout_comms.layout_comms`, or `expert_parallel_comms`
    with X as Y) on chips spread over hosts: every collective of the pass priced on both
    tiers. ValueError when the layout cannot split the model, does not line up with the
    hosts, or the chip lacks a figure."""
    base = _one_domain(cfg, chip, chips, batch, tokens, layout, X, act_bytes)     # checks
    problem = layout_host_problem(layout, chips, chips_per_host, X)
    if problem:
        raise ValueError(problem)
    if layout == "1d-ws":
        comms = ws1d_collectives(cfg, batch, tokens, chips, bytes_per_element=act_bytes)
    elif layout == "2d-ws":
        comms = ws2d_collectives(cfg, batch, tokens, X, chips // X, bytes_per_element=act_bytes)
    else:
        comms = expert_parallel_collectives(cfg, batch, tokens, chips // X, X,
                                            kv_heads=math.gcd(cfg.K, X),
                                            bytes_per_element=act_bytes)
    t = TwoTier()
    for c in comms:
        t += two_tier_time(c, chip, chips_per_host, _stride(layout, X, chips // X, c))
    return HostsComms(base.layout, base.X, base.YZ, t.bandwidth_s, t.latency_s,
                      base.bytes_sent, base.collectives, t.passes, chips_per_host,
                      t.dcn_bandwidth_s, t.dcn_latency_s, t.dcn_passes, t.dcn_bytes)


def _one_domain(cfg: ModelConfig, chip: Chip, chips: int, batch: int, tokens: int,
                layout: str, X: int, act_bytes: float) -> LayoutComms:
    if layout == "expert-parallel":
        return expert_parallel_comms(cfg, chip, chips, batch, tokens, Y=X, act_bytes=act_bytes)
    return layout_comms(cfg, chip, chips, batch, tokens, layout, X, act_bytes)


def priced_layout(cfg: ModelConfig, chip: Chip, chips: int, batch: int, tokens: int,
                  layout: str, X: int = 1, act_bytes: float = 2,
                  chips_per_host: int | None = None) -> LayoutComms:
    """The layout's collectives priced on one interconnect domain (`layout_comms`,
    `expert_parallel_comms` with X as Y), or, when the chips spread over several hosts of
    `chips_per_host`, on both tiers (`hosts_layout_comms`)."""
    if chips_per_host is None or chips <= chips_per_host:
        return _one_domain(cfg, chip, chips, batch, tokens, layout, X, act_bytes)
    return hosts_layout_comms(cfg, chip, chips, chips_per_host, batch, tokens, layout, X,
                              act_bytes)
