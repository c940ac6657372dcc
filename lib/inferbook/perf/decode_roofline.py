"""The sources' decode step on the roofline: the scaling book's equation 1, as a view.

A decode step of B sequences reads every weight once and every sequence's KV cache once.
The sources count it in two parts (Austin et al. 2025, part 7, "theoretical estimates"):

* attention against the cache, about one FLOP per byte whatever the batch: its bytes only,
  kv_bytes / W;
* the weight matmuls, 2·B FLOPs per parameter: the larger of 2·B·P / C and param_bytes / W;

so T_step = kv_bytes / W + max(2·B·P / C, param_bytes / W), with W and C the bandwidth and
FLOP/s of all the chips together; with nothing waiting on arithmetic it is at least every
byte over W. Both are `StepCost`s handed to the library's one step-time formula
(`step_cost.step_time`), which adds nothing here: the sources leave attention's FLOPs and
communication out. `inferbook estimate` counts both (`perf.estimator`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from inferbook.model.config import ModelConfig
from inferbook.perf.counts import kv_bytes_per_token, param_bytes, param_count
from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import critical_batch, max_batch, tokens_per_s
from inferbook.perf.step_cost import StepCost, Work, step_time

__all__ = ["decode_step_cost", "decode_step_time", "step_time_lower_bound",
           "DecodeEstimate", "estimate_decode"]


def decode_step_cost(params: float, param_bytes: float, kv_bytes: float,
                     batch: int) -> StepCost:
    """The sources' decode step as parts: attention reads `kv_bytes` (the whole batch's
    cache; its FLOPs left out), the weight matmuls do 2·B·params FLOPs on `param_bytes`."""
    return StepCost((Work("attention", 0.0, kv_bytes),
                     Work("weights", 2 * batch * params, param_bytes)))


def decode_step_time(params: float, param_bytes: float, kv_bytes: float, batch: int,
                     chip: Chip, chips: int = 1, compute: str = "bf16") -> float:
    """kv_bytes / (chips·W) + max(2·B·params / (chips·C), param_bytes / (chips·W)).

    The scaling book's general step time (part 7, eq. 1): attention is always bandwidth-bound;
    the weight matmuls pay the larger of their FLOP time and their load time.
    """
    return step_time(decode_step_cost(params, param_bytes, kv_bytes, batch), chip, chips,
                     compute)


def step_time_lower_bound(param_bytes: float, kv_bytes: float, chip: Chip,
                          chips: int = 1) -> float:
    """(kv_bytes + param_bytes) / (chips · W): every byte read once at full bandwidth.

    The scaling book's "theoretical minimum step time" (part 7, "theoretical estimates"); a
    bound for small batches, where nothing waits on arithmetic. `kv_bytes` is the whole
    batch's cache.
    """
    return step_time(StepCost((Work("every byte once", 0.0, kv_bytes + param_bytes),)),
                     chip, chips)


@dataclass(frozen=True)
class DecodeEstimate:
    """Everything `inferbook estimate` reports for one decode step (see `estimate_decode`)."""

    params: int
    param_bytes: float
    kv_bytes_per_token: float
    kv_bytes: float
    total_bytes: float
    hbm_bytes: float
    fits: bool
    max_batch: int
    critical_batch: float
    step_time_lower_bound_s: float
    step_time_s: float
    tokens_per_s: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_decode(cfg: ModelConfig, chip: Chip, *, batch: int = 1, context: int,
                    chips: int = 1, weight_bytes: float = 2, kv_bytes: float = 2,
                    compute: str = "bf16") -> DecodeEstimate:
    """One decode step of B sequences with S cached tokens each, on `chips` chips.

    The sources' model, chips dividing bandwidth and FLOP/s: param_bytes = params ·
    weight_bytes; kv_bytes = B · S · 2·L·K·H·kv_bytes;
    total_bytes = their sum; fits = total ≤ chips · HBM; critical_batch for one chip; step
    times from `step_time_lower_bound` and `decode_step_time` with params standing for the
    FLOP-carrying parameters (the sources' 2·P rule). `inferbook estimate` adds communication,
    prefill, quantization formats and mixtures of experts on top (`perf.estimator`).
    """
    P = param_count(cfg)
    pbytes = param_bytes(cfg, weight_bytes)
    per_token = kv_bytes_per_token(cfg, kv_bytes)
    kv = batch * context * per_token
    total = pbytes + kv
    hbm = chips * chip.hbm_bytes
    step = decode_step_time(P, pbytes, kv, batch, chip, chips, compute)
    return DecodeEstimate(
        params=P, param_bytes=pbytes, kv_bytes_per_token=per_token, kv_bytes=kv,
        total_bytes=total, hbm_bytes=hbm, fits=total <= hbm,
        max_batch=max_batch(cfg, chip, context, chips, weight_bytes, kv_bytes),
        critical_batch=critical_batch(chip, weight_bytes, compute),
        step_time_lower_bound_s=step_time_lower_bound(pbytes, kv, chip, chips),
        step_time_s=step, tokens_per_s=tokens_per_s(batch, step))
