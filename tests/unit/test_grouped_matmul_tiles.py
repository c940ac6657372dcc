"""A grouped matmul's padded rows and walked row tiles, against counts done here by hand or by
enumerating every routing, and the kernel record of the DeepSeek-V3 points' data file."""

import itertools
import math

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf.grouped_matmul_tiles import (
    expected_padded_rows,
    grouped_matmul_kernel,
    padded_experts_cost,
    ragged_walk,
    walked_row_tiles,
)
from inferbook.perf.published_baseline import PointCosts, point_costs
from inferbook.perf.published_points import load_points
from inferbook.perf.step_cost import StepCost, Work

POINTS = load_points()


@pytest.mark.parametrize("pairs,experts,tile", [(3, 2, 2), (4, 3, 2), (5, 2, 4), (4, 4, 1)])
def test_padded_rows_are_the_mean_over_every_routing(pairs, experts, tile):
    """Every assignment of the pairs to experts is equally likely under balanced routing:
    average Σ_e tile · ⌈r_e / tile⌉ over all experts ** pairs of them."""
    routings = list(itertools.product(range(experts), repeat=pairs))
    mean = sum(sum(tile * math.ceil(r.count(e) / tile) for e in range(experts))
               for r in routings) / len(routings)
    assert expected_padded_rows(pairs, experts, tile) == pytest.approx(mean, rel=1e-12)


def test_padding_vanishes_at_a_one_row_tile_and_with_one_expert():
    assert expected_padded_rows(1024, 256, 1) == pytest.approx(1024, rel=1e-12)
    assert expected_padded_rows(13, 1, 8) == 16
    assert expected_padded_rows(1, 64, 8) == pytest.approx(8, rel=1e-12)


def test_walked_tiles_step_from_the_first_row_not_done_to_the_last():
    """16 rows, the first 8 the kernel's own over 2 experts visited one at a time, tiles of
    4 rows: the first visit walks tiles 0–3, the second starts at row 4 and walks tiles 1–3."""
    assert walked_row_tiles(16, 8, 2, 1, 4) == 4 + 3
    # A tile is never larger than the rows: 8 rows in one tile, each of 16 visits walks it.
    assert walked_row_tiles(8, 2, 64, 4, 8) == 16


@pytest.mark.parametrize("rows,per_expert,experts,per_visit,tile", [
    (16, 4, 2, 1, 4), (1024, 4, 64, 4, 8), (64, 1, 16, 4, 8), (8, 1, 2, 2, 8), (96, 2, 8, 2, 8)])
def test_the_kernel_walk_with_even_rows_is_the_closed_form(rows, per_expert, experts, per_visit,
                                                           tile):
    walked, _ = ragged_walk([per_expert] * experts, rows, per_visit, tile)
    assert walked == walked_row_tiles(rows, per_expert * experts, experts, per_visit, tile)


def test_the_kernel_multiplies_every_tile_an_expert_has_rows_in():
    """Rows 0–2 to expert 0, 3–8 to expert 1, none to expert 2, 9 to expert 3; tiles of 4 of
    12 rows, one expert a visit. Expert 0 lies in tile 0; expert 1 in tiles 0, 1 and 2;
    expert 3 in tile 2: 5 products. Walks: tiles 0–2, then 0–2 (it starts in tile 0), then
    2 (expert 2 is empty, and the visit ends in tile 2), then 2: 3 + 3 + 1 + 1 tiles."""
    assert ragged_walk([3, 6, 0, 1], 12, 1, 4) == (8, 5)
    # All the rows one expert's and a tile as wide as them: one product, one tile.
    assert ragged_walk([8, 0], 8, 2, 8) == (1, 1)


def test_padded_cost_scales_only_the_grouped_arithmetic():
    cost = StepCost((Work("weights", 10.0, 100.0), Work("experts", 6.0, 50.0, grouped=True)),
                    0.0, 0.0, 0, 1, "decode")
    padded = padded_experts_cost(cost, rows=4, padded=10)
    assert [(w.flops, w.bytes) for w in padded.parts] == [(10.0, 100.0), (15.0, 50.0)]


@pytest.mark.parametrize("call", [
    lambda: expected_padded_rows(0, 8, 8), lambda: expected_padded_rows(8, 8, True),
    lambda: walked_row_tiles(8, 9, 4, 2, 8), lambda: walked_row_tiles(8, 2, 6, 4, 8),
    lambda: padded_experts_cost(StepCost((), 0.0, 0.0, 0, 1, "decode"), 4, 2),
    lambda: ragged_walk([4, 4, 4], 16, 2, 4), lambda: ragged_walk([9, 9], 16, 1, 4),
    lambda: ragged_walk([], 16, 1, 4), lambda: ragged_walk([-1, 2], 16, 1, 4)])
def test_bad_input_is_refused_in_one_line(call):
    with pytest.raises(ValueError) as err:
        call()
    assert "\n" not in str(err.value)


def test_the_deepseek_points_name_their_kernel_with_its_source():
    deepseek = [p for p in POINTS if p.id.startswith("jax-llm-examples/deepseek-v3/")]
    kernels = {grouped_matmul_kernel(p) for p in deepseek}
    assert len(kernels) == 1
    kernel = kernels.pop()
    assert kernel.row_tile >= 1 and "decode_ragged_dot.py" in kernel.source
    # Every point's routed rows (B·k) are within the rows the source chooses the kernel for.
    k = get_preset("deepseek-v3").moe.k
    assert all(p.batch * k <= kernel.max_rows for p in deepseek)
    assert grouped_matmul_kernel(next(p for p in POINTS if "gpt-fast" in p.id)) is None


def test_the_padding_moves_a_memory_bound_step_not_at_all():
    """At batch 128 the experts' padded arithmetic still takes less time than reading their
    weights, so the step's time is the same number."""
    p = next(p for p in POINTS if p.id.endswith("int8-b128-s512"))
    kernel, costs = grouped_matmul_kernel(p), point_costs(p, "calibrated")
    moe = get_preset(p.model).moe
    rows = p.batch * moe.k
    padded = padded_experts_cost(costs.steps[0][1], rows,
                                 expected_padded_rows(rows, moe.E, kernel.row_tile))
    assert padded.parts != costs.steps[0][1].parts
    assert costs.value() == pytest.approx(
        PointCosts(p, costs.plan, ((1, padded),), costs.fits).value(), rel=1e-12)
