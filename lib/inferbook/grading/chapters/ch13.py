"""Questions of chapter 13, "Speculative decoding" (exercises/11_serving.py).

Leviathan et al.'s numbers — the acceptance rate of a draft distribution, the expected
tokens per target step (1 − α^(γ+1)) / (1 − α), the speedup when a draft step costs c target
steps, and the best γ — and the acceptance rule itself, with its uniforms given, checked
against the library's `serving.speculative.accept` on random distributions.

`ZH` holds the Chinese of every title, hint and message of this set, keyed by the English
(`inferbook.grading.localize`); messages with fields are templates, filled by `_say`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..compare import allclose
from ..localize import question_text
from ..questions import Exact, Function, Mistake, Numeric

ALPHA, GAMMA, COST = 0.8, 4, 0.05
# Two distributions over five tokens: the target's p and the draft's q.
P_TARGET = (0.40, 0.25, 0.20, 0.10, 0.05)
Q_DRAFT = (0.20, 0.45, 0.15, 0.10, 0.10)


def _tokens() -> float:
    from inferbook.perf import speculation
    return speculation.expected_tokens_per_step(ALPHA, GAMMA)


def _speedup() -> float:
    from inferbook.perf import speculation
    return speculation.speculative_speedup(ALPHA, GAMMA, COST)


def _best_gamma() -> int:
    from inferbook.perf import speculation
    return speculation.optimal_gamma(ALPHA, COST)


def _acceptance() -> float:
    from inferbook.perf import speculation
    return speculation.acceptance_rate(P_TARGET, Q_DRAFT)


# The acceptance rule -----------------------------------------------------------------------

def _accept_cases(rng):
    import jax.numpy as jnp
    cases = []
    for gamma, V, kind in [(4, 8, "mixed"), (4, 8, "mixed"), (4, 8, "same"), (4, 8, "far"),
                           (1, 5, "mixed"), (6, 8, "mixed")]:
        while True:
            p = rng.dirichlet(np.ones(V), gamma + 1).astype(np.float32)
            # A draft close to the target, as a good small model is: half its mass from p.
            q = (0.5 * p[:gamma] + 0.5 * rng.dirichlet(np.ones(V), gamma)).astype(np.float32)
            if kind == "same":          # the draft is the target: every draft is accepted
                q = p[:gamma].copy()
            if kind == "far":           # the draft favours what the target does not
                q = rng.dirichlet(np.full(V, 0.2), gamma).astype(np.float32)
            drafts = np.array([rng.choice(V, p=q_i / q_i.sum()) for q_i in q], np.int32)
            u = rng.random(gamma).astype(np.float32)
            pos = np.arange(gamma)
            gap = u * q[pos, drafts] - p[pos, drafts]
            if np.all(np.abs(gap) > 1e-4):      # no coin flip decided by rounding
                break
        cases.append(tuple(jnp.asarray(a) for a in (drafts, q, p, u)))
    return cases


@lru_cache(maxsize=1)
def _accept_compiled():
    import jax

    from inferbook.serving.speculative import accept
    return jax.jit(accept)          # one compilation per shape, not one per operation


def _accept_reference(drafts, q, p, u):
    return _accept_compiled()(drafts, q, p, drafts.shape[0], u)


def _say(question: str, template: str, **values: object) -> str:
    """A message of question `ch13.<question>` in the kernel's language, fields filled in."""
    return question_text(f"ch13.{question}", template).format(**values)


def _describe_accept(args):
    drafts, q, p, u = args
    return _say("accept", "γ={gamma} drafts {drafts} over V={V} tokens, u={u}",
                gamma=len(drafts), drafts=np.asarray(drafts).tolist(), V=q.shape[1],
                u=np.round(np.asarray(u), 3).tolist())


