"""Benchmarks: the library's decode step and prefill measured against the roofline, on the device
it runs on, and saved as data files the book plots (`inferbook bench`, chapter 2; the records
and where they are kept: `bench_results`; the targets a record is held to: `bench_targets`).

Three kinds of measurement, each a row of the result (or a field of the record):

* the two roofs — the read roof W (`inferbook.perf.read_roof`: the best of several read
  kernels, each by its fastest run) and matmul throughput C (`inferbook.perf.microbench`);
* decode — one step of `decode.generate` at each batch size and context length, timed in
  alternation with its calibrated parts (`calibration.decode_parts`) and the read kernels,
  so that the calibrated prediction sits beside it and the roof is read again each time;
* prefill — `decode.prefill` of one prompt per length, with its calibrated parts: tokens per
  second, MFU, and the prediction's error.

Utilisation, as the sources define it (the scaling book, part 7; "Transformer Inference
Arithmetic" for MBU):

    MBU = bytes a step must move / step time / bandwidth
    MFU = FLOPs a step must do  / step time / peak FLOP/s

A decode step must read every matmul weight once and every sequence's cached keys and values;
it must do 2 FLOPs per matmul weight per sequence plus attention's two products. Each ratio is
given against the measured roof and, where `inferbook.perf.hardware` has the chip, its datasheet
(None, shown as n/a, elsewhere). The measured read roof is the fastest read of the whole run —
every read kernel, and every decode step, since a step is itself a read of its weights and
caches — so MBU against it is at most 100% by construction; the record says which kernel set
it, and what the read kernels alone reached. C is the best FLOP/s any matmul reached, or
any measured step or prefill, so MFU too is at most 100%. Every timed call follows an
untimed call of its own program (`LEAD_IN`), as a step follows a step in a generation. Every
row carries the estimator's predictions and errors: the calibrated one, and the roofline with
measured W and C (and the datasheet's).
"""

from __future__ import annotations

import datetime
import os
import statistics
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from inferbook import __version__
from inferbook.model import decode_layout
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import init_params
from inferbook.perf import calibration, counts, decode_roofline, step_programs, timing
from inferbook.perf.bench_results import DEFAULT_BATCHES, bandwidth_bytes
from inferbook.perf.hardware import chip_for_device
from inferbook.perf.microbench import default_dtype, measured_chip, peak_matmul_flops
from inferbook.perf.read_roof import (
    Read,
    ReadRoof,
    best_and_median_rates,
    measure_read_roof,
    read_programs,
)
from inferbook.perf.step_cost import StepCost, Work, step_time

__all__ = ["mbu", "mfu", "decode_bytes", "decode_flops", "run_benchmark", "peer_speedup",
           "summary"]


# Each configuration runs at least `repeats` rounds, and more (up to four times as many) until
# its timed runs add up to this many seconds: a cheap configuration's medians, over few
# rounds, swung by a tenth from run to run on a CPU whose reads vary by a quarter per call.
ROW_BUDGET_S = 4.0
# Each timed call follows one untimed call of the same program (`timing.time_alternating`):
# `decode.generate` runs a step right after a step, not right after a 256 MiB read or another
# model's program. Measured while writing this (three pairs of quick runs, 2-core CPU, jax
# 0.10.2), the batch-1 step's median came out 1-16% lower with the lead-in than without, and
# a step timed alone in a loop of 200 (10.4 ms) was faster than most alternated medians
# (10.0-12.5 ms). The read kernels, the calibrated parts and prefill are timed the same way,
# so the step, its prediction and its roof stay like for like.
LEAD_IN = 1


def mbu(nbytes: float, seconds: float, bytes_per_s: float | None) -> float | None:
    """Model bandwidth utilisation: nbytes / seconds / bytes_per_s (None without a roof)."""
    return None if not bytes_per_s else nbytes / seconds / bytes_per_s


