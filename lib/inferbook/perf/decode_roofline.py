"""The sources' decode step on the roofline: the scaling book's equation 1, as a cost.

A decode step of B sequences reads every weight once and every sequence's KV cache once.
The sources count it in two parts (Austin et al. 2025, part 7, "theoretical estimates"):

* attention against the cache, about one FLOP per byte whatever the batch: its bytes only,
  kv_bytes / W;
* the weight matmuls, 2·B FLOPs per parameter: the larger of 2·B·P / C and param_bytes / W;

so T_step = kv_bytes / W + max(2·B·P / C, param_bytes / W), with W and C the bandwidth and
FLOP/s of all the chips together; with nothing waiting on arithmetic it is at least every
byte over W. This module builds both as `StepCost`s — what the step computes and reads, the
way the sources count it — and the library's one step-time formula prices them:
`step_cost.step_time(decode_step_cost(...), chip, chips)` is equation 1, because the core
adds nothing the sources leave out (attention's FLOPs, communication) when the cost has none.
`inferbook estimate` counts both (`perf.estimator`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import kv_bytes_per_token, param_bytes, param_count
from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import critical_batch, max_batch
from inferbook.perf.step_cost import StepCost, Work

__all__ = ["decode_step_cost", "lower_bound_step_cost", "DecodeHoldings", "DecodeFootprint",
           "decode_footprint"]


def decode_step_cost(params: float, param_bytes: float, kv_bytes: float,
                     batch: int) -> StepCost:
    """The sources' decode step as parts: attention reads `kv_bytes` (the whole batch's
    cache; its FLOPs left out), the weight matmuls do 2·B·params FLOPs on `param_bytes`.

    Priced by `step_cost.step_time` on `chips` chips it is the scaling book's general step
    time (part 7, eq. 1): kv_bytes / (chips·W) + max(2·B·params / (chips·C),
    param_bytes / (chips·W)) — attention always bandwidth-bound, the weight matmuls paying
    the larger of their FLOP time and their load time.
    """
    return StepCost((Work("attention", 0.0, kv_bytes),
                     Work("weights", 2 * batch * params, param_bytes)))


def lower_bound_step_cost(param_bytes: float, kv_bytes: float) -> StepCost:
    """Every byte read once, nothing else: one part of `kv_bytes + param_bytes` bytes.

    Priced by `step_cost.step_time` it is (kv_bytes + param_bytes) / (chips · W), the scaling
    book's "theoretical minimum step time" (part 7, "theoretical estimates"): a bound for
    small batches, where nothing waits on arithmetic. `kv_bytes` is the whole batch's cache.
    """
    return StepCost((Work("every byte once", 0.0, kv_bytes + param_bytes),))


@dataclass(frozen=True)
class DecodeHoldings:
    """What a decode step holds in the sources' counts, and the batches it allows: the first
    fields of a `DecodeFootprint` and of every row of `inferbook estimate` (`Estimate`)."""

    params: int
    param_bytes: float
    kv_bytes_per_token: float
    kv_bytes: float
    total_bytes: float
    hbm_bytes: float
    fits: bool
    max_batch: int
    critical_batch: float


@dataclass(frozen=True)
class DecodeFootprint(DecodeHoldings):
    """One decode step in the sources' counts (see `decode_footprint`): what it holds, and
    what it does as two costs for `step_cost.step_time` to price."""

    step: StepCost              # equation 1's parts (`decode_step_cost`)
    lower_bound: StepCost       # every byte once (`lower_bound_step_cost`)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def decode_footprint(cfg: ModelConfig, chip: Chip, *, batch: int = 1, context: int,
                     chips: int = 1, weight_bytes: float = 2, kv_bytes: float = 2,
                     compute: str = "bf16") -> DecodeFootprint:
    """One decode step of B sequences with S cached tokens each, on `chips` chips.

    The sources' model, chips dividing bandwidth and FLOP/s: param_bytes = params ·
    weight_bytes; kv_bytes = B · S · 2·L·K·H·kv_bytes; total_bytes = their sum; fits =
    total ≤ chips · HBM; critical_batch for one chip (in `compute`). Its `step` and
    `lower_bound` are the step's costs with params standing for the FLOP-carrying
    parameters (the sources' 2·P rule): `step_time(fp.step, chip, chips, compute)` is the
    step time. `inferbook estimate` adds communication, prefill, quantization formats and
    mixtures of experts on top (`perf.estimator`).
    """
    P = param_count(cfg)
    pbytes = param_bytes(cfg, weight_bytes)
    per_token = kv_bytes_per_token(cfg, kv_bytes)
    kv = batch * context * per_token
    total = pbytes + kv
    hbm = chips * chip.hbm_bytes
    return DecodeFootprint(
        params=P, param_bytes=pbytes, kv_bytes_per_token=per_token, kv_bytes=kv,
        total_bytes=total, hbm_bytes=hbm, fits=total <= hbm,
        max_batch=max_batch(cfg, chip, context, chips, weight_bytes, kv_bytes),
        critical_batch=critical_batch(chip, weight_bytes, compute),
        step=decode_step_cost(P, pbytes, kv, batch),
        lower_bound=lower_bound_step_cost(pbytes, kv))
