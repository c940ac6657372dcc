"""The whole estimate behind `inferbook estimate`: memory, a decode step, a prefill, many chips.

It joins the book's models into one function. For B sequences with S cached tokens each,
served from `chips` chips with P parameters, A of them active per token:

    memory      param_bytes + copies · kv_bytes ≤ chips · HBM                    (chapter 5)
    decode      attention = max(attention FLOPs / C, copies · kv_bytes / W)
                weights   = max(2·B·(matmul weights) / C, weight bytes the step reads / W)
                step      = max(attention + weights, comm bandwidth) + comm latency
    prefill     max(forward FLOPs / C, weights read + cache written / W), its collectives
                overlapped or after the work (`prefill_overlap`)
    generation  prefill(T) + Σ decode steps from T + 1 to T + N − 1          (`--output N`)

with C and W the chips' FLOP/s and bandwidth together (chapters 2-4): each step a `StepCost`
(`estimate_steps`) handed to the library's one step-time formula, `step_cost.step_time`,
under an `Efficiency`: the bare roofline the chapters teach (`efficiency="ideal"`) or what
the published measurements say a chip achieves (`"calibrated"`, the default, the chip's
fitted fractions and fixed costs, `efficiency_defaults`). The communication is that of the
library's 1D or 2D weight-stationary layout or, for a mixture of experts, its expert-parallel
layout (`layout_comms`: chapters 8-10 and 14), whichever makes the faster decode step;
chips spread over hosts pay the data-centre network for what crosses between them
(`dcn_comms`, under the same efficiency as every other collective).
A mixture of experts reads the experts its batch touches, E·(1 − (1 − k/E)^B) per layer
(`params.expected_experts`); a step reads B rows of the input embedding, not the table.
Latent attention runs decode in its absorbed form and, having no heads to split, keeps every
tensor-parallel chip's copy of the whole latent cache (`copies`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from inferbook.model.config import ModelConfig
from inferbook.perf import counts, params, quant
from inferbook.perf import estimate_inputs as inputs
from inferbook.perf.dcn_comms import HostsComms
from inferbook.perf.decode_roofline import DecodeHoldings
from inferbook.perf.efficiency import Efficiency
from inferbook.perf.estimate_plan import EstimatePlan, plan_estimate
from inferbook.perf.estimate_steps import model_bytes_read, weight_bytes_read
from inferbook.perf.generation_time import costs_per_million, generation_seconds
from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import batches_that_fit, peak_flops_per_s
from inferbook.perf.step_breakdown import StepBreakdown, breakdown
from inferbook.perf.step_cost import StepCost, step_time

__all__ = ["Estimate", "estimate", "critical_batch_moe",
           "weight_bytes_read"]


@dataclass(frozen=True)
class Estimate(DecodeHoldings):
    """One row of `inferbook estimate`; book/estimate_reference.py defines every field.

    First what the decode step holds as the sources count it (`DecodeHoldings`: parameters,
    bytes, whether they fit, the batches), then its step time and throughput, then what the
    command adds: the setting, formats, efficiency, experts, communication, prefill,
    generation and price.
    """

    step_time_lower_bound_s: float
    step_time_s: float
    tokens_per_s: float
    model: str
    hardware: str
    chips: int
    layout: str | None
    layout_x: int
    layout_yz: int
    expert_chips: int
    batch: int
    context: int
    prompt: int
    weights: str
    kv: str
    compute: str
    weight_bytes: float
    kv_bytes_per_element: float
    active_params: int
    experts_touched: float | None
    weight_bytes_read: float
    efficiency: str
    mbu: float
    mfu: float
    comm_time_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_chip: float
    prefill_overlap: bool
    prefill_time_s: float
    ttft_s: float
    output: int | None
    generation_time_s: float | None
    output_tokens_per_s: float | None
    price_per_chip_hour: float | None
    usd_per_million_tokens: float | None
    usd_per_million_prompt_tokens: float | None
    usd_per_million_output_tokens: float | None
    breakdown: StepBreakdown
    warnings: tuple[str, ...] = ()
    chips_per_host: int | None = None      # None: every chip in one interconnect domain
    dcn_time_s: float = 0.0                # of comm_time_s, spent on the data-centre network

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out


def critical_batch_moe(cfg: ModelConfig, total_bytes: float, expert_bytes: float,
                       flops_per_token: float, flops_per_s: float, bytes_per_s: float) -> float:
    """The batch B at which 2·A·B FLOPs take as long as reading the weights B tokens touch.

    For a dense model the read is fixed and B = C · bytes / (W · 2A), the sources' critical
    batch. An MoE's read grows with B (concavely, toward every expert), so the crossing comes
    later; it is unique (FLOPs grow linearly, the read concavely) and found by bisection.
    """
    def gap(B: float) -> float:
        read = weight_bytes_read(cfg, total_bytes, expert_bytes, B)
        return B * flops_per_token / flops_per_s - read / bytes_per_s

    hi = total_bytes * flops_per_s / (bytes_per_s * flops_per_token)   # the read ≤ all bytes
    if cfg.moe is None:
        return hi
    lo = 0.0
    for _ in range(200):                   # halves [lo, hi] to float precision, then stops
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return hi


def estimate(cfg: ModelConfig, chip: Chip, *, batch: int = 1, context: int | None = None,
             prompt: int | None = None, chips: int = 1, layout: str | None = None,
             weights: str | quant.WeightFormat = "bf16", kv: str = "bf16",
             weight_bytes: float | None = None, kv_bytes: float | None = None,
             compute: str = "bf16", efficiency: Efficiency | str = "calibrated",
             mbu: float | None = None, mfu: float | None = None,
             prefill_overlap: bool | None = None, output: int | None = None,
             price_per_chip_hour: float | None = None, strict: bool = False,
             chips_per_host: int | None = None) -> Estimate:
    """Estimate serving `cfg` on `chips` chips: one decode step of `batch` sequences holding
    `context` tokens each (default: the model's positions), the prefill of `prompt`-token
    prompts (default: the context) and, given `output`, the whole generation of `output`
    tokens after it. `layout` None picks the layout with the faster decode step.
    `weights`/`kv` are storage formats (`quant`); `weight_bytes`/`kv_bytes` instead set
    plain bytes per parameter / per cached element, as the sources do; `compute` is the
    format the matmuls run in ('bf16', 'fp8', 'int8').

    `efficiency` is "calibrated" (the chip's fitted efficiency), "ideal" (the bare
    roofline) or an `Efficiency`; `mbu`/`mfu` replace its bandwidth / FLOP/s fractions.
    `prefill_overlap` None takes the efficiency's choice. `price_per_chip_hour` (dollars)
    adds costs per million tokens. `chips_per_host` spreads the chips over hosts of that
    many (one interconnect domain each): collectives that leave a host are priced on the
    data-centre network too (`dcn_comms`).

    Raises `estimate_inputs.EstimateInputError` (a ValueError naming the input) on bad input,
    the same checks `inferbook estimate` makes, and on a context beyond the model's positions
    when `strict` (otherwise a warning in the result); ValueError on a figure that does not
    come out finite.
    """
    plan = plan_estimate(cfg, chip, batch=batch, context=context, prompt=prompt, chips=chips,
                         layout=layout, weights=weights, kv=kv, weight_bytes=weight_bytes,
                         kv_bytes=kv_bytes, compute=compute, efficiency=efficiency, mbu=mbu,
                         mfu=mfu, prefill_overlap=prefill_overlap, output=output,
                         strict=strict, chips_per_host=chips_per_host)
    price = None if price_per_chip_hour is None else inputs.price("price", price_per_chip_hour)
    return _estimate_from_plan(plan, price)


def _estimate_from_plan(plan: EstimatePlan, price_per_chip_hour: float | None = None
                        ) -> Estimate:
    """The `Estimate` of a plan (`estimate_plan.plan_estimate`): every step priced."""
    cfg, chip, eff, share = plan.cfg, plan.chip, plan.efficiency, plan.share
    B, S, T, n, N_out, mb, e = (plan.batch, plan.context, plan.prompt, plan.chips, plan.output,
                                plan.weights, plan.kv_element_bytes)
    P, A = params.param_count(cfg), params.active_param_count(cfg)
    W, C = chip.hbm_bytes_per_s, peak_flops_per_s(chip, plan.compute)
    def seconds(cost: StepCost) -> float:
        return step_time(cost, chip, share.chips, plan.compute, eff)

    decode = plan.decode_cost()
    step = seconds(decode)
    prefill = seconds(plan.prefill_cost())
    gen = None if N_out is None else generation_seconds(
        lambda ctx: seconds(plan.decode_cost(ctx)), prefill, T, N_out)
    kv_total = counts.kv_cache_bytes(cfg, B, S, e)
    hbm = n * chip.hbm_bytes
    weights_held = plan.weights_held
    per_seq = plan.cache_bytes_per_sequence()
    total = plan.held_bytes
    warnings = list(plan.warnings)
    if total > hbm:
        warnings.append(
            f"batch {B:,} at context {S:,} does not fit: weights + KV cache need "
            f"{_gb(total)}, {n} × {chip.name} hold "
            f"{_gb(hbm)}; the largest batch that fits is "
            f"{batches_that_fit(hbm - weights_held, per_seq):,}")
    c = share.comms
    dcn = (c.dcn_bandwidth_s / eff.link + c.dcn_latency_s + c.dcn_passes * eff.pass_overhead_s
           if isinstance(c, HostsComms) else 0.0)
    out = Estimate(
        model=cfg.name, hardware=chip.name, chips=n, layout=c.layout if n > 1 else None,
        layout_x=c.X, layout_yz=c.YZ, expert_chips=share.experts_over,
        batch=B, context=S, prompt=T, weights=plan.weights_label, kv=plan.kv_label,
        compute=plan.compute, weight_bytes=mb.total / P, kv_bytes_per_element=e, params=P,
        active_params=A, param_bytes=mb.total, kv_bytes_per_token=counts.kv_bytes_per_token(
            cfg, e), kv_bytes=kv_total, total_bytes=total, hbm_bytes=hbm, fits=total <= hbm,
        max_batch=batches_that_fit(hbm - weights_held, per_seq),
        critical_batch=critical_batch_moe(cfg, mb.total, mb.experts, 2 * A, C, W),
        experts_touched=(params.expected_experts(cfg.moe.E, cfg.moe.k, B)
                         if cfg.moe is not None else None),
        weight_bytes_read=model_bytes_read(cfg, mb, B), efficiency=eff.name, mbu=eff.mbu,
        mfu=eff.mfu(plan.compute),
        comm_time_s=(c.bandwidth_s / eff.link + c.latency_s
                     + c.passes * eff.pass_overhead_s),
        step_time_lower_bound_s=decode.bytes / (share.chips * W), step_time_s=step,
        tokens_per_s=B / step, tokens_per_s_per_user=1 / step,
        tokens_per_s_per_chip=B / step / n,
        prefill_overlap=(eff.prefill_overlap if plan.prefill_overlap is None
                         else plan.prefill_overlap),
        prefill_time_s=prefill, ttft_s=prefill, output=N_out, generation_time_s=gen,
        output_tokens_per_s=None if gen is None else B * N_out / gen,
        price_per_chip_hour=price_per_chip_hour,
        **costs_per_million(price_per_chip_hour, n, B, step, prefill, T, gen, N_out),
        breakdown=breakdown(cfg, decode, chip, share.chips, plan.compute, eff, B, step, dcn),
        warnings=tuple(warnings), chips_per_host=plan.chips_per_host, dcn_time_s=dcn)
    for key, value in out.as_dict().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key} comes out {value} for these inputs: a figure of the "
                             "hardware or the bytes is out of range")
    return out


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB ({nbytes / 2 ** 30:,.1f} GiB)"