def mfu(flops: float, seconds: float, flops_per_s: float | None) -> float | None:
    """Model FLOP utilisation: flops / seconds / flops_per_s (None without a roof)."""
    return None if not flops_per_s else flops / seconds / flops_per_s


def decode_bytes(cfg: ModelConfig, batch: int, context: int, itemsize: float) -> float:
    """Bytes one decode step must read: every matmul weight and B caches of `context` tokens."""
    return (counts.matmul_params(cfg) * itemsize
            + counts.kv_cache_bytes(cfg, batch, context, itemsize))


def decode_flops(cfg: ModelConfig, batch: int, context: int) -> float:
    """FLOPs of one decode step: 2·B per matmul weight, and each new query against context + 1
    keys (its cache and itself)."""
    return (2 * batch * counts.matmul_params(cfg)
            + counts.attention_flops(cfg, batch, 1, context + 1))


def _decode_row(params: dict, skeleton_params: dict, cfg: ModelConfig, batch: int,
                context: int, reads: Sequence[Read], repeats: int
                ) -> tuple[dict, ReadRoof, ReadRoof]:
    """One decode configuration: the step and its calibrated parts (`calibration.decode_parts`)
    timed in alternation with the read kernels, so that the roof is read again beside every
    configuration. The weights are in the layout the step reads fastest at this batch
    (`decode_layout.for_batch`). Returns the row, the reads' best rates and their median
    rates (what a read reaches in a typical call rather than its luckiest)."""
    params = decode_layout.for_batch(params, cfg, batch)
    skeleton_params = decode_layout.for_batch(skeleton_params, step_programs.skeleton(cfg),
                                              batch)
    parts, timed = calibration.time_parts(
        calibration.decode_parts(params, skeleton_params, cfg, batch, context), repeats,
        others=[read.run for read in reads], budget_s=ROW_BUDGET_S, lead_in=LEAD_IN)
    roof, typical = best_and_median_rates(reads, timed[calibration.PROGRAMS:])
    itemsize = params["embed"].dtype.itemsize
    return dict(kind="decode", batch=batch, context=context, **parts.as_record(),
                layout="decode" if decode_layout.is_decode_layout(params) else "weights",
                best_s=timed[0].min_s, compile_s=timed[0].compile_s,
                rounds=len(timed[0].times_s), read_bytes_per_s=roof.best,
                bytes=decode_bytes(cfg, batch, context, itemsize),
                flops=decode_flops(cfg, batch, context)), roof, typical


def _prefill_row(params: dict, skeleton_params: dict, cfg: ModelConfig, length: int,
                 repeats: int) -> dict[str, Any]:
    """Prefill of one prompt of `length` tokens and its calibrated parts: time, tokens per
    second, bytes (weights read once, the prompt's keys and values written) and FLOPs."""
    parts, timed = calibration.time_parts(
        calibration.prefill_parts(params, skeleton_params, cfg, length), repeats,
        budget_s=ROW_BUDGET_S, lead_in=LEAD_IN)
    return dict(kind="prefill", batch=1, context=length, **parts.as_record(),
                best_s=timed[0].min_s, compile_s=timed[0].compile_s,
                rounds=len(timed[0].times_s),
                tokens_per_s=length / parts.measured_s,
                bytes=decode_bytes(cfg, 1, length, params["embed"].dtype.itemsize),
                flops=counts.forward_flops(cfg, 1, length, logits_for=1))


