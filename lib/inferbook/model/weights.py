"""The model's weights: their shapes (the whole memory layout), random draws, dtype casts.

The params pytree is a dict you can print, count, shard and save:

    embed [V, D]   pos_embed [max_seq_len, D] (learned positions)   final_norm [D]
    unembed [D, V] (absent when tied)   unembed_bias [V] (Phi)   layers: one dict per layer

A layer's dict holds its norms (`norms.py`), its attention weights (`self_attention.py`, or
`mla.py` for latent attention) and its MLP (`mlp.py`) or mixture of experts (`moe.py`), each
under a name that says what it is. `param_shapes(cfg)` lists them all for a config; it is the
single source of truth that the checkpoint loader, the sharding plans and the estimator's
tests compare against.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model.config import ModelConfig
from inferbook.model.mla import mla_shapes
from inferbook.model.mlp import mlp_shapes
from inferbook.model.moe import moe_shapes
from inferbook.model.norms import norm_shapes
from inferbook.model.quantized import is_quantized
from inferbook.model.self_attention import attention_shapes

__all__ = ["Params", "param_shapes", "layer_shapes", "abstract_params", "init_params",
           "cast_params", "MAX_RANDOM_INIT_BYTES"]

Params = dict[str, Any]

# Drawing random weights happens in host memory; past this size it is surely a mistake.
MAX_RANDOM_INIT_BYTES = 8e9


def layer_shapes(cfg: ModelConfig, i: int) -> dict[str, tuple[int, ...]]:
    """Layer i's weights and their shapes: the block's norms (`ModelConfig.block_norms`), the
    attention's and the feed-forward branch's."""
    shapes: dict[str, tuple[int, ...]] = {}
    for name in cfg.block_norms:
        shapes |= norm_shapes(cfg, name, cfg.D)
    shapes |= mla_shapes(cfg) if cfg.mla is not None else attention_shapes(cfg)
    shapes |= moe_shapes(cfg) if cfg.is_moe_layer(i) else mlp_shapes(cfg)
    return shapes


def param_shapes(cfg: ModelConfig) -> Params:
    """The params pytree with shape tuples for leaves: the model's whole memory layout."""
    shapes: Params = {"embed": (cfg.V, cfg.D),
                      "layers": [layer_shapes(cfg, i) for i in range(cfg.L)]}
    shapes |= norm_shapes(cfg, "final_norm", cfg.D)
    if cfg.positions == "learned":
        shapes["pos_embed"] = (cfg.max_seq_len, cfg.D)
    if not cfg.tied_embeddings:
        shapes["unembed"] = (cfg.D, cfg.V)
    if cfg.unembed_bias:
        shapes["unembed_bias"] = (cfg.V,)
    return shapes


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple)


def abstract_params(cfg: ModelConfig, dtype: Any = jnp.float32) -> Params:
    """The params pytree as `jax.ShapeDtypeStruct`s: shapes and bytes without any memory.

    `sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(abstract_params(cfg, jnp.bfloat16)))`
    is the exact weight footprint of a 70B model, computed on a laptop.
    """
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.dtype(dtype)), param_shapes(cfg),
                        is_leaf=_is_shape)


def _is_bias(name: str) -> bool:
    return name.endswith("_bias") or (name[0] == "b" and name[1:2] in ("q", "k", "v", "o", "_"))


def init_params(cfg: ModelConfig, seed: int = 0, dtype: Any = jnp.float32) -> Params:
    """Random weights, deterministic in `seed` and the same on every platform.

    Matrices are drawn from N(0, 1/fan_in) so activations keep unit scale through the layers,
    the embeddings from N(0, 1); norm gains are ones (zeros where the gain is stored as an
    offset from one, `norm_plus_one`), biases small, N(0, 0.1²). The draws come from numpy's
    generator on the host — fast, and identical on a CPU, a GPU and a TPU. For the shapes and
    bytes of a model too big to hold, use `abstract_params(cfg)`.
    """
    shapes = param_shapes(cfg)
    n_bytes = sum(np.prod(s) for s in jax.tree.leaves(shapes, is_leaf=_is_shape)) * 4
    if n_bytes > MAX_RANDOM_INIT_BYTES:
        raise ValueError(f"{cfg.name}: {n_bytes / 1e9:.0f} GB of random weights is more than "
                         "init_params will draw; use abstract_params(cfg) for its shapes")
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(shapes, is_leaf=_is_shape)

    def make(path, shape):
        name = path[-1].key
        if name.endswith("norm"):
            # Gemma's gain is 1 + w: its block norms, and its q/k norms (of the same kind).
            offset = cfg.norm_plus_one and (name not in ("q_norm", "k_norm")
                                            or cfg.qk_norm_kind is None) and \
                name not in ("q_a_norm", "kv_a_norm")
            return (jnp.zeros if offset else jnp.ones)(shape, dtype)
        if _is_bias(name):
            w = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1)
            return jnp.asarray(w, dtype=dtype)
        fan_in = shape[-2] if len(shape) == 3 else shape[0]     # experts: [E, in, out]
        std = 1.0 if name in ("embed", "pos_embed") else fan_in ** -0.5
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        return jnp.asarray(w, dtype=dtype)

    return jax.tree.unflatten(treedef, [make(p, s) for p, s in leaves])


def cast_params(params: Params, dtype: Any) -> Params:
    """The same weights in another dtype (e.g. bfloat16 for a GPU or TPU). A matrix kept
    quantized (`QuantizedMatrix`) keeps its codes and scales and decodes to `dtype`."""
    return jax.tree.map(lambda w: w.astype(dtype), params, is_leaf=is_quantized)
