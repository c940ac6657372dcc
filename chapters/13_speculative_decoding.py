# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Speculative decoding
#
# Batching buys throughput, not latency: however many sequences share a decode step, each
# still gets one token per step, and the step cannot be faster than reading every weight once
# (chapter 2). When what matters is how fast *one* answer streams, there is one more lever
# {cite:p}`austin2025scaling`: let a cheap *drafter* guess the next few tokens, and have the
# large *target* model check all the guesses in a single forward pass. Checking $\gamma + 1$
# positions reads the same weights as generating one token, so on hardware where decoding is
# memory-bound it costs about the same; every guess that survives is a token gained
# {cite:p}`leviathan2023speculative,chen2023speculative`. Done right, the output is exactly what
# the target alone would have produced — identical tokens for greedy decoding, the identical
# distribution when sampling. This chapter derives the rules, implements them with a draft
# model and with prompt lookup, checks the claims, and measures what they give on this device
# against what the formula predicts.

# %% [markdown] tags=["lang-zh"]
# # 推测解码
#
# 批处理换来的是吞吐量，而不是延迟：无论多少个序列共享一个解码步骤，每个序列每一步仍然只得到一个
# 词元（token），而这一步不可能比把每个权重读取一遍更快（第 2 章）。当要紧的是*一个*回答流出来的速度时，
# 还有另一个手段可用 {cite:p}`austin2025scaling`：让一个廉价的*起草者*猜出接下来的几个词元，再让大的
# *目标*模型在一次前向计算中检查所有猜测。检查 $\gamma + 1$ 个位置读取的权重与生成一个词元相同，
# 所以在解码是内存受限的硬件上，代价也差不多；每个经受住检查的猜测，都是多赚的一个词元
# {cite:p}`leviathan2023speculative,chen2023speculative`。只要做对了，输出就与目标模型单独生成的完全
# 一样——贪心解码时词元完全相同，采样时分布完全相同。本章推导这些规则，分别用草稿模型和提示词查找
# 实现它们，验证这些论断，并在本设备上测量它们带来的收益，与公式的预测相比较。

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import chisquare

from inferbook.book.listing import show_source
from inferbook.model import decode, decoder, kvcache
from inferbook.model.presets import get_preset
from inferbook.model.sampling import Sampler
from inferbook.perf import phase_time, speculation, timing
from inferbook.perf.hardware import get_chip
from inferbook.perf.step_cost import step_time
from inferbook.serving import speculative
from inferbook.serving.draft import PromptLookup, truncated_draft
from inferbook.serving.speculative import speculative_generate, verify

print(info.describe())
DEVICE = timing.device_name()

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.figures import glue_figure
from inferbook.book.present import fmt_percent, fmt_ratio, fmt_seconds, glue

glue("ch13_device", DEVICE)

# %% [markdown]
# ## Why checking is cheap
#
# A decode step of a large model at batch one does about $2P$ FLOPs while reading $P$ weights:
# far below any accelerator's critical intensity. Scoring $\gamma + 1$ tokens does
# $(\gamma + 1)$ times the FLOPs but reads the weights once, so until $\gamma + 1$ approaches
# the critical batch size the time barely moves. The estimator shows it for LLaMA-2 70B on an
# H200, which holds its weights on one chip, with 1,000 tokens of context:

# %% [markdown] tags=["lang-zh"]
# ## 为什么检查很便宜
#
# 一个大模型的解码步骤，在批次里只有一个序列时，做大约 $2P$ FLOPs，同时读取 $P$ 个权重：远低于
# 任何加速器的临界强度。给 $\gamma + 1$ 个词元打分，FLOPs 是 $(\gamma + 1)$ 倍，但权重只读一遍，所以在
# $\gamma + 1$ 接近临界批量大小之前，时间几乎不变。估算器为 H200 上的 LLaMA-2 70B 展示了这一点
# （一块 H200 就放得下它的权重），上下文为 1,000 个词元：

# %%
target_cfg, draft_cfg = get_preset("llama-2-70b"), get_preset("llama-2-7b")
chip = get_chip("H200")
context = 1000
step = step_time(phase_time.generate_step_cost(target_cfg, 1, context), chip)
verify_s = {g: step_time(phase_time.prefill_step_cost(target_cfg, g + 1, context), chip)
            for g in range(1, 9)}
for g, t in verify_s.items():
    print(f"gamma={g}: score {g + 1} tokens in {fmt_seconds(t)}  ({t / step:.2f}× one step)")
draft_step = step_time(phase_time.generate_step_cost(draft_cfg, 1, context), chip)
c_h200 = draft_step / step
assert max(verify_s.values()) < 1.1 * step          # scoring 9 tokens costs ~ one step

# %% tags=["hide-input"]
glue("ch13_h200_step", fmt_seconds(step))
glue("ch13_h200_verify8", fmt_ratio(verify_s[8] / step, 2))
glue("ch13_c", f"{c_h200:.2f}")

# %% [markdown]
# One decode step takes {glue:text}`ch13_h200_step`; scoring nine tokens takes
# {glue:text}`ch13_h200_verify8` as long. A LLaMA-2 7B draft costs $c =$ {glue:text}`ch13_c`
# target steps per token. (In practice the draft has to share the target's vocabulary and
# agree with it often; families trained together, distilled drafts, and extra heads trained on
# the target's hidden states — Medusa, EAGLE {cite:p}`cai2024medusa,li2024eagle` — are the
# usual sources.)
#
# ## The rules
#
# The drafter proposes $d_1, \dots, d_\gamma$. The target runs once over
# $[x_\text{last}, d_1, \dots, d_\gamma]$, which gives its next-token distributions
# $p_1, \dots, p_{\gamma+1}$ at every position: $p_i$ is what the target would sample after
# $d_1 \dots d_{i-1}$.
#
# **Greedy.** Accept $d_i$ while it equals $\arg\max p_i$. At the first mismatch emit
# $\arg\max p_i$ instead; if all $\gamma$ match, emit $\arg\max p_{\gamma+1}$ as a bonus. Every
# emitted token is the target's own argmax after the previous ones, so the output is exactly
# greedy decoding's, and a round yields between 1 and $\gamma + 1$ tokens.
#
# **Sampling.** The drafter samples $d_i$ from its own distribution $q_i$. Accept it with
# probability $\min(1, p_i(d_i) / q_i(d_i))$. At the first rejection, draw the replacement
# from the *residual* $\max(0, p_i - q_i)$, renormalised; if all are accepted, draw a bonus
# from $p_{\gamma+1}$. The emitted token is then distributed exactly as $p_i$: a token $x$
# comes out either as an accepted draft, with probability $q(x) \min(1, p(x)/q(x)) =
# \min(p(x), q(x))$, or as a replacement, with probability
# $(1 - \sum_y \min(p(y), q(y))) \cdot \frac{\max(0, p(x) - q(x))}{\sum_y \max(0, p(y) - q(y))}$,
# and since $\sum_y \max(0, p - q) = 1 - \sum_y \min(p, q)$ the two add up to
# $\min(p, q) + \max(0, p - q) = p(x)$ {cite:p}`leviathan2023speculative`. Here is the library's
# rule, both cases in one function:

