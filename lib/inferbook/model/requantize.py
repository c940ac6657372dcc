"""Re-encoding a model's layer matrices in another of llama.cpp's block formats.

A GGUF file fixes one format per tensor. To see what a format costs — bytes, step time,
quality — the same trained weights are needed in several. `encode_matrix` turns a float
matrix into a format's blocks with the `gguf` package's own quantizer (the Python port of
llama.cpp's reference encoders), and `QuantizedMatrix` holds and multiplies them as it holds a
file's. `reencode_layers` does that to every layer matrix of a loaded model:

    base = load_pretrained("smollm2-135m-instruct", keep_quantized=True)   # Q4_1 layers
    q8 = reencode_layers(base.params, "Q8_0")      # int8 codes, one f16 scale per 32 weights
    dense = reencode_layers(base.params, None)     # the same values as float32 arrays

The encoders are the reference ones: round to nearest within each block of 32 inputs, the
scale set by the block's largest magnitude (Q8_0: d = max|w| / 127, w ≈ d·q with q in
−127..127; Q4_0: d = −w_max / 8 for the signed w of largest magnitude, w ≈ d·(q − 8) with q in
0..15). Every weight lands within half a step d of its value — except that Q4_0's sixteen
codes reach −8·d on one side but only +7·d on the other, so a weight near the block's largest
magnitude with the opposite sign is clipped to 7·d and may move by up to one step. The scale
itself is rounded to float16, which adds at most |q| · d · 2⁻¹¹.

Re-encoding a model that is already quantized (a Q4_1 file) starts from its decoded values:
the result is a quantization of those, not of the original checkpoint.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from inferbook.model.gguf_blocks import BLOCK_WEIGHTS, QUANTIZED_TYPES
from inferbook.model.quantized import QuantizedMatrix, is_quantized

__all__ = ["ENCODABLE_TYPES", "encode_matrix", "reencode_layers", "layer_matrix_bytes"]

# The formats the gguf package can encode and `gguf_blocks` can decode.
ENCODABLE_TYPES = ("Q8_0", "Q4_0", "Q4_1")
# 2-D layer leaves that are not matmul weights a format stores in fewer bits (the estimator's
# role "router"): a mixture of experts' router and its shared experts' gate stay as they are.
KEPT_AS_THEY_ARE = ("router", "shared_gate")


def _check_type(qtype: str) -> None:
    if qtype not in ENCODABLE_TYPES:
        known = ", ".join(ENCODABLE_TYPES)
        raise ValueError(f"cannot encode weights as {qtype!r}; encodable: {known}"
                         + (" (the others are decoded only)" if qtype in QUANTIZED_TYPES else ""))


def encode_matrix(w_in_out: Any, qtype: str, dtype: Any = jnp.float32) -> QuantizedMatrix:
    """A float matrix [in, out] (the library's orientation) as `qtype` blocks.

    Stored as ggml stores a linear layer — rows of outputs, each a run of blocks along the
    inputs — so `in` must be a multiple of the block (32); the result is seen as [in, out]
    (`transposed=True`) and decodes to `dtype`.
    """
    import gguf

    _check_type(qtype)
    w = np.asarray(w_in_out, np.float32)
    if w.ndim != 2:
        raise ValueError(f"encode_matrix takes a 2-D matrix, got shape {w.shape}")
    if w.shape[0] % BLOCK_WEIGHTS[qtype]:
        raise ValueError(f"a {qtype} row holds whole blocks of {BLOCK_WEIGHTS[qtype]} inputs; "
                         f"{w.shape[0]} inputs is not a multiple")
    stored = np.ascontiguousarray(w.T)                                   # [out, in]
    raw = gguf.quants.quantize(stored, gguf.GGMLQuantizationType[qtype])
    return QuantizedMatrix.from_bytes(qtype, raw, *stored.shape, transposed=True, dtype=dtype)


def _is_layer_matrix(name: str, w: Any) -> bool:
    return len(w.shape) == 2 and name not in KEPT_AS_THEY_ARE


def _reencode(w: Any, qtype: str | None, dtype: Any) -> Any:
    dense = w.dequantize() if is_quantized(w) else w
    if qtype is None:
        return jnp.asarray(dense, dtype)
    return encode_matrix(dense, qtype, dtype)


def reencode_layers(params: dict[str, Any], qtype: str | None,
                    dtype: Any = jnp.float32) -> dict[str, Any]:
    """`params` with every layer matrix (the attention's and the MLP's 2-D weights; a mixture
    of experts' stacked matrices are 3-D and, like its router, stay) re-encoded as `qtype`
    blocks, or, with `qtype` None, decoded to dense `dtype` arrays. Norms, biases, the
    embedding and the unembedding stay as they are, as the estimator's weight formats leave
    them (`perf.quant.weight_bytes`)."""
    if qtype is not None:
        _check_type(qtype)
    if "layers" not in params:
        raise ValueError("params without 'layers': not the library's model params")
    layers = [{name: _reencode(w, qtype, dtype) if _is_layer_matrix(name, w) else w
               for name, w in layer.items()} for layer in params["layers"]]
    return {**params, "layers": layers}


def layer_matrix_bytes(params: dict[str, Any]) -> int:
    """Bytes held by the layers' 2-D matrices: codes, scales and minimums of quantized ones,
    size × itemsize of dense ones (what `reencode_layers` changes)."""
    total = 0
    for layer in params["layers"]:
        for name, w in layer.items():
            if _is_layer_matrix(name, w):
                total += int(w.nbytes)
    return total
