"""How much of the roofline a real deployment achieves: the efficiency an estimate applies.

The bare roofline (chapters 2-4) charges every byte at the chip's full memory bandwidth W,
every FLOP at its full peak C, every collective at the link's full bandwidth and the
hardware's own message latency, and nothing else. Real serving stacks get less — their
kernels reach a fraction of each roof, each layer of each step pays launches and small
operations, a collective pays its library's software — and the gap is not small: the
published measurements of `published_points` run at 0.3 to 0.8 of the bare roofline's speed.
An `Efficiency` says what is achieved, and `step_cost.step_time` applies it:

    work      Σ_parts max(FLOPs / (mfu · experts_mfu · C), bytes / (mbu · weight_only · W))
              (a part reading the KV cache at mbu_cache · W instead)
    comm      bandwidth time / link,  latency + passes · pass_overhead_s
    fixed     layers · decode_layer_s (a decode step) or layers · prefill_layer_s (a prefill),
              + routing layers · moe_layer_s
    step      max(work, comm bandwidth) + comm latency + fixed   (collectives overlapped)
              work + comm bandwidth + comm latency + fixed       (not: `decode_overlap`,
                                                                  `prefill_overlap` False)

`IDEAL` is the bare roofline: every fraction 1, no fixed cost, prefill collectives hidden
behind the work as the chapters teach. The fitted efficiency of each chip, with the points
and the fit it came from, is `efficiency_defaults.efficiency_for(chip)`; `inferbook
calibrate` (`efficiency_fit`) refits it from the published points.

    mbu              achieved fraction of memory bandwidth ("model bandwidth utilization")
    mbu_cache        the same for attention reading the KV cache
    mfu_bf16/fp8/int8  achieved fraction of the peak of the format the matmuls run in
    weight_only_int8/int4/fp8  factor on mbu when weights stored so are dequantized into bf16
                     matmuls (weight-only quantization: the kernels unpack as they read)
    experts_mfu      factor on mfu for a mixture's routed experts (grouped matmuls)
    link             achieved fraction of the interconnect bandwidth a collective gets
    pass_overhead_s  software cost of each collective pass (a launch, a synchronisation)
                     on top of the hardware's latency (`comm_time.collective_pass_latency`)
    decode_layer_s, prefill_layer_s   fixed cost per layer of a decode step / of a prefill
    moe_layer_s      fixed cost per routing layer of a pass (routing, gathering the tokens)
    decode_overlap, prefill_overlap   whether a decode step's / a prefill's collectives
                     overlap with its work (a step may say otherwise: `StepCost.overlap`)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["Efficiency", "IDEAL", "COMPUTE_FORMATS", "FRACTIONS", "SECONDS",
           "with_overrides"]

COMPUTE_FORMATS = ("bf16", "fp8", "int8")
# Fields that are fractions of a roof (0 < x <= 1) and fields that are seconds (x >= 0).
FRACTIONS = ("mbu", "mbu_cache", "mfu_bf16", "mfu_fp8", "mfu_int8", "weight_only_int8",
             "weight_only_int4", "weight_only_fp8", "experts_mfu", "link")
SECONDS = ("pass_overhead_s", "decode_layer_s", "prefill_layer_s", "moe_layer_s")


@dataclass(frozen=True)
class Efficiency:
    """What a deployment achieves of the bare roofline (see the module's docstring); `source`
    says where the figures come from."""

    mbu: float = 1.0
    mbu_cache: float = 1.0
    mfu_bf16: float = 1.0
    mfu_fp8: float = 1.0
    mfu_int8: float = 1.0
    weight_only_int8: float = 1.0
    weight_only_int4: float = 1.0
    weight_only_fp8: float = 1.0
    experts_mfu: float = 1.0
    link: float = 1.0
    pass_overhead_s: float = 0.0
    decode_layer_s: float = 0.0
    prefill_layer_s: float = 0.0
    moe_layer_s: float = 0.0
    decode_overlap: bool = True
    prefill_overlap: bool = True
    name: str = "ideal"
    source: str = "the bare roofline: every roof reached, no fixed cost"

    def __post_init__(self) -> None:
        for key in FRACTIONS:
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"{key} must be a fraction in (0, 1], got {value!r}")
        for key in SECONDS:
            value = getattr(self, key)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{key} must be a finite number >= 0, got {value!r}")

    def mfu(self, compute: str) -> float:
        """The achieved fraction of the peak of `compute` ('bf16', 'fp8' or 'int8')."""
        if compute not in COMPUTE_FORMATS:
            raise ValueError(f"compute must be one of {', '.join(COMPUTE_FORMATS)}, "
                             f"got {compute!r}")
        return getattr(self, f"mfu_{compute}")

    def bandwidth(self, dequantized: str | None = None, cache: bool = False) -> float:
        """The achieved fraction of memory bandwidth for bytes of weights stored in
        `dequantized` and unpacked into bf16 matmuls (None: any other bytes), or for the KV
        cache attention reads (`cache`)."""
        if cache:
            return self.mbu_cache
        if dequantized is None or dequantized == "bf16":
            return self.mbu
        return self.mbu * getattr(self, f"weight_only_{dequantized}")

    def fixed_s(self, phase: str, layers: int, moe_layers: int = 0) -> float:
        """The fixed cost of a pass through `layers` layers, `moe_layers` of them routing
        tokens to experts, in `phase` ('decode' or 'prefill')."""
        if phase not in ("decode", "prefill"):
            raise ValueError(f"phase must be 'decode' or 'prefill', got {phase!r}")
        per_layer = self.decode_layer_s if phase == "decode" else self.prefill_layer_s
        return layers * per_layer + moe_layers * self.moe_layer_s

    def overlaps(self, phase: str) -> bool:
        """Whether the collectives of a step of `phase` overlap with its work."""
        if phase not in ("decode", "prefill"):
            raise ValueError(f"phase must be 'decode' or 'prefill', got {phase!r}")
        return self.decode_overlap if phase == "decode" else self.prefill_overlap

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


IDEAL = Efficiency()


def with_overrides(eff: Efficiency, *, mbu: float | None = None,
                   mfu: float | None = None) -> Efficiency:
    """`eff` with the memory-bandwidth fraction and/or the FLOP/s fraction (every compute
    format's) replaced, its name and source saying so."""
    changes: dict[str, Any] = {}
    if mbu is not None:
        changes.update(mbu=mbu, mbu_cache=mbu)
    if mfu is not None:
        changes.update({f"mfu_{c}": mfu for c in COMPUTE_FORMATS})
    if not changes:
        return eff
    said = ", ".join(f"{k} {v:g}" for k, v in (("mbu", mbu), ("mfu", mfu)) if v is not None)
    return dataclasses.replace(eff, **changes, name=f"{eff.name}, {said}",
                               source=f"{eff.source}; {said} given")
