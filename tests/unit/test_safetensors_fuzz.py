"""Hypothesis-made safetensors files: read exactly as their header says, or refused in one line.

Two generators: any JSON value at all as the header (with any bytes after it), and valid files
with one field broken — a dtype, a dimension, an offset, a missing key, bytes cut or added,
a wrong header length. Whatever comes out, `read_safetensors` must either return arrays that
match the header and tile the data exactly, or raise `CheckpointError` with one line naming
the file; never another exception. Each example is a few hundred bytes and touches no JAX,
so hundreds run in a second.
"""

import json
import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inferbook.model.safetensors_io import DTYPES, CheckpointError, read_safetensors

# Never reaches JAX: runs once, with JAX unimportable, not under both versions (conftest).
pytestmark = pytest.mark.no_jax

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)


def write(path, header_bytes, data, length=None):
    n = len(header_bytes) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + header_bytes + data)


def check(path):
    """Read `path`; an accepted file must hold exactly what its header declares."""
    try:
        tensors = read_safetensors(path)
    except CheckpointError as err:
        assert "\n" not in str(err) and str(path) in str(err), str(err)
        return None
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    assert set(tensors) == set(header)
    for name, info in header.items():
        begin, end = info["data_offsets"]
        assert tensors[name].dtype == np.dtype(DTYPES[info["dtype"]])
        assert list(tensors[name].shape) == info["shape"]
        assert tensors[name].tobytes() == data[begin:end]
    assert sum(a.nbytes for a in tensors.values()) == len(data)
    return tensors


@FUZZ
@given(header=json_values, data=st.binary(max_size=64))
def test_any_json_header_is_read_or_refused(tmp_path, header, data):
    write(tmp_path / "h.safetensors", json.dumps(header).encode(), data)
    check(tmp_path / "h.safetensors")


@FUZZ
@given(header=st.binary(max_size=64), data=st.binary(max_size=32),
       length=st.none() | st.integers(0, 2**64 - 1))
def test_any_header_bytes_and_length_are_read_or_refused(tmp_path, header, data, length):
    write(tmp_path / "b.safetensors", header, data, length)
    check(tmp_path / "b.safetensors")


tensor_specs = st.lists(st.tuples(st.sampled_from(sorted(DTYPES)),
                                  st.lists(st.integers(0, 4), max_size=3)),
                        min_size=1, max_size=3)

MUTATIONS = ["none", "dtype", "dimension", "begin", "end", "drop key", "cut data", "extra data",
             "header length", "offsets type", "swap offsets"]


@FUZZ
@given(specs=tensor_specs, mutation=st.sampled_from(MUTATIONS), where=st.integers(0, 2),
       value=st.one_of(st.integers(-2**40, 2**40), st.text(max_size=4), st.floats(),
                       st.none()),
       delta=st.integers(1, 16))
def test_a_valid_file_with_one_field_broken_is_read_or_refused(tmp_path, specs, mutation,
                                                               where, value, delta):
    header, offset = {}, 0
    for i, (dtype, shape) in enumerate(specs):
        size = math.prod(shape) * np.dtype(DTYPES[dtype]).itemsize
        header[f"t{i}"] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    data = bytes(range(256)) * (offset // 256 + 1)
    data = data[:offset]
    entry = header[f"t{where % len(specs)}"]
    length = None
    if mutation == "dtype":
        entry["dtype"] = value if not isinstance(value, int) else sorted(DTYPES)[value % 13]
    elif mutation == "dimension":
        entry["shape"] = entry["shape"] + [value]
    elif mutation in ("begin", "end"):
        entry["data_offsets"][mutation == "end"] = value
    elif mutation == "drop key":
        del entry[["dtype", "shape", "data_offsets"][delta % 3]]
    elif mutation == "cut data":
        data = data[:max(len(data) - delta, 0)]
    elif mutation == "extra data":
        data = data + bytes(delta)
    elif mutation == "offsets type":
        entry["data_offsets"] = [str(x) for x in entry["data_offsets"]]
    elif mutation == "swap offsets":
        entry["data_offsets"] = entry["data_offsets"][::-1]
    text = json.dumps(header).encode()
    if mutation == "header length":
        length = len(text) + (delta if value is None else -delta)
    write(tmp_path / "v.safetensors", text, data, length)
    accepted = check(tmp_path / "v.safetensors")
    if mutation == "none":          # the starting point is valid, so the test tests something
        assert accepted is not None