# %% [markdown] tags=["lang-zh"]
# 一个解码步骤耗时 {glue:text}`ch13_h200_step`；给九个词元打分的耗时是它的
# {glue:text}`ch13_h200_verify8`。用 LLaMA-2 7B 作草稿模型，每个词元的代价是目标模型一步的
# $c =$ {glue:text}`ch13_c`。（实践中，草稿模型必须与目标模型共用词表，并且经常与它意见一致；常见的
# 来源有一同训练的同系列模型、蒸馏出来的草稿模型，以及在目标模型的隐藏状态上训练的额外输出头——
# Medusa、EAGLE {cite:p}`cai2024medusa,li2024eagle`。）
#
# ## 规则
#
# 起草者提出 $d_1, \dots, d_\gamma$。目标模型对 $[x_\text{last}, d_1, \dots, d_\gamma]$ 运行一次，得到
# 每个位置上的下一词元分布 $p_1, \dots, p_{\gamma+1}$：$p_i$ 就是目标模型在 $d_1 \dots d_{i-1}$ 之后
# 会从中采样的分布。
#
# **贪心。** 只要 $d_i$ 等于 $\arg\max p_i$，就接受它。在第一个不一致处，改为输出
# $\arg\max p_i$；如果 $\gamma$ 个全都一致，就额外输出 $\arg\max p_{\gamma+1}$ 作为奖励。输出的每个
# 词元都是目标模型在前面那些词元之后自己的 argmax，所以输出与贪心解码的完全相同，而一轮产出 1 到
# $\gamma + 1$ 个词元。
#
# **采样。** 起草者从它自己的分布 $q_i$ 中采样 $d_i$。以概率 $\min(1, p_i(d_i) / q_i(d_i))$ 接受它。
# 在第一次拒绝时，从*残差* $\max(0, p_i - q_i)$（重新归一化后）中抽取替代词元；如果全部被接受，就从
# $p_{\gamma+1}$ 中抽取一个奖励词元。这样输出的词元恰好服从 $p_i$：词元 $x$ 要么作为被接受的草稿
# 出现，概率为 $q(x) \min(1, p(x)/q(x)) = \min(p(x), q(x))$；要么作为替代词元出现，概率为
# $(1 - \sum_y \min(p(y), q(y))) \cdot \frac{\max(0, p(x) - q(x))}{\sum_y \max(0, p(y) - q(y))}$；
# 又因为 $\sum_y \max(0, p - q) = 1 - \sum_y \min(p, q)$，两者相加等于
# $\min(p, q) + \max(0, p - q) = p(x)$ {cite:p}`leviathan2023speculative`。下面是库中的规则，两种情形
# 写在同一个函数里：

# %%
show_source(verify)

# %% [markdown]
# We can check the identity exactly for one position — no sampling involved — and then check
# the code by sampling it many times:

# %% [markdown] tags=["lang-zh"]
# 我们可以对单个位置精确地验证这个恒等式——不涉及任何采样——然后再对代码大量采样来检验它：

# %%
rng = np.random.default_rng(0)
V = 8
p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
accept = np.minimum(p, q)
residual = np.maximum(p - q, 0)
emitted = accept + (1 - accept.sum()) * residual / residual.sum()
assert np.allclose(emitted, p)          # the rule reproduces p, whatever q is
alpha_pq = speculation.acceptance_rate(p, q)

N = 50_000
keys = jax.random.split(jax.random.key(1), N)


def one_round(key):
    k_draft, k_rule = jax.random.split(key)
    d = jax.random.categorical(k_draft, jnp.log(q))[None]
    n, y = verify(d, jnp.asarray(q)[None], jnp.stack([jnp.asarray(p), jnp.asarray(p)]),
                  jnp.int32(1), k_rule, False)
    return jnp.where(n == 1, d[0], y), n


tokens, n_acc = map(np.asarray, jax.jit(jax.vmap(one_round))(keys))
counts = np.bincount(tokens, minlength=V)
pvalue = chisquare(counts, p * N).pvalue
assert pvalue > 1e-3, pvalue
assert abs(n_acc.mean() - alpha_pq) < 4 * np.sqrt(alpha_pq * (1 - alpha_pq) / N)

# %% tags=["hide-input"]
glue("ch13_alpha_pq", f"{alpha_pq:.3f}"); glue("ch13_acc_mc", f"{n_acc.mean():.3f}")
glue("ch13_pvalue", f"{pvalue:.2f}"); glue("ch13_N", f"{N:,}")

fig, ax = plt.subplots(figsize=(6.5, 3))
x = np.arange(V)
ax.bar(x - 0.2, q, 0.4, label="draft q", color="lightgrey")
ax.bar(x + 0.2, p, 0.4, label="target p", color="tab:blue")
ax.plot(x + 0.2, counts / N, "k.", label=f"speculative samples (N={N:,})")
ax.set_xlabel("token"); ax.set_ylabel("probability"); ax.legend(fontsize=8)
ax.set_title("Rejection sampling turns draws from q into draws from p", fontsize=9)
zh_legend = {"draft q": "草稿 q", "target p": "目标 p",
             f"speculative samples (N={N:,})": f"推测采样的样本（N={N:,}）"}
glue_figure("ch13_rejection_figure", fig, zh=dict(
    title="拒绝采样把从 q 中的抽样变成从 p 中的抽样", xlabel="词元", ylabel="概率",
    legend=[zh_legend[t.get_text()] for t in ax.get_legend().get_texts()]))  # lines first

