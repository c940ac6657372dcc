"""Rotary frequencies of every scaling rule, against transformers' own functions.

transformers computes each rule's inverse frequencies and attention factor in
`modeling_rope_utils.ROPE_INIT_FUNCTIONS`; the library's `rotary.frequencies`, fed the config
that `from_hf_config` reads from the same config.json, must give the same numbers — for
"dynamic" and "longrope" at lengths on both sides of the original context.
"""

import numpy as np
import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("torch")

import jax.numpy as jnp  # noqa: E402

from inferbook.model import rotary  # noqa: E402
from inferbook.model.config import ModelConfig  # noqa: E402
from inferbook.model.hf_config import from_hf_config  # noqa: E402

HEAD = 16
RULES = {
    "linear": dict(rope_type="linear", factor=4.0),
    "dynamic": dict(rope_type="dynamic", factor=2.0),
    "llama3": dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                   original_max_position_embeddings=64),
    "yarn": dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64),
    "yarn-deepseek": dict(rope_type="yarn", factor=40.0, original_max_position_embeddings=64,
                          mscale=0.707, mscale_all_dim=0.707, beta_fast=32, beta_slow=1),
    "longrope": dict(rope_type="longrope", original_max_position_embeddings=64,
                     short_factor=list(np.linspace(1, 1.5, HEAD // 2)),
                     long_factor=list(np.linspace(1, 12, HEAD // 2))),
}


@pytest.mark.parametrize("rule", list(RULES))
@pytest.mark.parametrize("seq_len", [40, 300])
def test_frequencies_match_transformers(rule, seq_len):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=HEAD,
                                      max_position_embeddings=256, rope_theta=5000.0,
                                      rope_scaling=dict(RULES[rule]))
    params = config.rope_parameters
    theirs, their_factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, None,
                                                                    seq_len=seq_len)
    cfg = from_hf_config(config.to_dict())
    ours, our_factor = rotary.frequencies(cfg, HEAD, jnp.int32(seq_len))
    np.testing.assert_allclose(np.asarray(ours), theirs.numpy(), rtol=2e-6)
    assert our_factor == pytest.approx(their_factor, rel=1e-6)


def test_without_scaling_the_model_rotates_exactly_as_plain_rope():
    cfg = ModelConfig(L=1, D=32, F=32, N=2, K=2, H=16, V=8, rope_theta=500.0)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 5, 2, 16)), jnp.float32)
    pos = jnp.asarray(np.arange(10).reshape(2, 5), jnp.int32)
    np.testing.assert_array_equal(rotary.rotate(x, pos, cfg), rotary.rope(x, pos, 500.0))


def test_interleaved_pairs_rotate_adjacent_channels():
    """(x_2i, x_2i+1) turn by pos·ω_i, the complex-number form of DeepSeek's checkpoints; the
    library returns them as halves, a permutation that q·k does not see."""
    cfg = ModelConfig(L=1, D=32, F=32, N=2, K=2, H=8, V=8, rope_interleaved=True)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 3, 1, 8))
    pos = np.array([[0, 5, 11]])
    omega = 1.0 / 10_000.0 ** (np.arange(0, 8, 2) / 8)
    z = (x[..., 0::2] + 1j * x[..., 1::2]) * np.exp(1j * pos[..., None, None] * omega)
    ours = np.asarray(rotary.rotate(jnp.asarray(x, jnp.float32), jnp.asarray(pos), cfg))
    np.testing.assert_allclose(ours, np.concatenate([z.real, z.imag], -1), atol=1e-5)
