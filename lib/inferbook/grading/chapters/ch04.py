"""Questions of chapter 4, "Transformer inference arithmetic" (exercises/02_performance_models.py,
part 3).

kipply's post (seed 004, Chen 2022) section by section — the cache's FLOPs against its bytes,
capacity, tensor-parallel communication, small- and large-batch latency, FLOP counting and
intermediate memory — and her twelve exercises wherever they have a number to check (1–11;
the twelfth, on sharding embeddings, has none). The convention throughout is the library's:
the registry's A100 40GB (datasheet bandwidth 1.555e12 B/s) and the presets' exact parameter
counts; her round figures (1.5e12 B/s, 52e9 and 260e9 parameters) are `Mistake`s, read from
book/data/kipply_assumptions.json when a wrong answer needs explaining.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`).
"""

from __future__ import annotations

import dataclasses
import math

from inferbook.model.presets import get_preset
from inferbook.perf import counts, decode_roofline, latency, phase_time, roofline
from inferbook.perf.step_cost import step_time, work_time

from ..compare import allclose
from ..questions import Exact, Function, Mistake, Numeric

A100 = "A100 40GB"
SAMPLE_CONTEXT, SAMPLE_NEW = 512, 10      # kipply's FasterTransformer runs (exercise 5)
AWS_BITS_PER_S = 400e9                   # exercise 8: "AWS has 400 Gb/s"


def _a100():
    from inferbook.perf.hardware import get_chip
    return get_chip(A100)


def _m52():
    return get_preset("kipply-52b")


def _gopher():
    return get_preset("gopher-280b")


def _hers(*keys) -> float:
    """A figure kipply assumes or prints (for a Mistake), or NaN if the file cannot be read."""
    try:
        from inferbook.book import bookdata
        value = bookdata.load("kipply_assumptions.json")
        for k in keys:
            value = value[k]
        return float(value)
    except Exception:  # noqa: BLE001 - a missing file must never break a check
        return math.nan


def _her_a100():
    return dataclasses.replace(_a100(), hbm_bytes_per_s=_hers("assumed_a100", "hbm_bytes_per_s"))


def _capacity_hers(gpus: int) -> float:
    free = gpus * _a100().hbm_bytes - 2 * _hers("round_parameter_counts", "kipply-52b")
    return math.floor(free / counts.kv_bytes_per_token(_m52()))


def _forward_memory_bound_while_steps_flop_bound() -> bool:
    """Exercise 3 for the weight matmuls of the 52B model on one A100: is there a batch B and
    context T with the forward pass over B·T tokens memory-bound but a step of B tokens
    FLOP-bound? (2·N·P FLOPs for N tokens against the weight bytes.)"""
    chip = _a100()
    P, nbytes = counts.param_count(_m52()), counts.param_bytes(_m52())
    flop_bound = lambda n: 2 * n * P / chip.bf16_flops_per_s >= nbytes / chip.hbm_bytes_per_s  # noqa: E731
    return any(flop_bound(B) and not flop_bound(B * T)
               for B in range(1, 513) for T in (1, 2, 16, 512, 2048))


def _sample_time() -> float:
    """Exercise 5: prefill the context, then SAMPLE_NEW decode steps against a growing cache."""
    cfg, chip = get_preset("kipply-13b"), _a100()
    P, pbytes = counts.param_count(cfg), counts.param_bytes(cfg)
    steps = sum(step_time(decode_roofline.decode_step_cost(
                    P, pbytes, counts.kv_cache_bytes(cfg, 1, SAMPLE_CONTEXT + j), 1), chip)
                for j in range(SAMPLE_NEW))
    return step_time(phase_time.prefill_step_cost(cfg, SAMPLE_CONTEXT), chip) + steps


def _small_batch(cfg, chips: int) -> tuple[float, float, float]:
    """kipply's small-batch step on `chips` A100s: (step, weight-load time, comms)."""
    cost, chip = latency.small_batch_cost(cfg, _a100(), chips), _a100()
    return step_time(cost, chip, chips), work_time(cost, chip, chips), cost.comm_s


