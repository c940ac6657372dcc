"""Drafters for speculative decoding: a smaller model, or lookup in the prompt.

`DraftModel` wraps any model of the library that shares the target's vocabulary. A cheap way
to get one that agrees with the target more often than an unrelated model would is
`truncated_draft`: the target's own first layers, with its embedding and final norm —
early-exit self-speculation (Elhoushi et al. 2024, LayerSkip; Zhang et al. 2023, Draft &
Verify). A trained system would distil a small model, or train extra heads (Medusa, EAGLE).

`PromptLookup` (Saxena 2023) drafts without a model: it finds the most recent earlier
occurrence of the context's last n tokens and proposes the tokens that followed it. It costs
nothing and works whenever the output repeats its input — code edits, extraction, summaries
that quote.

A draft model round is one compiled program: catch the draft up on the tokens it has not seen,
draft γ tokens (a scan of γ − 1 decode steps after the first), run the target over all of them,
apply the acceptance rule, and roll both caches back to what was kept.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model import decode, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.kvcache import KVCache
from inferbook.model.sampling import Sampler
from inferbook.serving.acceptance import probabilities, verify
from inferbook.serving.checks import integer, positive_int

__all__ = ["DraftModel", "DraftState", "PromptLookup", "truncated_draft", "draft_and_verify"]


def truncated_draft(params: Any, cfg: ModelConfig, layers: int) -> "DraftModel":
    """A draft made of the target's first `layers` layers (shared weights, no copies)."""
    if not 1 <= integer("layers", layers) <= cfg.L:
        raise ValueError(f"layers must be in 1..{cfg.L}")
    draft = dict(params, layers=params["layers"][:layers])
    return DraftModel(draft, cfg.replace(L=layers, name=f"{cfg.name}-first{layers}"))


class DraftState(NamedTuple):
    """The draft model's side of a generation: its cache, and what it has yet to see."""

    cache: KVCache
    missing: tuple[int, ...]    # context tokens (before the last one) the cache lacks


class DraftModel:
    """A smaller model that proposes tokens; `round` runs one draft-and-verify step."""

    def __init__(self, params: Any, cfg: ModelConfig) -> None:
        self.params, self.cfg = params, cfg

    def start(self, prompt: Sequence[int], S: int) -> DraftState:
        """Prefill the draft on the prompt, in a cache of S positions."""
        tokens, lengths = decode.pad_prompts([prompt], 16)
        cache = kvcache.init_cache(self.cfg, 1, S, self.params["embed"].dtype)
        _, cache = decode.prefill(self.params, self.cfg, jnp.asarray(tokens),
                                  jnp.asarray(lengths), cache)
        return DraftState(cache, ())

    def round(self, params: Any, cfg: ModelConfig, cache: KVCache, state: DraftState, last: int,
              gamma: int, sampler: Sampler, key: jax.Array
              ) -> tuple[int, int, list[int], KVCache, DraftState]:
        """One draft-and-verify round against the target (`params`, `cfg`, its `cache`).

        Returns (accepted drafts n, the target's token y, the gamma drafts, the target's
        cache, the draft's state): the round emits drafts[:n] and then y.
        """
        feed = list(state.missing) + [last]
        feed2 = np.array((feed + [0])[:2], np.int32)
        n, y, xs, cache, dcache = draft_and_verify(params, cfg, self.params, self.cfg, cache,
                                                   state.cache, jnp.asarray(feed2),
                                                   jnp.int32(len(feed)), key, gamma, sampler)
        n, xs = int(n), [int(t) for t in np.asarray(xs)]
        missing = (xs[-1],) if n == gamma else ()
        return n, int(y), xs, cache, DraftState(dcache, missing)


@partial(jax.jit, static_argnames=("cfg", "dcfg", "gamma", "sampler"))
def draft_and_verify(params: Any, cfg: ModelConfig, dparams: Any, dcfg: ModelConfig,
                     cache: KVCache, dcache: KVCache, feed_2: jax.Array, n_feed: jax.Array,
                     key: jax.Array, gamma: int, sampler: Sampler
                     ) -> tuple[jax.Array, jax.Array, jax.Array, KVCache, KVCache]:
    """One round of speculative decoding with a draft model, as one compiled program.

    feed_2 holds the n_feed (1 or 2) tokens the draft has not seen yet, the last of them the
    newest token of the context. The draft catches up on them and drafts gamma tokens; the
    target scores them in one pass; `verify` decides. Returns (n, y, drafts [gamma], the
    target's cache, the draft's cache), both caches rolled back to what was kept.
    """
    k_draft, k_verify = jax.random.split(key)
    dkeys = jax.random.split(k_draft, gamma)
    def draw(k, q):
        return jax.random.categorical(k, jnp.log(q)).astype(jnp.int32)
    old = dcache.lengths
    # Catch up on the tokens the draft has not seen (one, or two after a full accept).
    logits, (k, v) = decode.extend(dparams, dcfg, feed_2[None], dcache, n_feed[None])
    dcache = kvcache.append(dcache, k, v, n_feed[None])
    q0 = probabilities(logits[0, n_feed - 1], sampler)
    x0 = draw(dkeys[0], q0)

    def step(carry, dk):
        dc, x = carry
        logits, (k, v) = decode.extend(dparams, dcfg, x[None, None], dc)
        q = probabilities(logits[0, 0], sampler)
        x_next = draw(dk, q)
        return (kvcache.append(dc, k, v), x_next), (x_next, q)

    (dcache, _), (xs, qs) = jax.lax.scan(step, (dcache, x0), dkeys[1:])
    xs = jnp.concatenate([x0[None], xs])
    qs = jnp.concatenate([q0[None], qs])
    # The target scores [last, x_0, ..., x_{γ-1}] in one pass.
    last = feed_2[n_feed - 1]
    logits_t, (tk, tv) = decode.extend(params, cfg, jnp.concatenate([last[None], xs])[None],
                                       cache)
    p = probabilities(logits_t[0], sampler)
    n, y = verify(xs, qs, p, jnp.int32(gamma), k_verify, sampler.greedy)
    cache = kvcache.append(cache, tk, tv, (n + 1)[None])
    # The draft saw the fed tokens and x_0 .. x_{γ-2}; keep those that survived.
    dcache = dcache._replace(lengths=old + n_feed + jnp.minimum(n, gamma - 1))
    return n, y, xs, cache, dcache


class PromptLookup:
    """Propose the tokens that followed the latest earlier occurrence of the last n-gram.

    Tries n = max_ngram down to min_ngram; proposes nothing when no n-gram recurs.
    """

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= positive_int("min_ngram", min_ngram) <= positive_int("max_ngram", max_ngram):
            raise ValueError("need 1 <= min_ngram <= max_ngram")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def propose(self, context: Sequence[int], gamma: int) -> list[int]:
        """At most gamma tokens that followed the latest earlier occurrence of the context's end."""
        ctx = list(context)
        for n in range(min(self.max_ngram, len(ctx) - 1), self.min_ngram - 1, -1):
            tail = ctx[-n:]
            for start in range(len(ctx) - n - 1, -1, -1):        # latest occurrence first
                if ctx[start:start + n] == tail:
                    return ctx[start + n:start + n + gamma]
        return []
