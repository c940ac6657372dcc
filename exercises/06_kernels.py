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
# # Exercises: attention kernels
#
# These exercises go with [chapter 6](../chapters/06_flash_attention.py) (FlashAttention) and
# [chapter 7](../chapters/07_decoding_kernels.py) (Flash-Decoding and paged attention). Part 1
# counts the bytes that standard and tiled attention move through a GPU's memory and the
# programs their grids launch {cite:p}`dao2022flashattention,dao2023flashattention2`; part 2
# asks for the online-softmax step at the heart of FlashAttention; part 3 is about decoding,
# where a single query meets a long cache {cite:p}`dao2023flashdecoding,kwon2023pagedattention`.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted*. The notebook runs from top to bottom
# at any stage, and `summary` at the end adds up your points. Numbers must be within the
# tolerance listed in the tables below; functions are called on random inputs beside the
# library's own version, each call with a time limit.

# %% [markdown] tags=["lang-zh"]
# # 练习：注意力内核
#
# 这些练习配合[第 6 章](../chapters/06_flash_attention.py)（FlashAttention）和
# [第 7 章](../chapters/07_decoding_kernels.py)（Flash-Decoding 与分页注意力）。第一部分数一数标准
# 注意力和分块注意力经由 GPU 内存搬运的字节数，以及它们的网格启动的程序数
# {cite:p}`dao2022flashattention,dao2023flashattention2`；第二部分请你写出 FlashAttention 核心的在线
# softmax 步骤；第三部分讲解码，这时单个查询要面对很长的缓存
# {cite:p}`dao2023flashdecoding,kwon2023pagedattention`。
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行它
# 后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示）或*未作答*。无论做到哪一步，这个笔记本都
# 能从头运行到尾，最后的 `summary` 会把你的得分加起来。数值答案必须落在下面各表所列的容差之内；函数
# 会在随机输入上与库自己的版本一起调用，每次调用都有时间限制。

# %%
import inferbook

info = inferbook.setup()

import math

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.book import bookdata
from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch06")
summary("ch07")

# %% [markdown]
# ## Part 1: what standard attention costs in memory traffic
#
# Take one attention head of width $H = 128$ in bfloat16 (2 bytes per number) during the
# prefill of an $n$-token prompt, $n = 8192$, so $T = S = n$. The textbook implementation runs
# three separate kernels, and each one reads its inputs from HBM and writes its result back:
#
# 1. scores $X = QK^\top/\sqrt{H}$ from $Q$ and $K$ — an $n \times n$ matrix, written out;
# 2. probabilities $P = \mathrm{softmax}(X)$ — $X$ read in, another $n \times n$ matrix out;
# 3. output $O = PV$ — $P$ and $V$ read in, $O$ written out.
#
# **1.1** How many bytes cross the HBM boundary for this one head?

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：标准注意力在内存流量上的代价
#
# 取一个宽度 $H = 128$、bfloat16（每个数 2 字节）的注意力头，考察一个 $n$ 个词元（token）的提示词的预填充，
# $n = 8192$，所以 $T = S = n$。教科书式的实现运行三个独立的内核，每个内核都从 HBM 读入输入，再把
# 结果写回去：
#
# 1. 由 $Q$ 和 $K$ 算出分数 $X = QK^\top/\sqrt{H}$——一个 $n \times n$ 的矩阵，写出去；
# 2. 概率 $P = \mathrm{softmax}(X)$——读入 $X$，写出另一个 $n \times n$ 的矩阵；
# 3. 输出 $O = PV$——读入 $P$ 和 $V$，写出 $O$。
#
# **1.1** 对这一个头，有多少字节穿过 HBM 的边界？

# %%
n, H, b = 8192, 128, 2

# %%
# BEGIN SOLUTION
qkvo = 4 * n * H * b                      # read Q, K, V once, write O once
score_matrices = 4 * n * n * b            # write X, read X, write P, read P
standard_bytes = qkvo + score_matrices
# END SOLUTION

# %%
check("ch06.standard_attention_bytes", standard_bytes)

# %% [markdown]
# **1.2** FlashAttention never writes $X$ or $P$. It cuts the queries into tiles of
# $b_q = 128$ rows; a tile stays on chip while every tile of $K$ and $V$ streams past it. $Q$
# is read once and $O$ written once, but $K$ and $V$ are read again for every query tile. How
# many bytes does it move for the same head?

