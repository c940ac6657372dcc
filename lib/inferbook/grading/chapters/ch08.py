"""Questions of chapter 8, "Sharding prefill" (exercises/08_many_chips.py).

The 1D (Megatron) layout's AllReduces and why they do not shrink with more devices, the
interconnect's limit on model parallelism in prefill (α = C / W_ici and M* = F/α), and the
bytes a device passes around the ring in sequence-parallel (ring) attention. Every reference
comes from the estimator (`comm_time`, `collectives`).

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`).
"""

from __future__ import annotations

from inferbook.model.presets import get_preset

from ..questions import Exact, Mistake, Numeric

MODEL, BIG, CHIP = "llama-2-7b", "scaling-book-18b", "TPU v5e"
T_PROMPT, DEVICES, RING = 2048, 8, 4


def _allreduce_bytes_per_layer(m: int = DEVICES) -> float:
    """Bytes of the arrays the 1D layout AllReduces in one layer of a bf16 prefill."""
    from inferbook.perf import collectives
    cfg = get_preset(MODEL)
    comms = collectives.ws1d_collectives(cfg, 1, T_PROMPT, m, bytes_per_element=2)
    return sum(c.total for c in comms if c.scope in ("attn_out", "mlp_out")) / cfg.L


def _same_for_two() -> bool:
    return _allreduce_bytes_per_layer(2) == _allreduce_bytes_per_layer(DEVICES)


def _alpha() -> float:
    from inferbook.perf import comm_time
    from inferbook.perf.hardware import get_chip
    chip = get_chip(CHIP)
    return chip.bf16_flops_per_s / comm_time.ici_bandwidth(chip)


def _prefill_limit() -> float:
    from inferbook.perf import comm_time
    from inferbook.perf.hardware import get_chip
    return comm_time.prefill_model_parallel_limit(get_preset(BIG), get_chip(CHIP))


def _ring_bytes_per_layer() -> float:
    from inferbook.perf import collectives
    cfg = get_preset(MODEL)
    comms = collectives.ring_attention_collectives(cfg, 1, T_PROMPT, RING, 1, bytes_per_element=2)
    return sum(c.total for c in comms if c.scope == "ring") / cfg.L


QUESTIONS = [
    Numeric("ch08.allreduce_bytes_per_layer", "Bytes AllReduced per layer, 1D prefill", 1,
            "each layer ends its attention block and its MLP block with an AllReduce of the "
            "[B, T, D] activations, 2 bytes each",
            reference=_allreduce_bytes_per_layer, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, "that is one AllReduce; a layer has two, after "
                                               "attention and after the MLP"),
                      Mistake(lambda r: r / DEVICES, "the AllReduce works on the whole "
                              "[B, T, D] array, not a 1/M slice: every device holds a partial "
                              "sum of all of it")]),
    Exact("ch08.allreduce_same_on_two", "Are the AllReduces as big on 2 devices as on 8?", 1,
          "what does the array being AllReduced depend on: B, T, D — or M?",
          reference=_same_for_two, choices=(True, False)),
    Numeric("ch08.alpha", "α = C / W_ici of a TPU v5e", 1,
            "bf16 FLOP/s divided by the bandwidth of one bidirectional ring axis, which is "
            "twice the one-way bandwidth of one link (comm_time.ici_bandwidth)",
            reference=_alpha, rel_tol=0.01,
            mistakes=[Mistake(lambda r: 2 * r, "you used one link in one direction; a ring "
                              "axis sends both ways at once, twice that bandwidth")]),
    Numeric("ch08.prefill_parallel_limit", "Model-parallel limit of a prefill, 18B model", 2,
            "per token an MLP block does 2·(matrices)·D·F/M FLOPs per device and AllReduces "
            "D activations (2·D·2 bytes / W_ici); equate and solve for M. This model's MLP is "
            "gated: three matrices, not two",
            reference=_prefill_limit, rel_tol=0.02,
            mistakes=[Mistake(lambda r: r * 2 / 3, "that is F/α, the two-matrix MLP of the "
                              "sources; a gated MLP has three matrices and so 1.5× the "
                              "arithmetic to hide the same AllReduce behind")]),
    Numeric("ch08.ring_bytes_per_layer", "Bytes sent around the ring per layer", 1,
            "each device holds T/Q positions; per layer it passes its K block and its V block "
            "on Q − 1 times, each [B, T/Q, K, H] in bf16",
            reference=_ring_bytes_per_layer, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * RING / (RING - 1), "Q − 1 steps, not Q: after Q − 1 "
                              "passes every device has seen every block"),
                      Mistake(lambda r: r / 2, "keys and values both travel")]),
]

