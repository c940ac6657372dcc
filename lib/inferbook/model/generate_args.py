"""What a generation loop must refuse before it starts, and the prompts it pads.

A decode loop given a bad argument rarely fails by itself, it answers wrongly:

  * an embedding lookup clamps a token id outside the vocabulary to the last row, so
    token 999 of a 256-token vocabulary quietly becomes token 255;
  * positions past the model's `max_seq_len` were never trained (or, for learned position
    embeddings, do not exist and are clamped), yet RoPE computes them without complaint;
  * an EOS id outside the vocabulary can never be sampled, so the loop never stops early;
  * a NaN temperature turns every logit into NaN, and argmax of NaNs is token 0 at every
    step (`Sampler` refuses it when it is built).

`check_generate_args` is the public boundary every loop calls first — `decode.generate`,
`decode.naive_generate`, and any other loop over the same arguments — so that a Python caller
gets the same one-line `ValueError` the command line turns into exit code 2. The checks run on
the host, once per call, never inside a compiled step. `pad_prompts` then turns the prompts
into the arrays a compiled step takes; `random_prompts` makes a ragged batch to try it on.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Sequence

import jax
import numpy as np

from inferbook.model.config import ModelConfig
from inferbook.model.sampling import GREEDY, Sampler

__all__ = ["check_generate_args", "pad_prompts", "random_prompts", "eos_tuple"]


def check_generate_args(cfg: ModelConfig, prompts: Sequence[Sequence[int]],
                        max_new_tokens: int, sampler: Sampler = GREEDY,
                        eos_id: int | Sequence[int] | None = None) -> None:
    """Refuse, with a ValueError saying why, what a generation loop would get silently wrong.

    Token ids outside the vocabulary (an embedding lookup clamps them), a prompt plus its new
    tokens past the model's `position_limit` (positions never trained), an EOS id (or any of
    a list of them) that no step can produce, a sampler that is not a `Sampler`.
    """
    if not isinstance(max_new_tokens, numbers.Integral) or isinstance(max_new_tokens, bool) \
            or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not isinstance(sampler, Sampler):
        raise ValueError(f"sampler must be a Sampler, got {sampler!r}")
    for e in _eos_items(eos_id):
        if not isinstance(e, numbers.Integral) or isinstance(e, bool) or not 0 <= e < cfg.V:
            raise ValueError(f"eos_id must be a token id in [0, {cfg.V}) or a list of them, "
                             f"got {eos_id!r}")
    if len(prompts) == 0 or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    for b, p in enumerate(prompts):
        try:
            p = [operator.index(t) for t in p]      # ints, numpy or JAX integer scalars
        except TypeError:
            raise ValueError(f"prompt {b} holds something other than integer token ids") from None
        bad = [t for t in p if not 0 <= t < cfg.V]
        if bad:
            raise ValueError(f"prompt {b} has token ids outside the vocabulary [0, {cfg.V}): "
                             f"{bad[:5]}")
    longest = max((len(p) for p in prompts), default=0)
    limit = cfg.position_limit
    if limit is not None and longest + max_new_tokens > limit:
        raise ValueError(f"a prompt of {longest} tokens plus {max_new_tokens} new tokens "
                         f"exceeds the model's {cfg.max_seq_len} positions")


def _eos_items(eos_id: Any) -> list[Any]:
    if eos_id is None:
        return []
    return list(eos_id) if isinstance(eos_id, (list, tuple)) else [eos_id]


def eos_tuple(eos_id: int | Sequence[int] | None) -> tuple[int, ...]:
    """The end-of-sequence ids as a tuple: one id, several (a checkpoint may declare a list,
    e.g. end-of-text and end-of-turn), or none (None or an empty list)."""
    return tuple(int(e) for e in _eos_items(eos_id))


def pad_prompts(prompts: Sequence[Sequence[int]],
                multiple: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad prompts (with 0) to a common length, rounded up to `multiple`.

    Rounding the padded length to a few sizes means a new prompt length rarely recompiles.
    Returns tokens [B, T] and lengths [B].
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token")
    if not isinstance(multiple, int) or multiple < 1:
        raise ValueError(f"the padding multiple must be a positive integer, got {multiple!r}")
    lengths = np.array([len(p) for p in prompts], np.int32)
    T = -(-int(lengths.max()) // multiple) * multiple
    tokens = np.zeros((len(prompts), T), np.int32)
    for b, p in enumerate(prompts):
        tokens[b, :len(p)] = p
    return tokens, lengths


def random_prompts(lengths: Sequence[int], V: int) -> list[list[int]]:
    """A ragged batch of random prompts: prompt b holds lengths[b] token ids drawn uniformly
    from [0, V) with `jax.random.key(b)` (the same prompts on every run and device, and
    prompt b the same whatever the batch around it)."""
    if any(n < 1 for n in lengths):
        raise ValueError("every prompt needs at least one token")
    return [[int(t) for t in jax.random.randint(jax.random.key(b), (n,), 0, V)]
            for b, n in enumerate(lengths)]
