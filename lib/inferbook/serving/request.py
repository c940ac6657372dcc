"""Requests, what happens to them, and what users feel: TTFT, time per output token, throughput.

A `Request` is what a client sends: a prompt (token ids), a limit on new tokens, the time it
arrives, and a seed for sampling. A `SequenceState` is the server's record of that request
while it is served: its status, the tokens streamed so far and the time each one left the
server, the KV blocks it holds, how many of its prompt tokens the prefix cache supplied, how
often it was preempted. The orchestrator owns these states; everything a chapter reports is
computed from them after a run (`summarize`).

The three numbers that describe a serving system from the outside:

  * time to first token (TTFT): first token's time − arrival. Queueing plus prefill.
  * time per output token (TPOT): (last token's time − first token's time) / (n − 1), the pace
    of the stream once it has started. Every generate step, and every prefill of somebody else
    that pauses the generate loop, adds to it.
  * throughput: output tokens of all requests / (last finish − first arrival).
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field
from typing import Sequence

import jax
import numpy as np

from inferbook.serving.checks import (
    SEED_LIMIT,
    finite_number,
    integer,
    nonnegative_int,
    positive_int,
    token_ids,
)

__all__ = ["Request", "SequenceState", "Status", "Summary", "summarize", "step_keys"]


@dataclass(frozen=True)
class Request:
    """One client request.

    Attributes:
      id: unique within a trace.
      prompt: token ids (at least one).
      max_new_tokens: the most tokens to generate; fewer if EOS comes first.
      arrival_s: when it reaches the server, in seconds from the start of the trace.
      seed: its sampling randomness. Token i is drawn with the i-th of
        ``jax.random.split(jax.random.key(seed), max_new_tokens)``, exactly as
        `decode.generate` would draw it for this prompt alone — which is what lets a test
        compare an engine's output with the request run by itself, even when sampling.
      session: a conversation id (multi-turn traces), for affinity routing.
    """

    id: int
    prompt: tuple[int, ...]
    max_new_tokens: int
    arrival_s: float = 0.0
    seed: int = 0
    session: int | None = None

    def __post_init__(self) -> None:
        where = f"request {self.id!r}"
        integer("request id", self.id)
        object.__setattr__(self, "prompt", token_ids(where, self.prompt))
        if not self.prompt:
            raise ValueError(f"{where}: the prompt needs at least one token")
        positive_int(f"{where}: max_new_tokens", self.max_new_tokens)
        finite_number(f"{where}: arrival_s", self.arrival_s, minimum=0.0)
        nonnegative_int(f"{where}: seed", self.seed, SEED_LIMIT)
        if self.session is not None:
            integer(f"{where}: session", self.session)


def step_keys(request: Request) -> np.ndarray:
    """The raw PRNG key data of each sampling step, [max_new_tokens, 2] uint32."""
    keys = jax.random.split(jax.random.key(request.seed), request.max_new_tokens)
    return np.asarray(jax.random.key_data(keys))


class Status(enum.Enum):
    """Where a request is in the server: its states in the order they are passed through."""

    WAITING = "waiting"          # arrived (or preempted), not yet admitted
    PREFILLING = "prefilling"    # admitted; prompt being processed (possibly in chunks)
    TRANSFERRING = "transferring"  # disaggregated: KV on its way to the generate server
    RUNNING = "running"          # in a decode slot
    FINISHED = "finished"


@dataclass
class SequenceState:
    """The server's state for one request: where it is, what it has streamed, what it holds."""

    request: Request
    status: Status = Status.WAITING
    tokens: list[int] = field(default_factory=list)       # generated so far
    token_times: list[float] = field(default_factory=list)
    finish_s: float | None = None
    slot: int | None = None
    blocks: list[int] = field(default_factory=list)       # KV block table (paged designs)
    saved_blocks: int = 0        # leading blocks whose KV is in the block pool / prefix cache
    cached_tokens: int = 0       # prompt tokens the prefix cache supplied, summed over admissions
    prefilled_tokens: int = 0    # tokens this request ran through prefill, summed (recompute too)
    preemptions: int = 0
    admitted_order: int = -1     # admission counter: the latest admitted is preempted first
    prefix: object = None        # the partial prefill of a chunked or resumed prefill
    done_tokens: int = 0         # tokens of `context` already in `prefix`

    @property
    def id(self) -> int:
        return self.request.id

    @property
    def context(self) -> tuple[int, ...]:
        """Every token the model must have seen before sampling the next: prompt + output."""
        return self.request.prompt + tuple(self.tokens)

    @property
    def kv_tokens(self) -> int:
        """Tokens whose keys and values are in the cache while decoding.

        The newest generated token is not among them: its KV is written by the step that
        consumes it.
        """
        return len(self.request.prompt) + max(len(self.tokens) - 1, 0)

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def emit(self, token: int, t: float, eos_id: int | None) -> bool:
        """Record a streamed token; True when the request is now complete."""
        self.tokens.append(int(token))
        self.token_times.append(t)
        done = len(self.tokens) >= self.request.max_new_tokens or token == eos_id
        if done:
            self.status, self.finish_s = Status.FINISHED, t
        return done


@dataclass(frozen=True)
class Summary:
    """What a run delivered, from the users' side."""

    requests: int
    output_tokens: int
    makespan_s: float
    throughput: float            # output tokens per second over the makespan
    ttft_mean_s: float
    ttft_p90_s: float
    tpot_mean_s: float           # mean over requests with at least two tokens
    tpot_p90_s: float
    prefill_tokens: int          # tokens that went through prefill (cache hits excluded)
    cached_tokens: int           # prompt tokens served by the prefix cache
    preemptions: int


def _p90(xs: Sequence[float]) -> float:
    return float(np.percentile(xs, 90)) if xs else float("nan")


def summarize(seqs: Sequence[SequenceState]) -> Summary:
    """TTFT, TPOT and throughput of finished sequences (see the module docstring)."""
    if not seqs or not all(s.finished for s in seqs):
        raise ValueError("summarize needs a non-empty list of finished sequences")
    ttft = [s.token_times[0] - s.request.arrival_s for s in seqs]
    tpot = [(s.token_times[-1] - s.token_times[0]) / (len(s.tokens) - 1)
            for s in seqs if len(s.tokens) > 1]
    start = min(s.request.arrival_s for s in seqs)
    makespan = max(s.finish_s for s in seqs) - start
    n_out = sum(len(s.tokens) for s in seqs)
    return Summary(
        requests=len(seqs), output_tokens=n_out, makespan_s=makespan,
        throughput=n_out / makespan if makespan > 0 else float("inf"),
        ttft_mean_s=statistics.fmean(ttft), ttft_p90_s=_p90(ttft),
        tpot_mean_s=statistics.fmean(tpot) if tpot else float("nan"), tpot_p90_s=_p90(tpot),
        prefill_tokens=sum(s.prefilled_tokens for s in seqs),
        cached_tokens=sum(s.cached_tokens for s in seqs),
        preemptions=sum(s.preemptions for s in seqs))
