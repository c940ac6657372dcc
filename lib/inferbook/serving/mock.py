"""`MockEngine`: an engine whose every output can be worked out on paper.

Its "model" is one rule: after a context c (the prompt and every token generated so far), the
next token is

    next(c) = (sum(c) + len(c)) mod V

so the prompt [1, 2, 3] with V = 97 continues with (6 + 3) mod 97 = 9, then (15 + 4) mod 97 = 19,
then (34 + 5) mod 97 = 39, and so on. The rule depends on every token of the context and on its
length, so a request served with the wrong cache, in the wrong slot, with a token lost or
repeated, or resumed from the wrong place after preemption, produces a different stream —
which is what the orchestrator's tests rely on.

Its "KV cache" is the context itself: a prefix is the tuple of tokens processed, a slot holds
the tokens fed so far, and the block pool stores tokens per block. A prefix cache that hands
back the wrong blocks therefore hands back the wrong tokens, and the next token shows it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from inferbook.serving.api import Engine
from inferbook.serving.checks import positive_int

# What the mock's values are: a prefix is the tuple of tokens processed; the pool holds the
# tokens of each block (-1 where nothing was saved).
MockPrefix = tuple[int, ...]

__all__ = ["MockEngine", "mock_next", "mock_stream"]


def mock_next(context: Sequence[int], V: int) -> int:
    """The mock model: (sum(context) + len(context)) mod V."""
    return (sum(int(t) for t in context) + len(context)) % V


def mock_stream(prompt: Sequence[int], n: int, V: int, eos_id: int | None = None) -> list[int]:
    """The n tokens the mock generates after `prompt` (fewer if it emits eos_id)."""
    context, out = list(prompt), []
    for _ in range(n):
        out.append(mock_next(context, V))
        context.append(out[-1])
        if out[-1] == eos_id:
            break
    return out


@dataclass
class _Slots:
    kv: list[list[int]]          # tokens "in the cache" of each slot
    next: list[int]              # the token each slot feeds at the next step
    active: list[bool] = field(default_factory=list)


class MockEngine(Engine):
    """The mock model behind the Engine interface, with `slots` slots of `max_len` tokens.

    `bytes_per_token` only sets what a prefix "weighs" when disaggregated serving ships it.
    """

    def __init__(self, slots: int, max_len: int, V: int = 97, bytes_per_token: int = 1024
                 ) -> None:
        self.max_concurrent_decodes = positive_int("slots", slots)
        self.max_len = positive_int("max_len", max_len)
        self.V = self.vocab_size = positive_int("V", V)
        positive_int("bytes_per_token", bytes_per_token)
        self.bytes_per_token = bytes_per_token

    def prefill(self, params: object, tokens: Sequence[int], *,
                existing_prefix: MockPrefix | None = None, keys: np.ndarray | None = None,
                step: int = 0) -> tuple[MockPrefix, int]:
        context = tuple(existing_prefix or ()) + tuple(int(t) for t in tokens)
        if len(context) > self.max_len:
            raise ValueError(f"{len(context)} tokens do not fit in a slot of {self.max_len}")
        return context, mock_next(context, self.V)

    def init_decode_state(self) -> _Slots:
        B = self.max_concurrent_decodes
        return _Slots([[] for _ in range(B)], [0] * B, [False] * B)

    def insert(self, prefix: MockPrefix, decode_state: _Slots, slot: int) -> _Slots:
        if decode_state.active[slot]:
            raise ValueError(f"slot {slot} is in use")
        decode_state.kv[slot] = list(prefix)
        decode_state.next[slot] = mock_next(prefix, self.V)
        decode_state.active[slot] = True
        return decode_state

    def generate(self, params: object, decode_state: _Slots) -> tuple[_Slots, np.ndarray]:
        out = np.zeros(self.max_concurrent_decodes, np.int32)
        for b, on in enumerate(decode_state.active):
            if on:
                kv = decode_state.kv[b]
                if len(kv) >= self.max_len:
                    raise ValueError(f"slot {b} is full")
                kv.append(decode_state.next[b])
                out[b] = decode_state.next[b] = mock_next(kv, self.V)
        return decode_state, out

    def free(self, decode_state: _Slots, slot: int) -> _Slots:
        decode_state.active[slot] = False
        decode_state.kv[slot] = []
        return decode_state

    def prefix_length(self, prefix: MockPrefix) -> int:
        return len(prefix)

    def prefix_bytes(self, prefix: MockPrefix) -> int:
        return len(prefix) * self.bytes_per_token

    def init_pool(self, num_blocks: int, block_size: int) -> np.ndarray:
        return np.full((num_blocks, block_size), -1, np.int64)

    def save_blocks(self, pool: np.ndarray, source: MockPrefix | tuple[_Slots, int],
                    blocks: Sequence[int], first: int) -> np.ndarray:
        from_slot = len(source) == 2 and isinstance(source[0], _Slots)
        tokens = source[0].kv[source[1]] if from_slot else source
        bs = pool.shape[1]
        for i, b in enumerate(blocks):
            chunk = tokens[(first + i) * bs:(first + i + 1) * bs]
            if len(chunk) != bs:
                raise ValueError("only full blocks can be saved")
            pool[b] = chunk
        return pool

    def load_prefix(self, pool: np.ndarray, blocks: Sequence[int], n_tokens: int,
                    capacity: int) -> MockPrefix:
        tokens = [int(t) for b in blocks for t in pool[b]][:n_tokens]
        if len(tokens) != n_tokens or -1 in tokens:
            raise ValueError("the pool does not hold that many tokens in those blocks")
        return tuple(tokens)
