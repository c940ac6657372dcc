"""The acceptance rule of speculative decoding: which drafts to keep, and the target's own token.

A round proposes γ draft tokens d_1 … d_γ (γ is spelled `gamma` in code; the sources' symbol,
not the G = N/K of attention). The target scores [last token, d_1, …, d_γ] in one pass, which
gives its distribution p_i at every proposed position plus one more, p_{γ+1}, after the last
draft. The rule keeps the longest acceptable leading run of drafts and adds one token drawn
from the target, so a round emits between 1 and γ + 1 tokens:

  * greedy: d_i is accepted while it equals argmax p_i; the first mismatch is replaced by
    argmax p_i. The output is exactly greedy decoding's.
  * sampling (rejection sampling): d_i, drawn from the draft's q_i, is accepted with
    probability min(1, p_i(d_i) / q_i(d_i)). At the first rejection the replacement is drawn
    from the residual max(0, p_i − q_i), renormalised; if all γ are accepted a bonus token is
    drawn from p_{γ+1}. Each emitted token is then distributed exactly as the target's p
    (Leviathan et al. 2023, theorem 3.5; Chen et al. 2023), whatever q is — q only decides
    how often drafts survive. A deterministic drafter is a q that puts all its mass on its
    guess, so the same rule serves prompt lookup.

Shapes below: drafts [γ], q [γ, V] (the draft's distributions at the drafted positions),
p [γ + 1, V] (the target's, one row more). The drafters (draft.py) and the generation loop
(speculative.py) both apply this rule, so it lives apart from either.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from inferbook.model.sampling import Sampler, filter_logits

__all__ = ["probabilities", "accept", "verify"]


def probabilities(logits_V: jax.Array, sampler: Sampler) -> jax.Array:
    """The distribution the sampler draws from: temperature, then top-k / top-p, softmax.

    Speculative sampling reproduces *this* distribution, so target and draft both use it.
    A greedy sampler's distribution is one-hot on the argmax.
    """
    if sampler.greedy:
        return jax.nn.one_hot(jnp.argmax(logits_V, -1), logits_V.shape[-1])
    flat = logits_V.reshape(-1, logits_V.shape[-1]).astype(jnp.float32) / sampler.temperature
    flat = filter_logits(flat, sampler.top_k, sampler.top_p)
    return jax.nn.softmax(flat, -1).reshape(logits_V.shape)


def verify(drafts: jax.Array, q: jax.Array, p: jax.Array, n_draft: jax.Array,
           key: jax.Array, greedy: bool) -> tuple[jax.Array, jax.Array]:
    """Apply the rule to one round. Returns (accepted drafts n, the target's token y).

    drafts [γ]: proposed tokens, of which only the first n_draft are real (a drafter may
    propose fewer than γ); q [γ, V]: the draft's distributions at those positions (one-hot
    for a deterministic drafter); p [γ + 1, V]: the target's distributions after the last
    token, after d_1, …, after d_γ. The round emits drafts[:n] and then y.
    """
    gamma = drafts.shape[0]
    pos = jnp.arange(gamma)
    if greedy:
        ok = (drafts == jnp.argmax(p[:gamma], -1)) & (pos < n_draft)
        n = jnp.sum(jnp.cumprod(ok.astype(jnp.int32)))              # leading accepted run
        return n, jnp.argmax(p[n]).astype(jnp.int32)
    k_accept, key = jax.random.split(key)
    n, dist = accept(drafts, q, p, n_draft, jax.random.uniform(k_accept, (gamma,)))
    return n, jax.random.categorical(key, jnp.log(dist)).astype(jnp.int32)


def accept(drafts: jax.Array, q: jax.Array, p: jax.Array, n_draft: jax.Array,
           u: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The sampling rule of `verify` with its uniforms u [γ] given: (accepted n, y's distribution).

    Draft d_i is accepted when u_i · q_i(d_i) < p_i(d_i) — with probability min(1, p/q),
    written without a division. n is the length of the leading run of accepted drafts (at
    most n_draft). The target's own token y is then drawn from the returned distribution: the
    residual max(0, p_n − q_n), renormalised, after a rejection; p_n itself when every draft
    was accepted (Leviathan et al. 2023, algorithm 1).
    """
    gamma = drafts.shape[0]
    pos = jnp.arange(gamma)
    p_x, q_x = p[pos, drafts], q[pos, drafts]
    ok = (u * q_x < p_x) & (pos < n_draft)                          # u < p / q, no division
    n = jnp.sum(jnp.cumprod(ok.astype(jnp.int32)))                  # leading accepted run
    p_n = p[n]
    # Rejected at n < n_draft: draw from the residual (p - q)+; all accepted: from p itself.
    q_n = jnp.where(n < n_draft, q[jnp.minimum(n, gamma - 1)], 0.0)
    residual = jnp.maximum(p_n - q_n, 0.0)
    total = residual.sum()
    return n, jnp.where(total > 0, residual / jnp.where(total > 0, total, 1.0), p_n)
