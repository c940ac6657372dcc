"""Continuous batching with paged KV memory, preemption, a prefix cache and chunked prefill.

The loop, once per iteration (the shape of vLLM's scheduler, and of nano-vllm's):

  1. Admit. While a slot is free, take a waiting request — the oldest (`admission="fcfs"`) or
     the one with the longest cached prefix (`"lpm"`, SGLang's cache-aware order) — match its
     prompt against the prefix cache, and reserve KV blocks for the rest of it plus one decode
     step. If the blocks cannot be had, it waits: admission never promises memory it lacks.
  2. Prefill. Run the admitted prompts, at batch 1, continuing from the cached prefix. With
     `chunk=C`, at most C prompt tokens are processed per iteration, so a long prompt is fed in
     pieces across several iterations and the generate loop never stalls for long (chunked
     prefill, Agrawal et al. 2023). A finished prefill streams its first token, saves its full
     blocks to the prefix cache, and is inserted into its slot.
  3. Grow. Every running sequence needs room for the KV of the token it feeds next; crossing
     into a new block takes one from the free list (evicting cached blocks if needed). When
     none can be had, the most recently admitted sequence is *preempted*: its blocks are
     released, it leaves its slot and goes back to the front of the queue with the tokens it
     has produced. When readmitted it recomputes its KV with one prefill over prompt + output
     (vLLM's "recompute" preemption) and continues where it stopped.
  4. Generate one token for every slot; stream the tokens; finished requests give their full
     blocks to the prefix cache and release the rest.

Blocks here are accounted on the host (block_manager.py); running sequences keep their KV in
their slot of the engine's contiguous batch, and only cached blocks are copied into the
engine's block pool (see model_engine.py for why).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

from inferbook.memory.kv_usage import Usage, blocks_for
from inferbook.serving.api import DecodeState, Engine, Params
from inferbook.serving.block_manager import BlockManager
from inferbook.serving.checks import optional_positive_int, positive_int
from inferbook.serving.clocks import Op
from inferbook.serving.hash_chain_cache import HashChainCache
from inferbook.serving.radix_cache import RadixCache
from inferbook.serving.request import Request, SequenceState, Status
from inferbook.serving.scheduler import Event, Orchestrator, RunResult

__all__ = ["ContinuousBatching", "MemorySample"]

_CACHES = {"hash": HashChainCache, "radix": RadixCache}


@dataclass(frozen=True)
class MemorySample:
    """KV memory after a generate step.

    paged: tokens held by live sequences vs the token slots of their blocks (a block shared
      by two sequences counts for both). contiguous: the same tokens vs a max_len reservation
      per sequence. blocks_used: blocks taken from the pool, cached ones included.
    """

    t: float
    paged: Usage
    contiguous: Usage
    blocks_used: int


class ContinuousBatching(Orchestrator):
    """Slots refilled as they free up, paged KV accounting, optional prefix cache.

    num_blocks: KV blocks in the pool (None: enough for every slot at full length, so
      nothing is ever preempted). block_size: tokens per block.
    prefix_cache: None, "hash" (vLLM's hash chain) or "radix" (SGLang's radix tree).
    chunk: most prompt tokens prefilled per iteration (None: whole prompts).
    admission: "fcfs" or "lpm" (longest cached prefix first).
    check: verify the memory invariants after every iteration (tests).
    """

    design = "continuous"

    def __init__(self, engine: Engine, params: Params = None, *, num_blocks: int | None = None,
                 block_size: int = 16, prefix_cache: str | None = None,
                 chunk: int | None = None, admission: str = "fcfs", check: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(engine, params, **kwargs)
        if prefix_cache not in (None, *_CACHES):
            raise ValueError(f"prefix_cache must be None, 'hash' or 'radix', not {prefix_cache!r}")
        if admission not in ("fcfs", "lpm"):
            raise ValueError(f"admission must be 'fcfs' or 'lpm', not {admission!r}")
        # None, and only None, asks for the default: 0 blocks or a chunk of 0 tokens are
        # mistakes, not requests for "the usual".
        self.block_size = positive_int("block_size", block_size)
        num_blocks = optional_positive_int("num_blocks", num_blocks)
        chunk = optional_positive_int("chunk", chunk)
        self.num_blocks = (self.slots * blocks_for(engine.max_len, block_size)
                           if num_blocks is None else num_blocks)
        self.cache_kind, self.chunk, self.admission = prefix_cache, chunk, admission
        self.check = check

    def run(self, trace: Sequence[Request]) -> RunResult:
        seqs = self.start(trace)
        for s in seqs:
            need = blocks_for(len(s.request.prompt) + s.request.max_new_tokens, self.block_size)
            if need > self.num_blocks:
                raise ValueError(f"request {s.id} needs {need} KV blocks; the pool has "
                                 f"{self.num_blocks}")
        self.bm = BlockManager(self.num_blocks, self.block_size)
        self.cache = _CACHES[self.cache_kind](self.bm) if self.cache_kind else None
        self.pool = (self.engine.init_pool(self.num_blocks, self.block_size)
                     if self.cache else None)
        pending, self.waiting, self.prefilling = deque(seqs), [], []
        self.running: dict[int, SequenceState] = {}
        self.free, self._order, server = list(range(self.slots)), 0, "engine"
        self.state = self.engine.init_decode_state()
        self.clock[server] = 0.0
        while pending or self.waiting or self.prefilling or self.running:
            while pending and pending[0].request.arrival_s <= self.clock[server]:
                self.waiting.append(pending.popleft())
            self._admit()
            busy = bool(self.prefilling or self.running)
            if self.prefilling:
                self._prefill()
            if self.running:
                self._decode()
            if self.check:
                self._check_invariants()
            if not busy:
                assert pending, "nothing runs, yet a waiting request cannot be admitted"
                self.clock[server] = pending[0].request.arrival_s
        return self.result(seqs, blocks=self.bm, cache=self.cache)

    # 1. admission -------------------------------------------------------------------------

    def _admit(self) -> None:
        while self.waiting and self.free:
            i = 0
            if self.admission == "lpm" and self.cache:
                hits = [self.cache.peek(s.context, len(s.context) - 1) for s in self.waiting]
                i = hits.index(max(hits))
            seq = self.waiting[i]
            ctx = seq.context
            table = self.cache.match(ctx, len(ctx) - 1) if self.cache else []
            n_hit = len(table) * self.block_size
            if not self.bm.grow(table, len(ctx) + 1):
                self.bm.release(table)
                return                               # wait until memory frees up
            self.waiting.pop(i)
            seq.blocks, seq.saved_blocks = table, n_hit // self.block_size
            seq.cached_tokens += n_hit
            seq.slot, seq.status = self.free.pop(0), Status.PREFILLING
            seq.admitted_order, self._order = self._order, self._order + 1
            seq.prefix, seq.done_tokens = None, n_hit
            if n_hit:
                hit = list(table[:seq.saved_blocks])
                seq.prefix = self.call("engine", Op("load", 1, n_hit), lambda: self.engine
                                       .load_prefix(self.pool, hit, n_hit, len(ctx)), [seq.id])
            self.prefilling.append(seq)

    # 2. prefill ---------------------------------------------------------------------------

    def _prefill(self) -> None:
        budget = float("inf") if self.chunk is None else self.chunk
        for seq in list(self.prefilling):
            if budget <= 0:
                break
            ctx = seq.context
            n = int(min(len(ctx) - seq.done_tokens, budget))
            prefix, tok = self.prefill("engine", seq, n)
            budget -= n
            if seq.done_tokens < len(ctx):
                continue
            self.prefilling.remove(seq)
            self._save(seq, prefix, len(ctx))
            if self.emit(seq, tok, self.clock["engine"]):
                self._release(seq)
                continue
            self.state = self.insert("engine", seq, prefix, self.state, seq.slot, self.running)

    # 3. and 4. grow, preempt, generate --------------------------------------------------------

    def _decode(self) -> None:
        for seq in sorted(self.running.values(), key=lambda s: s.admitted_order):
            while seq.status is Status.RUNNING and not self.bm.grow(seq.blocks,
                                                                    seq.kv_tokens + 1):
                self._preempt(max(self.running.values(), key=lambda s: s.admitted_order))
        if not self.running:
            return
        self.state, freed = self.generate("engine", self.state, self.running)
        self.free = sorted(self.free + freed)
        live = list(self.running.values()) + self.prefilling
        if not live:
            return
        paged = Usage(sum(s.kv_tokens for s in self.running.values())
                      + sum(s.done_tokens for s in self.prefilling),
                      sum(len(s.blocks) for s in live) * self.block_size)
        self.memory.append(MemorySample(self.clock["engine"], paged,
                                        Usage(paged.tokens, len(live) * self.engine.max_len),
                                        self.bm.num_used))

    def _preempt(self, seq: SequenceState) -> None:
        t = self.clock["engine"]
        self.events.append(Event("engine", "preempt", t, t, (seq.id,)))
        self._save(seq, (self.state, seq.slot), seq.kv_tokens)
        del self.running[seq.slot]
        self.state = self.engine.free(self.state, seq.slot)
        self.free = sorted(self.free + [seq.slot])
        self.bm.release(seq.blocks)
        seq.status, seq.slot, seq.saved_blocks = Status.WAITING, None, 0
        seq.preemptions += 1
        self.waiting.insert(0, seq)

    def finished(self, seq: SequenceState, state: DecodeState, slot: int | None
                 ) -> DecodeState:
        """A finished request gives its full blocks to the prefix cache and releases all."""
        self._save(seq, (state, slot), seq.kv_tokens)
        self.bm.release(seq.blocks)
        return state

    def _release(self, seq: SequenceState) -> None:
        """A request that finished at its prefill: its slot was never filled."""
        self.bm.release(seq.blocks)
        self.free = sorted(self.free + [seq.slot])

    # prefix cache -------------------------------------------------------------------------

    def _save(self, seq: SequenceState, source: Any, n_tokens: int) -> None:
        """Copy the sequence's not-yet-saved full blocks to the pool and cache them."""
        if not self.cache:
            return
        full = min(n_tokens // self.block_size, len(seq.blocks))
        new = seq.blocks[seq.saved_blocks:full]
        if new:
            first = seq.saved_blocks
            self.pool = self.call("engine", Op("save", 1, len(new) * self.block_size),
                                  lambda: self.engine.save_blocks(self.pool, source, new, first),
                                  [seq.id])
        self.cache.insert(seq.context[:full * self.block_size], seq.blocks[:full])
        seq.saved_blocks = full

    def _check_invariants(self) -> None:
        """Blocks are shared only through counted references; nobody lacks room."""
        self.bm.check()
        holders: dict[int, int] = {}
        for s in list(self.running.values()) + self.prefilling:
            for b in s.blocks:
                holders[b] = holders.get(b, 0) + 1
        for s in self.running.values():
            assert len(s.blocks) * self.block_size >= s.kv_tokens, "a sequence outgrew its blocks"
        cached = self.cache.held_blocks() if self.cache else set()
        for b in range(self.num_blocks):
            expect = holders.get(b, 0) + (b in cached)
            assert self.bm.refcount(b) == expect, f"block {b}: {self.bm.refcount(b)} != {expect}"
