"""A decoder-only transformer as pure functions over a pytree of weights.

No modules, no hidden state: the weights are a nested dict of arrays you can print, count,
shard and save (`weights.py`), and the forward pass is one readable function, `transformer`.
Its only moving part is `attend`, a callback that says what the queries of layer i look at.
Three callers supply three versions of it:

  * `forward`   — the whole sequence at once, no cache (the reference, and naive sampling);
  * `prefill`   — the same, but it also keeps each layer's keys and values for the cache;
  * `extend`    — new tokens that attend to a KV cache written by earlier calls (decoding).

The last two keep each layer's new keys and values for the cache (`run_keeping_kv`).

Shapes use the book's letters: B batch, T new tokens, S cached tokens, D width, F MLP width,
N query heads, K KV heads, H head dim, V vocabulary. Per layer (Llama):

    wq [D, N·H]   wk, wv [D, K·H]   wo [N·H, D]
    gated MLP: w_gate, w_up [D, F], w_down [F, D]      plain MLP: w_in [D, F], w_out [F, D]

Every weight is a matrix, and heads are split out of the activations, not the weights:
`split_heads(x @ wq, H)` is [B, T, N, H]. (The einsum "BTD,DNH->BTNH" over a 3-D weight says
the same, but XLA:CPU in jax 0.7.2, Colab's, fuses the weight's reshape into a loop that runs
the batch-1 decode step at a fifth of the memory bandwidth; a 2-D weight is read at full speed
by every version.)

The families differ in parts, each in a file of its own and switched on by the config:
rotary scaling, partial rotation, NoPE layers and per-layer bases (`rotary.py`), RMSNorm,
LayerNorm and Gemma's (1 + w) gains (`norms.py`), biases, q/k norms and clipping
(`self_attention.py`), latent attention (`mla.py`), the MLP's activations (`mlp.py`),
mixtures of experts (`moe.py`), where the norms sit and whether attention and MLP run in
sequence or in parallel (`block.py`); here remain the embedding (scaled by √D in Gemma, by a
multiplier in Granite, plus learned positions in GPT-2) and the logits (a bias in Phi, a
multiplier in Cohere and Granite, a soft cap in Gemma-2). A switch that is off costs
nothing: it is decided in Python while tracing, so the plain model's program has none of it.

Numerics follow Hugging Face's modeling files so that checkpoints load and agree: norms in
float32, softmax in float32, the router in float32.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Literal

import jax
import jax.numpy as jnp

from inferbook.model.attention import attend as attend_reference
from inferbook.model.attention import attention_mask, merge_heads, split_heads
from inferbook.model.block import decoder_layer
from inferbook.model.config import ConfigError, ModelConfig
from inferbook.model.mlp import ACTIVATIONS, mlp
from inferbook.model.norms import norm, rms_norm
from inferbook.model.rotary import rope, rotary_positions
from inferbook.model.self_attention import Attend
from inferbook.model.weights import (
    MAX_RANDOM_INIT_BYTES,
    Params,
    abstract_params,
    cast_params,
    init_params,
    param_shapes,
)

__all__ = ["init_params", "abstract_params", "param_shapes", "cast_params", "rms_norm", "rope",
           "split_heads", "merge_heads", "mlp", "transformer", "unembed", "forward", "Params",
           "Attend", "ACTIVATIONS", "MAX_RANDOM_INIT_BYTES", "attention_options",
           "special_features", "require_plain_decoder", "embed", "run_keeping_kv", "NewKV"]


def special_features(cfg: ModelConfig) -> list[str]:
    """The features of `cfg` beyond the plain decoder (RMSNorm, rotary embeddings, a gated or
    plain MLP, grouped-query attention, one window for every layer).

    The model here runs them all; code written for the plain decoder alone (the sharded
    layouts, the KV-memory experiments) refuses a config for which this list is not empty.
    """
    checks = {"rope scaling": cfg.rope_scaling is not None, "q/k/v biases": cfg.qkv_bias,
              "output-projection bias": cfg.o_bias, "MLP biases": cfg.mlp_bias,
              "q/k norms": cfg.qk_norm, "a query scale": cfg.query_scale is not None,
              "attention soft-capping": cfg.attn_softcap is not None,
              "final soft-capping": cfg.final_softcap is not None,
              "per-layer windows": cfg.layer_types is not None,
              "learned positions": cfg.positions != "rope",
              "interleaved rotary pairs": cfg.rope_interleaved, "LayerNorm": cfg.norm != "rms",
              "(1 + w) norm gains": cfg.norm_plus_one,
              "norms after the branches": cfg.norm_position != "pre",
              "parallel attention and MLP": cfg.residual != "sequential",
              "q/k clipping": cfg.qkv_clip is not None,
              "partial rotary": cfg.rotary_fraction != 1, "NoPE layers": bool(cfg.nope_layers),
              "a local rotary base": cfg.local_rope_theta is not None,
              "scaled embeddings": cfg.embed_scale or cfg.embed_multiplier != 1,
              "residual multipliers": cfg.residual_multiplier != 1,
              "logit multipliers": cfg.logit_multiplier != 1,
              "an unembedding bias": cfg.unembed_bias,
              "the tanh GELU": cfg.activation == "gelu_tanh",
              "mixture of experts": cfg.moe is not None, "latent attention": cfg.mla is not None}
    return [name for name, present in checks.items() if present]


def require_plain_decoder(cfg: ModelConfig, what: str) -> None:
    """Raise ConfigError unless `cfg` is a plain decoder: `what` (code written for it alone)
    would compute the wrong thing for any of the `special_features`."""
    extra = special_features(cfg)
    if extra:
        raise ConfigError(f"{what}: written for the plain decoder only; {cfg.name} uses "
                          f"{', '.join(extra)}")


def attention_options(cfg: ModelConfig) -> dict[str, Any]:
    """How every layer's attention scores are computed: the scale (None: 1/√H of the queries'
    width) and the soft cap. Latent attention's absorbed queries are wider than H, so it
    always gives its scale."""
    scale = cfg.attention_scale if cfg.mla is not None else cfg.query_scale
    return {"scale": scale, "softcap": cfg.attn_softcap}


# The forward pass ---------------------------------------------------------------------------

def embed(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, pos_BT: jax.Array) -> jax.Array:
    """Token embeddings [B, T, D]: scaled by √D (Gemma) or a multiplier (Granite), plus
    learned positions (GPT-2)."""
    x_BTD = params["embed"][tokens_BT]
    if cfg.embed_scale:                  # Gemma rounds √D to the weights' dtype first
        x_BTD = x_BTD * jnp.asarray(math.sqrt(cfg.D), x_BTD.dtype)
    if cfg.embed_multiplier != 1:
        x_BTD = x_BTD * cfg.embed_multiplier
    if cfg.positions == "learned":
        x_BTD = x_BTD + params["pos_embed"][pos_BT]
    return x_BTD


def transformer(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, pos_BT: jax.Array,
                attend: Attend, *, mla_form: Literal["absorbed", "naive"] = "absorbed"
                ) -> jax.Array:
    """Embed, run the L blocks, normalise: the final hidden states [B, T, D].

    `attend(i, q, k, v)` receives layer i's rotated queries [B, T, N, H] and this step's keys
    and values [B, T, K, H], and returns the attention output [B, T, N, H]. Whether it also
    looks at a cache, or stores the keys somewhere, is the caller's business. (Latent
    attention hands it the absorbed form, v None, unless `mla_form="naive"`; see mla.py.)
    """
    x_BTD = embed(params, cfg, tokens_BT, pos_BT)
    for i, p in enumerate(params["layers"]):
        x_BTD = decoder_layer(p, cfg, i, x_BTD, pos_BT, attend, mla_form)
    return norm(params, "final_norm", x_BTD, cfg)


NewKV = tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]


def run_keeping_kv(params: Params, cfg: ModelConfig, tokens_BT: jax.Array, pos_BT: jax.Array,
                   attend: Attend) -> tuple[jax.Array, NewKV]:
    """`transformer` with `attend`, keeping what each layer computed for the cache.

    Returns the final hidden states [B, T, D] and every layer's new keys and values
    ([B, T, K, H] each; the values are None for latent attention, whose cache holds one
    array), in layer order: what `kvcache.append` writes. Every cache variant (the plain
    cache of `decode`, the windowed, quantized and shared ones of `inferbook.memory`) runs
    its new tokens through this and differs only in `attend`, what the queries look at.
    """
    new_k, new_v = [], []

    def keep(i: int, q_BTNH: jax.Array, k_BTKH: jax.Array, v_BTKH: jax.Array | None
             ) -> jax.Array:
        new_k.append(k_BTKH)
        new_v.append(v_BTKH)
        return attend(i, q_BTNH, k_BTKH, v_BTKH)

    x_BTD = transformer(params, cfg, tokens_BT, pos_BT, keep)
    return x_BTD, (tuple(new_k), tuple(new_v))


def unembed(params: Params, cfg: ModelConfig, x_D: jax.Array) -> jax.Array:
    """Hidden states [..., D] to float32 logits [..., V]: plus a bias (Phi), times a
    multiplier (Cohere, Granite), soft-capped (Gemma-2) where the config says."""
    w_DV = params["embed"].T if cfg.tied_embeddings else params["unembed"]
    logits = jnp.matmul(x_D, w_DV, preferred_element_type=jnp.float32)
    if cfg.unembed_bias:
        logits = logits + params["unembed_bias"].astype(jnp.float32)
    if cfg.logit_multiplier != 1:
        logits = logits * cfg.logit_multiplier
    if cfg.final_softcap is not None:    # Gemma-2: c·tanh(logits / c)
        logits = cfg.final_softcap * jnp.tanh(logits / cfg.final_softcap)
    return logits


@partial(jax.jit, static_argnames=("cfg",))
def forward(params: Params, cfg: ModelConfig, tokens_BT: jax.Array,
            lengths_B: jax.Array | None = None) -> jax.Array:
    """Logits [B, T, V] for every position of a (right-padded) batch, with no cache.

    Row b holds lengths_B[b] real tokens followed by padding; padding is never attended to.
    This is the reference every cached and sharded path is checked against (latent attention
    runs here in its naive form, decompressing K and V).
    """
    B, T = tokens_BT.shape
    if lengths_B is None:
        lengths_B = jnp.full((B,), T, jnp.int32)
    pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    masks = {w: attention_mask(pos_BT, pos_BT[0], lengths_B, w) for w in set(cfg.windows)}
    options = attention_options(cfg)

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        return attend_reference(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2),
                                masks[cfg.layer_window(i)], **options)

    x_BTD = transformer(params, cfg, tokens_BT, rotary_positions(cfg, pos_BT, lengths_B), attend,
                        mla_form="naive")
    return unembed(params, cfg, x_BTD)