def _large_batch(cfg, chips: int, batch: int) -> tuple[float, float, float]:
    """kipply's large-batch step on `chips` A100s: (step, FLOP time, comms)."""
    cost, chip = latency.large_batch_cost(cfg, _a100(), chips, batch), _a100()
    return step_time(cost, chip, chips), work_time(cost, chip, chips), cost.comm_s


def _narrow():
    return _m52().replace(D=512, F=2048, N=4, K=4, H=128)


# Coding exercise: the FLOPs a KV cache saves (exercise 1) --------------------------------------


def _saved_cases(rng):
    names = ["kipply-52b", "kipply-13b", "llama-2-7b", "llama-3-8b", "falcon-7b", "tiny"]
    return [(get_preset(str(rng.choice(names))), int(rng.integers(1, 65)),
             int(rng.integers(0, 4097)), int(rng.integers(1, 257))) for _ in range(8)]


def _saved_reference(cfg, batch, context, next_n):
    return batch * sum(latency.kv_flops_saved(cfg, context + j) for j in range(next_n))


def _describe_saved(args):
    cfg, batch, context, next_n = args
    return f"{cfg.name}, batch={batch}, context={context}, next_n={next_n}"


_ELEMENTS = "that counts numbers, not bytes: each is 2 bytes in bfloat16"
_HER_BW = ("you used 1.5e12 B/s, the post's A100 bandwidth; the datasheet (and the "
           "registry) say 1.555e12")

