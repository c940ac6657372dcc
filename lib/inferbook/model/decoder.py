"""A LLaMA-style decoder as pure functions over a pytree of weights.

No modules, no hidden state: the weights are a nested dict of arrays you can print, count,
shard and save, and the forward pass is one readable function, `transformer`. Its only moving
part is `attend`, a callback that says what the queries of layer i look at. Three callers
supply three versions of it:

  * `forward`   — the whole sequence at once, no cache (the reference, and naive sampling);
  * `prefill`   — the same, but it also keeps each layer's keys and values for the cache;
  * `extend`    — new tokens that attend to a KV cache written by earlier calls (decoding).

Shapes use the book's letters: B batch, T new tokens, S cached tokens, D width, F MLP width,
N query heads, K KV heads, H head dim, V vocabulary. Weight layout (per layer):

    wq [D, N·H]   wk, wv [D, K·H]   wo [N·H, D]
    gated MLP: w_gate, w_up [D, F], w_down [F, D]      plain MLP: w_in [D, F], w_out [F, D]

Every weight is a matrix, and heads are split out of the activations, not the weights:
`split_heads(x @ wq, H)` is [B, T, N, H]. (The einsum "BTD,DNH->BTNH" over a 3-D weight says
the same, but XLA:CPU in jax 0.7.2, Colab's, fuses the weight's reshape into a loop that runs
the batch-1 decode step at a fifth of the memory bandwidth; a 2-D weight is read at full speed
by every version.)

Numerics follow Hugging Face's Llama so that its checkpoints load and agree: RMSNorm in
float32, rotary embeddings in the "rotate half" convention, softmax in float32.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model.attention import attend as attend_reference
from inferbook.model.attention import attention_mask
from inferbook.model.config import ConfigError, ModelConfig

__all__ = ["init_params", "abstract_params", "param_shapes", "cast_params", "rms_norm", "rope",
           "split_heads", "merge_heads", "mlp", "Attend", "transformer", "unembed", "forward",
           "Params"]

Params = dict[str, Any]
Attend = Callable[[int, jax.Array, jax.Array, jax.Array], jax.Array]


# Weights ------------------------------------------------------------------------------------

def _layer_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    D, F, N, K, H = cfg.D, cfg.F, cfg.N, cfg.K, cfg.H
    shapes = {"attn_norm": (D,), "wq": (D, N * H), "wk": (D, K * H), "wv": (D, K * H),
              "wo": (N * H, D), "mlp_norm": (D,)}
    if cfg.mlp == "gated":
        shapes |= {"w_gate": (D, F), "w_up": (D, F), "w_down": (F, D)}
    else:
        shapes |= {"w_in": (D, F), "w_out": (F, D)}
    return shapes


def runtime_gaps(cfg: ModelConfig) -> list[str]:
    """The features of `cfg` that this decoder does not compute yet (empty: it runs `cfg`).

    `ModelConfig` can describe more than the runtime executes (the estimator sizes every
    family); running a model with a gap would silently give wrong numbers, so it is refused.
    """
    gaps = []
    checks = {"rope scaling": cfg.rope_scaling is not None, "q/k/v biases": cfg.qkv_bias,
              "output-projection bias": cfg.o_bias, "MLP biases": cfg.mlp_bias,
              "q/k norms": cfg.qk_norm, "a query scale": cfg.query_scale is not None,
              "attention soft-capping": cfg.attn_softcap is not None,
              "final soft-capping": cfg.final_softcap is not None,
              "per-layer windows": cfg.layer_types is not None,
              "learned positions": cfg.positions != "rope",
              "interleaved rotary pairs": cfg.rope_interleaved, "LayerNorm": cfg.norm != "rms",
              "(1 + w) norm gains": cfg.norm_plus_one, "sandwich norms": cfg.sandwich_norm,
              "scaled embeddings": cfg.embed_scale, "the tanh GELU": cfg.activation == "gelu_tanh",
              "mixture of experts": cfg.moe is not None, "latent attention": cfg.mla is not None}
    gaps += [name for name, present in checks.items() if present]
    return gaps


def param_shapes(cfg: ModelConfig) -> Params:
    """The params pytree with shape tuples for leaves: the model's whole memory layout."""
    gaps = runtime_gaps(cfg)
    if gaps:
        raise ConfigError(f"{cfg.name}: the runtime does not compute {', '.join(gaps)} yet; "
                          "the estimator (inferbook estimate) sizes this model")
    shapes: Params = {"embed": (cfg.V, cfg.D),
                      "layers": [_layer_shapes(cfg) for _ in range(cfg.L)],
                      "final_norm": (cfg.D,)}
    if not cfg.tied_embeddings:
        shapes["unembed"] = (cfg.D, cfg.V)
    return shapes


