"""The `inferbook` command line.

Each subcommand lives in its own module with two functions: ``add_parser(subparsers)``
declares its arguments, ``run(args)`` does the work and returns an exit code. Bad input never
produces a traceback: anything that raises `UsageError` (or one of the library's ValueError
subclasses for bad configs and checkpoints) becomes exit code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Sequence

__all__ = ["main", "UsageError", "COMMANDS"]

# Subcommand name -> module under inferbook.cli. One entry per line, so additions merge cleanly.
COMMANDS = {
    "generate": "generate",              # KV-cached decoding from a checkpoint or preset
    "grade": "grade",                    # score a graded exercise notebook (Gradescope JSON)
    "kernel-bench": "kernel_bench",      # decode-attention kernels against context length
    "estimate": "estimate",              # roofline estimate of a decode step (memory, time)
    "bench": "bench",                    # bandwidth, MBU/MFU, estimator error on this device
}


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but its errors are one line (no usage block) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="inferbook", description="Inference by the Numbers: the book's library.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for name, module in COMMANDS.items():
        importlib.import_module(f".{module}", __name__).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Library errors that mean "your input is wrong" (bad configs, checkpoints, values).
    from inferbook.model.checkpoint import CheckpointError
    from inferbook.model.config import ConfigError
    try:
        return int(args.run(args) or 0)
    except (UsageError, ConfigError, CheckpointError, json.JSONDecodeError) as err:
        sys.stderr.write(f"inferbook {args.command}: error: {err}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130

