"""The serving API refuses bad arguments with a ValueError naming them (issue 15).

Before: token ids past the vocabulary were served (the embedding lookup clamps them),
`block_size=0` was a ZeroDivisionError, `num_blocks=0` and `chunk=0` silently meant "the
default", and NaN bandwidths or costs made every time NaN. Each case below is one argument
of one public constructor or entry point; the last tests check that the valid neighbours of
these values still run and give the reference's tokens.
"""

import numpy as np
import pytest

from inferbook.model import decoder
from inferbook.model.config import ModelConfig
from inferbook.serving import (
    BlockManager,
    ContinuousBatching,
    CostTimer,
    Disaggregated,
    LinearCost,
    MockEngine,
    ModelEngine,
    Request,
    RooflineCost,
    mock_stream,
    serve,
)
from inferbook.serving.draft import PromptLookup
from inferbook.serving.speculative import speculative_generate

NAN, INF = float("nan"), float("inf")
CFG = ModelConfig(L=1, D=16, F=24, N=2, K=1, H=8, V=40, max_seq_len=64, name="small")


@pytest.mark.parametrize("kwargs, name", [
    (dict(prompt=(1, 2.5)), "integers"), (dict(prompt=(1, -2)), "outside the vocabulary"),
    (dict(prompt="ab"), "integers"), (dict(prompt=()), "at least one token"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=True), "max_new_tokens"),
    (dict(max_new_tokens=2.0), "max_new_tokens"), (dict(arrival_s=NAN), "arrival_s"),
    (dict(arrival_s=-1.0), "arrival_s"), (dict(arrival_s=INF), "arrival_s"),
    (dict(seed=-1), "seed"), (dict(seed=2**32), "seed"), (dict(seed=1.5), "seed"),
    (dict(session="a"), "session"), (dict(id="x"), "id"),
])
def test_a_request_refuses_each_bad_field(kwargs, name):
    fields = dict(id=0, prompt=(1, 2), max_new_tokens=3) | kwargs
    with pytest.raises(ValueError, match=name):
        Request(**fields)


def test_token_ids_past_the_engines_vocabulary_are_refused_by_every_design():
    engine = MockEngine(2, 64, V=97)
    for design in ("static", "interleaved", "continuous"):
        with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 97\): 97"):
            serve(engine, None, [Request(0, (1, 2, 97), 2)], design)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        serve(engine, None, [Request(0, (1, 2, 97), 2)], "disaggregated", link_bytes_per_s=1e9)


def test_the_model_engine_refuses_ids_the_embedding_would_clamp():
    params = decoder.init_params(CFG, 0)
    engine = ModelEngine(CFG, slots=2, max_len=32)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        serve(engine, params, [Request(0, (1, 2, 999), 2)])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.prefill(params, [1, 40])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        engine.prefill_batch(params, [[1], [-1]], [None, None])


@pytest.mark.parametrize("option, value", [
    ("block_size", 0), ("block_size", -16), ("block_size", 1.5), ("block_size", None),
    ("num_blocks", 0), ("num_blocks", -1), ("num_blocks", 2.0),
    ("chunk", 0), ("chunk", -3), ("chunk", True),
])
def test_continuous_batching_refuses_zero_and_non_integer_sizes(option, value):
    with pytest.raises(ValueError, match=option):
        ContinuousBatching(MockEngine(2, 64), None, **{option: value})


@pytest.mark.parametrize("kwargs, name", [
    (dict(eos_id=-1), "eos_id"), (dict(eos_id=97), "eos_id"), (dict(eos_id=1.0), "eos_id"),
    (dict(timer=3), "timer"), (dict(on_token="print"), "on_token"),
])
def test_the_orchestrators_refuse_bad_options(kwargs, name):
    with pytest.raises(ValueError, match=name):
        serve(MockEngine(2, 64), None, [Request(0, (1, 2), 2)], "interleaved", **kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(link_bytes_per_s=NAN), "link_bytes_per_s"), (dict(link_bytes_per_s=0), "link_bytes"),
    (dict(link_bytes_per_s=INF), "link_bytes_per_s"),
    (dict(link_bytes_per_s=1e9, link_latency_s=-1), "link_latency_s"),
    (dict(link_bytes_per_s=1e9, link_latency_s=NAN), "link_latency_s"),
    (dict(link_bytes_per_s=1e9, prefill_servers=0), "prefill_servers"),
    (dict(link_bytes_per_s=1e9, prefill_servers=1.5), "prefill_servers"),
])
def test_disaggregated_serving_refuses_nan_and_nonpositive_links(kwargs, name):
    with pytest.raises(ValueError, match=name):
        Disaggregated(MockEngine(2, 64), None, **kwargs)


