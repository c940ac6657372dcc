"""Speculative decoding: a cheap drafter guesses, the target model checks many tokens at once.

A decode step of a large model is bound by memory bandwidth: it reads every weight to produce
one token per sequence. Scoring γ + 1 tokens in one forward pass reads the same weights, so on
an accelerator it costs about as much as scoring one. Speculative decoding (Leviathan et al.
2023; Chen et al. 2023) exploits that: a drafter proposes γ tokens, the target runs once over
[last token, d_1, ..., d_γ], which yields its distribution p_i at every proposed position, and
the longest acceptable run of drafts is kept, plus one token from the target itself. Every
round therefore produces between 1 and γ + 1 tokens for one target step.

The acceptance rules (`verify`):

  * greedy: d_i is accepted while it equals argmax p_i; the first mismatch is replaced by
    argmax p_i. The output is exactly greedy decoding's.
  * sampling (rejection sampling): d_i, drawn from the draft's q_i, is accepted with
    probability min(1, p_i(d_i) / q_i(d_i)). At the first rejection the replacement is drawn
    from the residual max(0, p_i − q_i), renormalised; if all γ are accepted a bonus token
    is drawn from p_{γ+1}. Each emitted token is then distributed exactly as the target's
    p (Leviathan et al., theorem 3.5), whatever q is — q only decides how often drafts survive.

Drafters (draft.py): a smaller model (`DraftModel`), or prompt lookup (`PromptLookup`), which
copies what followed the last occurrence of the current n-gram in the context — free, and good
whenever outputs repeat their input. A deterministic drafter is a q that puts all its mass on
its guess, so the same rule applies.

Caches roll back for free: rejected tokens' keys and values were written past the kept length,
and a KVCache ignores slots beyond `lengths`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.generate_args import check_generate_args
from inferbook.model.sampling import GREEDY, Sampler, filter_logits
from inferbook.serving.checks import positive_int
from inferbook.serving.draft import DraftModel, PromptLookup

__all__ = ["probabilities", "accept", "verify", "SpecStats", "speculative_generate"]


def probabilities(logits_xV: jax.Array, sampler: Sampler) -> jax.Array:
    """The distribution the sampler draws from: temperature, then top-k / top-p, softmax.

    Speculative sampling reproduces *this* distribution, so target and draft both use it.
    """
    if sampler.greedy:
        return jax.nn.one_hot(jnp.argmax(logits_xV, -1), logits_xV.shape[-1])
    flat = logits_xV.reshape(-1, logits_xV.shape[-1]).astype(jnp.float32) / sampler.temperature
    flat = filter_logits(flat, sampler.top_k, sampler.top_p)
    return jax.nn.softmax(flat, -1).reshape(logits_xV.shape)


def verify(drafts_G: jax.Array, q_GV: jax.Array, p_G1V: jax.Array, n_draft: jax.Array,
           key: jax.Array, greedy: bool) -> tuple[jax.Array, jax.Array]:
    """The acceptance rule. Returns (accepted drafts n, the target's token y).

    drafts_G: proposed tokens (only the first n_draft are real); q_GV: the draft's
    distributions at those positions (one-hot for a deterministic drafter); p_G1V: the target's
    distributions at the G + 1 positions [after last token, after d_1, ..., after d_G].
    """
    G = drafts_G.shape[0]
    pos = jnp.arange(G)
    if greedy:
        ok_G = (drafts_G == jnp.argmax(p_G1V[:G], -1)) & (pos < n_draft)
        n = jnp.sum(jnp.cumprod(ok_G.astype(jnp.int32)))            # leading accepted run
        return n, jnp.argmax(p_G1V[n]).astype(jnp.int32)
    k_accept, key = jax.random.split(key)
    n, dist = accept(drafts_G, q_GV, p_G1V, n_draft, jax.random.uniform(k_accept, (G,)))
    return n, jax.random.categorical(key, jnp.log(dist)).astype(jnp.int32)


def accept(drafts_G: jax.Array, q_GV: jax.Array, p_G1V: jax.Array, n_draft: jax.Array,
           u_G: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The sampling rule of `verify` with its uniforms given: (accepted n, distribution of y).

    Draft d_i is accepted when u_i · q_i(d_i) < p_i(d_i) — with probability min(1, p/q),
    written without a division. n is the length of the leading run of accepted drafts (at
    most n_draft). The target's own token y is then drawn from the returned distribution: the
    residual max(0, p_n − q_n), renormalised, after a rejection; p_{n} itself when every
    draft was accepted (Leviathan et al. 2023, algorithm 1).
    """
    G = drafts_G.shape[0]
    pos = jnp.arange(G)
    p_x, q_x = p_G1V[pos, drafts_G], q_GV[pos, drafts_G]
    ok_G = (u_G * q_x < p_x) & (pos < n_draft)                      # u < p / q, no division
    n = jnp.sum(jnp.cumprod(ok_G.astype(jnp.int32)))                # leading accepted run
    p_n = p_G1V[n]
    # Rejected at n < n_draft: draw from the residual (p - q)+; all accepted: from p itself.
    q_n = jnp.where(n < n_draft, q_GV[jnp.minimum(n, G - 1)], 0.0)
    residual = jnp.maximum(p_n - q_n, 0.0)
    total = residual.sum()
    return n, jnp.where(total > 0, residual / jnp.where(total > 0, total, 1.0), p_n)


@dataclass
class SpecStats:
    """Acceptance statistics of one speculative generation."""

    gamma: int
    drafted: list[int] = field(default_factory=list)     # drafts proposed per round
    accepted: list[int] = field(default_factory=list)    # drafts kept per round

    @property
    def rounds(self) -> int:
        return len(self.accepted)

    @property
    def tokens_per_round(self) -> float:
        """Mean tokens emitted per target step (accepted drafts + the target's own)."""
        return float(np.mean(self.accepted)) + 1 if self.accepted else float("nan")

    @property
    def acceptance_rate(self) -> float:
        """α estimated as accepted / tested: each round tests drafts until the first rejection.

        Under the i.i.d. model of Leviathan et al. this is the maximum-likelihood α.
        """
        tested = sum(a + (a < d) for a, d in zip(self.accepted, self.drafted))
        return sum(self.accepted) / tested if tested else float("nan")


def speculative_generate(params, cfg: ModelConfig, prompt: Sequence[int], max_new_tokens: int,
                         drafter: DraftModel | PromptLookup, *, gamma: int = 4,
                         sampler: Sampler = GREEDY, key: jax.Array | None = None,
                         eos_id: int | None = None) -> tuple[list[int], SpecStats]:
    """Generate up to max_new_tokens after `prompt` (batch 1) with speculative decoding.

    Returns the tokens and the acceptance statistics. With a greedy sampler the tokens equal
    `decode.generate`'s; when sampling, each token follows the target's distribution.
    """
    positive_int("gamma", gamma)
    check_generate_args(cfg, [prompt], max_new_tokens, sampler, eos_id)
    key = jax.random.key(0) if key is None else key
    n_prompt = len(prompt)
    S = 16                  # room for everything, rounded to a power of two: few compiles
    while S < n_prompt + max_new_tokens + gamma + 2:
        S *= 2
    tokens, lengths = decode.pad_prompts([prompt], 16)
    cache = kvcache.init_cache(cfg, 1, S, params["embed"].dtype)
    logits, cache = decode.prefill(params, cfg, jnp.asarray(tokens), jnp.asarray(lengths), cache)
    k_first, key = jax.random.split(key)
    first = jax.random.categorical(k_first, jnp.log(probabilities(logits[0], sampler)))
    out, stats = [int(first)], SpecStats(gamma)
    if isinstance(drafter, DraftModel):
        dstate = drafter.start(prompt, S)
    r = 0
    while len(out) < max_new_tokens and out[-1] != eos_id:
        k = jax.random.fold_in(key, r)
        if isinstance(drafter, DraftModel):
            n, y, emitted, cache, dstate = drafter.round(params, cfg, cache, dstate, out[-1],
                                                         gamma, sampler, k)
            n_draft = gamma
        else:
            guess = drafter.propose(list(prompt) + out, gamma)
            n_draft = len(guess)
            n, y, emitted, cache = _lookup_round(params, cfg, cache, out[-1], guess, gamma,
                                                 sampler, k)
        stats.drafted.append(n_draft)
        stats.accepted.append(n)
        out += emitted[:n] + [y]
        r += 1
    out = out[:max_new_tokens]
    if eos_id is not None and eos_id in out:
        out = out[:out.index(eos_id) + 1]
    return out, stats


def _lookup_round(params, cfg, cache, last, guess, gamma, sampler, key):
    drafts = np.zeros(gamma, np.int32)
    drafts[:len(guess)] = guess
    n, y, cache = _verify_onehot(params, cfg, cache, jnp.int32(last), jnp.asarray(drafts),
                                 jnp.int32(len(guess)), key, sampler)
    return int(n), int(y), [int(t) for t in drafts], cache


@partial(jax.jit, static_argnames=("cfg", "sampler"))
def _verify_onehot(params, cfg, cache, last, drafts_G, n_draft, key, sampler):
    """Target-only round for a deterministic drafter: q is one-hot on each guess."""
    feed = jnp.concatenate([last[None], drafts_G])[None]
    logits_1TV, (new_k, new_v) = decode.extend(params, cfg, feed, cache)
    p = probabilities(logits_1TV[0], sampler)
    q = jax.nn.one_hot(drafts_G, cfg.V)
    n, y = verify(drafts_G, q, p, n_draft, key, sampler.greedy)
    return n, y, kvcache.append(cache, new_k, new_v, (n + 1)[None])
