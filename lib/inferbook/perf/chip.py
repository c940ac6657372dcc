"""One accelerator chip: the figures the performance models read, with units in their names.

FLOP/s are *dense* figures: NVIDIA's and AMD's datasheets lead with the 2:4-sparse number,
which is twice the dense one and irrelevant to a dense transformer, so the registry halves it
where only that is printed (`dense_from_sparse`).

Decimal units throughout (1 GB = 1e9 bytes), as the datasheets print them. Where a vendor's
"GB" is really a binary size the chip's physical memory is slightly larger; the book's
capacity estimates are therefore a little conservative, never optimistic.

Interconnects come in two shapes, and a collective's fixed cost follows the shape:

* **ICI** (TPUs) joins each chip to its neighbours in a 2D or 3D torus (links / 2 axes). A
  collective is a ring around an axis, one hop per step: appendix C of the scaling book charges
  `hop_latency_s` per hop, n/2 hops for n chips (both directions at once).
* Everything else — **NVLink** through NVSwitches, AMD's **Infinity Fabric** and Intel's
  on-chip **RoCE** ports wired all-to-all, **PCIe** — joins the chips of one server so that
  every pair is one hop apart. Kipply's model charges each collective pass (an AllGather, a
  ReduceScatter; an AllReduce is two) one message latency, `hop_latency_s`. The collective
  libraries' own cost models (NCCL's and RCCL's src/graph/tuning.cc) grow it with the group:
  a ring pass over g chips takes g − 1 steps, so a pass costs
  `pass_latency_s` + (g − 1) · `step_latency_s`, which the layouts' pricing uses where the
  registry gives both (`comm_time.collective_pass_latency`).

`max_chips` is how many chips one such domain joins (an HGX board's 8 GPUs, a GB200 NVL72
rack's 72, a TPU pod). Beyond the domain lies the data-centre network (DCN: InfiniBand or
Ethernet between servers, or between TPU slices): `dcn_bytes_per_s` is one chip's share of
it, one direction (a DGX gives each GPU its own 400 Gb/s NIC: 50 GB/s), and
`dcn_latency_s` the fixed cost of one message across it (one step of a ring between hosts);
None where no source gives them. `perf.dcn_comms` prices the collectives that cross hosts
on them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Chip", "HardwareError", "dense_from_sparse", "gbit_per_s"]


class HardwareError(ValueError):
    """Unknown chip or malformed hardware description."""


def dense_from_sparse(sparse_per_s: float) -> float:
    """The dense throughput behind a datasheet's 2:4-sparse figure: half of it (2:4 sparsity
    skips every other multiply-add, and a dense matrix has nothing to skip)."""
    return sparse_per_s / 2


def gbit_per_s(gigabits: float) -> float:
    """Bytes per second of a link the datasheet rates in Gb/s (network ports are decimal
    bits: 400 Gb/s is 50e9 B/s)."""
    return gigabits * 1e9 / 8


@dataclass(frozen=True)
class Chip:
    """One accelerator chip (for TPUs: one chip, not a host or a slice)."""

    name: str
    hbm_bytes: float                 # device memory
    hbm_bytes_per_s: float           # device memory bandwidth
    bf16_flops_per_s: float          # dense bfloat16 matrix throughput
    int8_ops_per_s: float | None     # dense int8 matrix throughput
    interconnect: str | None = None  # "ICI", "NVLink 4", "PCIe 4.0 x16", ...
    link_bytes_per_s: float | None = None   # one direction, one link
    links: int | None = None                # links per chip
    hop_latency_s: float | None = None      # fixed cost of one hop of a collective
    source: str = ""
    max_chips: int | None = None            # chips one interconnect domain joins
    fp8_flops_per_s: float | None = None    # dense 8-bit floating-point matrix throughput
    fp4_flops_per_s: float | None = None    # dense 4-bit floating-point matrix throughput
    dcn_bytes_per_s: float | None = None    # the chip's share of the data-centre network
    dcn_latency_s: float | None = None      # one message between hosts over that network
    pass_latency_s: float | None = None     # switched: fixed cost of one collective pass
    step_latency_s: float | None = None     # switched: added per further chip of the group

    @property
    def torus_axes(self) -> int | None:
        """Axes of the chip's torus (ICI: links / 2), None for switched interconnects."""
        if self.interconnect != "ICI" or self.links is None:
            return None
        return max(1, self.links // 2)

    @property
    def interconnect_bytes_per_s(self) -> float | None:
        """One-direction bandwidth over all links of the chip together."""
        if self.link_bytes_per_s is None or self.links is None:
            return None
        return self.link_bytes_per_s * self.links

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
