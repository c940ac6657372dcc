"""The inputs of an estimate, checked in one place for the library and the command line.

`estimator.estimate` (the library) and `inferbook estimate` (the CLI) take the same inputs —
a batch, a context, a prompt, a chip count, formats, a layout — the first as Python values,
the second as text. Both go through this module, so an input is refused the same way
whichever door it came in by: an `EstimateInputError` that names the input and says, in one
line, what is wrong with it. The CLI prints it with the input's flag (`--batch: 0 is out of
range (1 to 1,099,511,627,776)`) and exits with code 2; the library raises it (it is a
ValueError).

    whole, parse_whole                 counts: batch, context, prompt, chips
    element_bytes, parse_element_bytes plain bytes per parameter or per cached number
    weight_format, kv_format           storage formats (`quant`)
    compute_format                     the format the matmuls run in, if the chip has its peak
    fraction, parse_fraction           a fraction of a roof (--mbu, --mfu)
    price, parse_price                 dollars per chip-hour
    efficiency_of                      "ideal", "calibrated" or an `Efficiency`, overridden
    check_setting                      what only the model and the chip can tell: one
                                       interconnect domain (or whole hosts, `check_hosts`), a
                                       prompt inside its context, a context inside the
                                       model's positions, a layout that splits the model
"""

from __future__ import annotations

import math
import re
from typing import Any

from inferbook.model.config import ModelConfig
from inferbook.perf import quant
from inferbook.perf.dcn_comms import layout_host_problem
from inferbook.perf.efficiency import COMPUTE_FORMATS, IDEAL, Efficiency, with_overrides
from inferbook.perf.efficiency_defaults import efficiency_for
from inferbook.perf.hardware import Chip
from inferbook.perf.layout_comms import layout_candidates

__all__ = ["EstimateInputError", "MAX_COUNT", "MAX_CHIPS", "whole", "parse_whole",
           "element_bytes", "parse_element_bytes", "weight_format", "kv_format",
           "check_hosts", "check_setting", "compute_format", "fraction", "parse_fraction",
           "price", "parse_price", "MAX_PRICE", "efficiency_of", "EFFICIENCIES"]

MAX_COUNT = 2 ** 40           # batch, tokens beyond this describe no deployment
MAX_CHIPS = 2 ** 20
MIN_BYTES, MAX_BYTES = 0.125, 8
MAX_PRICE = 1e6               # dollars per chip-hour: beyond this no chip is rented
EFFICIENCIES = ("calibrated", "ideal")


class EstimateInputError(ValueError):
    """A bad input of an estimate: `name` is the input (`batch`, `weight_bytes`, ...),
    `problem` what is wrong with it; `flag` is its command-line flag."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"{name}: {problem}")

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


def whole(name: str, value: Any, high: int = MAX_COUNT) -> int:
    """`value` if it is a whole number from 1 to `high` (not a bool, not a float)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise EstimateInputError(name, f"{value!r} is not a whole number")
    if not 1 <= value <= high:
        raise EstimateInputError(name, f"{value:,} is out of range (1 to {high:,})")
    return value


def parse_whole(name: str, text: str, high: int = MAX_COUNT) -> int:
    """A whole number written as digits ("64"); "2.5" is not a whole number, "two" not a
    number."""
    t = text.strip()
    if not re.fullmatch(r"[0-9]+", t):
        numeric = re.fullmatch(r"[-+]?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?", t)
        raise EstimateInputError(name, f"{text!r} is not "
                                       f"{'a whole number' if numeric else 'a number'}")
    return whole(name, int(t), high)


