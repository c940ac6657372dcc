"""Questions of chapter 14, "Mixture of experts: serving sparse models"
(exercises/14_mixture_of_experts.py).

The experts a decode step touches, E·(1 − (1 − k/E)^B), and the weight bytes it reads; the
critical batch of an MoE layer (about E/k times a dense layer's); expert parallelism's
dispatch buffer [E, C, D] and the assignments a capacity drops; latent attention's cache per
token; the batch at which expert parallelism overtakes tensor parallelism; worked problem 6's
weight bytes per chip in the expert-parallel layout; and a top-k router, checked against the
library's `model.moe.route`. (Worked problems 5 and 6 as the source asks them are questions
ch03.wp5_* and ch03.wp6_*, in exercises/02_performance_models.py.)
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from inferbook.model.presets import get_preset

from ..compare import allclose
from ..questions import Exact, Function, Mistake, Numeric

MIXTRAL, DEEPSEEK, H100, V5E = "mixtral-8x7b", "deepseek-v3", "H100 SXM", "TPU v5e"
B_TOUCH, B_READ = 32, 4                  # batches of the expected-experts and bytes questions
EP_CHIPS, EP_BATCH, CF = 8, 64, 1.25     # the dispatch and crossover questions
CAP_TOKENS, CAP_E, CAP_K, CAP_CF = 16, 8, 2, 1.0
CAP_COUNTS = (7, 5, 4, 4, 3, 3, 3, 3)    # assignments one chip's router sends each expert
WP6 = dict(X=1, Y=8, Z=16)               # worked problem 6's TPU v5e 8x16 slice, int8


def _chip(name: str):
    from inferbook.perf.hardware import get_chip
    return get_chip(name)


def _expert_bytes(cfg, bytes_per_param: float = 2) -> float:
    from inferbook.perf import params
    return sum(t.size for t in params.tensors(cfg) if t.role == "expert") * bytes_per_param


def _touched() -> float:
    from inferbook.perf import params
    m = get_preset(DEEPSEEK).moe
    return params.expected_experts(m.E, m.k, B_TOUCH)


def _read(batch: int = B_READ) -> float:
    from inferbook.perf import counts, estimator
    cfg = get_preset(MIXTRAL)
    return estimator.weight_bytes_read(cfg, counts.param_bytes(cfg, 2), _expert_bytes(cfg),
                                       batch)


def _layer_bcrit() -> float:
    from inferbook.perf import estimator, roofline
    cfg, chip = get_preset(DEEPSEEK), _chip(H100)
    per_expert = 3 * cfg.D * cfg.moe.F
    layer = cfg.moe.E * per_expert * 2
    return estimator.critical_batch_moe(cfg, layer, layer, 2 * cfg.moe.k * per_expert,
                                        roofline.peak_flops_per_s(chip), chip.hbm_bytes_per_s)


def _dispatch_bytes(capacity_factor: float | None = CF) -> float:
    from inferbook.parallel import collectives
    comms = collectives.expert_parallel_collectives(
        get_preset(MIXTRAL), EP_BATCH, 1, EP_CHIPS, capacity_factor=capacity_factor)
    return next(c.bytes for c in comms if c.scope == "dispatch")


def _capacity() -> int:
    from inferbook.parallel import collectives
    return collectives.expert_capacity(CAP_TOKENS, CAP_E, CAP_K, CAP_CF)


def _dropped() -> int:
    from inferbook.parallel import collectives
    return collectives.dropped_assignments(CAP_COUNTS, _capacity())


def _mla_bytes() -> float:
    from inferbook.perf import counts
    return counts.kv_bytes_per_token(get_preset(DEEPSEEK), 2)


def _crossover() -> int:
    from inferbook.perf import moe_layouts
    return moe_layouts.crossover_batch(get_preset(MIXTRAL), _chip(H100), EP_CHIPS,
                                       capacity_factor=CF)


def _wp6_model():
    from inferbook.model.features import MoE
    base = get_preset("scaling-book-18b")
    return base.replace(moe=MoE(E=16, k=2, F=base.F))


def _wp6_bytes() -> float:
    from inferbook.perf import moe_layouts
    return moe_layouts.expert_parallel_param_bytes(_wp6_model(), **WP6, bytes_per_param=1)


def _wp6_even() -> float:
    from inferbook.perf import counts
    return counts.param_bytes(_wp6_model(), 1) / (WP6["X"] * WP6["Y"] * WP6["Z"])


# The coding exercise: a top-k router ----------------------------------------------------------

ROUTER_SHAPES = [(5, 8, 8, 2), (3, 16, 16, 4), (6, 8, 64, 6), (1, 4, 4, 4)]   # N, D, E, k


def _router_cases(rng):
    import jax.numpy as jnp
    cases = []
    for N, D, E, k in ROUTER_SHAPES:
        x = rng.standard_normal((N, D)).astype(np.float32)
        w = (rng.standard_normal((D, E)) / np.sqrt(D)).astype(np.float32)
        cases.append((jnp.asarray(x), jnp.asarray(w), k))
    return cases


@lru_cache(maxsize=None)
def _router_config(E: int, k: int):
    from inferbook.model.config import ModelConfig
    from inferbook.model.features import MoE
    return ModelConfig(L=1, D=8, F=8, N=1, K=1, H=8, V=8, moe=MoE(E=E, k=k, F=8))


def _router_reference(x_ND, w_DE, k):
    from inferbook.model.moe import route
    return route({"router": w_DE}, x_ND, _router_config(int(w_DE.shape[1]), int(k)))


def _describe_router(args):
    x, w, k = args
    return f"x {list(x.shape)}, router {list(w.shape)}, k={k}"


QUESTIONS = [
    Numeric("ch14.experts_touched_v3", "Experts a DeepSeek-V3 layer touches at batch 32", 1,
            "each token picks a given expert with probability k/E; an expert is missed by all "
            "B tokens with probability (1 − k/E)^B: E·(1 − (1 − k/E)^B)",
            reference=_touched, rel_tol=0.005,
            mistakes=[Mistake(lambda r: min(256, 8 * B_TOUCH), "k·B counts every token's "
                              "experts as different ones; tokens share experts")]),
    Numeric("ch14.weights_read_mixtral_b4", "Weight bytes a Mixtral step of 4 tokens reads",
            2, "the dense weights, plus each MoE layer's experts times the share the batch "
               "touches, E·(1 − (1 − k/E)^B) / E; bf16",
            reference=_read, rel_tol=0.005,
            mistakes=[Mistake(lambda r: _read(1), "that is one token's read, the active "
                              "parameters; four tokens touch more experts"),
                      Mistake(lambda r: _read(10 ** 6), "a step reads only the experts its "
                              "tokens were routed to, not all of them")]),
    Numeric("ch14.moe_layer_bcrit_v3", "Critical batch of a DeepSeek-V3 MoE layer, H100", 1,
            "FLOPs 2·k·P_e·B against bytes E_touched(B)·P_e·2 read at W: about E/k times a "
            "dense layer's C/W (bf16 weights and math)",
            reference=_layer_bcrit, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r * 8 / 256, "that is a dense layer's critical batch; "
                              "the experts multiply the bytes by E/k")]),
    Numeric("ch14.dispatch_buffer_bytes", "Bytes of one chip's dispatch buffer", 1,
            "the buffer is [E, C, D] in bf16, C = ceil(factor · tokens · k / E) for the chip's "
            "B / 8 tokens, full or not",
            reference=_dispatch_bytes, rel_tol=0,
            mistakes=[Mistake(lambda r: _dispatch_bytes(None), "that is the dropless buffer, "
                              "C = tokens; the capacity factor sets C"),
                      Mistake(lambda r: EP_BATCH // EP_CHIPS * 2 * get_preset(MIXTRAL).D * 2,
                              "that is k copies of each token with no padding; the buffer "
                              "keeps C slots for every expert, full or not")]),
    Exact("ch14.capacity_slots", "Slots per expert: 16 tokens, E = 8, k = 2, factor 1", 1,
          "C = ceil(factor · tokens · k / E)", reference=_capacity),
    Numeric("ch14.capacity_drops", "Assignments dropped for those counts", 1,
            "an expert keeps its first C assignments and drops the rest: Σ_e max(0, n_e − C)",
            reference=_dropped, rel_tol=0,
            mistakes=[Mistake(lambda r: 0.0, "spare slots of one expert do not take another's "
                              "tokens: add up only the overflows")]),
    Numeric("ch14.mla_cache_bytes_v3", "DeepSeek-V3 cache bytes per token (bf16)", 1,
            "every layer caches the latent (R_kv numbers) and the shared rotary key "
            "(H_rope): L·(R_kv + H_rope)·2",
            reference=_mla_bytes, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * 512 / 576, "the rotary key is cached beside the "
                              "latent: it cannot be decompressed from it"),
                      Mistake(lambda r: r * 2, "latent attention caches no values: the "
                              "latent serves both")]),
    Numeric("ch14.ep_tp_crossover", "Batch from which expert parallelism is faster", 2,
            "moe_layouts.moe_decode_step gives each layout's step; try batches 8, 16, 24, … "
            "(whole sequences per chip) and take the first at which expert-parallel is no "
            "slower than 1d-ws",
            reference=_crossover, rel_tol=0),
    Numeric("ch14.wp6_bytes_per_chip", "Worked problem 6: int8 weight bytes per chip", 1,
            "experts [E_Z, D, F_Y] over all 128 chips; attention, embeddings and the "
            "unembedding over Y only (heads and D), W_K and W_V over gcd(K, Y); norms and "
            "routers whole (moe_layouts.expert_parallel_param_bytes)",
            reference=_wp6_bytes, rel_tol=0.005,
            mistakes=[Mistake(lambda r: _wp6_even(), "that splits every weight 128 ways; in "
                              "this layout only the experts are")]),
    Function("ch14.top_k_router", "A top-k router (Mixtral's rule)", 3,
             "softmax of x·W over the E experts (in float32); take the k largest, in "
             "decreasing order; divide their probabilities by their sum. Return (weights "
             "[N, k], experts [N, k] as integers)",
             library_answers=("inferbook.model.moe.route",),
             reference=_router_reference, cases=_router_cases,
             compare=allclose(1e-5, 1e-6, names=("weights", "experts")),
             describe_case=_describe_router),
]
