"""Answers as plain data: what may cross from a student's process to the grader.

A sealed grader never lets an object made by the student's code into its own process: an
object can run code when it is compared (`__eq__`), converted (`__float__`) or even printed.
So the student's side turns each answer into JSON — numbers, text, lists, dicts and arrays
(their raw bytes, shape and dtype) — with `encode`, and the grader rebuilds only those with
`decode`, which accepts nothing else: no pickle, no object dtypes, no classes.

Anything that is not plain data becomes a marker the grader can explain: a function (graded by
running its source in a sandbox, see `function_runner`) or an unsupported object (named by its
type, so the feedback can say "got a Foo").
"""

from __future__ import annotations

import base64
import math
import numbers
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["AnswerFormatError", "Callable", "Unsupported", "encode", "decode", "MAX_BYTES"]

MAX_BYTES = 16 * 2**20          # one answer: enough for any exercise, not for a memory bomb
_MAX_DEPTH = 32
# The dtypes an array answer may have: numbers and booleans (bfloat16 & co. via ml_dtypes).
_KINDS = "biufc"
_EXTRA_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "int4", "uint4")


class AnswerFormatError(ValueError):
    """The data claiming to be an answer is not one of the plain forms `decode` accepts."""


class Callable:
    """Marks an answer that was a function: the grader runs its source, not the object."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<function {self.name}>"


class Unsupported:
    """Marks an answer the student's side could not turn into plain data."""

    def __init__(self, description: str) -> None:
        self.description = description

    def __repr__(self) -> str:
        return self.description


def _array(x: np.ndarray) -> dict[str, Any]:
    x = np.array(x, order="C", copy=True)      # (ascontiguousarray would make 0-d arrays 1-d)
    return {"__array__": {"dtype": x.dtype.name, "shape": list(x.shape),
                          "data": base64.b64encode(x.tobytes()).decode("ascii")}}


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as JSON-ready plain data (run on the student's side: may call its methods)."""
    if depth > _MAX_DEPTH:
        raise AnswerFormatError("the answer is nested too deeply")
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if value is Ellipsis:
        return {"__ellipsis__": True}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return {"__int__": str(int(value))}           # exact, whatever its size
    if isinstance(value, numbers.Real):
        x = float(value)
        return x if math.isfinite(x) else {"__float__": repr(x)}
    if isinstance(value, (list, tuple)):
        items = [encode(v, depth + 1) for v in value]
        return {"__tuple__": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return {"__unsupported__": "a dict whose keys are not all text"}
        return {"__dict__": {str(k): encode(v, depth + 1) for k, v in value.items()}}
    if callable(value) and not hasattr(value, "__array__"):
        name = getattr(value, "__name__", type(value).__name__)
        return {"__callable__": str(name)}
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        try:
            arr = np.asarray(value)
        except Exception:  # noqa: BLE001 - anything a student hands in
            arr = None
        if arr is not None and (arr.dtype.kind in _KINDS or arr.dtype.name in _EXTRA_DTYPES):
            return _array(arr)
    return {"__unsupported__": _describe(value)}


def _describe(value: Any) -> str:
    kind = type(value)
    return f"a {kind.__module__}.{kind.__qualname__} object" if kind.__module__ != "builtins" \
        else f"a {kind.__qualname__}"


def _dtype(name: Any) -> np.dtype:
    if not isinstance(name, str):
        raise AnswerFormatError("an array's dtype must be named")
    if name in _EXTRA_DTYPES:
        return np.dtype(getattr(ml_dtypes, name))
    try:
        dtype = np.dtype(name)
    except TypeError:
        raise AnswerFormatError(f"unknown dtype {name[:40]!r}") from None
    if dtype.kind not in _KINDS:
        raise AnswerFormatError(f"dtype {name[:40]!r} is not numeric")
    return dtype


def _decode_array(spec: Any) -> np.ndarray:
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data"}:
        raise AnswerFormatError("a malformed array")
    dtype, shape = _dtype(spec["dtype"]), spec["shape"]
    if not (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape)):
        raise AnswerFormatError("an array's shape must be a list of sizes")
    if not isinstance(spec["data"], str):
        raise AnswerFormatError("an array's data must be base64 text")
    raw = base64.b64decode(spec["data"].encode("ascii"), validate=True)
    if len(raw) != math.prod(shape) * dtype.itemsize:
        raise AnswerFormatError("an array's data does not match its shape and dtype")
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(shape)).copy()


def decode(data: Any, depth: int = 0) -> Any:
    """Plain data from `encode`'s JSON (run by the grader: builds no object of the student's)."""
    if depth > _MAX_DEPTH:
        raise AnswerFormatError("the answer is nested too deeply")
    if data is None or type(data) in (bool, str):
        return data
    if type(data) is float:
        return data
    if type(data) is int:               # JSON numbers that json.loads made ints
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) != 1:
        raise AnswerFormatError("not an encoded answer")
    (tag, body), = data.items()
    if tag == "__int__" and isinstance(body, str) and len(body) <= 4300:
        try:
            return int(body)
        except ValueError:
            raise AnswerFormatError("a malformed integer") from None
    if tag == "__float__" and body in ("nan", "inf", "-inf"):
        return float(body)
    if tag == "__ellipsis__":
        return Ellipsis
    if tag == "__tuple__" and type(body) is list:
        return tuple(decode(v, depth + 1) for v in body)
    if tag == "__dict__" and type(body) is dict:
        return {str(k): decode(v, depth + 1) for k, v in body.items()}
    if tag == "__array__":
        return _decode_array(body)
    if tag == "__callable__" and isinstance(body, str):
        return Callable(body[:100])
    if tag == "__unsupported__" and isinstance(body, str):
        return Unsupported(body[:200])
    raise AnswerFormatError(f"unknown tag {str(tag)[:40]!r}")
