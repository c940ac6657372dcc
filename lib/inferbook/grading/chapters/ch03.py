"""Questions of chapter 3, "Latency, throughput and memory" (exercises/02_performance_models.py,
part 2).

The scaling book's inference chapter (seed 000/002, Austin et al. 2025): the step-time quiz,
the LLaMA-2 13B memory and throughput tables, and worked problems 1–7 on its invented 18.4B
model (sizes, batch, load time, the tensor-parallel limit, the mixture-of-experts variant,
expert sharding, 2D weight-stationary communication), plus the step time as a function.
Where the two renderings disagree the questions use the library's formulas and the registry's
chips; the other figure is a `Mistake` with its explanation. Published figures for those
mistakes come from book/data/scaling_book_published.json (never needed for a right answer).

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`).
"""

from __future__ import annotations

import dataclasses
import math

from inferbook.model.presets import get_preset
from inferbook.perf import comm_time, counts, decode_roofline, roofline
from inferbook.perf.step_cost import step_time

from ..compare import allclose
from ..questions import Exact, Function, Mistake, Numeric

V5E, CTX, CHIPS = "TPU v5e", 8192, 8              # the LLaMA-2 13B tables
E, TOP_K, P2_CONTEXT, SLICE = 16, 2, 128_000, 16   # worked problems 2-6
WP6 = dict(X=1, Y=8, Z=16)     # problem 6's 8x16 slice: experts [E_Z, D, F_Y], the rest over Y
WP7 = dict(batch=128, X=8, YZ=32)                   # problem 7 on 256 chips


def _v5e():
    from inferbook.perf.hardware import get_chip
    return get_chip(V5E)


def _published(*keys):
    """A figure of the source (for a Mistake), or NaN if the data file cannot be read."""
    try:
        from inferbook.book import bookdata
        value = bookdata.load("scaling_book_published.json")
        for k in keys:
            value = value[k]
        return float(value)
    except Exception:  # noqa: BLE001 - a missing file must never break a check
        return math.nan


def _quiz(B: int, bandwidth: float | None = None) -> float:
    """The quiz: 30e9 int8 parameters, 100 kB of cache per token, 8,192 tokens, 16 v5e."""
    chip = _v5e() if bandwidth is None else dataclasses.replace(_v5e(), hbm_bytes_per_s=bandwidth)
    return step_time(decode_roofline.decode_step_cost(30e9, 30e9, B * 8192 * 100e3, B), chip, 16)


def _BW81() -> float:
    return _published("v5e_hbm_bytes_per_s_used", "quiz_and_worked_problems")


_QUIZ_BW = ("you used 8.1e11 B/s per chip, the figure the quiz uses; take the registry's "
            "value (inferbook.perf.hardware)")

# LLaMA-2 13B ----------------------------------------------------------------------------------


def _llama():
    return get_preset("llama-2-13b")


def _weights() -> float:
    return counts.param_bytes(_llama())


def _table_step(B: int, K: int | None = None) -> float:
    cfg = _llama()
    kv = counts.kv_cache_bytes(cfg if K is None else cfg.replace(K=K), B, CTX)
    return step_time(decode_roofline.decode_step_cost(counts.param_count(cfg), _weights(), kv, B),
                     _v5e(), CHIPS)


def _gqa_max_batch() -> int:
    per_seq = counts.kv_cache_bytes(_llama().replace(K=8), 1, CTX)
    return math.floor((CHIPS * _v5e().hbm_bytes - _weights()) / per_seq)


def _throughput_ceiling() -> float:
    chip = _v5e()
    kv = counts.kv_cache_bytes(_llama(), 1, CTX) / (CHIPS * chip.hbm_bytes_per_s)
    flops = 2 * counts.param_count(_llama()) / (CHIPS * chip.bf16_flops_per_s)
    return 1 / (kv + flops)


# The worked problems' 18.4B model ---------------------------------------------------------------