ZH = {
    # titles
    "Bytes AllReduced per layer, 1D prefill": "一维预填充中每层被全规约的字节数",
    "Are the AllReduces as big on 2 devices as on 8?":
        "在 2 个设备上的全规约与在 8 个设备上一样大吗？",
    "α = C / W_ici of a TPU v5e": "TPU v5e 的 α = C / W_ici",
    "Model-parallel limit of a prefill, 18B model": "18B 模型预填充的模型并行极限",
    "Bytes sent around the ring per layer": "每层沿环发送的字节数",
    # hints
    "each layer ends its attention block and its MLP block with an AllReduce of the [B, T, D] "
    "activations, 2 bytes each":
        "每层的注意力块和 MLP 块都以一次对 [B, T, D] 激活值的全规约结束，每个元素 2 字节",
    "what does the array being AllReduced depend on: B, T, D — or M?":
        "被全规约的数组取决于什么：B、T、D——还是 M？",
    "bf16 FLOP/s divided by the bandwidth of one bidirectional ring axis, which is twice the "
    "one-way bandwidth of one link (comm_time.ici_bandwidth)":
        "bf16 的 FLOP/s 除以一个双向环轴的带宽，它是一条链路单向带宽的两倍"
        "（comm_time.ici_bandwidth）",
    "per token an MLP block does 2·(matrices)·D·F/M FLOPs per device and AllReduces D "
    "activations (2·D·2 bytes / W_ici); equate and solve for M. This model's MLP is gated: "
    "three matrices, not two":
        "对每个词元，一个 MLP 块在每个设备上做 2·（矩阵数）·D·F/M FLOPs，并对 D 个激活值做全规约"
        "（2·D·2 字节 / W_ici）；令两者相等，解出 M。这个模型的 MLP 是门控的：三个矩阵，不是两个",
    "each device holds T/Q positions; per layer it passes its K block and its V block on Q − 1 "
    "times, each [B, T/Q, K, H] in bf16":
        "每个设备持有 T/Q 个位置；每层中它把自己的 K 块和 V 块各传递 Q − 1 次，每块是 bf16 的 "
        "[B, T/Q, K, H]",
    # known mistakes
    "that is one AllReduce; a layer has two, after attention and after the MLP":
        "这只是一次全规约；一层有两次，分别在注意力之后和 MLP 之后",
    "the AllReduce works on the whole [B, T, D] array, not a 1/M slice: every device holds a "
    "partial sum of all of it":
        "全规约作用于整个 [B, T, D] 数组，而不是 1/M 的一片：每个设备持有的是整个数组的一个部分和",
    "you used one link in one direction; a ring axis sends both ways at once, twice that "
    "bandwidth":
        "你用的是一条链路的单向带宽；环轴同时向两个方向发送，带宽是它的两倍",
    "that is F/α, the two-matrix MLP of the sources; a gated MLP has three matrices and so 1.5× "
    "the arithmetic to hide the same AllReduce behind":
        "这是 F/α，即原文中两矩阵的 MLP；门控 MLP 有三个矩阵，因而有 1.5 倍的计算"
        "来掩盖同样的全规约",
    "Q − 1 steps, not Q: after Q − 1 passes every device has seen every block":
        "是 Q − 1 步，不是 Q 步：传递 Q − 1 次之后，每个设备都见过了每个块",
    "keys and values both travel": "键和值都要传递",
}
