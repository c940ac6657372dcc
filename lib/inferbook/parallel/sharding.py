"""Sharding plans: which mesh axes split which of the model's dimensions.

A layout is a decision, for every array, about which dimension is split over which mesh axes.
The `Plan` records those decisions in the book's letters; `param_specs` turns them into one
`PartitionSpec` per weight (a pytree mirroring the params), `cache_spec` into one for the KV
cache. The computations that run on these blocks live beside this module:

  layout            weights                      activations between blocks   per block
  ----------------  ---------------------------  ---------------------------  -----------------
  "1d-ws"           W_in [D, F_M], W_Q [D, N_M]  [B, D] replicated            AllReduce_M
  "2d-ws"           W_in [D_X, F_YZ]             [B, D_XYZ]                   AllGather_YZ,
                                                                              AllReduce_X,
                                                                              ReduceScatter_YZ
  "weight-gathered" stored as 1d-ws, gathered    [B_XYZ, D]                   AllGather of W
  "expert-parallel" experts [E_Z, D_X, F_Y],     [B_XZ, D] (data-parallel     AllToAll_Z twice
                    the rest as 1d-ws over Y     attention over X and Z)      per MoE layer,
                                                                              AllReduce_Y

(M is the set of "model" axes; for 2d-ws the model axes are YZ, for expert-parallel Y.)
Mixtures of experts run on 1d-ws too, every expert split over F like a dense MLP (tensor
parallelism); expert-parallel gives each device whole experts instead (`expert_parallel`;
`layout_rules` says which models each layout runs). The KV cache is split over KV heads as
far as K allows, on the model axes whose sizes multiply to a divisor of K (`kv_heads`, Y in
the sources); the remaining model axes (`kv_batch`, Z) split it over the batch, which costs
the two AllToAlls of `kv_sharding`. In 2d-ws the X axes split the cache's batch too, so no
device holds a copy of another's cache; in expert-parallel the data axes split it first.
Optional `seq` axes split the prompt (sequence-parallel prefill) and the cache's positions
(sequence-sharded KV).

Every layout is checked against the single-device model in the tests.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from inferbook.model.config import ModelConfig
from inferbook.model.decoder import param_shapes
from inferbook.parallel.layout_rules import (
    LAYOUTS,
    LayoutError,
    LayoutRule,
    need,
    require_supported,
    split_widths,
)
from inferbook.parallel.mesh import axes_tuple, axis_size

__all__ = ["Plan", "LayoutError", "LayoutRule", "LAYOUTS", "make_plan", "param_specs",
           "cache_spec", "rows_spec", "logits_spec", "shard_params", "batch_block", "local_index"]


@dataclass(frozen=True)
class Plan:
    """Which mesh axes split what. Hashable, so jitted functions can take it as static."""

    mesh: Any
    layout: str
    kv_heads: tuple[str, ...] = ()    # Y: model axes that split the KV heads
    kv_batch: tuple[str, ...] = ()    # Z: model axes that split the KV cache over the batch
    x: tuple[str, ...] = ()           # X: axes that split D (2d-ws only)
    seq: tuple[str, ...] = ()         # axes that split the prompt and the cache's positions
    batch: tuple[str, ...] = ()       # axes that split the activations' batch (weight-gathered)
    experts: tuple[str, ...] = ()     # Z: axes that split the experts (expert-parallel)
    fsdp: tuple[str, ...] = ()        # X: axes that split stored experts over D (expert-parallel)
    capacity_factor: float | None = None   # expert-parallel slots per expert; None: dropless

    @property
    def model(self) -> tuple[str, ...]:
        """Axes that split heads and F. Heads first, so N_M blocks line up with K_Y blocks."""
        return self.kv_heads + self.kv_batch

    def size(self, axes: tuple[str, ...]) -> int:
        return axis_size(self.mesh, axes)

    @property
    def data(self) -> tuple[str, ...]:
        """Axes over which the whole model runs on different sequences (expert-parallel: X and
        Z split the batch before attention; data-parallel attention)."""
        return self.fsdp + self.experts

    @property
    def cache_batch(self) -> tuple[str, ...]:
        """Axes that split the KV cache (and attention) over the batch: Z, and in 2d-ws also X,
        whose devices would otherwise all hold and read the same cache; every axis when the
        activations' batch is split (weight-gathered); the data axes first (expert-parallel)."""
        return self.batch or self.data + self.x + self.kv_batch

    @property
    def cache_heads(self) -> tuple[str, ...]:
        """Axes that split the KV cache over its heads (Y); none when the batch is split."""
        return () if self.batch else self.kv_heads

    @property
    def width_axes(self) -> tuple[str, ...]:
        """Axes that split D of the activations between blocks: X and YZ in 2d-ws, else none."""
        return self.x + self.model if self.x else ()

    @property
    def m(self) -> int:
        return self.size(self.model)

    @property
    def devices(self) -> int:
        return math.prod(self.mesh.shape.values())

    def describe(self) -> str:
        parts = [f"{self.layout} on a {'x'.join(map(str, self.mesh.shape.values()))} mesh"]
        for label, axes in (("X", self.x), ("experts", self.experts), ("FSDP", self.fsdp),
                            ("heads/F", self.model), ("KV heads", self.kv_heads),
                            ("KV batch", self.kv_batch), ("sequence", self.seq),
                            ("batch", self.batch)):
            if axes:
                parts.append(f"{label} over {'·'.join(axes)} ({self.size(axes)})")
        return "; ".join(parts)


