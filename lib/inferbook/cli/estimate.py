"""`inferbook estimate`: memory, latency and throughput of serving a model, from its config.

Every field it prints is defined in book/estimate_reference.py ("The estimator's fields").
Bad input is refused before any work, in one line that names the flag.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from inferbook.cli.estimate_report import chip_list, model_list, report, save_plot
from inferbook.model.hf_config import from_hf_config, read_hf_config
from inferbook.model.presets import PRESETS, get_preset
from inferbook.perf import estimate_inputs as inputs
from inferbook.perf.estimate_inputs import EstimateInputError
from inferbook.perf.estimator import estimate
from inferbook.perf.hardware import CHIPS, HardwareError, chip_from_json, get_chip
from inferbook.perf.layout_comms import ESTIMATE_LAYOUTS

from . import UsageError

__all__ = ["add_parser", "run", "estimate_fields", "estimate_rows"]

MAX_SWEEP = 1000             # rows of one sweep
MAX_LAYERS = 100_000         # a config.json with more layers describes no model

EXAMPLES = """\
examples:
  inferbook estimate --model llama-3.1-8b --hardware "H100 SXM"
  inferbook estimate --model llama-3.1-70b --hardware H100 --chips 8 --batch 1,8,64 --context 8192
  inferbook estimate --model deepseek-v3 --hardware H200 --chips 8 --weights fp8 --kv int8 --json
  inferbook estimate --model llama-3.1-70b --hardware H100 --chips 32 --chips-per-host 8
  inferbook estimate --model llama-3.1-8b --hardware H100 --batch 32 --context 4096 \
      --prompt 2048 --output 512 --price 2.50 --breakdown
  inferbook estimate --model llama-3.1-70b --hardware H100 --chips 4 --ideal   # bare roofline
  inferbook estimate --config ./config.json --hardware "TPU v5e" --chips 8 \\
      --batch 1,2,4,8,16,32,64,128 --context 4096 --prompt 1024 --plot pareto.png
  inferbook estimate --list models

