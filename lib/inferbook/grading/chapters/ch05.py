"""Questions of chapter 5, "How big is the KV cache, and how to shrink it"
(exercises/05_kv_cache_size.py).

The second half of Lienhart's KV-caching article (seed 003) and the scaling book's "tricks"
(seed 000/002): cache bytes per token of multi-head, grouped-query and multi-query models, what
fits on a chip, and every lever on 2·B·S·L·K·H·p — fewer KV heads, sliding windows, layers that
share a cache, an int8 cache with its scales, paging, sharding an MQA cache, offloading — plus
two functions (the largest batch, and the cache of a model mixing local and global layers)
checked on random inputs against the library. The article's own numbers for Llama-2-7B and
BLOOM-176B, and the A10's capacity, are chapter 1's questions and are not repeated here.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

import math

from inferbook.model.presets import get_preset
from inferbook.perf import counts, latency, phase_time, roofline
from inferbook.perf.hardware import get_chip

from ..compare import allclose
from ..localize import question_text
from ..questions import Function, Mistake, Numeric

LONG, CTX = 32768, 4096
LENGTHS, MAX_LEN, BLOCK = (300, 1200, 45, 800, 17), 2048, 16     # the paging question


def _per_token(name: str) -> float:
    return counts.kv_bytes_per_token(get_preset(name))


def _windowed(name: str, window: int, local_per_global: int | None = None) -> float:
    from inferbook.memory import kv_window
    cfg = get_preset(name)
    return kv_window.kv_bytes_per_sequence(cfg, kv_window.layer_windows(cfg.L, window,
                                                                        local_per_global), LONG)


def _shared_per_token(group: int) -> float:
    from inferbook.memory import kv_share
    cfg = get_preset("llama-3-8b")
    owners = kv_share.owners(kv_share.share_adjacent(cfg.L, group))
    return _per_token("llama-3-8b") / cfg.L * len(owners)


def _int8_bpe() -> float:
    from inferbook.memory import kv_quant
    return kv_quant.bytes_per_element(get_preset("llama-2-7b").H)


def _pcie_ratio() -> float:
    l7 = get_preset("llama-2-7b")
    pcie = get_chip("A10").link_bytes_per_s                   # PCIe 4.0 x16, one way
    hbm_s = counts.kv_cache_bytes(l7, 1, CTX) / get_chip("A100 80GB").hbm_bytes_per_s
    return phase_time.kv_transfer_seconds(l7, CTX, pcie) / hbm_s


def _used(reserved) -> float:
    return sum(LENGTHS) / sum(reserved)


# Coding exercises ---------------------------------------------------------------------------

_PRESETS = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "mistral-7b",
            "falcon-7b", "kipply-52b", "scaling-book-18b", "opt-30b"]
_CHIPS = ["A10", "L4", "A100 40GB", "A100 80GB", "H100 SXM", "TPU v5e", "TPU v5p"]


def _batch_cases(rng):
    cases = [(get_preset("llama-2-7b"), get_chip("A10"), 4096, 1, 2, 2),        # the chapter's case
             (get_preset("llama-2-70b"), get_chip("A10"), 4096, 1, 2, 2)]       # weights do not fit
    for _ in range(10):
        cases.append((get_preset(str(rng.choice(_PRESETS))), get_chip(str(rng.choice(_CHIPS))),
                      int(rng.choice([512, 2048, 4096, 8192, 32768])),
                      int(rng.choice([1, 2, 4, 8, 16])), float(rng.choice([0.5, 1, 2])),
                      float(rng.choice([0.5, 1, 2]))))
    return cases


def _batch_reference(cfg, chip, context, chips, weight_bytes, kv_bytes):
    return roofline.max_batch(cfg, chip, context, chips, weight_bytes, kv_bytes)


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch05.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch05.{question}", template).format(**values)


def _describe_batch(args):
    cfg, chip, context, chips, wb, kvb = args
    return _say("max_batch_fn", "{model} on {chips} × {chip}, context {context}, {weight} B per "
                "weight, {kv} B per cached number", model=cfg.name, chips=chips, chip=chip.name,
                context=context, weight=f"{wb:g}", kv=f"{kvb:g}")


def _window_cases(rng):
    cases = [(get_preset("mistral-7b"), (4096,) * 32, 32768, 2),
             (get_preset("tiny"), (None, 8), 5, 4)]
    for _ in range(8):
        cfg = get_preset(str(rng.choice(_PRESETS)))
        windows = tuple(None if rng.random() < 0.3 else int(rng.choice([128, 1024, 4096]))
                        for _ in range(cfg.L))
        cases.append((cfg, windows, int(rng.integers(1, 65536)), float(rng.choice([1, 2]))))
    return cases


def _window_reference(cfg, windows, seq_len, bytes_per_element):
    from inferbook.memory import kv_window
    return kv_window.kv_bytes_per_sequence(cfg, windows, seq_len, bytes_per_element)


def _describe_window(args):
    cfg, windows, seq_len, b = args
    local = sum(w is not None for w in windows)
    return _say("window_kv_bytes_fn", "{model}, {local} of {layers} layers local, {tokens} "
                "tokens, {bytes} B", model=cfg.name, local=local, layers=len(windows),
                tokens=seq_len, bytes=f"{b:g}")


_KEYS_ONLY = "that is half: a key and a value vector per KV head"

QUESTIONS = [
    Numeric("ch05.kv_per_token_llama_2_13b", "Cache bytes per token, LLaMA-2 13B (MHA)", 1,
            "2 · L · K · H · 2 bytes with K = N", reference=lambda: _per_token("llama-2-13b"),
            rel_tol=0.005, mistakes=[Mistake(lambda r: r / 2, _KEYS_ONLY)]),
    Numeric("ch05.kv_per_token_llama_2_70b", "Cache bytes per token, LLaMA-2 70B (GQA)", 1,
            "the cache holds K key/value heads, not the N query heads",
            reference=lambda: _per_token("llama-2-70b"), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * get_preset("llama-2-70b").G, "you counted the query "
                              "heads N; only the K KV heads are cached"),
                      Mistake(lambda r: r / 2, _KEYS_ONLY)]),
    Numeric("ch05.kv_per_token_falcon_7b", "Cache bytes per token, Falcon-7B (MQA)", 1,
            "one KV head of H = 64 per layer",
            reference=lambda: _per_token("falcon-7b"), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * get_preset("falcon-7b").N, "you counted the 71 query "
                              "heads; multi-query attention caches one")]),
    Numeric("ch05.l7_sequences_of_512", "Sequences of 512 tokens whose cache equals "
            "Llama-2-7B's weights", 1,
            "bf16 weight bytes / (512 · cache bytes per token), rounded down; the article's "
            "round numbers give too many",
            reference=lambda: math.floor(counts.param_bytes(get_preset("llama-2-7b"))
                                         / (512 * _per_token("llama-2-7b"))), rel_tol=0),
    Numeric("ch05.a10_batch_4096", "Requests of 4,096 tokens that fit on an A10 "
            "(Llama-2-7B)", 1, "(memory − weights) / cache of one 4,096-token request, "
            "rounded down",
            reference=lambda: roofline.max_batch(get_preset("llama-2-7b"), get_chip("A10"), CTX),
            rel_tol=0),
    Numeric("ch05.a10_tokens_llama_3_8b", "Longest context LLaMA-3 8B can hold on an A10", 1,
            "(memory − bf16 weights) / cache bytes per token, rounded down; one sequence",
            reference=lambda: latency.kv_capacity_tokens(get_preset("llama-3-8b"), get_chip("A10"),
                                                      1),
            rel_tol=0.005),
    Numeric("ch05.h100x8_batch_llama_2_70b", "Requests of 4,096 tokens on 8 H100s: "
            "LLaMA-2 70B", 1, "8 × 80 GB minus the weights, over one request's cache",
            reference=lambda: roofline.max_batch(get_preset("llama-2-70b"), get_chip("H100 SXM"),
                                                 CTX, 8),
            rel_tol=0),
    Numeric("ch05.h100x8_batch_mha_70b", "The same with multi-head attention (K = N)", 1,
            "the MHA variant's own weights (W_K, W_V grow) and its G times larger cache",
            reference=lambda: roofline.max_batch(get_preset("llama-2-70b").replace(K=64),
                                              get_chip("H100 SXM"), CTX, 8), rel_tol=0),
    Numeric("ch05.mistral_window_32k", "Cache of one 32,768-token sequence, Mistral 7B "
            "(window 4,096 in every layer)", 1,
            "each layer keeps at most W tokens: min(W, S) · 2·K·H·2 bytes per layer",
            reference=lambda: _windowed("mistral-7b", 4096), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * LONG / 4096, "without the window: the sliding "
                              "window caps every layer at 4,096 tokens")]),
    Numeric("ch05.mixed_5_to_1_share", "5 local (W = 1,024) : 1 global, LLaMA-3 8B at "
            "32,768 tokens: fraction of the all-global cache", 1,
            "in every group of 6 layers 5 keep 1,024 tokens and 1 keeps all; L = 32 is not a "
            "multiple of 6 — build the pattern layer by layer",
            reference=lambda: _windowed("llama-3-8b", 1024, 5)
            / counts.kv_cache_bytes(get_preset("llama-3-8b"), 1, LONG), rel_tol=0.005),
    Numeric("ch05.shared_by_3_per_token", "LLaMA-3 8B with groups of 3 adjacent layers "
            "sharing a cache: bytes per token", 1,
            "one cache per group; the last group may be short (32 layers = 10 groups of 3 "
            "and one of 2)", reference=lambda: _shared_per_token(3), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * (get_preset("llama-3-8b").L // 3)
                              / len(range(0, get_preset("llama-3-8b").L, 3)),
                              "round the number of groups up: the last two layers share one "
                              "cache too")]),
    Numeric("ch05.int8_bytes_per_element", "Bytes per cached number, int8 with a float32 "
            "scale per H-vector (H = 128)", 1,
            "one byte per code, plus a 4-byte scale shared by the H numbers of a vector",
            reference=_int8_bpe, rel_tol=0.001,
            mistakes=[Mistake(lambda r: 1.0, "the scales are stored too")]),
    Numeric("ch05.int8_a10_tokens", "Tokens of int8 cache (with scales) beside Llama-2-7B's "
            "bf16 weights on an A10", 1,
            "the bf16 weights stay; each cached number now costs the previous answer",
            reference=lambda: latency.kv_capacity_tokens(get_preset("llama-2-7b"), get_chip("A10"),
                                                      1, 2, _int8_bpe()), rel_tol=0.005,
            mistakes=[Mistake(lambda r: latency.kv_capacity_tokens(
                get_preset("llama-2-7b"), get_chip("A10"), 1, 2, 1), "count the scales' bytes")]),
    Numeric("ch05.max_reservation_used", "Fraction of reserved slots holding tokens, "
            "reserving 2,048 per request", 1, "sum of the lengths / (requests × 2,048)",
            reference=lambda: _used([MAX_LEN] * len(LENGTHS)), rel_tol=0.005),
    Numeric("ch05.paged_used", "The same with pages of 16 slots allocated on demand", 1,
            "each request holds ceil(length / 16) pages of 16 slots",
            reference=lambda: _used([math.ceil(n / BLOCK) * BLOCK for n in LENGTHS]),
            rel_tol=0.002),
    Numeric("ch05.mqa_head_sharded_per_gpu", "Falcon-7B cache per GPU, 8 GPUs sharding by "
            "heads (batch 64, 4,096 tokens)", 1,
            "a head cannot be split: with K = 1 each GPU holds ceil(K / 8) = 1 head of every "
            "sequence", reference=lambda: counts.kv_cache_bytes_per_shard(
                get_preset("falcon-7b"), 64, CTX, head_shards=8), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 8, "that is sharding by sequence (the fix); by "
                              "heads the single head is replicated")]),
    Numeric("ch05.offload_slowdown", "How many times longer: a 4,096-token Llama-2-7B cache "
            "over PCIe 4.0 x16 vs from an A100 80GB's memory", 1,
            "bytes / one-way PCIe bandwidth (the A10's link in the registry) over bytes / HBM "
            "bandwidth", reference=_pcie_ratio, rel_tol=0.01),
    Function("ch05.max_batch_fn", "Write the largest batch that fits", 3,
             "floor((chips · HBM − params · weight_bytes) / (context · 2·L·K·H·kv_bytes)), and "
             "0 if the weights alone do not fit; count the parameters with "
             "counts.param_count",
             library_answers=("inferbook.perf.roofline.max_batch",
                              "inferbook.perf.latency.kv_capacity_tokens"),
             reference=_batch_reference, cases=_batch_cases, compare=allclose(0, 0),
             describe_case=_describe_batch),
    Function("ch05.window_kv_bytes_fn", "Write the cache of a local/global model", 3,
             "sum over layers of min(W_i, seq_len) tokens (all seq_len for a global layer, "
             "W_i = None) · 2·K·H·bytes",
             library_answers=("inferbook.memory.kv_window.kv_bytes_per_sequence",),
             reference=_window_reference, cases=_window_cases, compare=allclose(1e-9, 0),
             describe_case=_describe_window),
]


ZH = {
    # titles
    "Cache bytes per token, LLaMA-2 13B (MHA)": "LLaMA-2 13B（MHA）每个词元的缓存字节数",
    "Cache bytes per token, LLaMA-2 70B (GQA)": "LLaMA-2 70B（GQA）每个词元的缓存字节数",
    "Cache bytes per token, Falcon-7B (MQA)": "Falcon-7B（MQA）每个词元的缓存字节数",
    "Sequences of 512 tokens whose cache equals Llama-2-7B's weights":
        "缓存与 Llama-2-7B 的权重一样大时，512 个词元的序列有几条",
    "Requests of 4,096 tokens that fit on an A10 (Llama-2-7B)":
        "A10 上放得下几个 4,096 个词元的请求（Llama-2-7B）",
    "Longest context LLaMA-3 8B can hold on an A10": "LLaMA-3 8B 在 A10 上能容纳的最长上下文",
    "Requests of 4,096 tokens on 8 H100s: LLaMA-2 70B":
        "8 块 H100 上放得下几个 4,096 个词元的请求：LLaMA-2 70B",
    "The same with multi-head attention (K = N)": "同一问题，换成多头注意力（K = N）",
    "Cache of one 32,768-token sequence, Mistral 7B (window 4,096 in every layer)":
        "一条 32,768 个词元的序列的缓存，Mistral 7B（每一层的窗口都是 4,096）",
    "5 local (W = 1,024) : 1 global, LLaMA-3 8B at 32,768 tokens: fraction of the all-global "
    "cache":
        "局部层（W = 1,024）与全局层之比为 5 : 1，LLaMA-3 8B，32,768 个词元：占全部为全局层时缓存的"
        "比例",
    "LLaMA-3 8B with groups of 3 adjacent layers sharing a cache: bytes per token":
        "LLaMA-3 8B 每 3 个相邻的层共用一份缓存：每个词元的字节数",
    "Bytes per cached number, int8 with a float32 scale per H-vector (H = 128)":
        "每个缓存的数的字节数：int8，每个 H 维向量一个 float32 缩放因子（H = 128）",
    "Tokens of int8 cache (with scales) beside Llama-2-7B's bf16 weights on an A10":
        "A10 上与 Llama-2-7B 的 bf16 权重并存时，int8 缓存（含缩放因子）能容纳的词元数",
    "Fraction of reserved slots holding tokens, reserving 2,048 per request":
        "每个请求预留 2,048 个槽位时，装着词元的槽位所占的比例",
    "The same with pages of 16 slots allocated on demand":
        "同一比例，换成按需分配、每页 16 个槽位的分页",
    "Falcon-7B cache per GPU, 8 GPUs sharding by heads (batch 64, 4,096 tokens)":
        "Falcon-7B 每块 GPU 上的缓存，8 块 GPU 按头分片（批次 64 条序列，每条 4,096 个词元）",
    "How many times longer: a 4,096-token Llama-2-7B cache over PCIe 4.0 x16 vs from an A100 "
    "80GB's memory":
        "经 PCIe 4.0 x16 读取一份 4,096 个词元的 Llama-2-7B 缓存，耗时是从 A100 80GB 的内存中"
        "读取的多少倍",
    "Write the largest batch that fits": "写出放得下的最大批次",
    "Write the cache of a local/global model": "写出局部层与全局层混合的模型的缓存",
    # hints
    "2 · L · K · H · 2 bytes with K = N": "2 · L · K · H · 2 字节，其中 K = N",
    "the cache holds K key/value heads, not the N query heads":
        "缓存里存的是 K 个键/值头，而不是 N 个查询头",
    "one KV head of H = 64 per layer": "每层一个 KV 头，H = 64",
    "bf16 weight bytes / (512 · cache bytes per token), rounded down; the article's round "
    "numbers give too many":
        "bf16 权重的字节数 / (512 · 每个词元的缓存字节数)，向下取整；用文章里凑整的数会算多",
    "(memory − weights) / cache of one 4,096-token request, rounded down":
        "（内存 − 权重）/ 一个 4,096 个词元的请求的缓存，向下取整",
    "(memory − bf16 weights) / cache bytes per token, rounded down; one sequence":
        "（内存 − bf16 权重）/ 每个词元的缓存字节数，向下取整；只有一条序列",
    "8 × 80 GB minus the weights, over one request's cache":
        "8 × 80 GB 减去权重，再除以一个请求的缓存",
    "the MHA variant's own weights (W_K, W_V grow) and its G times larger cache":
        "用 MHA 变体自己的权重（W_K、W_V 变大了），以及它大 G 倍的缓存",
    "each layer keeps at most W tokens: min(W, S) · 2·K·H·2 bytes per layer":
        "每层最多保留 W 个词元：每层 min(W, S) · 2·K·H·2 字节",
    "in every group of 6 layers 5 keep 1,024 tokens and 1 keeps all; L = 32 is not a multiple "
    "of 6 — build the pattern layer by layer":
        "每 6 层一组，其中 5 层保留 1,024 个词元，1 层全部保留；L = 32 不是 6 的倍数——请逐层"
        "构造这个模式",
    "one cache per group; the last group may be short (32 layers = 10 groups of 3 and one of "
    "2)":
        "每组一份缓存；最后一组可能不满（32 层 = 10 组 3 层，外加 1 组 2 层）",
    "one byte per code, plus a 4-byte scale shared by the H numbers of a vector":
        "每个编码一个字节，外加一个 4 字节的缩放因子，由一个向量的 H 个数共用",
    "the bf16 weights stay; each cached number now costs the previous answer":
        "bf16 权重不变；每个缓存的数现在占上一题答案那么多字节",
    "sum of the lengths / (requests × 2,048)": "长度之和 /（请求数 × 2,048）",
    "each request holds ceil(length / 16) pages of 16 slots":
        "每个请求占 ceil(长度 / 16) 页，每页 16 个槽位",
    "a head cannot be split: with K = 1 each GPU holds ceil(K / 8) = 1 head of every sequence":
        "一个头不能切开：K = 1 时，每块 GPU 都存着每条序列的 ceil(K / 8) = 1 个头",
    "bytes / one-way PCIe bandwidth (the A10's link in the registry) over bytes / HBM "
    "bandwidth":
        "（字节数 / 单向 PCIe 带宽（注册表中 A10 的链路））除以（字节数 / HBM 带宽）",
    "floor((chips · HBM − params · weight_bytes) / (context · 2·L·K·H·kv_bytes)), and 0 if "
    "the weights alone do not fit; count the parameters with counts.param_count":
        "floor((chips · HBM − params · weight_bytes) / (context · 2·L·K·H·kv_bytes))；单是权重"
        "就放不下时为 0；用 counts.param_count 数出参数",
    "sum over layers of min(W_i, seq_len) tokens (all seq_len for a global layer, W_i = None) "
    "· 2·K·H·bytes":
        "对各层求和：min(W_i, seq_len) 个词元（全局层 W_i = None，保留全部 seq_len 个）"
        "· 2·K·H·bytes",
    # known mistakes
    _KEYS_ONLY: "这只是一半：每个 KV 头都有一个键向量和一个值向量",
    "you counted the query heads N; only the K KV heads are cached":
        "你数的是 N 个查询头；缓存的只有 K 个 KV 头",
    "you counted the 71 query heads; multi-query attention caches one":
        "你数的是 71 个查询头；多查询注意力只缓存一个",
    "without the window: the sliding window caps every layer at 4,096 tokens":
        "这是没有窗口时的结果：滑动窗口让每一层最多只存 4,096 个词元",
    "round the number of groups up: the last two layers share one cache too":
        "组数要向上取整：最后两层也共用一份缓存",
    "the scales are stored too": "缩放因子也要存",
    "count the scales' bytes": "把缩放因子的字节也算上",
    "that is sharding by sequence (the fix); by heads the single head is replicated":
        "这是按序列分片（补救的办法）；按头分片时，那唯一的一个头会在每块 GPU 上复制一份",
    # messages of the checks
    "{model} on {chips} × {chip}, context {context}, {weight} B per weight, {kv} B per cached "
    "number":
        "{model}，{chips} × {chip}，上下文 {context}，每个权重 {weight} B，每个缓存的数 {kv} B",
    "{model}, {local} of {layers} layers local, {tokens} tokens, {bytes} B":
        "{model}，{layers} 层中有 {local} 层是局部层，{tokens} 个词元，{bytes} B",
}
