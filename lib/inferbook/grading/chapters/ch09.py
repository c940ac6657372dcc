"""Questions of chapter 9, "Sharding generation and the KV cache" (exercises/08_many_chips.py).

How far 1D model parallelism goes in decode before the AllReduce outlasts the weight load
(Y* = F / (B·β)), how much KV cache one chip holds when the cache is split over KV heads and
then over the batch, and when a collective is too small to be anything but latency-bound
(appendix C). References come from the estimator.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`).
"""

from __future__ import annotations

from inferbook.model.presets import get_preset

from ..questions import Exact, Mistake, Numeric

BIG, LLAMA3, CHIP = "scaling-book-18b", "llama-3-70b", "TPU v5e"
BATCH_DECODE = 16                      # sequences in the decode batch of the first question
CHIPS, BATCH, CONTEXT = 16, 32, 8192   # the KV-cache question
RING_SHARDS, B_EX, D_EX = 8, 16, 8192  # the latency question: an int8 [B, D] AllReduce


def _chip():
    from inferbook.perf.hardware import get_chip
    return get_chip(CHIP)


def _mp_limit() -> float:
    from inferbook.perf import comm_time
    return comm_time.model_parallel_limit(get_preset(BIG).F, BATCH_DECODE, _chip())


def _beta() -> float:
    from inferbook.perf import comm_time
    return _chip().hbm_bytes_per_s / comm_time.ici_bandwidth(_chip())


def _kv_per_chip() -> float:
    from inferbook.perf import counts
    cfg = get_preset(LLAMA3)
    heads = min(cfg.K, CHIPS)                     # Y: as far as the KV heads go
    return counts.kv_cache_bytes_per_shard(cfg, BATCH, CONTEXT, head_shards=heads,
                                             batch_shards=CHIPS // heads)


def _kv_heads_only() -> float:
    from inferbook.perf import counts
    cfg = get_preset(LLAMA3)
    return counts.kv_cache_bytes_per_shard(cfg, BATCH, CONTEXT, head_shards=CHIPS)


def _latency_bytes() -> float:
    from inferbook.perf import comm_time
    return comm_time.latency_bound_bytes(_chip(), RING_SHARDS)


def _example_latency_bound() -> bool:
    return bool(B_EX * D_EX < _latency_bytes())


QUESTIONS = [
    Numeric("ch09.beta", "β = W_hbm / W_ici of a TPU v5e", 1,
            "HBM bandwidth over the bandwidth of one bidirectional ring axis "
            "(comm_time.ici_bandwidth)",
            reference=_beta, rel_tol=0.01,
            mistakes=[Mistake(lambda r: 8.0, "8 is the scaling book's round figure; compute "
                              "it from the chip's own numbers")]),
    Numeric("ch09.model_parallel_limit", "Chips before decode waits for the AllReduce", 2,
            "T_HBM = 2DF / (Y·W_hbm) for two int8 matrices, T_ICI = 2BD / W_ici for the "
            "AllReduce of B int8 activations of width D; they are equal at Y = F / (B·β)",
            reference=_mp_limit, rel_tol=0.02,
            mistakes=[Mistake(lambda r: r * _beta() / 8, "you used β = 8, the sources' round "
                              "figure; use this chip's bandwidths")]),
    Numeric("ch09.kv_bytes_per_chip", "KV cache on one of 16 chips, Llama-3-70B", 2,
            "split the cache over the KV heads as far as they go (Y = K), and the batch over "
            "the remaining Z = 16 / Y chips: [B_Z, K_Y, S, H] for keys and for values, in "
            "every layer, 2 bytes each",
            reference=_kv_per_chip, rel_tol=0.005,
            mistakes=[Mistake(lambda r: _kv_heads_only(),
                              "with 16 chips and 8 KV heads, a split over heads alone leaves "
                              "two chips with copies of the same head; split the batch over "
                              "them"),
                      Mistake(lambda r: r / 2, "keys and values both")]),
    Numeric("ch09.latency_bound_bytes", "Largest latency-bound collective on 8 chips", 1,
            "a hop costs at least t_hop and moves one shard (bytes / n) over one link, one "
            "way: latency-bound while bytes / n / W_link < t_hop; answer for the whole "
            "buffer (the bytes of the array)",
            reference=_latency_bytes, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / RING_SHARDS,
                              "that is the threshold for one shard (the freer translation's "
                              "reading); the question asks for the whole buffer (the close "
                              "translation's), n times more")]),
    Exact("ch09.example_latency_bound", "Is an AllReduce of 16 × 8192 int8 latency-bound?", 1,
          "compare the buffer's bytes with the whole-buffer threshold of the question before",
          reference=_example_latency_bound, choices=(True, False)),
]