def _m18(K: int | None = None):
    cfg = get_preset("scaling-book-18b")
    return cfg if K is None else cfg.replace(K=K)


def _p2(K: int | None = None, context: int = P2_CONTEXT) -> int:
    return roofline.max_batch(_m18(K), _v5e(), context, SLICE, 1, 1)


def _p3() -> float:
    return counts.param_bytes(_m18(), 1) / (SLICE * _v5e().hbm_bytes_per_s)


def _p4_step() -> float:
    kv = _p2() * P2_CONTEXT * counts.kv_bytes_per_token(_m18(), 1)
    return step_time(decode_roofline.lower_bound_step_cost(counts.param_bytes(_m18(), 1), kv),
                     _v5e(), SLICE)


def _moe(experts: int) -> int:
    """Parameters with `experts` MLPs instead of one (all of them, or the active ones)."""
    return counts.param_count(_m18()) + (experts - 1) * counts.param_counts(_m18())["mlp"]


def _wp6_per_chip(split: str = "layout") -> float:
    """int8 weight bytes on one chip of problem 6's slice. "layout": the question's layout,
    the experts over all Y·Z chips and every other weight as the 1D layout splits it over Y
    (`moe_layouts.expert_parallel_param_bytes`); "even": every weight over all the chips;
    "experts over Z": the experts over Z alone (each expert whole), the rest over Y."""
    from inferbook.model.features import MoE
    from inferbook.perf import moe_layouts
    cfg = _m18().replace(moe=MoE(E=E, k=TOP_K, F=_m18().F))
    chips = WP6["X"] * WP6["Y"] * WP6["Z"]
    if split == "even":
        return counts.param_bytes(cfg, 1) / chips
    held = moe_layouts.expert_parallel_param_bytes(cfg, **WP6, bytes_per_param=1)
    if split == "experts over Z":
        experts = E * counts.param_counts(_m18())["mlp"]
        held += experts / WP6["Z"] - experts / chips
    return held


_WP6_EVEN = ("that splits every weight 128 ways; in this layout only the experts are, and "
             "attention and the embeddings are split over the 8 chips of Y alone")
_WP6_Z = ("the experts are split over both axes: 16 groups of experts along Z, and each "
          "expert's F over the 8 chips of Y")


def _wp7_time() -> float:
    return comm_time.ws2d_comm_time(WP7["batch"], _m18().D, _m18().F, WP7["X"], WP7["YZ"],
                            comm_time.ici_bandwidth(_v5e()))


# Coding exercise ------------------------------------------------------------------------------


def _step_cases(rng):
    cases = []
    for _ in range(10):
        params = float(10 ** rng.uniform(9, 12))
        cases.append((params, params * float(rng.choice([0.5, 1, 2])),
                      float(10 ** rng.uniform(6, 12)), int(rng.integers(1, 2048)),
                      float(10 ** rng.uniform(13, 16)), float(10 ** rng.uniform(11, 13))))
    return cases


def _step_reference(params, param_bytes, kv_bytes, batch, flops_per_s, hbm_bytes_per_s):
    from inferbook.perf.hardware import Chip
    chip = Chip("random", hbm_bytes=1e9, hbm_bytes_per_s=hbm_bytes_per_s,
                bf16_flops_per_s=flops_per_s, int8_ops_per_s=None)
    return step_time(decode_roofline.decode_step_cost(params, param_bytes, kv_bytes, batch), chip)


_KEYS_ONLY = ("the close translation's answer: it stores keys but forgets the values; the "
              "cache holds both")

