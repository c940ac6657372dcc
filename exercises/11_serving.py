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
# # Exercises: serving
#
# These exercises go with [chapter 11](../chapters/11_inference_engine.py) (the inference
# engine), [chapter 12](../chapters/12_paged_kv_prefix_caching.py) (paged KV memory and prefix
# caching) and [chapter 13](../chapters/13_speculative_decoding.py) (speculative decoding).
# Part 1 schedules requests by hand and prices disaggregated serving with the estimator; part 2
# counts what paging saves {cite:p}`kwon2023pagedattention` and asks for the block-table lookup
# and the prefix-cache match {cite:p}`zheng2024sglang`; part 3 works through the arithmetic of
# speculative decoding and its acceptance rule {cite:p}`leviathan2023speculative`.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted*. The notebook runs from top to bottom
# at any stage, and `summary` at the end adds up your points.

# %% [markdown] tags=["lang-zh"]
# # 练习：服务
#
# 这些练习配合[第 11 章](../chapters/11_inference_engine.py)（推理引擎）、
# [第 12 章](../chapters/12_paged_kv_prefix_caching.py)（分页 KV 内存与前缀缓存）和
# [第 13 章](../chapters/13_speculative_decoding.py)（推测解码）。第一部分手动调度请求，并用估算器估算分
# 离式服务的成本；第二部分数一数分页能省下多少 {cite:p}`kwon2023pagedattention`，并请你写出块表查找和前
# 缀缓存匹配 {cite:p}`zheng2024sglang`；第三部分推演推测解码的计算及其接受规则
# {cite:p}`leviathan2023speculative`。
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行它
# 后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示）或*未作答*。无论做到哪一步，这个笔记本都能从
# 头运行到尾，最后的 `summary` 会把你的得分加起来。

# %%
import inferbook

info = inferbook.setup()

import math

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf import counts
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch11")
summary("ch12")
summary("ch13")

# %% [markdown]
# ## Part 1: scheduling and its costs
#
# An engine with four decode slots receives eight requests at once. Each asks for a number of
# new tokens, listed below in arrival order. Prefilling a request yields its first token;
# every *generate step* then gives each request in a slot one more token, and a request
# leaves its slot once it has all of its tokens.
#
# **1.1** *Static batching* takes the first four requests, prefills them together, and runs
# generate steps until the last of the four is done; then it takes the next four. How many
# generate steps does it run in all?

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：调度及其代价
#
# 一个有四个解码槽位的引擎同时收到八个请求。每个请求要求若干个新词元（token），按到达顺序列在下面。预填充一个请
# 求会得到它的第一个词元；此后，每个*生成步骤*让槽位中的每个请求再多得一个词元；一个请求拿到全部词元后
# 就离开它的槽位。
#
# **1.1** *静态批处理*取前四个请求，一起预填充，然后运行生成步骤，直到四个中的最后一个完成；接着再取下
# 四个。它一共运行多少个生成步骤？

# %%
output_lengths = [3, 12, 5, 7, 20, 2, 9, 4]
slots = 4

# %%
# BEGIN SOLUTION
static_steps = sum(max(output_lengths[i:i + slots]) - 1
                   for i in range(0, len(output_lengths), slots))
# END SOLUTION

# %%
check("ch11.static_steps", static_steps)

# %% [markdown]
# **1.2** An engine that refills a slot as soon as it frees up (interleaving prefills with
# generate steps, as JetStream does {cite:p}`jetstream2024`) prefills the next waiting request
# into every free slot before each generate step. How many generate steps does it need for the
# same eight requests? Simulate it.

# %% [markdown] tags=["lang-zh"]
# **1.2** 一个槽位一空出来就重新填上的引擎（像 JetStream 那样，把预填充与生成步骤交错执行
# {cite:p}`jetstream2024`），在每个生成步骤之前，都把下一个等待中的请求预填充进每一个空闲槽位。对同样
# 的八个请求，它需要多少个生成步骤？请模拟一遍。