# %% [markdown]
# ```{glue:figure} ch13_rejection_figure
# ```
#
# Over {glue:text}`ch13_N` rounds the emitted tokens match $p$ (chi-square p-value
# {glue:text}`ch13_pvalue`), and the draft was accepted in a fraction
# {glue:text}`ch13_acc_mc` of them, as predicted by the *acceptance rate*
# $\alpha = \sum_x \min(p(x), q(x)) =$ {glue:text}`ch13_alpha_pq`: one minus the total-variation
# distance between the two distributions. The library's tests run the same check on two
# consecutive tokens, through rejections, residuals and bonus tokens, with real models.
#
# ## How many tokens per step
#
# If each draft survives independently with probability $\alpha$, a round emits $k + 1$ tokens
# when the first $k$ drafts survive and the next fails, and $\gamma + 1$ when all do. The
# expectation is a geometric sum {cite:p}`leviathan2023speculative`:
#
# $$E[\text{tokens per step}] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}.$$
#
# A round costs $\gamma$ draft steps of relative cost $c$ plus one verification, so the speedup
# over plain decoding is
#
# $$\text{speedup} = \frac{1 - \alpha^{\gamma + 1}}{(1 - \alpha)(\gamma c + v)},$$
#
# where $v$, the cost of the verification relative to one decode step, is 1 in the paper's
# analysis and, as we just saw, about 1 on an accelerator.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch13_rejection_figure
# ```
#
# 在 {glue:text}`ch13_N` 轮中，输出的词元与 $p$ 相符（卡方检验的 p 值为 {glue:text}`ch13_pvalue`），
# 草稿被接受的比例是 {glue:text}`ch13_acc_mc`，与*接受率*
# $\alpha = \sum_x \min(p(x), q(x)) =$ {glue:text}`ch13_alpha_pq` 的预测一致：它等于一减去两个分布之间的
# 总变差距离。库的测试在真实模型上、对连续两个词元做同样的检验，拒绝、残差和奖励词元都覆盖到。
#
# ## 每一步得到多少个词元
#
# 如果每个草稿各自独立地以概率 $\alpha$ 经受住检查，那么当前 $k$ 个草稿通过、下一个失败时，一轮输出
# $k + 1$ 个词元；全部通过时输出 $\gamma + 1$ 个。期望值是一个几何级数
# {cite:p}`leviathan2023speculative`：
#
# $$E[\text{tokens per step}] = \frac{1 - \alpha^{\gamma + 1}}{1 - \alpha}.$$
#
# 一轮的代价是 $\gamma$ 个相对代价为 $c$ 的草稿步骤，加上一次验证，所以相对于普通解码的加速比是
#
# $$\text{speedup} = \frac{1 - \alpha^{\gamma + 1}}{(1 - \alpha)(\gamma c + v)},$$
#
# 其中 $v$ 是验证相对于一个解码步骤的代价：在论文的分析中它等于 1，而正如我们刚才所见，在加速器上
# 它也约等于 1。

# %%
show_source(speculation.speculative_speedup)

# %%
alphas = (0.6, 0.7, 0.8, 0.9)
best = {a: speculation.optimal_gamma(a, c_h200) for a in alphas}
assert best[0.9] > best[0.6]
print(best)

# %% tags=["hide-input"]
gammas = np.arange(0, 11)
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for a in alphas:
    ax.plot(gammas, [speculation.speculative_speedup(a, g, c_h200) for g in gammas], "o-",
            ms=3, label=f"α = {a}")
ax.axhline(1, color="grey", lw=0.8)
ax.set_xlabel("draft tokens per step, γ"); ax.set_ylabel("expected speedup")
ax.set_title(f"LLaMA-2 70B with a 7B draft on an {chip.name} (estimator, c = {c_h200:.2f})",
             fontsize=9)
ax.legend(fontsize=8)
glue_figure("ch13_speedup_figure", fig, zh=dict(
    title=f"LLaMA-2 70B 配 7B 草稿模型，在 {chip.name} 上（估算器，c = {c_h200:.2f}）",
    xlabel="每步的草稿词元数 γ", ylabel="预期加速比"))
glue("ch13_best_06", str(best[0.6])); glue("ch13_best_09", str(best[0.9]))
glue("ch13_speedup_08", fmt_ratio(speculation.speculative_speedup(0.8, best[0.8], c_h200)))

# %% [markdown]
# ```{glue:figure} ch13_speedup_figure
# ```
#
# The better the draft agrees with the target, the further it pays to guess: the best $\gamma$
# grows from {glue:text}`ch13_best_06` at $\alpha = 0.6$ to {glue:text}`ch13_best_09` at
# $\alpha = 0.9$, and at $\alpha = 0.8$ the expected speedup is {glue:text}`ch13_speedup_08`.
# More predictable text (code, say) has higher $\alpha$ and rewards more aggressive drafting.
# Each accepted token costs more FLOPs than plain decoding — rejected drafts are thrown away,
# and the draft model runs too — which is why speculation trades throughput for latency. When
# the batch is small anyway (little memory, long contexts), the spare FLOPs are free and it
# can win on both {cite:p}`austin2025scaling`.
#
# ## With a draft model, on this device
#
# We need a draft that agrees with the target more often than chance. We start on random
# weights, with *self-speculation*: the draft is the target's own first layer,
# followed by its final norm and unembedding — early exit, as in LayerSkip and Draft & Verify
# {cite:p}`elhoushi2024layerskip,zhang2023draftverify`. The target is the `small` preset.
# First the correctness claim for greedy decoding:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch13_speedup_figure
# ```
#
# 草稿模型与目标模型越一致，往前多猜几个就越划算：最佳的 $\gamma$ 从 $\alpha = 0.6$ 时的
# {glue:text}`ch13_best_06` 增长到 $\alpha = 0.9$ 时的 {glue:text}`ch13_best_09`；在 $\alpha = 0.8$ 时，
# 预期加速比为 {glue:text}`ch13_speedup_08`。更可预测的文本（比如代码）有更高的 $\alpha$，也更值得
# 大胆地起草。每个被接受的词元所花的 FLOPs 比普通解码更多——被拒绝的草稿白白丢掉，草稿模型也要运行——
# 这就是推测解码用吞吐量换延迟的原因。当批次本来就很小时（内存少、上下文长），多余的 FLOPs 是免费的，
# 它可能两头都赢 {cite:p}`austin2025scaling`。
#
# ## 在本设备上，用草稿模型
#
# 我们需要一个比随机猜测更常与目标模型一致的草稿模型。我们先在随机权重上用
# *自推测*：草稿模型就是目标模型自己的第一层，后面接上它的最终归一化层和反嵌入——即提前退出，与
# LayerSkip 和 Draft & Verify 的做法相同 {cite:p}`elhoushi2024layerskip,zhang2023draftverify`。目标模型
# 是 `small` 预设。先验证贪心解码的正确性论断：

