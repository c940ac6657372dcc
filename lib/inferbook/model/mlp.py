"""The feed-forward block: a gated MLP (SwiGLU, GeGLU) or a plain one.

    gated:  down( act(x · W_gate) ⊙ (x · W_up) )     three matrices, LLaMA and its descendants
    plain:  out( act(x · W_in) )                      two matrices, GPT-2, GPT-3, OPT

Shapes: w_gate, w_up, w_in [D, F]; w_down, w_out [F, D]; optional biases b_<name> of the
matrix's output width (GPT-2). The activations (Hendrycks & Gimpel 2016 for GELU; Shazeer
2020 for the gated forms) are those of Hugging Face's ACT2FN: "gelu" is the exact erf form,
"gelu_tanh" the tanh approximation (GPT-2's "gelu_new", Gemma's "gelu_pytorch_tanh").
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from inferbook.model.config import ModelConfig
from inferbook.model.decode_layout import linear

__all__ = ["ACTIVATIONS", "mlp", "mlp_shapes", "gated_mlp"]

ACTIVATIONS = {"silu": jax.nn.silu, "relu": jax.nn.relu,
               "gelu": lambda x: jax.nn.gelu(x, approximate=False),
               "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True)}


def _linear(p: dict[str, Any], name: str, x: jax.Array, bias: bool) -> jax.Array:
    y = linear(p, "w_" + name, x)
    return y + p["b_" + name] if bias else y


def mlp(p: dict[str, Any], x_BTD: jax.Array, cfg: ModelConfig) -> jax.Array:
    """The feed-forward block: gated (SwiGLU) or plain, with biases where `cfg.mlp_bias`.
    In the decode layout the gate and up matrices are one, [2F, D]: one product, split."""
    act, bias = ACTIVATIONS[cfg.activation], cfg.mlp_bias
    if cfg.mlp == "gated":
        if "w_gate_up_t" in p or "w_gate_up" in p:
            gate, up = jnp.split(linear(p, "w_gate_up", x_BTD), 2, axis=-1)
            if bias:
                gate, up = gate + p["b_gate"], up + p["b_up"]
        else:
            gate, up = _linear(p, "gate", x_BTD, bias), _linear(p, "up", x_BTD, bias)
        return _linear(p, "down", act(gate) * up, bias)
    return _linear(p, "out", act(_linear(p, "in", x_BTD, bias)), bias)


def gated_mlp(x_D: jax.Array, w_gate_DF: jax.Array, w_up_DF: jax.Array, w_down_FD: jax.Array,
              activation: str) -> jax.Array:
    """down(act(x · W_gate) ⊙ (x · W_up)) with the weights given: one expert of a mixture."""
    act = ACTIVATIONS[activation]
    return (act(x_D @ w_gate_DF) * (x_D @ w_up_DF)) @ w_down_FD


def mlp_shapes(cfg: ModelConfig, F: int | None = None) -> dict[str, tuple[int, ...]]:
    """The dense MLP's weights (width F, default cfg.F) and, with cfg.mlp_bias, its biases."""
    D, F = cfg.D, cfg.F if F is None else F
    if cfg.mlp == "gated":
        shapes = {"w_gate": (D, F), "w_up": (D, F), "w_down": (F, D)}
    else:
        shapes = {"w_in": (D, F), "w_out": (F, D)}
    if cfg.mlp_bias:
        shapes |= {"b_" + name[2:]: (shape[1],) for name, shape in shapes.items()}
    return shapes
