"""What each sharded layout decides, and which models it can run: the table `LAYOUTS`.

`sharding.make_plan` reads a layout's `LayoutRule` to decide which mesh axes split what, and
`layout_steps.STEPS` holds what the layout then computes; a new layout is one entry in each.
This module also says which models the layouts run. They are written for the plain decoder
(RMSNorm, rotary positions, a gated or plain MLP, grouped-query attention), and two of them
for its mixture-of-experts variant too: 1d-ws splits every expert's F like a dense MLP's
(tensor parallelism), expert-parallel gives each device whole experts and sends the tokens to
them (`expert_parallel`). Everything else (latent attention, biases, soft-capping, ...) is
refused with a message that names it, rather than computed wrongly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.decoder import require_plain_decoder

__all__ = ["LayoutError", "LayoutRule", "LAYOUTS", "need", "require_supported", "split_widths"]


class LayoutError(ValueError):
    """The model (or batch) cannot take this layout on this mesh; the message says why."""


def need(cond: bool, message: str) -> None:
    """Raise LayoutError(message) unless `cond`."""
    if not cond:
        raise LayoutError(message)


@dataclass(frozen=True)
class LayoutRule:
    """What a layout decides about the mesh's axes, as data (`make_plan` reads it).

    Everything downstream — weight and cache specs, the batch multiple, which program runs
    (`layout_steps.STEPS`) — follows from the `Plan` these rules build, so a new layout is
    one entry here and one in `layout_steps.STEPS`.
    """

    summary: str
    splits_width: bool = False    # the first mesh axis (or `x`) splits D: X in 2d-ws
    takes_seq: bool = True        # may split the prompt and the cache's positions
    splits_batch: bool = False    # every axis splits the activations' batch
    splits_experts: bool = False  # `experts` axes split the experts, `x` their stored D
    runs_experts: bool = False    # runs mixtures of experts


LAYOUTS: dict[str, LayoutRule] = {
    "1d-ws": LayoutRule("weights split over heads and F (every expert's too); activations "
                        "replicated", runs_experts=True),
    "2d-ws": LayoutRule("weights split over D (X) and heads/F (YZ); activations over D",
                        splits_width=True, takes_seq=False),
    "weight-gathered": LayoutRule("weights stored as 1d-ws and gathered before use; the batch "
                                  "split over every device", takes_seq=False,
                                  splits_batch=True),
    "expert-parallel": LayoutRule("experts split over Z, tokens sent to them (AllToAll); "
                                  "the rest 1d-ws over Y, data-parallel over X and Z",
                                  takes_seq=False, splits_experts=True, runs_experts=True),
}


def require_supported(cfg: ModelConfig, layout: str, seq: Any = ()) -> None:
    """ConfigError unless `layout` can run `cfg`: a plain decoder, or one whose MLPs are
    mixtures of experts on a layout that runs them (1d-ws without sequence axes, or
    expert-parallel, which needs experts to split)."""
    require_plain_decoder(cfg.replace(moe=None), "the sharded layouts")
    rule = LAYOUTS.get(layout)
    if rule is None:                     # make_plan names the known layouts
        return
    if cfg.moe is None:
        if rule.splits_experts:
            raise ConfigError(f"{layout}: {cfg.name} has no mixture of experts to split")
        return
    if not rule.runs_experts or seq:
        runs = [name for name, r in LAYOUTS.items() if r.runs_experts]
        raise ConfigError(f"{layout}{' with sequence axes' if seq else ''} does not run "
                          f"mixtures of experts; {' and '.join(runs)} do")


def split_widths(cfg: ModelConfig) -> dict[str, int]:
    """The hidden widths the model axes split: F where a layer is dense, and each expert's
    (routed and shared)."""
    widths = {} if cfg.moe is not None and not cfg.moe.dense_layers else {"F": cfg.F}
    if cfg.moe is not None:
        widths["expert F"] = cfg.moe.F
        if cfg.moe.shared_F:
            widths["shared-expert F"] = cfg.moe.shared_F
    return widths
