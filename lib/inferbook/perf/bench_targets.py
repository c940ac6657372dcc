"""The targets a CPU benchmark run is held to, and which of them a record meets.

`inferbook bench` on a CPU measures the library's decode step against the device's read roof,
against Hugging Face's `generate`, and against its own calibrated prediction. The book holds
those numbers to four targets (chapter 2 states them, shows which record meets which, and its
live sweep checks the estimator against the same numbers):

* MBU at batch 1 of at least 80%: a decode step of the benchmark model streams its weights at
  four fifths of the best read this machine achieved in the same run;
* at least twice as fast per generated token as transformers' static-cache `generate` on the
  same architecture, weights and prompt (measured when the peer runs: `--peer on`);
* the calibrated prediction within 5% of the measured time in the median over every decode
  configuration (batch 1 to 256) and every prefill, and within 10% at worst.

A measurement taken while other programs loaded the machine says more about them than about
the library, so a record is *held* to the targets only when it is a CPU run of the benchmark
model in its default dtype and the machine was quiet when it started: a 1-minute load average
of at most half the cores. Records from before the read roof (`inferbook.perf.read_roof`, a
record with `read_kernels`) measured MBU against one read kernel and predicted with the sum
of parts; they are kept as history, not held. Nothing here starts JAX.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TARGETS", "TARGET_WORDS", "QUIET_LOAD_PER_CORE", "quiet", "held", "why_not_held",
           "check", "missed"]

TARGETS = {"mbu": 0.80, "peer_speedup": 2.0, "median_abs_error": 0.05, "worst_abs_error": 0.10}
# What each target asks, in words (and a format for its threshold).
TARGET_WORDS = {"mbu": "MBU at batch 1 >= {:.0%}",
                "peer_speedup": "time per token <= 1/{:g} of transformers' generate",
                "median_abs_error": "calibrated |error| median <= {:.0%}",
                "worst_abs_error": "calibrated |error| worst <= {:.0%}"}
QUIET_LOAD_PER_CORE = 0.5
BENCH_MODEL, BENCH_DTYPE = "cpu-336mb", "float32"      # `bench_results.default_model("cpu")`


def quiet(record: dict[str, Any]) -> bool:
    """Whether the machine was quiet when the run started: a 1-minute load average of at most
    half its cores (False when the record has no load average)."""
    load = record.get("load_average_before")
    return load is not None and load[0] <= QUIET_LOAD_PER_CORE * record["cpu_count"]


def held(record: dict[str, Any]) -> bool:
    """Whether the record is held to the targets: a CPU run of the benchmark model in its
    default dtype, measured against the read roof, started on a quiet machine."""
    return (record.get("platform") == "cpu" and record.get("model") == BENCH_MODEL
            and record.get("dtype") == BENCH_DTYPE and "read_kernels" in record
            and quiet(record))


def why_not_held(record: dict[str, Any]) -> str | None:
    """Why a record is not held to the targets ("gpu", "model", "earlier", "load"), or None
    if it is: the first reason that applies, in that order."""
    if record.get("platform") != "cpu":
        return "gpu"
    if record.get("model") != BENCH_MODEL or record.get("dtype") != BENCH_DTYPE:
        return "model"
    if "read_kernels" not in record:
        return "earlier"
    return None if quiet(record) else "load"


def check(record: dict[str, Any]) -> dict[str, bool | None]:
    """Each target: True if the record meets it, False if not, None if the record did not
    measure it (no peer ran, no row of that kind)."""
    s = record.get("summary") or {}
    value = {"mbu": s.get("mbu_measured"), "peer_speedup": s.get("peer_speedup"),
             "median_abs_error": s.get("median_abs_error"),
             "worst_abs_error": s.get("worst_abs_error")}
    at_least = {"mbu", "peer_speedup"}
    return {k: None if value[k] is None else
            (value[k] >= t if k in at_least else value[k] <= t) for k, t in TARGETS.items()}


def missed(record: dict[str, Any]) -> list[str]:
    """The targets a held record missed, in words with the measured value; [] for a record
    that is not held or met them all."""
    if not held(record):
        return []
    s = record["summary"]
    measured = {"mbu": f"{s.get('mbu_measured', 0):.1%}",
                "peer_speedup": f"{s.get('peer_speedup') or 0:.2f}x",
                "median_abs_error": f"{s.get('median_abs_error', 0):.1%}",
                "worst_abs_error": f"{s.get('worst_abs_error', 0):.1%}"}
    return [f"{TARGET_WORDS[k].format(TARGETS[k])} (measured {measured[k]})"
            for k, ok in check(record).items() if ok is False]
