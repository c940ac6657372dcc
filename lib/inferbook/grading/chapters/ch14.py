"""Questions of chapter 14, "Mixture of experts: serving sparse models"
(exercises/14_mixture_of_experts.py).

The experts a decode step touches, E·(1 − (1 − k/E)^B), and the weight bytes it reads; the
critical batch of an MoE layer (about E/k times a dense layer's); expert parallelism's
dispatch buffer [E, C, D] and the assignments a capacity drops; latent attention's cache per
token; the batch at which expert parallelism overtakes tensor parallelism; worked problem 6's
weight bytes per chip in the expert-parallel layout; and a top-k router, checked against the
library's `model.moe.route`. (Worked problems 5 and 6 as the source asks them are questions
ch03.wp5_* and ch03.wp6_*, in exercises/02_performance_models.py.)

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from inferbook.model.presets import get_preset

from ..compare import allclose
from ..localize import question_text
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
    from inferbook.perf import collectives
    comms = collectives.expert_parallel_collectives(
        get_preset(MIXTRAL), EP_BATCH, 1, EP_CHIPS, capacity_factor=capacity_factor)
    return next(c.bytes for c in comms if c.scope == "dispatch")


def _capacity() -> int:
    from inferbook.perf import collectives
    return collectives.expert_capacity(CAP_TOKENS, CAP_E, CAP_K, CAP_CF)


def _dropped() -> int:
    from inferbook.perf import collectives
    return collectives.dropped_assignments(CAP_COUNTS, _capacity())


def _k_over_e() -> float:
    """k/E of DeepSeek-V3's experts: a dense layer's critical batch over an MoE layer's."""
    m = get_preset(DEEPSEEK).moe
    return m.k / m.E


def _latent_share() -> float:
    """The latent's share of DeepSeek-V3's cache per token, R_kv / (R_kv + H_rope)."""
    mla = get_preset(DEEPSEEK).mla
    return mla.R_kv / (mla.R_kv + mla.H_rope)


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


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch14.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch14.{question}", template).format(**values)


