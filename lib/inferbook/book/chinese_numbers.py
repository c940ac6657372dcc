"""Glued values in Chinese: the same numbers, written the way Chinese counts.

English groups large numbers by thousands (million, billion, trillion); Chinese by ten
thousands: 万 (10⁴), 亿 (10⁸), 万亿 (10¹²). "13.0 million parameters" is "1,300 万个参数",
"1.2 billion" is "12 亿". `to_chinese` rewrites the text that `inferbook.book.present`'s
formatters produce — a closed vocabulary: a number followed by thousand, million, billion or
trillion, a ratio ("3.1×", which Chinese writes "3.1 倍"), and the unit tokens/s — and
leaves everything else (GB, ms, FLOPs, %, a mesh's 4×4, a count such as 8× H100) as it is,
since Chinese technical writing uses those symbols too.

The conversion only moves the decimal point (every scale is a power of ten) and drops the
digits that the move turns into trailing zeros, so the Chinese text states exactly the number
the English one does: nothing is rounded again.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["to_chinese", "SCALES_EN", "SCALES_ZH"]

SCALES_EN = {"thousand": 3, "million": 6, "billion": 9, "trillion": 12}   # powers of ten
SCALES_ZH = ((12, "万亿"), (8, "亿"), (4, "万"), (0, ""))
WORDS = {"tokens/s": "词元/秒", "n/a": "不适用"}

_AMOUNT = re.compile(r"(?P<number>-?\d[\d,]*(?:\.(?P<decimals>\d+))?)\s+"
                     r"(?P<scale>thousand|million|billion|trillion)\b(?P<tail>\s+tokens/s)?")


def _amount(m: re.Match) -> str:
    exponent = SCALES_EN[m["scale"]]
    value = Decimal(m["number"].replace(",", "")).scaleb(exponent)
    for zh_exponent, unit in SCALES_ZH:
        if abs(value) >= Decimal(10) ** zh_exponent or zh_exponent == 0:
            break
    decimals = len(m["decimals"] or "") - (exponent - zh_exponent)
    scaled = value.scaleb(-zh_exponent)
    text = f"{scaled:,.{max(decimals, 0)}f}"
    if m["tail"]:
        return f"{text} {unit}{WORDS['tokens/s']}"
    return f"{text} {unit}".rstrip()


# A ratio as `inferbook.book.present.fmt_ratio` writes it: a number, then ×, then no operand
# (4×4 is a mesh, 8× H100 a count of chips).
_RATIO = re.compile(r"(?<![\w.,])(?P<number>\d[\d,]*(?:\.\d+)?)×(?![ \t]*[A-Za-z0-9_$\\]|\()")


def to_chinese(text: str) -> str:
    """A formatted value (``"13.0 million"``, ``"2.50 million tokens/s"``, ``"3.1×"``) in
    Chinese (``"1,300 万"``, ``"250 万词元/秒"``, ``"3.1 倍"``)."""
    text = _AMOUNT.sub(_amount, text)
    text = _RATIO.sub(lambda m: f"{m['number']} 倍", text)
    for english, chinese in WORDS.items():
        text = re.sub(rf"(?<![\w/]){re.escape(english)}(?![\w/])", chinese, text)
    return text
