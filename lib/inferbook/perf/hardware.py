"""Accelerators: the one table every number in the book is computed from.

Each entry gives what the roofline model needs — memory, memory bandwidth, peak dense
arithmetic, interconnect — with units in the field names and its source beside it. FLOP/s are
*dense* figures: NVIDIA's datasheets lead with the 2:4-sparse number, which is twice the dense
one and irrelevant to a dense transformer, so we halve it where only that is printed.

Decimal units throughout (1 GB = 1e9 bytes), as the datasheets print them. Where a vendor's
"GB" is really a binary size the chip's physical memory is slightly larger; the book's
capacity estimates are therefore a little conservative, never optimistic.

Interconnects come in two shapes, and a collective's fixed cost follows the shape:

* **ICI** (TPUs) joins each chip to its neighbours in a 2D or 3D torus (links / 2 axes). A
  collective is a ring around an axis, one hop per step: appendix C of the scaling book charges
  `hop_latency_s` per hop, n/2 hops for n chips (both directions at once).
* **NVLink** and **PCIe** (GPUs) join all the chips of one server through switches: every pair
  is one hop apart. Following kipply's model, each collective pass (an AllGather, a
  ReduceScatter; an AllReduce is two) pays one message latency, `hop_latency_s`.

`max_chips` is how many chips one such domain joins (an HGX board's 8 GPUs, a TPU pod); the
estimator models one domain and refuses more.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

__all__ = ["Chip", "CHIPS", "get_chip", "chip_for_device", "chip_from_json",
           "HardwareError"]


class HardwareError(ValueError):
    """Unknown chip or malformed hardware description."""


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


_TPU_DOCS = "Google Cloud TPU system architecture docs (cloud.google.com/tpu/docs/{v})"
_SCALING_ICI = ("; ICI one-way bandwidth per link and ~1 µs per hop from the scaling book, "
                "part 2 (Austin et al. 2025); pod size ({pod} chips) from the same docs")
# NVIDIA publishes no per-message latency. NCCL's own cost model (src/graph/tuning.cc, the
# ring algorithm with its low-latency "LL" protocol used for small messages) charges 3.6 µs per
# collective plus 0.47 µs per ring step over NVLink, 1.0 µs per step over PCIe: a pass over 8
# GPUs (7 steps) is 6.9 µs on NVLink and 10.6 µs on PCIe.
_NCCL = ("; message latency {lat}: NCCL's cost model (src/graph/tuning.cc, ring/LL over "
         "{link}) for a pass over the {n} GPUs of one server")

_A100 = ("NVIDIA A100 Tensor Core GPU datasheet (SXM4 {v}); 8 GPUs per NVLink domain: NVIDIA "
         "HGX A100; message latency 8 µs: kipply's estimate (Chen 2022) from NVLink "
         "measurements on the V100 (Jia et al. 2018)")

CHIPS: dict[str, Chip] = {c.name: c for c in [
    Chip("TPU v4", hbm_bytes=32e9, hbm_bytes_per_s=1.2e12, bf16_flops_per_s=2.75e14,
         int8_ops_per_s=2.75e14, interconnect="ICI", link_bytes_per_s=4.5e10, links=6,
         hop_latency_s=1e-6, max_chips=4096,
         source=_TPU_DOCS.format(v="v4") + _SCALING_ICI.format(pod=4096)),
    Chip("TPU v5e", hbm_bytes=16e9, hbm_bytes_per_s=8.19e11, bf16_flops_per_s=1.97e14,
         int8_ops_per_s=3.94e14, interconnect="ICI", link_bytes_per_s=4.5e10, links=4,
         hop_latency_s=1e-6, max_chips=256,
         source=_TPU_DOCS.format(v="v5e") + _SCALING_ICI.format(pod=256)),
    Chip("TPU v5p", hbm_bytes=95e9, hbm_bytes_per_s=2.765e12, bf16_flops_per_s=4.59e14,
         int8_ops_per_s=9.18e14, interconnect="ICI", link_bytes_per_s=9e10, links=6,
         hop_latency_s=1e-6, max_chips=8960,
         source=_TPU_DOCS.format(v="v5p") + _SCALING_ICI.format(pod=8960)),
    Chip("TPU v6e", hbm_bytes=32e9, hbm_bytes_per_s=1.64e12, bf16_flops_per_s=9.18e14,
         int8_ops_per_s=1.836e15, interconnect="ICI", link_bytes_per_s=9e10, links=4,
         hop_latency_s=1e-6, max_chips=256,
         source=_TPU_DOCS.format(v="v6e") + _SCALING_ICI.format(pod=256)),
    # NVIDIA H100 SXM5 datasheet: 1,979 TFLOPS bf16 and 3,958 TOPS int8 *with sparsity*;
    # NVLink 4: 18 links, 900 GB/s per GPU both directions together (25 GB/s one way a link);
    # an HGX H100 board joins 8 GPUs through NVSwitches.
    Chip("H100 SXM", hbm_bytes=80e9, hbm_bytes_per_s=3.35e12, bf16_flops_per_s=9.895e14,
         int8_ops_per_s=1.979e15, interconnect="NVLink 4", link_bytes_per_s=2.5e10, links=18,
         hop_latency_s=6.9e-6, max_chips=8,
         source="NVIDIA H100 Tensor Core GPU datasheet (SXM5); 8 GPUs per NVLink domain: "
                "NVIDIA HGX H100" + _NCCL.format(lat="6.9 µs", link="NVLink", n=8)),
    # NVIDIA H200 datasheet: H100's compute with 141 GB of HBM3e at 4.8 TB/s.
    Chip("H200", hbm_bytes=141e9, hbm_bytes_per_s=4.8e12, bf16_flops_per_s=9.895e14,
         int8_ops_per_s=1.979e15, interconnect="NVLink 4", link_bytes_per_s=2.5e10, links=18,
         hop_latency_s=6.9e-6, max_chips=8,
         source="NVIDIA H200 Tensor Core GPU datasheet (SXM); 8 GPUs per NVLink domain: "
                "NVIDIA HGX H200" + _NCCL.format(lat="6.9 µs", link="NVLink", n=8)),
    # NVIDIA A100 datasheet: 312 TFLOPS bf16 dense, 624 TOPS int8 dense; NVLink 3: 12 links,
    # 600 GB/s both directions together. NVIDIA publishes no per-message latency; the 8 µs is
    # kipply's estimate (Chen 2022), taken from Citadel's NVLink microbenchmarks on the V100
    # (Jia et al. 2018), and the figure her latency model uses.
    Chip("A100 40GB", hbm_bytes=40e9, hbm_bytes_per_s=1.555e12, bf16_flops_per_s=3.12e14,
         int8_ops_per_s=6.24e14, interconnect="NVLink 3", link_bytes_per_s=2.5e10, links=12,
         hop_latency_s=8e-6, max_chips=8, source=_A100.format(v="40GB")),
    Chip("A100 80GB", hbm_bytes=80e9, hbm_bytes_per_s=2.039e12, bf16_flops_per_s=3.12e14,
         int8_ops_per_s=6.24e14, interconnect="NVLink 3", link_bytes_per_s=2.5e10, links=12,
         hop_latency_s=8e-6, max_chips=8, source=_A100.format(v="80GB")),
    # NVIDIA L4 datasheet: 242 TFLOPS bf16 and 485 TOPS int8 with sparsity; PCIe only
    # (PCIe Gen4 x16, 64 GB/s both directions). Servers hold up to 8 (Google Cloud's
    # g2-standard-96).
    Chip("L4", hbm_bytes=24e9, hbm_bytes_per_s=3.0e11, bf16_flops_per_s=1.21e14,
         int8_ops_per_s=2.425e14, interconnect="PCIe 4.0 x16", link_bytes_per_s=3.2e10, links=1,
         hop_latency_s=1.06e-5, max_chips=8,
         source="NVIDIA L4 Tensor Core GPU datasheet; 8 per server: Google Cloud G2 machine "
                "types" + _NCCL.format(lat="10.6 µs", link="PCIe", n=8)),
    # NVIDIA A10 datasheet: 125 TFLOPS bf16 (250 sparse), 250 TOPS int8 (500 sparse);
    # PCIe Gen4 x16. PCIe servers hold up to 8 (AWS's g5.48xlarge: eight A10G, its cloud
    # variant).
    Chip("A10", hbm_bytes=24e9, hbm_bytes_per_s=6.0e11, bf16_flops_per_s=1.25e14,
         int8_ops_per_s=2.5e14, interconnect="PCIe 4.0 x16", link_bytes_per_s=3.2e10, links=1,
         hop_latency_s=1.06e-5, max_chips=8,
         source="NVIDIA A10 Tensor Core GPU datasheet; 8 per PCIe server, as AWS G5 "
                "instances hold eight A10G"
                + _NCCL.format(lat="10.6 µs", link="PCIe", n=8)),
]}

_ALIASES = {name.lower().replace(" ", "-"): name for name in CHIPS}
# Short names people type: a bare generation means the chip the registry has of it.
_ALIASES |= {"h100": "H100 SXM", "h100-sxm5": "H100 SXM", "h200-sxm": "H200", "v4": "TPU v4",
             "v5e": "TPU v5e", "v5p": "TPU v5p", "v6e": "TPU v6e"}


def get_chip(name: str) -> Chip:
    """A chip by name; case and spaces/hyphens do not matter ('tpu-v5e', 'TPU v5e')."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    if key in _ALIASES:
        return CHIPS[_ALIASES[key]]
    raise HardwareError(f"unknown hardware {name!r}; known: {', '.join(CHIPS)}")


