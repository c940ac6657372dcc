"""`inferbook calibrate`: what it prints, what --check says, and one line for a bad argument.

The fit itself is tested in test_efficiency_fit.py; here `calibrate` is replaced by one that
returns the registry's values (as if the fit had found them) or values that differ."""

import json

import pytest

from inferbook.cli import main
from inferbook.perf import published_calibration
from inferbook.perf.efficiency_defaults import FITTED
from inferbook.perf.efficiency_fit import Parameter
from inferbook.perf.published_baseline import compare_points
from inferbook.perf.published_points import load_points

POINTS = load_points()[:6]


def fake_calibrate(values):
    rows = compare_points(POINTS, "ideal")
    return lambda: published_calibration.Calibration(values, 1, rows,
                                                     compare_points(POINTS, "calibrated"))


def run(capsys, monkeypatch, values, *argv):
    monkeypatch.setattr(published_calibration, "calibrate", fake_calibrate(values))
    code = main(["calibrate", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


REGISTRY = {Parameter(f, g): v for (f, g), v in FITTED.items()}


def test_the_report_sets_the_fit_beside_the_registry_and_the_target(capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, REGISTRY)
    assert code == 0 and "fitting" in err
    for text in ("before (the bare roofline, --ideal)", "after (this fit)", "split held_out",
                 "target on the held-out points", "the registry holds this fit", POINTS[0].id):
        assert text in out, text


def test_check_fails_when_the_registry_is_not_the_fit(capsys, monkeypatch):
    assert run(capsys, monkeypatch, REGISTRY, "--check")[0] == 0
    moved = {p: (v * 0.9 if p.field == "mbu" else v) for p, v in REGISTRY.items()}
    code, out, _ = run(capsys, monkeypatch, moved, "--check")
    assert code == 1 and "the registry differs from this fit" in out and "mbu" in out


def test_json_and_the_literal(capsys, monkeypatch):
    code, out, _ = run(capsys, monkeypatch, REGISTRY, "--json")
    data = json.loads(out)
    assert code == 0 and data["registry_differences"] == []
    assert {(p["field"], p["group"]) for p in data["parameters"]} == set(FITTED)
    assert len(data["rows"]) == len(POINTS) and "time_ratio_ideal" in data["rows"][0]
    code, out, _ = run(capsys, monkeypatch, REGISTRY, "--literal")
    namespace: dict = {}
    exec(out, namespace)                                # the literal the registry holds
    assert namespace["FITTED"] == FITTED


@pytest.mark.parametrize("argv", [["--points", "all"], ["extra"]])
def test_a_bad_argument_is_one_line_and_exit_2(capsys, argv):
    code = main(["calibrate", *argv])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
