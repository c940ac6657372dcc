"""llama.cpp's quantized blocks: how each format lays out its bytes, and how JAX decodes them.

A GGUF file stores each row of a quantized matrix as a run of fixed-size *blocks*. A block
covers `block` consecutive weights of the row and holds their codes together with what turns
codes back into numbers: one or two 16-bit scales, and for some formats a minimum. ggml's C
structs say which bytes are which; `LAYOUTS` copies them, field by field, in file order:

    Q8_0  32 weights in 34 bytes:  d (f16 scale), qs (32 int8 codes)          w = d·q
    Q4_0  32 weights in 18 bytes:  d, qs (16 bytes, two 4-bit codes each)     w = d·(q − 8)
    Q4_1  32 weights in 20 bytes:  d, m (f16 minimum), qs (16 bytes)          w = d·q + m
    Q4_K 256 weights in 144 bytes: d, dmin (f16), scales (12 bytes: a 6-bit scale and a 6-bit
                                   minimum for each of 8 sub-blocks of 32), qs (128 bytes)
                                   w = d·sc_j·q − dmin·m_j in sub-block j
    Q6_K 256 weights in 210 bytes: ql (128 bytes: the low 4 bits), qh (64 bytes: the high 2
                                   bits), scales (16 int8, one per 16 weights), d (f16)
                                   w = d·s_j·(q − 32)

`split_blocks` cuts a matrix's raw bytes into those fields — numpy arrays that together hold
exactly the file's bytes — and `dequantize(qtype, fields)` turns them back into a float32
matrix with jax.numpy, so that it can run inside a jitted matmul (`quantized.py`). The nibble
order follows ggml: in a run of 32 code bytes, the low nibbles are weights 0–31 of the run's
first half and the high nibbles weights 0–31 of its second (Q4_0/Q4_1 have 16 bytes per block,
so the low nibbles are weights 0–15 and the high ones 16–31).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

__all__ = ["LAYOUTS", "BLOCK_WEIGHTS", "QUANTIZED_TYPES", "split_blocks", "dequantize",
           "block_bytes"]

_F16, _U8, _I8 = np.float16, np.uint8, np.int8

# Field name -> (bytes per block, dtype), in the order of ggml's block structs (ggml-common.h).
LAYOUTS: dict[str, list[tuple[str, int, Any]]] = {
    "Q8_0": [("d", 2, _F16), ("qs", 32, _I8)],
    "Q4_0": [("d", 2, _F16), ("qs", 16, _U8)],
    "Q4_1": [("d", 2, _F16), ("m", 2, _F16), ("qs", 16, _U8)],
    "Q4_K": [("d", 2, _F16), ("dmin", 2, _F16), ("scales", 12, _U8), ("qs", 128, _U8)],
    "Q6_K": [("ql", 128, _U8), ("qh", 64, _U8), ("scales", 16, _I8), ("d", 2, _F16)],
}
BLOCK_WEIGHTS = {"Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q4_K": 256, "Q6_K": 256}
QUANTIZED_TYPES = tuple(LAYOUTS)


def block_bytes(qtype: str) -> int:
    """Bytes of one block of `qtype` (34 for Q8_0's 32 weights: 8.5 bits a weight)."""
    return sum(n for _, n, _ in LAYOUTS[qtype])


def split_blocks(qtype: str, raw: np.ndarray, rows: int, cols: int) -> dict[str, np.ndarray]:
    """A [rows, cols] matrix's raw bytes (rows × cols/block × block_bytes) as named fields.

    Each field is [rows, n_blocks, bytes] of its dtype, or [rows, n_blocks] for the f16
    scales; the fields' bytes add up to the raw bytes exactly.
    """
    per_block, n_blocks = block_bytes(qtype), cols // BLOCK_WEIGHTS[qtype]
    blocks = np.asarray(raw, np.uint8).reshape(rows, n_blocks, per_block)
    fields, offset = {}, 0
    for name, size, dtype in LAYOUTS[qtype]:
        part = np.ascontiguousarray(blocks[..., offset:offset + size]).view(dtype)
        fields[name] = part[..., 0] if dtype is _F16 else part
        offset += size
    return fields


# Decoding in JAX: each function takes the fields (leading axes [..., n_blocks]) and returns
# the weights [..., n_blocks, block] in float32. -------------------------------------------

def _nibbles(qs: jnp.ndarray, run: int) -> jnp.ndarray:
    """Codes 0..15 from bytes [..., n·run]: each run of `run` bytes gives its low nibbles,
    then its high nibbles (ggml's order) — [..., 2·n·run]."""
    *lead, n = qs.shape
    q = qs.reshape(*lead, n // run, 1, run)
    q = (q >> jnp.array([0, 4], jnp.uint8).reshape(2, 1)) & 0xF
    return q.reshape(*lead, 2 * n)


def _f32(x: jnp.ndarray) -> jnp.ndarray:
    return x.astype(jnp.float32)[..., None]


def _q8_0(f):
    return _f32(f["d"]) * f["qs"].astype(jnp.float32)


def _q4_0(f):
    return _f32(f["d"]) * (_nibbles(f["qs"], 16).astype(jnp.float32) - 8.0)


def _q4_1(f):
    return _f32(f["d"]) * _nibbles(f["qs"], 16).astype(jnp.float32) + _f32(f["m"])


def _q4_k_scales(s: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The 8 six-bit scales and 8 six-bit minimums packed into 12 bytes [..., 12]: bytes 0–3
    hold scales 0–3 (low 6 bits), bytes 4–7 minimums 0–3; scales and minimums 4–7 take their
    low 4 bits from bytes 8–11 and their high 2 bits from the top of bytes 0–3 and 4–7."""
    a, b, c = s[..., 0:4], s[..., 4:8], s[..., 8:12]
    sc = jnp.concatenate([a & 0x3F, (c & 0x0F) | ((a >> 6) << 4)], axis=-1)
    mn = jnp.concatenate([b & 0x3F, (c >> 4) | ((b >> 6) << 4)], axis=-1)
    return sc.astype(jnp.float32), mn.astype(jnp.float32)


def _q4_k(f):
    sc, mn = _q4_k_scales(f["scales"])                            # [..., 8] each
    q = _nibbles(f["qs"], 32).astype(jnp.float32)                  # [..., 256]
    q = q.reshape(*q.shape[:-1], 8, 32)
    w = (_f32(f["d"]) * sc)[..., None] * q - (_f32(f["dmin"]) * mn)[..., None]
    return w.reshape(*w.shape[:-2], 256)


def _q6_k(f):
    # Each half of the block (128 weights) has 64 bytes of ql and 32 of qh. Weight e of a
    # half: low 4 bits from ql byte e mod 64 (low nibble for e < 64, high nibble after), high
    # 2 bits from qh byte e mod 32, at bit 2·(e div 32).
    *lead, _ = f["ql"].shape
    ql = f["ql"].reshape(*lead, 2, 1, 64)
    ql = ((ql >> jnp.array([0, 4], jnp.uint8).reshape(2, 1)) & 0xF).reshape(*lead, 2, 128)
    qh = f["qh"].reshape(*lead, 2, 1, 32)
    qh = ((qh >> jnp.array([0, 2, 4, 6], jnp.uint8).reshape(4, 1)) & 0x3).reshape(*lead, 2, 128)
    q = (ql | (qh << 4)).astype(jnp.float32) - 32.0               # [..., 2, 128]
    scale = _f32(f["d"]) * f["scales"].astype(jnp.float32)         # [..., 16]
    return (scale[..., None] * q.reshape(*lead, 16, 16)).reshape(*lead, 256)


_DECODERS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q4_K": _q4_k, "Q6_K": _q6_k}


def dequantize(qtype: str, fields: dict[str, Any]) -> jnp.ndarray:
    """The weights [..., n_blocks · block] in float32 that `fields` (leading axes
    [..., n_blocks], as `split_blocks` made them) encode; traceable by `jax.jit`."""
    w = _DECODERS[qtype]({k: jnp.asarray(v) for k, v in fields.items()})
    return w.reshape(*w.shape[:-2], -1)