def chip_for_device(device_kind: str) -> Chip | None:
    """The registry's entry for a JAX device kind (`jax.devices()[0].device_kind`), or None
    where the registry has no such chip (CPUs, unknown accelerators)."""
    kind = device_kind.lower()
    if "h100" in kind and "pcie" in kind:       # not in the registry (less bandwidth than SXM)
        return None
    for key, name in [("h200", "H200"), ("h100", "H100 SXM"), ("a100", "A100 80GB"),
                      ("l4", "L4"), ("a10", "A10"), ("v5 lite", "TPU v5e"), ("v5e", "TPU v5e"),
                      ("v6", "TPU v6e"), ("v5p", "TPU v5p"), ("v4", "TPU v4")]:
        if key in kind:
            return CHIPS[name]
    return None


def _refuse_constant(name: str) -> float:
    raise HardwareError(f"{name} is not a number a chip can have")


def chip_from_json(source: str | Path | dict[str, Any]) -> Chip:
    """A custom chip from JSON with at least hbm_bytes, hbm_bandwidth (B/s) and flops (FLOP/s).

    The registry's own field names (hbm_bytes_per_s, bf16_flops_per_s, ...) are accepted too.
    Every number must be positive and finite (NaN, Infinity and 1e400 are refused, naming the
    key), `links` and `max_chips` whole numbers, and the labels strings.
    """
    if isinstance(source, dict):
        raw, where = source, "hardware config"
    else:
        path = Path(source)
        try:
            raw = json.loads(path.read_text(), parse_constant=_refuse_constant)
        except FileNotFoundError:
            raise HardwareError(f"hardware config {str(path)!r} does not exist") from None
        except IsADirectoryError:
            raise HardwareError(f"hardware config {str(path)!r} is a directory") from None
        except HardwareError as err:
            raise HardwareError(f"{str(path)!r}: {err}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise HardwareError(f"cannot read hardware config {str(path)!r} as JSON: "
                                f"{first}") from None
        where = repr(str(path))
    if not isinstance(raw, dict):
        raise HardwareError(f"{where} must hold a JSON object")
    data = dict(raw)
    data.setdefault("hbm_bytes_per_s", data.pop("hbm_bandwidth", None))
    data.setdefault("bf16_flops_per_s", data.pop("flops", None))
    data.setdefault("int8_ops_per_s", None)
    data.setdefault("name", "custom")
    unknown = set(data) - {f.name for f in fields(Chip)}
    if unknown:
        raise HardwareError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    aliases = {"hbm_bytes_per_s": "hbm_bandwidth", "bf16_flops_per_s": "flops"}
    for key in ("hbm_bytes", "hbm_bytes_per_s", "bf16_flops_per_s"):
        if data.get(key) is None:
            raise HardwareError(f"{where} is missing the key {aliases.get(key, key)!r}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("name", "interconnect", "source"):
            if value is not None and not isinstance(value, str):
                raise HardwareError(f"{where}: {key} must be a string, got {value!r}")
            out[key] = value if value is not None or key == "interconnect" else ""
        elif value is None:
            out[key] = None
        elif key in ("links", "max_chips"):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2 ** 31:
                raise HardwareError(f"{where}: {key} must be a positive whole number, "
                                    f"got {value!r}")
            out[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise HardwareError(f"{where}: {aliases.get(key, key)} must be a positive "
                                    f"finite number, got {value!r}")
            out[key] = float(value)
    return Chip(**out)