QUESTIONS = [
    Numeric("ch13.acceptance_rate", "Acceptance rate α of the draft q for the target p", 1,
            "a draft token x drawn from q survives with probability min(1, p(x)/q(x)); "
            "average over x ~ q: Σ_x min(p(x), q(x))",
            reference=_acceptance, rel_tol=0.005,
            mistakes=[Mistake(lambda r: 1 - r, "that is the total-variation distance, the "
                              "chance of a rejection; α is one minus it")]),
    Numeric("ch13.expected_tokens", "Expected tokens per target step, α = 0.8, γ = 4", 1,
            "draft i survives with probability α^i (all before it must too); add the target's "
            "own token: 1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α)",
            reference=_tokens, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r - 1, "you counted the accepted drafts but not the "
                              "token the target adds every round"),
                      Mistake(lambda r: 1 + GAMMA * ALPHA, "drafts are accepted in a run: "
                              "draft i counts only if drafts 1 … i − 1 were accepted too")]),
    Numeric("ch13.speedup", "Speedup when a draft step costs 5% of a target step", 1,
            "a round costs γ draft steps (c each) plus one target step, and yields the expected "
            "tokens of the question before; plain decoding yields one token per target step",
            reference=_speedup, rel_tol=0.005,
            mistakes=[Mistake(lambda r: r * (GAMMA * COST + 1), "you left out the cost of the "
                              "drafts")]),
    Exact("ch13.best_gamma", "The γ (0 … 32) with the highest speedup", 1,
          "evaluate the speedup of the question before for every γ from 0 to 32",
          reference=_best_gamma),
    Function("ch13.accept", "The acceptance rule, with its uniforms given", 4,
             "walk the drafts in order: draft i (token x) is accepted when u_i·q_i(x) < p_i(x); "
             "stop at the first rejection. n = accepted count. After a rejection at i = n the "
             "target's token comes from max(0, p_n − q_n), renormalised; if all γ were accepted "
             "it comes from p_γ (row γ of p, the bonus token)",
             library_answers=("inferbook.serving.speculative.accept",
                              "inferbook.serving.speculative.verify"),
             reference=_accept_reference, cases=_accept_cases,
             compare=allclose(1e-5, 1e-6, names=("n", "dist")),
             describe_case=_describe_accept),
]


ZH = {
    # titles
    "Acceptance rate α of the draft q for the target p": "草稿 q 相对于目标 p 的接受率 α",
    "Expected tokens per target step, α = 0.8, γ = 4": "目标模型每步的期望词元数，α = 0.8，γ = 4",
    "Speedup when a draft step costs 5% of a target step":
        "草稿模型一步的代价为目标模型一步的 5% 时的加速比",
    "The γ (0 … 32) with the highest speedup": "加速比最高的 γ（0 … 32）",
    "The acceptance rule, with its uniforms given": "接受规则（均匀随机数已给定）",
    # hints
    "a draft token x drawn from q survives with probability min(1, p(x)/q(x)); average over "
    "x ~ q: Σ_x min(p(x), q(x))":
        "从 q 中抽出的草稿词元 x 以概率 min(1, p(x)/q(x)) 留下；对 x ~ q 取平均："
        "Σ_x min(p(x), q(x))",
    "draft i survives with probability α^i (all before it must too); add the target's own "
    "token: 1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α)":
        "第 i 个草稿以概率 α^i 留下（它之前的草稿也都必须留下）；再加上目标模型自己的词元："
        "1 + α + α² + … + α^γ = (1 − α^(γ+1)) / (1 − α)",
    "a round costs γ draft steps (c each) plus one target step, and yields the expected tokens "
    "of the question before; plain decoding yields one token per target step":
        "一轮的代价是 γ 个草稿步骤（每个 c）加上目标模型的一步，产出上一题的期望词元数；普通解码"
        "在目标模型的每一步产出一个词元",
    "evaluate the speedup of the question before for every γ from 0 to 32":
        "对 0 到 32 的每一个 γ 计算上一题的加速比",
    "walk the drafts in order: draft i (token x) is accepted when u_i·q_i(x) < p_i(x); stop at "
    "the first rejection. n = accepted count. After a rejection at i = n the target's token "
    "comes from max(0, p_n − q_n), renormalised; if all γ were accepted it comes from p_γ (row "
    "γ of p, the bonus token)":
        "按顺序逐个检查草稿：当 u_i·q_i(x) < p_i(x) 时接受第 i 个草稿（词元 x）；"
        "在第一次拒绝处停下。"
        "n = 被接受的个数。在 i = n 处被拒绝之后，目标模型的词元来自重新归一化的 "
        "max(0, p_n − q_n)；如果 γ 个全部被接受，它来自 p_γ（p 的第 γ 行，即奖励词元）",
    # known mistakes
    "that is the total-variation distance, the chance of a rejection; α is one minus it":
        "这是总变差距离，即被拒绝的概率；α 是一减去它",
    "you counted the accepted drafts but not the token the target adds every round":
        "你数了被接受的草稿，却漏了目标模型每轮都会添上的那个词元",
    "drafts are accepted in a run: draft i counts only if drafts 1 … i − 1 were accepted too":
        "草稿是连续被接受的：只有当草稿 1 … i − 1 也都被接受时，第 i 个草稿才算数",
    "you left out the cost of the drafts": "你漏掉了起草的代价",
    # messages of the checks
    "γ={gamma} drafts {drafts} over V={V} tokens, u={u}":
        "γ={gamma} 个草稿 {drafts}，词表共 V={V} 个词元，u={u}",
}
