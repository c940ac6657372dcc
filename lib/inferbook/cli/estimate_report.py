"""What `inferbook estimate` prints: one estimate as a labelled table, a sweep as one row per
setting, the lists of presets and chips, and the latency–throughput plot."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from inferbook.book.present import fmt_count, fmt_rate, fmt_seconds
from inferbook.model.presets import PRESETS
from inferbook.perf.estimator import Estimate
from inferbook.perf.hardware import CHIPS
from inferbook.perf.params import active_param_count, param_count
from inferbook.perf.step_breakdown import BREAKDOWN_PARTS

__all__ = ["report", "single_report", "sweep_report", "breakdown_report", "model_list",
           "chip_list", "save_plot"]


def _bytes(v: float) -> str:
    """Decimal and binary at once: datasheets print "80 GB", peers print GiB."""
    return f"{v / 1e9:,.2f} GB ({v / 2 ** 30:,.2f} GiB)" if v >= 1e7 else f"{v / 1e3:,.2f} kB"


def _layout(r) -> str:
    if r.layout is None:
        return "one chip"
    if r.layout == "expert-parallel":
        return (f"expert-parallel (experts over Z={r.expert_chips}, "
                f"the rest over Y={r.chips // r.expert_chips})")
    return r.layout if r.layout == "1d-ws" else f"2d-ws (X={r.layout_x}, YZ={r.layout_yz})"


def _dollars(v: float | None) -> str:
    return "—" if v is None else f"${v:,.4g}"


_FIELDS = [
    ("params", "parameters", lambda r: f"{fmt_count(r.params, 2)} ({r.params:,})"),
    ("active_params", "active per token", lambda r: f"{fmt_count(r.active_params, 2)}"),
    ("param_bytes", "weights", lambda r: _bytes(r.param_bytes)),
    ("kv_bytes_per_token", "KV cache per token", lambda r: _bytes(r.kv_bytes_per_token)),
    ("kv_bytes", "KV cache (batch × context)", lambda r: _bytes(r.kv_bytes)),
    ("total_bytes", "weights + KV cache", lambda r: _bytes(r.total_bytes)),
    ("hbm_bytes", "device memory", lambda r: _bytes(r.hbm_bytes)),
    ("fits", "fits in memory", lambda r: "yes" if r.fits else "NO"),
    ("max_batch", "largest batch that fits", lambda r: f"{r.max_batch:,}"),
    ("critical_batch", "critical batch", lambda r: f"{r.critical_batch:,.1f}"),
    ("experts_touched", "experts read per MoE layer",
     lambda r: "—" if r.experts_touched is None else f"{r.experts_touched:,.1f}"),
    ("comm_time_s", "collectives per step", lambda r: fmt_seconds(r.comm_time_s, 3)),
    ("dcn_time_s", "of which between hosts", lambda r: fmt_seconds(r.dcn_time_s, 3)
     if _spans_hosts(r) else "—"),
    ("step_time_lower_bound_s", "step time, memory-bound bound",
     lambda r: fmt_seconds(r.step_time_lower_bound_s, 3)),
    ("step_time_s", "decode step time", lambda r: fmt_seconds(r.step_time_s, 3)),
    ("tokens_per_s", "throughput", lambda r: fmt_rate(r.tokens_per_s, "tokens/s")),
    ("tokens_per_s_per_user", "per user", lambda r: fmt_rate(r.tokens_per_s_per_user,
                                                              "tokens/s")),
    ("tokens_per_s_per_chip", "per chip", lambda r: fmt_rate(r.tokens_per_s_per_chip,
                                                             "tokens/s")),
    ("prefill_time_s", "prefill of the batch's prompts", lambda r: fmt_seconds(r.prefill_time_s,
                                                                               3)),
    ("ttft_s", "time to first token", lambda r: fmt_seconds(r.ttft_s, 3)),
    ("generation_time_s", "whole generation (prefill + output)",
     lambda r: "—" if r.generation_time_s is None else fmt_seconds(r.generation_time_s, 3)),
    ("output_tokens_per_s", "output tokens over the generation",
     lambda r: "—" if r.output_tokens_per_s is None else fmt_rate(r.output_tokens_per_s,
                                                                 "tokens/s")),
    ("usd_per_million_tokens", "cost per million tokens, decoding",
     lambda r: _dollars(r.usd_per_million_tokens)),
    ("usd_per_million_prompt_tokens", "cost per million prompt tokens",
     lambda r: _dollars(r.usd_per_million_prompt_tokens)),
    ("usd_per_million_output_tokens", "cost per million output tokens, whole generation",
     lambda r: _dollars(r.usd_per_million_output_tokens)),
]
_OPTIONAL = {"generation_time_s": "output", "output_tokens_per_s": "output",
             "usd_per_million_tokens": "price_per_chip_hour",
             "usd_per_million_prompt_tokens": "price_per_chip_hour",
             "usd_per_million_output_tokens": "output"}
_BREAKDOWN = {"weights_s": "reading the weights", "kv_cache_s": "reading the KV cache",
              "attention_s": "attention's arithmetic", "mlp_s": "the MLP (arithmetic, routed rows)",
              "logits_s": "the logits' arithmetic", "communication_s": "collectives",
              "overhead_s": "fixed costs per layer"}


def _head(r, layout_given: bool) -> str:
    how = "" if r.layout is None or layout_given else ", the faster layout for this shape"
    hosts = ("" if r.chips_per_host is None or r.chips <= r.chips_per_host else
             f" in {r.chips // r.chips_per_host} hosts of {r.chips_per_host}")
    return (f"{r.model} on {r.chips} × {r.hardware}{hosts} ({_layout(r)}{how}); weights "
            f"{r.weights}, KV cache {r.kv}, compute {r.compute}")


def _efficiency(r) -> str:
    if r.efficiency == "ideal":
        return "  efficiency: ideal (the bare roofline: every roof reached, no fixed cost)"
    return (f"  efficiency: {r.efficiency}, MBU {r.mbu:.0%}, MFU {r.mfu:.0%} "
            f"(`inferbook calibrate` shows the fit; --ideal for the bare roofline)")


def _spans_hosts(r) -> bool:
    return r.chips_per_host is not None and r.chips > r.chips_per_host


def breakdown_report(r: Estimate) -> str:
    """Where the decode step's time goes: each component alone, and its share of the step
    (with the collectives' share between hosts when the chips span hosts)."""
    b = r.breakdown
    width = max(len(label) for label in _BREAKDOWN.values())
    lines = ["  decode step, each component alone (they overlap; the step is not their sum):"]
    for key in BREAKDOWN_PARTS:
        value = getattr(b, key)
        lines.append(f"    {_BREAKDOWN[key]:<{width}}  {fmt_seconds(value, 3):>10}  "
                     f"{value / b.step_s:>6.0%} of the step")
        if key == "communication_s" and _spans_hosts(r):
            label = "  of which between hosts"
            lines.append(f"    {label:<{width}}  {fmt_seconds(b.dcn_s, 3):>10}  "
                         f"{b.dcn_s / b.step_s:>6.0%} of the step")
    lines.append(f"    {'the step':<{width}}  {fmt_seconds(b.step_s, 3):>10}")
    return "\n".join(lines)


def single_report(r: Estimate, layout_given: bool = False, breakdown: bool = False) -> str:
    """One estimate, a line per field, with its unit."""
    head = (_head(r, layout_given) + f"; batch {r.batch:,}, context {r.context:,}, "
            f"prompt {r.prompt:,}" + ("" if r.output is None else f", output {r.output:,}"))
    fields = [(label, fmt) for key, label, fmt in _FIELDS
              if key not in _OPTIONAL or getattr(r, _OPTIONAL[key]) is not None]
    width = max(len(label) for label, _ in fields)
    lines = [head, _efficiency(r), *(f"  {label:<{width}}  {fmt(r)}" for label, fmt in fields)]
    return "\n".join(lines + ([breakdown_report(r)] if breakdown else []))


def sweep_report(rows: Sequence, layout_given: bool = False, breakdown: bool = False) -> str:
    """A sweep: what all rows share, then a row per (context, batch)."""
    r0 = rows[0]
    head = [_head(r0, layout_given) + f"; prompt {r0.prompt:,}"
            + ("" if r0.output is None else f", output {r0.output:,}"), _efficiency(r0),
            f"  parameters {fmt_count(r0.params, 2)} (active {fmt_count(r0.active_params, 2)}),"
            f" weights {_bytes(r0.param_bytes)}, device memory {_bytes(r0.hbm_bytes)}"]
    gen, price = r0.output is not None, r0.price_per_chip_hour is not None
    parts = list(BREAKDOWN_PARTS) if breakdown else []
    if breakdown and _spans_hosts(r0):
        parts.insert(parts.index("communication_s") + 1, "dcn_s")
    cols = (["batch", "context", "fits", "KV cache GB", "step ms", "tok/s/user", "tok/s",
             "tok/s/chip", "TTFT s"] + (["generation s"] if gen else [])
            + (["$/M tokens"] if price else []) + [f"{k[:-2]} ms" for k in parts]
            + (["layout"] if r0.chips > 1 else []))
    body = [[f"{r.batch:,}", f"{r.context:,}", "yes" if r.fits else "NO",
             f"{r.kv_bytes / 1e9:,.2f}", f"{r.step_time_s * 1e3:,.3f}",
             f"{r.tokens_per_s_per_user:,.1f}", f"{r.tokens_per_s:,.1f}",
             f"{r.tokens_per_s_per_chip:,.1f}", f"{r.ttft_s:,.3f}"]
            + ([f"{r.generation_time_s:,.3f}"] if gen else [])
            + ([f"{r.usd_per_million_tokens:,.4g}"] if price else [])
            + [f"{getattr(r.breakdown, k) * 1e3:,.3f}" for k in parts]
            + ([_layout(r)] if r0.chips > 1 else []) for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]
    lines = ["  " + "  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  " + "  ".join(v.rjust(w) for v, w in zip(b, widths)) for b in body]
    return "\n".join(head + lines)


def report(rows: Sequence, layout_given: bool = False, breakdown: bool = False) -> str:
    return single_report(rows[0], layout_given, breakdown) if len(rows) == 1 else \
        sweep_report(rows, layout_given, breakdown)


def model_list() -> list[dict]:
    """A row per preset: name, family traits, parameters."""
    rows = []
    for name, cfg in PRESETS.items():
        kind = cfg.attention_kind + (f", MoE {cfg.moe.k} of {cfg.moe.E}" if cfg.moe else "")
        rows.append({"name": name, "layers": cfg.L, "d_model": cfg.D, "attention": kind,
                     "params": fmt_count(param_count(cfg), 2),
                     "active": fmt_count(active_param_count(cfg), 2),
                     "positions": cfg.max_seq_len})
    return rows


def chip_list() -> list[dict]:
    """A row per chip of the registry."""
    return [{"name": c.name, "memory_GB": round(c.hbm_bytes / 1e9, 1),
             "bandwidth_GB_s": round(c.hbm_bytes_per_s / 1e9),
             "bf16_TFLOP_s": round(c.bf16_flops_per_s / 1e12, 1),
             "interconnect": c.interconnect or "—",
             "link_GB_s_x_links": ("—" if c.link_bytes_per_s is None
                                   else f"{c.link_bytes_per_s / 1e9:g} x {c.links}"),
             "max_chips": c.max_chips or "—"} for c in CHIPS.values()]


def save_plot(rows: Sequence, path: Path) -> None:
    """Write the latency–throughput figure of `rows` to `path` (no GUI needed)."""
    # matplotlib takes a second to import: only a command that plots pays for it.
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from inferbook.perf.pareto_plot import pareto_figure
    fig = pareto_figure(rows)
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=120)
