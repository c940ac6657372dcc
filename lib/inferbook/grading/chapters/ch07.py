"""Questions of chapter 7, "Decoding kernels" (exercises/06_kernels.py).

Why decode attention is memory-bound whatever the batch, how many chunks Flash-Decoding needs
to give every SM of an H100 work, and two functions: the log-sum-exp combine of P partial
attentions (Flash-Decoding's last step) and the gather that turns a paged pool into each
sequence's contiguous cache (PagedAttention's reference). References come from the library.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ..compare import allclose
from ..localize import question_text
from ..questions import Exact, Function, Mistake, Numeric

MODEL, GPU, CONTEXT, BATCH = "mistral-7b", "H100 SXM", 8192, 1


def _cfg():
    from inferbook.model.presets import get_preset
    return get_preset(MODEL)


def _decode_intensity() -> float:
    from inferbook.perf import roofline
    cfg = _cfg()
    return roofline.attention_intensity(1, CONTEXT, cfg.N // cfg.K)


def _sms() -> int:
    from inferbook.book import bookdata
    return int({c["chip"]: c for c in bookdata.load("gpu_on_chip.json")["chips"]}[GPU]["sms"])


def _splits() -> int:
    return math.ceil(_sms() / (BATCH * _cfg().K))


# Coding exercises --------------------------------------------------------------------------

def _combine_cases(rng):
    import jax.numpy as jnp
    cases = []
    # Two shapes only: a student's eager JAX compiles every operation once per shape.
    for B, K, P, M, Hd, kind in [(2, 2, 4, 3, 8, "plain"), (2, 2, 4, 3, 8, "large"),
                                 (2, 2, 4, 3, 8, "empty"), (1, 2, 8, 4, 4, "empty")]:
        out = rng.standard_normal((B, K, P, M, Hd)).astype(np.float32)
        lse = rng.normal(0, 3, (B, K, P, M)).astype(np.float32)
        if kind == "large":            # exp() overflows here, even in float64
            lse = lse * 10 + 2000
        if kind == "empty":            # chunks past a short sequence's end saw no key
            empty = rng.random((B, K, P, M)) < 0.4
            empty[:, :, 0] = False     # ... but every row saw some key
            lse = np.where(empty, -np.inf, lse).astype(np.float32)
            out = np.where(empty[..., None], 0.0, out).astype(np.float32)
        cases.append((jnp.asarray(out), jnp.asarray(lse)))
    return cases


@lru_cache(maxsize=None)
def _compiled(name: str):
    """The library's function, jitted: one compilation per shape, not one per operation."""
    import jax

    from inferbook.kernels import flash_decoding, paged
    return jax.jit({"combine": flash_decoding.combine_chunks, "gather": paged.gather_blocks}[name])


def _combine_reference(out_BKPMH, lse_BKPM):
    return _compiled("combine")(out_BKPMH, lse_BKPM)


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch07.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch07.{question}", template).format(**values)


def _describe_combine(args):
    out, lse = args
    lse = np.asarray(lse)
    finite = lse[np.isfinite(lse)]
    empty = int((~np.isfinite(lse)).sum())
    return (_say("combine_chunks", "out {shape}, lse from {low} to {high}",
                 shape=list(out.shape), low=f"{finite.min():.3g}", high=f"{finite.max():.3g}")
            + (_say("combine_chunks", ", {empty} empty chunks (lse = -inf)", empty=empty)
               if empty else ""))


def _gather_cases(rng):
    import jax.numpy as jnp
    cases = []
    for n_blocks, K, C, Hd, B, J in [(10, 2, 4, 3, 3, 3), (10, 2, 4, 3, 3, 3), (5, 1, 2, 2, 2, 4)]:
        pool = rng.standard_normal((n_blocks, K, C, Hd)).astype(np.float32)
        table = rng.integers(0, n_blocks, (B, J)).astype(np.int32)   # blocks may repeat
        cases.append((jnp.asarray(pool), jnp.asarray(table)))
    return cases


def _gather_reference(pool_NKCH, block_table_BJ):
    return _compiled("gather")(pool_NKCH, block_table_BJ)


def _describe_gather(args):
    pool, table = args
    return _say("gather_blocks", "pool {shape}, block table {table}", shape=list(pool.shape),
                table=np.asarray(table).tolist())