Times are calibrated on published measurements unless --ideal asks for the bare roofline
(`inferbook calibrate` shows the fit). Every field is defined in the book's "The estimator's
fields" page (book/estimate_reference.py).
"""


def _wholes(name: str, text: str) -> list[int]:
    parts = text.split(",")
    if len(parts) > MAX_SWEEP:
        raise EstimateInputError(name, f"at most {MAX_SWEEP} values, got {len(parts)}")
    values = [inputs.parse_whole(name, p) for p in parts]
    return list(dict.fromkeys(values))                  # keep the order, drop repeats


def add_parser(subparsers: Any) -> None:
    epilog = (EXAMPLES + "\npresets: " + ", ".join(PRESETS) + "\nchips: "
              + ", ".join(CHIPS) + "\n")
    p = subparsers.add_parser(
        "estimate", help="memory, latency and throughput of serving a model (roofline)",
        description="Estimate serving a model on one or many chips: memory, decode step, "
                    "prefill and time to first token, tokens/s; sweeps and a Pareto plot.",
        epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("--model", metavar="PRESET", help="a preset (see the list below)")
    p.add_argument("--config", metavar="PATH", help="a Hugging Face config.json (any family "
                   "the book reads: Llama, Mistral, Mixtral, Qwen, Gemma, Phi-3, DeepSeek, GPT-2)")
    p.add_argument("--hardware", metavar="NAME", help='a chip of the registry, e.g. "H100 SXM"')
    p.add_argument("--hardware-config", metavar="PATH",
                   help="JSON with hbm_bytes, hbm_bandwidth (B/s) and flops (FLOP/s), "
                        "optionally interconnect, link_bytes_per_s, links, hop_latency_s")
    p.add_argument("--list", choices=("models", "chips"), help="list the presets or the chips")
    p.add_argument("--chips", default="1", metavar="N", help="chips serving one copy (default 1)")
    p.add_argument("--chips-per-host", metavar="H",
                   help="spread the chips over hosts of H, each one interconnect domain (an "
                        "HGX board's 8 GPUs; a TPU slice): collectives between hosts go over "
                        "the data-centre network (default: every chip in one domain)")
    p.add_argument("--layout", choices=ESTIMATE_LAYOUTS,
                   help="the sharded layout (default: the faster one for the shape, printed; "
                        "expert-parallel for mixtures of experts)")
    p.add_argument("--batch", default="1", metavar="B[,B...]", help="sequences per step")
    p.add_argument("--context", metavar="S[,S...]",
                   help="cached tokens per sequence (default: the model's positions)")
    p.add_argument("--prompt", metavar="T", help="prompt tokens prefilled (default: the context)")
    w = p.add_mutually_exclusive_group()
    w.add_argument("--weights", default=None, metavar="FMT",
                   help="bf16 | fp8 | int8[+min] | int4[+min][:group]: scales, and +min's "
                        "per-group minimums, counted (default bf16)")
    w.add_argument("--weight-bytes", metavar="BYTES",
                   help="plain bytes per parameter instead, no scales (2 bf16, 1 int8, 0.5 int4)")
    k = p.add_mutually_exclusive_group()
    k.add_argument("--kv", default=None, metavar="FMT",
                   help="bf16 | fp8 | int8 KV cache, with one float32 scale per vector")
    k.add_argument("--kv-bytes", metavar="BYTES", help="plain bytes per cached number instead")
    p.add_argument("--compute", default="bf16", metavar="FMT",
                   help="bf16 | fp8 | int8: the format the matmuls run in (default bf16)")
    p.add_argument("--ideal", action="store_true",
                   help="the bare roofline the book teaches first: every roof reached, no "
                        "fixed cost (default: the chip's efficiency, calibrated on published "
                        "measurements)")
    p.add_argument("--mbu", metavar="FRACTION",
                   help="achieved fraction of memory bandwidth, replacing the calibrated one")
    p.add_argument("--mfu", metavar="FRACTION",
                   help="achieved fraction of peak FLOP/s, replacing the calibrated one")
    p.add_argument("--prefill-overlap", choices=("on", "off"),
                   help="whether a prefill's collectives overlap with its work (default: "
                        "off on GPUs, on on TPUs; on with --ideal)")
    p.add_argument("--output", metavar="N",
                   help="tokens each sequence generates: adds the whole generation's time "
                        "(prefill, then N - 1 decode steps) and its rate")
    p.add_argument("--price", metavar="DOLLARS",
                   help="dollars per chip-hour: adds the cost per million tokens")
    p.add_argument("--breakdown", action="store_true",
                   help="where a decode step's time goes: weights, KV cache, attention, MLP, "
                        "logits, communication, fixed costs")
    p.add_argument("--strict", action="store_true",
                   help="refuse a context beyond the model's positions (default: a warning)")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw latency against throughput per chip, the Pareto frontier marked")
    p.add_argument("--json", action="store_true",
                   help="print JSON: one object, or a list of rows for a sweep")
    p.set_defaults(run=run)


def _model(args):
    if args.model is not None:
        return get_preset(args.model)
    path = Path(args.config)
    if not (path.is_file() or (path / "config.json").is_file()):
        raise UsageError(f"--config: no config file at {args.config!r}")
    raw = read_hf_config(args.config)
    for key in ("num_hidden_layers", "n_layer"):
        value = raw.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and value > MAX_LAYERS:
            raise UsageError(f"--config: {key}={value!r} is more layers than any model has "
                             f"(at most {MAX_LAYERS:,})")
    return from_hf_config(raw, purpose="estimate",
                          name=Path(args.config).resolve().parent.name
                          if Path(args.config).is_file() else Path(args.config).name)


def _chip(args):
    try:
        if args.hardware is not None:
            return get_chip(args.hardware)
        return chip_from_json(args.hardware_config)
    except HardwareError as err:
        flag = "--hardware" if args.hardware is not None else "--hardware-config"
        raise UsageError(f"{flag}: {err}") from None


def _plot_path(text: str) -> Path:
    path = Path(text)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise UsageError(f"--plot: {text!r} must end in .png, .svg or .pdf")
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UsageError(f"--plot: {text!r} is a directory")
    if not parent.is_dir():
        raise UsageError(f"--plot: the folder {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"--plot: {text!r} is not writable")
    return path


def estimate_rows(args: argparse.Namespace) -> list:
    """The `Estimate` of each (context, batch) the arguments ask for, checked first."""
    if (args.model is None) == (args.config is None):
        raise UsageError("give one of --model PRESET or --config PATH (or --list models)")
    if (args.hardware is None) == (args.hardware_config is None):
        raise UsageError("give one of --hardware NAME or --hardware-config PATH "
                         "(or --list chips)")
    try:
        return _checked_rows(args)
    except EstimateInputError as err:           # the library's checks, with the flag's name
        raise UsageError(f"{err.flag}: {err.problem}") from None


def _checked_rows(args: argparse.Namespace) -> list:
    chips = inputs.parse_whole("chips", args.chips, inputs.MAX_CHIPS)
    per_host = None if args.chips_per_host is None else \
        inputs.parse_whole("chips_per_host", args.chips_per_host, inputs.MAX_CHIPS)
    batches = _wholes("batch", args.batch)
    contexts = None if args.context is None else _wholes("context", args.context)
    if contexts is not None and len(batches) * len(contexts) > MAX_SWEEP:
        raise UsageError(f"--batch × --context: at most {MAX_SWEEP} rows")
    prompt = None if args.prompt is None else inputs.parse_whole("prompt", args.prompt)
    weights = inputs.weight_format("bf16" if args.weights is None else args.weights)
    kv = inputs.kv_format("bf16" if args.kv is None else args.kv)
    wb = (None if args.weight_bytes is None
          else inputs.parse_element_bytes("weight_bytes", args.weight_bytes))
    kvb = None if args.kv_bytes is None else inputs.parse_element_bytes("kv_bytes", args.kv_bytes)
    mbu = None if args.mbu is None else inputs.parse_fraction("mbu", args.mbu)
    mfu = None if args.mfu is None else inputs.parse_fraction("mfu", args.mfu)
    output = None if args.output is None else inputs.parse_whole("output", args.output)
    price = None if args.price is None else inputs.parse_price("price", args.price)
    overlap = None if args.prefill_overlap is None else args.prefill_overlap == "on"
    if args.plot is not None:
        _plot_path(args.plot)
    cfg, chip = _model(args), _chip(args)
    compute = inputs.compute_format(args.compute, chip)
    for S in contexts or [None]:                # every row checked before any is estimated
        for B in batches:
            inputs.check_setting(cfg, chip, batch=B, context=S, prompt=prompt, chips=chips,
                                 layout=args.layout, output=output, strict=args.strict,
                                 chips_per_host=per_host)
    contexts = contexts or [cfg.max_seq_len]
    rows = []
    for S in contexts:
        for B in batches:
            try:
                rows.append(estimate(cfg, chip, batch=B, context=S, prompt=prompt, chips=chips,
                                     layout=args.layout, weights=weights, kv=kv,
                                     weight_bytes=wb, kv_bytes=kvb, compute=compute,
                                     efficiency="ideal" if args.ideal else "calibrated",
                                     mbu=mbu, mfu=mfu, prefill_overlap=overlap, output=output,
                                     price_per_chip_hour=price, strict=args.strict,
                                     chips_per_host=per_host))
            except EstimateInputError:
                raise
            except (ValueError, OverflowError) as err:
                raise UsageError(str(err).splitlines()[0]) from None
    return rows


def estimate_fields(args: argparse.Namespace) -> dict | list:
    """What `inferbook estimate --json` prints: one object, or a list for a sweep."""
    rows = [r.as_dict() for r in estimate_rows(args)]
    return rows[0] if len(rows) == 1 else rows


def _list(what: str, as_json: bool) -> int:
    rows = model_list() if what == "models" else chip_list()
    if as_json:
        print(json.dumps(rows, allow_nan=False))
    else:
        keys = list(rows[0])
        widths = [max(len(k), *(len(str(r[k])) for r in rows)) for k in keys]
        print("  ".join(k.ljust(w) for k, w in zip(keys, widths)))
        for r in rows:
            print("  ".join(str(r[k]).ljust(w) for k, w in zip(keys, widths)))
    return 0


def run(args: argparse.Namespace) -> int:
    """Print the estimate (or sweep, or list); every refusal is a UsageError of one line."""
    try:
        return _run(args)
    except UsageError:
        raise
    except OverflowError:
        raise UsageError("the model's sizes are too large to estimate (a number overflows)") \
            from None
    except (ValueError, RecursionError) as err:     # the library's refusals, in one line
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UsageError(first) from None


def _run(args: argparse.Namespace) -> int:
    if args.list is not None:
        if any(v is not None for v in (args.model, args.config, args.hardware,
                                       args.hardware_config)):
            raise UsageError("--list takes no model or hardware")
        return _list(args.list, args.json)
    rows = estimate_rows(args)
    for text in dict.fromkeys(w for r in rows for w in r.warnings):
        sys.stderr.write(f"warning: {text}\n")
    if args.json:
        data = [r.as_dict() for r in rows]
        print(json.dumps(data[0] if len(data) == 1 else data, allow_nan=False))
    else:
        print(report(rows, layout_given=args.layout is not None, breakdown=args.breakdown))
    if args.plot is not None:
        try:
            save_plot(rows, _plot_path(args.plot))
        except OSError as err:
            raise UsageError(f"--plot: cannot write {args.plot!r}: "
                             f"{err.strerror or err}") from None
    return 0
