"""Cached decoding must equal recomputation: the KV cache is an optimisation, not a model change.

The reference is `decoder.forward`, which recomputes attention over the whole sequence with no
cache. Prefill + decode steps (teacher-forced on the same tokens) must give the same logits at
every position, and `generate` must give the same greedy tokens as `naive_generate`, for MHA,
GQA and MQA, gated and plain MLPs, and ragged batches — and for every family's features
(family_configs.py): a mixture of experts, latent attention with its cache of latents (the
reference decompresses keys and values), per-layer windows, soft caps, learned positions.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from family_configs import FAMILY_CONFIGS
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.sampling import Sampler


@st.composite
def configs(draw):
    K = draw(st.sampled_from([1, 2, 4]))
    G = draw(st.sampled_from([1, 2, 3]))
    return ModelConfig(L=draw(st.integers(1, 2)), D=draw(st.sampled_from([16, 32])),
                       F=draw(st.sampled_from([24, 48])), N=K * G, K=K,
                       H=draw(st.sampled_from([4, 8])), V=draw(st.sampled_from([37, 64])),
                       mlp=draw(st.sampled_from(["gated", "plain"])),
                       activation=draw(st.sampled_from(["silu", "gelu"])),
                       tied_embeddings=draw(st.booleans()),
                       window=draw(st.sampled_from([None, 3])))


@st.composite
def ragged_prompts(draw, V):
    B = draw(st.integers(1, 3))
    return [draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=9)) for _ in range(B)]


def teacher_forced_logits(params, cfg, seqs, n_prompt):
    """Prefill the first n_prompt[b] tokens, then feed the rest one decode step at a time.

    Returns the logits the cache produced for every position after the prompt, per sequence.
    """
    tokens, lengths = decode.pad_prompts([s[:n] for s, n in zip(seqs, n_prompt)])
    total = max(len(s) for s in seqs)
    cache = kvcache.init_cache(cfg, len(seqs), tokens.shape[1] + total)
    logits, cache = decode.prefill(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths), cache)
    out = [[np.asarray(logits[b])] for b in range(len(seqs))]
    for step in range(max(len(s) - n for s, n in zip(seqs, n_prompt))):
        # Sequences that ran out of tokens feed a dummy token; their logits are ignored.
        feed = [s[n + step] if n + step < len(s) else 0 for s, n in zip(seqs, n_prompt)]
        logits, cache = decode.decode_step(params, cfg, jnp.asarray(feed, jnp.int32), cache)
        for b, (s, n) in enumerate(zip(seqs, n_prompt)):
            if n + step < len(s):
                out[b].append(np.asarray(logits[b]))
    return out


@settings(max_examples=6)      # each example compiles a new model: seconds apiece
@given(cfg=configs(), data=st.data())
def test_prefill_and_decode_steps_match_recomputation(cfg, data):
    params = decoder.init_params(cfg, seed=data.draw(st.integers(0, 3)))
    seqs = data.draw(ragged_prompts(cfg.V))
    n_prompt = [data.draw(st.integers(1, len(s))) for s in seqs]
    cached = teacher_forced_logits(params, cfg, seqs, n_prompt)
    tokens, lengths = decode.pad_prompts(seqs)
    full = np.asarray(decoder.forward(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths)))
    for b, (s, n) in enumerate(zip(seqs, n_prompt)):
        expected = full[b, n - 1:len(s)]
        np.testing.assert_allclose(np.stack(cached[b]), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("family", list(FAMILY_CONFIGS))
@settings(max_examples=1)      # a model per family; each example compiles it anew
@given(data=st.data())
def test_each_family_decodes_with_its_cache_as_it_recomputes(family, data):
    cfg = FAMILY_CONFIGS[family]
    params = decoder.init_params(cfg, seed=data.draw(st.integers(0, 3)))
    seqs = data.draw(ragged_prompts(cfg.V))
    n_prompt = [data.draw(st.integers(1, len(s))) for s in seqs]
    cached = teacher_forced_logits(params, cfg, seqs, n_prompt)
    tokens, lengths = decode.pad_prompts(seqs)
    full = np.asarray(decoder.forward(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths)))
    for b, (s, n) in enumerate(zip(seqs, n_prompt)):
        np.testing.assert_allclose(np.stack(cached[b]), full[b, n - 1:len(s)], rtol=1e-4,
                                   atol=1e-4)


def test_learned_positions_bound_the_length_of_a_generation():
    cfg = FAMILY_CONFIGS["gpt2"]
    params = decoder.init_params(cfg)
    with pytest.raises(ValueError, match="exceeds the model.s 64 positions"):
        decode.generate(params, cfg, [[1, 2, 3]], cfg.max_seq_len)


@settings(max_examples=6)      # each example compiles a new model: seconds apiece
@given(cfg=configs(), data=st.data())
def test_generate_gives_the_tokens_of_naive_generation(cfg, data):
    params = decoder.init_params(cfg, seed=1)
    prompts = data.draw(ragged_prompts(cfg.V))
    n = data.draw(st.integers(1, 6))
    cached = decode.generate(params, cfg, prompts, n)
    naive = decode.naive_generate(params, cfg, prompts, n, bucket=8)
    assert cached.tokens == naive.tokens
    assert all(len(t) == n for t in cached.tokens)


def test_a_ragged_batch_decodes_each_prompt_as_if_alone():
    cfg = ModelConfig(L=2, D=32, F=64, N=4, K=2, H=8, V=50)
    params = decoder.init_params(cfg, seed=3)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [8], [9, 10, 11]]
    together = decode.generate(params, cfg, prompts, 6).tokens
    alone = [decode.generate(params, cfg, [p], 6).tokens[0] for p in prompts]
    assert together == alone


def test_sampled_generation_matches_naive_with_the_same_key():
    cfg = ModelConfig(L=2, D=32, F=64, N=4, K=1, H=8, V=40)
    params = decoder.init_params(cfg, seed=4)
    sampler = Sampler(temperature=0.9, top_k=10, top_p=0.9)
    prompts = [[1, 2, 3], [4, 5]]
    a = decode.generate(params, cfg, prompts, 8, sampler=sampler, key=jax.random.key(7))
    b = decode.naive_generate(params, cfg, prompts, 8, sampler=sampler, key=jax.random.key(7),
                              bucket=8)
    assert a.tokens == b.tokens


def test_generation_stops_at_eos():
    cfg = ModelConfig(L=1, D=16, F=32, N=2, K=1, H=8, V=30)
    params = decoder.init_params(cfg, seed=0)
    free = decode.generate(params, cfg, [[1, 2], [3]], 10).tokens
    eos = free[0][3]                         # the 4th token of the first sequence
    stopped = decode.generate(params, cfg, [[1, 2], [3]], 10, eos_id=eos).tokens
    assert stopped[0] == free[0][:free[0].index(eos) + 1]
    # The other sequence stops at its own first EOS, or runs to the limit.
    expected = free[1][:free[1].index(eos) + 1] if eos in free[1] else free[1]
    assert stopped[1] == expected
    assert decode.naive_generate(params, cfg, [[1, 2], [3]], 10, eos_id=eos).tokens == stopped


def test_extend_handles_a_chunk_of_several_tokens():
    """Appending T > 1 tokens to a cache (chunked prefill) gives the logits of recomputation."""
    cfg = ModelConfig(L=2, D=32, F=64, N=4, K=2, H=8, V=50)
    params = decoder.init_params(cfg, seed=5)
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    cache = kvcache.init_cache(cfg, 1, 16)
    _, cache = decode.prefill(params, cfg, jnp.asarray([seq[:4]]), jnp.asarray([4]), cache)
    logits, (new_k, new_v) = decode.extend(params, cfg, jnp.asarray([seq[4:]]), cache)
    full = decoder.forward(params, cfg, jnp.asarray([seq]))
    np.testing.assert_allclose(logits[0], full[0, 4:], rtol=1e-4, atol=1e-4)
    # extend reads the cache but leaves it alone; appending gives the cache of the whole text.
    assert int(cache.lengths[0]) == 4
    cache = kvcache.append(cache, new_k, new_v)
    assert int(cache.lengths[0]) == len(seq)
    whole = kvcache.init_cache(cfg, 1, 16)
    _, whole = decode.prefill(params, cfg, jnp.asarray([seq]), jnp.asarray([len(seq)]), whole)
    for a, b in zip(cache.k + cache.v, whole.k + whole.v):
        np.testing.assert_allclose(a[:, :, :len(seq)], b[:, :, :len(seq)], rtol=1e-5, atol=1e-5)


def test_a_ragged_chunk_appends_only_its_real_tokens():
    cfg = ModelConfig(L=1, D=16, F=32, N=2, K=1, H=8, V=30)
    params = decoder.init_params(cfg, seed=6)
    cache = kvcache.init_cache(cfg, 2, 12)
    _, cache = decode.prefill(params, cfg, jnp.asarray([[1, 2, 3], [4, 0, 0]]),
                              jnp.asarray([3, 1]), cache)
    chunk = jnp.asarray([[5, 6], [7, 0]])
    logits, (k, v) = decode.extend(params, cfg, chunk, cache, jnp.asarray([2, 1]))
    cache = kvcache.append(cache, k, v, jnp.asarray([2, 1]))
    np.testing.assert_array_equal(cache.lengths, [5, 2])
    full = decoder.forward(params, cfg, jnp.asarray([[1, 2, 3, 5, 6], [4, 7, 0, 0, 0]]),
                         jnp.asarray([5, 2]))
    np.testing.assert_allclose(logits[0], full[0, 3:5], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(logits[1, 0], full[1, 1], rtol=1e-4, atol=1e-4)


def test_writes_past_the_end_of_the_cache_are_dropped_not_clamped():
    cache = jnp.zeros((1, 1, 4, 1))
    new = jnp.ones((1, 3, 1, 1))
    out = kvcache.write(cache, new, jnp.asarray([2]))
    np.testing.assert_array_equal(out[0, 0, :, 0], [0, 0, 1, 1])


def test_generate_rejects_bad_input():
    cfg = ModelConfig(L=1, D=16, F=32, N=2, K=1, H=8, V=30)
    params = decoder.init_params(cfg)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode.generate(params, cfg, [[1, 30]], 3)
    with pytest.raises(ValueError, match="at least one token"):
        decode.generate(params, cfg, [[]], 3)
    with pytest.raises(ValueError, match="positive"):
        decode.generate(params, cfg, [[1]], 0)


def test_bfloat16_decoding_runs_and_agrees_with_float32_on_the_first_token():
    cfg = ModelConfig(L=2, D=32, F=64, N=4, K=2, H=8, V=50)
    p32 = decoder.init_params(cfg, seed=2)
    p16 = decoder.cast_params(p32, jnp.bfloat16)
    assert p16["embed"].dtype == jnp.bfloat16
    out16 = decode.generate(p16, cfg, [[1, 2, 3]], 4).tokens
    assert len(out16[0]) == 4
    logits32 = decoder.forward(p32, cfg, jnp.asarray([[1, 2, 3]]))[0, -1]
    logits16 = decoder.forward(p16, cfg, jnp.asarray([[1, 2, 3]]))[0, -1]
    assert logits16.dtype == jnp.float32
    # bfloat16 keeps 8 bits of mantissa: agreement to a few percent of the logit scale.
    assert float(jnp.max(jnp.abs(logits16 - logits32))) < 0.1 * float(jnp.max(jnp.abs(logits32)))
