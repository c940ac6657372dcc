"""`inferbook bench`: the library measured against the roofline on this device.

    inferbook bench                       # the full benchmark for this device's default model
    inferbook bench --quick --json        # a short run, as one JSON object on stdout
    inferbook bench --save                # and keep it: book/data/bench/<device>_<date>.json

Measures the device's read bandwidth and matmul FLOP/s, the decode step at every batch size
and context length asked for, and prefill of one prompt per length. Per configuration it
prints the step time, achieved bandwidth, MBU and MFU (against the measured roofs, and the
datasheet's where `inferbook.perf.hardware` knows the chip; n/a elsewhere), the calibrated
estimator's prediction and its error. On a GPU with torch and transformers installed it also
times Hugging Face `generate` (static cache, torch.compile) on the same architecture (--peer).
Medians after warm-up, each timed call right after an untimed call of the same program (as a
decode step follows a step), compile time apart; a progress bar on stderr.

The run is held to the book's targets for a CPU (`inferbook.perf.bench_targets`: MBU at batch
1, the speedup over transformers, the calibrated estimator's median and worst error) when it
measures the benchmark model on a quiet machine (a 1-minute load average at most half the
cores when it starts). With --save such a run that misses a target still saves its record,
and exits with code 1.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from typing import Any

from inferbook.book.present import fmt_rate, fmt_seconds
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset
from inferbook.perf import bench_results, bench_targets, counts

from . import UsageError
from . import args as types
from .resources import require_memory

__all__ = ["add_parser", "run", "memory_needed"]

HELP = "measure bandwidth, MBU/MFU and the estimator's error on this device"
MAX_REPEATS = 1000          # each repeat runs every configuration once more


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="PRESET",
                   help="a preset (default: cpu-336mb on a CPU, llama-3.2-1b elsewhere)")
    p.add_argument("--batches", metavar="B,B,...", type=types.int_list(),
                   help="batch sizes (default 1,2,4,...,256)")
    p.add_argument("--contexts", metavar="S,S,...", type=types.int_list(),
                   help="cached tokens per sequence (default 128,512)")
    p.add_argument("--prefill", metavar="T,T,...", type=types.int_list(none=True),
                   help="prompt lengths for prefill (default 128,512; 'none' to skip)")
    p.add_argument("--repeats", type=types.positive_int(MAX_REPEATS), default=None,
                   help="timed runs per configuration (default 7; 5 with --quick)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"],
                   help="weights (default float32 on a CPU, bfloat16 elsewhere)")
    p.add_argument("--quick", action="store_true",
                   help="batches 1,8, context 128, prefill 128, smaller microbenchmarks")
    p.add_argument("--peer", choices=["auto", "on", "off"], default="auto",
                   help="Hugging Face generate beside the library (auto: on a GPU with torch)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--save", action="store_true",
                   help="write the results under book/data/bench/ (or --out); exit 1 if a "
                   "run held to the book's targets missed one")
    p.add_argument("--out", type=types.writable_dir, metavar="DIR", help="directory for --save")
    p.add_argument("--levers", action="store_true",
                   help="instead: the decode step at batch 1 with and without each lever "
                   "(weight layouts, one program per step, bfloat16 weights, one core, "
                   "synchronous dispatch, an XLA flag); --save keeps it under "
                   "book/data/decode_levers/")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--note", default="", help="a remark kept in the results (e.g. how busy "
                   "the machine was)")
    p.set_defaults(run=run)


def _check(args) -> dict:
    """Every argument checked before JAX starts: one line and exit 2 for bad input."""
    quick = args.quick

    def pick(given, short, full):
        return given if given is not None else (short if quick else full)
    options = dict(batches=pick(args.batches, (1, 8), (1, 2, 4, 8, 16, 32, 64, 128, 256)),
                   contexts=pick(args.contexts, (128,), (128, 512)),
                   prefill=pick(args.prefill, (128,), (128, 512)),
                   repeats=pick(args.repeats, 5, 7))
    if args.out is not None and not args.save:
        raise UsageError("--out needs --save")
    if args.levers and (args.peer == "on" or args.batches or args.contexts or args.prefill
                        or args.dtype):
        raise UsageError("--levers measures batch 1 of the model in float32 (no --peer, "
                         "--batches, --contexts, --prefill or --dtype)")
    if args.model is not None:
        get_preset(args.model)                   # ConfigError (exit 2) for unknown names
    if args.peer == "on":
        missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
        if missing:
            raise UsageError(f"--peer on needs {' and '.join(missing)} (pip install torch "
                             "transformers)")
    if args.save:
        # Where the results will go must be writable now, not after the measurements.
        folder = bench_results.LEVERS_DIR if args.levers else bench_results.RESULTS_DIR
        try:
            types.writable_dir(str(bench_results.results_directory(args.out, folder)))
        except (FileNotFoundError, argparse.ArgumentTypeError) as err:
            raise UsageError(f"--save: {err}") from None
    return options


def memory_needed(cfg: ModelConfig, options: dict, itemsize: float, platform: str,
                  quick: bool) -> float:
    """A lower bound of the bytes the benchmark holds at its peak, from arithmetic alone.

    The weights (twice the matrices when batch 1 is measured: its rows read a copy in the
    decode layout), the read kernels' arrays (alive for the whole run), and the larger of
    the biggest decode row's cache (batch × (context + 1) tokens, plus one more layer for
    the attention-alone program) and the longest prefill's. What XLA adds is not counted, so
    a run this refuses could never have fit.
    """
    decode = max(counts.kv_cache_bytes(cfg, B, S + 1, itemsize) * (1 + 1 / cfg.L)
                 for B in options["batches"] for S in options["contexts"])
    prefill = max((counts.kv_cache_bytes(cfg, 1, T, itemsize) for T in options["prefill"]),
                  default=0)
    reads = bench_results.read_memory_bytes(platform, quick)
    copy = counts.matmul_params(cfg) * itemsize if 1 in options["batches"] else 0
    return counts.param_count(cfg) * itemsize + copy + reads + max(decode, prefill)


def _check_model(cfg: ModelConfig, options: dict, dtype, platform: str, quick: bool) -> None:
    """What needs the model and the device: its positions, and the memory the run takes."""
    longest = max(max(options["contexts"]) + 1, max(options["prefill"], default=0))
    if longest > cfg.max_seq_len:
        raise UsageError(f"{cfg.name} holds at most {cfg.max_seq_len} tokens; "
                         f"--contexts/--prefill ask for {longest - 1}")
    needed = memory_needed(cfg, options, dtype.itemsize, platform, quick)
    require_memory(needed, f"benchmarking {cfg.name} ({dtype.name}) at batch "
                   f"{max(options['batches'])} and context {max(options['contexts'])}")


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _print(record: dict) -> None:
    print(f"{record['device']} · {record['model']} ({record['dtype']}) · jax "
          f"{record['jax_version']} · inferbook {record['inferbook_version']}")
    spec = record["spec_bytes_per_s"]
    kernels = ", ".join(f"{name} {fmt_rate(rate)}"
                        for name, rate in record["read_kernels"].items())
    print(f"read roof {fmt_rate(record['read_bytes_per_s'])} ({record['read_kernel']}; "
          f"{fmt_rate(spec) if spec else 'n/a'} spec): {kernels}")
    print(f"matmul {fmt_rate(record['matmul_flops_per_s'], 'FLOP/s')} measured")
    print(f"{'kind':<8}{'B':>5}{'S':>6}{'measured':>11}{'compile':>10}{'bandwidth':>12}"
          f"{'MBU':>6}{'MBU spec':>9}{'MFU':>6}{'predicted':>11}{'error':>8}")
    for r in record["rows"]:
        pred = r.get("predicted_s", r["roofline_s"])
        err = r.get("error", r["roofline_error"])
        print(f"{r['kind']:<8}{r['batch']:>5}{r['context']:>6}{fmt_seconds(r['measured_s'], 2):>11}"
              f"{fmt_seconds(r['compile_s']):>10}{fmt_rate(r['bytes_per_s']):>12}"
              f"{_pct(r['mbu_measured']):>6}{_pct(r['mbu_spec']):>9}{_pct(r['mfu_measured']):>6}"
              f"{fmt_seconds(pred, 2):>11}{100 * err:>+7.0f}%")
    for p in record.get("peer", []):
        print(f"peer: {p['name']}: {fmt_seconds(p['seconds_per_token'], 2)} per token "
              f"(B={p['batch']}, prompt {p['prompt']})")
    s = record["summary"]
    if s:
        speedup = s.get("peer_speedup")
        print(f"batch {s['batch']} MBU {_pct(s['mbu_measured'])} of the read roof; calibrated "
              f"estimator |error| median {_pct(s['median_abs_error'])}, worst "
              f"{_pct(s['worst_abs_error'])}"
              + ("" if speedup is None else f"; {speedup:.2f}x transformers' generate"))
    _print_targets(record)


def _print_targets(record: dict) -> None:
    """Which of the book's targets the run met, and whether it is held to them."""
    if record["platform"] != "cpu":
        print("targets: the book's targets are for the CPU benchmark; not held here")
        return
    marks = {True: "met", False: "MISSED", None: "not measured"}
    results = bench_targets.check(record)
    status = ("held (a quiet machine)" if bench_targets.held(record) else
              "not held (" + ("load at start above half the cores" if not
                              bench_targets.quiet(record) else "not the benchmark model")
              + ")")
    print(f"targets, {status}: " + "; ".join(
        f"{bench_targets.TARGET_WORDS[k].format(t)}: {marks[results[k]]}"
        for k, t in bench_targets.TARGETS.items()))


