"""Prefix caching: keep the KV blocks of past prompts and reuse them for new ones.

The keys and values of a token depend only on the tokens before it, so two requests that start
with the same system prompt have identical KV for it. A prefix cache remembers which KV blocks
hold which token prefix; a new request takes the blocks of the longest cached prefix of its
prompt as the start of its block table, and prefills only the rest. Multi-turn chat is the best
case: each turn's prompt is the previous turn's prompt, its answer and a new message.

Only *full* blocks are cached (a partly written block still changes), and a block's identity
is its whole prefix, not just its own tokens: block i of "A B" and block i of "C B" hold
different KV even when their own tokens agree. Two designs express that:

  * `HashChainCache` (vLLM): block i is filed under hash(hash of block i-1, tokens of block i),
    a flat dictionary. Lookup walks the prompt's blocks, chaining hashes, until one misses.
  * `RadixCache` (SGLang's RadixAttention): a radix tree whose edges are runs of blocks; the
    path from the root spells the prefix. Lookup walks down the tree; shared prefixes are
    shared nodes, and eviction trims leaves.

Both hold one reference on every block they keep (so it outlives its request), hand matched
blocks to the caller with a reference taken, and evict least-recently-used blocks nobody else
holds. Neither returns a block whose prefix differs from the query: the hash chain also checks
each block's tokens and parent block, so a colliding hash costs a miss, never a wrong match.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Callable, Hashable, Sequence

from inferbook.serving.block_manager import BlockManager

__all__ = ["HashChainCache", "RadixCache", "sha256_chain"]


def sha256_chain(parent: Hashable, tokens: tuple[int, ...]) -> str:
    """The default block hash: SHA-256 of the parent's hash and this block's tokens."""
    return hashlib.sha256(repr((parent, tokens)).encode()).hexdigest()


class _Base:
    """What both designs share: the block manager, an LRU clock and hit statistics."""

    def __init__(self, blocks: BlockManager) -> None:
        self.bm, self.block_size = blocks, blocks.block_size
        blocks.evictor = self           # the manager evicts through us when it runs short
        self._clock = 0
        self.queries = self.query_tokens = self.hit_tokens = 0

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _chunks(self, tokens: Sequence[int], max_tokens: int | None) -> list[tuple[int, ...]]:
        n = len(tokens) if max_tokens is None else min(len(tokens), max_tokens)
        bs = self.block_size
        return [tuple(tokens[i * bs:(i + 1) * bs]) for i in range(n // bs)]

    def match(self, tokens: Sequence[int], max_tokens: int | None = None) -> list[int]:
        """Blocks holding the longest cached prefix of `tokens` (at most max_tokens of it).

        The caller owns one reference to each returned block (release with the block manager).
        """
        blocks = self._lookup(self._chunks(tokens, max_tokens), touch=True)
        for b in blocks:
            self.bm.incref(b)
        self.queries += 1
        self.query_tokens += len(tokens)
        self.hit_tokens += len(blocks) * self.block_size
        return blocks

    def peek(self, tokens: Sequence[int], max_tokens: int | None = None) -> int:
        """Tokens `match` would return, without taking references or touching the LRU order."""
        return len(self._lookup(self._chunks(tokens, max_tokens), touch=False)) * self.block_size

    def clear(self) -> None:
        """Evict everything that can be evicted (at the end of a run: everything)."""
        self.evict(self.bm.num_blocks)


# The hash chain ---------------------------------------------------------------------------

@dataclass
class _Entry:
    key: Hashable
    parent: int | None          # block id of the previous block in the chain (None: first)
    tokens: tuple[int, ...]
    depth: int
    last_used: int
    children: set[int] = field(default_factory=set)


class HashChainCache(_Base):
    """vLLM's design: a dictionary from chained block hashes to blocks.

    `hash_fn(parent_key, tokens)` makes the key; the default is SHA-256. Tests pass a weak one
    to show that collisions cost hits, never correctness.
    """

    def __init__(self, blocks: BlockManager,
                 hash_fn: Callable[[Hashable, tuple[int, ...]], Hashable] = sha256_chain):
        super().__init__(blocks)
        self.hash_fn = hash_fn
        self._by_key: dict[Hashable, int] = {}
        self._entries: dict[int, _Entry] = {}

    def _lookup(self, chunks, touch):
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
            now = self._tick()
            for b in out:
                self._entries[b].last_used = now
        return out

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Record that blocks[i] holds block i of `tokens` (full blocks only); returns how many
        blocks the cache newly holds. Positions already cached keep their existing block."""
        now, key, parent, added = self._tick(), None, None, 0
        for depth, (toks, b) in enumerate(zip(self._chunks(tokens, None), blocks)):
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

    @property
    def cached_blocks(self) -> int:
        return len(self._entries)


