"""Accelerators: the one table every number in the book is computed from.

`CHIPS` holds each chip of `inferbook.perf.accelerators` by name: what the roofline model
needs — memory, memory bandwidth, peak dense arithmetic, interconnect — with units in the
field names (`inferbook.perf.chip.Chip` says what each means) and its datasheet beside it.
`get_chip` finds one by the names people type, `chip_for_device` the one a JAX device is, and
`chip_from_json` reads a chip of the reader's own.
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from inferbook.perf.accelerators import ACCELERATORS
from inferbook.perf.chip import Chip, HardwareError

__all__ = ["Chip", "CHIPS", "get_chip", "chip_for_device", "chip_from_json",
           "HardwareError"]

CHIPS: dict[str, Chip] = {c.name: c for c in ACCELERATORS}

_ALIASES = {name.lower().replace(" ", "-"): name for name in CHIPS}
# Short names people type: a bare generation means the chip the registry has of it.
_ALIASES |= {"h100": "H100 SXM", "h100-sxm5": "H100 SXM", "h200-sxm": "H200", "v4": "TPU v4",
             "v5e": "TPU v5e", "v5p": "TPU v5p", "v6e": "TPU v6e", "gaudi3": "Gaudi 3"}


def get_chip(name: str) -> Chip:
    """A chip by name; case and spaces/hyphens do not matter ('tpu-v5e', 'TPU v5e')."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    if key in _ALIASES:
        return CHIPS[_ALIASES[key]]
    raise HardwareError(f"unknown hardware {name!r}; known: {', '.join(CHIPS)}")


def chip_for_device(device_kind: str) -> Chip | None:
    """The registry's entry for a JAX device kind (`jax.devices()[0].device_kind`), or None
    where the registry has no such chip (CPUs, unknown accelerators)."""
    kind = device_kind.lower()
    if "h100" in kind and "pcie" in kind:       # not in the registry (less bandwidth than SXM)
        return None
    for key, name in [("gb200", "GB200"), ("b200", "B200"), ("mi300x", "MI300X"),
                      ("h200", "H200"), ("h100", "H100 SXM"), ("a100", "A100 80GB"),
                      ("l4", "L4"), ("a10", "A10"), ("v5 lite", "TPU v5e"), ("v5e", "TPU v5e"),
                      ("v6", "TPU v6e"), ("v5p", "TPU v5p"), ("v4", "TPU v4")]:
        if key in kind:
            return CHIPS[name]
    return None


def _refuse_constant(name: str) -> float:
    raise HardwareError(f"{name} is not a number a chip can have")


def chip_from_json(source: str | Path | dict[str, Any]) -> Chip:
    """A custom chip from JSON with at least hbm_bytes, hbm_bandwidth (B/s) and flops (FLOP/s).

    The registry's own field names (hbm_bytes_per_s, bf16_flops_per_s, ...) are accepted too.
    Every number must be positive and finite (NaN, Infinity and 1e400 are refused, naming the
    key), `links` and `max_chips` whole numbers, and the labels strings.
    """
    if isinstance(source, dict):
        raw, where = source, "hardware config"
    else:
        path = Path(source)
        try:
            raw = json.loads(path.read_text(), parse_constant=_refuse_constant)
        except FileNotFoundError:
            raise HardwareError(f"hardware config {str(path)!r} does not exist") from None
        except IsADirectoryError:
            raise HardwareError(f"hardware config {str(path)!r} is a directory") from None
        except HardwareError as err:
            raise HardwareError(f"{str(path)!r}: {err}") from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise HardwareError(f"cannot read hardware config {str(path)!r} as JSON: "
                                f"{first}") from None
        where = repr(str(path))
    if not isinstance(raw, dict):
        raise HardwareError(f"{where} must hold a JSON object")
    data = dict(raw)
    data.setdefault("hbm_bytes_per_s", data.pop("hbm_bandwidth", None))
    data.setdefault("bf16_flops_per_s", data.pop("flops", None))
    data.setdefault("int8_ops_per_s", None)
    data.setdefault("name", "custom")
    unknown = set(data) - {f.name for f in fields(Chip)}
    if unknown:
        raise HardwareError(f"{where} has unknown keys: {', '.join(sorted(unknown))}")
    aliases = {"hbm_bytes_per_s": "hbm_bandwidth", "bf16_flops_per_s": "flops"}
    for key in ("hbm_bytes", "hbm_bytes_per_s", "bf16_flops_per_s"):
        if data.get(key) is None:
            raise HardwareError(f"{where} is missing the key {aliases.get(key, key)!r}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("name", "interconnect", "source"):
            if value is not None and not isinstance(value, str):
                raise HardwareError(f"{where}: {key} must be a string, got {value!r}")
            out[key] = value if value is not None or key == "interconnect" else ""
        elif value is None:
            out[key] = None
        elif key in ("links", "max_chips"):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2 ** 31:
                raise HardwareError(f"{where}: {key} must be a positive whole number, "
                                    f"got {value!r}")
            out[key] = value
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise HardwareError(f"{where}: {aliases.get(key, key)} must be a positive "
                                    f"finite number, got {value!r}")
            out[key] = float(value)
    return Chip(**out)
