"""The generation loop, written once for every way of running the model.

Whatever runs the programs — one device (`decode.generate`) or a mesh of them, in one process
or several (`parallel.sharded_decode.generate`) — generating text is the same loop:

  1. prefill the prompts and sample each sequence's first new token;
  2. then, step after step, feed each sequence its last token and sample the next, until every
     sequence has produced an end-of-sequence id or `max_new_tokens` tokens are out.

The loop owns what the two must agree on for their tokens to be equal: the random keys (token
i is drawn with the i-th of `jax.random.split(key, max_new_tokens)`), what a finished sequence
emits (its first EOS id, as padding), when the loop stops, and how the rows are trimmed. The
caller supplies the two functions that run the model, and whatever state they carry between
steps (the KV cache, on one device or split over a mesh) stays opaque to the loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.model.generate_args import eos_tuple

__all__ = ["GenerateResult", "FirstToken", "NextToken", "OnStep", "is_eos", "emitted_tokens",
           "trim_at_eos", "decode_loop"]

# on_step(step, tokens_B) -> True to stop: the loop's view of each step as it is produced.
OnStep = Callable[[int, np.ndarray], "bool | None"]
# first(key) -> (state, tok_B, done_B): prefill, sample the first token, which rows are done.
FirstToken = Callable[[jax.Array], tuple[Any, jax.Array, jax.Array]]
# step(state, tok_B, done_B, key) -> (state, tok_B, done_B, emitted_B): one decode step.
NextToken = Callable[[Any, jax.Array, jax.Array, jax.Array],
                     tuple[Any, jax.Array, jax.Array, jax.Array]]


@dataclass(frozen=True)
class GenerateResult:
    """New tokens per sequence, each ending at (and including) EOS if one was produced."""

    tokens: list[list[int]]

    def padded(self, pad: int = -1) -> np.ndarray:
        width = max((len(t) for t in self.tokens), default=0)
        out = np.full((len(self.tokens), width), pad, np.int32)
        for b, t in enumerate(self.tokens):
            out[b, :len(t)] = t
        return out


def is_eos(tok_B: jax.Array, eos: int | tuple[int, ...]) -> jax.Array:
    """Which tokens are one of the `eos` ids (an int, or a tuple of them; -1 matches none)."""
    return jnp.isin(tok_B, jnp.asarray(eos_tuple(eos) or (-1,), tok_B.dtype))


def emitted_tokens(tok_B: jax.Array, done_B: jax.Array, eos: int | tuple[int, ...]
                   ) -> tuple[jax.Array, jax.Array]:
    """After sampling `tok_B`: which rows are done now (`done_B` were done before) [B], and
    the tokens to emit [B] — the first `eos` id as padding in rows that were already done."""
    pad = (eos_tuple(eos) or (-1,))[0]
    return done_B | is_eos(tok_B, eos), jnp.where(done_B, pad, tok_B)


def trim_at_eos(tokens_BN: np.ndarray, eos: tuple[int, ...]) -> GenerateResult:
    """Each row cut after its first `eos` id (kept); rows without one are kept whole."""
    rows = tokens_BN.tolist()
    return GenerateResult([r[:next((i + 1 for i, t in enumerate(r) if t in eos), len(r))]
                           for r in rows])


def decode_loop(first: FirstToken, step: NextToken, max_new_tokens: int,
                key: jax.Array | None, eos: tuple[int, ...],
                on_step: OnStep | None = None) -> GenerateResult:
    """Run `first` once and `step` up to `max_new_tokens - 1` times; the trimmed tokens.

    `key` (default `jax.random.key(0)`) is split once into one key per token. With `eos`
    ids, the loop stops once every row is done; checking waits for the device, so it looks
    every 8 steps — every step when `on_step` is given. `on_step(i, tokens_B)` sees step i's
    emitted tokens (numpy [B]) as they come; returning True stops the loop there.
    """
    # A list, split once: indexing a key array token by token cost ~2 ms a token on 2 cores.
    keys = list(jax.random.split(jax.random.key(0) if key is None else key, max_new_tokens))
    state, tok_B, done_B = first(keys[0])
    emitted = [tok_B]
    stop = on_step is not None and bool(on_step(0, np.asarray(tok_B)))
    for i in range(1, max_new_tokens):
        if stop or (eos and (on_step is not None or i % 8 == 0) and bool(jnp.all(done_B))):
            break
        state, tok_B, done_B, out_B = step(state, tok_B, done_B, keys[i])
        emitted.append(out_B)
        stop = on_step is not None and bool(on_step(i, np.asarray(out_B)))
    return trim_at_eos(np.asarray(jnp.stack(emitted, axis=1)), eos)