# %%
# BEGIN SOLUTION
waiting = list(output_lengths)
running = []                                  # tokens still to come for each occupied slot
interleaved_steps = 0
while waiting or running:
    while waiting and len(running) < slots:
        left = waiting.pop(0) - 1             # the prefill gave the first token
        if left > 0:
            running.append(left)
    if running:
        interleaved_steps += 1
        running = [r - 1 for r in running if r > 1]
# END SOLUTION

# %%
check("ch11.interleaved_steps", interleaved_steps)

# %% [markdown]
# The library's orchestrator replays exactly these schedules (chapter 11), and the check
# counts its generate calls. Next, the costs behind *disaggregated* serving, where one server
# prefills and another generates, by the estimator's roofline model: a decode step reads the
# KV cache of the whole batch at HBM speed plus the weights (or spends the matmuls' time, if
# that is longer); a prefill takes the longer of its FLOPs at peak and its bytes at HBM speed;
# shipping a prompt's KV cache costs its bytes over the link.
#
# **1.3** One decode step of Llama-2-7B on a TPU v5e: a batch of 32 sequences with 2,048
# tokens of context each, weights and cache in bfloat16. Use `counts.param_bytes`,
# `counts.kv_bytes_per_token` and `counts.forward_flops(cfg, batch, 1, 0, logits_for=1)`.

# %% [markdown] tags=["lang-zh"]
# 库中的编排器正是这样重放这些调度的（第 11 章），检查会统计它调用生成的次数。接下来，按估算器的屋顶线
# 模型，算一算*分离式*服务背后的代价——一台服务器预填充，另一台生成：一个解码步骤以 HBM 速度读取整个批
# 次的 KV 缓存，再加上读取权重的时间（如果矩阵乘法的时间更长，则加上矩阵乘法的时间）；一次预填充取它的
# FLOPs 按峰值算力所需的时间与它的字节按 HBM 速度所需的时间中较长的那个；传送一个提示词的 KV 缓存，代
# 价是它的字节经过链路的时间。
#
# **1.3** TPU v5e 上 Llama-2-7B 的一个解码步骤：批次中有 32 个序列，每个有 2,048 个词元的上下文，权重
# 和缓存都是 bfloat16。请使用 `counts.param_bytes`、`counts.kv_bytes_per_token` 和
# `counts.forward_flops(cfg, batch, 1, 0, logits_for=1)`。

# %%
llama = get_preset("llama-2-7b")
v5e = get_chip("TPU v5e")

# %%
# BEGIN SOLUTION
kv_read = 32 * 2048 * counts.kv_bytes_per_token(llama, 2) / v5e.hbm_bytes_per_s
weights_read = counts.param_bytes(llama, 2) / v5e.hbm_bytes_per_s
matmuls = counts.forward_flops(llama, 32, 1, 0, logits_for=1) / v5e.bf16_flops_per_s
decode_step = kv_read + max(weights_read, matmuls)
# END SOLUTION

# %%
check("ch11.decode_step_seconds", decode_step)

# %% [markdown]
# **1.4** The prefill of one 4,096-token prompt on the same chip (no cached prefix): FLOPs
# from `counts.forward_flops(cfg, 1, 4096, 4096, logits_for=1)`; bytes: the weights, plus
# the new tokens' KV cache written.

# %% [markdown] tags=["lang-zh"]
# **1.4** 在同一块芯片上预填充一个 4,096 个词元的提示词（没有缓存的前缀）：FLOPs 取自
# `counts.forward_flops(cfg, 1, 4096, 4096, logits_for=1)`；字节数是权重，加上写入的新词元的 KV 缓存。