# The radix tree ---------------------------------------------------------------------------

@dataclass(eq=False)
class _Node:
    chunks: list[tuple[int, ...]]           # the edge into this node: runs of block tokens
    blocks: list[int]
    parent: "_Node | None"
    last_used: int = 0
    children: dict[tuple[int, ...], "_Node"] = field(default_factory=dict)


class RadixCache(_Base):
    """SGLang's design: a radix tree over block-sized token chunks, LRU eviction of leaves."""

    def __init__(self, blocks: BlockManager):
        super().__init__(blocks)
        self.root = _Node([], [], None)
        self._held: set[int] = set()

    def _walk(self, chunks):
        """(node, matched blocks, node's edge length matched) for the longest prefix."""
        node, out, i = self.root, [], 0
        while i < len(chunks) and chunks[i] in node.children:
            child = node.children[chunks[i]]
            k = 0
            while (k < len(child.chunks) and i + k < len(chunks)
                   and child.chunks[k] == chunks[i + k]):
                k += 1
            out += child.blocks[:k]
            i += k
            if k < len(child.chunks):
                return child, out, k
            node = child
        return node, out, len(node.chunks)

    def _touch(self, node: _Node | None) -> None:
        now = self._tick()
        while node is not None:
            node.last_used, node = now, node.parent

    def _lookup(self, chunks, touch):
        node, out, _ = self._walk(chunks)
        if touch:
            self._touch(node)
        return out

    def _split(self, node: _Node, k: int) -> _Node:
        """Cut node's edge after k chunks; returns the new upper node."""
        upper = _Node(node.chunks[:k], node.blocks[:k], node.parent, node.last_used)
        node.parent.children[upper.chunks[0]] = upper
        node.chunks, node.blocks, node.parent = node.chunks[k:], node.blocks[k:], upper
        upper.children[node.chunks[0]] = node
        return upper

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Like HashChainCache.insert: cache the full blocks of `tokens` held in `blocks`."""
        chunks = self._chunks(tokens, None)[:len(blocks)]
        node, matched, k = self._walk(chunks)
        if k < len(node.chunks):
            node = self._split(node, k)
        new = list(blocks[len(matched):len(chunks)])
        added = 0
        if new and not self._held.intersection(new):
            for b in new:
                self.bm.incref(b)
            self._held.update(new)
            leaf = _Node(chunks[len(matched):], new, node)
            node.children[leaf.chunks[0]] = leaf
            node, added = leaf, len(new)
        self._touch(node)
        return added

    def _nodes(self):
        stack = list(self.root.children.values())
        while stack:
            n = stack.pop()
            yield n
            stack.extend(n.children.values())

    def _tail(self, node: _Node) -> int:
        """Evictable blocks at the end of a leaf: the run of count-1 blocks ending it."""
        return len(list(takewhile(lambda b: self.bm.refcount(b) == 1, reversed(node.blocks))))

    def evictable(self) -> int:
        def count(node):        # (evictable blocks below and in node, node fully evictable)
            total, all_free = 0, True
            for c in node.children.values():
                n, free = count(c)
                total, all_free = total + n, all_free and free
            if not all_free:
                return total, False
            t = self._tail(node)
            return total + t, t == len(node.blocks)
        return count(self.root)[0]

    def evict(self, n: int) -> int:
        """Free up to n blocks, trimming the least recently used leaves from their ends."""
        freed = 0
        while freed < n:
            leaves = [x for x in self._nodes() if not x.children and self._tail(x)]
            if not leaves:
                break
            leaf = min(leaves, key=lambda x: x.last_used)
            key = leaf.chunks[0]
            while freed < n and leaf.blocks and self.bm.refcount(leaf.blocks[-1]) == 1:
                b = leaf.blocks.pop()
                leaf.chunks.pop()
                self._held.discard(b)
                self.bm.decref(b)
                freed += 1
            if not leaf.blocks:
                del leaf.parent.children[key]
        return freed

    @property
    def cached_blocks(self) -> int:
        return len(self._held)

