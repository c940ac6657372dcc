"""vLLM's prefix cache: a dictionary from chained block hashes to KV blocks.

Block i of a prompt is filed under hash(key of block i-1, tokens of block i), so its key names
the whole prefix up to and including it, in a flat dictionary. A lookup walks the prompt's
blocks, chaining the hashes, until one misses. Each entry also records its tokens and its
parent block, and a lookup checks both: a colliding hash then costs a miss, never KV that
belongs to another prefix. Eviction drops least-recently-used entries nobody else holds, and
with them their descendants, whose chain is broken (prefix_cache.py has the shared part).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

from inferbook.serving.block_manager import BlockManager
from inferbook.serving.prefix_cache import PrefixCache

__all__ = ["HashChainCache", "sha256_chain"]


def sha256_chain(parent: Hashable, tokens: tuple[int, ...]) -> str:
    """The default block hash: SHA-256 of the parent's hash and this block's tokens."""
    return hashlib.sha256(repr((parent, tokens)).encode()).hexdigest()


@dataclass
class _Entry:
    key: Hashable
    parent: int | None          # block id of the previous block in the chain (None: first)
    tokens: tuple[int, ...]
    depth: int
    last_used: int
    children: set[int] = field(default_factory=set)


class HashChainCache(PrefixCache):
    """vLLM's design: a dictionary from chained block hashes to blocks.

    `hash_fn(parent_key, tokens)` makes the key; the default is SHA-256. Tests pass a weak one
    to show that collisions cost hits, never correctness.
    """

    def __init__(self, blocks: BlockManager,
                 hash_fn: Callable[[Hashable, tuple[int, ...]], Hashable] = sha256_chain
                 ) -> None:
        super().__init__(blocks)
        self.hash_fn = hash_fn
        self._by_key: dict[Hashable, int] = {}
        self._entries: dict[int, _Entry] = {}

    def _lookup(self, chunks: list[tuple[int, ...]], touch: bool) -> list[int]:
        out, key, parent = [], None, None
        for toks in chunks:
            key = self.hash_fn(key, toks)
            b = self._by_key.get(key)
            e = self._entries.get(b) if b is not None else None
            if e is None or e.tokens != toks or e.parent != parent:   # miss, or a collision
                break
            out.append(b)
            parent = b
        if touch:
            now = self.tick()
            for b in out:
                self._entries[b].last_used = now
        return out

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Record that blocks[i] holds block i of `tokens` (full blocks only); returns how many
        blocks the cache newly holds. Positions already cached keep their existing block."""
        now, key, parent, added = self.tick(), None, None, 0
        for depth, (toks, b) in enumerate(zip(self.chunks(tokens, None), blocks)):
            key = self.hash_fn(key, toks)
            have = self._by_key.get(key)
            if have is not None:
                e = self._entries[have]
                if e.tokens != toks or e.parent != parent:
                    break                   # the key is taken by another prefix: stop caching
                e.last_used, parent = now, have
                continue
            if b in self._entries:          # this block already caches another position
                break
            self.bm.incref(b)
            self._by_key[key] = b
            self._entries[b] = _Entry(key, parent, toks, depth, now)
            if parent is not None:
                self._entries[parent].children.add(b)
            parent, added = b, added + 1
        return added

    def evictable(self) -> int:
        return sum(self.bm.refcount(b) == 1 for b in self._entries)

    def evict(self, n: int) -> int:
        """Free up to n blocks, least recently used first (deepest first among equals).

        A block leaving the index takes its descendants with it: their chain is broken, and its
        block id may be reused for other tokens.
        """
        freed = 0
        victims = sorted((e.last_used, -e.depth, b) for b, e in self._entries.items()
                         if self.bm.refcount(b) == 1)
        for _, _, b in victims:
            if freed >= n:
                break
            if b in self._entries:
                freed += self._drop(b)
        return freed

    def _drop(self, b: int) -> int:
        e = self._entries.pop(b)
        del self._by_key[e.key]
        if e.parent in self._entries:
            self._entries[e.parent].children.discard(b)
        freed = sum(self._drop(c) for c in list(e.children))
        freed += self.bm.refcount(b) == 1
        self.bm.decref(b)
        return freed

    def held_blocks(self) -> set[int]:
        return set(self._entries)
