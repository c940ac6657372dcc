"""What an estimate settles before it prices anything: the setting, the formats, the layout.

`estimator.estimate` answers in two steps. First this module turns its inputs — checked by
`estimate_inputs`, the same checks `inferbook estimate` makes — into an `EstimatePlan`: the
context and prompt, the weights as the steps read them (`estimate_steps.ModelBytes`), the
bytes per cached number, the format the matmuls run in, the efficiency, and the layout: of
every layout that can split the model over the chips (1D and 2D weight-stationary, expert
parallelism for a mixture of experts, `layout_comms.layout_candidates`), the one whose decode
step is fastest under that efficiency — with the chips spread over hosts (`chips_per_host`),
of the layouts that line up with the hosts, their collectives priced on both tiers
(`dcn_comms.priced_layout`). Then the plan builds each step's `StepCost`
(`estimate_decode_cost`, `prefill_cost`), which the estimator prices with the library's one
step time (`step_cost.step_time`). `published_baseline` and `efficiency_fit` use plans
directly: a calibration prices the same steps under many efficiencies without settling the
layout again.
"""

from __future__ import annotations

from dataclasses import dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf import counts, params, quant
from inferbook.perf import estimate_inputs as inputs
from inferbook.perf.dcn_comms import layout_host_problem, priced_layout
from inferbook.perf.efficiency import Efficiency
from inferbook.perf.estimate_steps import ChipShare, ModelBytes, estimate_decode_cost, prefill_cost
from inferbook.perf.hardware import Chip
from inferbook.perf.layout_comms import LayoutComms, layout_candidates
from inferbook.perf.step_cost import StepCost, step_time

__all__ = ["EstimatePlan", "plan_estimate"]


@dataclass(frozen=True)
class EstimatePlan:
    """A checked setting, its formats and its layout: everything but the prices."""

    cfg: ModelConfig
    chip: Chip
    batch: int
    context: int
    prompt: int
    chips: int
    compute: str
    efficiency: Efficiency
    prefill_overlap: bool | None     # None: as the efficiency pricing the prefill says
    weights: ModelBytes
    weights_label: str
    kv_element_bytes: float
    kv_label: str
    share: ChipShare                 # the decode step's layout
    prefill_share: ChipShare         # the same layout, its collectives priced for the prompt
    output: int | None
    warnings: tuple[str, ...]
    chips_per_host: int | None = None    # None: every chip in one interconnect domain

    def decode_cost(self, context: int | None = None) -> StepCost:
        """The decode step with `context` tokens cached per sequence (default the plan's)."""
        return estimate_decode_cost(self.cfg, self.weights, self.share, self.batch,
                                self.context if context is None else context,
                                self.kv_element_bytes)

    def prefill_cost(self) -> StepCost:
        return prefill_cost(self.cfg, self.weights, self.prefill_share, self.batch,
                            self.prompt, self.kv_element_bytes, self.prefill_overlap)

    @property
    def weights_held(self) -> float:
        """Weight bytes the chips hold together: every weight once, and everything but the
        routed experts once more for each further copy the layout keeps."""
        mb = self.weights
        return mb.total + (self.share.weight_copies - 1) * (mb.total - mb.experts)

    def cache_bytes_per_sequence(self) -> float:
        """Cache bytes one sequence of the plan's context takes, over all its copies."""
        return self.share.cache_copies * counts.kv_cache_bytes(self.cfg, 1, self.context,
                                                               self.kv_element_bytes)

    @property
    def held_bytes(self) -> float:
        """What the chips hold together: the weights and every copy of the batch's caches."""
        return self.weights_held + self.share.cache_copies * counts.kv_cache_bytes(
            self.cfg, self.batch, self.context, self.kv_element_bytes)

    @property
    def fits(self) -> bool:
        """Whether the weights and the batch's caches fit in the chips' memory."""
        return self.held_bytes <= self.chips * self.chip.hbm_bytes