ZH = {
    # titles
    "β = W_hbm / W_ici of a TPU v5e": "TPU v5e 的 β = W_hbm / W_ici",
    "Chips before decode waits for the AllReduce": "芯片数超过多少时，解码开始等待全规约",
    "KV cache on one of 16 chips, Llama-3-70B": "Llama-3-70B 在 16 个芯片中的一个上的 KV 缓存",
    "Largest latency-bound collective on 8 chips": "8 个芯片上最大的延迟受限集合通信",
    "Is an AllReduce of 16 × 8192 int8 latency-bound?":
        "对 16 × 8192 个 int8 的全规约是延迟受限的吗？",
    # hints
    "HBM bandwidth over the bandwidth of one bidirectional ring axis (comm_time.ici_bandwidth)":
        "HBM 带宽除以一个双向环轴的带宽（comm_time.ici_bandwidth）",
    "T_HBM = 2DF / (Y·W_hbm) for two int8 matrices, T_ICI = 2BD / W_ici for the AllReduce of B "
    "int8 activations of width D; they are equal at Y = F / (B·β)":
        "两个 int8 矩阵的 T_HBM = 2DF / (Y·W_hbm)，对 B 个宽度为 D 的 int8 激活值做全规约的 "
        "T_ICI = 2BD / W_ici；两者在 Y = F / (B·β) 时相等",
    "split the cache over the KV heads as far as they go (Y = K), and the batch over the "
    "remaining Z = 16 / Y chips: [B_Z, K_Y, S, H] for keys and for values, in every layer, 2 "
    "bytes each":
        "把缓存尽量按 KV 头切分（Y = K），再把批次切分到其余 Z = 16 / Y 个芯片上：每一层中键和值"
        "各为 [B_Z, K_Y, S, H]，每个元素 2 字节",
    "a hop costs at least t_hop and moves one shard (bytes / n) over one link, one way: "
    "latency-bound while bytes / n / W_link < t_hop; answer for the whole buffer (the bytes of "
    "the array)":
        "一跳至少花费 t_hop，沿一条链路单向搬运一个分片（bytes / n）：只要 "
        "bytes / n / W_link < t_hop 就是延迟受限的；请按整个缓冲区（数组的字节数）作答",
    "compare the buffer's bytes with the whole-buffer threshold of the question before":
        "把缓冲区的字节数与上一题中整个缓冲区的阈值比较",
    # known mistakes
    "8 is the scaling book's round figure; compute it from the chip's own numbers":
        "8 是《How to Scale Your Model》取整后的数字；请用这个芯片自己的数据计算",
    "you used β = 8, the sources' round figure; use this chip's bandwidths":
        "你用了 β = 8，这是原文取整后的数字；请用这个芯片自己的带宽",
    "with 16 chips and 8 KV heads, a split over heads alone leaves two chips with copies of the "
    "same head; split the batch over them":
        "16 个芯片、8 个 KV 头时，只按头切分会让两个芯片保存同一个头的副本；应把批次切分到它们上面",
    "keys and values both": "键和值都要算上",
    "that is the threshold for one shard (the freer translation's reading); the question asks "
    "for the whole buffer (the close translation's), n times more":
        "这是一个分片的阈值（较自由的译本《Transformer 推理全解》的读法）；题目问的是整个缓冲区"
        "（直译本《关于 Transformer 推理的一切》的读法），是它的 n 倍",
}