def _utilisation(row: dict[str, Any], W: float, C: float,
                 spec: tuple[float, float, str] | None, P: int, weight_bytes: float) -> None:
    """Add achieved rates, MBU, MFU and the rooflines' predictions to a measured row. W is
    the run's read roof; a decode step's roofline is the estimator's `step_time`, prefill's
    max(FLOPs / C, bytes / W)."""
    t, nbytes, flops = row["measured_s"], row["bytes"], row["flops"]
    row.update(bytes_per_s=nbytes / t, flops_per_s=flops / t,
               mbu_measured=mbu(nbytes, t, W), mbu_spec=mbu(nbytes, t, spec and spec[0]),
               mfu_measured=mfu(flops, t, C), mfu_spec=mfu(flops, t, spec and spec[1]))
    for key, chip in [("roofline", measured_chip(W, C)),
                      ("spec_roofline", spec and measured_chip(spec[0], spec[1]))]:
        if chip is None:
            row.update({f"{key}_s": None, f"{key}_error": None})
            continue
        if row["kind"] == "decode":
            roof = step_time(decode_roofline.decode_step_cost(
                P, weight_bytes, nbytes - weight_bytes, row["batch"]), chip)
        else:
            roof = step_time(StepCost((Work("prefill", flops, nbytes),)), chip)
        row.update({f"{key}_s": roof, f"{key}_error": roof / t - 1})


def _spec_chip(device_kind: str) -> tuple[float, float, str] | None:
    """(bandwidth, bf16 FLOP/s, name) from `inferbook.perf.hardware` for this device, or None."""
    chip = chip_for_device(device_kind)
    return None if chip is None else (chip.hbm_bytes_per_s, chip.bf16_flops_per_s, chip.name)


def _matmul_shapes(platform: str, quick: bool) -> tuple[int, int, tuple[int, ...]]:
    """D, F and row counts of the FLOP/s microbenchmark: a CPU reaches its peak with
    1024×4096 products of a few hundred rows, a GPU needs 8192×8192 products of thousands."""
    if platform == "cpu":
        return (512, 1024, (256,)) if quick else (1024, 4096, (256, 512))
    return (4096, 4096, (2048,)) if quick else (8192, 8192, (4096, 8192))


def run_benchmark(cfg: ModelConfig, batches: Sequence[int] = DEFAULT_BATCHES,
                  contexts: Sequence[int] = (128,), prefill: Sequence[int] = (128,),
                  repeats: int = 5, quick: bool = False, dtype: Any = None, seed: int = 0,
                  show_progress: bool = True, note: str = "") -> dict[str, Any]:
    """Measure everything for `cfg` on the default device; returns the results record.

    Weights are random (`decoder.init_params`), in `dtype` (default float32 on a CPU, bfloat16
    elsewhere). Every timing is a median over `repeats` rounds after compilation and a
    warm-up, compile time reported apart; each read kernel counts by its fastest run. The
    read roof W is the best rate of every read kernel over the whole run and of every decode
    step (`ReadRoof.with_program`), so no step's MBU can exceed 100%. A progress bar goes
    to stderr unless show_progress=False.
    """
    dtype = default_dtype() if dtype is None else dtype
    dev = jax.devices()[0]
    spec = _spec_chip(dev.device_kind) if dev.platform != "cpu" else None
    load_before = _load()
    tasks = [("micro", 0, 0)] + [("decode", B, S) for S in contexts for B in batches] \
        + [("prefill", 1, T) for T in prefill]
    if show_progress:
        tasks = timing.progress(tasks, desc=f"bench {cfg.name}", total=len(tasks))
    rows: list[dict[str, Any]] = []
    params = init_params(cfg, seed, dtype)
    skeleton_params = init_params(step_programs.skeleton(cfg), seed, dtype)
    typical = ReadRoof()           # each read kernel's best median over the configurations
    for kind, B, S in tasks:
        if kind == "micro":
            reads = read_programs(bandwidth_bytes(dev.platform, quick))
            roof = reads_at_start = measure_read_roof(reads=reads, repeats=max(repeats, 6))
            D, F, matmul_rows = _matmul_shapes(dev.platform, quick)
            C0 = peak_matmul_flops(D, F, matmul_rows)
        elif kind == "decode":
            row, row_roof, row_typical = _decode_row(params, skeleton_params, cfg, B, S,
                                                     reads, repeats)
            rows.append(row)
            roof, typical = roof.merge(row_roof), typical.merge(row_typical)
        else:
            rows.append(_prefill_row(params, skeleton_params, cfg, S, repeats))
    reads_alone = roof
    for r in rows:                      # a memory-bound program the reads did not beat ...
        if r["kind"] == "decode":       # ... raises the roof to what it achieved
            roof = roof.with_program(f"decode step B={r['batch']} S={r['context']}",
                                     r["bytes"] / r["best_s"])
    # C: the best FLOP/s any matmul reached, the microbenchmark's or the model's own (an
    # empirical roofline, as `calibration.decode_sweep` takes it), and at least what any
    # measured step or prefill did: a FLOP roof a program beat was not one (MFU <= 100%).
    P = counts.matmul_params(cfg)
    weight_bytes = decode_bytes(cfg, 0, 0, jnp.dtype(dtype).itemsize)
    C = max([C0] + [2 * r["batch"] * P / r["matmul_s"] for r in rows if r["kind"] == "decode"]
            + [r["flops"] / r["measured_s"] for r in rows])
    for r in rows:
        _utilisation(r, roof.best, C, spec, P, weight_bytes)
    record = dict(
        source="inferbook bench", device=timing.device_name(), platform=dev.platform,
        chip=spec and spec[2], spec_bytes_per_s=spec and spec[0],
        spec_flops_per_s=spec and spec[1],
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        inferbook_version=__version__, jax_version=jax.__version__,
        model=cfg.name, dtype=str(jnp.dtype(dtype)), params=counts.param_count(cfg),
        weight_bytes=weight_bytes, repeats=repeats, lead_in=LEAD_IN, quick=quick,
        cpu_count=os.cpu_count(),
        load_average_before=load_before, load_average_after=_load(), note=note,
        **roof.as_record(), reads_bytes_per_s=reads_alone.best,
        reads_at_start_bytes_per_s=reads_at_start.best,
        read_median_bytes_per_s=typical.best, read_kernels_median=dict(typical.rates),
        microbenchmark_flops_per_s=C0, matmul_flops_per_s=C,
        attention_timed=calibration.ATTENTION_TIMED, rows=rows)
    record["summary"] = summary(record)
    return record


