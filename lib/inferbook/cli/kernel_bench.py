"""`inferbook kernel-bench`: time decode attention against context length, save it for the book.

On a GPU this is the measurement chapter 7 plots beside its own: the Pallas Flash-Decoding
kernel against the same kernel unsplit (one program per batch row and KV head, FlashAttention's
decode schedule) and against XLA's attention, at contexts up to 32k, with the fraction of HBM
bandwidth each achieves. Run it on the accelerator and commit the file it writes:

    python -m inferbook.cli.kernel_bench --out book/data/flash_decoding_<device>.json

(`pip install -U "jax[cuda12]"` first on a GPU machine.) Bad arguments exit with code 2.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from typing import Any, Sequence

from . import OneLineParser, UsageError, one_line
from . import args as types
from .resources import require_memory

__all__ = ["add_parser", "add_arguments", "decode_memory_bytes", "run", "main"]

HELP = "time decode attention (split vs unsplit KV) against context length"
MAX_REPEATS = 1000
MAX_HEADS = 4096            # far beyond any model's, small enough to keep shapes int32


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("kernel-bench", help=HELP, description=HELP)
    add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contexts", default=(4096, 8192, 16384, 32768), type=types.int_list(),
                   help="comma-separated context lengths S")
    p.add_argument("--batch", type=types.positive_int(), default=1)
    p.add_argument("--heads", type=types.positive_int(MAX_HEADS), default=32,
                   help="query heads N")
    p.add_argument("--kv-heads", type=types.positive_int(MAX_HEADS), default=8,
                   help="KV heads K")
    p.add_argument("--head-dim", type=types.positive_int(MAX_HEADS), default=128)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--splits", type=types.positive_int(), default=32,
                   help="chunks P of the split kernels")
    p.add_argument("--repeats", type=types.positive_int(MAX_REPEATS), default=20)
    p.add_argument("--pallas", choices=["auto", "on", "off"], default="auto",
                   help="include the Pallas kernels (auto: on accelerators only)")
    p.add_argument("--out", type=types.writable_file, help="write the results here as JSON")
    p.set_defaults(run=run)


def decode_memory_bytes(S: int, B: int, N: int, K: int, H: int, itemsize: int) -> int:
    """A lower bound of the bytes one `kernel_bench.decode_rows` configuration holds: the
    cache's keys and values (2·B·K·S·H elements), the queries, and one float32 score per
    query head and key (B·N·S), which every kernel materialises at least once. Arithmetic
    only, nothing allocated: the command refuses sizes that could never fit before it starts."""
    return (2 * B * K * S * H + B * N * H) * itemsize + B * N * S * 4


def _check(args: argparse.Namespace) -> None:
    """What no single argument shows: heads that do not group, splits that do not divide,
    and the memory the largest configuration needs on this device."""
    if args.heads % args.kv_heads:
        raise UsageError(f"--kv-heads {args.kv_heads} must divide --heads {args.heads}")
    bad = [s for s in args.contexts if s % args.splits]
    if bad:
        raise UsageError(f"--splits {args.splits} must divide every context length; it does "
                         f"not divide {', '.join(map(str, bad[:5]))}")
    S = max(args.contexts)
    itemsize = {"bfloat16": 2, "float32": 4}[args.dtype]
    needed = decode_memory_bytes(S, args.batch, args.heads, args.kv_heads, args.head_dim,
                                 itemsize)
    require_memory(needed, f"decode attention at batch {args.batch}, context {S}, "
                   f"{args.kv_heads} KV heads of {args.head_dim} ({args.dtype})")


def run(args: argparse.Namespace) -> int:
    _check(args)
    # JAX starts only once the arguments have passed (a refusal is instant).
    import jax

    from inferbook.kernels import kernel_bench
    from inferbook.perf import timing
    from inferbook.perf.hardware import chip_for_device
    pallas = {"auto": None, "on": True, "off": False}[args.pallas]
    rows = kernel_bench.decode_rows(list(args.contexts), B=args.batch, N=args.heads,
                                    K=args.kv_heads, H=args.head_dim, dtype=args.dtype,
                                    num_splits=args.splits, pallas=pallas, repeats=args.repeats)
    chip = chip_for_device(jax.devices()[0].device_kind)
    record = dict(
        source="inferbook kernel-bench (python -m inferbook.cli.kernel_bench)",
        device=timing.device_name(), platform=jax.default_backend(),
        chip=chip.name if chip else None,
        hbm_bytes_per_s=chip.hbm_bytes_per_s if chip else None,
        date=datetime.date.today().isoformat(), jax_version=jax.__version__,
        interpreted=jax.default_backend() == "cpu" and pallas is True, rows=rows)
    for r in rows:
        frac = "" if r["hbm_fraction"] is None else f"  {100 * r['hbm_fraction']:.0f}% of HBM"
        print(f"S={r['S']:>6}  {r['kernel']:<34} {1e6 * r['seconds']:10.1f} µs  "
              f"{r['bytes_per_s'] / 1e9:8.1f} GB/s{frac}")
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(record, indent=1) + "\n")
        except OSError as err:      # the disk filled up during the run, say
            raise UsageError(f"cannot write {args.out}: {err.strerror or err}") from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m inferbook.cli.kernel_bench`: the same command, errors in one line."""
    parser = OneLineParser(prog="kernel-bench", description=HELP)
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:
        return done.code if isinstance(done.code, int) else 2
    try:
        return run(args)
    except UsageError as err:
        sys.stderr.write(f"kernel-bench: error: {one_line(str(err))}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