# %%
cfg = get_preset("small")
params = decoder.init_params(cfg, seed=0)
draft = truncated_draft(params, cfg, 1)
GAMMA, N_NEW = 4, 64
prompts = [list(range(1, 33)), [7, 300, 12, 5] * 6]
greedy_reference = decode.generate(params, cfg, prompts[:1], N_NEW).tokens[0]
out, greedy_stats = speculative_generate(params, cfg, prompts[0], N_NEW, draft, gamma=GAMMA)
assert out == greedy_reference                  # identical tokens
alpha_greedy = greedy_stats.acceptance_rate

# %% tags=["hide-input"]
glue("ch13_alpha_greedy", f"{alpha_greedy:.2f}")
print(f"greedy: identical to decode.generate; acceptance rate {alpha_greedy:.2f}")

# %% [markdown]
# The tokens are identical. But the acceptance rate is only {glue:text}`ch13_alpha_greedy`: a
# randomly initialised model's next-token distribution is nearly flat, so whether the one-layer
# draft's favourite token is also the four-layer target's favourite is close to a coin toss
# with many sides. With temperature-1 sampling the same draft does far better, because the
# rejection rule accepts in proportion to how much the two distributions *overlap*, and two
# nearly flat distributions overlap a lot:

# %% [markdown] tags=["lang-zh"]
# 词元完全相同。但接受率只有 {glue:text}`ch13_alpha_greedy`：随机初始化的模型给出的下一词元分布几乎
# 是平的，所以单层草稿模型最中意的词元是否也是四层目标模型最中意的，几乎就像掷一个有很多面的骰子。
# 换成温度为 1 的采样，同一个草稿模型的表现要好得多，因为拒绝规则按两个分布*重叠*的程度来接受，而
# 两个几乎平坦的分布重叠得很多：

# %%
SAMPLER = Sampler(temperature=1.0)
runs = [speculative_generate(params, cfg, prompt, N_NEW, draft, gamma=GAMMA, sampler=SAMPLER,
                             key=jax.random.key(10 + i))
        for i, prompt in enumerate(prompts)]
accepted = sum((s.accepted for _, s in runs), [])
drafted = sum((s.drafted for _, s in runs), [])
pooled = speculative.SpecStats(GAMMA, drafted, accepted)
alpha = pooled.acceptance_rate
measured_tpr = pooled.tokens_per_round
predicted_tpr = speculation.expected_tokens_per_step(alpha, GAMMA)
assert abs(measured_tpr / predicted_tpr - 1) < 0.1, (measured_tpr, predicted_tpr)
assert alpha > alpha_greedy

# %% tags=["hide-input"]
glue("ch13_alpha", f"{alpha:.2f}"); glue("ch13_rounds", str(pooled.rounds))
glue("ch13_tpr", f"{measured_tpr:.2f}"); glue("ch13_tpr_pred", f"{predicted_tpr:.2f}")
glue("ch13_gamma", str(GAMMA))
print(f"sampling: α = {alpha:.3f} over {pooled.rounds} rounds; tokens per round "
      f"{measured_tpr:.2f} measured, {predicted_tpr:.2f} by the formula")

fig, ax = plt.subplots(figsize=(6, 3))
hist = np.bincount(accepted, minlength=GAMMA + 1) / len(accepted)
model_probs = [alpha ** k * (1 - alpha) for k in range(GAMMA)] + [alpha ** GAMMA]
ax.bar(np.arange(GAMMA + 1) - 0.2, hist, 0.4, label="measured")
ax.bar(np.arange(GAMMA + 1) + 0.2, model_probs, 0.4, label="i.i.d. model with measured α")
ax.set_xlabel("drafts accepted in a round"); ax.set_ylabel("fraction of rounds")
ax.set_title(f"Acceptances per round, γ = {GAMMA}, one-layer self-draft", fontsize=9)
ax.legend(fontsize=8)
glue_figure("ch13_accepted_figure", fig, zh=dict(
    title=f"每轮的接受数，γ = {GAMMA}，单层自草稿", xlabel="一轮中被接受的草稿数",
    ylabel="轮次占比", legend=["实测", "代入实测 α 的独立同分布模型"]))

# %% [markdown]
# ```{glue:figure} ch13_accepted_figure
# ```
#
# Over {glue:text}`ch13_rounds` rounds the draft's tokens were accepted at a rate
# $\hat\alpha =$ {glue:text}`ch13_alpha`, and a round produced {glue:text}`ch13_tpr` tokens on
# average — the formula, fed the measured $\hat\alpha$ and $\gamma =$ {glue:text}`ch13_gamma`,
# predicts {glue:text}`ch13_tpr_pred`. (We estimate $\alpha$ as accepted drafts over drafts
# tested, counting a round's drafts up to its first rejection — the maximum-likelihood estimate
# under the formula's assumption of independent acceptances.)
#
# Does it make generation faster here? The formula needs two more numbers, both measured on
# this device: the draft's cost per token relative to the target's ($c$), and the cost of
# scoring $\gamma + 1$ tokens relative to one ($v$).

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch13_accepted_figure
# ```
#
# 在 {glue:text}`ch13_rounds` 轮中，草稿词元被接受的比率为 $\hat\alpha =$ {glue:text}`ch13_alpha`，
# 一轮平均产出 {glue:text}`ch13_tpr` 个词元——把实测的 $\hat\alpha$ 和
# $\gamma =$ {glue:text}`ch13_gamma` 代入公式，预测值为 {glue:text}`ch13_tpr_pred`。（我们把 $\alpha$
# 估计为被接受的草稿数除以受检的草稿数，一轮的草稿只数到它的第一次拒绝为止——这是在公式的“各次接受
# 相互独立”假设下的最大似然估计。）
#
# 它在这里能让生成变快吗？公式还需要两个数，都在本设备上测量：草稿模型每个词元的代价相对于目标模型的
# 比值（$c$），以及给 $\gamma + 1$ 个词元打分相对于给一个词元打分的代价（$v$）。

