"""Named device meshes, and the one `shard_map` every sharded layout goes through.

A mesh arranges devices in a grid with named axes: ``named_mesh((2, 4))`` is two rows of
four devices, axes "x" and "y". The book writes a sharded dimension with the axes it is split
over as a subscript — F_YZ is F split over Y·Z devices — and the code says the same thing with
a `PartitionSpec`: ``P(None, ("y", "z"))`` for a [D, F] matrix whose F is split over y and z.

Everything in `sharding`, `kv_sharding`, `sequence_parallel`, `weight_stationary` and
`weight_gathered` is a `shard_map` body: a function that sees *one device's block* of every
array and says explicitly, with `psum`, `all_gather`, `psum_scatter`, `all_to_all` and
`ppermute`, where data crosses devices. Nothing is left for the compiler to guess, so the
collectives in the compiled program are exactly the ones written in the body
(`inferbook.perf.hlo` reads them back).

JAX made `shard_map` public as `jax.shard_map` in 0.7 with the same keyword arguments that
0.10 still has (`mesh`, `in_specs`, `out_specs`, `check_vma`; the older experimental version
called the last one `check_rep`). `shard_map` below is the single place that knows this.

This module loads JAX only inside its functions: the command line parses `--mesh` with
`parse_mesh_shape` before JAX starts (the device count must be set first).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

from inferbook.parallel.devices import DeviceSetupError, make_mesh

__all__ = ["AXIS_NAMES", "parse_mesh_shape", "named_mesh", "shard_map", "axis_size",
           "axes_tuple", "MeshError"]

AXIS_NAMES = ("x", "y", "z", "w")


class MeshError(ValueError):
    """A mesh that cannot be built (bad shape text, or more devices than exist)."""


def parse_mesh_shape(text: str) -> tuple[int, ...]:
    """'8' -> (8,), '2x4' -> (2, 4), '2x2x2' -> (2, 2, 2)."""
    if not re.fullmatch(r"\s*[1-9]\d*(\s*[x×]\s*[1-9]\d*)*\s*", text or ""):
        raise MeshError(f"mesh shape {text!r} is not of the form 8, 2x4 or 2x2x2")
    shape = tuple(int(p) for p in re.split(r"[x×]", text.replace(" ", "")))
    if len(shape) > len(AXIS_NAMES):
        raise MeshError(f"mesh shape {text!r} has more than {len(AXIS_NAMES)} axes")
    return shape


def named_mesh(shape: Sequence[int] | str, names: Sequence[str] | None = None,
               devices: Sequence[Any] | None = None) -> Any:
    """A mesh of the given shape with axes named x, y, z (or `names`).

    Uses the accelerators when there are enough, else the emulated CPU devices that
    `inferbook.setup()` provides; asking for more devices than exist raises MeshError.
    """
    if isinstance(shape, str):
        shape = parse_mesh_shape(shape)
    shape = tuple(int(s) for s in shape)
    names = tuple(names) if names is not None else AXIS_NAMES[:len(shape)]
    if len(names) != len(shape):
        raise MeshError(f"mesh shape {shape} needs {len(shape)} axis names, got {names}")
    try:
        return make_mesh(shape, names, devices=devices)
    except DeviceSetupError:
        import jax  # started already by make_mesh; imported lazily like all of JAX here
        have = max(len(jax.devices()), len(jax.devices("cpu")))
        raise MeshError(f"a {'x'.join(map(str, shape))} mesh needs {math.prod(shape)} devices "
                        f"but only {have} exist") from None


def axes_tuple(axes: str | Sequence[str] | None) -> tuple[str, ...]:
    """Normalise an axis spec: None -> (), 'x' -> ('x',), ('x', 'y') stays."""
    if axes is None:
        return ()
    if isinstance(axes, str):
        return (axes,)
    return tuple(axes)


def axis_size(mesh: Any, axes: str | Sequence[str] | None) -> int:
    """Number of devices along `axes` (1 for no axes)."""
    return math.prod(mesh.shape[a] for a in axes_tuple(axes))


def shard_map(f: Callable, mesh: Any, in_specs: Any, out_specs: Any, *,
              check_vma: bool = False) -> Callable:
    """`jax.shard_map(f, mesh=..., in_specs=..., out_specs=...)` on every supported JAX.

    The replication check (`check_vma`) is off by default: the bodies here slice the batch by
    `axis_index` and gather it back by hand, which the checker cannot follow; the tests
    compare every layout with the unsharded model instead.
    """
    import jax
    if hasattr(jax, "shard_map"):                       # jax >= 0.7
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                             check_vma=check_vma)
    from jax.experimental.shard_map import shard_map as _old  # pragma: no cover
    return _old(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=check_vma)
