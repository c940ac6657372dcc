"""What a generation loop refuses (`check_generate_args`, `Sampler`) and where the limits lie.

Each refusal is something the loop would otherwise get silently wrong; the boundary tests run
the loop at the last accepted value to show the limit is the model's, not an arbitrary one.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from inferbook.model import decoder
from inferbook.model.config import ModelConfig
from inferbook.model.decode import generate, naive_generate, pad_prompts
from inferbook.model.generate_args import check_generate_args, random_prompts
from inferbook.model.sampling import GREEDY, MIN_TEMPERATURE, Sampler, sample

CFG = ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=40, max_seq_len=32, name="small")


@pytest.mark.parametrize("kwargs, name", [
    (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(temperature=-0.5), "temperature"), (dict(temperature="1"), "temperature"),
    (dict(temperature=MIN_TEMPERATURE / 10), "overflows"), (dict(temperature=True), "temperature"),
    (dict(top_k=0), "top_k"), (dict(top_k=2.5), "top_k"), (dict(top_k=True), "top_k"),
    (dict(top_p=0.0), "top_p"), (dict(top_p=float("nan")), "top_p"), (dict(top_p=1.5), "top_p"),
])
def test_a_sampler_refuses_settings_that_would_sample_garbage(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Sampler(**kwargs)


def test_below_the_minimum_temperature_float32_overflows_and_at_it_sampling_is_argmax():
    logits = jnp.array([[3.0, 2.9999, -1.0, 0.5]], jnp.float32)
    # What a smaller temperature would do: the logits leave float32's range.
    assert not jnp.all(jnp.isfinite(logits / jnp.asarray(1e-39, jnp.float32)))
    # At the minimum, a gap of 1e-4 between the best two is already a certain choice.
    draws = [int(sample(logits, jax.random.key(i), Sampler(MIN_TEMPERATURE))[0])
             for i in range(20)]
    assert set(draws) == {int(np.argmax(np.asarray(logits)))}


@pytest.mark.parametrize("prompts, max_new, kwargs, fragment", [
    ([[1, 2]], 0, {}, "max_new_tokens"), ([[1, 2]], True, {}, "max_new_tokens"),
    ([[1, 2]], 2.0, {}, "max_new_tokens"), ([[1, 2]], 31, {}, "32 positions"),
    ([[1, 2]], 3, dict(eos_id=40), "eos_id"), ([[1, 2]], 3, dict(eos_id=-1), "eos_id"),
    ([[1, 2]], 3, dict(sampler="greedy"), "Sampler"), ([[1, 2.0]], 3, {}, "integer token"),
    ([[1, 40]], 3, {}, "outside the vocabulary"), ([[]], 3, {}, "at least one token"),
    ([], 3, {}, "at least one token"), ([[1], list(range(30))], 3, {}, "30 tokens"),
])
def test_generate_arguments_are_checked_before_anything_runs(prompts, max_new, kwargs,
                                                            fragment):
    with pytest.raises(ValueError, match=fragment):
        check_generate_args(CFG, prompts, max_new, **kwargs)


def test_the_last_position_is_usable_and_one_more_is_refused():
    params = decoder.init_params(CFG, 0)
    prompt = [3, 1, 4]
    room = CFG.max_seq_len - len(prompt)
    cached = generate(params, CFG, [prompt], room).tokens[0]
    assert len(cached) == room
    # The cached loop at the boundary agrees with recomputing every prefix.
    assert naive_generate(params, CFG, [prompt], room).tokens[0] == cached
    for loop in (generate, naive_generate):
        with pytest.raises(ValueError, match=f"{CFG.max_seq_len} positions"):
            loop(params, CFG, [prompt], room + 1)


def test_integer_scalars_of_numpy_and_jax_are_token_ids():
    check_generate_args(CFG, [np.array([1, 2], np.int32), [jnp.int32(3)]], np.int64(4),
                        GREEDY, eos_id=np.int32(2))


def test_padding_to_a_multiple_of_zero_is_refused():
    with pytest.raises(ValueError, match="multiple"):
        pad_prompts([[1, 2]], 0)


def test_random_prompts_are_ragged_reproducible_and_in_the_vocabulary():
    prompts = random_prompts([5, 1, 3], 7)
    assert [len(p) for p in prompts] == [5, 1, 3]
    assert all(0 <= t < 7 for p in prompts for t in p)
    assert random_prompts([5, 1, 3], 7) == prompts
    assert random_prompts([2, 1], 7)[1] == random_prompts([4, 1], 7)[1]     # b's own key
    with pytest.raises(ValueError):
        random_prompts([3, 0], 7)
