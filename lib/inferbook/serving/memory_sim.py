"""Where KV memory goes: contiguous reservations against paged blocks, simulated.

A server holds a pool of KV memory, measured here in token slots. Before PagedAttention
(Kwon et al. 2023), systems such as Orca gave each request one contiguous region, reserved
when it was admitted, because the attention kernel wanted each sequence's cache in one piece.
Nobody knows how long an answer will be, so the region is sized for the worst case: the
model's maximum length ("max"), the total rounded up to a power of two ("pow2"), or — an
oracle no real system has — the exact final length ("oracle"). Memory is then lost three ways:

* reserved: slots that this request's *future* tokens will fill, idle until then;
* internal fragmentation: slots inside a reservation that no token will ever fill;
* external fragmentation: free slots, in holes too small for the request waiting to get in.

Paging (`serving.block_manager`) hands out blocks of `block_size` tokens as a sequence
grows: no reservation, at most one partly filled block per sequence, and any free block fits
anyone. `simulate` runs one workload through each scheme — requests wait in a first-come
first-served queue and are admitted while their memory can be had; each step every running
request generates one token — and averages the pool's breakdown over the steps in which a
request was waiting (the server is full: every unused slot is a loss).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from inferbook.serving.block_manager import BlockManager
from inferbook.serving.request import Request

__all__ = ["RequestLengths", "synthetic_requests", "FirstFit", "Breakdown", "simulate", "SCHEMES",
           "paged_overhead_bound"]

SCHEMES = ("max", "pow2", "oracle", "paged")


@dataclass(frozen=True)
class RequestLengths:
    """A request as the simulation sees it: only how long it is (no tokens, no arrival).

    The serving engine's `Request` carries the tokens; `of` reduces one to its lengths.
    """

    prompt: int      # tokens in the prompt
    output: int      # tokens the request will generate (unknown to the server, but "oracle")

    @property
    def total(self) -> int:
        return self.prompt + self.output

    @classmethod
    def of(cls, request: Request) -> "RequestLengths":
        """The lengths of a served request, taking it to generate all max_new_tokens."""
        return cls(len(request.prompt), request.max_new_tokens)


def synthetic_requests(n: int, seed: int = 0, mean_prompt: float = 161.0,
                       mean_output: float = 338.0, max_len: int = 2048,
                       sigma: float = 1.0) -> list[RequestLengths]:
    """n requests with log-normal prompt and output lengths of the given means, truncated so
    prompt + output ≤ max_len. The defaults are the ShareGPT means the vLLM paper reports
    (161 input and 338 output tokens)."""
    rng = np.random.default_rng(seed)

    def draw(mean: float) -> np.ndarray:  # a log-normal with this mean: exp(mu + σ²/2) = mean
        return np.maximum(1, rng.lognormal(np.log(mean) - sigma ** 2 / 2, sigma, n)).astype(int)

    prompt = np.minimum(draw(mean_prompt), max_len // 2)
    output = np.minimum(draw(mean_output), max_len - prompt)
    return [RequestLengths(int(p), int(o)) for p, o in zip(prompt, output)]


class FirstFit:
    """A contiguous allocator over slots [0, capacity): the lowest free extent that fits.

    Free extents are kept sorted by offset and merged with their neighbours when freed.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: list[tuple[int, int]] = [(0, capacity)]     # (offset, size), sorted
        self._used: dict[int, int] = {}                          # offset -> size

    def allocate(self, size: int) -> int | None:
        """The offset of a new extent of `size` slots (the lowest that fits), or None."""
        for i, (off, n) in enumerate(self._free):
            if n >= size:
                self._free[i:i + 1] = [(off + size, n - size)] if n > size else []
                self._used[off] = size
                return off
        return None

    def free(self, offset: int) -> None:
        """Give back the extent allocated at `offset`."""
        size = self._used.pop(offset)
        i = bisect.bisect(self._free, (offset, size))
        self._free.insert(i, (offset, size))
        # Merge with the next extent, then with the previous one.
        if i + 1 < len(self._free) and offset + size == self._free[i + 1][0]:
            self._free[i:i + 2] = [(offset, size + self._free[i + 1][1])]
        if i > 0 and self._free[i - 1][0] + self._free[i - 1][1] == offset:
            self._free[i - 1:i + 1] = [(self._free[i - 1][0], self._free[i - 1][1]
                                        + self._free[i][1])]

    @property
    def free_slots(self) -> int:
        return sum(n for _, n in self._free)

    def extents(self) -> list[tuple[int, int]]:
        return list(self._free)


