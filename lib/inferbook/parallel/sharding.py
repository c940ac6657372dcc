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

(M is the set of "model" axes; for 2d-ws the model axes are YZ.) The KV cache is split over
KV heads as far as K allows, on the model axes whose sizes multiply to a divisor of K
(`kv_heads`, Y in the sources); the remaining model axes (`kv_batch`, Z) split it over the
batch, which costs the two AllToAlls of `kv_sharding`. In 2d-ws the X axes split the cache's
batch too, so no device holds a copy of another's cache. Optional `seq` axes split the prompt
(sequence-parallel prefill) and the cache's positions (sequence-sharded KV).

Every layout is checked against the single-device model in the tests.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from inferbook.model.config import ModelConfig
from inferbook.model.decoder import param_shapes, require_plain_decoder
from inferbook.parallel.mesh import axes_tuple, axis_size

__all__ = ["Plan", "LayoutError", "LayoutRule", "LAYOUTS", "make_plan", "param_specs",
           "cache_spec", "rows_spec", "shard_params", "batch_block", "local_index"]


class LayoutError(ValueError):
    """The model (or batch) cannot take this layout on this mesh; the message says why."""


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

    @property
    def model(self) -> tuple[str, ...]:
        """Axes that split heads and F. Heads first, so N_M blocks line up with K_Y blocks."""
        return self.kv_heads + self.kv_batch

    def size(self, axes: tuple[str, ...]) -> int:
        return axis_size(self.mesh, axes)

    @property
    def cache_batch(self) -> tuple[str, ...]:
        """Axes that split the KV cache (and attention) over the batch: Z, and in 2d-ws also X,
        whose devices would otherwise all hold and read the same cache; every axis when the
        activations' batch is split (weight-gathered)."""
        return self.batch or self.x + self.kv_batch

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
        for label, axes in (("X", self.x), ("heads/F", self.model), ("KV heads", self.kv_heads),
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


def _need(cond: bool, message: str) -> None:
    if not cond:
        raise LayoutError(message)


@dataclass(frozen=True)
class LayoutRule:
    """What a layout decides about the mesh's axes, as data (`make_plan` reads it).

    Everything downstream — weight and cache specs, the batch multiple, which program runs
    (`sharded_decode.STEPS`) — follows from the `Plan` these rules build, so a new layout is
    one entry here and one in `sharded_decode.STEPS`.
    """

    summary: str
    splits_width: bool = False   # the first mesh axis (or `x`) splits D: X in 2d-ws
    takes_seq: bool = True       # may split the prompt and the cache's positions
    splits_batch: bool = False   # every axis splits the activations' batch


LAYOUTS: dict[str, LayoutRule] = {
    "1d-ws": LayoutRule("weights split over heads and F; activations replicated"),
    "2d-ws": LayoutRule("weights split over D (X) and heads/F (YZ); activations over D",
                        splits_width=True, takes_seq=False),
    "weight-gathered": LayoutRule("weights stored as 1d-ws and gathered before use; the batch "
                                  "split over every device", takes_seq=False,
                                  splits_batch=True),
}


def make_plan(cfg: ModelConfig, mesh: Any, layout: str = "1d-ws", *,
              seq: str | tuple[str, ...] = (), x: str | tuple[str, ...] | None = None) -> Plan:
    """The plan for `layout` on `mesh`, or a LayoutError naming what does not divide (a
    ConfigError for a model that is not a plain decoder: MoE, latent attention, ...).

    1d-ws: every axis not in `seq` is a model axis. 2d-ws: `x` (default: the first mesh axis)
    splits D, the other axes are YZ. weight-gathered: every axis splits the batch; the weights
    are stored as in 1d-ws.
    """

    require_plain_decoder(cfg, "the sharded layouts")
    names = tuple(mesh.axis_names)
    seq = axes_tuple(seq)
    _need(layout in LAYOUTS, f"unknown layout {layout!r}; known: {', '.join(LAYOUTS)}")
    rule = LAYOUTS[layout]
    _need(set(seq) <= set(names), f"sequence axes {seq} are not axes of the mesh {names}")
    _need(rule.takes_seq or not seq, f"{layout} does not take sequence axes")
    if rule.splits_width:
        x = axes_tuple(x) if x is not None else names[:1]
        _need(len(names) >= 2 or axis_size(mesh, names) == 1,
              f"{layout} needs a mesh with at least two axes (X and YZ), e.g. 2x4")
    else:
        x = ()
    model = tuple(a for a in names if a not in seq and a not in x)
    m, X = axis_size(mesh, model), axis_size(mesh, x)
    shape = "x".join(str(s) for s in mesh.shape.values())
    what = f"{layout} on a {shape} mesh"
    _need(cfg.N % m == 0, f"{what}: N={cfg.N} query heads do not split {m} ways")
    _need(cfg.F % m == 0, f"{what}: F={cfg.F} does not split {m} ways")
    _need(cfg.D % (m * X) == 0, f"{what}: D={cfg.D} does not split {m * X} ways")
    kv_heads, kv_batch = _kv_split(cfg, mesh, model)
    if seq:
        _need(not kv_batch, f"{what}: sequence sharding needs K={cfg.K} KV heads to split "
                            f"{m} ways over the model axes")
    return Plan(mesh, layout, kv_heads, kv_batch, x=x, seq=seq,
                batch=names if rule.splits_batch else ())


def param_specs(cfg: ModelConfig, plan: Plan) -> dict[str, Any]:
    """One PartitionSpec per weight, a pytree with the params' structure.

    Projections into heads or F split their columns over the model axes M (and, in 2d-ws,
    their rows over X); projections back to D the other way round; the embedding splits D over
    every axis that splits it anywhere. Norm gains follow the activations: replicated, or split
    over D in 2d-ws.
    """
    M, Yk, X = plan.model or None, plan.kv_heads or None, plan.x or None
    XM = (plan.x + plan.model) or None
    vec = P(plan.width_axes) if plan.width_axes else P()
    layer = {"attn_norm": vec, "mlp_norm": vec, "wq": P(X, M), "wk": P(X, Yk),
             "wv": P(X, Yk), "wo": P(M, X), "w_gate": P(X, M), "w_up": P(X, M),
             "w_in": P(X, M), "w_down": P(M, X), "w_out": P(M, X)}
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


def shard_params(params: dict[str, Any], cfg: ModelConfig, plan: Plan) -> dict[str, Any]:
    """The weights placed on the mesh as the plan says (each device holds only its blocks)."""
    specs = param_specs(cfg, plan)
    return jax.tree.map(lambda w, s: jax.device_put(w, NamedSharding(plan.mesh, s)),
                        params, specs)


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
