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
Medians after warm-up, compile time apart; a progress bar on stderr.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from . import UsageError

__all__ = ["add_parser", "run"]

HELP = "measure bandwidth, MBU/MFU and the estimator's error on this device"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("bench", help=HELP, description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="PRESET",
                   help="a preset (default: cpu-336mb on a CPU, llama-3.2-1b elsewhere)")
    p.add_argument("--batches", metavar="B,B,...", help="batch sizes (default 1,2,4,...,256)")
    p.add_argument("--contexts", metavar="S,S,...", help="cached tokens per sequence "
                   "(default 128,512)")
    p.add_argument("--prefill", metavar="T,T,...", help="prompt lengths for prefill "
                   "(default 128,512; 'none' to skip)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per configuration "
                   "(default 7; 3 with --quick)")
    p.add_argument("--dtype", choices=["float32", "bfloat16"],
                   help="weights (default float32 on a CPU, bfloat16 elsewhere)")
    p.add_argument("--quick", action="store_true",
                   help="batches 1,8, context 128, prefill 128, smaller microbenchmarks")
    p.add_argument("--peer", choices=["auto", "on", "off"], default="auto",
                   help="Hugging Face generate beside the library (auto: on a GPU with torch)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--save", action="store_true",
                   help="write the results under book/data/bench/ (or --out)")
    p.add_argument("--out", type=Path, metavar="DIR", help="directory for --save")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--note", default="", help="a remark kept in the results (e.g. how busy "
                   "the machine was)")
    p.set_defaults(run=run)


def _ints(text: str | None, default: tuple[int, ...], flag: str,
          allow_none: bool = False) -> tuple[int, ...]:
    if text is None:
        return default
    if allow_none and text.strip().lower() == "none":
        return ()
    try:
        values = tuple(int(s) for s in text.split(","))
    except ValueError:
        raise UsageError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise UsageError(f"{flag} values must be positive, got {text!r}")
    return values


def _check(args) -> dict:
    """Every argument checked before JAX starts: one line and exit 2 for bad input."""
    from inferbook.model.presets import get_preset
    quick = args.quick
    options = dict(
        batches=_ints(args.batches, (1, 8) if quick else (1, 2, 4, 8, 16, 32, 64, 128, 256),
                      "--batches"),
        contexts=_ints(args.contexts, (128,) if quick else (128, 512), "--contexts"),
        prefill=_ints(args.prefill, (128,) if quick else (128, 512), "--prefill",
                      allow_none=True),
        repeats=args.repeats if args.repeats is not None else (3 if quick else 7))
    if options["repeats"] <= 0:
        raise UsageError(f"--repeats must be positive, got {options['repeats']}")
    if args.out is not None and not args.save:
        raise UsageError("--out needs --save")
    if args.model is not None:
        cfg = get_preset(args.model)             # ConfigError (exit 2) for unknown names
        longest = max(options["contexts"] + options["prefill"]) + 1
        if longest > cfg.max_seq_len:
            raise UsageError(f"{cfg.name} holds at most {cfg.max_seq_len} tokens; "
                             f"--contexts/--prefill ask for {longest - 1}")
    return options


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.0f}%"


def _print(record: dict) -> None:
    from inferbook.book.present import fmt_rate, fmt_seconds
    print(f"{record['device']} · {record['model']} ({record['dtype']}) · jax "
          f"{record['jax_version']} · inferbook {record['inferbook_version']}")
    spec = record["spec_bytes_per_s"]
    print(f"read bandwidth {fmt_rate(record['read_bytes_per_s'])} measured"
          f" ({fmt_rate(spec) if spec else 'n/a'} spec); matmul "
          f"{fmt_rate(record['matmul_flops_per_s'], 'FLOP/s')} measured")
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
        print(f"batch {s['batch']} MBU {_pct(s['mbu_measured'])} of measured bandwidth; "
              f"calibrated estimator |error| median {_pct(s['median_abs_error'])}, worst "
              f"{_pct(s['worst_abs_error'])}")


def run(args: argparse.Namespace) -> int:
    options = _check(args)
    if args.peer != "off":
        # JAX takes 75% of a GPU's memory at start unless told otherwise; torch needs some.
        import os
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp

    from inferbook.model.presets import get_preset
    from inferbook.perf import bench
    platform = jax.devices()[0].platform
    cfg = get_preset(args.model or bench.default_model(platform))
    dtype = None if args.dtype is None else jnp.dtype(args.dtype)
    record = bench.run_benchmark(cfg, quick=args.quick, dtype=dtype,
                                     show_progress=not args.no_progress, note=args.note,
                                     **options)
    peer = args.peer == "on" or (args.peer == "auto" and platform == "gpu")
    if peer:
        from inferbook.perf import hf_peer as peer_mod
        try:
            record["peer"] = peer_mod.compare(cfg, batch=1, prompt=options["contexts"][0],
                                              dtype=record["dtype"])
        except ImportError as err:
            if args.peer == "on":
                raise UsageError(f"--peer on needs torch and transformers: {err}") from None
    if args.save:
        path = bench.save(record, args.out)
        record["saved_to"] = str(path)
    if args.json:
        print(json.dumps(record, indent=1))
    else:
        _print(record)
        if args.save:
            print(f"saved {record['saved_to']}")
    return 0
