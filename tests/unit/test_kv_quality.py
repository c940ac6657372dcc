"""kv_quality against independent references: the int8 cache decoded token by token
(kv_quant), plain decoder.forward, Hugging Face's eager attention weights, and perplexity
recomputed in numpy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.memory import kv_quality, kv_quant
from inferbook.model import decoder
from inferbook.model.presets import get_preset

CFG = get_preset("tiny")


@pytest.fixture(scope="module")
def params():
    return decoder.init_params(CFG, seed=0)


@pytest.fixture(scope="module")
def tokens():
    return jax.random.randint(jax.random.key(1), (2, 12), 0, CFG.V)


def test_int8_roundtrip_is_kv_quant():
    x = jax.random.normal(jax.random.key(0), (3, 5, 64))
    np.testing.assert_array_equal(kv_quality.quantize_roundtrip(x, 8),
                                  kv_quant.dequantize(*kv_quant.quantize(x)))


@pytest.mark.parametrize("bits,group", [(8, None), (4, 32), (4, 8), (3, None)])
def test_roundtrip_error_within_half_a_step(bits, group):
    x = jax.random.normal(jax.random.key(2), (7, 64))
    y = np.asarray(kv_quality.quantize_roundtrip(x, bits, group))
    g = 64 if group is None else group
    step = np.abs(np.asarray(x)).reshape(7, -1, g).max(-1, keepdims=True) / (2 ** (bits - 1) - 1)
    err = np.abs(y - np.asarray(x)).reshape(7, -1, g)
    assert (err <= step / 2 + 1e-6).all() and err.max() > 0
    levels = np.unique(np.round(y.reshape(7, -1, g) / step))
    assert len(levels) <= 2 ** bits - 1


def test_int8_forward_matches_int8_cache_decode(params, tokens):
    """Token by token through kv_quant's int8 cache: the same logits at every position."""
    B, T = tokens.shape
    cache = kv_quant.init_cache(CFG, B, T, jnp.int8)
    rows = []
    for t in range(T):
        logits, (nk, nv) = kv_quant.extend(params, CFG, tokens[:, t:t + 1], cache)
        cache = kv_quant.append(cache, nk, nv)
        rows.append(logits[:, 0])
    ours = kv_quality.forward_kv_bits(params, CFG, tokens, 8)
    np.testing.assert_allclose(ours, jnp.stack(rows, 1), atol=2e-4, rtol=1e-4)
    assert not np.allclose(ours, decoder.forward(params, CFG, tokens), atol=1e-4)


def test_more_bits_approach_the_float_model(params, tokens):
    ref = decoder.forward(params, CFG, tokens)
    err = [float(jnp.abs(kv_quality.forward_kv_bits(params, CFG, tokens, b) - ref).max())
           for b in (3, 4, 8)]
    assert err[0] > err[1] > err[2]
    np.testing.assert_allclose(kv_quality.forward_kv_bits(params, CFG, tokens[:, :1], 4),
                               ref[:, :1], atol=1e-5)     # one token attends only to itself


def test_perplexity_and_agreement_against_numpy(tokens):
    logits = jax.random.normal(jax.random.key(3), (2, 12, CFG.V)) * 3
    lg, tk = np.asarray(logits, np.float64), np.asarray(tokens)
    nll = [np.log(np.exp(lg[b, t]).sum()) - lg[b, t, tk[b, t + 1]]
           for b in range(2) for t in range(4, 11)]
    assert kv_quality.perplexity(logits, tokens, start=4) == pytest.approx(
        np.exp(np.mean(nll)), rel=1e-5)
    same = [lg[b, t].argmax() == tk[b, t + 1] for b in range(2) for t in range(4, 11)]
    assert kv_quality.greedy_agreement(logits, tokens, 4) == pytest.approx(np.mean(same))
    forced = jnp.asarray(tokens).at[:, 1:].set(jnp.argmax(logits[:, :-1], -1))
    assert kv_quality.greedy_agreement(logits, forced, 0) == 1.0


def test_bad_arguments_raise(params, tokens):
    with pytest.raises(ValueError):
        kv_quality.quantize_roundtrip(jnp.ones((4, 64)), 8, group=24)
    with pytest.raises(ValueError):
        kv_quality.quantize_roundtrip(jnp.ones((4, 64)), 1)
    with pytest.raises(ValueError):
        kv_quality.sink_share(jnp.ones((1, 2, 4, 4)), start=4)
    with pytest.raises(ValueError):
        kv_quality.perplexity(jnp.zeros((1, 3, 5)), jnp.zeros((1, 3), int), start=2)


def test_bytes_per_element():
    assert kv_quality.kv_bits_bytes_per_element(8, 64) == kv_quant.bytes_per_element(64)
    assert kv_quality.kv_bits_bytes_per_element(4, 32) == 0.5 + 4 / 32


def test_attention_probs_match_hugging_face(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from inferbook.model.checkpoint import load_checkpoint

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=10_000.0, attn_implementation="eager")
    hf = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, w in hf.named_parameters():
            if "norm" not in name:
                w.normal_(0.0, 1.0 / np.sqrt(w.shape[-1]))
    hf.save_pretrained(tmp_path)
    cfg, params = load_checkpoint(tmp_path, dtype=jnp.float32)
    ids = [[5, 17, 3, 99, 42, 8, 61, 2, 77]]
    with torch.no_grad():
        ref = hf(torch.tensor(ids), output_attentions=True).attentions
    ours = kv_quality.attention_probs(params, cfg, jnp.asarray(ids))
    assert ours.shape == (2, 1, 4, 9, 9)
    for layer in range(2):
        np.testing.assert_allclose(ours[layer], ref[layer].numpy(), atol=1e-5)
    np.testing.assert_allclose(ours.sum(-1), 1.0, atol=1e-5)


def test_sink_share_against_a_loop():
    p = jax.nn.softmax(jax.random.normal(jax.random.key(5), (2, 3, 6, 6)) * 2, -1)
    p = jnp.where(jnp.tril(jnp.ones((6, 6), bool)), p, 0)
    p = p / p.sum(-1, keepdims=True)
    share, uniform = kv_quality.sink_share(p, start=2)
    pn = np.asarray(p)
    assert share == pytest.approx(np.mean([pn[b, n, t, 0] for b in range(2) for n in range(3)
                                           for t in range(2, 6)]), rel=1e-5)
    assert uniform == pytest.approx(np.mean([1 / (t + 1) for t in range(2, 6)]), rel=1e-6)
    flat = jnp.where(jnp.tril(jnp.ones((6, 6), bool)), 1.0, 0.0)
    flat = flat / flat.sum(-1, keepdims=True)
    assert kv_quality.sink_share(flat, 2)[0] == pytest.approx(uniform, rel=1e-5)