# %%
S = 256
cache = kvcache.init_cache(cfg, 1, S)._replace(lengths=jnp.array([64], jnp.int32))
dcache = kvcache.init_cache(draft.cfg, 1, S)._replace(lengths=jnp.array([64], jnp.int32))
one = jnp.zeros((1, 1), jnp.int32)
steps = {"target": (params, cfg, one, cache), "draft": (draft.params, draft.cfg, one, dcache),
         "verify": (params, cfg, jnp.zeros((1, GAMMA + 1), jnp.int32), cache)}
# The three programs take turns, so that whatever else runs on the machine slows them alike;
# each one's time is its median call after a warm-up round.
step_runs = timing.time_alternating([lambda a=args: decode.extend(*a) for args in steps.values()],
                                    rounds=15, warmup=1)
t_target, t_draft, t_verify = (t.median_s for t in step_runs)
c_cpu, v_cpu = t_draft / t_target, t_verify / t_target
predicted = speculation.speculative_speedup(alpha, GAMMA, c_cpu, v_cpu)

plain = timing.time_fn(lambda: decode.generate(params, cfg, prompts[:1], N_NEW, sampler=SAMPLER,
                                              key=jax.random.key(0)).tokens,
                      repeats=3, warmup=0)
spec = timing.time_fn(lambda: speculative_generate(params, cfg, prompts[0], N_NEW, draft,
                                                  gamma=GAMMA, sampler=SAMPLER,
                                                  key=jax.random.key(0))[0], repeats=3, warmup=0)
measured = plain.median_s / spec.median_s

# %% tags=["hide-input"]
print(f"on {DEVICE}: c = {c_cpu:.2f}, v = {v_cpu:.2f}; predicted speedup {predicted:.2f}, "
      f"measured {measured:.2f} ({fmt_seconds(plain.median_s)} plain vs "
      f"{fmt_seconds(spec.median_s)} speculative for {N_NEW} tokens)")
# The claim's floor on v, glued into the sentence that states it.
V_FLOOR = 1.05
if info.platform == "cpu":
    expect_measured(v_cpu > V_FLOOR, f"on a CPU, scoring {GAMMA + 1} tokens costs over "
                    f"{V_FLOOR:.2f} target steps (median calls)",
                    expected=f"v above {V_FLOOR:.2f}",
                    measured=f"v = {v_cpu:.2f}")
glue("ch13_c_cpu", f"{c_cpu:.2f}"); glue("ch13_v_cpu", f"{v_cpu:.2f}")
glue("ch13_v_floor", f"{V_FLOOR:.2f}")
glue("ch13_pred_cpu", fmt_ratio(predicted, 2)); glue("ch13_meas_cpu", fmt_ratio(measured, 2))
glue("ch13_plain_s", fmt_seconds(plain.median_s)); glue("ch13_spec_s", fmt_seconds(spec.median_s))
glue("ch13_v_h200", fmt_ratio(verify_s[GAMMA] / step, 2))

# %% [markdown]
# On {glue:text}`ch13_device` the one-layer draft costs $c =$ {glue:text}`ch13_c_cpu` of a
# target step, and scoring five tokens costs $v =$ {glue:text}`ch13_v_cpu` target steps —
# against {glue:text}`ch13_v_h200` on the H200 of the estimate above. A CPU runs few-row
# matrix multiplications far below its peak, so the extra tokens are not free (on a CPU the
# chapter checks that $v$ exceeds {glue:text}`ch13_v_floor`), and the premise of speculative
# decoding only half holds. The formula with these measured costs predicts a
# speedup of {glue:text}`ch13_pred_cpu`; the measured one is {glue:text}`ch13_meas_cpu`
# ({glue:text}`ch13_plain_s` for plain sampling against {glue:text}`ch13_spec_s`). The rest of
# the gap is overhead the formula leaves out: a round is a separate compiled program with its
# own sampling and bookkeeping, and it synchronises with the host to learn how many tokens
# survived. On an accelerator, with $v \approx 1$ and a trained draft, the same code is the
# latency win the estimate promises.
#
# ## Drafting without a model: prompt lookup
#
# The cheapest drafter has no weights at all. *Prompt lookup* {cite:p}`saxena2023promptlookup`
# finds the most recent earlier occurrence of the last few tokens in the context and proposes
# whatever followed them. Its $c$ is zero, and whenever the output repeats its input —
# editing code, extracting fields, summarising with quotes — it guesses well. Its draft is
# deterministic, a $q$ with all its mass on the guess, so the same rule applies: accept with
# probability $p(d)$, otherwise sample from $p$ with $d$ removed.

# %% [markdown] tags=["lang-zh"]
# 在 {glue:text}`ch13_device` 上，单层草稿模型的代价是目标模型一步的 $c =$ {glue:text}`ch13_c_cpu`，
# 给五个词元打分的代价是目标模型的 $v =$ {glue:text}`ch13_v_cpu` 步——而前面 H200 的估算是
# {glue:text}`ch13_v_h200`。CPU 运行行数很少的矩阵乘法时远达不到峰值，所以多出来的词元并不免费（在
# CPU 上，本章检验 $v$ 大于 {glue:text}`ch13_v_floor`），推测解码的前提只成立了一半。代入这些实测代价，公式预测的加速比为 {glue:text}`ch13_pred_cpu`；实测
# 为 {glue:text}`ch13_meas_cpu`（普通采样 {glue:text}`ch13_plain_s`，对比推测解码
# {glue:text}`ch13_spec_s`）。其余的差距是公式没有计入的开销：每一轮是一个单独编译的程序，有自己的
# 采样和簿记，还要与主机同步，才能知道有多少个词元留了下来。在加速器上，有 $v \approx 1$ 和一个训练
# 好的草稿模型，同样的代码就能兑现估算所承诺的延迟收益。
#
# ## 不用模型起草：提示词查找
#
# 最便宜的起草者根本没有权重。*提示词查找* {cite:p}`saxena2023promptlookup` 在上下文中找到最后几个
# 词元最近一次较早的出现，并提议当时紧随其后的内容。它的 $c$ 为零；只要输出在重复输入——编辑代码、
# 抽取字段、带引用地做摘要——它就猜得很准。它的草稿是确定性的，相当于一个把全部概率质量放在所猜
# 词元上的 $q$，所以同样的规则照样适用：以概率 $p(d)$ 接受，否则从去掉 $d$ 的 $p$ 中采样。

