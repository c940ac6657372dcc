"""What a grouped-matmul kernel does with a mixture's routed rows beyond their arithmetic.

A mixture of experts multiplies each (token, expert) pair's row by its expert's matrices.
A *grouped* (ragged) matmul kernel takes all the routed rows sorted by expert and multiplies
them a *row tile* at a time, so two things can cost more than the pairs' own FLOPs:

    padded rows    each expert's r rows are multiplied as ⌈r / tile⌉ whole tiles, so the
                   kernel's FLOPs are those of Σ_e tile · ⌈r_e / tile⌉ rows, not of B·k
                   (`expected_padded_rows`, with r_e as balanced routing draws it)
    walked tiles   a kernel may visit its experts a few at a time and, on each visit, step
                   through row tiles that hold none of the visit's rows
                   (`walked_row_tiles`, for a kernel that walks from the first row not yet
                   done to the last routed row)

Padding only matters where it makes the experts compute-bound: a decode step reads every
touched expert's weights whatever the tile, so `padded_experts_cost` prices the step with
the padded FLOPs and lets the roofline decide. A walked tile costs neither FLOPs nor bytes
of memory but the kernel's loop time, which no source states; this module counts the tiles,
it does not price them.

The facts come from the software: a published point's data file may describe the kernel
that ran it (`grouped_matmul`, `GroupedMatmulKernel`), each value with its source line.

    >>> round(expected_padded_rows(pairs=1, experts=256, tile=8), 9)
    8.0
    >>> walked_row_tiles(rows=16, local_rows=8, experts=2, experts_per_visit=1, tile=4)
    7
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from inferbook.book import bookdata
from inferbook.perf.published_points import INDEX, PublishedPoint
from inferbook.perf.step_cost import StepCost

__all__ = ["GroupedMatmulKernel", "expected_padded_rows", "walked_row_tiles", "ragged_walk",
           "padded_experts_cost", "grouped_matmul_kernel"]


@dataclass(frozen=True)
class GroupedMatmulKernel:
    """The grouped-matmul kernel a published point ran, as its source sets it."""

    kernel: str
    row_tile: int            # rows each of its products multiplies at once
    experts_per_visit: int   # experts one step of its grid holds
    max_rows: int            # it is chosen while the routed rows are at most this many
    expert_groups: int       # Z: the groups of chips the experts are split over, whole
    products_per_layer: int  # its calls in one MoE layer (one per expert matrix it multiplies)
    source: str


def _positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, not {value!r}")


def expected_padded_rows(pairs: int, experts: int, tile: int) -> float:
    """The rows a grouped matmul multiplies for `pairs` routed rows spread over `experts`
    experts, each expert's r rows padded up to a whole number of `tile`-row tiles: the
    expectation of Σ_e tile · ⌈r_e / tile⌉ with each r_e ~ Binomial(pairs, 1 / experts), as
    balanced routing draws them. `pairs` when `tile` is 1; `tile` for a single pair."""
    _positive(pairs=pairs, experts=experts, tile=tile)
    p = 1.0 / experts
    if experts == 1:
        return float(tile * math.ceil(pairs / tile))
    log_q, total = math.log1p(-p), 0.0
    for r in range(1, pairs + 1):
        log_pmf = (math.lgamma(pairs + 1) - math.lgamma(r + 1) - math.lgamma(pairs - r + 1)
                   + r * math.log(p) + (pairs - r) * log_q)
        total += math.exp(log_pmf) * tile * math.ceil(r / tile)
    return experts * total


def walked_row_tiles(rows: int, local_rows: int, experts: int, experts_per_visit: int,
                     tile: int) -> int:
    """The row tiles a kernel steps through when it holds `rows` sorted routed rows, the first
    `local_rows` of them routed to its own `experts` experts (spread evenly), and visits the
    experts `experts_per_visit` at a time, each visit stepping `tile` rows at a time from the
    tile of the first row not yet done to the last of the `rows` (a tile is at most `rows`).
    A kernel that stopped at its visit's last row would step about local_rows / tile plus
    one per visit."""
    _positive(rows=rows, experts=experts, experts_per_visit=experts_per_visit, tile=tile)
    if not 0 <= local_rows <= rows or experts % experts_per_visit:
        raise ValueError(f"local_rows must be within 0..{rows} and experts_per_visit must "
                         f"divide the {experts} experts")
    tile, visits = min(tile, rows), experts // experts_per_visit
    return sum(rows // tile - (v * local_rows // visits) // tile for v in range(visits))


def ragged_walk(group_sizes: list[int], rows: int, experts_per_visit: int,
                tile: int) -> tuple[int, int]:
    """(row tiles stepped through, products done) by a kernel that holds `rows` sorted rows,
    the first sum(group_sizes) routed to its experts in that order, and visits the experts
    `experts_per_visit` at a time. Each visit steps `tile` rows at a time (at most `rows`)
    from the tile of the first row not yet done to the last of the `rows`; in each tile it
    multiplies, a whole tile at once, every expert of the visit whose rows the tile holds,
    until the visit's experts are done. With evenly spread rows the tiles stepped through are
    `walked_row_tiles`; products · tile are the rows its arithmetic is that of."""
    _positive(rows=rows, experts_per_visit=experts_per_visit, tile=tile)
    if (not group_sizes or len(group_sizes) % experts_per_visit or min(group_sizes) < 0
            or sum(group_sizes) > rows):
        raise ValueError(f"group sizes must be non-negative, at most {rows} rows in all, and "
                         f"split into visits of {experts_per_visit} experts")
    tile = min(tile, rows)
    done, expert, walked, products = 0, 0, 0, 0
    for first in range(0, len(group_sizes), experts_per_visit):
        left = group_sizes[first]                   # rows of `expert` not yet multiplied
        for i in range(done // tile, rows // tile):
            walked += 1
            while done < (i + 1) * tile and expert < first + experts_per_visit:
                step = max(min(left, (i + 1) * tile - done), 0)
                products += step > 0
                if step >= left:                    # this expert is done: the next one
                    expert += 1
                    left = group_sizes[min(expert, len(group_sizes) - 1)]
                else:
                    left -= step
                done += step
    return walked, products


def padded_experts_cost(cost: StepCost, rows: float, padded: float) -> StepCost:
    """`cost` with its routed experts' arithmetic (the grouped part) that of `padded` rows
    instead of `rows`: their FLOPs times padded / rows, their bytes unchanged."""
    if not 0 < rows <= padded:
        raise ValueError(f"padded rows ({padded}) must be at least the {rows} routed rows")
    parts = tuple(dataclasses.replace(w, flops=w.flops * padded / rows) if w.grouped else w
                  for w in cost.parts)
    return dataclasses.replace(cost, parts=parts)


def grouped_matmul_kernel(point: PublishedPoint) -> GroupedMatmulKernel | None:
    """The grouped-matmul kernel the data file of `point` describes, None where it does not."""
    for name in bookdata.load(INDEX)["files"]:
        file = bookdata.load(f"published/{name}")
        if any(raw.get("id") == point.id for raw in file["points"]):
            record = file.get("grouped_matmul")
            return None if record is None else GroupedMatmulKernel(**record)
    return None
