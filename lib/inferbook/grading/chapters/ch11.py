"""Questions of chapter 11, "Designing an inference engine" (exercises/11_serving.py).

How many generate steps static batching and interleaved (continuous) batching run for the
same requests — replayed through the library's own orchestrator on its mock engine — and the
estimator's costs of disaggregated serving: one decode step, one prefill, and shipping the
prefill's KV cache to the generate server.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`).
"""

from __future__ import annotations

from ..questions import Exact, Mistake, Numeric

# Eight requests, all waiting at time 0, with these output lengths; four decode slots.
OUTPUT_LENGTHS = (3, 12, 5, 7, 20, 2, 9, 4)
SLOTS = 4
MODEL, CHIP, PROMPT = "llama-2-7b", "TPU v5e", 4096
DECODE_BATCH, DECODE_CONTEXT = 32, 2048


def _generate_steps(design: str) -> int:
    """Replay the requests through the orchestrator and count its generate calls."""
    from inferbook.serving import CostTimer, LinearCost, MockEngine, Request, serve
    trace = [Request(i, (1, 2, 3, 4 + i), n) for i, n in enumerate(OUTPUT_LENGTHS)]
    run = serve(MockEngine(slots=SLOTS, max_len=64), None, trace, design,
                timer=CostTimer(LinearCost()))
    return sum(e.kind == "generate" for e in run.events)


def _cfg():
    from inferbook.model.presets import get_preset
    return get_preset(MODEL)


def _chip():
    from inferbook.perf.hardware import get_chip
    return get_chip(CHIP)


def _transfer() -> float:
    from inferbook.perf import phase_time
    return phase_time.kv_transfer_seconds(_cfg(), PROMPT, _chip().link_bytes_per_s)


def _prefill() -> float:
    from inferbook.perf import phase_time
    from inferbook.perf.step_cost import step_time
    return step_time(phase_time.prefill_step_cost(_cfg(), PROMPT), _chip())


def _decode_step() -> float:
    from inferbook.perf import phase_time
    from inferbook.perf.step_cost import step_time
    return step_time(phase_time.generate_step_cost(_cfg(), DECODE_BATCH,
                                                   DECODE_BATCH * DECODE_CONTEXT), _chip())


_FIRST_TOKEN = ("the prefill already produces each request's first token, so a request of n "
                "tokens needs n − 1 generate steps")
_FIRST_TOKEN_ZH = ("预填充已经产生了每个请求的第一个词元，所以一个要 n 个词元的请求需要 "
                   "n − 1 个生成步骤")
_STATIC_HINT = ("batches of 4 in arrival order; a batch runs until its longest request is done, "
                "and " + _FIRST_TOKEN)
_INTERLEAVED_HINT = ("simulate it: before every generate step, each free slot takes the next "
                     "waiting request (its prefill gives its first token); every step gives each "
                     "running request one token; a request leaves its slot when it has all its "
                     "tokens. " + _FIRST_TOKEN)
_LEFT_OUT_KV = ("you left out reading the KV cache, which at this batch and context costs about "
                "as much as the weights")

QUESTIONS = [
    Exact("ch11.static_steps", "Generate steps under static batching", 1, _STATIC_HINT,
          reference=lambda: _generate_steps("static")),
    Exact("ch11.interleaved_steps", "Generate steps when slots are refilled at once", 2,
          _INTERLEAVED_HINT, reference=lambda: _generate_steps("interleaved")),
    Numeric("ch11.decode_step_seconds", "One decode step of Llama-2-7B on a TPU v5e", 1,
            "the KV cache of the whole batch is read at HBM speed, plus the larger of the "
            "weights' read time and the matmuls' time (bf16 weights and cache)",
            reference=_decode_step, rel_tol=0.02,
            mistakes=[Mistake(lambda r: r - DECODE_BATCH * DECODE_CONTEXT
                              * 2 * _cfg().L * _cfg().K * _cfg().H * 2 / _chip().hbm_bytes_per_s,
                              _LEFT_OUT_KV)]),
    Numeric("ch11.prefill_seconds", "Prefill of a 4,096-token prompt on a TPU v5e", 1,
            "the larger of FLOPs / peak and bytes / bandwidth (counts.forward_flops counts "
            "the FLOPs with the logits of one position); long prompts are compute-bound",
            reference=_prefill, rel_tol=0.02),
    Numeric("ch11.kv_transfer_seconds", "Shipping that prompt's KV cache over one ICI link", 1,
            "tokens × 2·L·K·H·2 bytes, over one link's one-way bandwidth (link_bytes_per_s)",
            reference=_transfer, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / 2, "keys and values both make the trip")]),
]

ZH = {
    # titles
    "Generate steps under static batching": "静态批处理下的生成步骤数",
    "Generate steps when slots are refilled at once": "槽位一空出来就重新填上时的生成步骤数",
    "One decode step of Llama-2-7B on a TPU v5e": "TPU v5e 上 Llama-2-7B 的一个解码步骤",
    "Prefill of a 4,096-token prompt on a TPU v5e": "TPU v5e 上预填充一个 4,096 个词元的提示词",
    "Shipping that prompt's KV cache over one ICI link": "经一条 ICI 链路传送这个提示词的 KV 缓存",
    # hints
    _STATIC_HINT:
        "按到达顺序每 4 个请求一批；一批一直运行到其中最长的请求完成；另外，" + _FIRST_TOKEN_ZH,
    _INTERLEAVED_HINT:
        "模拟一遍：每个生成步骤之前，每个空闲槽位接收下一个等待中的请求（它的预填充给出它的第一个"
        "词元）；每一步给每个运行中的请求一个词元；请求拿到全部词元后离开它的槽位。"
        + _FIRST_TOKEN_ZH,
    "the KV cache of the whole batch is read at HBM speed, plus the larger of the weights' read "
    "time and the matmuls' time (bf16 weights and cache)":
        "以 HBM 速度读取整个批次的 KV 缓存，再加上读取权重的时间与矩阵乘法的时间中较大的那个"
        "（权重和缓存都是 bf16）",
    "the larger of FLOPs / peak and bytes / bandwidth (counts.forward_flops counts the FLOPs "
    "with the logits of one position); long prompts are compute-bound":
        "FLOPs / 峰值算力与字节数 / 带宽中较大的那个（counts.forward_flops 计入一个位置的 logits "
        "的 FLOPs）；长提示词是计算受限的",
    "tokens × 2·L·K·H·2 bytes, over one link's one-way bandwidth (link_bytes_per_s)":
        "词元数 × 2·L·K·H·2 字节，除以一条链路的单向带宽（link_bytes_per_s）",
    # known mistakes
    _LEFT_OUT_KV:
        "你漏掉了读取 KV 缓存的时间；在这个批量大小和上下文长度下，它和读取权重的代价差不多",
    "keys and values both make the trip": "键和值都要传送",
}
