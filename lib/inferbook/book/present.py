"""Putting computed numbers into the book's prose.

Chapters never type a number the library can compute. They compute it, format it with one of
the helpers below, and `glue` it under a name; the Markdown then says
``{glue:text}`kv_bytes_13b` `` and the built page shows the value of that run. Every glued
value is also kept in this kernel (`inferbook.book.prose`), where the Colab twins' prose cells
read it: Colab has no myst-nb, and its notebooks show the same sentences with the numbers that
the reader's own run computed.

The book has an English and a Chinese edition, rendered from one execution
(`inferbook.book.language`): `glue` stores each value once per language, under ``name`` and
``name__zh``, the second in Chinese form ("13.0 million" becomes "1,300 万",
`inferbook.book.chinese_numbers`; a `bilingual` word its Chinese form).

Formatting is decimal and explicit about units, as the sources are: 1 GB = 1e9 bytes.
"""

from __future__ import annotations

import math
from typing import Any

from inferbook.book import prose
from inferbook.book.chinese_numbers import to_chinese
from inferbook.book.language import LANGUAGES, Bilingual, bilingual, glued_name, localized

__all__ = ["glue", "bilingual", "fmt_bytes", "fmt_seconds", "fmt_count", "fmt_flops", "fmt_rate",
           "fmt_tokens_per_s", "fmt_ratio", "fmt_percent"]


def glue(name: str, value: Any) -> None:
    """Record `value` under `name` for the book (myst-nb) and for this kernel's Colab prose;
    shows nothing in the notebook. Each language's form goes under its own name (see above).

    Strings are inserted as they are, so pre-format numbers with the helpers below.
    """
    try:
        from myst_nb import glue as myst_glue
    except ImportError:      # Colab or a bare kernel: no book build to glue into
        myst_glue = None
    for lang in LANGUAGES:
        key, shown = glued_name(name, lang), _in_language(value, lang)
        prose.record(key, shown)
        if myst_glue is not None:
            myst_glue(key, shown, display=False)


def _in_language(value: Any, lang: str) -> Any:
    """A glued value as `lang`'s edition shows it: text translated, other objects as they
    are (a figure is drawn per language by `inferbook.book.figures`)."""
    if not isinstance(value, str):
        return value
    text = localized(value, lang)
    if lang == "zh" and not (isinstance(value, Bilingual) and "zh" in value.forms):
        text = to_chinese(text)
    return str(text)


def _scaled(value: float, units: list[tuple[float, str]], digits: int) -> str:
    for scale, unit in units:
        if abs(value) >= scale:
            return f"{value / scale:,.{digits}f} {unit}"
    scale, unit = units[-1]
    return f"{value / scale:,.{digits}f} {unit}"


def fmt_bytes(n: float, digits: int = 1) -> str:
    """1.5e9 -> '1.5 GB' (decimal units, as datasheets use)."""
    return _scaled(n, [(1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"),
                       (1, "B")], digits)


def fmt_seconds(t: float, digits: int = 1) -> str:
    """0.0123 -> '12.3 ms'."""
    return _scaled(t, [(1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")], digits)


def fmt_count(n: float, digits: int = 1) -> str:
    """13.0e9 -> '13.0 billion'; small integers print exactly with separators."""
    if abs(n) < 1e6 and float(n).is_integer():
        return f"{int(n):,}"
    return _scaled(n, [(1e12, "trillion"), (1e9, "billion"), (1e6, "million")], digits)


def fmt_flops(n: float, digits: int = 1) -> str:
    """2.6e13 -> '26.0 TFLOPs' (an amount of work, not a rate)."""
    return _scaled(n, [(1e15, "PFLOPs"), (1e12, "TFLOPs"), (1e9, "GFLOPs"), (1e6, "MFLOPs"),
                       (1e3, "kFLOPs"), (1, "FLOPs")], digits)


def fmt_rate(n: float, unit: str = "B/s", digits: int = 1) -> str:
    """8.2e11 -> '820.0 GB/s'; unit is 'B/s', 'FLOP/s' or 'tokens/s'."""
    base = unit.split("/")[0]
    prefixes = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")]
    if base == "tokens":
        return _scaled(n, [(1e6, "million tokens/s"), (1e3, "thousand tokens/s"),
                           (1, "tokens/s")], digits)
    return _scaled(n, [(s, f"{p}{unit}") for s, p in prefixes], digits)


def fmt_tokens_per_s(n: float) -> str:
    """1428.4 -> '1,428 tokens/s'; 2.5e6 -> '2.50 million tokens/s'.

    Every digit a reader needs to check a ratio quoted beside the rate: a whole number below a
    million (never '1 thousand tokens/s'), three significant figures above.
    """
    if abs(n) < 1e6:
        return f"{n:,.0f} tokens/s"
    return fmt_rate(n, "tokens/s", 2)


def fmt_ratio(x: float, digits: int = 1) -> str:
    """3.14159 -> '3.1×', in Chinese '3.1 倍' (a Chinese sentence says 快了 3.1 倍, never 3.1×).

    The Chinese form is made where every glued value gets its Chinese form,
    `inferbook.book.chinese_numbers.to_chinese`, so a ratio formatted into a longer string
    ("3.1× (measured)") reads 倍 too."""
    return f"{x:,.{digits}f}×"


def fmt_percent(x: float, digits: int = 0) -> str:
    """0.734 -> '73%'."""
    if math.isnan(x):
        return "n/a"
    return f"{100 * x:.{digits}f}%"