QUESTIONS = [
    Numeric("ch04.kv_bytes_per_token_52b", "Cache bytes per token of the 52B model", 1,
            "2 (keys and values) · L · K·H · 2 bytes; K·H = D for this model",
            reference=lambda: counts.kv_bytes_per_token(_m52()), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _ELEMENTS)]),
    Numeric("ch04.flops_per_byte_a100", "The A100's flops-to-bandwidth ratio", 1,
            "peak bf16 FLOP/s over memory bytes/s of the A100 40GB, from the registry",
            reference=lambda: latency.break_even_tokens(_a100()), rel_tol=0.005,
            mistakes=[Mistake(lambda r: latency.break_even_tokens(_her_a100()), _HER_BW),
                      Mistake(lambda r: 1 / r, "the ratio is FLOPs per byte: FLOP/s on top "
                              "(the post writes the fraction upside down)")]),
    Exact("ch04.min_gpus_52b", "Fewest A100 40GB that hold the 52B weights", 1,
          "bf16 weight bytes / 40 GB, rounded up",
          reference=lambda: latency.min_chips_for_weights(_m52(), _a100())),
    Numeric("ch04.capacity_4_gpus", "Tokens of cache beside the 52B weights on 4 A100s", 1,
            "(4 · 40e9 − the preset's bf16 weight bytes) / cache bytes per token, rounded down",
            reference=lambda: latency.kv_capacity_tokens(_m52(), _a100(), 4), rel_tol=0.005,
            mistakes=[Mistake(lambda r: _capacity_hers(4), "that uses 52e9 parameters; count "
                              "the preset's parameters exactly"),
                      Mistake(lambda r: _hers("published_results", "capacity_tokens_4_gpus"),
                              "the post's 23,000 divides rounded gigabytes; count bytes")]),
    Numeric("ch04.batch_3_gpus", "Largest batch of 2,048-token sequences on 3 A100s (52B)", 1,
            "tokens of cache that fit on 3 GPUs, divided by 2,048, rounded down",
            reference=lambda: roofline.max_batch(_m52(), _a100(), 2048, 3), rel_tol=0),
    Numeric("ch04.comm_bytes_4_gpus", "Bytes each GPU sends per token per step (52B, 4 GPUs)",
            1, "4 collectives per layer, each (N − 1)/N · D numbers of 2 bytes",
            reference=lambda: latency.tp_comm_bytes_per_token(_m52(), 4), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _ELEMENTS),
                      Mistake(lambda r: 4 * r / 3, "keep the exact (N − 1)/N here")]),
    Numeric("ch04.gopher_small_batch", "Small-batch latency of the 260B model on 16 A100s", 1,
            "P·2 bytes / (16 · bandwidth) + 4·L · 8 µs (the chip's hop_latency_s)",
            reference=lambda: _small_batch(_gopher(), 16)[0],
            rel_tol=0.01,
            mistakes=[Mistake(lambda r: r + _small_batch(
                _gopher(), 16)[2], "the post writes 2·4·L·8 µs; its formula "
                "4·L·latency counts each message once")]),
    Numeric("ch04.gopher_large_batch", "Large-batch latency of the 260B model at batch 512", 1,
            "the larger of batch·2·P / (16 · FLOP/s) and the communication time",
            reference=lambda: _large_batch(_gopher(), 16, 512)[0], rel_tol=0.01),
    Numeric("ch04.flops_per_token_24d2", "kipply's FLOPs per token of the 52B model", 1,
            "24·D² per layer: 2 FLOPs × (4·D² attention + 8·D² MLP weights)",
            reference=lambda: counts.approx_flops_per_token(_m52()), rel_tol=0.005),
    Numeric("ch04.intermediate_share_52b", "Share of the step left to element-wise work at "
            "D = 8,192 (43% at D = 1,024)", 1,
            "element-wise time grows like D, matmul time like D²: s·r / (s·r + (1 − s)·r²)",
            reference=lambda: latency.intermediate_share_at_width(0.43, 1024, 8192),
            rel_tol=0.01,
            mistakes=[Mistake(lambda r: latency.intermediate_share_approx(0.43, 1024, 8192),
                              "the post's 5% divides by the old matmul time as if it were "
                              "the whole step; the matmuls took 1 − s of it")]),
    Function("ch04.kv_flops_saved_fn", "Exercise 1: FLOPs a KV cache saves", 3,
             "decode step j (j = 0 … next_n − 1) would recompute the keys and values of "
             "context + j earlier tokens, 2·2·L·D·(K·H) FLOPs each, for every sequence",
             library_answers=("inferbook.perf.latency.kv_flops_saved",),
             reference=_saved_reference, cases=_saved_cases, compare=allclose(1e-9, 0),
             describe_case=_describe_saved),
    Numeric("ch04.ex2_kv_read_time", "Exercise 2: time to read the cache per step (52B, "
            "4 A100s, batch 4, 2,048 tokens)", 1,
            "batch · context · cache bytes per token / (4 · memory bandwidth)",
            reference=lambda: counts.kv_cache_bytes(_m52(), 4, 2048)
            / (4 * _a100().hbm_bytes_per_s), rel_tol=0.01,
            mistakes=[Mistake(lambda r: 4 * r, "the cache is split over the 4 GPUs, and so "
                              "is its read")]),
    Exact("ch04.ex3_forward_memory_steps_flops",
          "Exercise 3: forward pass memory-bound, sampling steps FLOP-bound?", 1,
          "a forward pass over T context tokens multiplies each weight by B·T tokens, a "
          "sampling step by B",
          reference=_forward_memory_bound_while_steps_flop_bound, choices=(True, False)),
    Numeric("ch04.ex4_latency_16_gpus", "Exercise 4: small-batch latency of 52B on 16 GPUs",
            1, "weights over 16 GPUs' bandwidth, plus 4·L message latencies that do not "
            "shrink with more GPUs",
            reference=lambda: _small_batch(_m52(), 16)[0],
            rel_tol=0.01,
            mistakes=[Mistake(lambda r: _small_batch(_m52(), 16)[1],
                              "add the 4·L message latencies")]),
    Numeric("ch04.ex5_sample_time", "Exercise 5: a whole sample, 13B on one A100", 2,
            "step_time of phase_time.prefill_step_cost for the 512-token context, then 10 "
            "steps: step j (j = 0 … 9) is step_time of decode_roofline.decode_step_cost with "
            "the cache of 512 + j tokens",
            reference=_sample_time, rel_tol=0.01),
    Numeric("ch04.ex6_intermediate_share", "Exercise 6: the MLP hidden activation of a "
            "2,048-token prefill, as a fraction of the weights (52B)", 1,
            "[T, F] in bf16 is T·F·2 bytes; divide by the bf16 weight bytes",
            reference=lambda: 2048 * _m52().F * 2 / counts.param_bytes(_m52()), rel_tol=0.01),
    Numeric("ch04.ex7_narrow_o_per_gpu", "Exercise 7: FLOPs per byte sent by the output "
            "projection, D = 512, per GPU of 2", 1,
            "a [B, D] activation (2 bytes each) feeds 2·B·D·D FLOPs; split over 2 GPUs",
            reference=lambda: latency.flops_per_comm_byte(_narrow())["o"] / 2,
            rel_tol=0.01,
            mistakes=[Mistake(lambda r: 2 * r, "each GPU does half of the FLOPs")]),
    Numeric("ch04.ex8_aws_comm_intensity", "Exercise 8: FLOPs per byte an A100 must do to "
            "hide a 400 Gb/s link", 1,
            "bf16 FLOP/s over the link's bytes per second; Gb is gigabits",
            reference=lambda: _a100().bf16_flops_per_s / (AWS_BITS_PER_S / 8), rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / 8, "400 Gb/s is 50 GB/s: divide bits by 8")]),
    Numeric("ch04.ex9_latency_all_gather", "Exercise 9: message latency per step, gathering "
            "every shard (260B, 16 GPUs)", 1,
            "an AllGather of every shard replaces ReduceScatter + AllGather: 2 messages per "
            "layer instead of 4",
            reference=lambda: _small_batch(_gopher(), 16)[2] / 2, rel_tol=0.01,
            mistakes=[Mistake(lambda r: 2 * r, "that is the latency of the usual scheme")]),
    Numeric("ch04.ex10_compute", "Exercise 10: 52B on 4 GPUs at batch 256: FLOP time", 1,
            "batch · 2·P / (4 · FLOP/s)",
            reference=lambda: _large_batch(_m52(), 4, 256)[1], rel_tol=0.01),
    Numeric("ch04.ex10_comms", "Exercise 10: the same step's communication time", 1,
            "batch · 2 bytes · 4·L·D / A_c, A_c the one-way NVLink bandwidth of all links; "
            "she rounds (N−1)/N to 1",
            reference=lambda: _large_batch(_m52(), 4, 256)[2], rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / 2, _ELEMENTS),
                      Mistake(lambda r: 3 * r / 4, "this question follows her formula: "
                              "(N − 1)/N rounded to 1")]),
    Numeric("ch04.ex11_unembedding_read", "Exercise 11: reading the 52B unembedding on one A100",
            1, "D · V · 2 bytes over the memory bandwidth (the preset's V = 65,536)",
            reference=lambda: _m52().D * _m52().V * 2 / _a100().hbm_bytes_per_s, rel_tol=0.01),
]


