"""inferbook.serving: a small serving engine, one concept per module.

    api.py              the Engine interface (JetStream's prefill → insert(slot) → generate)
    model_engine.py     that interface over the library's transformer
    mock.py             ... and over a toy model whose outputs can be worked out by hand
    checks.py           the checks every public entry point applies to its arguments
    request.py          requests, per-request state, TTFT / TPOT / throughput
    clocks.py           where the orchestrator's clock comes from (measured, or a cost model)
    scheduler.py        the orchestrator: static batching, interleaved prefill and generate
    continuous.py       continuous batching with paged KV, preemption, prefix caching, chunking
    disaggregated.py    prefill and generate servers joined by a link
    block_manager.py    paged KV memory: fixed-size blocks, reference counts, a free list
    memory_sim.py       contiguous reservations against paged blocks, simulated (chapter 5)
    prefix_cache.py     reusing KV across requests: what every prefix cache shares
    hash_chain_cache.py ... vLLM's design, a dictionary of chained block hashes
    radix_cache.py      ... SGLang's design, a radix tree
    acceptance.py       speculative decoding's acceptance rule (greedy and sampling)
    draft.py            its drafters: a smaller model, or lookup in the prompt
    speculative.py      the speculative generation loop
    workloads.py        synthetic request traces for the benchmarks, routing across replicas

Typical use:

    engine = ModelEngine(cfg, slots=8, max_len=512)
    result = serve(engine, params, trace, "continuous", prefix_cache="radix")
    result.summary.ttft_mean_s, result.events

The package serves chapters 11 (the engine), 12 (paged KV memory and prefix caching) and 13
(speculative decoding), and chapter 5's memory simulation. Importing it loads JAX (the model
engine is built on it) but starts no backend: devices are touched at the first engine call.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from inferbook.memory.kv_usage import Usage, contiguous_usage, paged_usage
from inferbook.serving.api import Engine
from inferbook.serving.block_manager import BlockManager, OutOfBlocks
from inferbook.serving.clocks import (
    CostTimer,
    LinearCost,
    MedianClock,
    Op,
    RooflineCost,
    WallClock,
)
from inferbook.serving.continuous import ContinuousBatching
from inferbook.serving.disaggregated import Disaggregated
from inferbook.serving.hash_chain_cache import HashChainCache
from inferbook.serving.mock import MockEngine, mock_stream
from inferbook.serving.model_engine import ModelEngine
from inferbook.serving.radix_cache import RadixCache
from inferbook.serving.request import Request, SequenceState, Summary, summarize
from inferbook.serving.scheduler import Event, Interleaved, RunResult, StaticBatching
from inferbook.serving.workloads import affinity_route

__all__ = ["Engine", "ModelEngine", "MockEngine", "mock_stream", "Request", "SequenceState",
           "Summary", "summarize", "Event", "RunResult", "StaticBatching", "Interleaved",
           "ContinuousBatching", "Disaggregated", "BlockManager", "OutOfBlocks", "Usage",
           "paged_usage", "contiguous_usage", "HashChainCache", "RadixCache",
           "affinity_route", "Op", "WallClock", "MedianClock", "CostTimer", "LinearCost",
           "RooflineCost", "DESIGNS", "serve", "warm_up"]

DESIGNS = {"static": StaticBatching, "interleaved": Interleaved,
           "continuous": ContinuousBatching, "disaggregated": Disaggregated}


def serve(engine: Engine, params: Any, trace: Sequence[Request], design: str = "continuous",
          **options: Any) -> RunResult:
    """Replay `trace` through `engine` under one design ("static", "interleaved",
    "continuous" or "disaggregated"); options go to that design's constructor."""
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; known: {', '.join(DESIGNS)}")
    return DESIGNS[design](engine, params, **options).run(trace)


def warm_up(engine: Engine, params: Any, trace: Sequence[Request], design: str = "continuous",
            **options: Any) -> None:
    """Compile what a run will use, so a measured run times execution, not compilation.

    Replays the trace with outputs cut to two tokens under a cost-model clock: the same
    prompts, buckets and engine calls, a fraction of the steps.
    """
    short = [dataclasses.replace(r, max_new_tokens=min(r.max_new_tokens, 2)) for r in trace]
    options = {k: v for k, v in options.items() if k != "timer"}
    serve(engine, params, short, design, timer=CostTimer(LinearCost()), **options)