def element_bytes(name: str, value: Any) -> float:
    """Bytes per number from 1/8 (one bit) to 8 (float64), as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EstimateInputError(name, f"{value!r} is not a number")
    if not math.isfinite(value) or not MIN_BYTES <= value <= MAX_BYTES:
        raise EstimateInputError(name, f"{value:g} bytes is out of range "
                                       f"({MIN_BYTES:g} to {MAX_BYTES:g} bytes per number)")
    return float(value)


def parse_element_bytes(name: str, text: str) -> float:
    """Bytes per number written as a decimal ("2", "0.5")."""
    try:
        value = float(text)
    except ValueError:
        raise EstimateInputError(name, f"{text!r} is not a number") from None
    return element_bytes(name, value)


def weight_format(value: str | quant.WeightFormat) -> quant.WeightFormat:
    """A weight storage format: "bf16", "fp8", "int8", "int4[:group]", or a `WeightFormat`."""
    if isinstance(value, quant.WeightFormat):
        return value
    try:
        return quant.parse_weight_format(value)
    except ValueError as err:
        raise EstimateInputError("weights", str(err)) from None


def kv_format(value: str) -> str:
    """A KV-cache storage format, one of `quant.KV_FORMATS`."""
    if value not in quant.KV_FORMATS:
        raise EstimateInputError("kv", f"unknown format {value!r}; "
                                       f"known: {', '.join(quant.KV_FORMATS)}")
    return value


def check_hosts(chip: Chip, chips: int, chips_per_host: int | None) -> None:
    """Chips spread over hosts: each host within one interconnect domain, whole hosts, and a
    data-centre network in the chip's figures when the chips leave their host."""
    n = chips
    if chips_per_host is None:
        if chip.max_chips is not None and n > chip.max_chips:
            raise EstimateInputError("chips", f"{n} chips exceed the {chip.max_chips} that one "
                                              f"{chip.interconnect} domain of {chip.name} "
                                              "joins; give --chips-per-host to spread them "
                                              "over hosts")
        return
    H = whole("chips_per_host", chips_per_host, MAX_CHIPS)
    if chip.max_chips is not None and H > chip.max_chips:
        raise EstimateInputError("chips_per_host", f"{H} chips exceed the {chip.max_chips} "
                                                   f"that one {chip.interconnect} domain of "
                                                   f"{chip.name} joins")
    if n > H and n % H:
        raise EstimateInputError("chips_per_host", f"{n} chips do not fill whole hosts of {H}")
    if n > H and (chip.dcn_bytes_per_s is None or chip.dcn_latency_s is None):
        raise EstimateInputError("chips_per_host", f"{chip.name} has no data-centre network "
                                                   "figures (dcn_bytes_per_s, dcn_latency_s); "
                                                   "a --hardware-config file can give them")


def compute_format(value: Any, chip: Chip) -> str:
    """The format the matmuls run in, one of `efficiency.COMPUTE_FORMATS`, if `chip` has a
    peak for it."""
    if value not in COMPUTE_FORMATS:
        raise EstimateInputError("compute", f"unknown format {value!r}; "
                                            f"known: {', '.join(COMPUTE_FORMATS)}")
    peak = {"bf16": chip.bf16_flops_per_s, "fp8": chip.fp8_flops_per_s,
            "int8": chip.int8_ops_per_s}[value]
    if peak is None:
        raise EstimateInputError("compute", f"{chip.name} has no {value} peak in the "
                                            "registry; a --hardware-config file can give one")
    return value


def fraction(name: str, value: Any) -> float:
    """A fraction of a roof: a number above 0 and at most 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EstimateInputError(name, f"{value!r} is not a number")
    if not math.isfinite(value) or not 0 < value <= 1:
        raise EstimateInputError(name, f"{value:g} is not a fraction above 0 and at most 1")
    return float(value)


def parse_fraction(name: str, text: str) -> float:
    """A fraction written as a decimal ("0.8")."""
    try:
        value = float(text)
    except ValueError:
        raise EstimateInputError(name, f"{text!r} is not a number") from None
    return fraction(name, value)


def price(name: str, value: Any) -> float:
    """Dollars per chip-hour: a positive number up to MAX_PRICE."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise EstimateInputError(name, f"{value!r} is not a number")
    if not math.isfinite(value) or not 0 < value <= MAX_PRICE:
        raise EstimateInputError(name, f"{value:g} dollars per chip-hour is out of range "
                                       f"(above 0, at most {MAX_PRICE:,.0f})")
    return float(value)