@dataclass(frozen=True)
class Breakdown:
    """Average fractions of the pool while requests wait: they add up to 1."""

    tokens: float         # slots holding a token's keys and values
    reserved: float       # reserved for tokens a running request has yet to generate
    internal: float       # inside reservations or blocks, never to hold a token
    external: float       # free, yet too fragmented (or too few) for the waiting request
    running: float        # requests decoding at once (the batch the pool sustains)
    steps: int            # steps the averages are taken over
    finished: int         # requests completed

    @property
    def waste(self) -> float:
        """Everything but token states: 1 - tokens."""
        return 1.0 - self.tokens


def _reservation(r: RequestLengths, scheme: str, max_len: int) -> int:
    if scheme == "max":
        return max_len
    if scheme == "pow2":
        return min(max_len, 1 << (r.total - 1).bit_length())
    return r.total


def simulate(requests: list[RequestLengths], capacity: int, scheme: str, max_len: int = 2048,
             block_size: int = 16) -> Breakdown:
    """Serve `requests` (all queued at the start) from a pool of `capacity` token slots.

    A request holds its prompt once admitted and gains one token per step until it reaches
    its total, then leaves. Contiguous schemes reserve a region at admission. Paged admits
    when the prompt's blocks are free and grows block by block; when a growing request finds
    no free block, the most recently admitted one is preempted (its blocks freed, its tokens
    recomputed on readmission), as vLLM does.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    paged = scheme == "paged"
    pool = BlockManager(capacity // block_size, block_size) if paged else FirstFit(capacity)
    queue = [(r, r.prompt) for r in requests]            # (request, tokens it will hold)
    running: list[list] = []                             # [request, length, table or offset]
    sums = np.zeros(5)
    steps = finished = 0
    while queue or running:
        while queue:                                     # admit, first come first served
            r, n = queue[0]
            if paged:
                table: list[int] = []
                if not pool.grow(table, n):
                    break
                running.append([r, n, table])
            else:
                off = pool.allocate(_reservation(r, scheme, max_len))
                if off is None:
                    break
                running.append([r, n, off])
            queue.pop(0)
        if not running:
            raise ValueError("a request does not fit in an empty pool")
        if queue:                                        # full: account for every slot
            tokens = sum(n for _, n, _ in running)
            if paged:
                held = pool.num_used * block_size
                parts = (tokens, 0, held - tokens, capacity - held)
            else:
                res = sum(_reservation(r, scheme, max_len) for r, _, _ in running)
                future = sum(r.total - n for r, n, _ in running)
                parts = (tokens, future, res - tokens - future, capacity - res)
            sums += np.array(parts + (len(running) * capacity,)) / capacity
            steps += 1
        gone: set[int] = set()                           # finished or preempted this step
        for entry in list(running):                      # one decode step
            if id(entry) in gone:
                continue
            r, n, handle = entry
            entry[1] = n + 1
            if paged:
                while id(entry) not in gone and not pool.grow(handle, n + 1):
                    victim = next(e for e in reversed(running) if id(e) not in gone)
                    gone.add(id(victim))                 # the latest admitted goes back
                    pool.release(victim[2])
                    queue.insert(0, (victim[0], victim[1]))
            if id(entry) not in gone and entry[1] >= r.total:
                gone.add(id(entry))
                pool.release(handle) if paged else pool.free(handle)
                finished += 1
        running = [e for e in running if id(e) not in gone]
    if paged:
        assert pool.all_free()
    avg = sums / max(steps, 1)
    return Breakdown(*map(float, avg), steps=steps, finished=finished)


def paged_overhead_bound(mean_tokens: float, block_size: int) -> float:
    """At most one partly filled block per sequence: waste < block_size / mean length."""
    return block_size / mean_tokens