ZH = {
    # titles
    "Cache bytes per token of the 52B model": "52B 模型每个词元的缓存字节数",
    "The A100's flops-to-bandwidth ratio": "A100 的 FLOPs 与带宽之比",
    "Fewest A100 40GB that hold the 52B weights": "放得下 52B 权重的 A100 40GB 最少要几块",
    "Tokens of cache beside the 52B weights on 4 A100s":
        "4 块 A100 上，52B 权重之外放得下的缓存词元数",
    "Largest batch of 2,048-token sequences on 3 A100s (52B)":
        "3 块 A100 上，2,048 词元序列的最大批量大小（52B）",
    "Bytes each GPU sends per token per step (52B, 4 GPUs)":
        "每块 GPU 每步为每个词元发送的字节数（52B，4 块 GPU）",
    "Small-batch latency of the 260B model on 16 A100s": "260B 模型在 16 块 A100 上的小批次延迟",
    "Large-batch latency of the 260B model at batch 512":
        "260B 模型在批量大小为 512 时的大批次延迟",
    "kipply's FLOPs per token of the 52B model": "按 kipply 的算法，52B 模型每个词元的 FLOPs",
    "Share of the step left to element-wise work at D = 8,192 (43% at D = 1,024)":
        "D = 8,192 时逐元素工作占一步的份额（D = 1,024 时为 43%）",
    "Exercise 1: FLOPs a KV cache saves": "练习 1：KV 缓存省下的 FLOPs",
    "Exercise 2: time to read the cache per step (52B, 4 A100s, batch 4, 2,048 tokens)":
        "练习 2：每步读取缓存的时间（52B，4 块 A100，批量大小 4，每个序列 2,048 个词元）",
    "Exercise 3: forward pass memory-bound, sampling steps FLOP-bound?":
        "练习 3：前向计算内存受限，而采样步骤计算受限？",
    "Exercise 4: small-batch latency of 52B on 16 GPUs": "练习 4：52B 在 16 块 GPU 上的小批次延迟",
    "Exercise 5: a whole sample, 13B on one A100": "练习 5：完整的一次采样，13B，一块 A100",
    "Exercise 6: the MLP hidden activation of a 2,048-token prefill, as a fraction of the "
    "weights (52B)":
        "练习 6：2,048 个词元的预填充中 MLP 的隐藏激活，占权重的比例（52B）",
    "Exercise 7: FLOPs per byte sent by the output projection, D = 512, per GPU of 2":
        "练习 7：输出投影每发送一个字节的 FLOPs，D = 512，两块 GPU 中的每一块",
    "Exercise 8: FLOPs per byte an A100 must do to hide a 400 Gb/s link":
        "练习 8：要让计算掩盖一条 400 Gb/s 链路的通信，A100 每发送一个字节必须做的 FLOPs",
    "Exercise 9: message latency per step, gathering every shard (260B, 16 GPUs)":
        "练习 9：收集每个分片时，每步的消息延迟（260B，16 块 GPU）",
    "Exercise 10: 52B on 4 GPUs at batch 256: FLOP time":
        "练习 10：52B，4 块 GPU，批量大小 256：FLOP 时间",
    "Exercise 10: the same step's communication time": "练习 10：同一步的通信时间",
    "Exercise 11: reading the 52B unembedding on one A100":
        "练习 11：在一块 A100 上读取 52B 的反嵌入矩阵",
    # hints
    "2 (keys and values) · L · K·H · 2 bytes; K·H = D for this model":
        "2（键和值）· L · K·H · 2 字节；这个模型的 K·H = D",
    "peak bf16 FLOP/s over memory bytes/s of the A100 40GB, from the registry":
        "A100 40GB 的 bf16 峰值 FLOP/s 除以它内存的 bytes/s，数据取自注册表",
    "bf16 weight bytes / 40 GB, rounded up": "bf16 权重的字节数 / 40 GB，向上取整",
    "(4 · 40e9 − the preset's bf16 weight bytes) / cache bytes per token, rounded down":
        "（4 · 40e9 − 预设的 bf16 权重字节数）/ 每个词元的缓存字节数，向下取整",
    "tokens of cache that fit on 3 GPUs, divided by 2,048, rounded down":
        "3 块 GPU 上放得下的缓存词元数，除以 2,048，向下取整",
    "4 collectives per layer, each (N − 1)/N · D numbers of 2 bytes":
        "每层 4 次集合通信，每次 (N − 1)/N · D 个数，每个数 2 字节",
    "P·2 bytes / (16 · bandwidth) + 4·L · 8 µs (the chip's hop_latency_s)":
        "P·2 字节 / (16 · 带宽) + 4·L · 8 µs（芯片的 hop_latency_s）",
    "the larger of batch·2·P / (16 · FLOP/s) and the communication time":
        "批量大小·2·P / (16 · FLOP/s) 与通信时间中较大的那个",
    "24·D² per layer: 2 FLOPs × (4·D² attention + 8·D² MLP weights)":
        "每层 24·D²：2 FLOPs ×（4·D² 个注意力权重 + 8·D² 个 MLP 权重）",
    "element-wise time grows like D, matmul time like D²: s·r / (s·r + (1 − s)·r²)":
        "逐元素工作的时间按 D 增长，矩阵乘法的时间按 D² 增长：s·r / (s·r + (1 − s)·r²)",
    "decode step j (j = 0 … next_n − 1) would recompute the keys and values of context + j "
    "earlier tokens, 2·2·L·D·(K·H) FLOPs each, for every sequence":
        "没有缓存时，解码步骤 j（j = 0 … next_n − 1）要为之前的 context + j 个词元重算键和值，"
        "每个词元 2·2·L·D·(K·H) FLOPs，每个序列都是如此",
    "batch · context · cache bytes per token / (4 · memory bandwidth)":
        "批量大小 · 上下文长度 · 每个词元的缓存字节数 / (4 · 内存带宽)",
    "a forward pass over T context tokens multiplies each weight by B·T tokens, a sampling "
    "step by B":
        "对 T 个上下文词元的前向计算，让每个权重与 B·T 个词元相乘；一个采样步骤只与 B 个相乘",
    "weights over 16 GPUs' bandwidth, plus 4·L message latencies that do not shrink with more "
    "GPUs":
        "权重除以 16 块 GPU 的带宽，再加上 4·L 次消息延迟——它们不会因为 GPU 增多而缩短",
    "step_time of phase_time.prefill_step_cost for the 512-token context, then 10 "
    "steps: step j (j = 0 … 9) is step_time of decode_roofline.decode_step_cost with "
    "the cache of 512 + j tokens":
        "512 个词元的上下文用 phase_time.prefill_step_cost 的 step_time，然后是 10 步：第 j 步"
        "（j = 0 … 9）是缓存中有 512 + j 个词元时 decode_roofline.decode_step_cost 的 step_time",
    "[T, F] in bf16 is T·F·2 bytes; divide by the bf16 weight bytes":
        "bf16 的 [T, F] 占 T·F·2 字节；再除以 bf16 权重的字节数",
    "a [B, D] activation (2 bytes each) feeds 2·B·D·D FLOPs; split over 2 GPUs":
        "一个 [B, D] 激活（每个数 2 字节）供给 2·B·D·D FLOPs；由 2 块 GPU 分担",
    "bf16 FLOP/s over the link's bytes per second; Gb is gigabits":
        "bf16 FLOP/s 除以链路每秒传输的字节数；Gb 是吉比特（gigabit）",
    "an AllGather of every shard replaces ReduceScatter + AllGather: 2 messages per layer "
    "instead of 4":
        "一次收集全部分片的 AllGather 取代 ReduceScatter + AllGather：每层 2 条消息，而不是 4 条",
    "batch · 2·P / (4 · FLOP/s)": "批量大小 · 2·P / (4 · FLOP/s)",
    "batch · 2 bytes · 4·L·D / A_c, A_c the one-way NVLink bandwidth of all links; she rounds "
    "(N−1)/N to 1":
        "批量大小 · 2 字节 · 4·L·D / A_c，A_c 是所有链路加起来单向的 NVLink 带宽；她把 (N−1)/N "
        "取整为 1",
    "D · V · 2 bytes over the memory bandwidth (the preset's V = 65,536)":
        "D · V · 2 字节除以内存带宽（预设的 V = 65,536）",
    # known mistakes
    _ELEMENTS: "这数的是数值的个数，不是字节：bfloat16 下每个数 2 字节",
    _HER_BW: "你用的是原文中 A100 的带宽 1.5e12 B/s；数据手册（以及注册表）给出的是 1.555e12",
    "the ratio is FLOPs per byte: FLOP/s on top (the post writes the fraction upside down)":
        "这个比值是每字节的 FLOPs：FLOP/s 在分子上（原文把这个分数写颠倒了）",
    "that uses 52e9 parameters; count the preset's parameters exactly":
        "这用的是 52e9 个参数；请精确地数出预设的参数",
    "the post's 23,000 divides rounded gigabytes; count bytes":
        "原文的 23,000 是用取整后的 GB 数相除得到的；请按字节计算",
    "keep the exact (N − 1)/N here": "这里要保留精确的 (N − 1)/N",
    "the post writes 2·4·L·8 µs; its formula 4·L·latency counts each message once":
        "原文写的是 2·4·L·8 µs；而它的公式 4·L·latency 每条消息只计一次",
    "the post's 5% divides by the old matmul time as if it were the whole step; the matmuls "
    "took 1 − s of it":
        "原文的 5% 除以的是原来的矩阵乘法时间，仿佛那就是整步的时间；实际上矩阵乘法只占其中的 "
        "1 − s",
    "the cache is split over the 4 GPUs, and so is its read":
        "缓存分在 4 块 GPU 上，读取也一样分摊",
    "add the 4·L message latencies": "加上 4·L 次消息延迟",
    "each GPU does half of the FLOPs": "每块 GPU 只做一半的 FLOPs",
    "400 Gb/s is 50 GB/s: divide bits by 8": "400 Gb/s 是 50 GB/s：比特数要除以 8",
    "that is the latency of the usual scheme": "这是通常方案的延迟",
    "this question follows her formula: (N − 1)/N rounded to 1":
        "这道题按她的公式：把 (N − 1)/N 取整为 1",
}
