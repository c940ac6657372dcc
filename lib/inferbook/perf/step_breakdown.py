"""Where a decode step's time goes: `inferbook estimate --breakdown`.

A step is not the sum of its components: within each part the arithmetic and the memory
traffic overlap (the roofline's max), and the collectives' bytes overlap with both. So the
breakdown gives what each component would take *alone*, at the rate the estimate's
efficiency achieves, beside the step it joins into:

    weights_s          weight bytes the step reads / (n · mbu · W)    (weight-only formats
                                                                     at their own rate)
    kv_cache_s         cache bytes the step reads / (n · mbu · W)
    attention_s        attention's FLOPs (scores, values and the Q, K, V, O projections)
                       / (n · mfu · C)
    mlp_s              the MLP's FLOPs (dense MLPs, routed and shared experts, routers)
                       / (n · mfu · C), and a mixture's routed rows (dispatch and combine,
                       `estimate_steps.routed_row_bytes`) / (n · mbu · W)
    logits_s           the unembedding's FLOPs / (n · mfu · C)
    communication_s    the collectives: bandwidth time / link + latencies
      dcn_s            of them, the data-centre network's share when the chips span hosts
                       (`dcn_comms`; not a component of its own, so not in BREAKDOWN_PARTS)
    overhead_s         the fixed cost per layer of a decode step
    step_s             the step: max(Σ parts' rooflines, comm bandwidth) + comm latency
                       + overhead

A step whose weights_s is close to step_s is memory-bound on its weights; a large mlp_s
means the batch has passed the critical batch; communication_s near step_s means the chips
wait for each other.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf import params
from inferbook.perf.efficiency import Efficiency
from inferbook.perf.estimate_steps import ROUTED_ROWS, matmul_flops_by_block
from inferbook.perf.hardware import Chip
from inferbook.perf.roofline import peak_flops_per_s
from inferbook.perf.step_cost import StepCost

__all__ = ["StepBreakdown", "breakdown", "BREAKDOWN_PARTS"]

BREAKDOWN_PARTS = ("weights_s", "kv_cache_s", "attention_s", "mlp_s", "logits_s",
                   "communication_s", "overhead_s")


@dataclass(frozen=True)
class StepBreakdown:
    """Each component of a decode step alone, in seconds (see the module's docstring)."""

    weights_s: float
    kv_cache_s: float
    attention_s: float
    mlp_s: float
    logits_s: float
    communication_s: float
    overhead_s: float
    step_s: float
    dcn_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def breakdown(cfg: ModelConfig, decode: StepCost, chip: Chip, chips: int, compute: str,
              efficiency: Efficiency, batch: int, step_s: float,
              dcn_s: float = 0.0) -> StepBreakdown:
    """The components of `decode`, a decode step of the estimator (`estimate_steps`: an
    'attention' part, then a 'weights' part) priced on `chips` chips under `efficiency`;
    `dcn_s` is the share of its collectives' time spent between hosts, priced alike."""
    attention, *parts = decode.parts
    weights = [w for w in parts if w.name != ROUTED_ROWS]
    routed_rows = sum(w.bytes for w in parts if w.name == ROUTED_ROWS)
    W = chips * chip.hbm_bytes_per_s
    C = chips * peak_flops_per_s(chip, compute) * efficiency.mfu(compute)
    blocks = matmul_flops_by_block(cfg, batch)
    # The weight parts hold every matmul's FLOPs (one chip's share of them, in an uneven
    # layout): the routed experts' are the MLP's, the rest split in the blocks' proportions.
    e = efficiency
    dense = [w for w in weights if not w.grouped]
    experts = [w for w in weights if w.grouped]
    expert_flops = sum(w.flops for w in experts)
    rest = sum(blocks.values()) - _expert_block(cfg, batch)
    scale = sum(w.flops for w in dense) / rest if rest else 0.0
    mlp_dense = blocks["mlp"] - _expert_block(cfg, batch)
    return StepBreakdown(
        weights_s=sum(w.bytes / (W * e.bandwidth(w.dequantized)) for w in weights),
        kv_cache_s=attention.bytes / (W * e.mbu_cache),
        attention_s=(attention.flops + scale * blocks["attention"]) / C,
        mlp_s=(scale * mlp_dense / C + expert_flops / (C * e.experts_mfu)
               + routed_rows / (W * e.bandwidth())),
        logits_s=scale * blocks["logits"] / C,
        communication_s=(decode.comm_bandwidth_s / e.link
                         + decode.comm_latency_s
                         + decode.passes * e.pass_overhead_s),
        overhead_s=e.fixed_s(decode.phase, decode.layers, decode.moe_layers),
        step_s=step_s, dcn_s=dcn_s)


def _expert_block(cfg: ModelConfig, tokens: float) -> float:
    """The routed experts' share of `matmul_flops_by_block(cfg, tokens)['mlp']`."""
    if cfg.moe is None:
        return 0.0
    return 2.0 * tokens * sum(t.size for t in params.tensors(cfg)
                              if t.role == "expert") * cfg.moe.k / cfg.moe.E