# %%
show_source(PromptLookup.propose)

# %%
out, lookup_stats = speculative_generate(params, cfg, prompts[0], N_NEW, PromptLookup(),
                                         gamma=GAMMA)
assert out == greedy_reference
proposed = sum(d > 0 for d in lookup_stats.drafted)
rounds = lookup_stats.rounds
lookup_alpha = lookup_stats.acceptance_rate

# %% tags=["hide-input"]
glue("ch13_lookup_frac", fmt_percent(proposed / rounds))
glue("ch13_lookup_alpha", f"{lookup_alpha:.2f}")
print(f"prompt lookup proposed something in {proposed} of {rounds} rounds; "
      f"acceptance when tested {lookup_alpha:.2f}")

# %% [markdown]
# Prompt lookup leaves greedy output unchanged, as it must. On our random model it found
# something to propose in only {glue:text}`ch13_lookup_frac` of the rounds: random weights do
# not copy their prompts, so the context rarely repeats. Where it proposed, the acceptance rate
# was {glue:text}`ch13_lookup_alpha`. A trained model does copy, so that is where we go next.
#
# ## On a trained model
#
# The book's trained model is SmolLM2-135M-Instruct (README, "A real model"). We give it a real
# document — the first two paragraphs of *Alice's Adventures in Wonderland*, kept in
# `book/data/ch13_passage.json` with its source — and ask for it back, the situation prompt
# lookup was made for. Two drafters: prompt lookup, which costs nothing and is tried at several
# draft lengths $\gamma$, and early exit through the model's own first half of its layers, its
# final norm and its LM head, tried at one. Every speculative run must give greedy decoding's
# tokens, one for one:

# %% [markdown] tags=["lang-zh"]
# 提示词查找不会改变贪心解码的输出，这是理所当然的。在我们的随机模型上，它只在
# {glue:text}`ch13_lookup_frac` 的轮次中找到了可以提议的东西：随机权重不会照抄提示词，所以上下文很少
# 重复。在它提议的轮次中，接受率为 {glue:text}`ch13_lookup_alpha`。训练好的模型会照抄，所以我们接下来
# 就去看它。
#
# ## 在训练好的模型上
#
# 本书的训练好的模型是 SmolLM2-135M-Instruct（见 README 的“A real model”一节）。我们给它一份真实的
# 文档——《爱丽丝梦游仙境》的头两段，连同出处保存在 `book/data/ch13_passage.json` 中——并让它把文档
# 照原样写回来：这正是提示词查找所针对的情形。两个起草者：提示词查找，它不花任何代价，试几种草稿长度
# $\gamma$；以及提前退出——只经过模型自己前一半的层，再接上它的最终归一化层和语言模型头，只试一种。
# 每一次推测运行都必须逐个词元地给出贪心解码的结果：

# %%
from inferbook.book import bookdata
from inferbook.model.pretrained import load_pretrained

smol = load_pretrained("smollm2-135m-instruct")
passage = bookdata.load("ch13_passage.json")
# The user asks for the passage back; the answer is begun for the model, as a serving system
# may prefill an assistant's first words.
request = smol.chat_text([{"role": "user",
                           "content": "Copy this passage exactly:\n\n" + passage["text"]}])
ask = smol.tokenizer.encode(request + "Here is the passage, copied exactly:\n\n",
                            special=False)
N_REAL = 48
reference = decode.generate(smol.params, smol.cfg, [ask], N_REAL).tokens[0]
print(smol.decode(reference))

EXIT_LAYERS = smol.cfg.L // 2
drafters = {"prompt lookup": PromptLookup(),
            f"first {EXIT_LAYERS} of {smol.cfg.L} layers": truncated_draft(smol.params, smol.cfg,
                                                                         EXIT_LAYERS)}
LOOKUP, EXIT = drafters
# Prompt lookup costs nothing to draft, so it is tried at several lengths; each early-exit
# guess costs half a target step (and every new length compiles its programs), so one.
REAL_GAMMAS = {LOOKUP: (2, 4, 8), EXIT: (2,)}
real_stats = {}
for name, drafter in drafters.items():
    for g in REAL_GAMMAS[name]:
        out, real_stats[name, g] = speculative_generate(smol.params, smol.cfg, ask, N_REAL,
                                                        drafter, gamma=g)
        assert out == reference, (name, g)              # greedy's tokens, one for one
for (name, g), s in real_stats.items():
    print(f"{name:>24}, γ = {g}: α = {s.acceptance_rate:.2f}, tokens per round "
          f"{s.tokens_per_round:.2f} measured, "
          f"{speculation.expected_tokens_per_step(s.acceptance_rate, g):.2f} by the formula")

# %% tags=["hide-input"]
fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
for ax, name in zip(axes, drafters):
    gammas = REAL_GAMMAS[name]
    a_hat = [real_stats[name, g].acceptance_rate for g in gammas]
    ax.plot(gammas, [real_stats[name, g].tokens_per_round for g in gammas], "ko",
            label="measured")
    ax.plot(gammas, [speculation.expected_tokens_per_step(a, g) for a, g in zip(a_hat, gammas)],
            "x", color="tab:blue", ms=9, label="formula with measured α")
    ax.set_title(name, fontsize=9); ax.set_xlabel("draft length γ")
    ax.set_xticks(gammas)
axes[0].set_ylabel("tokens per target step"); axes[0].legend(fontsize=8)
glue_figure("ch13_real_figure", fig, zh=[
    dict(title="提示词查找", xlabel="草稿长度 γ", ylabel="每个目标步骤的词元数",
         legend=["实测", "代入实测 α 的公式"]),
    dict(title=f"{smol.cfg.L} 层中的前 {EXIT_LAYERS} 层", xlabel="草稿长度 γ")])
glue("ch13_real_n", str(N_REAL))
glue("ch13_exit_layers", str(EXIT_LAYERS)); glue("ch13_real_L", str(smol.cfg.L))
for key, name in (("lookup", LOOKUP), ("exit", EXIT)):
    g_show = max(REAL_GAMMAS[name])
    s = real_stats[name, g_show]
    glue(f"ch13_real_{key}_g", str(g_show))
    glue(f"ch13_real_{key}_alpha", f"{s.acceptance_rate:.2f}")
    glue(f"ch13_real_{key}_tpr", f"{s.tokens_per_round:.2f}")
    glue(f"ch13_real_{key}_pred",
         f"{speculation.expected_tokens_per_step(s.acceptance_rate, g_show):.2f}")