def _describe_router(args):
    x, w, k = args
    return _say("top_k_router", "x {x}, router {w}, k={k}", x=list(x.shape), w=list(w.shape),
                k=k)


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
            mistakes=[Mistake(lambda r: r * _k_over_e(), "that is a dense layer's critical batch; "
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
            mistakes=[Mistake(lambda r: r * _latent_share(), "the rotary key is cached beside the "
                              "latent: it cannot be decompressed from it"),
                      Mistake(lambda r: r * 2, "latent attention caches no values: the "
                              "latent serves both")]),
    Numeric("ch14.ep_tp_crossover", "Batch from which expert parallelism is faster", 2,
            "moe_layouts.moe_decode_step gives each layout's step, step_cost.step_time prices "
            "its cost; try batches 8, 16, 24, … (whole sequences per chip) and take the first "
            "at which expert-parallel is no slower than 1d-ws",
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


ZH = {
    # titles
    "Experts a DeepSeek-V3 layer touches at batch 32":
        "批次为 32 个词元时 DeepSeek-V3 一层触及的专家数",
    "Weight bytes a Mixtral step of 4 tokens reads": "Mixtral 一步处理 4 个词元时读取的权重字节数",
    "Critical batch of a DeepSeek-V3 MoE layer, H100":
        "DeepSeek-V3 一个 MoE 层的临界批量大小，H100",
    "Bytes of one chip's dispatch buffer": "一块芯片的分发缓冲区的字节数",
    "Slots per expert: 16 tokens, E = 8, k = 2, factor 1":
        "每个专家的槽位数：16 个词元，E = 8，k = 2，容量因子 1",
    "Assignments dropped for those counts": "这些计数下被丢弃的分配数",
    "DeepSeek-V3 cache bytes per token (bf16)": "DeepSeek-V3 每个词元的缓存字节数（bf16）",
    "Batch from which expert parallelism is faster": "专家并行从多大的批次起更快",
    "Worked problem 6: int8 weight bytes per chip": "例题 6：每块芯片上 int8 权重的字节数",
    "A top-k router (Mixtral's rule)": "一个 top-k 路由器（Mixtral 的规则）",
    # hints
    "each token picks a given expert with probability k/E; an expert is missed by all B tokens "
    "with probability (1 − k/E)^B: E·(1 − (1 − k/E)^B)":
        "每个词元以概率 k/E 选中某个给定的专家；一个专家被全部 B 个词元错过的概率是 (1 − k/E)^B："
        "E·(1 − (1 − k/E)^B)",
    "the dense weights, plus each MoE layer's experts times the share the batch touches, "
    "E·(1 − (1 − k/E)^B) / E; bf16":
        "稠密权重，加上每个 MoE 层的专家乘以批次触及的比例 E·(1 − (1 − k/E)^B) / E；bf16",
    "FLOPs 2·k·P_e·B against bytes E_touched(B)·P_e·2 read at W: about E/k times a dense "
    "layer's C/W (bf16 weights and math)":
        "FLOPs 2·k·P_e·B 对比以 W 读取的字节数 E_touched(B)·P_e·2：约为稠密层的 C/W 的 E/k 倍"
        "（bf16 权重和运算）",
    "the buffer is [E, C, D] in bf16, C = ceil(factor · tokens · k / E) for the chip's B / 8 "
    "tokens, full or not":
        "缓冲区是 bf16 的 [E, C, D]，对这块芯片的 B / 8 个词元，"
        "C = ceil(容量因子 · 词元数 · k / E)，不论是否填满",
    "C = ceil(factor · tokens · k / E)": "C = ceil(容量因子 · 词元数 · k / E)",
    "an expert keeps its first C assignments and drops the rest: Σ_e max(0, n_e − C)":
        "一个专家保留它的前 C 个分配，丢弃其余的：Σ_e max(0, n_e − C)",
    "every layer caches the latent (R_kv numbers) and the shared rotary key (H_rope): "
    "L·(R_kv + H_rope)·2":
        "每一层缓存潜在向量（R_kv 个数）和共享的旋转键（H_rope 个数）：L·(R_kv + H_rope)·2",
    "moe_layouts.moe_decode_step gives each layout's step, step_cost.step_time prices its "
    "cost; try batches 8, 16, 24, … (whole sequences per chip) and take the first at which "
    "expert-parallel is no slower than 1d-ws":
        "moe_layouts.moe_decode_step 给出每种布局的一步，step_cost.step_time 由它的成本算出"
        "耗时；依次试批次 8、16、24、…（每块芯片上都是完整的序列），"
        "取专家并行第一次不慢于 1d-ws 的那个批次",
    "experts [E_Z, D, F_Y] over all 128 chips; attention, embeddings and the unembedding over Y "
    "only (heads and D), W_K and W_V over gcd(K, Y); norms and routers whole "
    "(moe_layouts.expert_parallel_param_bytes)":
        "专家 [E_Z, D, F_Y] 分布在全部 128 块芯片上；注意力、嵌入和反嵌入只沿 Y 切分"
        "（注意力头和 D），"
        "W_K 和 W_V 切成 gcd(K, Y) 份；归一化层和路由器保持完整"
        "（moe_layouts.expert_parallel_param_bytes）",
    "softmax of x·W over the E experts (in float32); take the k largest, in decreasing order; "
    "divide their probabilities by their sum. Return (weights [N, k], experts [N, k] as "
    "integers)":
        "在 E 个专家上对 x·W 做 softmax（用 float32）；按从大到小取最大的 k 个；把它们的概率除以"
        "它们的和。返回 (weights [N, k], experts [N, k])，专家编号为整数",
    # known mistakes
    "k·B counts every token's experts as different ones; tokens share experts":
        "k·B 把每个词元的专家都算成了不同的专家；词元之间会共用专家",
    "that is one token's read, the active parameters; four tokens touch more experts":
        "这是一个词元读取的量，即激活参数；四个词元会触及更多专家",
    "a step reads only the experts its tokens were routed to, not all of them":
        "一步只读取它的词元被路由到的那些专家，而不是全部专家",
    "that is a dense layer's critical batch; the experts multiply the bytes by E/k":
        "这是稠密层的临界批量大小；专家让字节数变成 E/k 倍",
    "that is the dropless buffer, C = tokens; the capacity factor sets C":
        "这是不丢弃任何分配的缓冲区，C = 词元数；C 应由容量因子决定",
    "that is k copies of each token with no padding; the buffer keeps C slots for every expert, "
    "full or not":
        "这是每个词元的 k 份副本、不含填充；缓冲区为每个专家保留 C 个槽位，不论是否填满",
    "spare slots of one expert do not take another's tokens: add up only the overflows":
        "一个专家空出的槽位不会接收其他专家的词元：只把溢出的部分加起来",
    "the rotary key is cached beside the latent: it cannot be decompressed from it":
        "旋转键缓存在潜在向量旁边：它无法从潜在向量解压出来",
    "latent attention caches no values: the latent serves both":
        "潜在注意力不缓存值：潜在向量同时充当键和值的来源",
    "that splits every weight 128 ways; in this layout only the experts are":
        "这是把每个权重都切成 128 份；在这种布局中，只有专家是这样切分的",
    # messages of the checks
    "x {x}, router {w}, k={k}": "x {x}，路由器 {w}，k={k}",
}
