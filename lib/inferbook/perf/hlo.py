"""What a compiled program really does: its collectives and its FLOPs, read from XLA.

A sharded layout is a claim about communication ("one AllReduce of B·D per block"); the
compiled program is the ground truth. `collectives(compiled)` parses the optimized HLO text
(`compiled.as_text()`) and returns every collective with its kind, the bytes it works on
and the groups of devices that take part; `flops(compiled)` is XLA's own count of the
floating-point operations one device performs (`compiled.cost_analysis()`: under SPMD the
program *is* one device's program).

**Bytes** of a collective are the size of the whole array it works on, per device, the
quantity the sources' cost formulas use (time ≈ bytes / bandwidth):

  all-reduce          the array being summed (input = output)
  all-gather          the gathered output
  reduce-scatter      the input, before scattering (output × group size)
  all-to-all          the array being exchanged (input = output)
  collective-permute  the array each device sends

`wire_bytes` is what one device actually sends with the bandwidth-optimal ring algorithms:
(n - 1)/n of the array for AllGather, ReduceScatter and AllToAll, twice that for AllReduce
(a ReduceScatter and an AllGather), all of it for a permute. Collectives whose groups hold a
single device move nothing and are left out unless asked for.

Collectives inside loops (while bodies) are listed once; the library's programs unroll their
layers, so for them the list is the whole step. On GPU and TPU, asynchronous pairs
(`all-gather-start` / `-done`) are read from their `-start` half.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import jax
import numpy as np

from inferbook.perf.collectives import wire_bytes
from inferbook.perf.compiled import array_bytes, hlo_arrays

__all__ = ["Collective", "collectives", "kind_totals", "bytes_by_kind", "bytes_by_scope",
           "group_axes", "flops", "compile_fn", "hlo_text", "KINDS", "format_table"]

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

_OP = re.compile(r"\s(" + "|".join(KINDS) + r")(-start)?\(")


@dataclass(frozen=True)
class Collective:
    """One collective of a compiled program."""

    kind: str                               # one of KINDS
    name: str                               # the HLO instruction's name
    dtype: str
    shapes: tuple[tuple[int, ...], ...]     # the result arrays (several when combined)
    bytes: int                              # see the module docstring
    groups: tuple[tuple[int, ...], ...]     # device ids per group (pairs for permutes)
    op_name: str = ""                       # the JAX operation it came from, if recorded

    @property
    def scope(self) -> str:
        """The label the layout gave this collective (`jax.named_scope`), e.g. "mlp_out"."""
        parts = self.op_name.split("/")
        return parts[-2] if len(parts) >= 2 and parts[-2] != "shard_map" else ""

    @property
    def group_size(self) -> int:
        return len(self.groups[0]) if self.groups else 1

    @property
    def wire_bytes(self) -> float:
        """Bytes one device sends with ring algorithms (see the module docstring)."""
        return wire_bytes(self.kind, self.bytes, self.group_size)


def hlo_text(compiled: Any) -> str:
    """The optimized HLO text of a compiled program (or the text itself)."""
    return compiled if isinstance(compiled, str) else compiled.as_text()


def compile_fn(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Compile `fn` (jitted or not) for these arguments without running it.

    Arguments may be arrays or `jax.ShapeDtypeStruct`s (with a sharding), so programs for
    models that would not fit in memory can be inspected too.
    """
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return jitted.lower(*args, **kwargs).compile()


