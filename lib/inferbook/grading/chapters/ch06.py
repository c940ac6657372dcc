"""Questions of chapter 6, "FlashAttention" (exercises/06_kernels.py).

How many bytes standard attention moves through HBM and how many a tiled kernel moves, how
much of an A100 FlashAttention-1's grid keeps busy at batch 1 and how many programs
FlashAttention-2's grid launches, and one function: the online-softmax step that folds a tile
of scores into the running output. Every reference is computed by the library when it runs.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..compare import allclose
from ..localize import question_text
from ..questions import Exact, Function, Mistake, Numeric

# The problem's givens: one head of width H in bfloat16, a prefill of n tokens (T = S = n),
# FlashAttention's query tiles of BQ rows on an A100, Llama-2-7B's heads.
N_TOKENS, H, BYTES, BQ = 8192, 128, 2, 128
MODEL, GPU = "llama-2-7b", "A100 40GB"


def _attention_bytes(T: int, S: int) -> float:
    """Bytes of one fused pass for one head: read Q, write O, read K and V once."""
    from inferbook.perf import roofline
    return roofline.attention_cost(T, S, 1, 1, H, act_bytes=BYTES, kv_bytes=BYTES)[1]


def _standard_bytes() -> float:
    # The fused minimum, plus the [T, S] scores written and read back, then the
    # probabilities written and read back: 4·T·S elements.
    n = N_TOKENS
    return _attention_bytes(n, n) + 4 * n * n * BYTES


def _flash_bytes() -> float:
    # Q read and O written once; K and V read once per query tile.
    n = N_TOKENS
    return _attention_bytes(n, 0) + (n / BQ) * _attention_bytes(0, n)


def _sms() -> int:
    from inferbook.book import bookdata
    return int({c["chip"]: c for c in bookdata.load("gpu_on_chip.json")["chips"]}[GPU]["sms"])


def _heads() -> int:
    from inferbook.model.presets import get_preset
    return get_preset(MODEL).N


def _fa1_busy() -> float:
    return min(1.0, _heads() / _sms())          # one thread block per (sequence, head)


def _fa2_programs() -> int:
    return _heads() * (N_TOKENS // BQ)          # ... and per query tile


# The coding exercise ---------------------------------------------------------------------

def _step_cases(rng):
    import jax.numpy as jnp

    from inferbook.model.attention import MASKED
    cases = []
    for R, C, Hd, kind in [(4, 8, 16, "first"), (4, 8, 16, "middle"), (4, 8, 16, "rising"),
                           (4, 8, 16, "masked")]:     # one shape: eager JAX compiles per shape
        s = rng.normal(0, 2, (R, C)).astype(np.float32)
        v = rng.standard_normal((C, Hd)).astype(np.float32)
        if kind == "first":          # nothing seen yet: the accumulators' starting values
            o = np.zeros((R, Hd), np.float32)
            m = np.full((R,), MASKED, np.float32)
            l_R = np.zeros((R,), np.float32)
        else:
            o = rng.standard_normal((R, Hd)).astype(np.float32)
            m = rng.normal(1, 1, (R,)).astype(np.float32)
            l_R = rng.uniform(1, 5, (R,)).astype(np.float32)
        if kind == "rising":         # every new score beats the old maximum: rescale all
            s = s + 10
        if kind == "masked":         # some keys are hidden from some rows (never all of a row)
            hide = rng.random((R, C)) < 0.4
            hide[:, 0] = False
            s = np.where(hide, MASKED, s).astype(np.float32)
        cases.append(tuple(jnp.asarray(a) for a in (o, m, l_R, s, v)))
    return cases


@lru_cache(maxsize=1)
def _step_compiled():
    import jax

    from inferbook.kernels.flash import online_softmax_step
    return jax.jit(lambda o, m, l_R, s, v: online_softmax_step((o, m, l_R), s, v, "RC,CH->RH"))


def _step_reference(o_RH, m_R, l_R, s_RC, v_CH):
    return _step_compiled()(o_RH, m_R, l_R, s_RC, v_CH)


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch06.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch06.{question}", template).format(**values)


def _describe_step(args):
    o, m, l_R, s, v = args
    first = bool(np.all(np.asarray(l_R) == 0))
    template = ("o {o}, scores {s}, nothing accumulated yet" if first else
                "o {o}, scores {s}, continuing a row")
    return _say("online_softmax_step", template, o=list(o.shape), s=list(s.shape))


QUESTIONS = [
    Numeric("ch06.standard_attention_bytes", "HBM bytes of standard attention, one head", 1,
            "read Q and K, write the T×S scores; read them, write the T×S probabilities; read "
            "them and V, write O: b·(2TH + 2SH + 4TS) bytes",
            reference=_standard_bytes, rel_tol=0.01,
            mistakes=[Mistake(lambda r: r - 2 * N_TOKENS**2 * BYTES,
                              "you wrote each T×S matrix but never read it back: the softmax "
                              "kernel reads the scores, and the last kernel reads the "
                              "probabilities"),
                      Mistake(lambda r: _attention_bytes(N_TOKENS, N_TOKENS),
                              "that is what a fused kernel moves; standard attention also "
                              "sends both T×S matrices through HBM")]),
    Numeric("ch06.flash_attention_bytes", "HBM bytes of tiled attention, one head", 1,
            "Q is read and O written once; every tile of query rows reads all of K and V: "
            "b·(2TH + (T/b_q)·2SH)",
            reference=_flash_bytes, rel_tol=0.01,
            mistakes=[Mistake(lambda r: _attention_bytes(N_TOKENS, N_TOKENS),
                              "you read K and V once in all; each of the T/b_q query tiles "
                              "reads them again")]),
    Numeric("ch06.fa1_busy_share", "Share of an A100's SMs busy under FlashAttention-1", 1,
            "one thread block per (sequence, head): B·N blocks for the SMs (at most 100%)",
            reference=_fa1_busy, rel_tol=0.01),
    Exact("ch06.fa2_programs", "Thread blocks of FlashAttention-2's grid", 1,
          "FlashAttention-2 adds the query tiles to the grid: B · N · (T / b_q)",
          reference=_fa2_programs),
    Function("ch06.online_softmax_step", "Fold a tile of scores into the running softmax", 3,
             "m' = max(m, row max of s); rescale what you had by exp(m − m'); the new weights "
             "are exp(s − m'); l' = exp(m − m')·l + Σ weights; o' = exp(m − m')·o + weights @ v "
             "(o stays unnormalised)",
             library_answers=("inferbook.kernels.flash.online_softmax_step",),
             reference=_step_reference, cases=_step_cases,
             compare=allclose(1e-5, 1e-5, names=("o", "m", "l")), describe_case=_describe_step),
]


ZH = {
    # titles
    "HBM bytes of standard attention, one head": "标准注意力的 HBM 字节数（一个头）",
    "HBM bytes of tiled attention, one head": "分块注意力的 HBM 字节数（一个头）",
    "Share of an A100's SMs busy under FlashAttention-1":
        "FlashAttention-1 下 A100 有活可干的 SM 所占比例",
    "Thread blocks of FlashAttention-2's grid": "FlashAttention-2 网格中的线程块数",
    "Fold a tile of scores into the running softmax": "把一个分数分块并入累计的 softmax",
    # hints
    "read Q and K, write the T×S scores; read them, write the T×S probabilities; read them and "
    "V, write O: b·(2TH + 2SH + 4TS) bytes":
        "读 Q 和 K，写出 T×S 的分数；读回分数，写出 T×S 的概率；读回概率和 V，写出 O："
        "b·(2TH + 2SH + 4TS) 字节",
    "Q is read and O written once; every tile of query rows reads all of K and V: "
    "b·(2TH + (T/b_q)·2SH)":
        "Q 读一次、O 写一次；每个查询行分块都要读入全部的 K 和 V：b·(2TH + (T/b_q)·2SH)",
    "one thread block per (sequence, head): B·N blocks for the SMs (at most 100%)":
        "每个（序列，头）一个线程块：B·N 个线程块分给各个 SM（至多 100%）",
    "FlashAttention-2 adds the query tiles to the grid: B · N · (T / b_q)":
        "FlashAttention-2 把查询分块也加进网格：B · N · (T / b_q)",
    "m' = max(m, row max of s); rescale what you had by exp(m − m'); the new weights are "
    "exp(s − m'); l' = exp(m − m')·l + Σ weights; o' = exp(m − m')·o + weights @ v (o stays "
    "unnormalised)":
        "m' = max(m, s 的行最大值)；把已有的量乘以 exp(m − m') 重新缩放；新的权重是 "
        "exp(s − m')；l' = exp(m − m')·l + Σ 权重；o' = exp(m − m')·o + 权重 @ v"
        "（o 保持未归一化）",
    # known mistakes
    "you wrote each T×S matrix but never read it back: the softmax kernel reads the scores, "
    "and the last kernel reads the probabilities":
        "你写出了每个 T×S 矩阵，却从没把它读回来：softmax 内核要读分数，最后一个内核要读概率",
    "that is what a fused kernel moves; standard attention also sends both T×S matrices "
    "through HBM":
        "这是融合内核搬运的量；标准注意力还要让两个 T×S 矩阵都经过 HBM",
    "you read K and V once in all; each of the T/b_q query tiles reads them again":
        "你总共只读了一次 K 和 V；T/b_q 个查询分块中的每一个都要再读一遍",
    # messages of the checks
    "o {o}, scores {s}, nothing accumulated yet": "o {o}，分数 {s}，还没有累加任何东西",
    "o {o}, scores {s}, continuing a row": "o {o}，分数 {s}，接着一行往下累加",
}