def plan_estimate(cfg: ModelConfig, chip: Chip, *, batch: int = 1, context: int | None = None,
                  prompt: int | None = None, chips: int = 1, layout: str | None = None,
                  weights: str | quant.WeightFormat = "bf16", kv: str = "bf16",
                  weight_bytes: float | None = None, kv_bytes: float | None = None,
                  compute: str = "bf16", efficiency: Efficiency | str = "calibrated",
                  mbu: float | None = None, mfu: float | None = None,
                  prefill_overlap: bool | None = None, output: int | None = None,
                  strict: bool = False, chips_per_host: int | None = None) -> EstimatePlan:
    """The plan of `estimator.estimate` with these arguments (it documents them)."""
    S, T, warnings = inputs.check_setting(cfg, chip, batch=batch, context=context,
                                          prompt=prompt, chips=chips, layout=layout,
                                          output=output, strict=strict,
                                          chips_per_host=chips_per_host)
    compute = inputs.compute_format(compute, chip)
    eff = inputs.efficiency_of(efficiency, chip, mbu=mbu, mfu=mfu)
    overlap = None if prefill_overlap is None else bool(prefill_overlap)
    mb, wlabel, e, klabel = _formats(cfg, weights, kv, weight_bytes, kv_bytes, compute)

    def decode_s(share: ChipShare) -> float:
        cost = estimate_decode_cost(cfg, mb, share, batch, S, e)
        return step_time(cost, chip, share.chips, compute, eff)

    hosts = chips_per_host
    share = min(_shares(cfg, chip, chips, batch, 1, layout, hosts=hosts), key=decode_s)
    pre = share if chips == 1 else _shares(cfg, chip, chips, batch, T, share.comms.layout,
                                           share.split, hosts)[0]
    return EstimatePlan(cfg, chip, batch, S, T, chips, compute, eff, overlap, mb, wlabel, e,
                        klabel, share, pre, output, tuple(warnings), chips_per_host)


def _formats(cfg: ModelConfig, weights: str | quant.WeightFormat, kv: str,
             weight_bytes: float | None, kv_bytes: float | None,
             compute: str) -> tuple[ModelBytes, str, float, str]:
    """The weights as the steps read them and their label; bytes per cached number and
    their label."""
    fmt = inputs.weight_format(weights)
    if weight_bytes is None:
        dequantized = fmt.name if fmt.name not in ("bf16", compute) else None
        mb = ModelBytes.of(cfg, quant.weight_bytes(cfg, fmt),
                           quant.weight_bytes(cfg, fmt, ("expert",)), 2.0, dequantized)
        wlabel = fmt.label
    else:
        wb = inputs.element_bytes("weight_bytes", weight_bytes)
        routed = sum(t.size for t in params.tensors(cfg) if t.role == "expert")
        mb = ModelBytes.of(cfg, params.param_count(cfg) * wb, routed * wb, wb)
        wlabel = f"{wb:g} bytes"
    e = (quant.kv_element_bytes(cfg, inputs.kv_format(kv)) if kv_bytes is None
         else inputs.element_bytes("kv_bytes", kv_bytes))
    return mb, wlabel, e, kv if kv_bytes is None else f"{e:g} bytes"


def _shares(cfg: ModelConfig, chip: Chip, n: int, B: int, tokens: int,
            layout: str | None, split: int | None = None,
            hosts: int | None = None) -> list[ChipShare]:
    """How every layout (and split) that can serve shares a pass of `tokens` tokens per
    sequence, its collectives priced; only `layout` with `split` when both are given; over
    hosts of `hosts` chips, only the layouts that line up with them."""
    if n == 1:
        return [ChipShare(LayoutComms(layout or "1d-ws", 1, 1, 0.0, 0.0, 0.0, 0), 1)]
    copies = n if cfg.mla is not None else 1            # the latent has no heads to split
    candidates, _ = layout_candidates(cfg, n, B, layout)     # never empty: check_setting
    out = []
    for name, x in candidates:
        if (split is not None and x != split) or (
                hosts is not None and layout_host_problem(name, n, hosts, x)):
            continue
        comms = priced_layout(cfg, chip, n, B, tokens, name, x, chips_per_host=hosts)
        if name == "expert-parallel":                   # x is Y; experts over Z = n / Y
            out.append(ChipShare(comms, 1, n // x, x if cfg.mla is not None else 1, n // x, x))
        else:
            out.append(ChipShare(comms, n, 1, copies, 1, x))
    return out
