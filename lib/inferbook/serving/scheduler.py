"""The orchestrator: feeding prefill and generate from a queue of requests.

An engine can prefill one prompt, insert a prefix into a slot, and advance every slot by one
token. How a server strings those calls together decides what its users see. This module
replays a trace of requests (prompts with arrival times) through an engine under one of four
designs, single-threaded and deterministic given the durations (see `clocks.py`):

  * `StaticBatching`: wait for work, prefill up to `slots` prompts as one padded batch, then
    generate until *every* one of them has finished; only then take the next batch. Simple,
    and the way most codebases start. Short answers sit idle in their slot while the longest
    finishes, and the last arrival's prefill delays everybody's first token.
  * `Interleaved`: prefill at batch 1 as soon as a slot is free (prefill first), insert, and
    run generate steps over the slots in between. Slots refill the moment they empty — this is
    continuous batching in its plainest form — but every prefill pauses all streams.
  * `ContinuousBatching` (continuous.py): the same slots, with paged KV memory that admits
    only what fits and preempts when it runs out, an optional prefix cache, and optionally
    chunked prefill that caps the prefill work between two generate steps.
  * `Disaggregated` (disaggregated.py): prefill and generate on separate servers with their
    own queues; prefixes cross a link whose cost comes from the estimator.

Every design drives the engine through the same three methods of `Orchestrator`, named after
the engine calls they make: `prefill` (run a request's prompt, or the next chunk of it),
`insert` (move a prefilled request into a decode slot) and `generate` (one step for every
slot). Each charges its call to a server's clock and does the request's bookkeeping, so a
design is only its rule for which call comes next.

Every design streams tokens as they are produced (``on_token(request_id, token, time)``),
records each call in an event log (`Event`: which server, what, when, for whom), and returns
a `RunResult` whose `summary` gives TTFT, time per output token and throughput.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from inferbook.serving.api import DecodeState, Engine, Prefix
from inferbook.serving.checks import nonnegative_int, token_ids
from inferbook.serving.clocks import CostTimer, LinearCost, Op, Timer
from inferbook.serving.request import (
    Request,
    SequenceState,
    Status,
    Summary,
    step_keys,
    summarize,
)

__all__ = ["Event", "RunResult", "Orchestrator", "StaticBatching", "Interleaved"]


@dataclass(frozen=True)
class Event:
    """One engine call (or KV transfer) on one server, for the timeline."""

    server: str
    kind: str
    start: float
    end: float
    requests: tuple[int, ...]
    tokens: int = 0          # tokens processed (prefill: padded prompt tokens of the call)


@dataclass
class RunResult:
    """What a run produced: per-request sequences, the event log and memory samples."""

    design: str
    sequences: list[SequenceState]
    events: list[Event]
    measured: bool
    memory: list[tuple[float, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def summary(self) -> Summary:
        return summarize(self.sequences)

    def outputs(self) -> dict[int, list[int]]:
        """Generated tokens per request id."""
        return {s.id: list(s.tokens) for s in self.sequences}


class Orchestrator:
    """Machinery shared by the designs: clocks, timed calls, streaming, the event log."""

    design = "base"

    def __init__(self, engine: Engine, params: Any = None, *, timer: Timer | None = None,
                 eos_id: int | None = None,
                 on_token: Callable[[int, int, float], None] | None = None) -> None:
        if not isinstance(engine, Engine):
            raise ValueError(f"engine must be an Engine, got {type(engine).__name__}")
        if eos_id is not None:
            eos_id = nonnegative_int("eos_id", eos_id, engine.vocab_size)
        for name, fn in (("timer", timer), ("on_token", on_token)):
            if fn is not None and not callable(fn):
                raise ValueError(f"{name} must be callable, got {fn!r}")
        self.engine, self.params = engine, params
        self.timer = timer or CostTimer(LinearCost())
        self.eos_id, self.on_token = eos_id, on_token
        self.slots = engine.max_concurrent_decodes

    # set-up -------------------------------------------------------------------------------

    def start(self, trace: Sequence[Request]) -> list[SequenceState]:
        """Begin a run: check the trace, reset the clocks and the logs, and make one state per
        request, in order of arrival."""
        if not all(isinstance(r, Request) for r in trace):
            raise ValueError("a trace is a sequence of Request objects")
        ids = [r.id for r in trace]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique")
        for r in trace:
            # Request checked its ids are >= 0; only the engine knows its vocabulary.
            token_ids(f"request {r.id}", r.prompt, self.engine.vocab_size)
            if len(r.prompt) + r.max_new_tokens > self.engine.max_len:
                raise ValueError(f"request {r.id}: prompt + max_new_tokens exceeds the "
                                 f"engine's {self.engine.max_len} tokens per slot")
        self.clock: dict[str, float] = {}
        self.events: list[Event] = []
        self.memory: list[tuple[float, Any]] = []
        sampler = getattr(self.engine, "sampler", None)
        self._sampling = sampler is not None and not sampler.greedy
        self._keys: dict[int, np.ndarray] = {}
        return [SequenceState(r) for r in sorted(trace, key=lambda r: (r.arrival_s, r.id))]

    def keys(self, seq: SequenceState) -> np.ndarray | None:
        """The request's per-step sampling keys (None when decoding greedily)."""
        if not self._sampling:
            return None
        if seq.id not in self._keys:
            self._keys[seq.id] = step_keys(seq.request)
        return self._keys[seq.id]

    def padded(self, n: int) -> int:
        """The length the engine's compiled prefill sees for n tokens."""
        return self.engine.bucket(n) if hasattr(self.engine, "bucket") else n

    def result(self, seqs: list[SequenceState], **extra: Any) -> RunResult:
        """The run's record, once every request has finished."""
        assert all(s.finished for s in seqs), "a request did not finish"
        return RunResult(self.design, seqs, self.events, getattr(self.timer, "measured", False),
                         self.memory, extra)

    # timed calls and streaming ----------------------------------------------------------

    def call(self, server: str, op: Op, fn: Callable[[], Any], requests: Sequence[int]) -> Any:
        """Run fn on `server`, advancing that server's clock by the timer's duration."""
        start = self.clock.setdefault(server, 0.0)
        out, dt = self.timer(op, fn)
        self.clock[server] = start + dt
        self.events.append(Event(server, op.kind, start, start + dt, tuple(requests),
                                 op.batch * op.tokens))
        return out

    def emit(self, seq: SequenceState, token: int, t: float) -> bool:
        """Stream a token of `seq` at time t; True when the request has finished."""
        done = seq.emit(token, t, self.eos_id)
        if self.on_token is not None:
            self.on_token(seq.id, int(token), t)
        return done

    # the engine's three calls, timed, with the requests' bookkeeping -----------------------

    def prefill(self, server: str, seq: SequenceState, n: int | None = None
                ) -> tuple[Prefix, int]:
        """Prefill the next n tokens of seq's context (None: all the rest) at batch 1.

        Continues from `seq.prefix` (a cached or partly prefilled prefix) and samples with
        the key of the step the request has reached, so a request resumed after preemption,
        or fed in chunks, draws what it would have drawn in one piece. Returns the prefix and
        the sampled token, which is the request's next token only once the whole context is
        in (`seq.done_tokens == len(seq.context)`); until then the partial prefix is kept in
        `seq.prefix`.
        """
        context, done = seq.context, seq.done_tokens
        n = len(context) - done if n is None else n
        piece = context[done:done + n]
        prefix, token = self.call(
            server, Op("prefill", 1, self.padded(n), done),
            lambda: self.engine.prefill(self.params, piece, existing_prefix=seq.prefix,
                                        keys=self.keys(seq), step=len(seq.tokens)),
            [seq.id])
        seq.done_tokens, seq.prefilled_tokens = done + n, seq.prefilled_tokens + n
        seq.prefix = prefix if seq.done_tokens < len(context) else None
        return prefix, token

    def insert(self, server: str, seq: SequenceState, prefix: Prefix, state: DecodeState,
               slot: int, running: dict[int, SequenceState]) -> DecodeState:
        """Place a prefilled request in `slot` of the generate batch; it streams from the next
        generate step on. Returns the new decode state."""
        seq.status, seq.slot = Status.RUNNING, slot
        state = self.call(server, Op("insert", 1, self.engine.prefix_length(prefix)),
                          lambda: self.engine.insert(prefix, state, slot), [seq.id])
        running[slot] = seq
        return state

    def generate(self, server: str, state: DecodeState, running: dict[int, SequenceState]
                 ) -> tuple[DecodeState, list[int]]:
        """One generate step over all slots; stream the tokens of the running ones.

        Finished requests leave their slot (`finished`, then engine.free). Returns the new
        decode state and the slots that became free.
        """
        context = sum(s.kv_tokens for s in running.values())
        state, toks = self.call(server, Op("generate", self.slots, 1, context),
                                lambda: self.engine.generate(self.params, state),
                                sorted(s.id for s in running.values()))
        t, freed = self.clock[server], []
        for slot in sorted(running):
            if self.emit(running[slot], toks[slot], t):
                state = self.finished(running.pop(slot), state, slot)
                state = self.engine.free(state, slot)
                freed.append(slot)
        return state, freed

    def finished(self, seq: SequenceState, state: DecodeState, slot: int | None
                 ) -> DecodeState:
        """Hook for designs that must do something as a request completes (before its slot
        is freed); returns the decode state."""
        return state


