"""Checks at the serving API's boundary: each argument is what it claims, or a ValueError.

An engine or a scheduler given a bad number seldom fails where the number enters. A block
size of 0 fails later as a ZeroDivisionError deep in the block arithmetic; a pool of 0 blocks
used to mean "the default", so a typo silently changed the experiment; a token id past the
vocabulary is clamped by the embedding lookup and the request runs with a different prompt;
a NaN bandwidth makes every transfer take NaN seconds and every comparison with it false.
So every public constructor and entry point of `inferbook.serving` passes its arguments
through these functions first, on the host, once — never inside a compiled step — and a
Python caller gets one line saying which argument is wrong and why.

`None` is the only way to ask for a default; 0 is a value like any other, and is refused
where it makes no sense.
"""

from __future__ import annotations

import math
import numbers
import operator
from typing import Any, Iterable

__all__ = ["integer", "positive_int", "nonnegative_int", "optional_positive_int", "finite_number",
           "token_ids", "SEED_LIMIT"]

# Sampling keys are 32-bit: with JAX's default (no 64-bit) types, jax.random.key(2**32 + s)
# is jax.random.key(s), so larger seeds would only pretend to be different.
SEED_LIMIT = 2**32


def integer(name: str, value: Any) -> int:
    """`value` as an int, whatever integer type it has; bool, float and str are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    return int(value)


def positive_int(name: str, value: Any) -> int:
    """`value` as an int ≥ 1 (a bool, a float or a string is refused, not converted)."""
    value = integer(name, value)
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value}")
    return value


def nonnegative_int(name: str, value: Any, limit: int | None = None) -> int:
    """`value` as an int in [0, limit) (no upper limit when limit is None)."""
    value = integer(name, value)
    if value < 0 or (limit is not None and value >= limit):
        bound = "" if limit is None else f" and below {limit}"
        raise ValueError(f"{name} must be an integer >= 0{bound}, got {value}")
    return value


def optional_positive_int(name: str, value: Any) -> int | None:
    """None (the default, whatever the caller defines it to be) or an int ≥ 1."""
    return None if value is None else positive_int(name, value)


def finite_number(name: str, value: Any, *, minimum: float = -math.inf,
                  strictly: bool = False) -> float:
    """`value` as a finite float ≥ minimum (> minimum when strictly); NaN and ±inf refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    below = value <= minimum if strictly else value < minimum
    if not math.isfinite(value) or below:
        relation = ">" if strictly else ">="
        bound = "" if minimum == -math.inf else f" {relation} {minimum:g}"
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return value


def token_ids(where: str, tokens: Iterable[Any], vocab_size: int | None = None) -> tuple[int, ...]:
    """Tokens as a tuple of ints in [0, vocab_size) (≥ 0 when the vocabulary is unknown).

    Integers of any kind pass (Python, numpy, JAX scalars); 1.0 does not: a float token id
    is a bug upstream, and int() would hide it.
    """
    try:
        ids = tuple(operator.index(t) for t in tokens)
    except TypeError:
        raise ValueError(f"{where}: token ids must be integers") from None
    bad = [t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)]
    if bad:
        span = "[0, ∞)" if vocab_size is None else f"[0, {vocab_size})"
        raise ValueError(f"{where}: token ids outside the vocabulary {span}: "
                         f"{', '.join(map(str, bad[:5]))}")
    return ids
