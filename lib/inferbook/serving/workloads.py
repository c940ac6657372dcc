"""Synthetic request traces for the serving benchmarks, and routing across replicas.

Real traces (chat logs, API traffic) share two features that decide how a server fares:
output lengths vary enormously — most answers are short, a few are very long — and prompts
share openings (a system prompt, a few-shot template, the earlier turns of a conversation).
The generators here reproduce those features with the library's random token ids, so every
benchmark is deterministic in its seed:

  * `mixed_trace`: prompt lengths uniform in a range, output lengths a mixture of short and long
    (the long tail is what hurts static batching), Poisson arrivals or all at once.
  * `few_shot_trace`: every prompt is one shared few-shot prefix followed by its own question.
  * `multi_turn_trace`: conversations whose every turn re-sends the whole history; the answers
    come from a function you pass (the mock model's rule, or a real model's output).
"""

from __future__ import annotations

import hashlib
import random
from typing import Callable, Sequence

from inferbook.serving.request import Request

__all__ = ["mixed_trace", "few_shot_trace", "multi_turn_trace", "affinity_route", "route"]


def _arrivals(rng: random.Random, n: int, rate: float | None) -> list[float]:
    """All at t = 0 (rate None), or a Poisson process of `rate` requests per second."""
    if rate is None:
        return [0.0] * n
    t, out = 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def mixed_trace(n: int, V: int, *, prompt_len: tuple[int, int] = (16, 96),
                short: tuple[int, int] = (4, 24), long: tuple[int, int] = (64, 160),
                long_fraction: float = 0.25, rate: float | None = None,
                seed: int = 0) -> list[Request]:
    """n requests with random prompts; outputs short, or long with probability long_fraction."""
    rng = random.Random(seed)
    times = _arrivals(rng, n, rate)
    out = []
    for i in range(n):
        lo, hi = long if rng.random() < long_fraction else short
        prompt = [rng.randrange(V) for _ in range(rng.randint(*prompt_len))]
        out.append(Request(i, prompt, rng.randint(lo, hi), arrival_s=times[i], seed=seed + i))
    return out


def few_shot_trace(n: int, V: int, *, shared: int = 256, question: tuple[int, int] = (8, 32),
                   output: tuple[int, int] = (8, 24), rate: float | None = None,
                   seed: int = 0) -> list[Request]:
    """n requests that all start with the same `shared`-token few-shot prefix."""
    rng = random.Random(seed)
    prefix = [rng.randrange(V) for _ in range(shared)]
    times = _arrivals(rng, n, rate)
    return [Request(i, prefix + [rng.randrange(V) for _ in range(rng.randint(*question))],
                    rng.randint(*output), arrival_s=times[i], seed=seed + i)
            for i in range(n)]


def multi_turn_trace(sessions: int, turns: int, V: int,
                     answer: Callable[[Sequence[int], int], list[int]], *,
                     system: int = 32, message: tuple[int, int] = (8, 24),
                     output: tuple[int, int] = (8, 24), think_s: float = 1.0,
                     seed: int = 0) -> list[Request]:
    """Conversations: turn k's prompt is turn k-1's prompt, its answer, and a new message.

    `answer(prompt, n)` gives the n tokens the server will answer (for the mock engine:
    `lambda p, n: mock_stream(p, n, V)`). Turns of a session arrive `think_s` apart, sessions
    are interleaved; request ids are session * turns + turn, and `session` is set for routing.
    """
    rng = random.Random(seed)
    system_prompt = [rng.randrange(V) for _ in range(system)]
    out = []
    for s in range(sessions):
        history = list(system_prompt)
        for k in range(turns):
            history += [rng.randrange(V) for _ in range(rng.randint(*message))]
            n_out = rng.randint(*output)
            out.append(Request(s * turns + k, history, n_out,
                               arrival_s=k * think_s + s * think_s / sessions,
                               seed=seed + s * turns + k, session=s))
            history = history + answer(history, n_out)
    return sorted(out, key=lambda r: (r.arrival_s, r.id))


def route(trace: Sequence[Request], replicas: int, policy: str = "affinity",
          prefix_tokens: int = 64) -> list[list[Request]]:
    """Split a trace across replicas: "round-robin", or "affinity".

    Affinity sends a request by its session id when it has one (sticky sessions: every turn of
    a conversation to one replica), else by a hash of its first `prefix_tokens` tokens (so
    requests sharing a template share a replica and its prefix cache).
    """
    shards: list[list[Request]] = [[] for _ in range(replicas)]
    for i, r in enumerate(trace):
        if policy == "round-robin":
            shards[i % replicas].append(r)
        elif policy == "affinity":
            key = [r.session] if r.session is not None else r.prompt
            shards[affinity_route(key, replicas, prefix_tokens)].append(r)
        else:
            raise ValueError(f"unknown routing policy {policy!r}")
    return shards


def affinity_route(prompt: Sequence[int], replicas: int, prefix_tokens: int = 64) -> int:
    """The replica for a request under prefix-affinity routing: a hash of its first tokens.

    Requests that share their opening (one conversation, one few-shot template) land on the
    replica whose prefix cache already holds it; plain round-robin scatters them.
    """
    digest = hashlib.sha256(repr(tuple(prompt[:prefix_tokens])).encode()).digest()
    return int.from_bytes(digest[:8], "little") % replicas