QUESTIONS = [
    Function("ch03.step_time_fn", "Write the general step time", 2,
             "kv_bytes / W + max(2 · batch · params / C, param_bytes / W)",
             library_answers=("inferbook.perf.step_cost.step_time",
                              "inferbook.perf.step_cost.work_time"),
             reference=_step_reference, cases=_step_cases, compare=allclose(1e-9, 0)),
    Numeric("ch03.quiz_step_b4", "Step-time quiz: batch 4", 1,
            "small batch: every weight byte and every cache byte read once, over 16 chips' "
            "bandwidth",
            reference=lambda: _quiz(4), rel_tol=0.005,
            mistakes=[Mistake(lambda r: _quiz(4, _BW81()), _QUIZ_BW)]),
    Numeric("ch03.quiz_step_b256", "Step-time quiz: batch 256", 1,
            "the caches are read at memory speed; the weight matmuls pay the larger of "
            "2·B·P / C and weight bytes / W",
            reference=lambda: _quiz(256), rel_tol=0.005,
            mistakes=[Mistake(lambda r: _quiz(256, _BW81()), _QUIZ_BW)]),
    Numeric("ch03.llama_2_13b_params", "Parameters of LLaMA-2 13B", 1,
            "MLP 3·D·F·L, attention (2·D·N·H + 2·D·K·H)·L, embedding and unembedding 2·V·D, "
            "norm gains (2L + 1)·D",
            reference=lambda: counts.param_count(_llama()), rel_tol=0.001),
    Numeric("ch03.kv_8k_llama_2_13b", "Cache of one 8,192-token sequence, LLaMA-2 13B, bf16",
            1, "2 · bytes · H · K · L · T",
            reference=lambda: counts.kv_cache_bytes(_llama(), 1, CTX), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * 2 ** 30 / 1e9, "the table is labelled GiB but "
                              "holds decimal GB; the answer is in bytes"),
                      Mistake(lambda r: r / 2, "keys and values: two vectors per head")]),
    Exact("ch03.caches_exceed_weights", "How many 8k caches outweigh the weights?", 1,
          "the smallest whole number of caches whose bytes exceed the bf16 weight bytes",
          reference=lambda: math.ceil(_weights() / counts.kv_cache_bytes(_llama(), 1, CTX))),
    Numeric("ch03.activation_8k", "One [T, D] bf16 activation of an 8,192-token prefill", 1,
            "T · D · 2 bytes", reference=lambda: CTX * _llama().D * 2, rel_tol=0.005),
    Numeric("ch03.llama_2_13b_max_batch", "Largest batch of 8k sequences on 8 TPU v5e", 1,
            "(8 · HBM − weight bytes) / bytes of one sequence's cache, rounded down",
            reference=lambda: roofline.max_batch(_llama(), _v5e(), CTX, CHIPS), rel_tol=0,
            mistakes=[Mistake(lambda r: r + 1, "that batch needs more than the slice's "
                              "memory: count weights and caches together, and round down")]),
    Numeric("ch03.llama_2_13b_step_b64", "Step time at batch 64 (if memory allowed)", 1,
            "the general step time with 8 chips' bandwidth and FLOP/s",
            reference=lambda: _table_step(64), rel_tol=0.01),
    Numeric("ch03.gqa_step_b240", "Step time at batch 240 with 8 KV heads", 1,
            "the same weights; the cache per token shrinks by N/K = 5",
            reference=lambda: _table_step(240, 8), rel_tol=0.01),
    Numeric("ch03.gqa_max_batch", "Largest batch of 8k sequences with 8 KV heads", 1,
            "keep LLaMA-2 13B's weights; only the cache per sequence shrinks",
            reference=_gqa_max_batch, rel_tol=0),
    Numeric("ch03.throughput_ceiling", "Tokens/s as the batch grows without bound (K = 40)", 1,
            "B / step time tends to 1 / (cache bytes per sequence / W + 2P / C)",
            reference=_throughput_ceiling, rel_tol=0.01,
            mistakes=[Mistake(lambda r: CHIPS * _v5e().hbm_bytes_per_s
                              / counts.kv_cache_bytes(_llama(), 1, CTX),
                              "that counts only the caches; each token also costs 2P FLOPs")]),
    Numeric("ch03.wp1_params", "Worked problem 1: parameters of the 18.4B model", 1,
            "L·D·(3F + 2H·(N + K)) + D·V (tied embeddings) + the norms",
            reference=lambda: counts.param_count(_m18()), rel_tol=0.005),
    Numeric("ch03.wp1_kv_int8", "Worked problem 1: int8 cache bytes per token", 1,
            "2·L·K·H elements of one byte", reference=lambda: counts.kv_bytes_per_token(_m18(), 1),
            rel_tol=0.005, mistakes=[Mistake(lambda r: r / 2, _KEYS_ONLY)]),
    Numeric("ch03.wp2_max_batch", "Worked problem 2: largest batch at 128k (128,000) tokens",
            1, "(16 chips · HBM − int8 weights) / (128,000 · cache bytes per token), rounded "
            "down", reference=_p2, rel_tol=0,
            mistakes=[Mistake(lambda r: _p2(context=131072), "that is for 131,072 tokens; "
                              "this question takes 128k to mean 128,000"),
                      Mistake(lambda r: _published("worked_problems", "p2_max_batch", "000"),
                              "the close translation's 14 inherits its slip of problem 1")]),
    Numeric("ch03.wp2_max_batch_k1", "Worked problem 2: the same with one KV head", 1,
            "K = 1 also shrinks W_K and W_V a little; use the K = 1 model's own weights",
            reference=lambda: _p2(1), rel_tol=0,
            mistakes=[Mistake(lambda r: _published("worked_problems", "p2_max_batch_k1", "000"),
                              _KEYS_ONLY)]),
    Numeric("ch03.wp3_load_time", "Worked problem 3: read every int8 weight once", 1,
            "int8 weight bytes / (16 · HBM bandwidth)", reference=_p3, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * 18e9 / counts.param_count(_m18()), "you rounded "
                              "the parameters to 18e9, as the close translation does"),
                      Mistake(lambda r: r * _v5e().hbm_bytes_per_s / _BW81(), _QUIZ_BW)]),
    Numeric("ch03.wp4_mp_limit_b32", "Worked problem 4: tensor-parallel limit at batch 32", 1,
            "decode stops hiding the AllReduce at Y = F / (B·β), β = W_hbm / W_ici, W_ici = "
            "comm_time.ici_bandwidth(chip)",
            reference=lambda: comm_time.model_parallel_limit(_m18().F, 32, _v5e()), rel_tol=0.01,
            mistakes=[Mistake(lambda r: _m18().F / (32 * 8), "you used β ≈ 8 as the source "
                              "does; compute it from the registry")]),
    Numeric("ch03.wp4_step_floor", "Worked problem 4: step-time floor at problem 2's batch",
            1, "(int8 weights + batch · 128,000 · int8 cache per token) / (16 · W)",
            reference=_p4_step, rel_tol=0.01,
            mistakes=[Mistake(lambda r: _p3(), "the caches must be read at every step too")]),
    Numeric("ch03.wp5_total_params", "Worked problem 5: parameters of the E = 16 MoE", 1,
            "E copies of the MLP, everything else once", reference=lambda: _moe(E),
            rel_tol=0.005),
    Numeric("ch03.wp5_active_params", "Worked problem 5: active parameters (k = 2)", 1,
            "k copies of the MLP are used per token", reference=lambda: _moe(TOP_K),
            rel_tol=0.005),
    Numeric("ch03.wp5_bcrit", "Worked problem 5: tokens per step for the MoE layers to be "
            "FLOP-bound", 1,
            "E/k times the dense B_crit: the bytes grow E-fold, the FLOPs k-fold (int8 "
            "weights and int8 math)",
            reference=lambda: roofline.critical_batch(_v5e(), 1, "int8") * E / TOP_K, rel_tol=0.01,
            mistakes=[Mistake(lambda r: roofline.critical_batch(_v5e(), 1, "int8") * _moe(E)
                              / _moe(TOP_K), "that is the whole step's (total over active "
                              "parameters times the dense B_crit): its dense attention and "
                              "embeddings bring it down; the question asks for the MoE layers")]),
    Numeric("ch03.wp5_kv_int8", "Worked problem 5: int8 cache bytes per token of the MoE", 1,
            "the experts replace the MLP; attention, and so the cache, is untouched",
            reference=lambda: counts.kv_bytes_per_token(_m18(), 1), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _KEYS_ONLY),
                      Mistake(lambda r: r * E / TOP_K, "the cache does not grow with the "
                              "experts: only the MLP is copied")]),
    Numeric("ch03.wp5_flops_per_token", "Worked problem 5: forward FLOPs per token", 1,
            "2 · active parameters (the 2P rule)", reference=lambda: 2 * _moe(TOP_K),
            rel_tol=0.01,
            mistakes=[Mistake(lambda r: 2 * _published("worked_problems",
                                                       "p5_forward_flops_active_param_000"),
                              "the close translation's 32.2e9 contradicts its own count")]),
    Numeric("ch03.wp6_load_time", "Worked problem 6: weight load time on an 8×16 slice", 1,
            "each chip reads its own int8 weights at its bandwidth: 1/128 of the experts, "
            "1/8 of everything else",
            reference=lambda: _wp6_per_chip() / _v5e().hbm_bytes_per_s, rel_tol=0.01,
            mistakes=[Mistake(lambda r: _wp6_per_chip("even") / _v5e().hbm_bytes_per_s,
                              _WP6_EVEN),
                      Mistake(lambda r: _wp6_per_chip("experts over Z")
                              / _v5e().hbm_bytes_per_s, _WP6_Z)]),
    Numeric("ch03.wp6_free_hbm", "Worked problem 6: HBM left per chip on the 8×16 slice", 1,
            "each chip's memory minus its int8 weights: 1/128 of the experts, 1/8 of "
            "everything else",
            reference=lambda: _v5e().hbm_bytes - _wp6_per_chip(), rel_tol=0.005,
            mistakes=[Mistake(lambda r: _v5e().hbm_bytes - _wp6_per_chip("even"), _WP6_EVEN),
                      Mistake(lambda r: _v5e().hbm_bytes - _wp6_per_chip("experts over Z"),
                              _WP6_Z)]),
    Numeric("ch03.wp6_min_chips", "Worked problem 6: fewest v5e chips that hold the MoE", 1,
            "int8 weights / 16 GB, rounded up (weights only)",
            reference=lambda: math.ceil(_moe(E) / _v5e().hbm_bytes), rel_tol=0),
    Numeric("ch03.wp7_comm_time", "Worked problem 7: 2D communication time of one MLP", 1,
            "2·B·D/(X·W_ici) + 4·B·F/(YZ·W_ici) for bf16, W_ici = comm_time.ici_bandwidth",
            reference=_wp7_time, rel_tol=0.01),
    Numeric("ch03.wp7_optimal_x", "Worked problem 7: the best X for 256 chips", 1,
            "minimise D/X + 2F·X/n over X: X = sqrt(n·D / (2F))",
            reference=lambda: comm_time.ws2d_optimal_x(256, _m18().D, _m18().F), rel_tol=0.01),
    Numeric("ch03.wp7_crossover", "Worked problem 7: chips beyond which 2D beats 1D (F = 4D)",
            1, "set 4·B·D/(3·W) equal to the optimum 2·B·sqrt(2·D·F/n)/W and solve for n",
            reference=lambda: comm_time.ws2d_crossover_chips(_m18().D, _m18().F), rel_tol=0.01,
            mistakes=[Mistake(lambda r: r * 9 / 8, "the source prints 81, but its own "
                              "formula 128·(3/4)² gives 72")]),
]

