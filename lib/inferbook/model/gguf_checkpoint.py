"""A GGUF file's weights as the library's params: dequantized, or kept in their blocks.

llama.cpp names a Llama-family model's tensors differently from Hugging Face, and stores each
matrix as ggml rows of outputs ([out, in], the same as Hugging Face; the library transposes
to [in, out]):

    token_embd.weight  -> embed [V, D]          output_norm.weight -> final_norm
    output.weight      -> unembed (absent when the embeddings are tied)
    blk.i.attn_norm / attn_q / attn_k / attn_v / attn_output (+ .bias, attn_q_norm, attn_k_norm)
    blk.i.ffn_norm / ffn_gate / ffn_up / ffn_down

One more difference hides in the query and key matrices of the ``llama`` architecture.
llama.cpp rotates *adjacent* pairs of a head's dimensions (0 with 1, 2 with 3, ...), Hugging
Face's Llama the two *halves* (i with i + H/2). Its converter therefore permutes the rows of
W_Q and W_K so that each head's rows run (0, H/2, 1, H/2+1, ...); loading undoes it
(`unpermute_rows`), so that the file gives the same model as the Hugging Face checkpoint it
came from. Qwen's files keep Hugging Face's order (llama.cpp rotates them by halves).

`load_gguf(path)` dequantizes every tensor with the `gguf` package to `dtype`.
`load_gguf(path, keep_quantized=True)` keeps each matrix of a quantized type
(`gguf_blocks.QUANTIZED_TYPES`) as a `QuantizedMatrix` — codes, scales and minimums exactly as
in the file, decoded inside the jitted step — and the rest (norms, F16/BF16/F32 tensors) dense.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from inferbook.model.config import ModelConfig
from inferbook.model.gguf_blocks import QUANTIZED_TYPES
from inferbook.model.gguf_reader import (
    GGUFFile,
    eos_ids_from_gguf,
    gguf_hf_config,
    open_gguf,
    tensor_matrix_shape,
)
from inferbook.model.hf_config import from_hf_config
from inferbook.model.quantized import QuantizedMatrix
from inferbook.model.safetensors_io import CheckpointError
from inferbook.model.weights import Params, param_shapes

__all__ = ["load_gguf", "load_gguf_config", "gguf_params", "unpermute_rows", "LAYER_NAMES",
           "DENSE_TYPES"]

DENSE_TYPES = ("F32", "F16", "BF16")

# llama.cpp's layer tensor -> the library's name. Matrices are stored [out, in].
LAYER_NAMES = {"attn_norm.weight": "attn_norm", "attn_q.weight": "wq", "attn_k.weight": "wk",
               "attn_v.weight": "wv", "attn_output.weight": "wo", "attn_q.bias": "bq",
               "attn_k.bias": "bk", "attn_v.bias": "bv", "attn_output.bias": "bo",
               "attn_q_norm.weight": "q_norm", "attn_k_norm.weight": "k_norm",
               "ffn_norm.weight": "mlp_norm", "ffn_gate.weight": "w_gate",
               "ffn_up.weight": "w_up", "ffn_down.weight": "w_down"}
TOP_NAMES = {"token_embd.weight": "embed", "output_norm.weight": "final_norm",
             "output.weight": "unembed"}


def unpermute_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's row order of a query or key projection (rows = heads · H): within each
    head, rows (0, H/2, 1, H/2 + 1, ...) go back to (0, 1, ..., H - 1). Works on any row
    layout — dense rows, or rows of quantized blocks — since whole rows move."""
    rows = w.shape[0]
    half = rows // heads // 2
    return w.reshape(heads, half, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _permute_heads(gf: GGUFFile, cfg: ModelConfig, lib: str) -> int | None:
    """How many heads to un-permute over, for this leaf; None where the file keeps HF order."""
    if gf.architecture != "llama":
        return None
    return {"wq": cfg.N, "bq": cfg.N, "wk": cfg.K, "bk": cfg.K}.get(lib)


def _tensor(gf: GGUFFile, name: str, lib: str, shape: tuple[int, ...], heads: int | None,
            dtype: Any, keep_quantized: bool) -> Any:
    """One tensor as the library's leaf of `shape` (checked), in `dtype` or kept quantized."""
    import gguf

    t = gf.tensors[name]
    kind = t.tensor_type.name
    stored = tensor_matrix_shape(t)            # numpy order: [rows, cols] = [out, in]
    matrix = lib != "embed" and len(shape) == 2
    want = tuple(reversed(shape)) if matrix else tuple(shape)
    if stored != want:
        raise CheckpointError(f"{gf.path}: tensor {name!r} has shape {stored}, which does not "
                              f"fit the config (library {lib} {tuple(shape)})")
    if keep_quantized and kind in QUANTIZED_TYPES and len(stored) == 2:
        raw = np.asarray(t.data).reshape(stored[0], -1)
        if heads is not None:
            raw = unpermute_rows(raw, heads)
        return QuantizedMatrix.from_bytes(kind, raw, *stored, transposed=matrix,
                                          dtype=dtype or jnp.float32)
    try:
        w = np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type),
                       np.float32).reshape(stored)
    except NotImplementedError:
        raise CheckpointError(f"{gf.path}: tensor {name!r} is of type {kind}, which the gguf "
                              "package cannot dequantize") from None
    if heads is not None:
        w = unpermute_rows(w, heads)
    if matrix:
        w = w.T
    return jnp.array(w, dtype=dtype or jnp.float32)


