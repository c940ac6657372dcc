"""The decode layout (`model/decode_layout.py`) holds the same weights, so the model computes
the same thing from it — for every family, in prefill, in cached decoding and in `generate` —
and it converts back exactly. Every fused or transposed matrix is checked against the original
arrays, not against a second run of the same code."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from family_configs import FAMILY_CONFIGS

from inferbook.model import decode, decode_layout, decoder, kvcache
from inferbook.model.presets import PRESETS
from inferbook.model.quantized import QuantizedMatrix, is_quantized

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


def _perturbed(params, seed=3):
    """Every leaf moved off its initial value: biases and norm gains start at 0 or 1, where a
    layout that dropped or misplaced one would still agree."""
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    return jax.tree.unflatten(tree, [x + 0.1 * jax.random.normal(k, x.shape, x.dtype)
                                     for x, k in zip(leaves, keys)])


FEATURES = {   # biases, q/k norms over every scope, clipping, the unembedding's bias and scale
    "all-at-once": PRESETS["tiny"].replace(
        tied_embeddings=False, qkv_bias=True, o_bias=True, mlp_bias=True, qk_norm=True,
        qk_norm_scope="whole", qkv_clip=0.5, unembed_bias=True, logit_multiplier=0.3),
    **{name: FAMILY_CONFIGS[name] for name in ("qwen2", "qwen3", "olmo2", "olmoe", "stablelm",
                                               "cohere", "granite", "phi", "gpt2")}}


@pytest.mark.parametrize("name", list(FEATURES))
def test_a_decode_step_reads_the_decode_layout_to_the_same_logits(name):
    """Prefill from the weights' layout, then one cached decode step from each layout: the
    logits of the step the decode layout exists for agree, feature by feature."""
    cfg = FEATURES[name]
    params = _perturbed(decoder.init_params(cfg, 0))
    fast = decode_layout.for_batch(params, cfg, 1)
    assert decode_layout.is_decode_layout(fast)
    tokens = jnp.array([[3, 1, 4, 1, 5, 9]])
    cache = kvcache.init_cache(cfg, 1, 16)
    _, cache = decode.prefill(params, cfg, tokens, jnp.array([6]), cache)
    step = jnp.array([2])
    plain_logits, _ = decode.decode_step(params, cfg, step, cache)
    fast_logits, _ = decode.decode_step(fast, cfg, step, cache)
    assert float(jnp.std(plain_logits)) > 0
    np.testing.assert_allclose(fast_logits, plain_logits, rtol=2e-5, atol=2e-5)


def _quantized(w_IO):
    """W [in, out] as llama.cpp keeps it: Q8_0 blocks of its [out, in] rows, seen transposed."""
    gguf = pytest.importorskip("gguf")
    w = np.ascontiguousarray(np.asarray(w_IO, np.float32).T)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q8_0)
    return QuantizedMatrix.from_bytes("Q8_0", raw, *w.shape, transposed=True)


def test_quantized_weights_stay_in_their_own_layout():
    """Fusing a matrix kept in quantized blocks would decode it and keep it dense, so
    `for_batch` leaves such weights in their own layout — and the model reads them there,
    a tied quantized embedding included, to the values of their dense decoding."""
    cfg = PRESETS["tiny"].replace(tied_embeddings=True)
    params = decoder.init_params(cfg, 0)
    layer = params["layers"][0] | {"wq": _quantized(params["layers"][0]["wq"])}
    embed = _quantized(params["embed"].T)          # stored [V, D], seen as it is
    embed = QuantizedMatrix(embed.fields, embed.qtype, embed.stored_shape, False)
    quantized = params | {"embed": embed, "layers": [layer, *params["layers"][1:]]}
    assert not decode_layout.expressible(quantized) and decode_layout.expressible(params)
    assert decode_layout.for_batch(quantized, cfg, 1) is quantized
    dense = jax.tree.map(lambda w: w.dequantize() if is_quantized(w) else w, quantized,
                         is_leaf=is_quantized)
    tokens, lengths = jnp.array([[1, 2, 3, 4]]), jnp.array([4])
    np.testing.assert_allclose(decoder.forward(quantized, cfg, tokens, lengths),
                               decoder.forward(dense, cfg, tokens, lengths), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("rows", [1, 2, 7, 8, 9])
def test_a_product_of_any_number_of_rows_is_x_times_w_in_either_layout(rows):
    """`linear` multiplies a few rows by an [out, in] matrix one row at a time under jax 0.7.2
    on a CPU (`rows_one_at_a_time`): every count of rows, in both layouts, gives x · W."""
    rng = np.random.default_rng(rows)
    x = rng.standard_normal((rows, 24)).astype(np.float32)
    w = rng.standard_normal((24, 40)).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64)
    for p in ({"w": jnp.asarray(w)}, {"w_t": jnp.asarray(w.T.copy())}):
        got = np.asarray(decode_layout.linear(p, "w", jnp.asarray(x)))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        got3 = np.asarray(decode_layout.linear(p, "w", jnp.asarray(x[None])))
        np.testing.assert_allclose(got3[0], want, rtol=1e-5, atol=1e-5)