ZH = {
    # titles
    "Write the general step time": "写出一般形式的步骤时间",
    "Step-time quiz: batch 4": "步骤时间小测：批次 4",
    "Step-time quiz: batch 256": "步骤时间小测：批次 256",
    "Parameters of LLaMA-2 13B": "LLaMA-2 13B 的参数量",
    "Cache of one 8,192-token sequence, LLaMA-2 13B, bf16":
        "LLaMA-2 13B 一个 8,192 个词元的序列的缓存，bf16",
    "How many 8k caches outweigh the weights?": "多少个 8k 缓存就比权重还大？",
    "One [T, D] bf16 activation of an 8,192-token prefill":
        "8,192 个词元的预填充中的一个 [T, D] bf16 激活值",
    "Largest batch of 8k sequences on 8 TPU v5e": "8 个 TPU v5e 上 8k 序列的最大批次",
    "Step time at batch 64 (if memory allowed)": "批次 64 时的步骤时间（假如内存允许）",
    "Step time at batch 240 with 8 KV heads": "8 个 KV 头、批次 240 时的步骤时间",
    "Largest batch of 8k sequences with 8 KV heads": "8 个 KV 头时 8k 序列的最大批次",
    "Tokens/s as the batch grows without bound (K = 40)": "批次无限增大时的词元/秒（K = 40）",
    "Worked problem 1: parameters of the 18.4B model": "例题 1：18.4B 模型的参数量",
    "Worked problem 1: int8 cache bytes per token": "例题 1：每个词元的 int8 缓存字节数",
    "Worked problem 2: largest batch at 128k (128,000) tokens":
        "例题 2：128k（128,000）个词元时的最大批次",
    "Worked problem 2: the same with one KV head": "例题 2：同一问题，但只有一个 KV 头",
    "Worked problem 3: read every int8 weight once": "例题 3：把每个 int8 权重读一遍",
    "Worked problem 4: tensor-parallel limit at batch 32": "例题 4：批次 32 时张量并行的极限",
    "Worked problem 4: step-time floor at problem 2's batch":
        "例题 4：例题 2 的批次下步骤时间的下限",
    "Worked problem 5: parameters of the E = 16 MoE": "例题 5：E = 16 的 MoE 的参数量",
    "Worked problem 5: active parameters (k = 2)": "例题 5：激活参数量（k = 2）",
    "Worked problem 5: tokens per step for the MoE layers to be FLOP-bound":
        "例题 5：MoE 层达到计算受限所需的每步词元数",
    "Worked problem 5: int8 cache bytes per token of the MoE":
        "例题 5：这个 MoE 每个词元的 int8 缓存字节数",
    "Worked problem 5: forward FLOPs per token": "例题 5：每个词元前向计算的 FLOPs",
    "Worked problem 6: weight load time on an 8×16 slice": "例题 6：8×16 切片上的权重加载时间",
    "Worked problem 6: HBM left per chip on the 8×16 slice":
        "例题 6：8×16 切片上每个芯片剩下的 HBM",
    "Worked problem 6: fewest v5e chips that hold the MoE":
        "例题 6：放得下这个 MoE 的最少 v5e 芯片数",
    "Worked problem 7: 2D communication time of one MLP": "例题 7：一个 MLP 的 2D 通信时间",
    "Worked problem 7: the best X for 256 chips": "例题 7：256 个芯片时最好的 X",
    "Worked problem 7: chips beyond which 2D beats 1D (F = 4D)":
        "例题 7：芯片数超过多少时 2D 胜过 1D（F = 4D）",
    # hints
    "kv_bytes / W + max(2 · batch · params / C, param_bytes / W)":
        "步骤时间 = kv_bytes / W + max(2 · batch · params / C, param_bytes / W)",
    "small batch: every weight byte and every cache byte read once, over 16 chips' bandwidth":
        "小批次：每个权重字节和每个缓存字节都读一次，除以 16 个芯片的带宽",
    "the caches are read at memory speed; the weight matmuls pay the larger of 2·B·P / C and "
    "weight bytes / W":
        "缓存以内存的速度读取；权重矩阵乘法取 2·B·P / C 与权重字节数 / W 中较大的那个",
    "MLP 3·D·F·L, attention (2·D·N·H + 2·D·K·H)·L, embedding and unembedding 2·V·D, norm "
    "gains (2L + 1)·D":
        "MLP 3·D·F·L，注意力 (2·D·N·H + 2·D·K·H)·L，嵌入和反嵌入 2·V·D，归一化增益 "
        "(2L + 1)·D",
    "2 · bytes · H · K · L · T": "2 · 字节数 · H · K · L · T",
    "the smallest whole number of caches whose bytes exceed the bf16 weight bytes":
        "字节数超过 bf16 权重字节数的最少缓存个数（一个整数）",
    "T · D · 2 bytes": "T · D · 2 字节",
    "(8 · HBM − weight bytes) / bytes of one sequence's cache, rounded down":
        "（8 · HBM − 权重字节数）/ 一个序列的缓存字节数，向下取整",
    "the general step time with 8 chips' bandwidth and FLOP/s":
        "用 8 个芯片的带宽和 FLOP/s 计算一般形式的步骤时间",
    "the same weights; the cache per token shrinks by N/K = 5":
        "权重相同；每个词元的缓存除以 N/K = 5",
    "keep LLaMA-2 13B's weights; only the cache per sequence shrinks":
        "保留 LLaMA-2 13B 的权重；变小的只有每个序列的缓存",
    "B / step time tends to 1 / (cache bytes per sequence / W + 2P / C)":
        "B / 步骤时间趋于 1 / (每个序列的缓存字节数 / W + 2P / C)",
    "L·D·(3F + 2H·(N + K)) + D·V (tied embeddings) + the norms":
        "L·D·(3F + 2H·(N + K)) + D·V（嵌入与反嵌入共享）+ 归一化层",
    "2·L·K·H elements of one byte": "2·L·K·H 个元素，每个 1 字节",
    "(16 chips · HBM − int8 weights) / (128,000 · cache bytes per token), rounded down":
        "（16 个芯片 · HBM − int8 权重）/（128,000 · 每个词元的缓存字节数），向下取整",
    "K = 1 also shrinks W_K and W_V a little; use the K = 1 model's own weights":
        "K = 1 也让 W_K 和 W_V 稍稍变小；用 K = 1 的模型自己的权重",
    "int8 weight bytes / (16 · HBM bandwidth)": "int8 权重字节数 / (16 · HBM 带宽)",
    "decode stops hiding the AllReduce at Y = F / (B·β), β = W_hbm / W_ici, W_ici = "
    "comm_time.ici_bandwidth(chip)":
        "在 Y = F / (B·β) 处，解码中的 AllReduce（全规约）不再能被计算掩盖，其中 "
        "β = W_hbm / W_ici，W_ici = comm_time.ici_bandwidth(chip)",
    "(int8 weights + batch · 128,000 · int8 cache per token) / (16 · W)":
        "（int8 权重 + 批次 · 128,000 · 每个词元的 int8 缓存）/ (16 · W)",
    "E copies of the MLP, everything else once": "MLP 有 E 份，其余部分各一份",
    "k copies of the MLP are used per token": "每个词元用到 k 份 MLP",
    "E/k times the dense B_crit: the bytes grow E-fold, the FLOPs k-fold (int8 weights and "
    "int8 math)":
        "稠密模型 B_crit 的 E/k 倍：字节数变为 E 倍，FLOPs 变为 k 倍（int8 权重和 int8 运算）",
    "the experts replace the MLP; attention, and so the cache, is untouched":
        "专家替换的是 MLP；注意力不变，所以缓存也不变",
    "2 · active parameters (the 2P rule)": "2 · 激活参数量（2P 法则）",
    "each chip reads its own int8 weights at its bandwidth: 1/128 of the experts, 1/8 of "
    "everything else":
        "每个芯片以自己的带宽读取它自己的 int8 权重：专家的 1/128，其余一切的 1/8",
    "each chip's memory minus its int8 weights: 1/128 of the experts, 1/8 of everything else":
        "每个芯片的内存，减去它的 int8 权重：专家的 1/128，其余一切的 1/8",
    "that is the whole step's (total over active parameters times the dense B_crit): its dense "
    "attention and embeddings bring it down; the question asks for the MoE layers":
        "那是整个步骤的（总参数与激活参数之比乘以稠密模型的 B_crit）：它稠密的注意力和嵌入"
        "把它拉低了；题目问的是 MoE 层",
    "that splits every weight 128 ways; in this layout only the experts are, and attention and "
    "the embeddings are split over the 8 chips of Y alone":
        "那是把每个权重都分成 128 份；在这种布局中只有专家是这样分的，注意力和嵌入只沿 Y 的"
        " 8 个芯片切分",
    "the experts are split over both axes: 16 groups of experts along Z, and each expert's F "
    "over the 8 chips of Y":
        "专家沿两个轴切分：沿 Z 分成 16 组专家，每个专家的 F 再沿 Y 的 8 个芯片切分",
    "int8 weights / 16 GB, rounded up (weights only)": "int8 权重 / 16 GB，向上取整（只算权重）",
    "2·B·D/(X·W_ici) + 4·B·F/(YZ·W_ici) for bf16, W_ici = comm_time.ici_bandwidth":
        "bf16 下为 2·B·D/(X·W_ici) + 4·B·F/(YZ·W_ici)，其中 W_ici = comm_time.ici_bandwidth",
    "minimise D/X + 2F·X/n over X: X = sqrt(n·D / (2F))":
        "对 X 最小化 D/X + 2F·X/n：X = sqrt(n·D / (2F))",
    "set 4·B·D/(3·W) equal to the optimum 2·B·sqrt(2·D·F/n)/W and solve for n":
        "令 4·B·D/(3·W) 等于最优值 2·B·sqrt(2·D·F/n)/W，解出 n",
    # known mistakes
    _QUIZ_BW: "你用的是每个芯片 8.1e11 B/s，即小测所用的数字；请取注册表中的值"
              "（inferbook.perf.hardware）",
    _KEYS_ONLY: "这是直译本的答案：它存了键，却忘了值；缓存两者都存",
    "the table is labelled GiB but holds decimal GB; the answer is in bytes":
        "表格标的是 GiB，里面却是十进制的 GB；答案以字节为单位",
    "keys and values: two vectors per head": "键和值：每个头两个向量",
    "that batch needs more than the slice's memory: count weights and caches together, and "
    "round down":
        "这个批次所需的内存超过了切片的全部内存：把权重和缓存加在一起算，并向下取整",
    "that counts only the caches; each token also costs 2P FLOPs":
        "这只算了缓存；每个词元还要花 2P FLOPs",
    "that is for 131,072 tokens; this question takes 128k to mean 128,000":
        "这是 131,072 个词元的答案；本题把 128k 理解为 128,000",
    "the close translation's 14 inherits its slip of problem 1":
        "直译本的 14 沿袭了它在例题 1 中的笔误",
    "you rounded the parameters to 18e9, as the close translation does":
        "你像直译本那样把参数量凑成了 18e9",
    "you used β ≈ 8 as the source does; compute it from the registry":
        "你像原文那样用了 β ≈ 8；请用注册表中的值算出它",
    "the caches must be read at every step too": "每一步也都要读取缓存",
    "the cache does not grow with the experts: only the MLP is copied":
        "缓存不随专家增多而增长：被复制的只有 MLP",
    "the close translation's 32.2e9 contradicts its own count":
        "直译本的 32.2e9 与它自己的计数相矛盾",
    "the source prints 81, but its own formula 128·(3/4)² gives 72":
        "原文印的是 81，但它自己的公式 128·(3/4)² 得出的是 72",
}
