"""Benchmarks: the library's decode step and prefill measured against the roofline, on the device
it runs on, and saved as data files the book plots (`inferbook bench`, chapter 2; the records
and where they are kept: `bench_results`).

Three kinds of measurement, each a row of the result:

* microbenchmarks — the device's achieved read bandwidth W and matmul throughput C
  (`inferbook.perf.microbench`): the two roofs, measured;
* decode — one step of `decode.generate` at each batch size and context length, timed in
  alternation with the model's matmuls alone and its attention alone (`calibration`), so that
  the calibrated prediction (matmuls + attention + a tiny model's step) sits beside it;
* prefill — `decode.prefill` of one prompt per length: tokens per second and MFU.

Utilisation, as the sources define it (the scaling book, part 7; "Transformer Inference
Arithmetic" for MBU):

    MBU = bytes a step must move / step time / bandwidth
    MFU = FLOPs a step must do  / step time / peak FLOP/s

A decode step must read every matmul weight once and every sequence's cached keys and values;
it must do 2 FLOPs per matmul weight per sequence plus attention's two products. Each ratio is
given against the measured roof and, where `inferbook.perf.hardware` has the chip, its datasheet
(None, shown as n/a, elsewhere). A decode row's bandwidth is measured in alternation with its
step, so that a machine shared with other work slows both alike and MBU stays meaningful; C
is the best FLOP/s any matmul reached. Every decode row carries the estimator's predictions
and errors: the calibrated one, and the roofline with measured W and C (and the datasheet's).
"""

from __future__ import annotations

import datetime
import os
import statistics
from typing import Any, Sequence

import jax
import jax.numpy as jnp

from inferbook import __version__
from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.decoder import init_params
from inferbook.perf import calibration, counts, decode_roofline, roofline, timing
from inferbook.perf.bench_results import DEFAULT_BATCHES, bandwidth_bytes
from inferbook.perf.hardware import chip_for_device
from inferbook.perf.microbench import (
    Read,
    default_dtype,
    measured_chip,
    peak_matmul_flops,
    read_programs,
    read_rates,
)

__all__ = ["mbu", "mfu", "decode_bytes", "decode_flops", "microbenchmarks", "run_benchmark",
           "summary"]


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


def microbenchmarks(platform: str, reads: Sequence[Read], quick: bool = False,
                    repeats: int = 5) -> dict[str, float]:
    """The device's two roofs, measured: read bandwidth (B/s) and matmul throughput (FLOP/s).

    Matmul shapes are sized to the device: a CPU reaches its peak with 1024×4096 products of
    a few hundred rows, a GPU needs 8192×8192 products of thousands.
    """
    times = timing.time_alternating([read.run for read in reads], repeats)
    D, F, rows = ((512, 1024, (256,)) if quick else (1024, 4096, (256, 512))) \
        if platform == "cpu" else ((4096, 4096, (2048,)) if quick else (8192, 8192, (4096, 8192)))
    return {**read_rates(reads, [t.median_s for t in times]).as_record(),
            "microbenchmark_flops_per_s": peak_matmul_flops(D, F, rows)}


def _decode_row(params: dict, cfg: ModelConfig, batch: int, context: int,
                reads: Sequence[Read], overhead: float, repeats: int) -> dict[str, Any]:
    """One decode configuration. The step, the model's matmuls alone, its attention alone and
    the two bandwidth reads run in alternation: whatever else loads the machine falls on all
    of them alike, so MBU compares the step with the bandwidth available at the same time."""
    itemsize = params["embed"].dtype.itemsize
    matmul, attention_layer, step, *read_times = timing.time_alternating(
        [calibration.model_matmul_program(params, cfg, batch),
         calibration.attention_program(cfg, batch, context, params["embed"].dtype, layers=1),
         calibration.decode_stepper(params, cfg, batch, context),
         *(read.run for read in reads)], repeats)
    predicted = matmul.median_s + cfg.L * attention_layer.median_s + overhead
    return dict(kind="decode", batch=batch, context=context, measured_s=step.median_s,
                compile_s=step.compile_s,
                **read_rates(reads, [t.median_s for t in read_times]).as_record(),
                bytes=decode_bytes(cfg, batch, context, itemsize),
                flops=decode_flops(cfg, batch, context), matmul_s=matmul.median_s,
                attention_s=cfg.L * attention_layer.median_s, overhead_s=overhead,
                predicted_s=predicted, error=predicted / step.median_s - 1)


def _prefill_row(params: dict, cfg: ModelConfig, length: int, repeats: int) -> dict[str, Any]:
    """Prefill of one prompt of `length` tokens: time, tokens per second, bytes and FLOPs."""
    tokens = jnp.zeros((1, length), jnp.int32)
    lengths = jnp.full((1,), length, jnp.int32)
    cache = kvcache.init_cache(cfg, 1, length, params["embed"].dtype)
    t = timing.time_fn(decode.prefill, params, cfg, tokens, lengths, cache, repeats=repeats)
    return dict(kind="prefill", batch=1, context=length, measured_s=t.median_s,
                compile_s=t.compile_s, tokens_per_s=length / t.median_s,
                # weights read once, the prompt's keys and values written
                bytes=decode_bytes(cfg, 1, length, params["embed"].dtype.itemsize),
                flops=counts.forward_flops(cfg, 1, length, logits_for=1))


