"""One decoder layer: where its norms sit and how its two branches meet the residual stream.

Every layer has an attention branch and a feed-forward branch (a dense MLP or a mixture of
experts). The families differ in how those branches are wired, and three switches of the
config say how:

    sequential, norms before (Llama):      x = x + a · attn(norm₁ x)
                                            x = x + a · mlp(norm₂ x)
    sequential, norms after (OLMo-2):      x = x + a · norm₁(attn x)
                                            x = x + a · norm₂(mlp x)
    sequential, both (Gemma-2/3):          x = x + a · norm₁'(attn(norm₁ x)), and so the MLP
    parallel, two norms (GPT-NeoX):        x = x + a · (attn(norm₁ x) + mlp(norm₂ x))
    parallel, one norm (Phi, StableLM,     h = norm₁ x
      Cohere):                              x = x + a · (attn h + mlp h)

where a is the residual multiplier (1 but in Granite). In the parallel form both branches
read the same x, so a layer's two groups of matmuls need not wait for each other; the
sequential form feeds the attention's output into the MLP. Norm names follow
`ModelConfig.block_norms`: "attn_norm" and "mlp_norm" before the branches, "post_attn_norm"
and "post_mlp_norm" after them.
"""

from __future__ import annotations

from typing import Any, Literal

import jax

from inferbook.model.config import ModelConfig
from inferbook.model.mla import latent_attention
from inferbook.model.mlp import mlp
from inferbook.model.moe import moe_block
from inferbook.model.norms import norm
from inferbook.model.self_attention import Attend, self_attention

__all__ = ["decoder_layer", "feed_forward", "attention_branch"]


def attention_branch(p: dict[str, Any], cfg: ModelConfig, i: int, h_BTD: jax.Array,
                     pos_BT: jax.Array, attend: Attend,
                     mla_form: Literal["absorbed", "naive"] = "absorbed") -> jax.Array:
    """Layer i's attention on normalised inputs: self-attention or latent attention."""
    if cfg.mla is not None:
        return latent_attention(p, cfg, i, h_BTD, pos_BT, attend, mla_form)
    return self_attention(p, cfg, i, h_BTD, pos_BT, attend)


def feed_forward(p: dict[str, Any], cfg: ModelConfig, i: int, h_BTD: jax.Array) -> jax.Array:
    """Layer i's feed-forward branch: its mixture of experts, or its dense MLP."""
    return moe_block(p, h_BTD, cfg) if cfg.is_moe_layer(i) else mlp(p, h_BTD, cfg)


def _scaled(y_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    return y_BTD if cfg.residual_multiplier == 1 else y_BTD * cfg.residual_multiplier


def decoder_layer(p: dict[str, Any], cfg: ModelConfig, i: int, x_BTD: jax.Array,
                  pos_BT: jax.Array, attend: Attend,
                  mla_form: Literal["absorbed", "naive"] = "absorbed") -> jax.Array:
    """Layer i on the residual stream x [B, T, D]: the stream after both branches."""
    if cfg.residual == "parallel":
        h_BTD = norm(p, "attn_norm", x_BTD, cfg)
        h_mlp_BTD = h_BTD if cfg.shared_norm else norm(p, "mlp_norm", x_BTD, cfg)
        a_BTD = attention_branch(p, cfg, i, h_BTD, pos_BT, attend, mla_form)
        return x_BTD + _scaled(a_BTD + feed_forward(p, cfg, i, h_mlp_BTD), cfg)
    pre, post = cfg.norm_position in ("pre", "both"), cfg.norm_position in ("post", "both")
    h_BTD = norm(p, "attn_norm", x_BTD, cfg) if pre else x_BTD
    a_BTD = attention_branch(p, cfg, i, h_BTD, pos_BT, attend, mla_form)
    if post:
        a_BTD = norm(p, "post_attn_norm", a_BTD, cfg)
    x_BTD = x_BTD + _scaled(a_BTD, cfg)
    h_BTD = norm(p, "mlp_norm", x_BTD, cfg) if pre else x_BTD
    m_BTD = feed_forward(p, cfg, i, h_BTD)
    if post:
        m_BTD = norm(p, "post_mlp_norm", m_BTD, cfg)
    return x_BTD + _scaled(m_BTD, cfg)
