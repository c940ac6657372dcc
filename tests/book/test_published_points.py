"""Every published point cites its source, says what ran, and reads back as printed.

The data files under book/data/published/ are the world's measurements the estimator is
checked against; these tests hold each point to its fields (source URL and version, chip,
software, model, batch, lengths, precision, parallelism, what was measured), its figure to
the number as printed, and its calibration split to the name-hash rule fixed before any fit.
"""

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from inferbook.perf import published_points as published
from inferbook.perf.published_points import (
    NEEDS,
    QUANTITIES,
    PublishedDataError,
    load_points,
    parse_point,
    split_of,
)

DATA = Path(__file__).resolve().parents[2] / "book" / "data" / "published"
FILES = sorted(p.name for p in DATA.glob("*.json") if p.name != "index.json")
POINTS = load_points()


def test_the_points_span_the_chips_and_sources_the_issue_asks_for():
    assert len(POINTS) >= 30
    assert {"A100 80GB", "H100 SXM", "H200", "TPU v5e", "TPU v6e"} <= {p.chip for p in POINTS}
    assert set(QUANTITIES) == {p.quantity for p in POINTS}
    assert len({p.url for p in POINTS}) == len(FILES)


@pytest.mark.parametrize("name", FILES)
def test_each_file_names_its_source_version_and_method(name):
    head = json.loads((DATA / name).read_text())
    for key in ("source", "url", "version", "method", "hardware_note"):
        assert isinstance(head[key], str) and len(head[key]) > 10, key
    assert head["url"].startswith("https://")
    assert head["points"]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.id)
def test_each_point_says_what_ran_and_what_was_measured(point):
    assert point.where and point.software and point.model_as_published
    assert point.value == float(point.figure.replace(",", ""))
    assert point.split == split_of(point.id)
    assert set(point.needs) <= set(NEEDS)
    if point.quantity.startswith("output_tokens"):
        assert "output-length" in point.needs
    if point.compute == "fp8":
        assert "compute-fp8" in point.needs
    if point.dp > 1:
        assert "data-parallel" in point.needs
    if point.ep > 1:
        assert "expert-parallel" in point.needs


def test_both_splits_hold_points_of_every_chip():
    by_chip = Counter((p.chip, p.split) for p in POINTS)
    for chip in {p.chip for p in POINTS}:
        assert by_chip[chip, "fit"] and by_chip[chip, "held_out"], chip
    held = sum(p.split == "held_out" for p in POINTS) / len(POINTS)
    assert 0.2 < held < 0.45


def test_the_split_rule_reads_only_the_name():
    assert split_of("a/b") == split_of("a/b")
    names = [f"point-{i}" for i in range(3000)]
    share = sum(split_of(n) == "held_out" for n in names) / len(names)
    assert 0.3 < share < 0.37                          # a third, as a hash mod 3 gives


def _first(name="lmdeploy_a100.json"):
    head = json.loads((DATA / name).read_text())
    return head, copy.deepcopy(head["points"][0])


@pytest.mark.parametrize("change, message", [
    ({"figure": "101.02"}, "not the printed figure"),
    ({"chip": "A100 96GB"}, "not in the registry"),
    ({"model": "llama-9"}, "not a preset"),
    ({"weights": "int3"}, "weights"),
    ({"kv": "int4"}, "kv"),
    ({"quantity": "joules"}, "quantity"),
    ({"tp": 2}, "must be the 1 chips"),
    ({"needs": ["faster-chips"]}, "not one of NEEDS"),
    ({"split": "held_out" if split_of("x") == "fit" else "fit", "id": "x"}, "rule"),
    ({"context": 128}, "a decode rate needs a context"),
    ({"output": None}, "output length"),
    ({"batch": 2.5}, "batch is 2.5"),
    ({"colour": "red"}, "unknown field"),
])
def test_a_point_that_contradicts_itself_is_refused_in_one_line(change, message):
    head, raw = _first()
    raw.update(change)
    with pytest.raises(PublishedDataError, match=message) as err:
        parse_point(raw, head, "lmdeploy_a100.json")
    assert "\n" not in str(err.value)


def test_a_point_without_a_field_or_a_file_without_its_url_is_refused():
    head, raw = _first()
    del raw["where"]
    with pytest.raises(PublishedDataError, match="lacks 'where'"):
        parse_point(raw, head, "lmdeploy_a100.json")
    head, raw = _first()
    del head["url"]
    with pytest.raises(PublishedDataError, match="lacks its 'url'"):
        parse_point(raw, head, "lmdeploy_a100.json")


def test_two_points_of_one_name_are_refused(monkeypatch):
    head, raw = _first()
    twice = {**head, "points": [raw, raw]}
    monkeypatch.setattr(published.bookdata, "load",
                        lambda name: {"files": ["x.json"]} if name == published.INDEX
                        else twice)
    with pytest.raises(PublishedDataError, match="two points are named"):
        load_points()


def test_the_recorded_baseline_covers_the_points_with_their_measured_values():
    """book/data/published_baseline.json keeps the estimator's predictions before any
    calibration: a row for every point published when it was recorded, each a point that
    exists, with the value it was measured at."""
    recorded = json.loads((DATA.parent / "published_baseline.json").read_text())
    assert recorded["source"]
    by_id = {p.id: p for p in POINTS}
    assert {r["id"] for r in recorded["rows"]} <= set(by_id)
    assert len(recorded["rows"]) >= 76
    for row in recorded["rows"]:
        assert row["measured"] == by_id[row["id"]].value
        assert row["split"] == by_id[row["id"]].split
