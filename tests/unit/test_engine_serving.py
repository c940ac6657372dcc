"""The orchestrator, on random traces: every design serves every request exactly as if alone.

Two engines. The mock engine's next token depends on its whole context (mock.py), so a request
served from the wrong cache, slot or resume point produces a different stream; it is fast, so
hypothesis can throw many traces at every design, with memory pools small enough that
admission waits, preemption happens and the prefix cache evicts all the time. The model engine
runs the library's transformer; its outputs must equal `decode.generate` on the request alone
(same tokens, greedy or sampled with the request's key).
"""

import jax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inferbook.model import decode, decoder
from inferbook.model.config import ModelConfig
from inferbook.model.sampling import Sampler
from inferbook.serving import (
    CostTimer,
    LinearCost,
    MockEngine,
    ModelEngine,
    Request,
    mock_stream,
    serve,
)
from inferbook.serving.mock import mock_next

V = 97
SLOTS, MAX_LEN = 3, 48

DESIGNS = {
    "static": {},
    "interleaved": {},
    "continuous": {},
    "continuous-small-pool": dict(num_blocks=9, block_size=4),
    "continuous-hash-chunked": dict(num_blocks=10, block_size=4, prefix_cache="hash", chunk=5),
    "continuous-radix-lpm": dict(num_blocks=16, block_size=2, prefix_cache="radix",
                                 admission="lpm"),
    "disaggregated": dict(link_bytes_per_s=1e7, prefill_servers=2),
}


@st.composite
def traces(draw, V, max_prompt=14, max_new=16, n_max=8):
    """Requests with shared openings (a 3-letter alphabet), spread-out arrivals and lengths."""
    n = draw(st.integers(1, n_max))
    stem = draw(st.lists(st.integers(0, 2), min_size=0, max_size=8))
    out = []
    for i in range(n):
        tail = draw(st.lists(st.integers(0, V - 1), min_size=1, max_size=max_prompt))
        prompt = (stem + tail)[:max_prompt] if draw(st.booleans()) else tail
        out.append(Request(i, prompt, draw(st.integers(1, max_new)),
                           arrival_s=draw(st.sampled_from([0.0, 0.001, 0.004, 0.02])), seed=i))
    return out


def check_run(result, trace, expected, options):
    for seq in result.sequences:
        assert seq.finished and seq.finish_s == seq.token_times[-1]
        assert seq.token_times[0] >= seq.request.arrival_s
        assert seq.token_times == sorted(seq.token_times)
    assert sorted(s.id for s in result.sequences) == sorted(r.id for r in trace)
    assert result.outputs() == expected
    if "blocks" in result.extra:
        blocks = result.extra["blocks"]
        assert all(m.blocks_used <= blocks.num_blocks for m in result.memory)
        assert blocks.peak_used <= blocks.num_blocks
        if result.extra["cache"] is not None:
            result.extra["cache"].clear()
        assert blocks.all_free(), "a KV block leaked"


@pytest.mark.parametrize("design", DESIGNS)
@given(trace=traces(V), eos=st.sampled_from([None, 5]))
@settings(max_examples=40)
def test_mock_engine_serves_every_request_exactly_once_and_correctly(design, trace, eos):
    options = dict(DESIGNS[design])
    name = design.split("-")[0]
    if name == "continuous":
        options["check"] = True          # reference counts = holders, every iteration
    stream = {}

    def on_token(rid, tok, t):
        stream.setdefault(rid, []).append(tok)

    result = serve(MockEngine(SLOTS, MAX_LEN, V), None, trace, name, eos_id=eos,
                   on_token=on_token, **options)
    expected = {r.id: mock_stream(r.prompt, r.max_new_tokens, V, eos) for r in trace}
    check_run(result, trace, expected, options)
    assert stream == expected, "the stream lost, repeated or reordered tokens"


def test_the_mock_model_can_be_checked_by_hand():
    assert mock_stream([1, 2, 3], 3, 97) == [9, 19, 39]
    assert mock_next([1, 2, 3, 9], 97) == 19


def test_small_pools_force_preemption_and_requests_resume_where_they_stopped():
    trace = [Request(i, [i + 1] * 6, 20) for i in range(4)]
    for cache in (None, "hash", "radix"):
        result = serve(MockEngine(4, 32, V), None, trace, "continuous", num_blocks=12,
                       block_size=4, prefix_cache=cache, check=True)
        assert result.summary.preemptions > 0
        assert result.outputs() == {r.id: mock_stream(r.prompt, 20, V) for r in trace}


