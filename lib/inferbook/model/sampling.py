"""Choosing the next token from the model's logits.

Sampling is kept apart from the model: the model maps tokens to logits, a `Sampler` maps
logits (and an explicit PRNG key) to tokens. The same logits and the same key always give the
same tokens, which is what lets the cached and the naive decoding loops be compared token by
token even when they sample.

Filters apply in the usual order: temperature scales the logits, top-k keeps the k largest,
top-p (nucleus) keeps the smallest set of tokens whose probabilities add up to at least p.
Tokens outside the kept set get probability exactly zero.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import jax
import jax.numpy as jnp

__all__ = ["Sampler", "GREEDY", "MIN_TEMPERATURE", "filter_logits", "sample"]


# Below this, logits / temperature leaves float32's range (3.4e38) for logits of 3.4e32 — and
# a temperature under 1.2e-38 is 0 in float32 — so every logit becomes ±inf or NaN and the
# "sample" is garbage. At 1e-6 a logit gap of 1e-4 already gives odds of e^-100: greedy.
MIN_TEMPERATURE = 1e-6


@dataclass(frozen=True)
class Sampler:
    """How to pick tokens. temperature == 0 means greedy (argmax); top_k / top_p None: off."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        # Checked here, once, because a NaN temperature would not fail anywhere later: it
        # turns every logit into NaN and argmax of NaNs is token 0, for every step.
        if not _is_real(self.temperature) or not 0 <= self.temperature < math.inf:
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if 0 < self.temperature < MIN_TEMPERATURE:
            raise ValueError(f"temperature {self.temperature!r} is below {MIN_TEMPERATURE:g}, "
                             "where logits / temperature overflows float32; temperature 0 "
                             "(greedy) is the argmax these approach")
        if self.top_k is not None and (not _is_int(self.top_k) or self.top_k < 1):
            raise ValueError(f"top_k must be an integer >= 1, got {self.top_k!r}")
        if self.top_p is not None and (not _is_real(self.top_p) or not 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be a number in (0, 1], got {self.top_p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _is_real(x: object) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def _is_int(x: object) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


GREEDY = Sampler(temperature=0.0)


def filter_logits(logits_BV: jax.Array, top_k: int | None = None,
                  top_p: float | None = None) -> jax.Array:
    """Logits with every token outside the top-k / top-p support set to -inf."""
    logits_BV = logits_BV.astype(jnp.float32)
    if top_k is not None and top_k < logits_BV.shape[-1]:
        kth_largest_B1 = jax.lax.top_k(logits_BV, top_k)[0][:, -1:]
        logits_BV = jnp.where(logits_BV < kth_largest_B1, -jnp.inf, logits_BV)
    if top_p is not None and top_p < 1.0:
        sorted_BV = jnp.sort(logits_BV, axis=-1)[:, ::-1]
        probs_BV = jax.nn.softmax(sorted_BV, axis=-1)
        # Probability mass strictly before each sorted token: a token is kept while the mass
        # before it is still short of p, so the first token is always kept.
        mass_before_BV = jnp.cumsum(probs_BV, axis=-1) - probs_BV
        keep_BV = mass_before_BV < top_p
        # The smallest kept logit is the threshold; ties at the threshold are kept too.
        threshold_B1 = jnp.min(jnp.where(keep_BV, sorted_BV, jnp.inf), axis=-1, keepdims=True)
        logits_BV = jnp.where(logits_BV < threshold_B1, -jnp.inf, logits_BV)
    return logits_BV


def sample(logits_BV: jax.Array, key: jax.Array, sampler: Sampler = GREEDY) -> jax.Array:
    """One token id per row of `logits_BV` (int32 [B])."""
    if sampler.greedy:
        return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    logits_BV = logits_BV.astype(jnp.float32) / sampler.temperature
    logits_BV = filter_logits(logits_BV, sampler.top_k, sampler.top_p)
    return jax.random.categorical(key, logits_BV, axis=-1).astype(jnp.int32)
