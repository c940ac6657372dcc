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
        + DCN bytes / dcn_bytes_per_s + passes · (m − 1) · dcn_latency_s

(passes: 2 for an AllReduce, else 1; a ring over m hosts makes m − 1 steps a pass).

Where a group lies follows from the mesh: its chips are numbered in row-major order (the last
axis fastest) and host j holds chips [j·H, (j+1)·H), which is how `parallel.multihost`
builds the job's mesh, process by process. A group of g chips spaced s apart (s the product
of the sizes of the axes after its own) has min(g, max(1, H / s)) chips on each host it
spans. The 2D layout puts X first: its X groups (spaced YZ apart) are the ones that leave
the host first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf.collectives import Comm, wire_bytes, ws1d_collectives, ws2d_collectives
from inferbook.perf.hardware import Chip
from inferbook.perf.layout_comms import LayoutComms, collective_time, layout_comms

__all__ = ["WS2D_X_SCOPES", "host_split", "host_phases", "dcn_time", "two_tier_time",
           "HostsComms", "layout_host_problem", "hosts_layout_comms", "priced_layout"]

# The collectives of `collectives.ws2d_collectives` over X (the rest run over YZ, over Z
# inside YZ, or over every chip); a test keeps this set and the inventory in step.
WS2D_X_SCOPES = frozenset({"q_proj", "kv_proj", "attn_gather", "mlp_hidden"})


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
    data-centre network: wire bytes / dcn_bytes_per_s, and (hosts − 1) messages a pass."""
    if chip.dcn_bytes_per_s is None or chip.dcn_latency_s is None:
        raise ValueError(f"{chip.name} has no data-centre network figures in the registry "
                         "(dcn_bytes_per_s, dcn_latency_s); a --hardware-config file can give "
                         "them")
    passes = 2 if kind == "all-reduce" else 1
    return (wire_bytes(kind, nbytes, hosts) / chip.dcn_bytes_per_s,
            passes * (hosts - 1) * chip.dcn_latency_s)


def _torus_axes(chip: Chip, group: int) -> int:
    # As layout_comms lays out a compact group: min(axes of the torus, log2 of its chips).
    return 1 if chip.torus_axes is None else max(1, min(chip.torus_axes, int(math.log2(group))))


def two_tier_time(comm: Comm, chip: Chip, chips_per_host: int, stride: int = 1
                  ) -> tuple[float, float, float, float]:
    """`comm.count` collectives of `comm` priced on both tiers: (bandwidth s, latency s,
    of them on the DCN: seconds, and wire bytes one chip sends over it)."""
    if comm.group <= 1 or comm.count == 0:
        return 0.0, 0.0, 0.0, 0.0
    h, m = host_split(comm.group, stride, chips_per_host)
    bw = lat = dcn_s = dcn_bytes = 0.0
    for tier, kind, nbytes, group in host_phases(comm.kind, comm.bytes, h, m):
        if tier == "host":
            b, t = collective_time(Comm(comm.what, comm.scope, kind, group, nbytes, comm.count),
                                   chip, _torus_axes(chip, group))
        else:
            b, t = (comm.count * x for x in dcn_time(kind, nbytes, group, chip))
            dcn_s, dcn_bytes = dcn_s + b + t, dcn_bytes + comm.count * wire_bytes(kind, nbytes,
                                                                                   group)
        bw, lat = bw + b, lat + t
    return bw, lat, dcn_s, dcn_bytes


@dataclass(frozen=True)
class HostsComms(LayoutComms):
    """A layout's priced collectives on chips spread over hosts of `chips_per_host`: the
    totals of `LayoutComms`, and the share of them spent on the data-centre network."""

    chips_per_host: int = 1
    dcn_s: float = 0.0               # DCN seconds (bandwidth and latency) of the pass
    dcn_bytes_sent: float = 0.0      # wire bytes one chip sends over the DCN


def _strides(layout: str, X: int, YZ: int, comms: list[Comm]) -> list[int]:
    if layout == "2d-ws":
        return [YZ if c.scope in WS2D_X_SCOPES else 1 for c in comms]
    return [1] * len(comms)         # 1d-ws: the whole mesh, or its trailing Z axes


def layout_host_problem(layout: str, chips: int, chips_per_host: int, X: int = 1) -> str | None:
    """Why `layout` (with its X) does not line up with hosts of `chips_per_host` (None when
    it does, or when the chips fit in one host)."""
    if chips <= chips_per_host:
        return None
    if chips % chips_per_host:
        return f"{chips} chips do not fill whole hosts of {chips_per_host}"
    YZ = chips // X
    groups = [(YZ, 1), (X, YZ)] if layout == "2d-ws" else [(chips, 1)]
    for group, stride in groups:
        try:
            host_split(group, stride, chips_per_host)
        except ValueError as err:
            return f"{layout} with X={X} on {chips} chips: {err}"
    return None


def hosts_layout_comms(cfg: ModelConfig, chip: Chip, chips: int, chips_per_host: int,
                       batch: int, tokens: int, layout: str, X: int = 1,
                       act_bytes: float = 2) -> HostsComms:
    """`layout_comms.layout_comms` on chips spread over hosts: every collective of the pass
    priced on both tiers. ValueError when the layout cannot split the model, does not line
    up with the hosts, or the chip lacks a figure."""
    base = layout_comms(cfg, chip, chips, batch, tokens, layout, X, act_bytes)   # checks
    problem = layout_host_problem(layout, chips, chips_per_host, X)
    if problem:
        raise ValueError(problem)
    if layout == "1d-ws":
        comms = ws1d_collectives(cfg, batch, tokens, chips, bytes_per_element=act_bytes)
    else:
        comms = ws2d_collectives(cfg, batch, tokens, X, chips // X, bytes_per_element=act_bytes)
    bw = lat = dcn_s = dcn_bytes = 0.0
    for c, stride in zip(comms, _strides(layout, X, chips // X, comms)):
        b, t, d, sent = two_tier_time(c, chip, chips_per_host, stride)
        bw, lat, dcn_s, dcn_bytes = bw + b, lat + t, dcn_s + d, dcn_bytes + sent
    return HostsComms(base.layout, base.X, base.YZ, bw, lat, base.bytes_sent, base.collectives,
                      chips_per_host, dcn_s, dcn_bytes)


def priced_layout(cfg: ModelConfig, chip: Chip, chips: int, batch: int, tokens: int,
                  layout: str, X: int = 1, act_bytes: float = 2,
                  chips_per_host: int | None = None) -> LayoutComms:
    """The layout's collectives priced on one interconnect domain (`layout_comms`), or, when
    the chips spread over several hosts of `chips_per_host`, on both tiers."""
    if chips_per_host is None or chips <= chips_per_host:
        return layout_comms(cfg, chip, chips, batch, tokens, layout, X, act_bytes)
    return hosts_layout_comms(cfg, chip, chips, chips_per_host, batch, tokens, layout, X,
                              act_bytes)
