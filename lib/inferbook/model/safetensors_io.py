"""Reading and writing the safetensors format: the bytes of a Hugging Face checkpoint.

A .safetensors file is an 8-byte little-endian header length n, n bytes of JSON, then the
data: one byte buffer that the tensors tile exactly. The header maps each tensor's name to its
dtype, its shape and the [begin, end) byte range it occupies in that buffer; an optional
``"__metadata__"`` entry maps strings to strings.

A checkpoint comes from someone else, so nothing in its header is trusted: `read_header`
checks every claim against the file before a byte of data is read — the header is a JSON
object, every dtype is known, shapes are lists of non-negative integers, every byte range lies
inside the data, holds exactly prod(shape) × itemsize bytes and overlaps no other, and the
ranges cover the buffer without gaps (the format's own rule). A truncated download then fails
with one line naming the file and the tensor whose bytes are missing, instead of a numpy
reshape error. The tensors themselves are read by the `safetensors` package, which checks the
same again (bfloat16 arrives as ml_dtypes' numpy type). `checkpoint` arranges what is read here
into the library's params pytree.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy: the package reads BF16 through it)
import numpy as np
from safetensors import SafetensorError, safe_open

from inferbook.model.features import CheckpointError

__all__ = ["CheckpointError", "TensorEntry", "read_header", "read_safetensors",
           "write_safetensors", "require_floating", "MAX_HEADER_BYTES"]


# The dtypes a numpy reader can hold, by their names in the format. (The format also has
# 8-, 6- and 4-bit floats; numpy has no type for them, so they are refused by name.)
DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
          "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32, "I16": np.int16,
          "I8": np.int8, "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
          "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
_FLOATING = {np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16),
             np.dtype(ml_dtypes.bfloat16)}

# The safetensors package refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header, checked: its bytes are data[begin:end] of the file's buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json.loads hook: a name given twice would silently keep the second tensor."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"the header names {key!r} twice")
        out[key] = value
    return out


def _raw_header(path: Path) -> tuple[Any, int]:
    """The header's JSON value and the size of the data buffer after it."""
    try:
        size = os.stat(path).st_size
        with open(path, "rb") as f:
            prefix = f.read(8)
            if len(prefix) < 8:
                raise CheckpointError(f"{path} is not a readable safetensors file: {size} bytes "
                                      "is too short for the 8-byte header length")
            (n,) = struct.unpack("<Q", prefix)
            if n > size - 8:
                raise CheckpointError(f"{path} is not a readable safetensors file: its header "
                                      f"length {n} runs past the end of the file ({size} bytes)")
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path}: header of {n} bytes is larger than the "
                                      f"{MAX_HEADER_BYTES} the format allows")
            text = f.read(n)
    except OSError as err:
        raise CheckpointError(f"{path} is not a readable safetensors file: "
                              f"{err.strerror or err}") from None
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError:
        raise CheckpointError(f"{path} is not a readable safetensors file: its header is not "
                              "UTF-8 text") from None
    except (ValueError, RecursionError) as err:      # RecursionError: absurdly deep nesting
        raise CheckpointError(f"{path} is not a readable safetensors file: its header is not "
                              f"valid JSON ({str(err).splitlines()[0]})") from None
    return header, size - 8 - n


def _entry(path: Path, name: str, info: Any, data_size: int) -> TensorEntry:
    """Check one tensor's header entry against the data buffer's size."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise CheckpointError(f"{where}: its header entry is not an object")
    for key in ("dtype", "shape", "data_offsets"):
        if key not in info:
            raise CheckpointError(f"{where} has no {key!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise CheckpointError(f"{where} has unsupported dtype {dtype!r} "
                              f"(supported: {', '.join(DTYPES)})")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(f"{where} has shape {shape!r}; a shape is a list of "
                              "non-negative integers")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_int, offsets))):
        raise CheckpointError(f"{where} has data_offsets {offsets!r}; they must be two integers")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise CheckpointError(f"{where} has data_offsets [{begin}, {end}]; they must satisfy "
                              "0 <= begin <= end")
    if end > data_size:
        raise CheckpointError(f"{where} needs bytes [{begin}, {end}) but the file holds only "
                              f"{data_size} bytes of data (a truncated file?)")
    needed = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
    if end - begin != needed:
        raise CheckpointError(f"{where} is {dtype} of shape {tuple(shape)}, which takes "
                              f"{needed} bytes, but its data_offsets span {end - begin}")
    return TensorEntry(name, dtype, tuple(shape), begin, end)


def read_header(path: str | Path) -> dict[str, TensorEntry]:
    """The tensors a .safetensors file holds, every claim of its header checked against the file.

    Raises CheckpointError with one line naming the file (and the tensor, where one is at
    fault) for anything the format does not allow.
    """
    path = Path(path)
    header, data_size = _raw_header(path)
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: the header is a JSON {type(header).__name__}, "
                              "not an object")
    metadata = header.pop("__metadata__", None)
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        raise CheckpointError(f"{path}: __metadata__ must map strings to strings")
    entries = [_entry(path, name, info, data_size) for name, info in header.items()]
    # The ranges must tile the buffer: sorted by where they start, each begins where the
    # previous ended. An overlap means two tensors share bytes; a gap, bytes nobody owns.
    position, previous = 0, None
    for e in sorted(entries, key=lambda e: (e.begin, e.end)):
        if e.begin < position:
            raise CheckpointError(f"{path}: tensor {e.name!r} (bytes [{e.begin}, {e.end})) "
                                  f"overlaps tensor {previous!r}")
        if e.begin > position:
            raise CheckpointError(f"{path}: data bytes [{position}, {e.begin}) before tensor "
                                  f"{e.name!r} belong to no tensor")
        position, previous = e.end, e.name
    if position != data_size:
        raise CheckpointError(f"{path}: data bytes [{position}, {data_size}) at the end of "
                              "the file belong to no tensor")
    return {e.name: e for e in entries}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file as numpy arrays, after `read_header` checked it."""
    path = Path(path)
    entries = read_header(path)
    tensors = {}
    try:
        with safe_open(str(path), framework="np") as f:
            for name, e in entries.items():
                array = f.get_tensor(name)
                if array.dtype != DTYPES[e.dtype] or array.shape != e.shape:
                    raise CheckpointError(f"{path}: tensor {name!r} read as {array.dtype} "
                                          f"{array.shape}, not the header's {e.dtype} {e.shape}")
                tensors[name] = array
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path}: {str(err).splitlines()[0]}") from None
    return tensors


def require_floating(name: str, array: Any) -> Any:
    """`array`, or a refusal if it is not stored as floating point: a tensor relabelled I32
    would otherwise load as integers and silently change every result."""
    dtype = np.dtype(array.dtype)
    if dtype not in _FLOATING:
        raise CheckpointError(f"tensor {name!r} has dtype {_NAMES.get(dtype, dtype)}; a "
                              "model parameter must be floating point (F32, F16, BF16, F64)")
    return array


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray],
                      metadata: dict[str, str] | None = None) -> None:
    """Write tensors to one .safetensors file (the inverse of `read_safetensors`)."""
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset, blobs = 0, []
    for name, array in tensors.items():
        array = np.require(array, requirements="C")     # (ascontiguousarray makes 0-d 1-d)
        blob = array.tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)                 # the spec pads the header to 8 bytes
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)
