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
from pathlib import Path

from . import UsageError

HELP = "time decode attention (split vs unsplit KV) against context length"


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("kernel-bench", help=HELP, description=HELP)
    add_arguments(p)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contexts", default="4096,8192,16384,32768",
                   help="comma-separated context lengths S")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=32, help="query heads N")
    p.add_argument("--kv-heads", type=int, default=8, help="KV heads K")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    p.add_argument("--splits", type=int, default=32, help="chunks P of the split kernels")
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--pallas", choices=["auto", "on", "off"], default="auto",
                   help="include the Pallas kernels (auto: on accelerators only)")
    p.add_argument("--out", type=Path, help="write the results here as JSON")
    p.set_defaults(run=run)


def _contexts(text: str, splits: int) -> list[int]:
    try:
        contexts = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--contexts must be comma-separated integers, got {text!r}") from None
    if not contexts or any(s <= 0 for s in contexts):
        raise UsageError("--contexts needs at least one positive length")
    bad = [s for s in contexts if s % splits]
    if bad:
        raise UsageError(f"--splits {splits} must divide every context length; it does not "
                         f"divide {bad}")
    return contexts


def run(args: argparse.Namespace) -> int:
    for name in ("batch", "heads", "kv_heads", "head_dim", "splits", "repeats"):
        if getattr(args, name) <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive")
    if args.heads % args.kv_heads:
        raise UsageError(f"--kv-heads {args.kv_heads} must divide --heads {args.heads}")
    contexts = _contexts(args.contexts, args.splits)
    import jax

    from inferbook.kernels import kernel_bench
    from inferbook.perf import timing
    pallas = {"auto": None, "on": True, "off": False}[args.pallas]
    rows = kernel_bench.decode_rows(contexts, B=args.batch, N=args.heads, K=args.kv_heads,
                                    H=args.head_dim, dtype=args.dtype, num_splits=args.splits,
                                    pallas=pallas, repeats=args.repeats)
    chip = kernel_bench.chip_for_device(jax.devices()[0].device_kind)
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
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferbook.cli.kernel_bench",
                                     description=HELP)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UsageError as err:
        sys.stderr.write(f"kernel-bench: error: {err}\n")
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