# Drawing random weights happens in host memory; past this size it is surely a mistake.
MAX_RANDOM_INIT_BYTES = 8e9


def _is_shape(x: Any) -> bool:
    return isinstance(x, tuple)


def abstract_params(cfg: ModelConfig, dtype: Any = jnp.float32) -> Params:
    """The params pytree as `jax.ShapeDtypeStruct`s: shapes and bytes without any memory.

    `sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(abstract_params(cfg, jnp.bfloat16)))`
    is the exact weight footprint of a 70B model, computed on a laptop.
    """
    return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, jnp.dtype(dtype)), param_shapes(cfg),
                        is_leaf=_is_shape)


def init_params(cfg: ModelConfig, seed: int = 0, dtype: Any = jnp.float32) -> Params:
    """Random weights, deterministic in `seed` and the same on every platform.

    Matrices are drawn from N(0, 1/fan_in) so activations keep unit scale through the layers,
    the embedding from N(0, 1), norm gains are ones. The draws come from numpy's generator on
    the host — fast, and identical on a CPU, a GPU and a TPU. For the shapes and bytes of a
    model too big to hold, use `abstract_params(cfg)`.
    """
    n_bytes = sum(np.prod(s) for s in jax.tree.leaves(param_shapes(cfg), is_leaf=_is_shape)) * 4
    if n_bytes > MAX_RANDOM_INIT_BYTES:
        raise ValueError(f"{cfg.name}: {n_bytes / 1e9:.0f} GB of random weights is more than "
                         "init_params will draw; use abstract_params(cfg) for its shapes")
    rng = np.random.default_rng(seed)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(param_shapes(cfg), is_leaf=_is_shape)

    def make(path, shape):
        name = path[-1].key
        if name.endswith("norm"):
            return jnp.ones(shape, dtype)
        fan_in = shape[0]
        std = 1.0 if name == "embed" else fan_in ** -0.5
        w = rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        return jnp.asarray(w, dtype=dtype)

    return jax.tree.unflatten(treedef, [make(p, s) for p, s in leaves])


def cast_params(params: Params, dtype: Any) -> Params:
    """The same weights in another dtype (e.g. bfloat16 for a GPU or TPU)."""
    return jax.tree.map(lambda w: w.astype(dtype), params)


# Building blocks ----------------------------------------------------------------------------

def rms_norm(x: jax.Array, gain: jax.Array, eps: float) -> jax.Array:
    """x / rms(x) · gain, computed in float32 and returned in x's dtype."""
    x32 = x.astype(jnp.float32)
    x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return gain * x32.astype(x.dtype)