def gguf_params(gf: GGUFFile, cfg: ModelConfig, dtype: Any = None,
                keep_quantized: bool = False) -> Params:
    """The library's params from an opened file; every tensor checked by name and shape."""
    if keep_quantized:
        odd = sorted({t.tensor_type.name for t in gf.tensors.values()}
                     - set(QUANTIZED_TYPES) - set(DENSE_TYPES))
        if odd:
            raise CheckpointError(f"{gf.path}: tensors of type {', '.join(odd)} cannot be kept "
                                  f"quantized (kept: {', '.join(QUANTIZED_TYPES)}); load them "
                                  "dequantized")
    shapes = param_shapes(cfg)
    used = {"rope_freqs.weight"}           # read into the config (`load_gguf_config`)

    def take(name: str, lib: str, shape: tuple[int, ...]) -> Any:
        if name not in gf.tensors:
            raise CheckpointError(f"{gf.path} is missing tensor {name!r}")
        used.add(name)
        return _tensor(gf, name, lib, shape, _permute_heads(gf, cfg, lib), dtype, keep_quantized)

    top = {v: k for k, v in TOP_NAMES.items()}
    params: Params = {lib: take(top[lib], lib, s) for lib, s in shapes.items() if lib != "layers"}
    by_lib = {v: k for k, v in LAYER_NAMES.items()}
    params["layers"] = []
    for i, layer in enumerate(shapes["layers"]):
        missing = sorted(set(layer) - set(by_lib))
        if missing:
            raise CheckpointError(f"{cfg.name}: GGUF files of this library hold no {missing[0]}")
        params["layers"].append({lib: take(f"blk.{i}.{by_lib[lib]}", lib, s)
                                 for lib, s in layer.items()})
    unused = sorted(set(gf.tensors) - used)
    if unused:
        raise CheckpointError(f"{gf.path} has tensors the model does not use, e.g. "
                              f"{unused[0]!r} (an unsupported architecture?)")
    return params


# Llama 3.1-3.3's rope scaling, which llama.cpp stores only as its result: one divisor per
# frequency (``rope_freqs.weight``). These are the published parameters of every release.
LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}


def _llama3_rope(gf: GGUFFile, hf: dict[str, Any]) -> dict[str, Any]:
    """Recover Llama 3's rope scaling from the divisors in ``rope_freqs.weight``: the rule with
    the published parameters and the largest divisor as its factor must give them all."""
    import gguf

    from inferbook.model.rotary import frequencies
    t = gf.tensors["rope_freqs.weight"]
    divisors = np.asarray(gguf.quants.dequantize(np.asarray(t.data), t.tensor_type), np.float64)
    rope = LLAMA3_ROPE | {"factor": float(divisors.max())}
    cfg = from_hf_config(hf | {"rope_scaling": rope})
    plain = frequencies(cfg.replace(rope_scaling=None), cfg.H)[0]
    rule = np.asarray(plain, np.float64) / np.asarray(frequencies(cfg, cfg.H)[0], np.float64)
    if rule.shape != divisors.shape or not np.allclose(rule, divisors, rtol=1e-4):
        raise CheckpointError(f"{gf.path}: rope_freqs.weight holds divisors that Llama 3's rope "
                              f"scaling ({', '.join(f'{k}={v}' for k, v in rope.items())}) does "
                              "not give; this rope scaling is not supported")
    return rope


def load_gguf_config(path: str | Path) -> tuple[GGUFFile, ModelConfig, tuple[int, ...]]:
    """Open a GGUF file without reading its weights: (the file, its config, its EOS ids)."""
    gf = open_gguf(path)
    hf = gguf_hf_config(gf)
    if "rope_freqs.weight" in gf.tensors:
        hf["rope_scaling"] = _llama3_rope(gf, hf)
    cfg = from_hf_config(hf, name=Path(path).name.removesuffix(".gguf"))
    return gf, cfg, eos_ids_from_gguf(gf)


def load_gguf(path: str | Path, dtype: Any = None,
              keep_quantized: bool = False) -> tuple[ModelConfig, Params]:
    """Load a GGUF file of a supported family: (config, params).

    `dtype` (default float32) is what the weights are dequantized to — at load time, or, with
    `keep_quantized`, inside every step (`QuantizedMatrix`). Raises CheckpointError or
    ConfigError, one line naming the file and what is wrong.
    """
    gf, cfg, _ = load_gguf_config(path)
    return cfg, gguf_params(gf, cfg, dtype, keep_quantized)
