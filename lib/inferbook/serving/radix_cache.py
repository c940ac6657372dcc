"""SGLang's prefix cache (RadixAttention): a radix tree over block-sized runs of tokens.

The path from the root spells a cached prefix; each edge is a run of blocks with their
tokens. A lookup walks down the tree as far as the prompt agrees with it, so prompts that share
an opening share the nodes that hold it, and an insertion that diverges inside an edge splits
the edge there. Eviction trims least-recently-used leaves from their ends, one block at a time,
as long as nobody else holds the block (prefix_cache.py has the shared part).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import takewhile
from typing import Sequence

from inferbook.serving.block_manager import BlockManager
from inferbook.serving.prefix_cache import PrefixCache

__all__ = ["RadixCache"]


@dataclass(eq=False)
class _Node:
    chunks: list[tuple[int, ...]]           # the edge into this node: runs of block tokens
    blocks: list[int]
    parent: "_Node | None"
    last_used: int = 0
    children: dict[tuple[int, ...], "_Node"] = field(default_factory=dict)


class RadixCache(PrefixCache):
    """SGLang's design: a radix tree over block-sized token chunks, LRU eviction of leaves."""

    def __init__(self, blocks: BlockManager) -> None:
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
        now = self.tick()
        while node is not None:
            node.last_used, node = now, node.parent

    def _lookup(self, chunks: list[tuple[int, ...]], touch: bool) -> list[int]:
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
        chunks = self.chunks(tokens, None)[:len(blocks)]
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

    def held_blocks(self) -> set[int]:
        return set(self._held)