# %% [markdown] tags=["lang-zh"]
# **1.2** FlashAttention 从不写出 $X$ 或 $P$。它把查询切成 $b_q = 128$ 行的分块；一个分块留在片上，
# $K$ 和 $V$ 的各个分块依次从它旁边流过。$Q$ 读一次，$O$ 写一次，但每个查询分块都要把 $K$ 和 $V$
# 再读一遍。对同一个头，它搬运多少字节？

# %%
b_q = 128

# %%
# BEGIN SOLUTION
flash_bytes = 2 * n * H * b + (n / b_q) * 2 * n * H * b
# END SOLUTION

# %%
check("ch06.flash_attention_bytes", flash_bytes)

# %% [markdown]
# The quotient of the two tends to $2b_q/H$ as $n$ grows: a constant factor, and larger query
# tiles buy more of it — as far as the SRAM of one streaming multiprocessor (SM) allows.
#
# **1.3** A GPU kernel is a grid of thread blocks, and each SM runs the blocks given to it.
# FlashAttention-1 launched one thread block per (sequence, head). For a single Llama-2-7B
# prompt (batch 1) on an A100, what share of the SMs have a block to run? (At most 1.)

# %% [markdown] tags=["lang-zh"]
# 随着 $n$ 增大，两者之商趋近 $2b_q/H$：一个常数因子，查询分块越大，这个因子就越大——只要一个流式
# 多处理器（SM）的 SRAM 容得下。
#
# **1.3** GPU 内核是由线程块组成的网格，每个 SM 运行分给它的线程块。FlashAttention-1 为每个（序列，
# 头）启动一个线程块。在 A100 上处理单个 Llama-2-7B 提示词（批次中只有这一个序列）时，有多大比例的
# SM 分到了线程块？（至多为 1。）

# %%
on_chip = {c["chip"]: c for c in bookdata.load("gpu_on_chip.json")["chips"]}
a100_sms = on_chip["A100 40GB"]["sms"]
llama = get_preset("llama-2-7b")
print(f"A100: {a100_sms} SMs; Llama-2-7B: N = {llama.N} query heads")

# %%
# BEGIN SOLUTION
fa1_busy = min(1.0, 1 * llama.N / a100_sms)
# END SOLUTION

# %%
check("ch06.fa1_busy_share", fa1_busy)

# %% [markdown]
# **1.4** FlashAttention-2 also puts the query tiles on the grid (they own disjoint rows of the
# output, so nothing ties them together). How many thread blocks does the same 8,192-token
# prompt launch with $b_q = 128$?

# %% [markdown] tags=["lang-zh"]
# **1.4** FlashAttention-2 还把查询分块也放进网格（它们各自拥有输出中互不相交的行，所以彼此之间毫无
# 牵连）。取 $b_q = 128$，同一个 8,192 个词元的提示词会启动多少个线程块？

