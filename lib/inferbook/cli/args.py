"""Argument types for the commands: every value checked for type, finiteness and range as it
is parsed, before any work starts.

Each function here returns (or is) an argparse ``type=``: it turns the text of one argument
into a value or raises `argparse.ArgumentTypeError`, which the command line reports as one
line — ``inferbook generate: error: argument --seed: must be an integer in [0, 4294967295],
got '-1'`` — with exit code 2. Parsing is strict on purpose: Python's `int` accepts
'1_000' and '٣' (an Arabic-Indic three), `float` accepts 'nan' and turns '1e400' into inf;
a command that wants a count takes ASCII digits, one that wants a number takes a finite one.

Output paths are checked the same way, before the work whose result they would hold: a
directory, a missing parent, a device like /dev/full or a read-only place such as /proc is
refused at once, not after an hour of measurements.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["integer", "positive_int", "nonnegative_int", "finite_float", "probability",
           "int_list", "writable_file", "writable_dir", "existing_dir", "INT32_MAX",
           "MAX_LIST"]

INT32_MAX = 2**31 - 1       # sizes and ids become int32 arrays on the device
MAX_LIST = 100              # values in a comma list: each one is a run of its own
_INTEGER = re.compile(r"[+-]?[0-9]+")


def _bad(message: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(message)


def _parse_int(text: str, what: str) -> int:
    s = text.strip()
    if not _INTEGER.fullmatch(s):
        raise _bad(f"must be {what}, got {text!r}")
    try:
        return int(s)
    except ValueError:          # more digits than Python converts (sys.int_info)
        raise _bad(f"must be {what}, got a number of {len(s)} digits") from None


def integer(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [minimum, maximum] (either bound may be None)."""
    what = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}.get(
        minimum, f"an integer >= {minimum}")
    if maximum is not None:
        what += f" no larger than {maximum}"

    def parse(text: str) -> int:
        value = _parse_int(text, what)
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            raise _bad(f"must be {what}, got {text.strip()!r}")
        return value
    parse.__name__ = "integer"
    return parse


def positive_int(maximum: int = INT32_MAX) -> Callable[[str], int]:
    """An argparse type: an integer in [1, maximum]."""
    return integer(1, maximum)


def nonnegative_int(maximum: int = INT32_MAX) -> Callable[[str], int]:
    """An argparse type: an integer in [0, maximum]."""
    return integer(0, maximum)


def finite_float(minimum: float = -math.inf, maximum: float = math.inf, *,
                 above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [minimum, maximum] — (minimum, maximum] when
    `above` — so NaN, ±inf and overflowing text like '1e400' are refused."""
    if maximum < math.inf:
        what = f"a number in {'(' if above else '['}{minimum:g}, {maximum:g}]"
    elif minimum > -math.inf:
        what = f"a finite number {'>' if above else '>='} {minimum:g}"
    else:
        what = "a finite number"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _bad(f"must be {what}, got {text!r}") from None
        low_ok = value > minimum if above else value >= minimum
        if not math.isfinite(value) or not low_ok or value > maximum:
            raise _bad(f"must be {what}, got {text.strip()!r}")
        return value
    parse.__name__ = "number"
    return parse


def probability(text: str) -> float:
    """An argparse type: a number in (0, 1] (top-p)."""
    return finite_float(0.0, 1.0, above=True)(text)


def int_list(minimum: int = 1, maximum: int = INT32_MAX,
             none: bool = False) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: 'a,b,c' with each an integer in [minimum, maximum], at most MAX_LIST
    of them; with none=True the word 'none' gives the empty tuple."""
    one = integer(minimum, maximum)

    def parse(text: str) -> tuple[int, ...]:
        if none and text.strip().lower() == "none":
            return ()
        parts = text.split(",")
        if len(parts) > MAX_LIST:
            raise _bad(f"at most {MAX_LIST} values, got {len(parts)}")
        if any(not p.strip() for p in parts):
            raise _bad(f"must be comma-separated integers, got {text!r}")
        return tuple(one(p) for p in parts)
    parse.__name__ = "list"
    return parse


def _path(text: str) -> Path:
    if not text.strip():
        raise _bad("needs a path, got an empty string")
    if "\0" in text:
        raise _bad("a path cannot contain a NUL character")
    return Path(text)


def _probe_directory(directory: Path, label: str) -> None:
    """Refuse unless a file can be created in `directory` (or in its nearest existing
    ancestor, which the command will create it under). Permission bits do not say this:
    root passes every access() check, yet cannot create a file in /proc or on a read-only
    disk, so the only honest test is to try."""
    existing = directory
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise _bad(f"cannot write {label}: {existing} is not a directory")
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".inferbook-write-test-"):
            pass
    except OSError as err:
        raise _bad(f"cannot write {label}: {err.strerror or err} ({existing})") from None


def _checked(check: Callable[[str], Path]) -> Callable[[str], Path]:
    """Any OSError while looking at the path (a name too long, a loop of links) is bad
    input too: argparse only reports ArgumentTypeError, TypeError and ValueError."""
    def parse(text: str) -> Path:
        try:
            return check(text)
        except OSError as err:
            raise _bad(f"cannot use {text[:80]!r}: {err.strerror or err}") from None
    parse.__name__, parse.__doc__ = check.__name__, check.__doc__
    return parse


@_checked
def writable_file(text: str) -> Path:
    """An argparse type: a path a regular file can be written to, checked now.

    An existing regular file must open for appending (nothing is written); a missing one
    must be creatable where it would go. Directories and devices (/dev/full accepts the
    open and fails the write) are refused.
    """
    path = _path(text)
    if path.is_dir():
        raise _bad(f"cannot write {text}: it is a directory")
    if path.exists():
        if not path.is_file():
            raise _bad(f"cannot write {text}: it is not a regular file")
        with open(path, "ab"):
            pass
        return path
    _probe_directory(path.parent, text)
    return path


@_checked
def writable_dir(text: str) -> Path:
    """An argparse type: a directory files can be written into (created later if missing)."""
    path = _path(text)
    if path.exists() and not path.is_dir():
        raise _bad(f"cannot write into {text}: it is not a directory")
    _probe_directory(path, text)
    return path


@_checked
def existing_dir(text: str) -> Path:
    """An argparse type: a directory that exists and can be listed."""
    path = _path(text)
    if not path.is_dir():
        raise _bad(f"{text} is not a directory" if path.exists()
                   else f"directory {text} does not exist")
    if not os.access(path, os.R_OK | os.X_OK):
        raise _bad(f"directory {text} cannot be read")
    return path