def _run_levers(args: argparse.Namespace, cfg: ModelConfig) -> int:
    """`--levers`: each lever's effect on the batch-1 step, printed, and saved with --save."""
    from inferbook.perf import decode_levers
    rounds = args.repeats or (7 if args.quick else 15)
    record = decode_levers.measure_levers(cfg, rounds=rounds, child_rounds=1 if args.quick
                                          else 3, show_progress=not args.no_progress,
                                          note=args.note)
    if args.save:
        try:
            record["saved_to"] = str(bench_results.save(record, args.out,
                                                        bench_results.LEVERS_DIR))
        except OSError as err:
            raise UsageError(f"cannot save the results: {err.strerror or err}") from None
    if args.json:
        print(json.dumps(record, indent=1))
        return 0
    print(f"{record['device']} · {record['model']} · batch {record['batch']}, context "
          f"{record['context']} · jax {record['jax_version']}")
    for lever in record["levers"]:
        print(f"{lever['lever']:<44}{fmt_seconds(lever['before_s'], 2):>11} ->"
              f"{fmt_seconds(lever['after_s'], 2):>11}{100 * lever['change']:>+8.0f}%")
    if args.save:
        print(f"saved {record['saved_to']}")
    return 0


def run(args: argparse.Namespace) -> int:
    options = _check(args)
    if args.peer != "off":
        # JAX takes 75% of a GPU's memory at start unless told otherwise; torch needs some.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    # JAX starts here, once the arguments have passed (and the environment is set).
    import jax
    import jax.numpy as jnp

    from inferbook.perf import bench
    from inferbook.perf.microbench import default_dtype
    platform = jax.devices()[0].platform
    cfg = get_preset(args.model or bench_results.default_model(platform))
    if args.levers:
        require_memory(4 * counts.param_count(cfg) * 4, f"the levers of {cfg.name} (four "
                       "copies of its weights)")
        return _run_levers(args, cfg)
    dtype = jnp.dtype(args.dtype) if args.dtype else jnp.dtype(default_dtype())
    _check_model(cfg, options, dtype, platform, args.quick)
    record = bench.run_benchmark(cfg, quick=args.quick, dtype=dtype,
                                 show_progress=not args.no_progress, note=args.note, **options)
    peer = args.peer == "on" or (args.peer == "auto" and platform == "gpu")
    if peer:
        # Only now: Hugging Face's side needs torch and transformers, optional dependencies.
        from inferbook.perf import hf_peer as peer_mod
        try:
            record["peer"] = peer_mod.compare(cfg, batch=1, prompt=options["contexts"][0],
                                              dtype=record["dtype"])
        except ImportError as err:
            if args.peer == "on":
                raise UsageError(f"--peer on needs torch and transformers: {err}") from None
        record["summary"] = bench.summary(record)
    if args.save:
        try:
            record["saved_to"] = str(bench_results.save(record, args.out))
        except OSError as err:      # the disk filled up during the run, say
            raise UsageError(f"cannot save the results: {err.strerror or err}") from None
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        _print(record)
        if args.save:
            print(f"saved {record['saved_to']}")
    missed = bench_targets.missed(record) if args.save else []
    if missed:
        # A quiet machine and a missed target: the library (or the estimator) got worse.
        sys.stderr.write("inferbook bench: targets missed on a quiet machine: "
                         + "; ".join(missed) + "\n")
        return 1
    return 0