class StaticBatching(Orchestrator):
    """Prefill a batch of up to `slots` waiting prompts, generate until all are done, repeat."""

    design = "static"

    def run(self, trace: Sequence[Request]) -> RunResult:
        seqs = self.start(trace)
        pending, server = deque(seqs), "engine"
        state = self.engine.init_decode_state()
        self.clock[server] = 0.0
        while pending:
            t = self.clock[server]
            if pending[0].request.arrival_s > t:          # idle until the next arrival
                self.clock[server] = pending[0].request.arrival_s
                continue
            batch = []
            while pending and len(batch) < self.slots and pending[0].request.arrival_s <= t:
                batch.append(pending.popleft())
            prompts = [s.request.prompt for s in batch]
            op = Op("prefill", len(batch), self.padded(max(map(len, prompts))))
            results = self.call(server, op, lambda: self.engine.prefill_batch(
                self.params, prompts, [self.keys(s) for s in batch]), [s.id for s in batch])
            running: dict[int, SequenceState] = {}
            for slot, (seq, (prefix, tok)) in enumerate(zip(batch, results)):
                seq.prefilled_tokens += len(seq.request.prompt)
                if not self.emit(seq, tok, self.clock[server]):
                    state = self.insert(server, seq, prefix, state, slot, running)
            while running:
                state, _ = self.generate(server, state, running)
        return self.result(seqs)


class Interleaved(Orchestrator):
    """Prefill one prompt at a time whenever a slot is free (prefill first), then generate."""

    design = "interleaved"

    def run(self, trace: Sequence[Request]) -> RunResult:
        seqs = self.start(trace)
        pending, waiting, server = deque(seqs), deque(), "engine"
        free, running = list(range(self.slots)), {}
        state = self.engine.init_decode_state()
        self.clock[server] = 0.0
        while pending or waiting or running:
            t = self.clock[server]
            while pending and pending[0].request.arrival_s <= t:
                waiting.append(pending.popleft())
            if waiting and free:
                seq = waiting.popleft()
                prefix, tok = self.prefill(server, seq)
                if not self.emit(seq, tok, self.clock[server]):
                    state = self.insert(server, seq, prefix, state, free.pop(0), running)
            elif running:
                state, freed = self.generate(server, state, running)
                free = sorted(free + freed)
            elif pending:
                self.clock[server] = pending[0].request.arrival_s
        return self.result(seqs)