QUESTIONS = [
    Numeric("ch07.decode_intensity", "FLOPs per byte of decode attention, Mistral-7B", 1,
            "one query per head against S cached keys: 4·N·S·H FLOPs; the bytes are the "
            "cache, 2·K·S·H elements of 2 bytes (plus the query and output, tiny); "
            "roofline.attention_intensity(T, S, G) is the formula",
            reference=_decode_intensity, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r / (_cfg().N // _cfg().K),
                              "that is the intensity without grouped queries: here the "
                              "G = N/K query heads of a group all use each key they read")]),
    Exact("ch07.splits_to_fill", "Flash-Decoding chunks that give every SM work", 1,
          "without splitting there are B·K programs (one per sequence and KV head); with P "
          "chunks, B·K·P. Find the smallest P with B·K·P ≥ the number of SMs",
          reference=_splits),
    Function("ch07.combine_chunks", "Combine P partial attentions by log-sum-exp", 3,
             "lse = logsumexp over the chunk axis (axis 2), computed stably (subtract the "
             "maximum); chunk p weighs exp(lse_p − lse); a chunk with lse = −inf weighs 0 — "
             "watch out for −inf − (−inf) = nan",
             library_answers=("inferbook.kernels.flash_decoding.combine_chunks",),
             reference=_combine_reference, cases=_combine_cases,
             compare=allclose(3e-4, 3e-4, names=("out", "lse")),
             describe_case=_describe_combine),
    Function("ch07.gather_blocks", "Gather a paged pool into contiguous caches", 2,
             "row b of the table lists sequence b's blocks in order; pool[table] is "
             "[B, J, K, C, H]; put J next to C (transpose) and merge them into one axis of "
             "J·C positions",
             library_answers=("inferbook.kernels.paged.gather_blocks",),
             reference=_gather_reference, cases=_gather_cases, compare=allclose(0, 0),
             describe_case=_describe_gather),
]


ZH = {
    # titles
    "FLOPs per byte of decode attention, Mistral-7B": "Mistral-7B 解码注意力每字节的 FLOPs",
    "Flash-Decoding chunks that give every SM work": "让每个 SM 都有活干的 Flash-Decoding 块数",
    "Combine P partial attentions by log-sum-exp": "用 LSE 合并 P 个部分注意力",
    "Gather a paged pool into contiguous caches": "把分页的池收集成连续的缓存",
    # hints
    "one query per head against S cached keys: 4·N·S·H FLOPs; the bytes are the cache, "
    "2·K·S·H elements of 2 bytes (plus the query and output, tiny); "
    "roofline.attention_intensity(T, S, G) is the formula":
        "每个头一个查询，对着 S 个缓存的键：4·N·S·H FLOPs；字节就是缓存，2·K·S·H 个元素，每个 "
        "2 字节（再加上查询和输出，很少）；公式就是 roofline.attention_intensity(T, S, G)",
    "without splitting there are B·K programs (one per sequence and KV head); with P chunks, "
    "B·K·P. Find the smallest P with B·K·P ≥ the number of SMs":
        "不切分时有 B·K 个程序（每个序列、每个 KV 头一个）；切成 P 块时有 B·K·P 个。找出满足 "
        "B·K·P ≥ SM 数的最小 P",
    "lse = logsumexp over the chunk axis (axis 2), computed stably (subtract the maximum); "
    "chunk p weighs exp(lse_p − lse); a chunk with lse = −inf weighs 0 — watch out for "
    "−inf − (−inf) = nan":
        "lse = 在块的轴（第 2 轴）上求 logsumexp，要以数值稳定的方式计算（先减去最大值）；第 p "
        "块的权重是 exp(lse_p − lse)；lse = −inf 的块权重为 0——当心 −inf − (−inf) = nan",
    "row b of the table lists sequence b's blocks in order; pool[table] is [B, J, K, C, H]; "
    "put J next to C (transpose) and merge them into one axis of J·C positions":
        "表的第 b 行按顺序列出序列 b 的块；pool[table] 的形状是 [B, J, K, C, H]；把 J 挪到 C "
        "旁边（转置），再把两者合并成一个有 J·C 个位置的轴",
    # known mistakes
    "that is the intensity without grouped queries: here the G = N/K query heads of a group "
    "all use each key they read":
        "这是查询不分组时的强度：这里一组中的 G = N/K 个查询头都会用到读入的每一个键",
    # messages of the checks
    "out {shape}, lse from {low} to {high}": "out {shape}，lse 的取值从 {low} 到 {high}",
    ", {empty} empty chunks (lse = -inf)": "，其中 {empty} 个空块（lse = -inf）",
    "pool {shape}, block table {table}": "池 {shape}，块表 {table}",
}