def parse_price(name: str, text: str) -> float:
    """Dollars per chip-hour written as a decimal ("2.49"), a leading "$" allowed."""
    try:
        value = float(text.strip().removeprefix("$"))
    except ValueError:
        raise EstimateInputError(name, f"{text!r} is not a number") from None
    return price(name, value)


def efficiency_of(value: Efficiency | str, chip: Chip, *, mbu: float | None = None,
                  mfu: float | None = None) -> Efficiency:
    """The efficiency an estimate applies: "calibrated" (the chip's fit,
    `efficiency_defaults.efficiency_for`), "ideal" (the bare roofline) or an `Efficiency`,
    with `mbu` / `mfu` replacing its fractions."""
    if isinstance(value, Efficiency):
        eff = value
    elif value in EFFICIENCIES:
        eff = IDEAL if value == "ideal" else efficiency_for(chip)
    else:
        raise EstimateInputError("efficiency", f"unknown efficiency {value!r}; known: "
                                               f"{', '.join(EFFICIENCIES)} or an Efficiency")
    return with_overrides(eff, mbu=None if mbu is None else fraction("mbu", mbu),
                          mfu=None if mfu is None else fraction("mfu", mfu))


def check_setting(cfg: ModelConfig, chip: Chip, *, batch: int, context: int | None,
                  prompt: int | None, chips: int, layout: str | None = None,
                  output: int | None = None, strict: bool = False,
                  chips_per_host: int | None = None) -> tuple[int, int, list[str]]:
    """(context, prompt, warnings) of a setting the model and the chip can serve.

    The context defaults to the model's positions and the prompt to the context. Refuses
    more chips than one interconnect domain joins (or, over hosts of `chips_per_host`, hosts
    larger than a domain, chips that do not fill whole hosts, a chip without data-centre
    network figures), a prompt longer than its context, a context (or a prompt and its
    `output` tokens) beyond the model's positions when `strict` (otherwise a warning), and a
    layout (or, with none named, a chip count) that cannot split the model at this batch,
    or does not line up with the hosts.
    """
    B, n = whole("batch", batch), whole("chips", chips, MAX_CHIPS)
    check_hosts(chip, n, chips_per_host)
    if context is None and cfg.max_seq_len > MAX_COUNT:
        raise EstimateInputError("context", f"{cfg.name} claims {cfg.max_seq_len:,} "
                                            "positions, too many to be the default context; "
                                            "give a context")
    S = cfg.max_seq_len if context is None else whole("context", context)
    T = S if prompt is None else whole("prompt", prompt)
    if T > S:
        raise EstimateInputError("prompt", f"{T:,} tokens cannot exceed the context "
                                           f"({S:,} tokens) it is part of")
    warnings = []
    if S > cfg.max_seq_len:
        text = f"{S:,} exceeds the {cfg.max_seq_len:,} positions {cfg.name} was trained for"
        if strict:
            raise EstimateInputError("context", text)
        warnings.append(f"context {text}")
    if output is not None and T + whole("output", output) - 1 > cfg.max_seq_len:
        text = (f"{output:,} tokens after a {T:,}-token prompt exceed the "
                f"{cfg.max_seq_len:,} positions {cfg.name} was trained for")
        if strict:
            raise EstimateInputError("output", text)
        warnings.append(f"output {text}")
    if n > 1:
        candidates, problem = layout_candidates(cfg, n, B, layout)
        if not candidates:
            raise EstimateInputError("layout" if layout else "chips", problem or "")
        if chips_per_host is not None:
            misfits = [layout_host_problem(name, n, chips_per_host, X) for name, X in candidates]
            if all(misfits):
                raise EstimateInputError("chips_per_host", misfits[0] or "")
    return S, T, warnings