# %%
# BEGIN SOLUTION
fa2_programs = 1 * llama.N * (n // b_q)
# END SOLUTION

# %%
check("ch06.fa2_programs", fa2_programs)

# %% [markdown]
# ## Part 2: the online softmax
#
# A query tile walks through the key tiles one at a time, keeping three running quantities
# per row $r$ of the tile: $m_r$, the largest score so far; $\ell_r$, the sum of
# $e^{x - m_r}$ over the scores $x$ seen so far; and $o_r$, the sum of $e^{x - m_r} v$ over
# the same keys — an output not yet divided by $\ell_r$. A new tile of scores $s$ (shape
# $[R, C]$) with its values $v$ ($[C, H]$) may raise the maximum to $m'_r$; everything summed
# so far used the old maximum and must be rescaled by $e^{m_r - m'_r}$ before the new tile's
# terms are added {cite:p}`milakov2018online`. The softmax over all keys is $o / \ell$ at the
# end.
#
# **2.1** Write the step. Masked scores hold $-10^{30}$ (they add nothing); before the first
# tile, $m = -10^{30}$, $\ell = 0$, $o = 0$. Return the new `(o, m, l)`.

# %% [markdown] tags=["lang-zh"]
# ## 第二部分：在线 softmax
#
# 一个查询分块逐个遍历键分块，为分块中的每一行 $r$ 保留三个累计量：$m_r$，到目前为止最大的分数；
# $\ell_r$，到目前为止见过的分数 $x$ 的 $e^{x - m_r}$ 之和；$o_r$，同样那些键上 $e^{x - m_r} v$
# 之和——一个尚未除以 $\ell_r$ 的输出。新来的一个分数分块 $s$（形状为 $[R, C]$）连同它的值 $v$
# （$[C, H]$）可能把最大值抬高到 $m'_r$；此前累加的一切用的都是旧的最大值，在加上新分块的项之前，
# 必须先乘以 $e^{m_r - m'_r}$ 重新缩放 {cite:p}`milakov2018online`。最后，对全部键的 softmax 就是
# $o / \ell$。
#
# **2.1** 写出这一步。被掩码遮住的分数取 $-10^{30}$（它们不贡献任何东西）；处理第一个分块之前，
# $m = -10^{30}$，$\ell = 0$，$o = 0$。返回新的 `(o, m, l)`。

# %%
def online_softmax_step(o_RH, m_R, l_R, s_RC, v_CH):
    """Fold one tile of scores s [R, C] and its values v [C, H] into (o, m, l)."""
    # BEGIN SOLUTION
    m_new = jnp.maximum(m_R, s_RC.max(axis=1))
    rescale = jnp.exp(m_R - m_new)
    weights_RC = jnp.exp(s_RC - m_new[:, None])
    l_new = rescale * l_R + weights_RC.sum(axis=1)
    o_new = rescale[:, None] * o_RH + weights_RC @ v_CH
    return o_new, m_new, l_new
    # END SOLUTION


# %%
check("ch06.online_softmax_step", online_softmax_step)

# %% [markdown]
# ## Part 3: decoding
#
# At decode time each sequence brings one query per head. The work of attention is
# $4NSH$ FLOPs against a cache of $2KSH$ numbers, so its arithmetic intensity hardly depends
# on anything but $G = N/K$, the number of query heads that share each KV head.
#
# **3.1** How many FLOPs per byte does one decode step of Mistral-7B's attention perform at a
# context of $S = 8192$ tokens, with the query, output and cache in bfloat16? Count the bytes
# of the query and the output too (they hardly matter).

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：解码
#
# 解码时，每个序列的每个头带来一个查询。注意力的工作量是 $4NSH$ FLOPs，面对的缓存有 $2KSH$ 个数，
# 所以它的算术强度几乎只取决于 $G = N/K$，即共享每个 KV 头的查询头数。
#
# **3.1** 上下文为 $S = 8192$ 个词元、查询、输出和缓存都用 bfloat16 时，Mistral-7B 的注意力在一个
# 解码步骤中每字节执行多少 FLOPs？查询和输出的字节也要算上（它们几乎不影响结果）。

# %%
mistral = get_preset("mistral-7b")
S = 8192
print(f"Mistral-7B: N = {mistral.N}, K = {mistral.K}, H = {mistral.H}")

# %%
# BEGIN SOLUTION
flops = 4 * mistral.N * S * mistral.H
moved = 2 * mistral.N * mistral.H * 2 + 2 * mistral.K * S * mistral.H * 2
decode_intensity = flops / moved
# END SOLUTION

# %%
check("ch07.decode_intensity", decode_intensity)

# %% [markdown]
# A handful of FLOPs per byte, while an H100 needs hundreds to be compute-bound: decode
# attention runs at the speed the cache is read, and reading at full speed needs many SMs
# issuing loads. A kernel that handles the $G$ query heads of one KV head together gives
# $B \cdot K$ programs at batch $B$. Flash-Decoding also splits the cache into $P$ chunks,
# each its own program: $B \cdot K \cdot P$.
#
# **3.2** At batch 1, what is the smallest $P$ for which Mistral-7B's decode attention gives
# every SM of an H100 a program?

# %% [markdown] tags=["lang-zh"]
# 每字节只有寥寥几个 FLOPs，而 H100 要几百个才会计算受限：解码注意力的速度就是读取缓存的速度，而要
# 全速读取，需要许多 SM 同时发出载入请求。把一个 KV 头的 $G$ 个查询头放在一起处理的内核，在批次有
# $B$ 个序列时给出 $B \cdot K$ 个程序。Flash-Decoding 还把缓存切成 $P$ 块，每块一个程序：共
# $B \cdot K \cdot P$ 个。
#
# **3.2** 批次中只有一个序列时，$P$ 最小取多少，Mistral-7B 的解码注意力才能让 H100 的每个 SM 都分到
# 一个程序？

# %%
h100_sms = on_chip["H100 SXM"]["sms"]
print(f"H100: {h100_sms} SMs")

# %%
# BEGIN SOLUTION
splits = math.ceil(h100_sms / (1 * mistral.K))
# END SOLUTION

# %%
check("ch07.splits_to_fill", splits)

# %% [markdown]
# **3.3 Combining the chunks.** Chunk $p$ of the cache gives, for every query row, an output
# $o_p$ normalised over its own keys and the log-sum-exp $\ell_p$ of its scores. Over the whole
# cache, $\ell = \log \sum_p e^{\ell_p}$ and $o = \sum_p e^{\ell_p - \ell}\, o_p$. Write the
# combine for outputs `out_BKPMH` of shape $[B, K, P, M, H]$ (chunks on axis 2, $M$ query rows
# per KV head) and log-sum-exps `lse_BKPM`; return `(out [B, K, M, H], lse [B, K, M])`. The
# log-sum-exps can be in the thousands, and a chunk that saw no key at all (past the end of a
# short sequence) has $\ell_p = -\infty$ and must weigh nothing.

# %% [markdown] tags=["lang-zh"]
# **3.3 合并各块。** 缓存的第 $p$ 块为每个查询行给出一个只在它自己的键上归一化的输出 $o_p$，以及它的
# 分数的 LSE（指数和的对数）$\ell_p$。在整个缓存上，$\ell = \log \sum_p e^{\ell_p}$，
# $o = \sum_p e^{\ell_p - \ell}\, o_p$。请为形状为 $[B, K, P, M, H]$ 的输出 `out_BKPMH`（块在第 2 轴，
# 每个 KV 头有 $M$ 个查询行）和 LSE `lse_BKPM` 写出合并，返回
# `(out [B, K, M, H], lse [B, K, M])`。LSE 可能大到几千；而一个键都没见过的块（位于短序列的
# 末尾之后）的 $\ell_p = -\infty$，它的权重必须为零。

# %%
def combine_chunks(out_BKPMH, lse_BKPM):
    """Attention over the whole cache from attention over each of its P chunks."""
    # BEGIN SOLUTION
    m_BKM = lse_BKPM.max(axis=2)                                  # some chunk is finite
    w_BKPM = jnp.exp(lse_BKPM - m_BKM[:, :, None])                 # exp(-inf) = 0
    total_BKM = w_BKPM.sum(axis=2)
    out = jnp.einsum("BKPM,BKPMH->BKMH", w_BKPM, out_BKPMH) / total_BKM[..., None]
    return out, m_BKM + jnp.log(total_BKM)
    # END SOLUTION


# %%
check("ch07.combine_chunks", combine_chunks)

# %% [markdown]
# **3.4 Reading a paged cache.** PagedAttention keeps each layer's keys in a pool of
# fixed-size blocks, `pool_NKCH` of shape $[\text{blocks}, K, C, H]$ with $C$ tokens per
# block, and each sequence has a row in a block table `block_table_BJ` ($[B, J]$) listing its
# blocks in order. The simplest attention over a paged cache first gathers every sequence's
# blocks into a contiguous cache $[B, K, J \cdot C, H]$ — position $p$ of sequence $b$ at
# index $p$ — and runs ordinary attention on it. Write that gather. (Blocks may appear in
# several rows: sequences can share a prefix.)

# %% [markdown] tags=["lang-zh"]
# **3.4 读取分页缓存。** PagedAttention 把每一层的键保存在一个由固定大小的块组成的池中：`pool_NKCH`
# 的形状为 $[\text{块数}, K, C, H]$，每块 $C$ 个词元；每个序列在块表 `block_table_BJ`（$[B, J]$）中
# 占一行，按顺序列出它的块。在分页缓存上计算注意力，最简单的办法是先把每个序列的块收集成一段连续的
# 缓存 $[B, K, J \cdot C, H]$——序列 $b$ 的位置 $p$ 位于下标 $p$——再对它做普通的注意力。请写出这个
# 收集操作。（同一个块可能出现在好几行中：序列之间可以共享前缀。）

# %%
def gather_blocks(pool_NKCH, block_table_BJ):
    """Each sequence's blocks, in order, as a contiguous cache [B, K, J·C, H]."""
    # BEGIN SOLUTION
    blocks_BJKCH = pool_NKCH[block_table_BJ]
    B, J, K, C, H = blocks_BJKCH.shape
    return blocks_BJKCH.transpose(0, 2, 1, 3, 4).reshape(B, K, J * C, H)
    # END SOLUTION


# %%
check("ch07.gather_blocks", gather_blocks)

# %% [markdown]
# ## Your score

# %% [markdown] tags=["lang-zh"]
# ## 你的得分

# %%
summary("ch06")
summary("ch07")
