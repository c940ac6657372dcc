"""Sampling: filters never leave their support, and a fixed key gives fixed samples."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferbook.model.sampling import GREEDY, Sampler, filter_logits, sample


@functools.partial(jax.jit, static_argnames="sampler")
def draws_of(logits, keys, sampler):
    """One token per key: the sampler's draws, compiled as one program per example."""
    return jax.vmap(lambda key: sample(logits, key, sampler))(keys)


logit_rows = st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=2, max_size=40)


def reference_top_p_support(row, p):
    """The smallest prefix of tokens, by decreasing probability, whose mass reaches p."""
    probs = np.exp(row - row.max())
    probs /= probs.sum()
    order = np.argsort(-row, kind="stable")
    kept, mass = [], 0.0
    for i in order:
        kept.append(i)
        mass += probs[i]
        if mass >= p:
            break
    return set(kept)


@given(row=logit_rows, k=st.integers(1, 10), seed=st.integers(0, 2**31 - 1))
def test_top_k_samples_only_among_the_k_largest(row, k, seed):
    logits = jnp.asarray([row], jnp.float32)
    kth = np.sort(np.asarray(row, np.float32))[::-1][min(k, len(row)) - 1]
    keys = jax.random.split(jax.random.key(seed), 64)
    draws = draws_of(logits, keys, Sampler(1.0, top_k=k))
    assert np.all(np.asarray(row, np.float32)[np.asarray(draws)[:, 0]] >= kth)


@given(row=logit_rows, p=st.floats(0.05, 1.0), seed=st.integers(0, 2**31 - 1))
def test_top_p_samples_only_inside_the_nucleus(row, p, seed):
    row32 = np.asarray(row, np.float32)
    allowed_values = {row32[i] for i in reference_top_p_support(row32.astype(np.float64), p)}
    keys = jax.random.split(jax.random.key(seed), 64)
    draws = draws_of(jnp.asarray([row32]), keys, Sampler(1.0, top_p=p))
    # Compare by value: tokens tied with the threshold logit are legitimately interchangeable.
    threshold = min(allowed_values)
    assert np.all(row32[np.asarray(draws)[:, 0]] >= threshold - 1e-6)


def test_filtered_logits_keep_exactly_the_support():
    logits = jnp.log(jnp.asarray([[0.5, 0.3, 0.15, 0.05]]))
    assert np.isfinite(filter_logits(logits, top_p=0.7)).tolist() == [[True, True, False, False]]
    assert np.isfinite(filter_logits(logits, top_p=0.5)).tolist() == [[True, False, False, False]]
    assert np.isfinite(filter_logits(logits, top_k=3)).tolist() == [[True, True, True, False]]


def test_a_fixed_key_gives_fixed_samples_and_different_keys_differ():
    logits = jax.random.normal(jax.random.key(0), (4, 100))
    sampler = Sampler(temperature=1.0)
    a = sample(logits, jax.random.key(1), sampler)
    b = sample(logits, jax.random.key(1), sampler)
    np.testing.assert_array_equal(a, b)
    draws = {tuple(np.asarray(sample(logits, jax.random.key(s), sampler))) for s in range(10)}
    assert len(draws) > 1


def test_sampling_follows_the_softmax_distribution():
    probs = np.array([0.6, 0.3, 0.1])
    logits = jnp.log(jnp.asarray([probs]))
    keys = jax.random.split(jax.random.key(0), 20_000)
    draws = np.asarray(jax.vmap(lambda k: sample(logits, k, Sampler(1.0)))(keys))[:, 0]
    freq = np.bincount(draws, minlength=3) / len(draws)
    # 20,000 draws: the standard error of each frequency is below 0.0035.
    np.testing.assert_allclose(freq, probs, atol=0.015)


def test_greedy_is_argmax_and_temperature_zero():
    logits = jnp.asarray([[0.1, 2.0, -1.0], [3.0, 0.0, 2.9]])
    np.testing.assert_array_equal(sample(logits, jax.random.key(0), GREEDY), [1, 0])
    assert Sampler(temperature=0).greedy


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_k": 0}, {"top_p": 0.0},
                                    {"top_p": 1.5}])
def test_bad_sampler_settings_are_rejected(kwargs):
    with pytest.raises(ValueError):
        Sampler(**kwargs)