@pytest.mark.parametrize("args, name", [((0, 16), "num_blocks"), ((4, 0), "block_size"),
                                        ((4, 1.5), "block_size"), ((True, 4), "num_blocks")])
def test_the_block_manager_refuses_bad_sizes(args, name):
    with pytest.raises(ValueError, match=name):
        BlockManager(*args)


@pytest.mark.parametrize("kwargs, name", [
    (dict(slots=0), "slots"), (dict(max_len=0), "max_len"), (dict(min_bucket=0), "min_bucket"),
    (dict(max_len=30), "multiple"), (dict(sampler="greedy"), "sampler"),
])
def test_the_model_engine_refuses_bad_shapes(kwargs, name):
    options = dict(slots=2, max_len=32) | kwargs
    with pytest.raises(ValueError, match=name):       # min_bucket=0 was a ZeroDivisionError
        ModelEngine(CFG, **options)


@pytest.mark.parametrize("args, name", [((0, 4), "num_blocks"), ((4, 0), "block_size"),
                                        ((4, 3), "divide")])
def test_the_block_pool_refuses_bad_sizes(args, name):
    with pytest.raises(ValueError, match=name):          # block_size=0 was ZeroDivisionError
        ModelEngine(CFG, 2, 32).init_pool(*args)


@pytest.mark.parametrize("cost, name", [
    (lambda: LinearCost(prefill_s=NAN), "prefill_s"), (lambda: LinearCost(copy_s=-1), "copy_s"),
    (lambda: RooflineCost(CFG, None, weight_bytes=0), "weight_bytes"),
    (lambda: RooflineCost(CFG, None, kv_bytes=INF), "kv_bytes"),
])
def test_cost_models_refuse_nan_and_negative_costs(cost, name):
    with pytest.raises(ValueError, match=name):
        cost()


def test_speculative_decoding_and_its_drafter_refuse_bad_arguments():
    params = decoder.init_params(CFG, 0)
    for gamma in (0, 1.5):
        with pytest.raises(ValueError, match="gamma"):
            speculative_generate(params, CFG, [1, 2], 4, PromptLookup(), gamma=gamma)
    with pytest.raises(ValueError, match="64 positions"):
        speculative_generate(params, CFG, [1, 2], 63, PromptLookup())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        speculative_generate(params, CFG, [1, 40], 4, PromptLookup())
    for ngrams in ((0, 1), (3, 1.5), (2, 3)):
        with pytest.raises(ValueError):
            PromptLookup(*ngrams)


# The valid neighbours still run, and still give the reference's tokens -------------------

def test_none_is_the_default_and_explicit_sizes_give_the_same_tokens():
    V = 97
    trace = [Request(i, [i + 1] * (5 + 3 * i), 6) for i in range(4)]
    expected = {r.id: mock_stream(r.prompt, r.max_new_tokens, V) for r in trace}
    for options in (dict(), dict(num_blocks=None, chunk=None), dict(block_size=1, chunk=1),
                    dict(num_blocks=8, block_size=4, chunk=3, prefix_cache="radix")):
        run = serve(MockEngine(2, 32, V), None, trace, "continuous", **options)
        assert run.outputs() == expected, options
    free = serve(MockEngine(2, 32, V), None, trace, "continuous",
                 timer=CostTimer(LinearCost(0, 0, 0, 0)))      # zero costs are allowed
    assert free.outputs() == expected and free.summary.makespan_s == 0


def test_integer_types_of_numpy_pass_where_python_ints_do():
    r = Request(np.int64(3), np.array([1, 2, 3], np.int32), np.int32(2), arrival_s=np.float32(0),
                seed=np.uint32(7))
    assert r.prompt == (1, 2, 3) and all(type(t) is int for t in r.prompt)
    run = serve(MockEngine(2, 16), None, [r], "continuous", block_size=np.int64(4),
                eos_id=np.int32(5))
    assert run.outputs()[3] == mock_stream((1, 2, 3), 2, 97, eos_id=5)
