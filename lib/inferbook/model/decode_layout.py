"""The decode layout: the same weights, arranged for the products a decode step does.

A decode step multiplies one row per sequence by every weight matrix: at batch 1 each product
is a matrix–vector product, and the step is a read of the weights (chapter 1). How fast that
read goes depends on how the matrix lies in memory, and on how many products there are:

* **[out, in]** — stored as in the params pytree, W [in, out] is walked column by column for
  each output, across rows of the array; transposed to [out, in], each output is one
  contiguous row, the layout a matrix–vector kernel streams fastest (and the one PyTorch and
  Hugging Face checkpoints use). Measured on a 2-core CPU, XLA reads the same weights about a
  third faster this way (`inferbook.perf.decode_levers` re-measures it);
* **fused** — W_Q, W_K and W_V multiply the same input, and so do W_gate and W_up: one
  product with the matrices side by side reads the same bytes in one pass instead of three
  (two), with fewer kernels to launch and one longer stream.

`to_decode_layout(params, cfg)` returns a new pytree with, in every layer that has them,

    wqkv_t [(N + 2K)·H, D]   (W_Q, W_K, W_V side by side, transposed)   wo_t [D, N·H]
    w_gate_up_t [2F, D]   w_down_t [D, F]     (a plain MLP: w_in_t [F, D], w_out_t [D, F])

and unembed_t [V, D] for an untied unembedding (a tied one already is [V, D]: the embedding).
Everything else — norms, biases, experts, latent attention — is left as it is. The model
reads either layout (`linear` is its one matrix product), so the decoder code is the same;
the sharding layouts, checkpoints and every other caller keep the layout of `weights.py`.
`decode.generate` and the benchmark run whichever they are given; `from_decode_layout`
gives the original back, exactly.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model.config import ModelConfig
from inferbook.model.quantized import is_quantized

__all__ = ["FUSED", "to_decode_layout", "from_decode_layout", "is_decode_layout", "linear",
           "fused_widths", "for_batch", "expressible"]

# Fused name -> the matrices it holds, side by side along their output axis.
FUSED = {"wqkv": ("wq", "wk", "wv"), "w_gate_up": ("w_gate", "w_up")}
SINGLE = ("wo", "w_down", "w_in", "w_out")


def linear(p: dict[str, Any], name: str, x: jax.Array, **kwargs: Any) -> jax.Array:
    """x · W for the weight `name` of `p`, in either layout: p[name] [in, out], or p[name +
    "_t"] [out, in] (the decode layout), contracted over its last axis. A weight stored in a
    narrower dtype than x is widened inside the product (XLA may fuse the conversion into
    the kernel, so that only the narrow bytes are read). `kwargs` go to the product (e.g.
    preferred_element_type)."""
    w = p[name + "_t"] if name + "_t" in p else p[name]
    decoded = name + "_t" in p and not isinstance(w, jax.Array)
    if decoded:
        w = jnp.asarray(w)               # e.g. a matrix kept in quantized blocks, decoded here
    if (w.dtype != x.dtype and jnp.issubdtype(w.dtype, jnp.floating)
            and jnp.dtype(w.dtype).itemsize < jnp.dtype(x.dtype).itemsize):
        w = w.astype(x.dtype)
    if name + "_t" in p:
        # As a 2-D product: under jax 0.7.2 XLA:CPU copies the weight for every call when the
        # activations have more axes, which made the decode step ten times slower. Blocks
        # decoded inside the product are multiplied as x · (Wᵀ)ᵀ: under jax 0.10.2 XLA:CPU runs
        # the contraction over the decoded matrix's last axis (the plain weight's form) about
        # 18 times slower (67 ms against 3.7 ms for SmolLM2's Q8_0 unembedding, 49,152 × 576).
        x2 = x.reshape(-1, x.shape[-1])
        if decoded:
            y = jnp.matmul(x2, w.T, **kwargs)
        elif rows_one_at_a_time(x2.shape[0]):
            y = jnp.concatenate([_rows_times_out_in(x2[i:i + 1], w, **kwargs)
                                 for i in range(x2.shape[0])])
        else:
            y = _rows_times_out_in(x2, w, **kwargs)
        return y.reshape(*x.shape[:-1], w.shape[0])
    return jnp.matmul(x, w, **kwargs)


def _rows_times_out_in(x2: jax.Array, w: jax.Array, **kwargs: Any) -> jax.Array:
    return jax.lax.dot_general(x2, w, (((1,), (1,)), ((), ())), **kwargs)


# Under jax 0.7.2 (Colab's) XLA:CPU multiplies 2 to 7 rows by an [out, in] matrix 4 to 25
# times slower than it multiplies them one row at a time (medians of seven on a 2-core CPU:
# SmolLM2's tied unembedding, 49,152 × 576, takes 123 ms for two rows against 5.5 ms for one;
# 8 rows or more run as fast as they should). Under jax 0.10.2 the product with all rows is
# as fast as the rows one at a time, or faster. Versions 0.8 and 0.9 were not measured; below
# 0.8, on a CPU, such products run row by row: B matrix–vector products, each a read of the
# matrix.
_FEW_ROWS_SLOW = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 8)


def rows_one_at_a_time(rows: int) -> bool:
    """Whether `linear` multiplies `rows` rows by an [out, in] matrix one row at a time."""
    return _FEW_ROWS_SLOW and 1 < rows < 8 and jax.default_backend() == "cpu"


def for_batch(params: dict[str, Any], cfg: ModelConfig, batch: int) -> dict[str, Any]:
    """The weights a decode step of `batch` sequences reads fastest: the decode layout for
    one sequence, whose products are matrix–vector products; the weights' own layout for
    more, whose products are matrix–matrix ones — under jax 0.7.2 XLA:CPU multiplies a few
    rows by an [out, in] matrix several times slower than by an [in, out] one. Weights the
    decode layout cannot hold as they are (`expressible`) stay in their own layout."""
    if batch == 1 and expressible(params):
        return to_decode_layout(params, cfg)
    return from_decode_layout(params, cfg)


def expressible(params: dict[str, Any]) -> bool:
    """Whether the decode layout holds these weights as they are. Every config's features
    are (biases, q/k norms, clipping, an unembedding's bias and multiplier apply around the
    products, in either layout), but not a matrix kept in a GGUF file's quantized blocks
    (`quantized.QuantizedMatrix`): fusing it would decode it, and store it dense."""
    return not any(is_quantized(w) for w in jax.tree.leaves(params, is_leaf=is_quantized))


def fused_widths(cfg: ModelConfig, name: str) -> list[int]:
    """The output widths of the matrices fused under `name` (split points of its product)."""
    if name == "wqkv":
        return [cfg.N * cfg.H, cfg.K * cfg.H, cfg.K * cfg.H]
    return [cfg.F, cfg.F]


def _layer_to(p: dict[str, Any], fuse: bool, transpose: bool) -> dict[str, Any]:
    out = dict(p)
    suffix = "_t" if transpose else ""
    for fused, parts in FUSED.items():
        if not all(k in p for k in parts):
            continue
        if fuse:
            w = jnp.concatenate([p[k] for k in parts], axis=1)
            out[fused + suffix] = w.T if transpose else w
        elif transpose:
            out |= {k + "_t": p[k].T for k in parts}
        for k in parts if fuse or transpose else ():
            del out[k]
    for k in SINGLE if transpose else ():
        if k in p:
            out[k + "_t"] = p[k].T
            del out[k]
    return out


def _layer_from(p: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    out = dict(p)
    for fused, parts in FUSED.items():
        for key in (fused, fused + "_t"):
            if key in p:
                w = p[key].T if key.endswith("_t") else p[key]
                bounds = np.cumsum(fused_widths(cfg, fused))[:-1].tolist()
                out |= dict(zip(parts, jnp.split(w, bounds, axis=1)))
                del out[key]
    for k in (*SINGLE, *(k for parts in FUSED.values() for k in parts)):
        if k + "_t" in p:
            out[k] = p[k + "_t"].T
            del out[k + "_t"]
    return out


def is_decode_layout(params: dict[str, Any]) -> bool:
    """Whether `params` is already (in part) in the decode layout: a matrix stored [out, in],
    or matrices fused."""
    return "unembed_t" in params or any(
        k.endswith("_t") or k in FUSED for layer in params["layers"] for k in layer)


def to_decode_layout(params: dict[str, Any], cfg: ModelConfig, *, fuse: bool = True,
                     transpose: bool = True, dtype: Any = None) -> dict[str, Any]:
    """The weights in the decode layout (module docstring): new arrays, the same values.

    `fuse=False` or `transpose=False` leave out one of the two changes (to measure each
    alone); `dtype` stores the moved matrices narrower (e.g. bfloat16: `linear` widens them
    inside each product). Layers of latent attention keep their attention weights, mixtures
    of experts their experts: only the plain attention and MLP matrices, and an untied
    unembedding, move. Already in the decode layout: returned as it is.
    """
    if is_decode_layout(params):
        return params
    out = {k: v for k, v in params.items() if k not in ("layers", "unembed")}
    out["layers"] = [_layer_to(p, fuse, transpose) if cfg.mla is None else
                     _mla_layer_to(p, fuse, transpose) for p in params["layers"]]
    if "unembed" in params:
        out["unembed_t" if transpose else "unembed"] = (params["unembed"].T if transpose
                                                       else params["unembed"])
    if dtype is not None:
        moved = {k for k in out if k == "unembed_t"}
        out = {k: (v.astype(dtype) if k in moved else v) for k, v in out.items()}
        out["layers"] = [{k: (v.astype(dtype) if k.endswith("_t") or k in FUSED else v)
                          for k, v in p.items()} for p in out["layers"]]
    return out


def _mla_layer_to(p: dict[str, Any], fuse: bool, transpose: bool) -> dict[str, Any]:
    """Latent attention reads its own weights (mla.py): only the MLP's move."""
    attention = {k: v for k, v in p.items() if k in ("wq", "wk", "wv", "wo")}
    rest = _layer_to({k: v for k, v in p.items() if k not in attention}, fuse, transpose)
    return rest | attention


def from_decode_layout(params: dict[str, Any], cfg: ModelConfig) -> dict[str, Any]:
    """The inverse of `to_decode_layout`: the layout of `weights.py`, exactly."""
    if not is_decode_layout(params):
        return params
    out = {k: v for k, v in params.items() if k not in ("layers", "unembed_t")}
    out["layers"] = [_layer_from(p, cfg) for p in params["layers"]]
    if "unembed_t" in params:
        out["unembed"] = params["unembed_t"].T
    return out