# %% [markdown]
# ```{glue:figure} ch13_real_figure
# ```
#
# All runs give greedy decoding's {glue:text}`ch13_real_n` tokens exactly. At
# $\gamma =$ {glue:text}`ch13_real_lookup_g`, prompt lookup's guesses were accepted at
# $\hat\alpha =$ {glue:text}`ch13_real_lookup_alpha`, and a round gave
# {glue:text}`ch13_real_lookup_tpr` tokens, against {glue:text}`ch13_real_lookup_pred` from the
# formula with that $\hat\alpha$. The first {glue:text}`ch13_exit_layers` of
# {glue:text}`ch13_real_L` layers, read through the LM head they were never trained to feed,
# drafting $\gamma =$ {glue:text}`ch13_real_exit_g` tokens a round, agreed with the full model
# at $\hat\alpha =$ {glue:text}`ch13_real_exit_alpha`:
# {glue:text}`ch13_real_exit_tpr` tokens per round, {glue:text}`ch13_real_exit_pred` by the
# formula. (LayerSkip trains the model so that early layers predict well; ours was not.) Where
# measurement and formula part, it is the formula's assumption that breaks: acceptances in a
# copy are not independent coin flips — a draft is right for a whole run of copied words, then
# wrong where the copy ends.
#
# What does that buy in time? As before, the formula needs this device's $c$ and $v$ for this
# model — $v$ at every draft length, because what scoring $\gamma + 1$ tokens costs depends on
# $\gamma$ and on the device's kernels. Each drafter then gets the $\gamma$ the formula
# favours, and prompt lookup at its $\gamma$ is timed in alternation with plain greedy decoding:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch13_real_figure
# ```
#
# 所有运行都与贪心解码的 {glue:text}`ch13_real_n` 个词元完全相同。在 $\gamma =$
# {glue:text}`ch13_real_lookup_g` 时，提示词查找的猜测以 $\hat\alpha =$ {glue:text}`ch13_real_lookup_alpha`
# 被接受，一轮产出 {glue:text}`ch13_real_lookup_tpr` 个词元，而把这个 $\hat\alpha$ 代入公式得到
# {glue:text}`ch13_real_lookup_pred`。{glue:text}`ch13_real_L` 层中的前 {glue:text}`ch13_exit_layers`
# 层，再接上一个从未为接收它们的输出而训练过的语言模型头，每轮起草 $\gamma =$
# {glue:text}`ch13_real_exit_g` 个词元，与完整模型一致的比率为
# $\hat\alpha =$ {glue:text}`ch13_real_exit_alpha`：每轮 {glue:text}`ch13_real_exit_tpr` 个词元，公式给出
# {glue:text}`ch13_real_exit_pred`。（LayerSkip 会训练模型，让前面的层也能预测得好；我们的模型没有
# 这样训练过。）实测与公式不一致的地方，是公式的假设不成立：照抄时的各次接受并不是相互独立的掷硬币——
# 草稿会对一整段照抄的词都猜对，然后在照抄结束的地方猜错。
#
# 这在时间上能换来什么？和前面一样，公式需要本设备上这个模型的 $c$ 和 $v$——而且每种草稿长度都要测
# $v$，因为给 $\gamma + 1$ 个词元打分的代价取决于 $\gamma$，也取决于设备的内核。然后每个起草者取公式
# 最看好的 $\gamma$，并把该 $\gamma$ 下的提示词查找与普通贪心解码交替计时：

# %%
ctx = len(ask) + N_REAL // 2
S_REAL = 1 << (len(ask) + N_REAL).bit_length()
exit_draft = drafters[EXIT]
caches = {m.cfg.L: kvcache.init_cache(m.cfg, 1, S_REAL)._replace(
    lengths=jnp.array([ctx], jnp.int32)) for m in (smol, exit_draft)}
all_gammas = sorted({g for gs in REAL_GAMMAS.values() for g in gs})
real_steps = {"target": (smol.params, smol.cfg, one, caches[smol.cfg.L]),
              "draft": (exit_draft.params, exit_draft.cfg, one, caches[EXIT_LAYERS])}
real_steps |= {g: (smol.params, smol.cfg, jnp.zeros((1, g + 1), jnp.int32), caches[smol.cfg.L])
               for g in all_gammas}                     # one verify program per draft length
# The programs take turns, 9 rounds after a warm-up one; each time is a median.
step_t = dict(zip(real_steps, timing.time_alternating(
    [lambda a=args: decode.extend(*a) for args in real_steps.values()], rounds=9, warmup=1)))
median = {name: t.median_s for name, t in step_t.items()}
c_real = median["draft"] / median["target"]
v_real = {g: median[g] / median["target"] for g in all_gammas}
cost = {LOOKUP: 0.0, EXIT: c_real}                      # a lookup costs no model step
pred_all = {(name, g): speculation.speculative_speedup(s.acceptance_rate, g, cost[name],
                                                        v_real[g])
            for (name, g), s in real_stats.items()}
# Each drafter's draft length is the one the formula favours on this device.
best_g = {name: max(REAL_GAMMAS[name], key=lambda g, n=name: pred_all[n, g]) for name in drafters}
real_pred = {name: pred_all[name, best_g[name]] for name in drafters}
for (name, g), p in pred_all.items():
    print(f"{name:>24}, γ = {g}: v = {v_real[g]:.2f}, predicted speedup {p:.2f}")
# Only prompt lookup is timed: the formula already says what the early-exit draft can give.
runs_real = [lambda: decode.generate(smol.params, smol.cfg, [ask], N_REAL).tokens,
             lambda: speculative_generate(smol.params, smol.cfg, ask, N_REAL, drafters[LOOKUP],
                                          gamma=best_g[LOOKUP])[0]]
REAL_ROUNDS = 5
plain_t, lookup_t = timing.time_alternating(runs_real, rounds=REAL_ROUNDS)
lookup_meas = plain_t.median_s / lookup_t.median_s
print(f"prompt lookup at γ = {best_g[LOOKUP]}: predicted speedup {real_pred[LOOKUP]:.2f}, "
      f"measured {lookup_meas:.2f} on {DEVICE}")

