"""KV memory accounting: the token slots a scheme reserves against the tokens they hold.

However a server lays out its KV cache, two numbers say how well it uses the memory: the
tokens whose keys and values are stored, and the token slots set aside for them. Their
ratio is what the PagedAttention paper measured (Kwon et al. 2023, Figure 2): a contiguous
reservation per sequence, sized for the longest it may become, holds a small share of
tokens; fixed-size blocks handed out as a sequence grows waste at most the unfilled tail of
each sequence's last block.

Plain arithmetic on the host, no JAX: the serving engine's block manager and the memory
simulation of the KV-cache chapter both count with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = ["blocks_for", "Usage", "paged_usage", "contiguous_usage"]


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks a sequence of `num_tokens` tokens occupies: ceil(num_tokens / block_size)."""
    return -(-num_tokens // block_size)


@dataclass(frozen=True)
class Usage:
    """KV memory reserved for a set of sequences versus what they actually hold."""

    tokens: int           # tokens whose keys and values are stored
    reserved: int         # token slots set aside for them

    @property
    def waste(self) -> float:
        """Fraction of the reservation that holds nothing: 1 - tokens / reserved."""
        return 1 - self.tokens / self.reserved if self.reserved else 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.tokens + other.tokens, self.reserved + other.reserved)


def paged_usage(lengths: Iterable[int], block_size: int) -> Usage:
    """Paged allocation: each sequence reserves only whole blocks, ceil(n / block_size)."""
    lengths = list(lengths)
    return Usage(sum(lengths), sum(blocks_for(n, block_size) * block_size for n in lengths))


def contiguous_usage(lengths: Sequence[int], max_len: int) -> Usage:
    """Contiguous allocation: every sequence reserves the maximum length up front."""
    if any(n > max_len for n in lengths):
        raise ValueError("a sequence is longer than the contiguous reservation")
    return Usage(sum(lengths), len(lengths) * max_len)
