"""A published point is predicted in the layout its source ran, where the source says which.

The DeepSeek-V3 points of jax-llm-examples ran attention split over heads and the routed
experts split over all 64 chips with the activations replicated and AllReduced — what the
estimator calls the 1D layout — at every batch. Left to itself the estimator picks expert
parallelism for some of them, a layout that never ran; the point's `layout` field stops that. The
bytes of the step are checked against the expected-experts arithmetic done here.
"""

import dataclasses

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf.published_baseline import point_costs
from inferbook.perf.published_points import PublishedDataError, load_points, parse_point

DEEPSEEK = [p for p in load_points() if p.id.startswith("jax-llm-examples/deepseek-v3/")]


def test_the_deepseek_points_say_the_layout_their_code_ran():
    assert DEEPSEEK and {p.layout for p in DEEPSEEK} == {"1d-ws"}


@pytest.mark.parametrize("point", DEEPSEEK, ids=lambda p: f"b{p.batch}-s{p.context}")
def test_each_point_is_planned_in_its_stated_layout(point):
    assert point_costs(point).plan.share.comms.layout == point.layout


def test_without_the_field_the_estimator_picks_a_layout_that_never_ran():
    chosen = {p.id: point_costs(dataclasses.replace(p, layout=None)).plan.share.comms.layout
              for p in DEEPSEEK}
    # Expert parallelism for some of them (batch 8 at long contexts): why the field is needed.
    assert any(chosen[p.id] != p.layout for p in DEEPSEEK)


def test_the_1d_step_reads_the_experts_a_batch_touches_once_over_all_chips():
    """Per layer a batch of B tokens, each sent to k of E experts, touches
    E·(1 − (1 − k/E)^B) experts in expectation; every one is read once, split over the chips,
    in int8: one byte per parameter of its three D×F matrices."""
    b8 = next(p for p in DEEPSEEK if p.batch == 8)
    cfg = get_preset(b8.model)
    E, k, D, F = cfg.moe.E, cfg.moe.k, cfg.D, cfg.moe.F
    moe_layers = cfg.L - len(cfg.moe.dense_layers)
    touched = E * (1 - (1 - k / E) ** b8.batch)
    by_hand = touched * 3 * D * F * moe_layers * 1.0
    step = point_costs(b8).steps[0][1]
    experts = next(w for w in step.parts if w.name == "experts")
    assert experts.bytes == pytest.approx(by_hand, rel=0.01)    # int8 scales: under 1%


def test_a_layout_the_estimator_does_not_know_is_refused_in_one_line():
    import json

    from inferbook.book import bookdata

    head = bookdata.load("published/jax_llm_examples_deepseek_v5e.json")
    raw = {**json.loads(json.dumps(head["points"][0])), "layout": "3d-torus"}
    with pytest.raises(PublishedDataError, match="layout '3d-torus' is not one of") as err:
        parse_point(raw, head, "jax_llm_examples_deepseek_v5e.json")
    assert "\n" not in str(err.value)
