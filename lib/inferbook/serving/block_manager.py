"""Paged KV memory: a pool of fixed-size blocks, reference counts and a free list.

A contiguous KV cache reserves, for every sequence, room for the longest sequence it might
become (kvcache.py allocates [B, K, S_max, H]). Nobody knows in advance how long an answer will
be, so most of that reservation is never written, yet no other request can use it: the
PagedAttention paper measured 60–80% of KV memory wasted this way in earlier systems
(Kwon et al. 2023).

Paging fixes it the way an operating system does for RAM. KV memory is cut into blocks of
`block_size` tokens. A sequence owns a *block table*, the list of its blocks in order; token t
lives in block table[t // block_size] at offset t % block_size. Blocks are taken from a free
list only when a sequence crosses into a new one, so a sequence wastes at most the unfilled
tail of its last block (internal fragmentation below one block) and, since all blocks are the
same size, any free block serves anyone (no external fragmentation).

Blocks carry reference counts because they can be shared: two requests with the same system
prompt can point at the same blocks, and a prefix cache keeps blocks of finished requests
alive for later ones. A block returns to the free list when its count drops to zero. When the
free list runs dry, the manager first asks its `evictor` (a prefix cache, which attaches itself)
to evict cached blocks; if that is not enough, allocation fails and the scheduler must preempt
a running sequence: give back its blocks and recompute them when it is readmitted.

This class does bookkeeping only — integers on the host. Where the keys and values physically
live is the engine's business (a [num_blocks, K, block_size, H] pool per layer, addressed
through the block table by a paged attention kernel, or a contiguous slot as in this library's
decode path). What a layout reserves against what it holds is counted by
`inferbook.memory.kv_usage`.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from inferbook.memory.kv_usage import blocks_for
from inferbook.serving.checks import positive_int

__all__ = ["BlockManager", "OutOfBlocks", "Evictor"]


class OutOfBlocks(RuntimeError):
    """No free block, even after asking the evictor."""


class Evictor(Protocol):
    """What the manager asks for blocks when its free list runs dry (a prefix cache)."""

    def evict(self, n: int) -> int:
        """Free up to n blocks; return how many were freed."""

    def evictable(self) -> int:
        """How many blocks `evict` could free right now."""


class BlockManager:
    """Reference-counted blocks of `block_size` tokens, `num_blocks` of them.

    Invariants (checked by `check`): every block is either on the free list with count 0, or
    off it with count > 0; nothing is on the free list twice.
    """

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = positive_int("num_blocks", num_blocks)
        self.block_size = positive_int("block_size", block_size)
        self._refs = [0] * num_blocks
        self._free: deque[int] = deque(range(num_blocks))
        self.evictor: Evictor | None = None
        self.peak_used = 0

    # Single blocks ----------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return self.num_blocks - len(self._free)

    def refcount(self, block: int) -> int:
        return self._refs[block]

    def available(self) -> int:
        """Free blocks plus those the evictor could free (without freeing them)."""
        return self.num_free + (self.evictor.evictable() if self.evictor else 0)

    def _ensure_free(self, n: int) -> bool:
        if self.num_free < n and self.evictor is not None:
            self.evictor.evict(n - self.num_free)
        return self.num_free >= n

    def allocate(self) -> int:
        """A block with reference count 1, taken from the front of the free list."""
        if not self._ensure_free(1):
            raise OutOfBlocks(f"all {self.num_blocks} blocks are in use")
        block = self._free.popleft()
        self._refs[block] = 1
        self.peak_used = max(self.peak_used, self.num_used)
        return block

    def incref(self, block: int) -> None:
        if self._refs[block] <= 0:
            raise ValueError(f"block {block} is free; allocate it instead of sharing it")
        self._refs[block] += 1

    def decref(self, block: int) -> None:
        """Drop one reference; at zero the block goes back to the free list."""
        if self._refs[block] <= 0:
            raise ValueError(f"block {block} is already free (double free)")
        self._refs[block] -= 1
        if self._refs[block] == 0:
            self._free.append(block)

    # Block tables -----------------------------------------------------------------------

    def grow(self, table: list[int], n_tokens: int) -> bool:
        """Extend `table` (in place) until it holds n_tokens; all or nothing.

        Returns False, leaving the table unchanged, when the blocks cannot be had.
        """
        need = blocks_for(n_tokens, self.block_size) - len(table)
        if need <= 0:
            return True
        if not self._ensure_free(need):
            return False
        table.extend(self.allocate() for _ in range(need))
        return True

    def release(self, table: list[int]) -> None:
        """Drop the table's reference to each of its blocks and empty it."""
        for block in table:
            self.decref(block)
        table.clear()

    # Checks -----------------------------------------------------------------------------

    def all_free(self) -> bool:
        """True when no block is referenced (nothing leaked at the end of a run)."""
        return self.num_free == self.num_blocks and not any(self._refs)

    def check(self) -> None:
        """Raise AssertionError if the free list and the counts disagree."""
        free = set(self._free)
        assert len(free) == len(self._free), "a block is on the free list twice"
        for b, r in enumerate(self._refs):
            assert r >= 0, f"block {b} has a negative count"
            assert (r == 0) == (b in free), f"block {b}: count {r} but free={b in free}"
