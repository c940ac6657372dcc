"""Re-encoding weights in llama.cpp's block formats: bytes, rounding error, the same products.

The references are independent of the code under test: the estimator's byte count
(`perf.quant.weight_bytes`, written from the formats' definitions), the `gguf` package's own
decoder for the bytes its encoder wrote, the bound every round-to-nearest code obeys, and the
model run on dense float arrays of the same decoded values.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.model import decoder
from inferbook.model.config import ModelConfig
from inferbook.model.quantized import QuantizedMatrix, is_quantized
from inferbook.model.requantize import (
    ENCODABLE_TYPES,
    encode_matrix,
    layer_matrix_bytes,
    reencode_layers,
)
from inferbook.perf import quant

# Every matrix's input width a multiple of 32, as the block formats need.
CFG = ModelConfig(L=2, D=64, F=96, N=4, K=2, H=16, V=128, max_seq_len=64, name="requant-test")
ESTIMATOR_FORMAT = {"Q8_0": "int8:32", "Q4_0": "int4:32", "Q4_1": "int4+min:32"}
# Largest code magnitude of each format's w = d·(code − offset): what the f16 rounding of the
# scale d is multiplied by.
LARGEST_CODE = {"Q8_0": 127, "Q4_0": 8, "Q4_1": 15}


@pytest.fixture(scope="module")
def params():
    return decoder.init_params(CFG, seed=5)


@pytest.mark.parametrize("qtype", ENCODABLE_TYPES)
def test_bytes_held_are_the_estimators_count(params, qtype):
    """Q8_0 is int8:32 (34 bytes per 32 weights), Q4_0 int4:32 (18), Q4_1 int4+min:32 (20):
    the re-encoded layers hold exactly the bytes the estimator counts for those formats."""
    encoded = reencode_layers(params, qtype)
    assert layer_matrix_bytes(encoded) == quant.weight_bytes(CFG, ESTIMATOR_FORMAT[qtype],
                                                             roles=("matrix",))
    float32_bytes = layer_matrix_bytes(params)
    assert float32_bytes == 2 * quant.weight_bytes(CFG, "bf16", roles=("matrix",))
    assert all(is_quantized(w) for w in encoded["layers"][0].values() if w.ndim == 2)
    assert encoded["embed"] is params["embed"]                  # the embedding is left alone


@pytest.mark.parametrize("qtype", ENCODABLE_TYPES)
def test_decoding_gives_each_weight_back_within_half_a_step(qtype):
    """Every weight within half its block's step d of its value (plus the f16 rounding of d);
    Q4_0's codes stop at +7·d, so a weight clipped there may move by up to one step."""
    import gguf

    x = np.random.default_rng(1).normal(size=(64, 48)).astype(np.float32)    # [in, out]
    x[:32, 0] = np.linspace(-1, 1, 32)            # a block whose extremes have both signs
    w = encode_matrix(x, qtype)
    decoded = np.asarray(w.dequantize())
    assert w.shape == x.shape
    # The package's own decoder of the same bytes agrees with ours.
    raw = np.concatenate([np.asarray(v).view(np.uint8).reshape(*v.shape[:2], -1)
                          for v in w.fields.values()], axis=-1)
    theirs = gguf.quants.dequantize(raw.reshape(48, -1), gguf.GGMLQuantizationType[qtype])
    np.testing.assert_allclose(decoded, theirs.reshape(48, 64).T, rtol=0, atol=1e-6)

    blocks = x.T.reshape(48, 2, 32)                            # [out, blocks, 32]
    step = np.asarray(w.fields["d"], np.float32)[..., None]    # f16 scale, as stored
    err = np.abs(decoded.T.reshape(48, 2, 32) - blocks)
    bound = 0.5 * np.abs(step) * (1 + LARGEST_CODE[qtype] * 2.0 ** -10) + 1e-7
    if "m" in w.fields:                           # Q4_1's minimum is rounded to f16 as well
        bound = bound + np.abs(np.asarray(w.fields["m"], np.float32))[..., None] * 2.0 ** -11
    if qtype == "Q4_0":                           # clipped at code 15 (+7·d): up to one step
        clipped = blocks / step + 8 >= 15.4
        bound = np.where(clipped, 2 * bound, bound)
        assert clipped.any()                      # the test reaches the clipped case
    assert (err <= bound).all(), float((err / bound).max())


@pytest.mark.parametrize("qtype", ENCODABLE_TYPES)
def test_a_matmul_with_the_blocks_is_the_matmul_with_their_decoded_matrix(qtype):
    x = jax.random.normal(jax.random.key(2), (3, 64))
    w = encode_matrix(np.random.default_rng(3).normal(size=(64, 40)), qtype)
    dense = np.asarray(w.dequantize())
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a, b: a @ b)(x, w)),
                               np.asarray(x) @ dense, rtol=1e-5, atol=1e-5)


def test_the_model_on_reencoded_layers_is_the_model_on_their_decoded_values(params):
    tokens = jnp.arange(10, dtype=jnp.int32)[None] % CFG.V
    encoded = reencode_layers(params, "Q4_0")
    dense = jax.tree.map(lambda w: w.dequantize() if is_quantized(w) else w, encoded,
                         is_leaf=is_quantized)
    np.testing.assert_allclose(np.asarray(decoder.forward(encoded, CFG, tokens)),
                               np.asarray(decoder.forward(dense, CFG, tokens)),
                               rtol=1e-4, atol=1e-4)
    # Decoding everything back (qtype None) gives plain arrays of those values.
    back = reencode_layers(encoded, None)
    assert not any(is_quantized(w) for w in back["layers"][1].values())
    np.testing.assert_array_equal(np.asarray(back["layers"][1]["w_down"]),
                                  np.asarray(dense["layers"][1]["w_down"]))


@pytest.mark.parametrize("call, message", [
    (lambda: encode_matrix(np.ones((64, 8)), "Q6_K"), "cannot encode weights as 'Q6_K'"),
    (lambda: encode_matrix(np.ones((40, 8)), "Q8_0"), "40 inputs is not a multiple"),
    (lambda: encode_matrix(np.ones(64), "Q8_0"), "takes a 2-D matrix"),
    (lambda: reencode_layers({"embed": 0}, "Q8_0"), "without 'layers'"),
])
def test_bad_input_is_refused_in_one_line(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_matrix_kept_quantized_is_a_quantized_matrix():
    assert isinstance(encode_matrix(np.ones((32, 2)), "Q8_0"), QuantizedMatrix)
