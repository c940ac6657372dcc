"""Speculative decoding: a cheap drafter guesses, the target model checks many tokens at once.

A decode step of a large model is bound by memory bandwidth: it reads every weight to produce
one token per sequence. Scoring γ + 1 tokens in one forward pass reads the same weights, so on
an accelerator it costs about as much as scoring one. Speculative decoding (Leviathan et al.
2023; Chen et al. 2023) exploits that: a drafter proposes γ tokens, the target runs once over
[last token, d_1, ..., d_γ], which yields its distribution p_i at every proposed position, and
the longest acceptable run of drafts is kept, plus one token from the target itself. Every
round therefore produces between 1 and γ + 1 tokens for one target step.

The acceptance rule (`verify`, in acceptance.py) keeps a leading run of drafts: greedily, those
that equal the target's argmax; when sampling, by rejection sampling, so that every emitted
token follows the target's distribution exactly whatever the drafter proposes. It is
re-exported here, with `probabilities` and `accept`, as the heart of the method.

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
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.generate_args import check_generate_args
from inferbook.model.kvcache import KVCache
from inferbook.model.sampling import GREEDY, Sampler
from inferbook.serving.acceptance import accept, probabilities, verify
from inferbook.serving.checks import positive_int
from inferbook.serving.draft import DraftModel, PromptLookup

# The rule is re-exported: `speculative.verify` is where a reader of the method looks for it.
__all__ = ["probabilities", "accept", "verify", "SpecStats", "speculative_generate"]


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


def speculative_generate(params: Any, cfg: ModelConfig, prompt: Sequence[int], max_new_tokens: int,
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


def _lookup_round(params: Any, cfg: ModelConfig, cache: KVCache, last: int, guess: list[int],
                  gamma: int, sampler: Sampler, key: jax.Array
                  ) -> tuple[int, int, list[int], KVCache]:
    """One round with a deterministic drafter's guess (padded to gamma; n_draft masks the rest)."""
    drafts = np.zeros(gamma, np.int32)
    drafts[:len(guess)] = guess
    n, y, cache = _verify_onehot(params, cfg, cache, jnp.int32(last), jnp.asarray(drafts),
                                 jnp.int32(len(guess)), key, sampler)
    return int(n), int(y), [int(t) for t in drafts], cache


@partial(jax.jit, static_argnames=("cfg", "sampler"))
def _verify_onehot(params, cfg, cache, last, drafts, n_draft, key, sampler):
    """Target-only round for a deterministic drafter: q is one-hot on each guess."""
    feed = jnp.concatenate([last[None], drafts])[None]
    logits_1TV, (new_k, new_v) = decode.extend(params, cfg, feed, cache)
    p = probabilities(logits_1TV[0], sampler)
    q = jax.nn.one_hot(drafts, cfg.V)
    n, y = verify(drafts, q, p, n_draft, key, sampler.greedy)
    return n, y, kvcache.append(cache, new_k, new_v, (n + 1)[None])
