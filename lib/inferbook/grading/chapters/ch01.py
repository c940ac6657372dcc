"""Questions of chapter 1, "Sampling and the KV cache" (exercises/01_sampling_kv_cache.py).

The numbers of the KV-caching article (seed 003, Lienhart 2023) — cache bytes per token of
Llama-2-7B and BLOOM-176B, what fits on an A10 beside the weights, the price of a 1,000-token
prompt — the FLOPs of a naive and a cached step, and three functions at the heart of the
library: writing new keys and values into the cache, merging two partial attentions by their
log-sum-exps, and top-k/top-p filtering. Every reference is computed by the library.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

import math

import numpy as np

from inferbook.model.presets import get_preset

from ..compare import allclose, compare_arrays, describe
from ..localize import question_text
from ..questions import Exact, Function, Mistake, Numeric

LLAMA, BLOOM, A10 = "llama-2-7b", "bloom-176b", "A10"
PROMPT, P0, N_NEW = 1000, 100, 1000       # the article's prompt; the generation of B3


def _kv_per_token(name: str) -> float:
    from inferbook.perf import counts
    return counts.kv_bytes_per_token(get_preset(name), 2)


def _a10_tokens() -> float:
    from inferbook.perf import counts
    from inferbook.perf.hardware import get_chip
    free = get_chip(A10).hbm_bytes - counts.param_bytes(get_preset(LLAMA), 2)
    return math.floor(free / _kv_per_token(LLAMA))


def _weights_in_tokens() -> float:
    from inferbook.perf import counts
    return counts.param_bytes(get_preset(LLAMA), 2) / _kv_per_token(LLAMA)


def _naive_step(t: int) -> int:
    """The forward pass over all t tokens that yields the distribution of token t + 1."""
    from inferbook.perf import counts
    return counts.forward_flops(get_preset(LLAMA), 1, t, logits_for=1)


def _cached_step(t: int) -> int:
    """Token t alone, against t - 1 cached keys and its own: t keys in all."""
    from inferbook.perf import counts
    return counts.forward_flops(get_preset(LLAMA), 1, 1, kv_len=t)


def _generation_ratio() -> float:
    naive = sum(_naive_step(P0 + i) for i in range(N_NEW))
    cached = _naive_step(P0) + sum(_cached_step(P0 + i) for i in range(1, N_NEW))
    return naive / cached


def _decode_memory_bound() -> bool:
    from inferbook.perf import counts
    from inferbook.perf.hardware import get_chip
    cfg, chip = get_preset(LLAMA), get_chip(A10)
    intensity = counts.flops_per_token(cfg) / counts.param_bytes(cfg, 2)   # batch 1
    return bool(intensity < chip.bf16_flops_per_s / chip.hbm_bytes_per_s)


_ONLY_KEYS = "that is half the answer: the cache keeps a value vector beside every key vector"
_FLOAT32 = "that is the float32 size; the question asks for 2-byte (bfloat16) elements"

# Coding exercises: inputs and references --------------------------------------------------


def _write_cases(rng):
    import jax.numpy as jnp
    cases = []
    # Few distinct shapes (each costs a compilation); the starts differ in every test.
    for B, K, S, H, T in [(3, 2, 12, 8, 3), (3, 2, 12, 8, 3), (1, 1, 8, 4, 1)]:
        cache = rng.standard_normal((B, K, S, H), dtype=np.float32)
        new = rng.standard_normal((B, T, K, H), dtype=np.float32)
        start = rng.integers(0, S - T + 1, size=B).astype(np.int32)
        cases.append((jnp.asarray(cache), jnp.asarray(new), jnp.asarray(start)))
    return cases


def _write_reference(cache_BKSH, new_BTKH, start_B):
    from inferbook.model.kvcache import write
    return write(cache_BKSH, new_BTKH, start_B)


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch01.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch01.{question}", template).format(**values)


def _describe_write(args):
    cache, new, start = args
    return f"cache {list(cache.shape)}, new {list(new.shape)}, start_B {np.asarray(start).tolist()}"


def _merge_cases(rng):
    import jax.numpy as jnp

    from inferbook.model.attention import MASKED
    cases = []
    for B, T, N, H, kind in [(2, 3, 4, 8, "plain"), (2, 3, 4, 8, "large"),
                             (2, 3, 4, 8, "masked"), (1, 1, 2, 4, "plain")]:
        out1, out2 = (rng.standard_normal((B, T, N, H), dtype=np.float32) for _ in range(2))
        lse1, lse2 = (rng.normal(0, 2, (B, T, N)).astype(np.float32) for _ in range(2))
        if kind == "large":        # exp() of these overflows, even in float64
            lse1, lse2 = lse1 * 10 + 1000, lse2 * 10 + 1000
        if kind == "masked":       # no key of part 1 is visible to the first query
            lse1[:, 0] = MASKED
        cases.append(tuple(jnp.asarray(a) for a in (out1, lse1, out2, lse2)))
    return cases


def _merge_reference(out1_BTNH, lse1_BTN, out2_BTNH, lse2_BTN):
    from inferbook.model.attention import merge_partials
    return merge_partials(out1_BTNH, lse1_BTN, out2_BTNH, lse2_BTN)


def _describe_merge(args):
    lse = np.concatenate([np.ravel(args[1]), np.ravel(args[3])])
    return _say("merge_attention", "out {shape}, lse from {low} to {high}",
                shape=list(args[0].shape), low=f"{lse.min():.3g}", high=f"{lse.max():.3g}")


def _filter_cases(rng):
    import jax.numpy as jnp
    cases = []
    for B, V, k, p in [(3, 32, 5, None), (3, 32, None, 0.5), (3, 32, 10, 0.9), (3, 32, 1, 0.8),
                       (3, 32, None, None), (1, 7, 7, 0.3)]:
        while True:
            logits = (3 * rng.standard_normal((B, V))).astype(np.float32)
            # Keep clear of ties with p: a 1e-7 rounding difference must not flip a token.
            top = np.sort(logits, axis=-1)[:, ::-1][:, :k]
            probs = np.exp(top - top[:, :1])
            probs /= probs.sum(-1, keepdims=True)
            if p is None or np.all(np.abs(np.cumsum(probs, -1) - probs - p) > 1e-4):
                break
        cases.append((jnp.asarray(logits), k, p))
    return cases


def _filter_reference(logits_BV, top_k, top_p):
    from inferbook.model.sampling import filter_logits
    return filter_logits(logits_BV, top_k, top_p)


def _compare_filtered(got, want):
    want = np.asarray(want)
    try:
        got = np.asarray(got, dtype=np.float64)
    except Exception:  # noqa: BLE001
        return _say("filter_logits", "return an array of shape {want}, not {got}",
                    want=want.shape, got=describe(got))
    if got.shape != want.shape:
        return _say("filter_logits", "the output has shape {got}; expected {want}",
                    got=got.shape, want=want.shape)
    removed_got, removed_want = got < -1e20, np.isneginf(want)    # -inf, or "minus huge"
    for row in range(want.shape[0]):
        if (removed_got[row] != removed_want[row]).any():
            n_got, n_want = int((~removed_got[row]).sum()), int((~removed_want[row]).sum())
            template = ("row {row} keeps {got} tokens where {want} should stay"
                        if n_got != n_want else
                        "row {row} keeps {got} tokens, the right number but not the right ones")
            return _say("filter_logits", template, row=row, got=n_got, want=n_want)
    return compare_arrays(np.where(removed_got, 0, got), np.where(removed_want, 0, want),
                          1e-5, 1e-5, _say("filter_logits", "the logits you keep"))


def _describe_filter(args):
    logits, k, p = args
    return f"logits {list(logits.shape)}, top_k={k}, top_p={p}"


QUESTIONS = [
    Numeric("ch01.kv_bytes_per_token_llama_2_7b", "KV-cache bytes per token, Llama-2-7B", 1,
            "2 · L · K · H elements per token, 2 bytes each; read L, K, H from the preset",
            reference=lambda: _kv_per_token(LLAMA), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _ONLY_KEYS), Mistake(lambda r: 2 * r, _FLOAT32)]),
    Numeric("ch01.kv_bytes_per_token_bloom_176b", "KV-cache bytes per token, BLOOM-176B", 1,
            "the same formula with BLOOM-176B's L, K and H",
            reference=lambda: _kv_per_token(BLOOM), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _ONLY_KEYS), Mistake(lambda r: 2 * r, _FLOAT32)]),
    Numeric("ch01.a10_tokens_after_weights", "Tokens of cache that fit on an A10", 1,
            "(memory − bytes of the bfloat16 weights) / cache bytes per token, rounded down; "
            "count the parameters exactly with counts.param_count, and read the A10's memory "
            "from inferbook.perf.hardware (decimal bytes: 24 GB = 24e9 B)",
            reference=_a10_tokens, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r + (24 * 2**30 - 24e9) / _kv_per_token(LLAMA),
                              "you used 24 GiB (24·2³⁰ bytes); the datasheet's 24 GB are "
                              "24e9 bytes")]),
    Numeric("ch01.weights_in_tokens", "Tokens whose cache weighs as much as the weights", 1,
            "bytes of the bfloat16 weights / cache bytes per token; the article's '14 GB / "
            "0.5 MB = 28k' rounds both numbers",
            reference=_weights_in_tokens, rel_tol=0.01),
    Numeric("ch01.prompt_kv_bytes", "Cache bytes of a 1,000-token prompt", 1,
            "1,000 tokens × the bytes per token of the first question",
            reference=lambda: PROMPT * _kv_per_token(LLAMA), rel_tol=0.005,
            mistakes=[Mistake(lambda r: r / 2, _ONLY_KEYS)]),
    Numeric("ch01.prompt_flops", "FLOPs to prefill a 1,000-token prompt (2P rule)", 1,
            "2 FLOPs per multiplying parameter per token: P counts every weight matrix "
            "including the output projection (counts.matmul_params), not the norms",
            reference=lambda: PROMPT * _flops_per_token(), rel_tol=0.03),
    Numeric("ch01.naive_step_flops", "FLOPs of a naive step at 1,000 tokens", 1,
            "2·(attention + MLP weights)·T + 4·L·N·H·T·S + 2·D·V for one unembedded position, "
            "with T = S = 1,000",
            reference=lambda: _naive_step(PROMPT), rel_tol=0.01),
    Numeric("ch01.cached_step_flops", "FLOPs of a cached step at 1,000 tokens", 1,
            "the same formula with T = 1 new token and S = 1,000 keys; do not forget the "
            "attention term 4·L·N·H·T·S",
            reference=lambda: _cached_step(PROMPT), rel_tol=0.01),
    Numeric("ch01.generation_flops_ratio", "Naive ÷ cached FLOPs for 1,000 new tokens", 2,
            "naive step i runs over 100 + i tokens; cached generation is one prefill of 100 "
            "tokens, then steps i = 1 … 999 with one token against 100 + i keys",
            reference=_generation_ratio, rel_tol=0.01),
    Exact("ch01.decode_memory_bound", "Is a batch-1 decode step memory-bound on an A10?", 1,
          "compare the FLOPs per byte of weights read (2 FLOPs per 2-byte weight) with the "
          "A10's FLOP/s divided by its bytes/s",
          reference=_decode_memory_bound, choices=(True, False)),
    Function("ch01.write_kv", "Write new keys at per-sequence positions", 3,
             "sequence b's T new entries go to slots start_B[b] … start_B[b] + T − 1 of axis 2 "
             "(S); note new_BTKH is [B, T, K, H] while the cache is [B, K, S, H]; JAX arrays "
             "are immutable: use .at[...].set(...) or lax.dynamic_update_slice",
             library_answers=("inferbook.model.kvcache.write",),
             reference=_write_reference, cases=_write_cases, compare=allclose(0, 0),
             describe_case=_describe_write),
    Function("ch01.merge_attention", "Merge two partial attentions by log-sum-exp", 3,
             "lse = log(e^lse1 + e^lse2), computed as m + log(e^(lse1−m) + e^(lse2−m)) with "
             "m = max(lse1, lse2); each output is weighted by e^(lse_part − lse)",
             library_answers=("inferbook.model.attention.merge_partials",),
             reference=_merge_reference, cases=_merge_cases,
             # float32 log-sum-exps near 1,000 carry ~6e-5 of rounding into every weight.
             compare=allclose(3e-4, 3e-4, names=("out", "lse")), describe_case=_describe_merge),
    Function("ch01.filter_logits", "Top-k, then top-p, filtering", 3,
             "top-k keeps the k largest logits; top-p then keeps, in decreasing order, each "
             "token while the probability mass before it (after top-k) is below p; removed "
             "tokens become -inf",
             library_answers=("inferbook.model.sampling.filter_logits",),
             reference=_filter_reference, cases=_filter_cases, compare=_compare_filtered,
             describe_case=_describe_filter),
]


def _flops_per_token() -> int:
    from inferbook.perf import counts
    return counts.flops_per_token(get_preset(LLAMA))


ZH = {
    # titles
    "KV-cache bytes per token, Llama-2-7B": "Llama-2-7B 每个词元的 KV 缓存字节数",
    "KV-cache bytes per token, BLOOM-176B": "BLOOM-176B 每个词元的 KV 缓存字节数",
    "Tokens of cache that fit on an A10": "A10 上放得下的缓存词元数",
    "Tokens whose cache weighs as much as the weights": "缓存与权重一样大时的词元数",
    "Cache bytes of a 1,000-token prompt": "1,000 个词元的提示词的缓存字节数",
    "FLOPs to prefill a 1,000-token prompt (2P rule)":
        "预填充 1,000 个词元的提示词的 FLOPs（2P 法则）",
    "FLOPs of a naive step at 1,000 tokens": "1,000 个词元时朴素步骤的 FLOPs",
    "FLOPs of a cached step at 1,000 tokens": "1,000 个词元时带缓存步骤的 FLOPs",
    "Naive ÷ cached FLOPs for 1,000 new tokens": "生成 1,000 个新词元：朴素 ÷ 带缓存的 FLOPs",
    "Is a batch-1 decode step memory-bound on an A10?":
        "批量大小为 1 的解码步骤在 A10 上是内存受限的吗？",
    "Write new keys at per-sequence positions": "把新的键写到各序列自己的位置",
    "Merge two partial attentions by log-sum-exp": "用 LSE 合并两个部分注意力",
    "Top-k, then top-p, filtering": "先 top-k、再 top-p 的过滤",
    # hints
    "2 · L · K · H elements per token, 2 bytes each; read L, K, H from the preset":
        "每个词元 2 · L · K · H 个元素，每个 2 字节；从预设中读出 L、K、H",
    "the same formula with BLOOM-176B's L, K and H": "同一个公式，换成 BLOOM-176B 的 L、K 和 H",
    "(memory − bytes of the bfloat16 weights) / cache bytes per token, rounded down; count the "
    "parameters exactly with counts.param_count, and read the A10's memory from "
    "inferbook.perf.hardware (decimal bytes: 24 GB = 24e9 B)":
        "（内存 − bfloat16 权重的字节数）/ 每个词元的缓存字节数，向下取整；用 counts.param_count "
        "精确地数出参数，A10 的内存从 inferbook.perf.hardware 读取（十进制字节：24 GB = 24e9 B）",
    "bytes of the bfloat16 weights / cache bytes per token; the article's '14 GB / 0.5 MB = "
    "28k' rounds both numbers":
        "bfloat16 权重的字节数 / 每个词元的缓存字节数；文章里的“14 GB / 0.5 MB = 28k”把两个数"
        "都凑了整",
    "1,000 tokens × the bytes per token of the first question":
        "1,000 个词元 × 第一题的每词元字节数",
    "2 FLOPs per multiplying parameter per token: P counts every weight matrix including the "
    "output projection (counts.matmul_params), not the norms":
        "每个参与乘法的参数、每个词元 2 FLOPs：P 计入每一个权重矩阵，包括输出投影"
        "（counts.matmul_params），但不计归一化层",
    "2·(attention + MLP weights)·T + 4·L·N·H·T·S + 2·D·V for one unembedded position, with "
    "T = S = 1,000":
        "2·（注意力 + MLP 权重）·T + 4·L·N·H·T·S + 2·D·V（只反嵌入一个位置），其中 "
        "T = S = 1,000",
    "the same formula with T = 1 new token and S = 1,000 keys; do not forget the attention "
    "term 4·L·N·H·T·S":
        "同一个公式，T = 1 个新词元、S = 1,000 个键；别忘了注意力项 4·L·N·H·T·S",
    "naive step i runs over 100 + i tokens; cached generation is one prefill of 100 tokens, "
    "then steps i = 1 … 999 with one token against 100 + i keys":
        "朴素的第 i 步处理 100 + i 个词元；带缓存的生成先对 100 个词元做一次预填充，然后第 "
        "i = 1 … 999 步用一个词元对着 100 + i 个键",
    "compare the FLOPs per byte of weights read (2 FLOPs per 2-byte weight) with the A10's "
    "FLOP/s divided by its bytes/s":
        "把每读一个权重字节的 FLOPs（每个 2 字节的权重 2 FLOPs）与 A10 的 FLOP/s 除以它的 "
        "bytes/s 作比较",
    "sequence b's T new entries go to slots start_B[b] … start_B[b] + T − 1 of axis 2 (S); "
    "note new_BTKH is [B, T, K, H] while the cache is [B, K, S, H]; JAX arrays are immutable: "
    "use .at[...].set(...) or lax.dynamic_update_slice":
        "序列 b 的 T 个新条目放进第 2 轴（S）的槽位 start_B[b] … start_B[b] + T − 1；注意 "
        "new_BTKH 是 [B, T, K, H]，而缓存是 [B, K, S, H]；JAX 数组不可修改：用 "
        ".at[...].set(...) 或 lax.dynamic_update_slice",
    "lse = log(e^lse1 + e^lse2), computed as m + log(e^(lse1−m) + e^(lse2−m)) with m = "
    "max(lse1, lse2); each output is weighted by e^(lse_part − lse)":
        "lse = log(e^lse1 + e^lse2)，按 m + log(e^(lse1−m) + e^(lse2−m)) 计算，其中 "
        "m = max(lse1, lse2)；每个输出的权重是 e^(lse_part − lse)",
    "top-k keeps the k largest logits; top-p then keeps, in decreasing order, each token while "
    "the probability mass before it (after top-k) is below p; removed tokens become -inf":
        "top-k 保留最大的 k 个 logits；top-p 接着按从大到小的顺序，只要某个词元之前的概率质量"
        "（top-k 之后）仍小于 p，就保留它；去掉的词元设为 -inf",
    # known mistakes
    _ONLY_KEYS: "这只是答案的一半：缓存在每个键向量旁边还存着一个值向量",
    _FLOAT32: "这是 float32 的大小；题目问的是 2 字节（bfloat16）的元素",
    "you used 24 GiB (24·2³⁰ bytes); the datasheet's 24 GB are 24e9 bytes":
        "你用的是 24 GiB（24·2³⁰ 字节）；数据手册上的 24 GB 是 24e9 字节",
    # messages of the checks
    "out {shape}, lse from {low} to {high}": "out {shape}，lse 的取值从 {low} 到 {high}",
    "return an array of shape {want}, not {got}": "请返回形状为 {want} 的数组，而不是 {got}",
    "the output has shape {got}; expected {want}": "输出的形状是 {got}；应为 {want}",
    "row {row} keeps {got} tokens where {want} should stay":
        "第 {row} 行保留了 {got} 个词元，应保留 {want} 个",
    "row {row} keeps {got} tokens, the right number but not the right ones":
        "第 {row} 行保留了 {got} 个词元，个数对了，但保留的不是那些词元",
    "the logits you keep": "你保留的 logits",
}