def _utilisation(row: dict[str, Any], W: float, C: float,
                 spec: tuple[float, float, str] | None, P: int, weight_bytes: float) -> None:
    """Add achieved rates, MBU, MFU and the rooflines' predictions to a measured row. W is the
    row's own read bandwidth where it has one; a decode step's roofline is the estimator's
    `step_time`, prefill's max(FLOPs / C, bytes / W)."""
    t, nbytes, flops = row["measured_s"], row["bytes"], row["flops"]
    W = row.get("read_bytes_per_s", W)
    row.update(bytes_per_s=nbytes / t, flops_per_s=flops / t,
               mbu_measured=mbu(nbytes, t, W), mbu_spec=mbu(nbytes, t, spec and spec[0]),
               mfu_measured=mfu(flops, t, C), mfu_spec=mfu(flops, t, spec and spec[1]))
    for key, chip in [("roofline", measured_chip(W, C)),
                      ("spec_roofline", spec and measured_chip(spec[0], spec[1]))]:
        if chip is None:
            row.update({f"{key}_s": None, f"{key}_error": None})
            continue
        if row["kind"] == "decode":
            roof = decode_roofline.decode_step_time(P, weight_bytes, nbytes - weight_bytes,
                                                    row["batch"], chip)
        else:
            roof = roofline.roofline_time(flops, nbytes, chip)
        row.update({f"{key}_s": roof, f"{key}_error": roof / t - 1})


def _spec_chip(device_kind: str) -> tuple[float, float, str] | None:
    """(bandwidth, bf16 FLOP/s, name) from `inferbook.perf.hardware` for this device, or None."""
    chip = chip_for_device(device_kind)
    return None if chip is None else (chip.hbm_bytes_per_s, chip.bf16_flops_per_s, chip.name)


def run_benchmark(cfg: ModelConfig, batches: Sequence[int] = DEFAULT_BATCHES,
                  contexts: Sequence[int] = (128,), prefill: Sequence[int] = (128,),
                  repeats: int = 5, quick: bool = False, dtype: Any = None, seed: int = 0,
                  show_progress: bool = True, note: str = "") -> dict[str, Any]:
    """Measure everything for `cfg` on the default device; returns the results record.

    Weights are random (`decoder.init_params`), in `dtype` (default float32 on a CPU, bfloat16
    elsewhere). Every timing is a median over `repeats` runs after compilation and a warm-up;
    compile time is reported apart. A progress bar goes to stderr unless show_progress=False.
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
    for kind, B, S in tasks:
        if kind == "micro":
            reads = read_programs(bandwidth_bytes(dev.platform, quick))
            micro = microbenchmarks(dev.platform, reads, quick, repeats)
            overhead = calibration.step_overhead(cfg, repeats=repeats)
        elif kind == "decode":
            rows.append(_decode_row(params, cfg, B, S, reads, overhead, repeats))
        else:
            rows.append(_prefill_row(params, cfg, S, repeats))
    # C: the best FLOP/s any matmul reached, the microbenchmark's or the model's own (an
    # empirical roofline, as `calibration.decode_sweep` takes it).
    P = counts.matmul_params(cfg)
    weight_bytes = decode_bytes(cfg, 0, 0, jnp.dtype(dtype).itemsize)
    micro["matmul_flops_per_s"] = max([micro["microbenchmark_flops_per_s"]] + [
        2 * r["batch"] * P / r["matmul_s"] for r in rows if r["kind"] == "decode"])
    for r in rows:
        _utilisation(r, micro["read_bytes_per_s"], micro["matmul_flops_per_s"], spec, P,
                     weight_bytes)
    record = dict(
        source="inferbook bench", device=timing.device_name(), platform=dev.platform,
        chip=spec and spec[2], spec_bytes_per_s=spec and spec[0],
        spec_flops_per_s=spec and spec[1],
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        inferbook_version=__version__, jax_version=jax.__version__,
        model=cfg.name, dtype=str(jnp.dtype(dtype)), params=counts.param_count(cfg),
        weight_bytes=weight_bytes, repeats=repeats, quick=quick, cpu_count=os.cpu_count(),
        load_average_before=load_before, load_average_after=_load(),
        note=note, overhead_s=overhead, **micro, rows=rows)
    record["summary"] = summary(record)
    return record


def _load() -> list[float] | None:
    """The machine's 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers: MBU at batch 1 (smallest context) — against the bandwidth read in
    alternation with it, and against the microbenchmark's — and the calibrated estimator's
    median and worst |error| over all decode rows."""
    decode = [r for r in record["rows"] if r["kind"] == "decode"]
    if not decode:
        return {}
    first = min((r for r in decode if r["batch"] == min(d["batch"] for d in decode)),
                key=lambda r: r["context"])
    errors = [abs(r["error"]) for r in decode]
    # Also against the run's standalone read at the start: quieter moments read faster.
    alone = mbu(first["bytes"], first["measured_s"], record.get("read_bytes_per_s"))
    return {"batch": first["batch"], "context": first["context"],
            "mbu_measured": first["mbu_measured"], "mbu_microbenchmark": alone,
            "mbu_spec": first["mbu_spec"],
            "median_abs_error": statistics.median(errors), "worst_abs_error": max(errors)}
