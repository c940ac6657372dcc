"""Questions of chapter 2, "Rooflines" (exercises/02_performance_models.py, part 1).

The scaling book's linear-operation and attention rooflines and its appendix A (seed 000/002,
Austin et al. 2025), and kipply's flops-to-bandwidth ratio (seed 004): critical intensities
and batches of the registry's chips under each quantization, attention's intensity in prefill
and generation, and two functions — the critical batch and attention's intensity — checked on
random inputs against the estimator (`inferbook.perf`). Every reference is computed by the library.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

from inferbook.model.presets import get_preset
from inferbook.perf.hardware import get_chip

from ..compare import allclose
from ..localize import question_text
from ..questions import Exact, Function, Mistake, Numeric

V5E, H100 = "TPU v5e", "H100 SXM"
APPENDIX_D, APPENDIX_F, APPENDIX_CHIPS = 8192, 32768, 4      # appendix A's two-matmul layer
EVEN_CONTEXT = 4096


def _bcrit(name: str, weight_bytes: float = 2, compute: str = "bf16") -> float:
    from inferbook.perf import roofline
    return roofline.critical_batch(get_chip(name), weight_bytes, compute)


def _ci(name: str) -> float:
    from inferbook.perf import roofline
    return roofline.critical_intensity(get_chip(name))


def _prefill_threshold() -> int:
    """The shortest prompt whose self-attention (S = T, MHA, bf16) is compute-bound on v5e."""
    from inferbook.perf import roofline
    ci = _ci(V5E)
    t = 1
    while roofline.attention_intensity(t, t) < ci:
        t += 1
    return t


def _decode_intensity(G: int) -> float:
    from inferbook.perf import roofline
    return roofline.attention_intensity(1, 8192, G)


def _even_batch() -> float:
    from inferbook.perf import counts
    cfg = get_preset("llama-2-13b")
    return counts.param_bytes(cfg) / counts.kv_cache_bytes(cfg, 1, EVEN_CONTEXT)


def _appendix_a(params: float | None = None) -> float:
    """Time to read one layer's bf16 weights, split over 4 v5e chips: the step's floor."""
    from inferbook.perf import decode_roofline
    from inferbook.perf.step_cost import step_time
    p = 2 * APPENDIX_D * APPENDIX_F if params is None else params
    return step_time(decode_roofline.lower_bound_step_cost(2 * p, 0), get_chip(V5E),
                     APPENDIX_CHIPS)


def _decode_batch_memory_bound() -> bool:
    """Is a decode step of 64 sequences (bf16 weights) still memory-bound in its matmuls?"""
    return 64 < _bcrit(V5E)


# Coding exercises ----------------------------------------------------------------------------

def _a_chip(flops: float, bandwidth: float):
    from inferbook.perf.hardware import Chip
    return Chip("random", hbm_bytes=1e9, hbm_bytes_per_s=bandwidth, bf16_flops_per_s=flops,
                int8_ops_per_s=None)


def _bcrit_cases(rng):
    cases = []
    for _ in range(8):
        flops = float(10 ** rng.uniform(13, 16))
        bandwidth = float(10 ** rng.uniform(11, 13))
        cases.append((flops, bandwidth, float(rng.choice([0.5, 1, 2, 4]))))
    return cases


def _bcrit_reference(flops_per_s, hbm_bytes_per_s, weight_bytes):
    from inferbook.perf import roofline
    return roofline.critical_batch(_a_chip(flops_per_s, hbm_bytes_per_s), weight_bytes)


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch02.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch02.{question}", template).format(**values)


def _describe_bcrit(args):
    return _say("critical_batch_fn",
                "C={flops} FLOP/s, W={bandwidth} B/s, {bytes} bytes per weight",
                flops=f"{args[0]:.3g}", bandwidth=f"{args[1]:.3g}", bytes=f"{args[2]:g}")


def _attn_cases(rng):
    cases = [(1, 1, 1), (4096, 4096, 1), (1, 100_000, 8)]
    for _ in range(6):
        cases.append((int(rng.integers(1, 5000)), int(rng.integers(1, 200_000)),
                      int(rng.choice([1, 2, 4, 8, 16]))))
    return cases


def _attn_reference(T, S, G):
    from inferbook.perf import roofline
    return roofline.attention_intensity(T, S, G)


_INT8_MATH = ("int8 arithmetic doubles the chip's FLOP/s: that multiplies B_crit by 2, it "
              "does not divide it")
_INT8_WEIGHTS = ("int8 weights halve the bytes per weight, so the batch needed to reach the "
                 "same FLOPs per byte halves too")

QUESTIONS = [
    Numeric("ch02.critical_intensity_v5e", "FLOPs per byte where a TPU v5e's roofs meet", 1,
            "peak bfloat16 FLOP/s divided by HBM bytes/s, both from inferbook.perf.hardware",
            reference=lambda: _ci(V5E), rel_tol=0.005,
            mistakes=[Mistake(lambda r: 1 / r, "that is bytes per FLOP: put FLOP/s on top")]),
    Numeric("ch02.bcrit_v5e_int8_weights", "B_crit on a TPU v5e: int8 weights, bf16 math", 1,
            "B_crit = C · bytes_per_weight / (2 · W): a bf16 step does 2·B FLOPs per weight",
            reference=lambda: _bcrit(V5E, 1), rel_tol=0.005,
            mistakes=[Mistake(lambda r: 4 * r, "that is the answer for bfloat16 weights with "
                                                "the factor 2 left out of 2·B FLOPs"),
                      Mistake(lambda r: 2 * r, _INT8_WEIGHTS)]),
    Numeric("ch02.bcrit_v5e_int8_both", "B_crit on a TPU v5e: int8 weights, int8 math", 1,
            "use the chip's int8 op/s as C and 1 byte per weight",
            reference=lambda: _bcrit(V5E, 1, "int8"), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _INT8_MATH)]),
    Numeric("ch02.bcrit_h100", "B_crit of an H100 SXM (bf16 weights and math)", 1,
            "the dense bfloat16 peak over HBM bandwidth; NVIDIA's headline figures include "
            "2:4 sparsity (twice the dense one)",
            reference=lambda: _bcrit(H100), rel_tol=0.01,
            mistakes=[Mistake(lambda r: 2 * r, "you used the sparse bf16 peak; a dense "
                                                "transformer gets half of it"),
                      Mistake(lambda r: 4 * r, "you used NVIDIA's FP8-with-sparsity figure, "
                                                "as the freer rendering's table does: four "
                                                "times the dense bfloat16 peak")]),
    Exact("ch02.decode_b64_memory_bound",
          "Batch 64 in bf16 on a TPU v5e: are the weight matmuls memory-bound?", 1,
          "compare the batch with B_crit: below it, loading the weights takes longer than the "
          "2·B FLOPs per weight",
          reference=_decode_batch_memory_bound, choices=(True, False)),
    Function("ch02.attention_intensity_fn", "Write attention's arithmetic intensity", 2,
             "2·T·S·G FLOPs per (T·G·2 + S·2) bytes per KV head and sequence (bf16); "
             "G = 1 and T = S gives T/2",
             library_answers=("inferbook.perf.roofline.attention_intensity",),
             reference=_attn_reference, cases=_attn_cases, compare=allclose(1e-9, 0)),
    Numeric("ch02.prefill_attention_threshold", "Shortest compute-bound prefill attention "
            "on a TPU v5e (MHA, bf16)", 1,
            "with S = T the intensity S·T/(S + T) is T/2; find the smallest T at which it "
            "reaches C/W",
            reference=_prefill_threshold, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / 2, "that is the weight matmuls' threshold; "
                                                "attention's intensity in prefill is T/2, "
                                                "not T")]),
    Numeric("ch02.decode_attention_intensity_gqa", "Decode attention's FLOPs per byte with "
            "G = 4 query heads per KV head, S = 8,192", 1,
            "FLOPs 4·T·S·N·H against bytes 2·T·N·H·2 (queries in, output out) + 2·S·K·H·2 "
            "(keys and values); set T = 1 and N = G·K",
            reference=lambda: _decode_intensity(4), rel_tol=0.005,
            mistakes=[Mistake(lambda r: _decode_intensity(1), "that is multi-head attention "
                      "(G = 1): each key now serves G query heads")]),
    Numeric("ch02.even_batch_llama_2_13b", "Batch where LLaMA-2 13B's caches weigh as much as "
            "its weights (4,096-token contexts, bf16)", 1,
            "bf16 weight bytes / bytes of one sequence's cache of 4,096 tokens",
            reference=_even_batch, rel_tol=0.01),
    Function("ch02.critical_batch_fn", "Write the critical batch", 2,
             "C · bytes_per_weight / (2 · W); no rounding",
             library_answers=("inferbook.perf.roofline.critical_batch",),
             reference=_bcrit_reference, cases=_bcrit_cases, compare=allclose(1e-9, 0),
             describe_case=_describe_bcrit),
    Numeric("ch02.appendix_a_layer_floor", "Appendix A: floor on one layer's time, "
            "4 TPU v5e chips", 1,
            "the layer's two matmuls hold 2·D·F bf16 weights, split over 4 chips; time = "
            "bytes per chip / HBM bandwidth (registry value)",
            reference=_appendix_a, rel_tol=0.01,
            mistakes=[Mistake(lambda r: _appendix_a(600e6), "you rounded the layer to 600M "
                      "parameters, as the source does; count 2·D·F exactly"),
                      Mistake(lambda r: r / 2, "bf16 weights take 2 bytes each")]),
]

ZH = {
    # titles
    "FLOPs per byte where a TPU v5e's roofs meet": "TPU v5e 两个屋顶交汇处的每字节 FLOPs",
    "B_crit on a TPU v5e: int8 weights, bf16 math": "TPU v5e 上的 B_crit：int8 权重，bf16 运算",
    "B_crit on a TPU v5e: int8 weights, int8 math": "TPU v5e 上的 B_crit：int8 权重，int8 运算",
    "B_crit of an H100 SXM (bf16 weights and math)": "H100 SXM 的 B_crit（bf16 权重和运算）",
    "Batch 64 in bf16 on a TPU v5e: are the weight matmuls memory-bound?":
        "在 TPU v5e 上以 bf16 运行批次 64：权重矩阵乘法是内存受限的吗？",
    "Write attention's arithmetic intensity": "写出注意力的算术强度",
    "Shortest compute-bound prefill attention on a TPU v5e (MHA, bf16)":
        "TPU v5e 上计算受限的最短预填充注意力（MHA，bf16）",
    "Decode attention's FLOPs per byte with G = 4 query heads per KV head, S = 8,192":
        "每个 KV 头对应 G = 4 个查询头、S = 8,192 时，解码注意力每字节的 FLOPs",
    "Batch where LLaMA-2 13B's caches weigh as much as its weights (4,096-token contexts, bf16)":
        "LLaMA-2 13B 的缓存与权重一样大时的批次（上下文 4,096 个词元，bf16）",
    "Write the critical batch": "写出临界批量",
    "Appendix A: floor on one layer's time, 4 TPU v5e chips":
        "附录 A：4 个 TPU v5e 芯片上一层时间的下限",
    # hints
    "peak bfloat16 FLOP/s divided by HBM bytes/s, both from inferbook.perf.hardware":
        "bfloat16 峰值 FLOP/s 除以 HBM 的 bytes/s，两者都从 inferbook.perf.hardware 读取",
    "B_crit = C · bytes_per_weight / (2 · W): a bf16 step does 2·B FLOPs per weight":
        "B_crit = C · bytes_per_weight / (2 · W)：bf16 的一步对每个权重做 2·B FLOPs",
    "use the chip's int8 op/s as C and 1 byte per weight":
        "用芯片的 int8 op/s 作为 C，每个权重 1 字节",
    "the dense bfloat16 peak over HBM bandwidth; NVIDIA's headline figures include 2:4 "
    "sparsity (twice the dense one)":
        "稠密 bfloat16 峰值除以 HBM 带宽；NVIDIA 宣传的数字包含 2:4 稀疏（是稠密峰值的两倍）",
    "compare the batch with B_crit: below it, loading the weights takes longer than the 2·B "
    "FLOPs per weight":
        "把批次与 B_crit 相比：低于它时，加载权重比每个权重 2·B FLOPs 的运算更费时",
    "2·T·S·G FLOPs per (T·G·2 + S·2) bytes per KV head and sequence (bf16); G = 1 and T = S "
    "gives T/2":
        "每个 KV 头、每个序列：2·T·S·G FLOPs 对 (T·G·2 + S·2) 字节（bf16）；G = 1 且 T = S "
        "时得 T/2",
    "with S = T the intensity S·T/(S + T) is T/2; find the smallest T at which it reaches C/W":
        "S = T 时强度 S·T/(S + T) 为 T/2；求它达到 C/W 的最小 T",
    "FLOPs 4·T·S·N·H against bytes 2·T·N·H·2 (queries in, output out) + 2·S·K·H·2 (keys and "
    "values); set T = 1 and N = G·K":
        "FLOPs 为 4·T·S·N·H，字节为 2·T·N·H·2（读入查询、写出输出）+ 2·S·K·H·2（键和值）；"
        "令 T = 1、N = G·K",
    "bf16 weight bytes / bytes of one sequence's cache of 4,096 tokens":
        "bf16 权重字节数 / 一个序列 4,096 个词元的缓存字节数",
    "C · bytes_per_weight / (2 · W); no rounding": "C · bytes_per_weight / (2 · W)；不取整",
    "the layer's two matmuls hold 2·D·F bf16 weights, split over 4 chips; time = bytes per "
    "chip / HBM bandwidth (registry value)":
        "这一层的两个矩阵乘法共有 2·D·F 个 bf16 权重，分到 4 个芯片上；时间 = 每个芯片的"
        "字节数 / HBM 带宽（注册表中的值）",
    # known mistakes
    "that is bytes per FLOP: put FLOP/s on top": "这是每 FLOP 的字节数：应把 FLOP/s 放在分子上",
    "that is the answer for bfloat16 weights with the factor 2 left out of 2·B FLOPs":
        "这是 bfloat16 权重、且 2·B FLOPs 中漏掉了因子 2 时的答案",
    _INT8_WEIGHTS: "int8 权重让每个权重的字节数减半，所以达到同样的每字节 FLOPs 所需的批次也减半",
    _INT8_MATH: "int8 运算让芯片的 FLOP/s 翻番：这会把 B_crit 乘以 2，而不是除以 2",
    "you used the sparse bf16 peak; a dense transformer gets half of it":
        "你用的是稀疏的 bf16 峰值；稠密的 Transformer 只能得到它的一半",
    "you used NVIDIA's FP8-with-sparsity figure, as the freer rendering's table does: four "
    "times the dense bfloat16 peak":
        "你用的是 NVIDIA 的 FP8 加稀疏的数字，与意译本的表格一样：那是稠密 bfloat16 峰值的四倍",
    "that is the weight matmuls' threshold; attention's intensity in prefill is T/2, not T":
        "这是权重矩阵乘法的阈值；预填充中注意力的强度是 T/2，而不是 T",
    "that is multi-head attention (G = 1): each key now serves G query heads":
        "这是多头注意力（G = 1）的答案：现在每个键要服务 G 个查询头",
    "you rounded the layer to 600M parameters, as the source does; count 2·D·F exactly":
        "你像原文那样把这一层凑成了 600M 个参数；请精确地计算 2·D·F",
    "bf16 weights take 2 bytes each": "bf16 权重每个占 2 字节",
    # messages of the checks
    "C={flops} FLOP/s, W={bandwidth} B/s, {bytes} bytes per weight":
        "C={flops} FLOP/s，W={bandwidth} B/s，每个权重 {bytes} 字节",
}