# %% tags=["hide-input"]
LOOKUP_SPEEDUP_FLOOR = 1.0     # glued into the sentence that states it
expect_measured(lookup_meas > LOOKUP_SPEEDUP_FLOOR,
                "prompt lookup, at the draft length the formula favours, generates the copied "
                f"passage faster than plain greedy decoding: a speedup above "
                f"{fmt_ratio(LOOKUP_SPEEDUP_FLOOR, 0)}",
                expected=f"a measured speedup above {fmt_ratio(LOOKUP_SPEEDUP_FLOOR, 0)}",
                measured=f"{fmt_ratio(lookup_meas, 2)} on {DEVICE}")
glue("ch13_real_c", f"{c_real:.2f}")
for key, name in (("lookup", LOOKUP), ("exit", EXIT)):
    glue(f"ch13_real_{key}_best_g", str(best_g[name]))
    glue(f"ch13_real_{key}_v", f"{v_real[best_g[name]]:.2f}")
    glue(f"ch13_real_{key}_speed_pred", fmt_ratio(real_pred[name], 2))
glue("ch13_real_lookup_speed_meas", fmt_ratio(lookup_meas, 2))
glue("ch13_real_plain_s", fmt_seconds(plain_t.median_s)); glue("ch13_real_rounds", str(REAL_ROUNDS))
glue("ch13_real_floor", fmt_ratio(LOOKUP_SPEEDUP_FLOOR, 0))

# %% [markdown]
# On {glue:text}`ch13_device`, for this model, the early-exit draft costs
# $c =$ {glue:text}`ch13_real_c` of a target step. The formula favours
# $\gamma =$ {glue:text}`ch13_real_lookup_best_g` for prompt lookup, where scoring $\gamma + 1$
# tokens costs $v =$ {glue:text}`ch13_real_lookup_v` steps, and predicts a speedup of
# {glue:text}`ch13_real_lookup_speed_pred` ($c = 0$); timed in alternation with plain greedy
# decoding ({glue:text}`ch13_real_plain_s` for {glue:text}`ch13_real_n` tokens, median of
# {glue:text}`ch13_real_rounds` runs), it measured {glue:text}`ch13_real_lookup_speed_meas` (the
# chapter checks that it is above {glue:text}`ch13_real_floor`). For early exit the best the
# formula finds is {glue:text}`ch13_real_exit_speed_pred`, at
# $\gamma =$ {glue:text}`ch13_real_exit_best_g`: no timing is needed to see that this draft
# does not pay. A free drafter that is usually right is the case the method was made for; a
# draft that costs a good share of the target and agrees with it less often has far less to
# give, and the formula says how much before any timing. What it leaves out — prefilling the
# prompt, which both runs share, each round's trip to the host and its bookkeeping — is the
# rest of the gap.

# %% [markdown] tags=["lang-zh"]
# 在 {glue:text}`ch13_device` 上，对这个模型而言，提前退出草稿的代价是目标模型一步的
# $c =$ {glue:text}`ch13_real_c`。对提示词查找，公式最看好 $\gamma =$
# {glue:text}`ch13_real_lookup_best_g`，此时给 $\gamma + 1$ 个词元打分的代价是
# $v =$ {glue:text}`ch13_real_lookup_v` 步，预测加速比为 {glue:text}`ch13_real_lookup_speed_pred`
# （$c = 0$）；与普通贪心解码交替计时（生成 {glue:text}`ch13_real_n` 个词元用时
# {glue:text}`ch13_real_plain_s`，{glue:text}`ch13_real_rounds` 次运行的中位数），实测为
# {glue:text}`ch13_real_lookup_speed_meas`（本章检验它高于 {glue:text}`ch13_real_floor`）。对提前退出，
# 公式能找到的最好结果是 $\gamma =$ {glue:text}`ch13_real_exit_best_g` 时的
# {glue:text}`ch13_real_exit_speed_pred`：不用计时也能看出这个草稿不划算。一个免费且通常猜对的起草者，
# 正是这个方法所针对的情形；一个代价占目标模型相当一部分、又较少与它一致的草稿模型，能给的就少得多，
# 而公式在计时之前就说出了能给多少。公式没有计入的部分——两种运行共有的提示词预填充、每一轮与主机的
# 往返和簿记——就是剩下的差距。

# %% [markdown]
# ## Summary
#
# - Scoring $\gamma + 1$ tokens costs about one decode step on memory-bound hardware, so a
#   drafter's guesses can be checked almost for free.
# - Greedy verification keeps the output identical; rejection sampling keeps the output
#   distribution identical, whatever the draft.
# - Each round yields $(1 - \alpha^{\gamma+1}) / (1 - \alpha)$ tokens on average; we measured
#   {glue:text}`ch13_tpr` against a predicted {glue:text}`ch13_tpr_pred`.
# - The speedup also depends on what drafting and verification cost; on this CPU verification
#   is not free ($v =$ {glue:text}`ch13_v_cpu`), which the formula accounts for once $v$ is
#   measured.
# - On a trained model copying a document, prompt lookup's guesses were accepted at
#   $\hat\alpha =$ {glue:text}`ch13_real_lookup_alpha`, with greedy decoding's tokens
#   unchanged; measured speedup {glue:text}`ch13_real_lookup_speed_meas` against the
#   formula's {glue:text}`ch13_real_lookup_speed_pred`.

# %% [markdown] tags=["lang-zh"]
# ## 小结
#
# - 在内存受限的硬件上，给 $\gamma + 1$ 个词元打分的代价约等于一个解码步骤，所以起草者的猜测几乎可以
#   免费检查。
# - 贪心验证让输出保持完全相同；拒绝采样让输出分布保持完全相同，无论草稿是什么。
# - 每一轮平均产出 $(1 - \alpha^{\gamma+1}) / (1 - \alpha)$ 个词元；我们实测为 {glue:text}`ch13_tpr`，
#   预测为 {glue:text}`ch13_tpr_pred`。
# - 加速比还取决于起草和验证的代价；在这台 CPU 上验证并不免费（$v =$ {glue:text}`ch13_v_cpu`），只要
#   测出 $v$，公式就把它考虑进去了。
# - 在一个照抄文档的训练好的模型上，提示词查找的猜测以 $\hat\alpha =$
#   {glue:text}`ch13_real_lookup_alpha` 被接受，贪心解码的词元保持不变；实测加速比为
#   {glue:text}`ch13_real_lookup_speed_meas`，公式给出 {glue:text}`ch13_real_lookup_speed_pred`。
