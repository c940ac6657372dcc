"""The safetensors reader trusts nothing: each kind of malformed file is refused in one line.

Issue 15 found 21 malformed files that gave tracebacks or loaded silently, and issue 14 a
truncated download that gave "cannot reshape array of size 4767 into shape (64,160)". Every
file below is built byte by byte (the header as JSON text, the data as raw bytes), so each
test states exactly what is wrong with it.
"""

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from inferbook.model import decoder
from inferbook.model.checkpoint import load_checkpoint, save_checkpoint
from inferbook.model.config import ModelConfig
from inferbook.model.safetensors_io import (
    MAX_HEADER_BYTES,
    CheckpointError,
    read_header,
    read_safetensors,
    write_safetensors,
)

F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}      # 8 bytes of data


def raw_file(path, header, data=b"", length=None):
    """A file with `header` (a JSON value, or bytes taken as they are) and `data` after it;
    `length` overrides the 8-byte header length."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)
    return path


def refused(path, *fragments):
    """read_safetensors refuses `path` with one line that names the file and each fragment."""
    with pytest.raises(CheckpointError) as info:
        read_safetensors(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


# name -> (header, data, header-length override, what the message must name)
MALFORMED = {
    "offsets beyond the end": ({"w": {"dtype": "F32", "shape": [4],
                                      "data_offsets": [0, 16]}}, bytes(8), None, ["'w'"]),
    "negative offset": ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}},
                        bytes(8), None, ["'w'", "0 <= begin"]),
    "reversed offsets": ({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}},
                         bytes(8), None, ["'w'", "begin <= end"]),
    "overlapping tensors": ({"a": F32x2, "b": {"dtype": "F32", "shape": [2],
                                               "data_offsets": [4, 12]}},
                            bytes(12), None, ["overlaps"]),
    "same bytes twice": ({"a": F32x2, "b": F32x2}, bytes(8), None, ["overlaps"]),
    "dtype size does not fit the bytes": ({"w": {"dtype": "F64", "shape": [2],
                                                 "data_offsets": [0, 8]}},
                                          bytes(8), None, ["'w'", "16 bytes"]),
    "missing dtype": ({"w": {"shape": [2], "data_offsets": [0, 8]}}, bytes(8), None,
                      ["'w'", "'dtype'"]),
    "missing shape": ({"w": {"dtype": "F32", "data_offsets": [0, 8]}}, bytes(8), None,
                      ["'w'", "'shape'"]),
    "missing offsets": ({"w": {"dtype": "F32", "shape": [2]}}, bytes(8), None,
                        ["'w'", "'data_offsets'"]),
    "unknown dtype": ({"w": dict(F32x2, dtype="F33")}, bytes(8), None, ["'w'", "F33"]),
    "dtype not a string": ({"w": dict(F32x2, dtype=4)}, bytes(8), None, ["'w'", "dtype"]),
    "list header": ([F32x2], bytes(8), None, ["list", "not an object"]),
    "entry not an object": ({"w": [0, 8]}, bytes(8), None, ["'w'", "not an object"]),
    "string shape": ({"w": dict(F32x2, shape=["2"])}, bytes(8), None, ["'w'", "shape"]),
    "negative dimension": ({"w": dict(F32x2, shape=[-2])}, bytes(8), None, ["'w'", "shape"]),
    "float dimension": ({"w": dict(F32x2, shape=[2.0])}, bytes(8), None, ["'w'", "shape"]),
    "string offsets": ({"w": dict(F32x2, data_offsets=["0", "8"])}, bytes(8), None,
                       ["'w'", "data_offsets"]),
    "three offsets": ({"w": dict(F32x2, data_offsets=[0, 4, 8])}, bytes(8), None,
                      ["'w'", "two integers"]),
    "header length past the file": ({"w": F32x2}, bytes(8), 10**6, ["past the end"]),
    "non-UTF-8 header": (b'{"\xff": 1}', b"", None, ["UTF-8"]),
    "header not JSON": (b"{not json}", b"", None, ["valid JSON"]),
    "deeply nested header": (b"[" * 100_000 + b"]" * 100_000, b"", None, ["valid JSON"]),
    "truncated data": ({"a": F32x2, "w": {"dtype": "F32", "shape": [4],
                                          "data_offsets": [8, 24]}},
                       bytes(20), None, ["'w'", "truncated"]),
    "bytes nobody owns in between": ({"a": F32x2, "b": {"dtype": "F32", "shape": [1],
                                                        "data_offsets": [12, 16]}},
                                     bytes(16), None, ["'b'", "belong to no tensor"]),
    "bytes nobody owns at the end": ({"w": F32x2}, bytes(12), None, ["belong to no tensor"]),
    "a tensor named twice": (b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                             b'"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}',
                             bytes(8), None, ["'w'", "twice"]),
    "metadata not strings": ({"__metadata__": {"format": 1}, "w": F32x2}, bytes(8), None,
                             ["__metadata__"]),
}


@pytest.mark.parametrize("kind", MALFORMED)
def test_malformed_files_are_refused_in_one_line_naming_file_and_tensor(tmp_path, kind):
    header, data, length, fragments = MALFORMED[kind]
    refused(raw_file(tmp_path / "m.safetensors", header, data, length), *fragments)


@pytest.mark.parametrize("size", [0, 3, 7])
def test_a_file_shorter_than_the_length_field_is_refused(tmp_path, size):
    path = tmp_path / "short.safetensors"
    path.write_bytes(bytes(size))
    refused(path, "not a readable safetensors file")


def test_a_header_longer_than_the_format_allows_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", MAX_HEADER_BYTES + 1))
        f.truncate(8 + MAX_HEADER_BYTES + 64)           # sparse: nothing is written
    refused(path, "larger than")


def test_a_directory_is_refused(tmp_path):
    refused(tmp_path, "not a readable safetensors file")


def test_the_truncated_download_of_issue_14_names_the_tensor(tmp_path):
    # A [64, 160] float32 tensor cut off after 4767 float32 values' worth of bytes.
    w = np.arange(64 * 160, dtype=np.float32).reshape(64, 160)
    write_safetensors(tmp_path / "full.safetensors", {"lm_head.weight": w})
    whole = (tmp_path / "full.safetensors").read_bytes()
    cut = len(whole) - w.nbytes + 4767 * 4
    (tmp_path / "cut.safetensors").write_bytes(whole[:cut])
    refused(tmp_path / "cut.safetensors", "'lm_head.weight'", "truncated")


def test_every_valid_dtype_reads_back_exactly(tmp_path):
    rng = np.random.default_rng(1)
    tensors = {"f32": rng.normal(size=(3, 4)).astype(np.float32),
               "bf16": rng.normal(size=(5,)).astype(ml_dtypes.bfloat16),
               "f16": rng.normal(size=(2, 2)).astype(np.float16),
               "i32": rng.integers(-9, 9, size=(4,)).astype(np.int32),
               "u8": rng.integers(0, 255, size=(3,)).astype(np.uint8),
               "empty": np.zeros((0, 3), np.float32), "scalar": np.float64(2.5)}
    write_safetensors(tmp_path / "ok.safetensors", tensors)
    entries = read_header(tmp_path / "ok.safetensors")
    back = read_safetensors(tmp_path / "ok.safetensors")
    for name, ref in tensors.items():
        ref = np.asarray(ref)
        assert back[name].dtype == ref.dtype and back[name].shape == ref.shape
        assert entries[name].shape == ref.shape
        assert entries[name].end - entries[name].begin == ref.nbytes
        assert back[name].tobytes() == ref.tobytes()


CFG = ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=20)


def test_a_parameter_relabelled_as_integers_is_refused_by_the_loader(tmp_path):
    """The silent case of issue 15: a float32 tensor whose dtype is changed to I32 (same
    size) reads as int32 — the reader reports what the file says — but the loader refuses
    to use integers as weights."""
    save_checkpoint(tmp_path / "m", CFG, decoder.init_params(CFG, 0))
    path = tmp_path / "m" / "model.safetensors"
    whole = path.read_bytes()
    (n,) = struct.unpack("<Q", whole[:8])
    header = whole[8:8 + n].replace(b'"F32"', b'"I32"', 1)      # the same length
    path.write_bytes(whole[:8] + header + whole[8 + n:])
    relabelled = [name for name, a in read_safetensors(path).items() if a.dtype == np.int32]
    assert len(relabelled) == 1
    with pytest.raises(CheckpointError, match="floating point") as info:
        load_checkpoint(tmp_path / "m")
    assert relabelled[0] in str(info.value)
