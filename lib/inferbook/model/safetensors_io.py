"""Reading and writing the safetensors format: the bytes of a Hugging Face checkpoint.

A .safetensors file is an 8-byte little-endian header length, a JSON header giving each
tensor's dtype, shape and byte range, then the raw bytes. `checkpoint` arranges what is read
here into the library's params pytree.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["CheckpointError", "read_safetensors", "write_safetensors"]


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded, with a message naming the file or tensor."""


_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
           "BF16": ml_dtypes.bfloat16, "I64": np.int64, "I32": np.int32, "I16": np.int16,
           "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read_safetensors(path: str | Path) -> dict[str, np.ndarray]:
    """All tensors of one .safetensors file, as read-only arrays backed by a memory map."""
    path = Path(path)
    try:
        raw = np.memmap(path, dtype=np.uint8, mode="r")
        (n,) = struct.unpack("<Q", raw[:8].tobytes())
        header = json.loads(raw[8:8 + n].tobytes())
    except (OSError, ValueError, struct.error) as err:
        raise CheckpointError(f"{path} is not a readable safetensors file: {err}") from None
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in _DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
        begin, end = info["data_offsets"]
        tensors[name] = data[begin:end].view(_DTYPES[info["dtype"]]).reshape(info["shape"])
    return tensors


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray],
                      metadata: dict[str, str] | None = None) -> None:
    """Write tensors to one .safetensors file (the inverse of `read_safetensors`)."""
    header: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset, blobs = 0, []
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
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
