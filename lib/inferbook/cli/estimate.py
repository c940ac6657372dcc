"""`inferbook estimate`: memory, critical batch and step time of decoding, from the roofline.

    inferbook estimate --model llama-2-13b --hardware "TPU v5e" --chips 8 --batch 16 \
        --context 8192 --json

Definitions (B batch, S context, the rest from the model and the chip):

    params                    parameters of the model (embeddings included)
    param_bytes               params × weight-bytes
    kv_bytes_per_token        2·L·K·H × kv-bytes
    kv_bytes                  B · S · kv_bytes_per_token
    total_bytes               param_bytes + kv_bytes
    hbm_bytes                 chips × the chip's memory
    fits                      total_bytes ≤ hbm_bytes
    max_batch                 the largest B that fits at this context
    critical_batch            flops · weight-bytes / (2 · hbm_bandwidth), one chip
    step_time_lower_bound_s   (kv_bytes + param_bytes) / (chips · hbm_bandwidth)
    step_time_s               kv_bytes / (chips · hbm_bandwidth)
                              + max(2·B·params / (chips · flops), param_bytes / (chips · hbm_bandwidth))
    tokens_per_s              B / step_time_s
"""

from __future__ import annotations

import argparse
import json
import math

from . import UsageError

__all__ = ["add_parser", "run", "estimate_fields"]


def _positive(kind):
    """An argparse type: a positive, finite number of the given kind (int or float)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
        return value
    parse.__name__ = kind.__name__
    return parse


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("estimate", help="roofline estimate of a decode step",
                              description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", metavar="PRESET", help="a preset model (e.g. llama-2-13b)")
    model.add_argument("--config", metavar="PATH",
                       help="a Hugging Face Llama-family config.json")
    hw = p.add_mutually_exclusive_group(required=True)
    hw.add_argument("--hardware", metavar="NAME", help='a chip of the registry, e.g. "TPU v5e"')
    hw.add_argument("--hardware-config", metavar="PATH",
                    help="JSON with hbm_bytes, hbm_bandwidth (B/s) and flops (FLOP/s)")
    p.add_argument("--chips", type=_positive(int), default=1, metavar="N")
    p.add_argument("--batch", type=_positive(int), default=1, metavar="B")
    p.add_argument("--context", type=_positive(int), default=None, metavar="S",
                   help="cached tokens per sequence (default: the model's context length)")
    p.add_argument("--weight-bytes", type=_positive(float), default=2.0, metavar="BYTES",
                   help="bytes per weight: 2 bf16, 1 int8, 0.5 int4 (default 2)")
    p.add_argument("--kv-bytes", type=_positive(float), default=2.0, metavar="BYTES",
                   help="bytes per KV-cache element (default 2)")
    p.add_argument("--json", action="store_true", help="print the fields as one JSON object")
    p.set_defaults(run=run)


def _model(args):
    from inferbook.model.hf_config import from_hf_config
    from inferbook.model.presets import get_preset
    if args.model is not None:
        return get_preset(args.model)
    return from_hf_config(args.config)


def _chip(args):
    from inferbook.perf.hardware import HardwareError, chip_from_json, get_chip
    try:
        if args.hardware is not None:
            return get_chip(args.hardware)
        return chip_from_json(args.hardware_config)
    except HardwareError as err:
        raise UsageError(str(err)) from None


def estimate_fields(args: argparse.Namespace) -> dict:
    """The JSON object `inferbook estimate --json` prints, for parsed arguments."""
    from inferbook.perf.roofline import estimate_decode
    cfg, chip = _model(args), _chip(args)
    context = args.context if args.context is not None else cfg.max_seq_len
    est = estimate_decode(cfg, chip, batch=args.batch, context=context, chips=args.chips,
                          weight_bytes=args.weight_bytes, kv_bytes=args.kv_bytes)
    fields = {"model": cfg.name, "hardware": chip.name, "chips": args.chips,
              "batch": args.batch, "context": context, "weight_bytes": args.weight_bytes,
              "kv_bytes_per_element": args.kv_bytes}
    fields.update(est.as_dict())
    return fields


_UNITS = [("params", "parameters", "count"), ("param_bytes", "weights", "bytes"),
          ("kv_bytes_per_token", "KV cache per token", "bytes"),
          ("kv_bytes", "KV cache (batch × context)", "bytes"),
          ("total_bytes", "weights + KV cache", "bytes"), ("hbm_bytes", "device memory", "bytes"),
          ("fits", "fits in memory", "bool"), ("max_batch", "largest batch that fits", "int"),
          ("critical_batch", "critical batch (one chip)", "float"),
          ("step_time_lower_bound_s", "step time, memory-bound bound", "seconds"),
          ("step_time_s", "step time, roofline", "seconds"),
          ("tokens_per_s", "throughput", "tokens/s")]


def _table(fields: dict) -> str:
    from inferbook.book.present import fmt_bytes, fmt_count, fmt_rate, fmt_seconds
    fmt = {"count": lambda v: f"{fmt_count(v, 2)} ({v:,})",
           "bytes": lambda v: fmt_bytes(v, 2), "bool": lambda v: "yes" if v else "no",
           "int": lambda v: f"{v:,}", "float": lambda v: f"{v:,.1f}",
           "seconds": lambda v: fmt_seconds(v, 3), "tokens/s": lambda v: fmt_rate(v, "tokens/s")}
    head = (f"{fields['model']} on {fields['chips']} × {fields['hardware']}, batch "
            f"{fields['batch']}, context {fields['context']:,}, {fields['weight_bytes']:g} "
            f"bytes/weight, {fields['kv_bytes_per_element']:g} bytes/KV element")
    width = max(len(label) for _, label, _ in _UNITS)
    rows = [f"  {label:<{width}}  {fmt[kind](fields[key])}" for key, label, kind in _UNITS]
    return "\n".join([head, *rows])


def run(args: argparse.Namespace) -> int:
    fields = estimate_fields(args)
    print(json.dumps(fields) if args.json else _table(fields))
    return 0
