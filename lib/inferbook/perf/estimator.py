"""The whole estimate behind `inferbook estimate`: memory, a decode step, a prefill, many chips.

It joins the book's models into one function. For B sequences with S cached tokens each,
served from `chips` chips with P parameters, A of them active per token:

    memory      param_bytes + copies · kv_bytes ≤ chips · HBM                    (chapter 5)
    decode      attention = max(attention FLOPs / C, copies · kv_bytes / W)
                weights   = max(2·B·A / C, weight bytes the step reads / W)
                step      = max(attention + weights, comm bandwidth) + comm latency
    prefill     max(forward FLOPs / C, weights read + cache written / W), same comm rule

with C and W the chips' FLOP/s and bandwidth together (chapters 2-4): each step a `StepCost`
handed to the library's one step-time formula, `step_cost.step_time`. The communication is
that of the library's 1D or 2D weight-stationary layout (`layout_comms`: chapters 8-10), its
bytes overlapping with the work and its latencies not (kipply's rule, chapter 4); chips spread
over hosts pay the data-centre network for what crosses between them (`dcn_comms`). A mixture of
experts reads the experts its batch touches, E·(1 − (1 − k/E)^B) per layer
(`params.expected_experts`), and the critical batch is where its FLOPs catch up with that
growing read. Latent attention runs decode in its absorbed form, attending over the latent
(2·R_kv + H_rope FLOPs per score and value per head), and, having no heads to split, keeps
every chip's copy of the whole latent cache (`copies` = chips).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from inferbook.model.config import ModelConfig
from inferbook.perf import counts, params, quant
from inferbook.perf.dcn_comms import HostsComms, layout_host_problem, priced_layout
from inferbook.perf.decode_attention_cost import decode_attention_flops
from inferbook.perf.decode_roofline import DecodeEstimate
from inferbook.perf.estimate_inputs import (
    check_setting,
    element_bytes,
    kv_format,
    weight_format,
)
from inferbook.perf.hardware import Chip
from inferbook.perf.layout_comms import LayoutComms, layout_candidates
from inferbook.perf.roofline import batches_that_fit, peak_flops_per_s
from inferbook.perf.step_cost import StepCost, Work, step_time

__all__ = ["Estimate", "estimate", "weight_bytes_read",
           "critical_batch_moe"]

@dataclass(frozen=True)
class Estimate(DecodeEstimate):
    """One row of `inferbook estimate`; book/estimate_reference.md defines every field.

    The fields of the sources' decode estimate (`decode_roofline.DecodeEstimate`: parameters, bytes,
    whether they fit, critical batch, step time, throughput), then what the command adds:
    the setting, formats, experts, communication and prefill.
    """

    model: str
    hardware: str
    chips: int
    layout: str | None
    layout_x: int
    layout_yz: int
    batch: int
    context: int
    prompt: int
    weights: str
    kv: str
    weight_bytes: float
    kv_bytes_per_element: float
    active_params: int
    experts_touched: float | None
    weight_bytes_read: float
    comm_time_s: float
    tokens_per_s_per_user: float
    tokens_per_s_per_chip: float
    prefill_time_s: float
    ttft_s: float
    warnings: tuple[str, ...] = ()
    chips_per_host: int | None = None      # None: every chip in one interconnect domain
    dcn_time_s: float = 0.0                # of comm_time_s, spent on the data-centre network

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        return out


def weight_bytes_read(cfg: ModelConfig, total_bytes: float, expert_bytes: float,
                      tokens: int) -> float:
    """Weight bytes a pass over `tokens` tokens reads: all of them, except that each MoE layer
    reads only the experts its tokens touch, `expected_experts` of E."""
    if cfg.moe is None:
        return total_bytes
    touched = params.expected_experts(cfg.moe.E, cfg.moe.k, tokens) / cfg.moe.E
    return total_bytes - expert_bytes + expert_bytes * touched


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
             compute: str = "bf16", strict: bool = False,
             chips_per_host: int | None = None) -> Estimate:
    """Estimate serving `cfg` on `chips` chips: one decode step of `batch` sequences holding
    `context` tokens each (default: the model's positions), and the prefill of `prompt`-token
    prompts (default: the context). `layout` None picks the faster layout that splits the
    model. `weights`/`kv` are storage formats (`quant`); `weight_bytes`/`kv_bytes` instead
    set plain bytes per parameter / per cached element, as the sources do. `chips_per_host`
    spreads the chips over hosts of that many (one interconnect domain each): collectives
    that leave a host are priced on the data-centre network too (`dcn_comms`).

    Raises `estimate_inputs.EstimateInputError` (a ValueError naming the input) on bad input,
    the same checks `inferbook estimate` makes, and on a context beyond the model's positions
    when `strict` (otherwise a warning in the result); ValueError on a figure that does not
    come out finite.
    """
    S, T, warnings = check_setting(cfg, chip, batch=batch, context=context, prompt=prompt,
                                   chips=chips, layout=layout, strict=strict,
                                   chips_per_host=chips_per_host)
    B, n = batch, chips
    fmt = weight_format(weights)
    P, A = params.param_count(cfg), params.active_param_count(cfg)
    if weight_bytes is None:
        pbytes, wlabel = quant.weight_bytes(cfg, fmt), fmt.label
        ebytes = quant.weight_bytes(cfg, fmt, ("expert",))
    else:
        wb = element_bytes("weight_bytes", weight_bytes)
        routed = sum(t.size for t in params.tensors(cfg) if t.role == "expert")
        pbytes, ebytes, wlabel = P * wb, routed * wb, f"{wb:g} bytes"
    e = (quant.kv_element_bytes(cfg, kv_format(kv)) if kv_bytes is None
         else element_bytes("kv_bytes", kv_bytes))
    klabel = kv if kv_bytes is None else f"{e:g} bytes"
    W, C = chip.hbm_bytes_per_s, peak_flops_per_s(chip, compute)
    copies = n if cfg.mla is not None else 1          # the latent has no heads to split
    kv_total = counts.kv_cache_bytes(cfg, B, S, e)
    hbm = n * chip.hbm_bytes
    per_seq = copies * counts.kv_cache_bytes(cfg, 1, S, e)

    # Decode: attention, then the weights the batch touches; then the layout's collectives.
    read = weight_bytes_read(cfg, pbytes, ebytes, B)
    decode = (Work("attention", decode_attention_flops(cfg, B, S), copies * kv_total),
              Work("weights", 2 * B * A, read))
    layouts = _layouts(cfg, chip, n, B, layout, chips_per_host)
    comm, step = min(((c, step_time(StepCost(decode, c.bandwidth_s, c.latency_s), chip, n,
                                    compute)) for c in layouts), key=lambda pair: pair[1])

    # Prefill: the forward pass over every prompt (attention's full T×T rectangle, as the
    # library's FLOP counter counts it), the weights its B·T tokens touch, the cache written.
    moved = (weight_bytes_read(cfg, pbytes, ebytes, B * T)
             + copies * counts.kv_cache_bytes(cfg, B, T, e))
    pre_comm = (comm if n == 1 else
                priced_layout(cfg, chip, n, B, T, comm.layout, comm.X,
                              chips_per_host=chips_per_host))
    prefill = step_time(StepCost((Work("forward pass", counts.forward_flops(
        cfg, B, T, T, logits_for=1), moved),), pre_comm.bandwidth_s, pre_comm.latency_s),
        chip, n, compute)

    total = pbytes + copies * kv_total
    if total > hbm:
        warnings.append(
            f"batch {B:,} at context {S:,} does not fit: weights + KV cache need "
            f"{_gb(total)}, {n} × {chip.name} hold "
            f"{_gb(hbm)}; the largest batch that fits is "
            f"{batches_that_fit(hbm - pbytes, per_seq):,}")
    out = Estimate(
        model=cfg.name, hardware=chip.name, chips=n, layout=comm.layout if n > 1 else None,
        layout_x=comm.X, layout_yz=comm.YZ, batch=B, context=S, prompt=T, weights=wlabel,
        kv=klabel, weight_bytes=pbytes / P, kv_bytes_per_element=e, params=P, active_params=A,
        param_bytes=pbytes, kv_bytes_per_token=counts.kv_bytes_per_token(cfg, e),
        kv_bytes=kv_total, total_bytes=total, hbm_bytes=hbm, fits=total <= hbm,
        max_batch=batches_that_fit(hbm - pbytes, per_seq),
        critical_batch=critical_batch_moe(cfg, pbytes, ebytes, 2 * A, C, W),
        experts_touched=(params.expected_experts(cfg.moe.E, cfg.moe.k, B)
                         if cfg.moe is not None else None),
        weight_bytes_read=read, comm_time_s=comm.bandwidth_s + comm.latency_s,
        step_time_lower_bound_s=(copies * kv_total + read) / (n * W), step_time_s=step,
        tokens_per_s=B / step, tokens_per_s_per_user=1 / step,
        tokens_per_s_per_chip=B / step / n, prefill_time_s=prefill, ttft_s=prefill,
        warnings=tuple(warnings), chips_per_host=chips_per_host,
        dcn_time_s=comm.dcn_s if isinstance(comm, HostsComms) else 0.0)
    for key, value in out.as_dict().items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{key} comes out {value} for these inputs: a figure of the "
                             "hardware or the bytes is out of range")
    return out


def _layouts(cfg: ModelConfig, chip: Chip, n: int, B: int, layout: str | None,
             chips_per_host: int | None = None) -> list[LayoutComms]:
    """The priced decode collectives of every layout (and 2D split) that can serve (and,
    over hosts, lines up with them)."""
    if n == 1:
        return [LayoutComms(layout or "1d-ws", 1, 1, 0.0, 0.0, 0.0, 0)]
    candidates, _ = layout_candidates(cfg, n, B, layout)     # never empty: check_setting
    if chips_per_host is not None:
        candidates = [(name, X) for name, X in candidates
                      if not layout_host_problem(name, n, chips_per_host, X)]
    return [priced_layout(cfg, chip, n, B, 1, name, X, chips_per_host=chips_per_host)
            for name, X in candidates]


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB ({nbytes / 2 ** 30:,.1f} GiB)"