def _load() -> list[float] | None:
    """The machine's 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def peer_speedup(record: dict[str, Any]) -> float | None:
    """Hugging Face's seconds per token over the library's, where the peer ran (else None)."""
    peer = {p["name"].split(" (")[0]: p["seconds_per_token"] for p in record.get("peer", [])}
    ours, theirs = peer.get("inferbook decode.generate"), peer.get("transformers generate")
    return None if not ours or not theirs else theirs / ours


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers: MBU at batch 1 (smallest context) against the run's roof, what
    set that roof, MBU against the read kernels alone (above 100% when the step beat them),
    the calibrated estimator's median and worst |error| over every decode and prefill row,
    and the speedup over Hugging Face's generate where the peer ran. Where the run kept the
    read kernels' medians: the share of their best that a typical read reached (a median
    step can reach little more of the roof than that), and the batch-1 step's median against
    the reads' median (like against like; above 100% when the step read faster)."""
    decode = [r for r in record["rows"] if r["kind"] == "decode"]
    if not decode:
        return {}
    first = min((r for r in decode if r["batch"] == min(d["batch"] for d in decode)),
                key=lambda r: r["context"])
    errors = [abs(r["error"]) for r in record["rows"] if r.get("error") is not None]
    return {"batch": first["batch"], "context": first["context"],
            "mbu_measured": first["mbu_measured"], "roof_kernel": record.get("read_kernel"),
            "mbu_reads": mbu(first["bytes"], first["measured_s"],
                             record.get("reads_bytes_per_s")),
            "mbu_spec": first["mbu_spec"], "median_abs_error": statistics.median(errors),
            "worst_abs_error": max(errors), "peer_speedup": peer_speedup(record),
            "read_median_share": (record["read_median_bytes_per_s"]
                                  / record["reads_bytes_per_s"]
                                  if record.get("read_median_bytes_per_s") else None),
            "step_vs_read_median": mbu(first["bytes"], first["measured_s"],
                                       record.get("read_median_bytes_per_s"))}