def rope(x_BTnH: jax.Array, pos_BT: jax.Array, theta: float) -> jax.Array:
    """Rotary position embedding (Su et al. 2021) in the "rotate half" layout of HF Llama.

    Channel i and channel i + H/2 form a pair rotated by the angle pos · θ^(-2i/H).
    """
    H = x_BTnH.shape[-1]
    inv_freq = 1.0 / (theta ** (jnp.arange(0, H, 2, dtype=jnp.float32) / H))   # [H/2]
    angles_BTh = pos_BT.astype(jnp.float32)[..., None] * inv_freq
    angles_BTH = jnp.concatenate([angles_BTh, angles_BTh], axis=-1)[:, :, None, :]
    cos, sin = jnp.cos(angles_BTH).astype(x_BTnH.dtype), jnp.sin(angles_BTH).astype(x_BTnH.dtype)
    x1, x2 = jnp.split(x_BTnH, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return x_BTnH * cos + rotated * sin


def split_heads(x_BTX: jax.Array, H: int) -> jax.Array:
    """[..., n·H] to [..., n, H]: the heads of a projection's output, side by side."""
    return x_BTX.reshape(*x_BTX.shape[:-1], -1, H)


def merge_heads(x_BTnH: jax.Array) -> jax.Array:
    """[..., n, H] to [..., n·H], the inverse of `split_heads`."""
    return x_BTnH.reshape(*x_BTnH.shape[:-2], -1)


ACTIVATIONS = {"silu": jax.nn.silu, "relu": jax.nn.relu,
                "gelu": lambda x: jax.nn.gelu(x, approximate=False)}


def mlp(p: Params, x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The feed-forward block: gated (SwiGLU) or plain."""
    act = ACTIVATIONS[cfg.activation]
    if cfg.mlp == "gated":
        h_BTF = act(x_BTD @ p["w_gate"]) * (x_BTD @ p["w_up"])
        return h_BTF @ p["w_down"]
    return act(x_BTD @ p["w_in"]) @ p["w_out"]


# The forward pass ---------------------------------------------------------------------------

def transformer(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, pos_BT: jax.Array,
                attend: Attend) -> jax.Array:
    """Embed, run the L blocks, normalise: the final hidden states [B, T, D].

    `attend(i, q, k, v)` receives layer i's rotated queries [B, T, N, H] and this step's keys
    and values [B, T, K, H], and returns the attention output [B, T, N, H]. Whether it also
    looks at a cache, or stores the keys somewhere, is the caller's business.
    """
    x_BTD = params["embed"][tokens_BT]
    for i, p in enumerate(params["layers"]):
        h_BTD = rms_norm(x_BTD, p["attn_norm"], cfg.norm_eps)
        q_BTNH = rope(split_heads(h_BTD @ p["wq"], cfg.H), pos_BT, cfg.rope_theta)
        k_BTKH = rope(split_heads(h_BTD @ p["wk"], cfg.H), pos_BT, cfg.rope_theta)
        v_BTKH = split_heads(h_BTD @ p["wv"], cfg.H)
        o_BTNH = attend(i, q_BTNH, k_BTKH, v_BTKH)
        x_BTD = x_BTD + merge_heads(o_BTNH) @ p["wo"]
        x_BTD = x_BTD + mlp(p, rms_norm(x_BTD, p["mlp_norm"], cfg.norm_eps), cfg)
    return rms_norm(x_BTD, params["final_norm"], cfg.norm_eps)


def unembed(params: Params, cfg: ModelConfig, x_xD: jax.Array) -> jax.Array:
    """Hidden states [..., D] to float32 logits [..., V]."""
    w_DV = params["embed"].T if cfg.tied_embeddings else params["unembed"]
    return jnp.matmul(x_xD, w_DV, preferred_element_type=jnp.float32)


@partial(jax.jit, static_argnames=("cfg",))
def forward(params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
            lengths_B: jax.Array | None = None) -> jax.Array:
    """Logits [B, T, V] for every position of a (right-padded) batch, with no cache.

    Row b holds lengths_B[b] real tokens followed by padding; padding is never attended to.
    This is the reference every cached and sharded path is checked against.
    """
    B, T = tokens_BT.shape
    if lengths_B is None:
        lengths_B = jnp.full((B,), T, jnp.int32)
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    mask_BTS = attention_mask(pos_BT, pos_BT[0], lengths_B, cfg.window)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        return attend_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2), mask_BTS)

    return unembed(params, cfg, transformer(params, cfg, tokens_BT, pos_BT, attend))
