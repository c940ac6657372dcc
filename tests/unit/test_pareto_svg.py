"""The estimator page's figure (inferbook.perf.pareto_svg) against the CLI's matplotlib figure.

Both draw the same thing from the same rows: per context a series of (step time in ms,
tokens/s per chip) in batch order, hollow where a row does not fit, and the Pareto frontier
through the rows that fit. The matplotlib figure (`pareto_plot.pareto_figure`) is the
reference: its lines' data are what the SVG must draw, point for point.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from inferbook.model.presets import get_preset
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import get_chip
from inferbook.perf.pareto_plot import pareto_figure
from inferbook.perf.pareto_svg import COLORS, LABELS, WIDTH, pareto_svg, points

SVG = "{http://www.w3.org/2000/svg}"


def sweep(model, chip, chips, batches, contexts, **kw):
    cfg, hw = get_preset(model), get_chip(chip)
    return [estimate(cfg, hw, batch=B, context=S, chips=chips, **kw)
            for S in contexts for B in batches]


SWEEPS = {
    "70b-on-8-h100": lambda: sweep("llama-3.1-70b", "H100 SXM", 8, [1, 16, 64, 256, 512],
                                   [8192, 32768], prompt=2048),
    "moe-fp8": lambda: sweep("qwen3-30b-a3b", "H100 SXM", 1, [1, 4, 16, 64, 256, 1024],
                             [4096], weights="fp8"),
    "one-row": lambda: sweep("llama-3.1-8b", "A10", 1, [1], [4096]),
    "nothing-fits": lambda: sweep("llama-3.1-70b", "L4", 1, [1, 8], [8192]),
}


def matplotlib_lines(estimates):
    """(series lines by colour, frontier) as pareto_figure draws them, in data units."""
    ax = pareto_figure(estimates).axes[0]
    series, frontier = [], None
    for line in ax.get_lines():
        x, y = (list(map(float, v)) for v in line.get_data())
        if line.get_label() == "Pareto frontier (fits)":
            frontier = list(zip(x, y))
        elif line.get_linestyle() == "-" and len(x) > 0:
            series.append(list(zip(x, y)))
    return series, frontier


@pytest.mark.parametrize("name", SWEEPS)
def test_the_svg_draws_the_points_and_frontier_of_the_matplotlib_figure(name):
    estimates = SWEEPS[name]()
    rows = [e.as_dict() for e in estimates]
    drawn = points(rows)
    series, frontier = matplotlib_lines(estimates)
    assert [[(x, y) for _, x, y, _ in s] for s in drawn["series"].values()] == series
    assert (drawn["frontier"] or None) == frontier
    # ... and the document holds one marker per row, hollow exactly where the row does not fit.
    root = ET.fromstring(pareto_svg(rows))
    marks = [c for c in root.iter(f"{SVG}circle") if "data-batch" in c.attrib]
    assert sorted((int(c.get("data-context")), int(c.get("data-batch")), c.get("fill") == "white")
                  for c in marks) == sorted((r["context"], r["batch"], not r["fits"])
                                            for r in rows)
    lines = [p for p in root.iter(f"{SVG}polyline") if p.get("class") == "pareto-frontier"]
    assert len(lines) == (1 if frontier else 0)
    if lines:
        xs = [float(p.split(",")[0]) for p in lines[0].get("points").split()]
        assert len(xs) == len(frontier) and xs == sorted(xs)


@pytest.mark.parametrize("name", SWEEPS)
def test_every_point_lies_inside_the_plot_and_the_axes_are_labelled(name):
    rows = [e.as_dict() for e in SWEEPS[name]()]
    root = ET.fromstring(pareto_svg(rows))
    frame = next(root.iter(f"{SVG}rect"))
    x0, y0 = float(frame.get("x")), float(frame.get("y"))
    x1, y1 = x0 + float(frame.get("width")), y0 + float(frame.get("height"))
    for c in root.iter(f"{SVG}circle"):
        assert x0 <= float(c.get("cx")) <= x1 and y0 <= float(c.get("cy")) <= y1
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert LABELS["en"]["x"] in texts and LABELS["en"]["y"] in texts
    assert any(t.startswith(rows[0]["model"]) for t in texts)
    # Tick labels: at least two per axis (positions along the bottom and the left edges).
    bottom = [t for t in root.iter(f"{SVG}text") if float(t.get("y", 0)) == y1 + 15]
    assert len(bottom) >= 2
    assert float(root.get("width")) == WIDTH


def test_the_chinese_figure_has_only_chinese_words():
    rows = [e.as_dict() for e in SWEEPS["70b-on-8-h100"]()]
    svg = pareto_svg(rows, "zh")
    for key in ("x", "y", "frontier"):
        assert LABELS["zh"][key] in svg and LABELS["en"][key] not in svg
    assert "上下文 8,192" in svg and "context 8,192" not in svg
    words = set(re.findall(r">([^<]+)<", svg))
    english = {w for w in words if re.search(r"\b(latency|throughput|context|labels|fits)\b", w)}
    assert not english, english


def test_series_take_matplotlibs_colours_in_order_and_text_is_escaped():
    rows = [e.as_dict() for e in SWEEPS["70b-on-8-h100"]()]
    for r in rows:
        r["model"] = "<b>&co</b>"
    svg = pareto_svg(rows)
    ET.fromstring(svg)                                   # still well-formed XML
    assert "&lt;b&gt;&amp;co&lt;/b&gt;" in svg
    assert svg.index(COLORS[0]) < svg.index(COLORS[1])


def test_no_rows_is_refused():
    with pytest.raises(ValueError, match="no rows"):
        pareto_svg([])
