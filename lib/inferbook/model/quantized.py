"""A weight matrix kept in a GGUF file's quantized blocks, decoded inside the jitted step.

`QuantizedMatrix` holds a matrix exactly as llama.cpp stores it — the block fields of
`gguf_blocks` (4- or 8-bit codes with their scales and minimums), so its `nbytes` are the
file's bytes — and stands in for the dense array wherever the model uses a weight:

    y = x @ w_q            # w_q [in, out]: decoded to `dtype`, then multiplied
    e = embed_q[tokens]    # only the rows looked up are decoded
    logits = x @ embed_q.T # the tied unembedding: the same blocks, seen transposed

JAX turns it into a dense array through `__jax_array__` (what jax.numpy calls on an object
that is not an array), so the decoder needs no change: inside `jax.jit` the decoding is part
of the compiled program, next to the matmul that consumes it, and the weights stay quantized
in memory between steps. It is a pytree whose leaves are the fields, so it passes through
`jit` like any params leaf; its format, shape and orientation are static.

Orientation: ggml stores a linear layer as rows of outputs ([out, in], each row a run of
blocks along the inputs), the library as [in, out]; `transposed=True` says the library sees
the stored rows as columns. An embedding is stored [V, D] and used as is.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model.gguf_blocks import BLOCK_WEIGHTS, dequantize, split_blocks

__all__ = ["QuantizedMatrix", "is_quantized"]


@jax.tree_util.register_pytree_node_class
class QuantizedMatrix:
    """A [rows, cols] matrix of a llama.cpp quantized type, stored as its block fields.

    `fields` maps ggml's field names to arrays [rows, cols / block, ...] (see
    `gguf_blocks.LAYOUTS`); `dtype` is what it decodes to; `transposed` whether the library
    sees it as [cols, rows].
    """

    def __init__(self, fields: dict[str, Any], qtype: str, stored_shape: tuple[int, int],
                 transposed: bool = False, dtype: Any = jnp.float32):
        self.fields, self.qtype = dict(fields), qtype
        self.stored_shape, self.transposed = tuple(stored_shape), bool(transposed)
        self._dtype = jnp.dtype(dtype)

    @classmethod
    def from_bytes(cls, qtype: str, raw: np.ndarray, rows: int, cols: int, *,
                   transposed: bool = False, dtype: Any = jnp.float32) -> "QuantizedMatrix":
        """From a GGUF tensor's raw bytes (rows × bytes per row), onto the default device."""
        if cols % BLOCK_WEIGHTS[qtype]:
            raise ValueError(f"a {qtype} row holds whole blocks of {BLOCK_WEIGHTS[qtype]} "
                             f"weights; {cols} is not a multiple")
        fields = {k: jnp.asarray(v) for k, v in split_blocks(qtype, raw, rows, cols).items()}
        return cls(fields, qtype, (rows, cols), transposed, dtype)

    # The pytree: fields are the leaves, everything else is static.
    def tree_flatten(self):
        names = tuple(sorted(self.fields))
        aux = (names, self.qtype, self.stored_shape, self.transposed, self._dtype.name)
        return tuple(self.fields[n] for n in names), aux

    @classmethod
    def tree_unflatten(cls, aux, children):
        names, qtype, shape, transposed, dtype = aux
        return cls(dict(zip(names, children)), qtype, shape, transposed, dtype)

    # What the model reads of a weight.
    @property
    def shape(self) -> tuple[int, int]:
        """The shape the library sees: [cols, rows] when transposed."""
        rows, cols = self.stored_shape
        return (cols, rows) if self.transposed else (rows, cols)

    @property
    def dtype(self) -> Any:
        return self._dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def size(self) -> int:
        return math.prod(self.stored_shape)

    @property
    def nbytes(self) -> int:
        """Bytes held: the codes, scales and minimums, exactly the file's bytes."""
        return sum(int(np.prod(a.shape)) * a.dtype.itemsize for a in self.fields.values())

    @property
    def T(self) -> "QuantizedMatrix":
        """The same blocks seen transposed (no data moves)."""
        return QuantizedMatrix(self.fields, self.qtype, self.stored_shape, not self.transposed,
                               self._dtype)

    def astype(self, dtype: Any) -> "QuantizedMatrix":
        """The same blocks, decoding to `dtype`."""
        return QuantizedMatrix(self.fields, self.qtype, self.stored_shape, self.transposed,
                               dtype)

    def dequantize(self) -> jax.Array:
        """The dense matrix in the library's orientation and `dtype`."""
        w = dequantize(self.qtype, self.fields).astype(self._dtype)
        return w.T if self.transposed else w

    def __jax_array__(self) -> jax.Array:
        return self.dequantize()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return np.asarray(self.dequantize(), dtype)

    def __getitem__(self, rows: Any) -> jax.Array:
        """Rows of an embedding [V, D], decoding only those: `embed[tokens_BT]` is [B, T, D]."""
        if self.transposed:
            raise TypeError("index a QuantizedMatrix by stored rows only (not transposed)")
        picked = {k: v[rows] for k, v in self.fields.items()}
        return dequantize(self.qtype, picked).astype(self._dtype)

    def __repr__(self) -> str:
        return (f"QuantizedMatrix({self.qtype}, shape={self.shape}, dtype={self._dtype.name}, "
                f"{self.nbytes} bytes)")


def is_quantized(x: Any) -> bool:
    """Whether a params leaf is a `QuantizedMatrix` (for `jax.tree.map(..., is_leaf=...)`)."""
    return isinstance(x, QuantizedMatrix)
