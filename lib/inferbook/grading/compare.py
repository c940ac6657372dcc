"""Comparing a student's output with the library's, and saying what differs.

Feedback names shapes, dtypes, the first differing entry and the tolerance — never the whole
reference output — and an error is reported with the line of the student's own code that
raised it, not the library's or JAX's internals.
"""

from __future__ import annotations

import numbers
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from inferbook.grading.localize import say

__all__ = ["Compare", "describe", "as_numpy", "compare_arrays", "allclose", "error_line",
           "ReportedError"]

Compare = Callable[[Any, Any], "str | None"]


def describe(x: Any) -> str:
    """A short description of a value for feedback: type and shape, not contents."""
    if x is None:
        return "None"
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return f"{type(x).__name__} of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, (tuple, list)):
        inner = ", ".join(describe(v) for v in x[:4])
        return f"{type(x).__name__} of {len(x)} ({inner}{', ...' if len(x) > 4 else ''})"
    if isinstance(x, (bool, numbers.Number)):
        return repr(x)
    return type(x).__name__


def as_numpy(x: Any) -> Any:
    """Student outputs as numpy: JAX arrays are read back (which waits for them)."""
    if isinstance(x, (tuple, list)):
        return type(x)(as_numpy(v) for v in x)
    if hasattr(x, "__array__") and not isinstance(x, np.ndarray):
        return np.asarray(x)
    return x


def compare_arrays(got: Any, want: np.ndarray, rtol: float, atol: float,
                   name: str | None = None) -> str | None:
    """None if `got` is an array like `want` within tolerance, else what is wrong (in the
    notebook's language, `localize.say`)."""
    name = say("the output") if name is None else name
    if not isinstance(got, np.ndarray):
        original = got
        try:
            got = np.asarray(got)
        except Exception:  # noqa: BLE001
            got = None
        if got is None or got.dtype.kind not in "biuf":
            return say("{name} should be an array of shape {shape}, got {got}", name=name,
                       shape=want.shape, got=describe(original))
    if got.dtype.kind not in "biuf":
        return say("{name} has dtype {dtype}; expected numbers", name=name, dtype=got.dtype)
    if got.shape != want.shape:
        return say("{name} has shape {got}; expected {want}", name=name, got=got.shape,
                   want=want.shape)
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    bad = ~np.isclose(got64, want64, rtol=rtol, atol=atol, equal_nan=False)
    if not bad.any():
        return None
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    if np.isnan(got64[where]):
        return say("{name} contains NaN (first at index {where})", name=name, where=where)
    return say("{name} differs at {n} of {size} entries (first at index {where}: {got} instead "
               "of {want}; tolerance rtol={rtol}, atol={atol})", name=name, n=int(bad.sum()),
               size=bad.size, where=where, got=f"{got64[where]:.6g}",
               want=f"{want64[where]:.6g}", rtol=f"{rtol:g}", atol=f"{atol:g}")


def allclose(rtol: float = 1e-5, atol: float = 1e-6,
             names: Sequence[str] | None = None) -> Compare:
    """A comparison of arrays, or of a tuple of arrays (named by `names`) — e.g. (out, lse)."""
    def compare(got: Any, want: Any) -> str | None:
        if isinstance(want, tuple):
            if not isinstance(got, (tuple, list)) or len(got) != len(want):
                return say("return a tuple of {n} arrays ({names}); got {got}", n=len(want),
                           names=", ".join(names or []), got=describe(got))
            for i, (g, w) in enumerate(zip(got, want)):
                label = names[i] if names else say("output {i}", i=i)
                msg = compare_arrays(g, np.asarray(w), rtol, atol, f"`{label}`")
                if msg:
                    return msg
            return None
        return compare_arrays(got, np.asarray(want), rtol, atol)
    return compare


_NOT_STUDENT_CODE = (str(Path(__file__).resolve().parents[1]), sysconfig.get_paths()["stdlib"],
                     "site-packages", "dist-packages")


class ReportedError(Exception):
    """An error raised in another process, known only by its `error_line` (the sealed runner)."""


def error_line(err: BaseException) -> str:
    """`TypeError: ...` and the innermost line of the student's own code that raised it."""
    if isinstance(err, ReportedError):
        return str(err)
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not any(part in f.filename for part in _NOT_STUDENT_CODE)]
    where = f" (in `{frames[-1].name}`: `{(frames[-1].line or '').strip()}`)" if frames else ""
    text = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
    return f"{type(err).__name__}{': ' + text if text else ''}{where}"