def _iota_groups(spec: str) -> list[list[int]]:
    """XLA's compact form: [G,S]<=[d0,d1,...]T(perm) = iota reshaped, transposed, regrouped."""
    m = re.fullmatch(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", spec)
    if m is None:
        raise ValueError(f"cannot parse replica groups {spec!r}")
    out_shape = [int(v) for v in m.group(1).split(",")]
    dims = [int(v) for v in m.group(2).split(",")]
    ids = np.arange(int(np.prod(dims))).reshape(dims)
    if m.group(3):
        ids = ids.transpose([int(v) for v in m.group(3).split(",")])
    return ids.reshape(out_shape[0], -1).tolist()


def _groups(line: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    m = re.search(r"source_target_pairs=\{((?:\{[\d,]+\},?)*)\}", line)
    if m:
        return tuple(tuple(int(v) for v in p.split(","))
                     for p in re.findall(r"\{([\d,]+)\}", m.group(1)))
    m = re.search(r"replica_groups=(\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?)", line)
    if m:
        return tuple(tuple(g) for g in _iota_groups(m.group(1)))
    m = re.search(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}", line)
    if m and m.group(1):
        return tuple(tuple(int(v) for v in g.split(",")) for g in re.findall(r"\{([\d,]+)\}",
                                                                              m.group(1)))
    return (tuple(range(num_devices)),)          # {} means every device


def collectives(compiled: Any, include_trivial: bool = False) -> list[Collective]:
    """Every collective in a compiled program, in the order of the HLO text."""
    text = hlo_text(compiled)
    m = re.search(r"num_partitions=(\d+)", text)
    num_devices = int(m.group(1)) if m else 1
    found = []
    for line in text.splitlines():
        op = _OP.search(line)
        if op is None or "=" not in line[:op.start()]:
            continue
        lhs, type_text = line[:op.start()].split("=", 1)
        name = lhs.replace("ROOT", "").strip().lstrip("%")
        arrays = hlo_arrays(type_text)
        kind, is_start = op.group(1), bool(op.group(2))
        if is_start and kind == "all-gather" and len(arrays) >= 2:
            arrays = arrays[len(arrays) // 2:]          # (inputs..., outputs...)
        elif is_start and kind == "collective-permute":
            arrays = arrays[:1]                         # (input, output, contexts...)
        groups = _groups(line, num_devices)
        size = sum(array_bytes(dt, s) for dt, s in arrays)
        if kind == "reduce-scatter":
            size *= len(groups[0])
        meta = re.search(r'op_name="([^"]*)"', line)
        c = Collective(kind, name, arrays[0][0] if arrays else "?",
                       tuple(s for _, s in arrays), int(size), groups,
                       meta.group(1) if meta else "")
        if include_trivial or c.group_size > 1:
            found.append(c)
    return found


def kind_totals(colls: Iterable[Collective]) -> dict[str, dict[str, float]]:
    """Per kind: how many, total bytes, total wire bytes."""
    out: dict[str, dict[str, float]] = defaultdict(lambda: {"count": 0, "bytes": 0,
                                                            "wire_bytes": 0.0})
    for c in colls:
        out[c.kind]["count"] += 1
        out[c.kind]["bytes"] += c.bytes
        out[c.kind]["wire_bytes"] += c.wire_bytes
    return dict(out)


def bytes_by_kind(colls: Iterable[Collective]) -> dict[str, int]:
    """Total bytes per kind of collective (kinds that do not occur are absent)."""
    return {k: int(v["bytes"]) for k, v in kind_totals(colls).items()}


def bytes_by_scope(colls: Iterable[Collective]) -> dict[tuple[str, str], int]:
    """Total bytes per (scope, kind): which part of the layout moved what."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for c in colls:
        out[(c.scope, c.kind)] += c.bytes
    return dict(out)


def group_axes(c: Collective, mesh: Any) -> tuple[str, ...]:
    """The mesh axes a collective runs along: those on which its first group's devices differ.

    Replica groups hold logical device ids, i.e. positions in the mesh's device array.
    """
    shape = tuple(mesh.shape.values())
    coords = np.array([np.unravel_index(d, shape) for d in c.groups[0]])
    return tuple(a for i, a in enumerate(mesh.axis_names) if len(set(coords[:, i])) > 1)


def flops(compiled: Any) -> float:
    """FLOPs one device performs in the program, by XLA's cost analysis."""
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):          # older JAX: one dict per program
        cost = cost[0]
    return float(cost.get("flops", 0.0))


def format_table(colls: Iterable[Collective]) -> str:
    """A plain-text table of collectives in program order (for printing in chapters)."""
    rows = [f"{'#':>3}  {'label':<13} {'kind':<18} {'result':<26} {'bytes':>11}  group"]
    for i, c in enumerate(colls):
        shape = f"{c.dtype}{list(c.shapes[0])}".replace(" ", "")
        if len(c.shapes) > 1:
            shape += f" ×{len(c.shapes)}"
        rows.append(f"{i:>3}  {c.scope or '-':<13} {c.kind:<18} {shape:<26} {c.bytes:>11,}  "
                    f"{c.group_size:>5}")
    return "\n".join(rows)
