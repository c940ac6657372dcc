"""The `inferbook` command line.

Each subcommand lives in its own module with two functions: ``add_parser(subparsers)``
declares its arguments, ``run(args)`` does the work and returns an exit code. Bad input never
produces a traceback: anything that raises `UsageError` (or one of the library's ValueError
subclasses for bad configs and checkpoints) becomes exit code 2 and one line on stderr.

The checks live in one layer per boundary: `args` parses each value strictly as argparse
reads it (type, finiteness, range, writable output paths), each command's `run` then checks
what needs the model or the device (positions, vocabulary, memory, via `resources`) before
any weights are built or programs compiled. Running out of memory anyway is reported the same
way, as the last line of defence.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
from typing import Sequence

__all__ = ["main", "UsageError", "COMMANDS", "OneLineParser", "one_line"]

# Subcommand name -> module under inferbook.cli. One entry per line, so additions merge cleanly.
COMMANDS = {
    "generate": "generate",              # KV-cached decoding from a checkpoint or preset
    "grade": "grade",                    # score a graded exercise notebook (Gradescope JSON)
    "kernel-bench": "kernel_bench",      # decode-attention kernels against context length
    "estimate": "estimate",              # roofline estimate of a decode step (memory, time)
    "bench": "bench",                    # bandwidth, MBU/MFU, estimator error on this device
    "calibrate": "calibrate",            # the estimator's efficiencies, fitted on published data
}


class UsageError(ValueError):
    """Bad input from the user: reported as one line, exit code 2."""


# Everything str.splitlines() would break a line at, and other control characters: a value
# quoted in an error message must not turn one line into several.
_BREAKS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")


def one_line(message: str) -> str:
    """`message` with line breaks and control characters escaped (\\n, \\x1c, ...)."""
    return _BREAKS.sub(lambda m: repr(m.group())[1:-1], str(message))


def _report(prefix: str, message: object) -> None:
    sys.stderr.write(f"{prefix}: error: {one_line(str(message))}\n")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but its errors are one line (no usage block) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        _report(self.prog, message)
        raise SystemExit(2)


def _out_of_memory(err: BaseException) -> bool:
    """A device allocation that failed (XLA's RESOURCE_EXHAUSTED) or a host MemoryError."""
    if isinstance(err, MemoryError):
        return True
    jax_errors = sys.modules.get("jax.errors")
    runtime = getattr(jax_errors, "JaxRuntimeError", None)
    return runtime is not None and isinstance(err, runtime) and "RESOURCE_EXHAUSTED" in str(err)


def _bad_checkpoint(err: BaseException) -> bool:
    """A checkpoint the reader refused (`CheckpointError`), looked up rather than imported:
    the checkpoint reader loads numpy, ml_dtypes and safetensors, and a command that reads no
    checkpoint must not need them — `inferbook estimate` runs in the reader's browser, under
    Pyodide, from the standard library alone (book/estimator.md). A CheckpointError can only
    have been raised once its module is loaded."""
    reader = sys.modules.get("inferbook.model.safetensors_io")
    error = getattr(reader, "CheckpointError", None)
    return error is not None and isinstance(err, error)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="inferbook",
                           description="Inference by the Numbers: the book's library.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND",
                                       parser_class=OneLineParser)
    subparsers.required = True
    for name, module in COMMANDS.items():
        importlib.import_module(f".{module}", __name__).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:          # --help (0) or a bad argument (2, already reported)
        return done.code if isinstance(done.code, int) else 2
    # Library errors that mean "your input is wrong" (bad configs, checkpoints, values).
    # Imported only now: --help and a bad argument answer at once.
    from inferbook.model.config import ConfigError
    try:
        return int(args.run(args) or 0)
    except (UsageError, ConfigError, json.JSONDecodeError) as err:
        _report(f"inferbook {args.command}", err)
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        # The reader went away (`inferbook estimate ... | head`): stop quietly, and point
        # stdout at /dev/null so that the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as err:
        if _bad_checkpoint(err):
            _report(f"inferbook {args.command}", err)
            return 2
        if not _out_of_memory(err):
            raise
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        _report(f"inferbook {args.command}", f"out of memory: {first[:300]} "
                "(use smaller sizes)")
        return 2

