"""How long the collectives of a sharded step take, layout by layout.

What a layout sends is not modelled here but listed: `perf.collectives` gives every
collective of the 1D and 2D weight-stationary layouts (chapters 8-10), byte for byte as the
compiled programs hold them (tests/unit/test_hlo.py checks that). This module prices each
one on a chip's interconnect:

    time = passes · latency  +  wire bytes / bandwidth

* wire bytes are what one chip sends with the bandwidth-optimal ring algorithms, the
  convention of `perf.hlo.Collective.wire_bytes`: (n−1)/n of the array for an AllGather,
  a ReduceScatter or an AllToAll over n chips, twice that for an AllReduce (a ReduceScatter,
  then an AllGather);
* bandwidth is a chip's one-way bandwidth into the collective: on a TPU torus, both
  directions of a ring on each axis the group spans (2 · link per axis, the scaling book's
  W_ici); through NVLink or PCIe switches, all of the chip's links at once;
* latency is paid per pass (an AllReduce makes two), `comm_time.collective_pass_latency`:
  m/2 hops of `hop_latency_s` around each ring of m chips the group forms on the torus axes
  it spans (appendix C of the scaling book, axis by axis), a fixed cost growing with the
  group through a switch (NCCL's cost model: α0 + α1·(g − 1)).

A layout's chips are laid out compactly: a group of n chips on a torus spans
min(axes of the torus, log2 n) axes; in the 2D layout X takes one axis and YZ the others.
Mixtures of experts and latent attention use the 1D inventory (each expert and each head split
over the chips like a dense MLP and dense heads); the 2D layout is defined for dense models.
`expert_parallel_comms` prices the expert-parallel layout instead (experts over Z chips,
tokens sent to them and back by AllToAll, the rest split over Y = n / Z as 1d-ws;
`parallel.expert_parallel`); the estimate's automatic choice considers it for every Y that
can split the model, alongside the 1D and 2D layouts (`layout_candidates`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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

__all__ = ["ESTIMATE_LAYOUTS", "LayoutComms", "collective_passes", "collective_time",
           "layout_problem",
           "layout_comms", "layout_candidates", "expert_parallel_comms"]

ESTIMATE_LAYOUTS = ("1d-ws", "2d-ws", "expert-parallel")


def _axes(chip: Chip, group: int, limit: int | None = None) -> int:
    """Torus axes a compact group of `group` chips spans (1 for switched interconnects)."""
    dims = chip.torus_axes
    if dims is None:
        return 1
    return max(1, min(dims if limit is None else limit, int(math.log2(group))))


def collective_passes(comm: Comm) -> int:
    """Passes `comm.count` collectives make, each paying a fixed cost: an AllReduce makes two
    (a ReduceScatter, then an AllGather), every other collective one; none over one chip."""
    if comm.group <= 1:
        return 0
    return (2 if comm.kind == "all-reduce" else 1) * comm.count


def collective_time(comm: Comm, chip: Chip, axes: int = 1) -> tuple[float, float]:
    """(bandwidth seconds, latency seconds) of `comm.count` collectives of `comm.bytes` each
    over groups of `comm.group` chips spanning `axes` torus axes."""
    if comm.group <= 1 or comm.count == 0:
        return 0.0, 0.0
    switched = chip.pass_latency_s is not None and chip.step_latency_s is not None
    if chip.link_bytes_per_s is None or chip.links is None or (
            chip.hop_latency_s is None and (chip.torus_axes is not None or not switched)):
        missing = ("link bandwidth (link_bytes_per_s, links)"
                   if chip.link_bytes_per_s is None or chip.links is None
                   else "latency (hop_latency_s)")
        raise ValueError(f"{chip.name} has no interconnect {missing}, which estimating "
                         "several chips needs; a --hardware-config file can give it")
    if chip.torus_axes is not None:
        bandwidth = 2 * chip.link_bytes_per_s * axes
    else:
        bandwidth = chip.link_bytes_per_s * chip.links
    per_pass = collective_pass_latency(chip, comm.group, axes)
    sent = wire_bytes(comm.kind, comm.bytes, comm.group) * comm.count
    return sent / bandwidth, collective_passes(comm) * per_pass


@dataclass(frozen=True)
class LayoutComms:
    """The collectives of one forward pass of a layout on `X · YZ` chips, priced."""

    layout: str
    X: int
    YZ: int
    bandwidth_s: float      # wire bytes over bandwidth, every collective of the pass
    latency_s: float        # fixed costs, every collective of the pass
    bytes_sent: float       # wire bytes one chip sends
    collectives: int        # collectives per pass (groups of one chip left out)
    passes: int = 0         # collective passes, each paying a fixed cost (`collective_passes`)

    @property
    def chips(self) -> int:
        return self.X * self.YZ

    @property
    def describe(self) -> str:
        return self.layout if self.layout != "2d-ws" else f"2d-ws (X={self.X}, YZ={self.YZ})"


def layout_problem(cfg: ModelConfig, chips: int, batch: int, layout: str,
                   X: int = 1) -> str | None:
    """Why `layout` cannot split `cfg` over `chips` chips (None when it can), as the library's
    sharding plans require (`parallel.sharding.make_plan`): heads and widths must divide.
    For "expert-parallel" `X` is Y, the chips each expert and the rest are split over; the
    experts go whole to Z = chips / Y groups, which split the batch too."""
    if layout not in ESTIMATE_LAYOUTS:
        return f"unknown layout {layout!r}; known: {', '.join(ESTIMATE_LAYOUTS)}"
    YZ = chips // X
    if X * YZ != chips:
        return f"X={X} does not divide {chips} chips"
    what = f"{layout} on {chips} chips"
    if layout == "expert-parallel":
        if cfg.moe is None:
            return f"{what}: {cfg.name} has no mixture of experts"
        if YZ < 2:
            return f"{what}: Y={X} leaves no chips to split the experts over (that is 1d-ws)"
        if cfg.moe.E % YZ or batch % YZ:
            return (f"{what}: E={cfg.moe.E} experts and the batch {batch} must split over "
                    f"Z={YZ} chips")
        return layout_problem(cfg, X, batch, "1d-ws") if X > 1 else None
    widths = {"F": cfg.F} if cfg.moe is None or cfg.moe.dense_layers else {}
    if cfg.moe is not None:
        widths["expert F"] = cfg.moe.F
        if cfg.moe.shared_F:
            widths["shared-expert F"] = cfg.moe.shared_F
    if layout == "2d-ws":
        if cfg.moe is not None or cfg.mla is not None:
            return "the 2D layout (chapter 10) is defined for dense models without latent attention"
        Y = math.gcd(cfg.K, YZ)
        if batch % (X * (YZ // Y)):
            return f"{what}: batch {batch} does not split over X·Z = {X * (YZ // Y)} chips"
        if cfg.D % chips:
            return f"{what}: D={cfg.D} does not split {chips} ways"
    elif cfg.D % chips:
        return f"{what}: D={cfg.D} does not split {chips} ways"
    model = YZ if layout == "2d-ws" else chips
    if cfg.N % model:
        return f"{what}: N={cfg.N} query heads do not split {model} ways"
    for name, width in widths.items():
        if width % model:
            return f"{what}: {name}={width} does not split {model} ways"
    return None


def layout_comms(cfg: ModelConfig, chip: Chip, chips: int, batch: int, tokens: int,
                 layout: str, X: int = 1, act_bytes: float = 2) -> LayoutComms:
    """The priced collectives of one forward pass of `batch` sequences of `tokens` tokens.

    Raises ValueError when the layout cannot split the model (see `layout_problem`) or the
    chip lacks an interconnect figure.
    """
    problem = layout_problem(cfg, chips, batch, layout, X)
    if problem:
        raise ValueError(problem)
    if chips == 1:
        return LayoutComms(layout, 1, 1, 0.0, 0.0, 0.0, 0)
    if layout == "1d-ws":
        comms = ws1d_collectives(cfg, batch, tokens, chips, bytes_per_element=act_bytes)
        axes = {c.group: _axes(chip, c.group) for c in comms}
    else:
        YZ = chips // X
        comms = ws2d_collectives(cfg, batch, tokens, X, YZ, bytes_per_element=act_bytes)
        axes = {X: 1, YZ: _axes(chip, YZ, (chip.torus_axes or 1) - 1 if X > 1 else None),
                chips: _axes(chip, chips)}
    return _priced(layout, X if layout == "2d-ws" else 1,
                   chips // X if layout == "2d-ws" else chips, comms, chip, axes)


def _priced(layout: str, X: int, YZ: int, comms: list[Comm], chip: Chip,
            axes: dict[int, int]) -> LayoutComms:
    """Every collective of `comms` priced on `chip` (`axes`: torus axes per group size)."""
    bw = lat = sent = 0.0
    count = passes = 0
    for c in comms:
        b, t = collective_time(c, chip, axes.get(c.group, 1))
        bw, lat = bw + b, lat + t
        sent += wire_bytes(c.kind, c.bytes, c.group) * c.count
        count += c.count if c.group > 1 else 0
        passes += collective_passes(c)
    return LayoutComms(layout, X, YZ, bw, lat, sent, count, passes)


def expert_parallel_comms(cfg: ModelConfig, chip: Chip, chips: int, batch: int, tokens: int,
                          Y: int = 1, capacity_factor: float | None = None,
                          act_bytes: float = 2) -> LayoutComms:
    """The priced collectives of one forward pass of the expert-parallel layout: experts over
    Z = chips / Y chips (each sends its tokens to their experts and back, AllToAll), heads and
    widths over Y as in 1d-ws, the batch over Z (`collectives.expert_parallel_collectives`).

    Raises ValueError when the model has no experts, they or the batch do not split, or the
    chip lacks an interconnect figure.
    """
    Z = chips // Y
    if cfg.moe is None:
        raise ValueError(f"{cfg.name} has no mixture of experts to split")
    if Z * Y != chips or cfg.moe.E % Z or batch % Z:
        raise ValueError(f"expert-parallel on {chips} chips with Y={Y}: E={cfg.moe.E} experts "
                         f"and the batch {batch} must split over Z={chips // Y} chips")
    problem = layout_problem(cfg, Y, batch, "1d-ws") if Y > 1 else None
    if problem:
        raise ValueError(problem)
    comms = expert_parallel_collectives(cfg, batch, tokens, Z, Y, kv_heads=math.gcd(cfg.K, Y),
                                        capacity_factor=capacity_factor,
                                        bytes_per_element=act_bytes)
    return _priced("expert-parallel", 1, chips, comms, chip,
                   {Z: _axes(chip, Z), Y: _axes(chip, Y)})


def layout_candidates(cfg: ModelConfig, chips: int, batch: int,
                      layout: str | None = None) -> tuple[list[tuple[str, int]], str | None]:
    """The (layout, X) pairs that can split `cfg` over `chips` chips at this batch (for
    expert parallelism X is Y, see `layout_problem`), and the reason the first refused one
    failed (for a message when none can). With no layout named, expert parallelism is
    considered for mixtures of experts only."""
    names = ESTIMATE_LAYOUTS if layout is None else (layout,)
    if layout is None and cfg.moe is None:
        names = tuple(n for n in names if n != "expert-parallel")
    out, first = [], None
    for name in names:
        xs = [1] if name == "1d-ws" else [x for x in range(1, chips + 1) if chips % x == 0]
        for x in xs:
            problem = layout_problem(cfg, chips, batch, name, x)
            if problem is None:
                out.append((name, x))
            elif first is None:
                first = problem
    return out, first
