"""inferbook.serving: a small serving engine, one concept per module.

    api.py            the Engine interface (JetStream's prefill → insert(slot) → generate)
    model_engine.py   that interface over the library's transformer
    mock.py           ... and over a toy model whose outputs can be worked out by hand
    request.py        requests, per-request state, TTFT / TPOT / throughput
    timing.py         where the orchestrator's clock comes from (measured, or a cost model)
    scheduler.py      the orchestrator: static batching, interleaved prefill and generate
    continuous.py     continuous batching with paged KV, preemption, prefix caching, chunking
    disaggregated.py  prefill and generate servers joined by a link
    block_manager.py  paged KV memory: fixed-size blocks, reference counts, a free list
    prefix_cache.py   reusing KV across requests: vLLM's hash chain, SGLang's radix tree
    speculative.py    speculative decoding: draft, verify, accept (greedy and sampling)
    draft.py          ... its drafters: a smaller model, or lookup in the prompt
    workloads.py      synthetic request traces for the benchmarks, routing across replicas

Typical use:

    engine = ModelEngine(cfg, slots=8, max_len=512)
    result = serve(engine, params, trace, "continuous", prefix_cache="radix")
    result.summary.ttft_mean_s, result.events

Nothing here starts JAX at import time.
"""

from __future__ import annotations

from typing import Any
from typing import Sequence as Seq

from inferbook.serving.api import Engine
from inferbook.serving.block_manager import (
    BlockManager,
    OutOfBlocks,
    Usage,
    contiguous_usage,
    paged_usage,
)
from inferbook.serving.continuous import ContinuousBatching
from inferbook.serving.disaggregated import Disaggregated
from inferbook.serving.mock import MockEngine, mock_stream
from inferbook.serving.model_engine import ModelEngine
from inferbook.serving.prefix_cache import HashChainCache, RadixCache
from inferbook.serving.request import Request, Sequence, Summary, summarize
from inferbook.serving.scheduler import Event, Interleaved, RunResult, StaticBatching
from inferbook.serving.timing import CostTimer, LinearCost, MedianClock, Op, RooflineCost, WallClock
from inferbook.serving.workloads import affinity_route

__all__ = ["Engine", "ModelEngine", "MockEngine", "mock_stream", "Request", "Sequence",
           "Summary", "summarize", "Event", "RunResult", "StaticBatching", "Interleaved",
           "ContinuousBatching", "Disaggregated", "BlockManager", "OutOfBlocks", "Usage",
           "paged_usage", "contiguous_usage", "HashChainCache", "RadixCache",
           "affinity_route", "Op", "WallClock", "MedianClock", "CostTimer", "LinearCost",
           "RooflineCost", "DESIGNS", "serve", "warm_up"]

DESIGNS = {"static": StaticBatching, "interleaved": Interleaved,
           "continuous": ContinuousBatching, "disaggregated": Disaggregated}


def serve(engine: Engine, params: Any, trace: Seq[Request], design: str = "continuous",
          **options: Any) -> RunResult:
    """Replay `trace` through `engine` under one design ("static", "interleaved",
    "continuous" or "disaggregated"); options go to that design's constructor."""
    if design not in DESIGNS:
        raise ValueError(f"unknown design {design!r}; known: {', '.join(DESIGNS)}")
    return DESIGNS[design](engine, params, **options).run(trace)


def warm_up(engine: Engine, params: Any, trace: Seq[Request], design: str = "continuous",
            **options: Any) -> None:
    """Compile what a run will use, so a measured run times execution, not compilation.

    Replays the trace with outputs cut to two tokens under a cost-model clock: the same
    prompts, buckets and engine calls, a fraction of the steps.
    """
    import dataclasses
    short = [dataclasses.replace(r, max_new_tokens=min(r.max_new_tokens, 2)) for r in trace]
    options = {k: v for k, v in options.items() if k != "timer"}
    serve(engine, params, short, design, timer=CostTimer(LinearCost()), **options)