def test_prefix_cache_hits_on_a_shared_prompt_and_cuts_prefill_work():
    system = list(range(40))
    trace = [Request(i, system + [50 + i], 3, arrival_s=0.01 * i) for i in range(6)]
    plain = serve(MockEngine(2, 64, V), None, trace, "continuous")
    for cache in ("hash", "radix"):
        cached = serve(MockEngine(2, 64, V), None, trace, "continuous", block_size=8,
                       prefix_cache=cache)
        assert cached.outputs() == plain.outputs()
        assert cached.summary.cached_tokens == 5 * 40
        assert cached.summary.prefill_tokens == plain.summary.prefill_tokens - 5 * 40


def test_static_batching_timeline_by_hand():
    """Prefill of a batch of 2 padded to 3 tokens: 1 ms + 0.1 ms · 2 · 3 = 1.6 ms; an insert
    0.1 ms; generate steps 2 ms each."""
    trace = [Request(0, [1, 2], 1), Request(1, [3, 4, 5], 3)]
    r = serve(MockEngine(2, 16, V), None, trace, "static", timer=CostTimer(LinearCost()))
    times = {s.id: s.token_times for s in r.sequences}
    assert times[0] == pytest.approx([1.6e-3])
    assert times[1] == pytest.approx([1.6e-3, 3.7e-3, 5.7e-3])
    assert [e.kind for e in r.events] == ["prefill", "insert", "generate", "generate"]
    assert r.summary.throughput == pytest.approx(4 / 5.7e-3)


def test_disaggregated_ships_each_prefix_over_the_link():
    trace = [Request(0, list(range(10)), 3)]
    eng = MockEngine(2, 16, V, bytes_per_token=1000)
    r = serve(eng, None, trace, "disaggregated", link_bytes_per_s=1e6,
              timer=CostTimer(LinearCost()))
    kinds = [(e.server, e.kind) for e in r.events]
    assert kinds == [("prefill0", "prefill"), ("link", "transfer"), ("generate", "insert"),
                     ("generate", "generate"), ("generate", "generate")]
    transfer = r.events[1]
    assert transfer.end - transfer.start == pytest.approx(10 * 1000 / 1e6)
    assert r.events[2].start == pytest.approx(transfer.end)


def test_requests_that_cannot_fit_are_refused():
    with pytest.raises(ValueError):
        serve(MockEngine(2, 16, V), None, [Request(0, [1] * 10, 10)], "static")
    with pytest.raises(ValueError):
        serve(MockEngine(2, 64, V), None, [Request(0, [1] * 30, 10)], "continuous",
              num_blocks=4, block_size=8)


# The real model ---------------------------------------------------------------------------

CFG = ModelConfig(L=2, D=32, F=64, N=4, K=2, H=8, V=61)
PARAMS = decoder.init_params(CFG, seed=1)
SAMPLER = Sampler(temperature=0.8, top_k=20)


def alone(trace, sampler):
    return {r.id: decode.generate(PARAMS, CFG, [r.prompt], r.max_new_tokens, sampler=sampler,
                                  key=jax.random.key(r.seed)).tokens[0] for r in trace}


@st.composite
def model_traces(draw):
    # Prompts up to 16 tokens and three output lengths keep the compiled shapes few.
    trace = draw(traces(CFG.V, max_prompt=16, max_new=1, n_max=6))
    lens = draw(st.lists(st.sampled_from([1, 4, 9]), min_size=len(trace), max_size=len(trace)))
    return [Request(r.id, r.prompt, n, r.arrival_s, r.seed) for r, n in zip(trace, lens)]


@pytest.mark.parametrize("design", ["static", "interleaved", "continuous-hash-chunked",
                                    "continuous-radix-lpm", "disaggregated"])
@given(trace=model_traces())
@settings(max_examples=4)
def test_model_engine_gives_each_request_the_tokens_of_generate_alone(design, trace):
    engine = ModelEngine(CFG, SLOTS, MAX_LEN, min_bucket=16)
    options = dict(DESIGNS[design])
    result = serve(engine, PARAMS, trace, design.split("-")[0], **options)
    check_run(result, trace, alone(trace, Sampler(0.0)), options)


@pytest.mark.parametrize("cache", [None, "hash", "radix"])
def test_sampled_requests_match_generate_alone_through_preemption_and_cache_hits(cache):
    shared = [3, 1, 4, 1, 5, 9, 2, 6]
    trace = [Request(i, shared + [10 + i] * (i + 1), 9, arrival_s=0.0, seed=100 + i)
             for i in range(5)]
    engine = ModelEngine(CFG, SLOTS, 32, sampler=SAMPLER, min_bucket=16)
    result = serve(engine, PARAMS, trace, "continuous", num_blocks=8, block_size=4,
                   prefix_cache=cache, check=True)
    assert result.summary.preemptions > 0
    if cache:
        assert result.summary.cached_tokens > 0
    check_run(result, trace, alone(trace, SAMPLER), {"num_blocks": 8, "block_size": 4})
