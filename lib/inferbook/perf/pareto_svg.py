"""The latency–throughput figure of an estimate sweep as SVG text, without matplotlib.

The same figure as `pareto_plot.pareto_figure` — one point per row at (decode step time, tokens
per second per chip), one series per context length, each point labelled with its batch, the
rows that do not fit drawn hollow, the Pareto frontier (`roofline.pareto_frontier`) drawn
through the rows that fit — for where matplotlib cannot go: the estimator page draws it in
the reader's browser, under Pyodide, whose offline site has the standard library and nothing
else (book/estimator.md). It reads the rows as `inferbook estimate --json` prints them
(dictionaries), so the page draws exactly what it shows.

The x axis is logarithmic (a step time spans decades across a batch sweep), the y axis
linear from zero. Every word comes in the page's language (`LABELS`).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence
from xml.sax.saxutils import escape

from inferbook.book.language import check_language
from inferbook.perf.roofline import pareto_frontier

__all__ = ["pareto_svg", "points", "LABELS", "COLORS"]

# matplotlib's default colour cycle ("tab10"), so the page matches the CLI's --plot.
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
LABELS = {
    "en": {"title": "{model} on {chips} × {hardware}{layout}: weights {weights}, KV {kv}; "
                    "labels: batch",
           "layout": ", {layout}", "x": "latency per token, decode step (ms)",
           "y": "throughput per chip (tokens/s)", "context": "context {context:,}",
           "frontier": "Pareto frontier (fits)", "unfit": "does not fit"},
    "zh": {"title": "{model}，{chips} × {hardware}{layout}：权重 {weights}，KV {kv}；"
                    "标注：批量大小",
           "layout": "，{layout}", "x": "每个词元的延迟，解码步骤（ms）",
           "y": "每个芯片的吞吐量（词元/秒）", "context": "上下文 {context:,}",
           "frontier": "帕累托前沿（放得下的）", "unfit": "放不下"},
}
WIDTH, HEIGHT = 720, 460
LEFT, RIGHT, TOP, BOTTOM = 78, 20, 40, 56          # the plot area's margins


def points(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the figure draws, in data units: per context its series (batch, ms, tokens/s per
    chip, fits) in batch order, and the frontier's (ms, tokens/s per chip) through the rows
    that fit, in order of latency."""
    series = {}
    for S in dict.fromkeys(r["context"] for r in rows):
        series[S] = [(r["batch"], r["step_time_s"] * 1e3, r["tokens_per_s_per_chip"], r["fits"])
                     for r in sorted((r for r in rows if r["context"] == S),
                                     key=lambda r: r["batch"])]
    fitting = [r for r in rows if r["fits"]]
    front = pareto_frontier([r["step_time_s"] for r in fitting],
                            [r["tokens_per_s_per_chip"] for r in fitting])
    return {"series": series, "frontier": [(fitting[i]["step_time_s"] * 1e3,
                                            fitting[i]["tokens_per_s_per_chip"]) for i in front]}


def _log_ticks(low: float, high: float) -> list[float]:
    """Ticks in [low, high]: the decades when three or more fit, else 1-2-5 of each decade,
    else every whole multiple; the range's two ends when even those are fewer than two."""
    a, b = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks: list[float] = []
    for steps in ((1,), (1, 2, 5), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(a, b + 1) for m in steps
                 if low <= m * 10.0 ** e <= high]
        if len(ticks) >= 3:
            return ticks
    return ticks if len(ticks) >= 2 else [low, high]


def _linear_ticks(high: float) -> list[float]:
    """0, s, 2s, ... up to `high`, with s a 1-2-5 step giving four to eight ticks."""
    raw = high / 5
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 5, 10) if m * step >= raw)
    return [i * step for i in range(int(high / step + 1e-9) + 1)]


def _number(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}"


def pareto_svg(rows: Sequence[Mapping[str, Any]], lang: str = "en") -> str:
    """The figure of `rows` (the CLI's --json rows of one model and chip) as an SVG document."""
    if not rows:
        raise ValueError("nothing to plot: no rows")
    words = LABELS[check_language(lang)]
    drawn = points(rows)
    xs = [x for s in drawn["series"].values() for _, x, _, _ in s]
    ys = [y for s in drawn["series"].values() for _, _, y, _ in s]
    x_lo, x_hi = min(xs) / 1.25, max(xs) * 1.25             # room for the end points' labels
    y_hi = max(ys) * 1.12
    x_ticks, y_ticks = _log_ticks(x_lo, x_hi), _linear_ticks(y_hi)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + pw * math.log(x / x_lo) / math.log(x_hi / x_lo)

    def py(y: float) -> float:
        return TOP + ph * (1 - y / y_hi)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
           f'width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="11" '
           'role="img" class="pareto-figure">',
           f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="white" stroke="#333"/>']
    for x in x_ticks:
        out.append(f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{TOP}" y2="{TOP + ph}" '
                   'stroke="#ddd"/>'
                   f'<text x="{px(x):.1f}" y="{TOP + ph + 15}" text-anchor="middle">'
                   f'{_number(x)}</text>')
    for y in y_ticks:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
                   'stroke="#ddd"/>'
                   f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end">'
                   f'{_number(y)}</text>')
    r0 = rows[0]
    layout = "" if r0.get("layout") is None else words["layout"].format(layout=r0["layout"])
    title = words["title"].format(model=r0["model"], chips=r0["chips"],
                                  hardware=r0["hardware"], layout=layout,
                                  weights=r0["weights"], kv=r0["kv"])
    out.append(f'<text x="{WIDTH / 2}" y="{TOP - 14}" text-anchor="middle" font-size="12">'
               f'{escape(title)}</text>'
               f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 14}" text-anchor="middle">'
               f'{escape(words["x"])}</text>'
               f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" '
               f'text-anchor="middle">{escape(words["y"])}</text>')
    legend = []
    for i, (S, series) in enumerate(drawn["series"].items()):
        color = COLORS[i % len(COLORS)]
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for _, x, y, _ in series)
        out.append(f'<polyline points="{line}" fill="none" stroke="{color}" '
                   'stroke-width="0.8" stroke-opacity="0.5"/>')
        for batch, x, y, fits in series:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" stroke="{color}" '
                       f'fill="{color if fits else "white"}" data-batch="{batch}" '
                       f'data-context="{S}"/>'
                       f'<text x="{px(x) + 4:.1f}" y="{py(y) - 4:.1f}" font-size="9" '
                       f'fill="{color}">{batch}</text>')
        legend.append((words["context"].format(context=S), color, True))
    if drawn["frontier"]:
        line = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in drawn["frontier"])
        out.append(f'<polyline points="{line}" fill="none" stroke="black" stroke-width="1.4" '
                   'class="pareto-frontier"/>')
        legend.append((words["frontier"], "black", None))
    if any(not r["fits"] for r in rows):
        legend.append((words["unfit"], "#7f7f7f", False))
    for i, (text, color, filled) in enumerate(legend):
        y = TOP + 14 + 16 * i
        mark = (f'<line x1="{LEFT + 10}" x2="{LEFT + 26}" y1="{y - 4}" y2="{y - 4}" '
                f'stroke="{color}" stroke-width="1.4"/>' if filled is None else
                f'<circle cx="{LEFT + 18}" cy="{y - 4}" r="3.5" stroke="{color}" '
                f'fill="{color if filled else "white"}"/>')
        out.append(f'{mark}<text x="{LEFT + 32}" y="{y}">{escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out)