def _kv_split(cfg: ModelConfig, mesh: Any, model: tuple[str, ...]) -> tuple[tuple, tuple]:
    """Split the model axes into those that shard KV heads (largest product dividing K) and
    the rest, which shard the cache over the batch."""
    best: tuple[str, ...] = ()
    for r in range(len(model), 0, -1):
        for combo in itertools.combinations(model, r):
            n = axis_size(mesh, combo)
            if cfg.K % n == 0 and n > axis_size(mesh, best):
                best = combo
    return best, tuple(a for a in model if a not in best)


def make_plan(cfg: ModelConfig, mesh: Any, layout: str = "1d-ws", *,
              seq: str | tuple[str, ...] = (), x: str | tuple[str, ...] | None = None,
              experts: str | tuple[str, ...] | None = None,
              capacity_factor: float | None = None) -> Plan:
    """The plan for `layout` on `mesh`, or a LayoutError naming what does not divide (a
    ConfigError for a model with features the layouts do not run: latent attention, ...).

    1d-ws: every axis not in `seq` is a model axis. 2d-ws: `x` (default: the first mesh axis)
    splits D, the other axes are YZ. weight-gathered: every axis splits the batch; the weights
    are stored as in 1d-ws. expert-parallel: `experts` (default: every axis not in `x`) split
    the experts, `x` (default: none) splits their stored D (gathered before use), the other
    axes are Y, which splits heads and every F as 1d-ws does; `capacity_factor` sets the slots
    per expert (None: as many as tokens, so that nothing is dropped).
    """
    require_supported(cfg, layout, seq)
    names = tuple(mesh.axis_names)
    seq = axes_tuple(seq)
    need(layout in LAYOUTS, f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    rule = LAYOUTS[layout]
    need(set(seq) <= set(names), f"sequence axes {seq} are not axes of the mesh {names}")
    need(rule.takes_seq or not seq, f"{layout} does not take sequence axes")
    fsdp: tuple[str, ...] = ()
    if rule.splits_width:
        x = axes_tuple(x) if x is not None else names[:1]
        need(len(names) >= 2 or axis_size(mesh, names) == 1,
             f"{layout} needs a mesh with at least two axes (X and YZ), e.g. 2x4")
    elif rule.splits_experts:
        fsdp, x = axes_tuple(x), ()
        experts = axes_tuple(experts) if experts is not None else \
            tuple(a for a in names if a not in fsdp)
        need(set(fsdp + experts) <= set(names) and not set(fsdp) & set(experts),
             f"expert axes {experts} and X axes {fsdp} must be distinct axes of {names}")
    else:
        x = ()
    experts = experts if rule.splits_experts else ()
    model = tuple(a for a in names if a not in seq + x + fsdp + experts)
    m, X = axis_size(mesh, model), axis_size(mesh, x)
    shape = "x".join(str(s) for s in mesh.shape.values())
    what = f"{layout} on a {shape} mesh"
    need(cfg.N % m == 0, f"{what}: N={cfg.N} query heads do not split {m} ways")
    for name, width in split_widths(cfg).items():
        need(width % m == 0, f"{what}: {name}={width} does not split {m} ways")
    need(cfg.D % (m * X) == 0, f"{what}: D={cfg.D} does not split {m * X} ways")
    if rule.splits_experts:
        Z, Xf = axis_size(mesh, experts), axis_size(mesh, fsdp)
        need(cfg.moe.E % Z == 0, f"{what}: E={cfg.moe.E} experts do not split {Z} ways")
        need(cfg.D % Xf == 0, f"{what}: D={cfg.D} does not split {Xf} ways over X")
        need(capacity_factor is None or (isinstance(capacity_factor, (int, float))
                                         and not isinstance(capacity_factor, bool)
                                         and 0 < capacity_factor < float("inf")),
             f"capacity_factor must be a positive number or None, got {capacity_factor!r}")
    kv_heads, kv_batch = _kv_split(cfg, mesh, model)
    if seq:
        need(not kv_batch, f"{what}: sequence sharding needs K={cfg.K} KV heads to split "
                           f"{m} ways over the model axes")
    return Plan(mesh, layout, kv_heads, kv_batch, x=x, seq=seq,
                batch=names if rule.splits_batch else (), experts=experts, fsdp=fsdp,
                capacity_factor=capacity_factor if rule.splits_experts else None)


def param_specs(cfg: ModelConfig, plan: Plan) -> dict[str, Any]:
    """One PartitionSpec per weight, a pytree with the params' structure.

    Projections into heads or F split their columns over the model axes M (and, in 2d-ws,
    their rows over X); projections back to D the other way round; the embedding splits D over
    every axis that splits it anywhere. Norm gains follow the activations: replicated, or split
    over D in 2d-ws. Experts [E, D, F] split E over Z, D over X (expert-parallel) and F over M;
    routers are replicated.
    """
    M, Yk, X = plan.model or None, plan.kv_heads or None, plan.x or None
    XM = (plan.x + plan.model) or None
    E, Xe = plan.experts or None, plan.fsdp or None
    vec = P(plan.width_axes) if plan.width_axes else P()
    layer = {"attn_norm": vec, "mlp_norm": vec, "wq": P(X, M), "wk": P(X, Yk),
             "wv": P(X, Yk), "wo": P(M, X), "w_gate": P(X, M), "w_up": P(X, M),
             "w_in": P(X, M), "w_down": P(M, X), "w_out": P(M, X),
             "router": P(), "router_bias": P(), "shared_gate": P(), "we_gate": P(E, Xe, M),
             "we_up": P(E, Xe, M), "we_down": P(E, M, Xe), "ws_gate": P(None, M),
             "ws_up": P(None, M), "ws_down": P(M, None)}
    top = {"embed": P(None, XM), "unembed": P(XM, None), "final_norm": vec}
    shapes = param_shapes(cfg)
    specs = {k: top[k] for k in shapes if k != "layers"}
    specs["layers"] = [{k: layer[k] for k in s} for s in shapes["layers"]]
    return specs


def cache_spec(plan: Plan) -> Any:
    """The PartitionSpec of each layer's [B, K, S, H] keys (and values)."""
    return P(plan.cache_batch or None, plan.cache_heads or None, plan.seq or None, None)


def rows_spec(plan: Plan) -> Any:
    """The PartitionSpec of per-sequence inputs and outputs ([B], [B, T], [B, V]) of a
    sharded program: split over the batch axes, or whole on every device."""
    return P(plan.batch) if plan.batch else P()


def logits_spec(plan: Plan) -> Any:
    """The PartitionSpec of a program's logits [B, V]: split over the data axes where the
    model runs data-parallel (each device's sequences), else as `rows_spec`."""
    return P(plan.data) if plan.data else rows_spec(plan)


def shard_params(params: dict[str, Any], cfg: ModelConfig, plan: Plan) -> dict[str, Any]:
    """The weights placed on the mesh as the plan says (each device holds only its blocks).

    In a job of several processes each passes the same weights and keeps its devices'
    blocks; its own copies are placed from host memory there, because JAX's `device_put` of an array
    already on a process's only device makes a replicated array whose shards cannot be
    listed (`addressable_shards` raises).
    """
    specs = param_specs(cfg, plan)
    several = jax.process_count() > 1

    def place(w: Any, spec: Any) -> jax.Array:
        local = not isinstance(w, jax.Array) or w.is_fully_addressable
        return jax.device_put(np.asarray(w) if several and local else w,
                              NamedSharding(plan.mesh, spec))
    return jax.tree.map(place, params, specs)


# Helpers for shard_map bodies ---------------------------------------------------------------

def local_index(plan: Plan, axes: tuple[str, ...]) -> Any:
    """This device's index along `axes` (0 when there are none)."""
    return jax.lax.axis_index(axes) if axes else 0


def batch_block(plan: Plan, x: jax.Array, axes: tuple[str, ...], axis: int = 0) -> jax.Array:
    """This device's block of a dimension that every device holds in full (a local slice,
    no communication): how a replicated batch becomes a batch-sharded one."""
    n = plan.size(axes)
    if n == 1:
        return x
    size = x.shape[axis] // n
    return jax.lax.dynamic_slice_in_dim(x, local_index(plan, axes) * size, size, axis)