# %%
# BEGIN SOLUTION
prefill_flops = counts.forward_flops(llama, 1, 4096, 4096, logits_for=1)
prefill_bytes = counts.param_bytes(llama, 2) + 4096 * counts.kv_bytes_per_token(llama, 2)
prefill_s = max(prefill_flops / v5e.bf16_flops_per_s, prefill_bytes / v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch11.prefill_seconds", prefill_s)

# %% [markdown]
# **1.5** How long does shipping that prompt's KV cache to the generate server take over one
# of the chip's interconnect links (`link_bytes_per_s`, one way)?

# %% [markdown] tags=["lang-zh"]
# **1.5** 经这块芯片的一条互连链路（`link_bytes_per_s`，单向）把这个提示词的 KV 缓存传送到生成服务器，
# 需要多长时间？

# %%
# BEGIN SOLUTION
transfer_s = 4096 * 2 * llama.L * llama.K * llama.H * 2 / v5e.link_bytes_per_s
# END SOLUTION

# %%
check("ch11.kv_transfer_seconds", transfer_s)

# %% [markdown]
# ## Part 2: paged KV memory and prefix caching
#
# A paged cache hands out memory in blocks of `block_size` tokens, as a sequence needs them.
# Eight sequences hold the numbers of tokens below; blocks hold 16 tokens.
#
# **2.1** How many blocks do they occupy?

# %% [markdown] tags=["lang-zh"]
# ## 第二部分：分页 KV 内存与前缀缓存
#
# 分页缓存以每块 `block_size` 个词元的块来分配内存，按序列的需要逐块发放。八个序列持有的词元数列在下面；
# 每块 16 个词元。
#
# **2.1** 它们占用多少个块？

# %%
lengths = [37, 512, 129, 16, 1000, 250, 3, 64]
block_size = 16

# %%
# BEGIN SOLUTION
blocks = sum(math.ceil(n / block_size) for n in lengths)
# END SOLUTION

# %%
check("ch12.blocks_needed", blocks)

# %% [markdown]
# **2.2** What share of the token slots in those blocks holds nothing (the unfilled tails of
# the last blocks)?

# %% [markdown] tags=["lang-zh"]
# **2.2** 这些块中的词元槽位，有多大比例什么都没存（即各序列最后一个块中没填满的尾部）？

# %%
# BEGIN SOLUTION
paged_waste = 1 - sum(lengths) / (blocks * block_size)
# END SOLUTION

# %%
check("ch12.paged_waste", paged_waste)

# %% [markdown]
# **2.3** A contiguous cache instead reserves the model's maximum length, 2,048 tokens, for
# every sequence up front. What share of that reservation holds nothing?

# %% [markdown] tags=["lang-zh"]
# **2.3** 改用连续缓存时，要预先为每个序列预留模型的最大长度 2,048 个词元。这份预留中有多大比例什么都
# 没存？

# %%
# BEGIN SOLUTION
contiguous_waste = 1 - sum(lengths) / (len(lengths) * 2048)
# END SOLUTION

# %%
check("ch12.contiguous_waste", contiguous_waste)

# %% [markdown]
# **2.4 The block table.** Number the pool's token slots block by block: block $n$ holds slots
# $n \cdot C, \dots, n \cdot C + C - 1$ for blocks of $C$ tokens. Row $b$ of the block table
# `block_table_BJ` ($[B, J]$) lists sequence $b$'s blocks in order, so its $j$-th block holds
# its positions $jC, \dots, jC + C - 1$. Given positions `pos_BT` ($[B, T]$, each below
# $J \cdot C$), return the physical slot of each, an integer array $[B, T]$.

# %% [markdown] tags=["lang-zh"]
# **2.4 块表。** 把块池中的词元槽位按块依次编号：对每块 $C$ 个词元的块，块 $n$ 持有槽位
# $n \cdot C, \dots, n \cdot C + C - 1$。块表 `block_table_BJ`（$[B, J]$）的第 $b$ 行按顺序列出序列
# $b$ 的各个块，所以它的第 $j$ 个块持有该序列的位置 $jC, \dots, jC + C - 1$。给定位置 `pos_BT`（$[B, T]$，
# 每个都小于 $J \cdot C$），返回每个位置所在的物理槽位，即一个 $[B, T]$ 的整数数组。

# %%
def physical_slot(block_table_BJ, pos_BT, block_size):
    """The pool slot that holds position pos_BT[b, t] of sequence b."""
    # BEGIN SOLUTION
    table = np.asarray(block_table_BJ)
    pos = np.asarray(pos_BT)
    block = np.take_along_axis(table, pos // block_size, axis=1)
    return block * block_size + pos % block_size
    # END SOLUTION


# %%
check("ch12.physical_slot", physical_slot)

# %% [markdown]
# **2.5 The prefix cache.** A prefix cache remembers the KV blocks of earlier prompts so that a
# new prompt beginning the same way skips that part of its prefill. It keeps only *full*
# blocks, and a block is reusable only together with everything before it (its keys and values
# depend on every earlier token). Given the earlier prompts (lists of token ids, all of them
# cached), a new prompt and the block size, return how many tokens of the new prompt the cache
# can supply.

# %% [markdown] tags=["lang-zh"]
# **2.5 前缀缓存。** 前缀缓存记住先前提示词的 KV 块，这样一个开头相同的新提示词就能跳过这一部分的预填
# 充。它只保留*满*块，而且一个块只有连同它之前的所有内容才能复用（它的键和值依赖于之前的每一个词元）。
# 给定先前的提示词（词元 ID 的列表，全都已缓存）、一个新提示词和块大小，返回缓存能为新提示词提供多少个
# 词元。

# %%
def prefix_match(cached_prompts, prompt, block_size):
    """Tokens of `prompt` covered by the longest cached prefix, in whole blocks."""
    # BEGIN SOLUTION
    best = 0
    for old in cached_prompts:
        full = min(len(old), len(prompt)) // block_size
        k = 0
        while k < full and old[k * block_size:(k + 1) * block_size] == \
                prompt[k * block_size:(k + 1) * block_size]:
            k += 1
        best = max(best, k)
    return best * block_size
    # END SOLUTION


# %%
check("ch12.prefix_match", prefix_match)

# %% [markdown]
# ## Part 3: speculative decoding
#
# A draft model proposes $\gamma$ tokens; the target model scores all of them in one forward
# pass and keeps the longest acceptable run, plus one token of its own. Under the analysis of
# {cite:t}`leviathan2023speculative`, each draft is accepted with the same probability
# $\alpha$, independently of the others.
#
# **3.1** A draft token $x$ drawn from the draft's distribution $q$ survives with probability
# $\min(1, p(x)/q(x))$, where $p$ is the target's distribution. What is $\alpha$ for the two
# distributions below?

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：推测解码
#
# 草稿模型提出 $\gamma$ 个词元；目标模型用一次前向计算为它们全部打分，保留可以接受的最长一段，再加上一
# 个自己的词元。按照 {cite:t}`leviathan2023speculative` 的分析，每个草稿都以相同的概率 $\alpha$ 被接受，
# 彼此独立。
#
# **3.1** 从草稿的分布 $q$ 中抽出的草稿词元 $x$ 以概率 $\min(1, p(x)/q(x))$ 保留下来，其中 $p$ 是目标
# 模型的分布。对下面这两个分布，$\alpha$ 是多少？

# %%
p_target = [0.40, 0.25, 0.20, 0.10, 0.05]
q_draft = [0.20, 0.45, 0.15, 0.10, 0.10]

# %%
# BEGIN SOLUTION
alpha_pq = sum(min(a, c) for a, c in zip(p_target, q_draft))
# END SOLUTION

# %%
check("ch13.acceptance_rate", alpha_pq)

# %% [markdown]
# **3.2** With $\alpha = 0.8$ and $\gamma = 4$, how many tokens does one target step yield on
# average?

# %% [markdown] tags=["lang-zh"]
# **3.2** 当 $\alpha = 0.8$、$\gamma = 4$ 时，目标模型的一步平均产出多少个词元？

# %%
alpha, gamma, c = 0.8, 4, 0.05

# %%
# BEGIN SOLUTION
expected_tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)
# END SOLUTION

# %%
check("ch13.expected_tokens", expected_tokens)

# %% [markdown]
# **3.3** A draft step costs $c = 0.05$ target steps. How much faster than plain decoding is
# speculative decoding with these numbers, if a target step costs the same whether it scores
# one token or $\gamma + 1$?

# %% [markdown] tags=["lang-zh"]
# **3.3** 一个草稿步骤的代价是目标步骤的 $c = 0.05$ 倍。如果目标步骤无论为一个词元还是 $\gamma + 1$ 个
# 词元打分，代价都一样，那么在这些数值下，推测解码比普通解码快多少？

# %%
# BEGIN SOLUTION
speedup = expected_tokens / (gamma * c + 1)
# END SOLUTION

# %%
check("ch13.speedup", speedup)

# %% [markdown]
# **3.4** Which $\gamma$ between 0 and 32 gives the largest speedup at $\alpha = 0.8$,
# $c = 0.05$?

# %% [markdown] tags=["lang-zh"]
# **3.4** 在 $\alpha = 0.8$、$c = 0.05$ 时，0 到 32 之间哪个 $\gamma$ 的加速最大？

# %%
# BEGIN SOLUTION
best_gamma = max(range(33), key=lambda g: (1 - alpha ** (g + 1)) / (1 - alpha) / (g * c + 1))
# END SOLUTION

# %%
check("ch13.best_gamma", best_gamma)

# %% [markdown]
# **3.5 The acceptance rule.** Write the rule with its random numbers given. `drafts` holds
# the $\gamma$ proposed tokens; `q[i]` ($\gamma$ rows of $V$) is the draft's distribution
# for draft $i$; `p[i]` the target's distribution at the same position, with one extra row
# `p[γ]` for the position after the last draft ($\gamma + 1$ rows); `u` one uniform number
# in $[0, 1)$ per draft. Draft $i$ (token $x$) is accepted when
# $u_i \cdot q_i(x) < p_i(x)$; the first rejection ends the run. Return `(n, dist)`: the
# number of drafts accepted, and the distribution the target's own token is then drawn from —
# the *residual* $\max(0, p_n - q_n)$, renormalised, after a rejection at draft $n$, or
# $p_\gamma$ itself when every draft was accepted. This rule makes every emitted token follow
# $p$ exactly, whatever $q$ is.

# %% [markdown] tags=["lang-zh"]
# **3.5 接受规则。** 在随机数给定的情况下写出这条规则。`drafts` 存放提出的 $\gamma$ 个词元；`q[i]`（$\gamma$
# 行，每行 $V$ 个数）是草稿模型对第 $i$ 个草稿的分布；`p[i]` 是目标模型在同一位置的分布，另外多一行
# `p[γ]`，对应最后一个草稿之后的位置（共 $\gamma + 1$ 行）；`u` 为每个草稿提供一个 $[0, 1)$ 中的均匀随
# 机数。当 $u_i \cdot q_i(x) < p_i(x)$ 时，草稿 $i$（词元 $x$）被接受；第一次拒绝就结束这一轮。返回
# `(n, dist)`：被接受的草稿个数，以及目标模型自己的词元随后从中抽取的分布——若在草稿 $n$ 处被拒绝，就是
# 重新归一化后的*残差* $\max(0, p_n - q_n)$；若所有草稿都被接受，就是 $p_\gamma$ 本身。无论 $q$ 是什么，
# 这条规则都让每个输出的词元严格服从 $p$。

# %%
def accept(drafts, q, p, u):
    """(accepted drafts, distribution of the target's token) of one speculative round."""
    # BEGIN SOLUTION
    drafts, q, p, u = (np.asarray(a) for a in (drafts, q, p, u))
    n = 0
    while n < len(drafts) and u[n] * q[n, drafts[n]] < p[n, drafts[n]]:
        n += 1
    if n == len(drafts):
        return n, p[n]
    residual = np.maximum(p[n] - q[n], 0.0)
    return n, residual / residual.sum()
    # END SOLUTION


# %%
check("ch13.accept", accept)

# %% [markdown]
# ## Your score

# %% [markdown] tags=["lang-zh"]
# ## 你的得分

# %%
summary("ch11")
summary("ch12")
summary("ch13")
