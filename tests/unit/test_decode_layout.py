"""The decode layout (`model/decode_layout.py`) holds the same weights, so the model computes
the same thing from it — for every family, in prefill, in cached decoding and in `generate` —
and it converts back exactly. Every fused or transposed matrix is checked against the original
arrays, not against a second run of the same code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from family_configs import FAMILY_CONFIGS

from inferbook.model import decode, decode_layout, decoder
from inferbook.model.presets import PRESETS

CONFIGS = {"tiny": PRESETS["tiny"], "tiny-untied-mqa": PRESETS["tiny-mqa"],
           "plain-mlp-untied": PRESETS["tiny"].replace(mlp="plain", mlp_bias=True,
                                                       qkv_bias=True, o_bias=True),
           **FAMILY_CONFIGS}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_decode_layout_computes_what_the_weights_layout_computes(name):
    cfg = CONFIGS[name]
    params = decoder.init_params(cfg, 0)
    fast = decode_layout.to_decode_layout(params, cfg)
    assert decode_layout.is_decode_layout(fast) and not decode_layout.is_decode_layout(params)
    tokens = jax.random.randint(jax.random.key(1), (2, 7), 0, cfg.V)
    lengths = jnp.array([7, 4])
    np.testing.assert_allclose(decoder.forward(fast, cfg, tokens, lengths),
                               decoder.forward(params, cfg, tokens, lengths), rtol=2e-5,
                               atol=2e-5)


@pytest.mark.parametrize("name", ["tiny-untied-mqa", "plain-mlp-untied", "gemma2", "mixtral",
                                  "deepseek_v3"])
def test_generate_gives_the_same_tokens_from_either_layout(name):
    """Prefill from one layout, decode steps from the other (`step_params`), or all from one."""
    cfg = CONFIGS[name]
    params = decoder.init_params(cfg, 0)
    fast = decode_layout.to_decode_layout(params, cfg)
    prompts = [[1, 2, 3, 4], [5, 6]]
    expected = decode.generate(params, cfg, prompts, 5).tokens
    assert decode.generate(fast, cfg, prompts, 5).tokens == expected
    assert decode.generate(params, cfg, prompts, 5, step_params=fast).tokens == expected
    assert decode_layout.for_batch(params, cfg, 1) is not params
    assert not decode_layout.is_decode_layout(decode_layout.for_batch(fast, cfg, 2))


@pytest.mark.parametrize("name", ["tiny", "plain-mlp-untied", "mixtral", "deepseek_v2"])
def test_each_matrix_is_the_original_transposed_and_side_by_side(name):
    cfg = CONFIGS[name]
    params = decoder.init_params(cfg, 0)
    fast = decode_layout.to_decode_layout(params, cfg)
    for p, q in zip(params["layers"], fast["layers"]):
        if "wqkv_t" in q:
            np.testing.assert_array_equal(
                q["wqkv_t"], np.concatenate([p["wq"], p["wk"], p["wv"]], axis=1).T)
            assert q["wqkv_t"].shape == (sum(decode_layout.fused_widths(cfg, "wqkv")), cfg.D)
        if "w_gate_up_t" in q:
            np.testing.assert_array_equal(
                q["w_gate_up_t"], np.concatenate([p["w_gate"], p["w_up"]], axis=1).T)
        for k in ("wo", "w_down", "w_in", "w_out"):
            if k + "_t" in q:
                np.testing.assert_array_equal(q[k + "_t"], np.asarray(p[k]).T)
        moved = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down", "w_in", "w_out"}
        kept = {k for k in p if k not in moved} | ({"wq", "wo"} if cfg.mla else set())
        for k in kept:                         # norms, biases, experts, latent attention
            assert q[k] is p[k], k
    if "unembed" in params:
        np.testing.assert_array_equal(fast["unembed_t"], np.asarray(params["unembed"]).T)
    back = decode_layout.from_decode_layout(fast, cfg)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(params)):
        np.testing.assert_array_equal(a, b)


def test_converting_twice_changes_nothing():
    cfg = CONFIGS["tiny"]
    params = decoder.init_params(cfg, 0)
    fast = decode_layout.to_decode_layout(params, cfg)
    assert decode_layout.to_decode_layout(fast, cfg) is fast
    assert decode_layout.from_decode_layout(params, cfg) is params
