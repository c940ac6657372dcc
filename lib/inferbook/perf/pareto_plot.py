"""The latency–throughput figure of an estimate sweep (the scaling book's Pareto plot).

Each setting is a point: the time a user waits per token (the decode step) against the tokens
per second each chip produces (the cost of a token). Settings that do not fit in memory are
drawn hollow; the frontier — the settings no other beats on both at once
(`roofline.pareto_frontier`) — is drawn through the ones that fit. One series per context
length, each point labelled with its batch size.

Built on a bare `matplotlib.figure.Figure` (no pyplot, no GUI backend), so the command line can
save it anywhere and a notebook can display it.
"""

from __future__ import annotations

from typing import Sequence

from matplotlib.figure import Figure

from inferbook.perf.roofline import pareto_frontier

__all__ = ["pareto_figure"]


def pareto_figure(rows: Sequence, title: str | None = None) -> Figure:
    """A `matplotlib.figure.Figure` of `rows` (`estimator.Estimate`s of one model and chip)."""
    if not rows:
        raise ValueError("nothing to plot: no rows")
    fig = Figure(figsize=(7, 4.5))
    ax = fig.add_subplot()
    contexts = list(dict.fromkeys(r.context for r in rows))
    colors = [f"C{i % 10}" for i in range(len(contexts))]
    for S, color in zip(contexts, colors):
        series = sorted((r for r in rows if r.context == S), key=lambda r: r.batch)
        x = [r.step_time_s * 1e3 for r in series]
        y = [r.tokens_per_s_per_chip for r in series]
        ax.plot(x, y, "-", color=color, lw=0.8, alpha=0.5)
        for r, xi, yi in zip(series, x, y):
            ax.plot(xi, yi, "o", color=color, ms=5, mfc=color if r.fits else "none")
            ax.annotate(f"{r.batch}", (xi, yi), xytext=(3, 3), textcoords="offset points",
                        fontsize=7, color=color)
        ax.plot([], [], "o", color=color, label=f"context {S:,}")
    fitting = [r for r in rows if r.fits]
    if fitting:
        front = [fitting[i] for i in pareto_frontier([r.step_time_s for r in fitting],
                                                     [r.tokens_per_s_per_chip for r in fitting])]
        ax.plot([r.step_time_s * 1e3 for r in front], [r.tokens_per_s_per_chip for r in front],
                "-", color="black", lw=1.2, label="Pareto frontier (fits)")
    if any(not r.fits for r in rows):
        ax.plot([], [], "o", color="gray", mfc="none", label="does not fit")
    r0 = rows[0]
    layout = "" if r0.layout is None else f", {r0.layout}"
    ax.set_title(title or f"{r0.model} on {r0.chips} × {r0.hardware}{layout}: weights "
                 f"{r0.weights}, KV {r0.kv}; labels: batch", fontsize=9)
    ax.set_xscale("log")
    ax.set_xlabel("latency per token, decode step (ms)")
    ax.set_ylabel("throughput per chip (tokens/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
