"""Prefix caching: keep the KV blocks of past prompts and reuse them for new ones.

The keys and values of a token depend only on the tokens before it, so two requests that start
with the same system prompt have identical KV for it. A prefix cache remembers which KV blocks
hold which token prefix; a new request takes the blocks of the longest cached prefix of its
prompt as the start of its block table, and prefills only the rest. Multi-turn chat is the best
case: each turn's prompt is the previous turn's prompt, its answer and a new message.

Only *full* blocks are cached (a partly written block still changes), and a block's identity
is its whole prefix, not just its own tokens: block i of "A B" and block i of "C B" hold
different KV even when their own tokens agree. Two designs express that:

  * `HashChainCache` (vLLM; hash_chain_cache.py): block i is filed under
    hash(hash of block i-1, tokens of block i), a flat dictionary. Lookup walks the prompt's
    blocks, chaining hashes, until one misses.
  * `RadixCache` (SGLang's RadixAttention; radix_cache.py): a radix tree whose edges are runs
    of blocks; the path from the root spells the prefix. Lookup walks down the tree; shared
    prefixes are shared nodes, and eviction trims leaves.

Both hold one reference on every block they keep (so it outlives its request), hand matched
blocks to the caller with a reference taken, and evict least-recently-used blocks nobody else
holds. Neither returns a block whose prefix differs from the query: the hash chain also checks
each block's tokens and parent block, so a colliding hash costs a miss, never a wrong match.

`PrefixCache`, here, is what both share: the reference counting of matches, the LRU clock and
the hit statistics; a design supplies its index (`_lookup`, `insert`) and its eviction.
"""

from __future__ import annotations

import abc
from typing import Sequence

from inferbook.serving.block_manager import BlockManager

__all__ = ["PrefixCache"]


class PrefixCache(abc.ABC):
    """What both designs share: the block manager, an LRU clock and hit statistics.

    Attaching a cache makes it the block manager's evictor: when the free list runs dry the
    manager asks the cache to give back blocks nobody else holds.
    """

    def __init__(self, blocks: BlockManager) -> None:
        self.bm, self.block_size = blocks, blocks.block_size
        blocks.evictor = self           # the manager evicts through us when it runs short
        self._clock = 0
        self.queries = self.query_tokens = self.hit_tokens = 0

    def tick(self) -> int:
        """The LRU clock: a fresh time stamp for every use."""
        self._clock += 1
        return self._clock

    def chunks(self, tokens: Sequence[int], max_tokens: int | None) -> list[tuple[int, ...]]:
        """The full blocks of tokens[:max_tokens], as tuples: the unit a cache indexes."""
        n = len(tokens) if max_tokens is None else min(len(tokens), max_tokens)
        bs = self.block_size
        return [tuple(tokens[i * bs:(i + 1) * bs]) for i in range(n // bs)]

    # What a design supplies ---------------------------------------------------------------

    @abc.abstractmethod
    def _lookup(self, chunks: list[tuple[int, ...]], touch: bool) -> list[int]:
        """Blocks of the longest cached prefix of `chunks`; `touch` refreshes their LRU time."""

    @abc.abstractmethod
    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Record that blocks[i] holds block i of `tokens` (full blocks only); returns how many
        blocks the cache newly holds."""

    @abc.abstractmethod
    def evict(self, n: int) -> int:
        """Free up to n blocks nobody else holds, least recently used first; returns how many."""

    @abc.abstractmethod
    def evictable(self) -> int:
        """How many blocks `evict` could free right now."""

    @abc.abstractmethod
    def held_blocks(self) -> set[int]:
        """The blocks the cache holds a reference on."""

    # What every design offers -------------------------------------------------------------

    @property
    def cached_blocks(self) -> int:
        """How many blocks the cache holds."""
        return len(self.held_blocks())

    def match(self, tokens: Sequence[int], max_tokens: int | None = None) -> list[int]:
        """Blocks holding the longest cached prefix of `tokens` (at most max_tokens of it).

        The caller owns one reference to each returned block (release with the block manager).
        """
        blocks = self._lookup(self.chunks(tokens, max_tokens), touch=True)
        for b in blocks:
            self.bm.incref(b)
        self.queries += 1
        self.query_tokens += len(tokens)
        self.hit_tokens += len(blocks) * self.block_size
        return blocks

    def peek(self, tokens: Sequence[int], max_tokens: int | None = None) -> int:
        """Tokens `match` would return, without taking references or touching the LRU order."""
        return len(self._lookup(self.chunks(tokens, max_tokens), touch=False)) * self.block_size

    def clear(self) -> None:
        """Evict everything that can be evicted (at the end of a run: everything)."""
        self.evict(self.bm.num_blocks)
