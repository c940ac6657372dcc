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
# # FlashAttention: IO-aware attention for prefill
#
# Attention as written in the textbook — scores $QK^\top/\sqrt{H}$, a softmax, a product with
# $V$ — is exact, simple, and on a GPU mostly a memory benchmark. For a prompt of $T$ tokens it
# computes a $T \times S$ matrix of scores, writes it to memory, reads it back to exponentiate
# it, writes the probabilities, and reads those back to multiply them by $V$. The arithmetic is
# cheap next to that traffic, and the matrix grows with the square of the sequence.
#
# FlashAttention {cite:p}`dao2022flashattention` computes the same numbers without ever
# writing that matrix. It is not an approximation: it reorders the computation so that each
# piece of $Q$, $K$ and $V$ is used as often as possible while it sits in fast on-chip memory,
# and it makes the softmax — which looks like it needs a whole row at once — work one block
# of keys at a time. This chapter derives it step by step, implements it in JAX, checks it
# against the reference, measures what it saves on your device, and then walks through the
# changes of FlashAttention-2 {cite:p}`dao2023flashattention2`. The decode-time descendants
# (Flash-Decoding, FlashDecoding++, paged attention) are chapter 7.

# %% [markdown] tags=["lang-zh"]
# # FlashAttention：面向预填充的 IO 感知注意力
#
# 教科书里写的注意力——分数 $QK^\top/\sqrt{H}$、一次 softmax、再与 $V$ 相乘——精确、简单，而在 GPU
# 上跑起来，基本上就是在测内存带宽。对一个 $T$ 个词元（token）的提示词，它算出一个 $T \times S$ 的分数矩阵，写入
# 内存，读回来求指数，写出概率，再读回来与 $V$ 相乘。与这些数据流量相比，计算很便宜，而这个矩阵
# 随序列长度的平方增长。
#
# FlashAttention {cite:p}`dao2022flashattention` 算出同样的数，却从不写出那个矩阵。它不是近似：它
# 重新安排计算的顺序，让 $Q$、$K$、$V$ 的每一部分在快速的片上内存里停留时被尽可能多地使用；它还让
# softmax——看上去需要一次拿到整行——每次只处理一块键。本章一步一步推导它，用 JAX 实现它，与参考
# 实现对照检验，在你的设备上测量它省下了什么，然后逐一讲解 FlashAttention-2
# {cite:p}`dao2023flashattention2` 的改动。它在解码阶段的后代（Flash-Decoding、FlashDecoding++、
# 分页注意力）留到第 7 章。

# %%
from functools import partial

import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.kernels import flash, kernel_bench
from inferbook.kernels.pallas import pallas_flash_attention
from inferbook.model.attention import reference_at_positions
from inferbook.perf import compiled, timing
from inferbook.perf.hardware import get_chip

print(info.describe())
DEVICE = timing.device_name()
on_chip = bookdata.load("gpu_on_chip.json")
chip_data = {c["chip"]: c for c in on_chip["chips"]}

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.figures import glue_figure
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_flops,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)

# %% [markdown]
# ## The memory hierarchy
#
# A GPU has a large, slow memory and a small, fast one. The weights, the activations and the
# KV cache live in high-bandwidth memory (HBM), tens of gigabytes off the compute die. Each of
# the chip's streaming multiprocessors (SMs) has a few hundred kilobytes of on-chip SRAM
# (registers, shared memory, L1) that it can read an order of magnitude faster. The
# FlashAttention paper's figures for an A100:

# %% [markdown] tags=["lang-zh"]
# ## 内存层次
#
# GPU 有一块大而慢的内存，和一块小而快的内存。权重、激活值和 KV 缓存都放在高带宽内存（HBM）里，
# 它有几十 GB，位于计算芯片之外。芯片上的每个流式多处理器（SM）都有几百 KB 的片上 SRAM（寄存器、
# 共享内存、L1），读取速度要快一个数量级。FlashAttention 论文给出的 A100 数据如下：

# %%
hierarchy = on_chip["memory_hierarchy"]
levels = {lv["level"]: lv for lv in hierarchy["levels"]}
sram, hbm = levels["on-chip SRAM"], levels["HBM"]
a100 = get_chip("A100 40GB")
a100_sms = chip_data["A100 40GB"]["sms"]
assert sram["bytes_per_s"] > 10 * hbm["bytes_per_s"] and hbm["bytes"] > 1000 * sram["bytes"]

# %% tags=["hide-input"]
for level in hierarchy["levels"]:
    print(f"{level['level']:>13s}: {fmt_bytes(level['bytes']):>8s} at {fmt_rate(level['bytes_per_s'])}")
print(f"(source: {hierarchy['source']})")
glue("ch6_sram_speed", fmt_ratio(sram["bytes_per_s"] / hbm["bytes_per_s"], 0))
glue("ch6_hbm_size", fmt_ratio(hbm["bytes"] / sram["bytes"], 0))
glue("ch6_sram_per_sm", fmt_bytes(chip_data["A100 40GB"]["sram_per_sm_bytes"], 0))
glue("ch6_a100_sms", str(a100_sms))
glue("ch6_a100_ridge", f"{a100.bf16_flops_per_s / a100.hbm_bytes_per_s:,.0f}")

# %% [markdown]
# On-chip SRAM is {glue:text}`ch6_sram_speed` faster than HBM and HBM is
# {glue:text}`ch6_hbm_size` larger; the SRAM is split into {glue:text}`ch6_a100_sms` slices of
# {glue:text}`ch6_sram_per_sm`, one per SM. Every kernel a GPU runs reads its inputs from HBM
# into SRAM, computes, and writes its outputs back. Whether the kernel is fast depends on how
# much arithmetic it does per byte it moves: the A100 performs
# {glue:text}`ch6_a100_ridge` bfloat16 FLOPs in the time it reads one byte from HBM
# (chapter 2's *critical intensity*). Below that a kernel waits for memory; above it, for
# arithmetic.
#
# ## Standard attention is bound by memory traffic
#
# For one head, with $Q \in \mathbb{R}^{T \times H}$ and $K, V \in \mathbb{R}^{S \times H}$,
# the standard implementation runs three kernels:
#
# 1. read $Q$ and $K$, compute $X = QK^\top / \sqrt{H}$, write $X$ ($T \times S$);
# 2. read $X$, compute $P = \mathrm{softmax}(X)$ row by row, write $P$ ($T \times S$);
# 3. read $P$ and $V$, compute $O = PV$, write $O$ ($T \times H$).
#
# Its HBM traffic is $b\,(2TH + 2SH + 4TS)$ bytes for $b$ bytes per element, while its
# arithmetic is the two products, $4TSH$ FLOPs. For a prefill, $T = S = n$: the $4n^2$ term
# dominates, and the arithmetic intensity approaches $4n^2H / 4bn^2 = H/b$.

# %% [markdown] tags=["lang-zh"]
# 片上 SRAM 的速度是 HBM 的 {glue:text}`ch6_sram_speed`，而 HBM 的容量是 SRAM 的
# {glue:text}`ch6_hbm_size`；SRAM 分成 {glue:text}`ch6_a100_sms` 份，每个 SM 一份，每份
# {glue:text}`ch6_sram_per_sm`。GPU 运行的每个内核都从 HBM 把输入读进 SRAM，进行计算，再把输出写回
# 去。内核快不快，取决于它每搬运一个字节做多少计算：A100 从 HBM 读一个字节的时间里，能完成
# {glue:text}`ch6_a100_ridge` 次 bfloat16 浮点运算（第 2 章的*临界强度*）。低于这个值，内核在等
# 内存；高于它，内核在等计算。
#
# ## 标准注意力受限于内存流量
#
# 对一个头，$Q \in \mathbb{R}^{T \times H}$，$K, V \in \mathbb{R}^{S \times H}$，标准实现运行三个
# 内核：
#
# 1. 读 $Q$ 和 $K$，计算 $X = QK^\top / \sqrt{H}$，写出 $X$（$T \times S$）；
# 2. 读 $X$，逐行计算 $P = \mathrm{softmax}(X)$，写出 $P$（$T \times S$）；
# 3. 读 $P$ 和 $V$，计算 $O = PV$，写出 $O$（$T \times H$）。
#
# 每个元素占 $b$ 字节时，它的 HBM 流量是 $b\,(2TH + 2SH + 4TS)$ 字节，而计算量是两次矩阵乘积，共
# $4TSH$ FLOPs。对预填充而言 $T = S = n$：$4n^2$ 项占主导，算术强度趋近 $4n^2H / 4bn^2 = H/b$。

# %%
def standard_io_bytes(T, S, H, b):
    """HBM bytes of the three-kernel attention above (one head)."""
    return b * (2 * T * H + 2 * S * H + 4 * T * S)


def attention_flops(T, S, H):
    return 4 * T * S * H


H_gpu, b16 = 128, 2
ns = [1024, 2048, 4096, 8192, 16384, 32768]
intensity = {n: attention_flops(n, n, H_gpu) / standard_io_bytes(n, n, H_gpu, b16) for n in ns}
ridge = a100.bf16_flops_per_s / a100.hbm_bytes_per_s
assert all(i < H_gpu / b16 <= ridge for i in intensity.values())
n_ex = 8192
t_mem = standard_io_bytes(n_ex, n_ex, H_gpu, b16) / a100.hbm_bytes_per_s
t_flop = attention_flops(n_ex, n_ex, H_gpu) / a100.bf16_flops_per_s
assert t_mem > t_flop

# %% tags=["hide-input"]
glue("ch6_std_intensity", f"{intensity[n_ex]:.0f}")
glue("ch6_std_of_ridge", fmt_percent(intensity[n_ex] / ridge))
glue("ch6_std_tmem", fmt_seconds(t_mem)); glue("ch6_std_tflop", fmt_seconds(t_flop))
glue("ch6_n_ex", f"{n_ex:,}")

# %% [markdown]
# With $H = 128$ in bfloat16 that is {glue:text}`ch6_std_intensity` FLOPs per byte at
# $n =$ {glue:text}`ch6_n_ex`, {glue:text}`ch6_std_of_ridge` of the A100's {glue:text}`ch6_a100_ridge`: for one
# head, the A100 needs {glue:text}`ch6_std_tmem` to move the bytes and only
# {glue:text}`ch6_std_tflop` to do the arithmetic. The softmax in the middle is worse still —
# a few FLOPs per element of a matrix that is read and written in full.
#
# We can check the traffic count against a real compiler. XLA reports, for a compiled program,
# how many bytes its instructions read and write. Here is the library's reference attention
# (`attention_reference`, which follows the three steps above) compiled on this device for one
# head of width 64 in float32:

# %% [markdown] tags=["lang-zh"]
# $H = 128$、bfloat16 时，在 $n =$ {glue:text}`ch6_n_ex` 处，这相当于每字节
# {glue:text}`ch6_std_intensity` FLOPs，仅为 A100 临界强度
# {glue:text}`ch6_a100_ridge` 的 {glue:text}`ch6_std_of_ridge`：对一个头来说，A100 搬运这些字节
# 需要 {glue:text}`ch6_std_tmem`，而做计算只需 {glue:text}`ch6_std_tflop`。中间的 softmax 更糟——
# 对一个要完整读写一遍的矩阵，每个元素只做几次浮点运算。
#
# 我们可以拿真实的编译器来核对这个流量计数。XLA 会报告一个编译后的程序中各条指令读写了多少字节。
# 下面是库中的参考注意力实现（`attention_reference`，它正是按上面三步做的），在这台设备上为一个
# 宽度为 64 的头、以 float32 编译的结果：

# %%
ref = jax.jit(reference_at_positions)
xla_bytes, xla_flops = {}, {}
for n in (1024, 2048):
    cost = compiled.compiled_cost(ref, *kernel_bench.attention_inputs(1, n, n, 1, 1, 64, "float32"))
    xla_bytes[n], xla_flops[n] = cost["bytes_accessed"], cost["flops"]
    print(f"n={n:5d}: XLA counts {fmt_bytes(xla_bytes[n])} moved, {fmt_flops(xla_flops[n])}; "
          f"the three-kernel count is {fmt_bytes(standard_io_bytes(n, n, 64, 4))}")
# At least the textbook's traffic, and quadratic in n: doubling n quadruples it.
assert all(xla_bytes[n] >= standard_io_bytes(n, n, 64, 4) for n in xla_bytes)
assert 3.5 < xla_bytes[2048] / xla_bytes[1024] < 4.5

# %% tags=["hide-input"]
glue("ch6_xla_intensity", f"{xla_flops[2048] / xla_bytes[2048]:.0f}")
glue("ch6_xla_vs_count", fmt_ratio(xla_bytes[2048] / standard_io_bytes(2048, 2048, 64, 4)))

# %% [markdown]
# The compiled program moves {glue:text}`ch6_xla_vs_count` the three-kernel count (it makes
# extra passes over the score matrix for the mask and the softmax's maximum and sum),
# quadrupling each time $n$ doubles, and performs {glue:text}`ch6_xla_intensity` FLOPs per
# byte. Making the arithmetic faster would not help; moving fewer bytes would.
#
# ## Softmax one block at a time
#
# The obstacle to fusing the three steps is the softmax: row $i$ of $P$ needs every score of
# row $i$ before it can normalise any of them. FlashAttention removes the obstacle with
# three small observations.
#
# **1. Subtracting the row maximum changes nothing — and is necessary.** Softmax is invariant
# to shifting its inputs, $\mathrm{softmax}(x) = \mathrm{softmax}(x - c)$, and
# $e^{x}$ overflows float32 beyond $x \approx$ {glue:text}`ch6_exp_limit`, so every
# implementation subtracts the maximum $m = \max_j x_j$ first:

# %% [markdown] tags=["lang-zh"]
# 编译后的程序搬运的字节数是三内核计数的 {glue:text}`ch6_xla_vs_count`（为了掩码以及 softmax 的
# 最大值和求和，它要多遍历几次分数矩阵），$n$ 每翻一番，它就翻两番；它每字节执行
# {glue:text}`ch6_xla_intensity` FLOPs。让计算更快无济于事；少搬运些字节才有用。
#
# ## 一次一块地算 softmax
#
# 把三步融合在一起的障碍是 softmax：$P$ 的第 $i$ 行要先拿到第 $i$ 行的全部分数，才能对其中任何一个
# 做归一化。FlashAttention 靠三个小小的观察扫除了这个障碍。
#
# **1. 减去行最大值什么也不改变——而且必不可少。** softmax 对输入的平移保持不变，
# $\mathrm{softmax}(x) = \mathrm{softmax}(x - c)$；而 $e^{x}$ 在 $x \approx$
# {glue:text}`ch6_exp_limit` 以上就会超出 float32 的范围，所以每个实现都先减去最大值
# $m = \max_j x_j$：

# %%
exp_limit = float(np.log(np.finfo(np.float32).max))
x = np.array([100.0, 101.0, 99.0], np.float32)
assert x.max() > exp_limit
with np.errstate(over="ignore", invalid="ignore"):
    unsafe = np.exp(x) / np.exp(x).sum()
safe = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
assert np.isnan(unsafe).all() and np.isclose(safe.sum(), 1.0)

# %% tags=["hide-input"]
glue("ch6_exp_limit", f"{exp_limit:.1f}")
print("exp(x) / sum:        ", unsafe, "\nexp(x - m) / sum:    ", safe)

# %% [markdown]
# **2. Two blocks can be normalised separately and merged.** Split a row of scores into
# $x^{(1)}$ and $x^{(2)}$. Each block has its own maximum $m_i$ and sum
# $\ell_i = \sum_j e^{x^{(i)}_j - m_i}$. With $m = \max(m_1, m_2)$,
#
# $$\ell = e^{m_1 - m}\,\ell_1 + e^{m_2 - m}\,\ell_2,
# \qquad \mathrm{softmax}(x) = \big[e^{x^{(1)} - m},\; e^{x^{(2)} - m}\big] / \ell .$$
#
# Each block's statistics are rescaled by $e^{m_i - m}$ — the factor that converts
# "exponentials relative to my maximum" into "exponentials relative to the overall maximum".

# %% [markdown] tags=["lang-zh"]
# **2. 两块可以分别归一化，再合并起来。** 把一行分数拆成 $x^{(1)}$ 和 $x^{(2)}$。每块有自己的
# 最大值 $m_i$ 和自己的和 $\ell_i = \sum_j e^{x^{(i)}_j - m_i}$。令 $m = \max(m_1, m_2)$，则
#
# $$\ell = e^{m_1 - m}\,\ell_1 + e^{m_2 - m}\,\ell_2,
# \qquad \mathrm{softmax}(x) = \big[e^{x^{(1)} - m},\; e^{x^{(2)} - m}\big] / \ell .$$
#
# 每块的统计量都乘以 $e^{m_i - m}$ 重新缩放——正是这个因子，把“相对于我自己的最大值的指数”换算成
# “相对于全局最大值的指数”。

# %%
rng = np.random.default_rng(0)
x = rng.normal(size=12) * 3
x1, x2 = x[:5], x[5:]
m1, m2 = x1.max(), x2.max()
l1, l2 = np.exp(x1 - m1).sum(), np.exp(x2 - m2).sum()
m = max(m1, m2)
l = np.exp(m1 - m) * l1 + np.exp(m2 - m) * l2
merged = np.concatenate([np.exp(x1 - m), np.exp(x2 - m)]) / l
np.testing.assert_allclose(merged, np.exp(x - x.max()) / np.exp(x - x.max()).sum(), rtol=1e-12)
print("two-block softmax equals the softmax of the whole row")

# %% [markdown]
# **3. The output can be rescaled the same way, so nothing has to be kept but three running
# quantities per row.** We never need $P$ itself, only $O = PV$. Walk through the keys block
# by block, keeping for each query row the running maximum $m$, the running sum $\ell$ and the
# *unnormalised* output $o = \sum_j e^{x_j - m} v_j$. When block $j$ arrives with scores
# $x^{(j)}$:
#
# $$m' = \max\!\big(m, \max x^{(j)}\big), \quad
# \ell' = e^{m - m'}\ell + \sum e^{x^{(j)} - m'}, \quad
# o' = e^{m - m'}\,o + e^{x^{(j)} - m'}\, V^{(j)} .$$
#
# After the last block, $O = o / \ell$, and as a by-product $\log \ell + m$ is the row's
# log-sum-exp, $\log \sum_j e^{x_j}$. This is the *online softmax* of
# {cite:t}`milakov2018online`, applied to attention (see also {cite:t}`rabe2021selfattention`).
# Written from scratch for one query row, in numpy:

# %% [markdown] tags=["lang-zh"]
# **3. 输出也能用同样的办法重新缩放，所以每行只需保留三个累计量。** 我们从来不需要 $P$ 本身，只需要
# $O = PV$。一块一块地遍历键，为每个查询行保留累计最大值 $m$、累计和 $\ell$，以及*未归一化*的输出
# $o = \sum_j e^{x_j - m} v_j$。当第 $j$ 块带着分数 $x^{(j)}$ 到来时：
#
# $$m' = \max\!\big(m, \max x^{(j)}\big), \quad
# \ell' = e^{m - m'}\ell + \sum e^{x^{(j)} - m'}, \quad
# o' = e^{m - m'}\,o + e^{x^{(j)} - m'}\, V^{(j)} .$$
#
# 最后一块处理完后，$O = o / \ell$；顺带地，$\log \ell + m$ 就是这一行的 LSE（log-sum-exp，指数和的对数），
# 即 $\log \sum_j e^{x_j}$。这就是 {cite:t}`milakov2018online` 的*在线 softmax*，用在了注意力上（另见
# {cite:t}`rabe2021selfattention`）。下面用 numpy 为单个查询行从零写出它：

# %%
def attention_row_by_blocks(q_H, K_SH, V_SH, block):
    """One query row's attention, visiting the keys `block` at a time."""
    m, l, o = -np.inf, 0.0, np.zeros(V_SH.shape[1])
    for start in range(0, len(K_SH), block):
        x = K_SH[start:start + block] @ q_H / np.sqrt(len(q_H))
        m_new = max(m, x.max())
        p = np.exp(x - m_new)
        l = np.exp(m - m_new) * l + p.sum()
        o = np.exp(m - m_new) * o + p @ V_SH[start:start + block]
        m = m_new
    return o / l, m + np.log(l)


S_demo, H_demo = 300, 16
q_H = rng.normal(size=H_demo)
K_SH, V_SH = rng.normal(size=(S_demo, H_demo)), rng.normal(size=(S_demo, H_demo))
scores = K_SH @ q_H / np.sqrt(H_demo)
p_full = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
for block in (1, 7, 64, 300):
    o_blk, lse_blk = attention_row_by_blocks(q_H, K_SH, V_SH, block)
    np.testing.assert_allclose(o_blk, p_full @ V_SH, rtol=1e-10)
    np.testing.assert_allclose(lse_blk, np.log(np.exp(scores).sum()), rtol=1e-12)
print("block by block equals the full softmax, for every block size")

# %% [markdown]
# FlashAttention is this loop, with one more level of tiling: a *block of query rows* is
# processed together, so each tile of keys and values read from HBM serves all of them. The
# library's version takes query tiles of `block_q` rows and KV tiles of `block_k` keys, handles
# grouped-query heads (the $G$ query heads of one KV head share a tile of $K$ and $V$), and
# builds each tile's piece of the causal, padding and window mask from positions instead of
# reading a $T \times S$ mask. The update step, the final division by the running sum, and
# the kernel:

# %% [markdown] tags=["lang-zh"]
# FlashAttention 就是这个循环，再多一层分块：一*块查询行*一起处理，这样从 HBM 读入的每个键分块和值
# 分块都能服务于这些行。库中的版本取 `block_q` 行的查询分块和 `block_k` 个键的 KV 分块，处理分组
# 查询的头（同一个 KV 头的 $G$ 个查询头共享同一个 $K$、$V$ 分块），并根据位置为每个分块构造它那一
# 部分的因果、填充和窗口掩码，而不是去读取一个 $T \times S$ 的掩码。下面是更新步骤、最后除以累计和
# 的那一步，以及内核本身：

# %%
show_source(flash.online_softmax_step, flash.online_softmax_result, flash.flash_attention)

# %% [markdown]
# Two details are worth pointing at. The loop over KV tiles runs from `lo` to `hi` — only the
# tiles some query in the block can see — so a causal prefill visits about half of them. And
# the function returns the log-sum-exp beside the output: with it, attention over two sets of
# keys can be merged exactly (chapter 1's decode step already does this; chapter 7 builds on it).
# Against the reference, on a ragged batch with grouped-query heads and a sliding window:

# %% [markdown] tags=["lang-zh"]
# 有两个细节值得一提。遍历 KV 分块的循环从 `lo` 跑到 `hi`——只包括这一块中某个查询能看到的
# 分块——所以因果的预填充大约只访问其中一半。另外，函数在输出旁边还返回 LSE：有了它，对两组
# 键的注意力就能精确地合并（第 1 章的解码步骤已经这样做了；第 7 章以此为基础）。下面在一个带分组
# 查询头和滑动窗口的参差批次上，与参考实现对照：

# %%
B, T, N, K, H = 3, 200, 8, 2, 32
keys = jax.random.split(jax.random.key(0), 3)
q = jax.random.normal(keys[0], (B, T, N, H))
k, v = (jax.random.normal(kk, (B, K, T, H)) for kk in keys[1:])
lengths = jnp.array([200, 137, 9])
q_pos = jnp.broadcast_to(jnp.arange(T), (B, T))
visible = jnp.arange(T)[None, :] < lengths[:, None]          # padding rows are ignored
blockwise_jit = jax.jit(flash.flash_attention, static_argnames=("window", "block_q", "block_k"))
reference_jit = jax.jit(reference_at_positions, static_argnames=("window",))
for window in (64,):
    out, lse = blockwise_jit(q, k, v, q_pos, lengths, window, block_q=32, block_k=48)
    ref_out, ref_lse = reference_jit(q, k, v, q_pos, lengths, window)
    err = float(jnp.max(jnp.where(visible[..., None, None], jnp.abs(out - ref_out), 0)))
    err_lse = float(jnp.max(jnp.where(visible[..., None], jnp.abs(lse - ref_lse), 0)))
    assert err < 1e-5 and err_lse < 1e-5, (err, err_lse)
    print(f"window={window}: largest difference from the reference {err:.1e} (output), "
          f"{err_lse:.1e} (log-sum-exp)")

# %% [markdown]
# ## What tiling saves
#
# Each query tile of $b_q$ rows reads $Q$ once, then every tile of $K$ and $V$ once, and
# writes its output once. Nothing of size $T \times S$ touches HBM:
#
# $$\text{bytes} \approx b\,\Big(2TH + \frac{T}{b_q}\cdot 2SH\Big).$$
#
# The $K$, $V$ term is re-read $T/b_q$ times, so bigger query tiles help, up to what fits in
# an SM's SRAM: a tile of {glue:text}`ch6_bq` queries plus tiles of {glue:text}`ch6_bk` keys
# and values, with $H = 128$ in bfloat16, take {glue:text}`ch6_tile_kb`. For a prefill the
# ratio of the two counts tends to $4n^2 / (2n^2H/b_q) = 2b_q/H$: a constant factor, set by how
# many query rows share each load of $K$ and $V$. {cite:t}`dao2022flashattention` show that no
# exact algorithm does better than $\Theta(n^2H^2/M)$ HBM accesses for SRAM of size $M$, which
# tiling achieves; on a real GPU the concurrently running query tiles of one head also share
# $K$ and $V$ through the L2 cache, so the measured traffic is lower than this count.

# %% [markdown] tags=["lang-zh"]
# ## 分块省下了什么
#
# 每个 $b_q$ 行的查询分块读一次 $Q$，再把 $K$ 和 $V$ 的每个分块各读一次，最后写一次输出。没有任何
# $T \times S$ 大小的东西经过 HBM：
#
# $$\text{字节数} \approx b\,\Big(2TH + \frac{T}{b_q}\cdot 2SH\Big).$$
#
# $K$、$V$ 这一项要重读 $T/b_q$ 次，所以查询分块越大越好，上限是一个 SM 的 SRAM 放得下多少：
# $H = 128$、bfloat16 时，一个 {glue:text}`ch6_bq` 个查询的分块，加上 {glue:text}`ch6_bk` 个键和
# 值的分块，共占 {glue:text}`ch6_tile_kb`。对预填充而言，两种计数之比趋近
# $4n^2 / (2n^2H/b_q) = 2b_q/H$：一个常数因子，由多少个查询行共享每一次载入的 $K$ 和 $V$ 决定。
# {cite:t}`dao2022flashattention` 证明，对大小为 $M$ 的 SRAM，没有哪个精确算法的 HBM 访问量能低于
# $\Theta(n^2H^2/M)$，而分块正好达到这个下界；在真实的 GPU 上，同一个头中并发运行的查询分块还会
# 通过 L2 缓存共享 $K$ 和 $V$，所以实测的流量比这个计数更低。

# %%
def flash_io_bytes(T, S, H, b, block_q):
    return b * (2 * T * H + (T / block_q) * 2 * S * H)


block_q_gpu, block_k_gpu = 128, 64
tile_bytes = b16 * (block_q_gpu * H_gpu + 2 * block_k_gpu * H_gpu)
assert tile_bytes <= chip_data["A100 40GB"]["sram_per_sm_bytes"]
std_b = np.array([standard_io_bytes(n, n, H_gpu, b16) for n in ns])
fl_b = np.array([flash_io_bytes(n, n, H_gpu, b16, block_q_gpu) for n in ns])
assert (fl_b < std_b).all()
assert abs((std_b / fl_b)[-1] / (2 * block_q_gpu / H_gpu) - 1) < 0.05   # → 2·b_q / H

# %% tags=["hide-input"]
glue("ch6_tile_kb", fmt_bytes(tile_bytes, 0))
glue("ch6_bq", str(block_q_gpu)); glue("ch6_bk", str(block_k_gpu))
glue("ch6_io_saving", fmt_ratio(std_b[ns.index(n_ex)] / fl_b[ns.index(n_ex)]))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(ns, std_b, "o-", label="standard (writes and reads the n × n matrices)")
ax.loglog(ns, fl_b, "s-", label=f"FlashAttention, {block_q_gpu}-row query tiles")
ax.set_xlabel("sequence length n (T = S)")
ax.set_ylabel("HBM bytes per head (bfloat16, H = 128)")
ax.set_title("Attention's memory traffic, by the count above")
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch6_traffic_figure", fig, zh=dict(
    title="注意力的内存流量（按上面的计数）", xlabel="序列长度 n（T = S）",
    ylabel="每个头的 HBM 字节数（bfloat16，H = 128）",
    legend=["标准算法（写出并读回 n × n 矩阵）", f"FlashAttention，{block_q_gpu} 行的查询分块"]))

# %% [markdown]
# ```{glue:figure} ch6_traffic_figure
# ```
#
# At $n =$ {glue:text}`ch6_n_ex` FlashAttention moves {glue:text}`ch6_io_saving` fewer bytes
# than the standard algorithm by this count, while doing the same matrix products (plus the
# cheap rescaling) — and more importantly the bytes it does move are the inputs, read in large
# contiguous tiles, not a quadratic intermediate. Its memory *footprint* changes even more: the
# standard algorithm must hold an $n \times n$ matrix somewhere, FlashAttention only tiles.
#
# ## Measured on this device
#
# On a CPU there is no programmer-visible SRAM, but the same two effects are there: the
# reference writes and rereads $n^2$ scores through the caches to main memory, and it needs
# memory for them. We read the memory each compiled program needs from XLA's buffer
# assignment (exact, and free: nothing has to run), for one head of width 64 in float32, and
# time both on {glue:text}`ch6_device`: after a warm-up the two programs take turns for
# {glue:text}`ch6_rounds` runs each, and each one's time is its median run.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch6_traffic_figure
# ```
#
# 在 $n =$ {glue:text}`ch6_n_ex` 时，按这个计数，标准算法搬运的字节数是 FlashAttention 的
# {glue:text}`ch6_io_saving`，而两者做的矩阵乘积相同（FlashAttention 另加一点廉价的重新缩放）——
# 更重要的是，FlashAttention 确实要搬运的那些字节是输入，以连续的大分块读入，而不是一个平方级的
# 中间结果。它的内存*占用*变化更大：标准算法必须在某处存下一个 $n \times n$ 的矩阵，FlashAttention
# 只需要分块。
#
# ## 在这台设备上测量
#
# CPU 上没有程序员可见的 SRAM，但同样的两种效应依然存在：参考实现要把 $n^2$ 个分数经由各级缓存
# 写到主内存再读回来，而且需要内存来存放它们。我们从 XLA 的缓冲区分配中读出每个编译后程序所需的
# 内存（精确，而且不花代价：什么都不用运行），对象是一个宽度为 64、float32 的头；并在
# {glue:text}`ch6_device` 上为两者计时：预热之后，两个程序轮流各运行 {glue:text}`ch6_rounds` 次，
# 每个程序的时间取其运行时间的中位数。

# %%
blockwise = partial(flash.flash_attention, block_q=512, block_k=512)
mem_n = [1024, 2048, 4096, 8192, 16384]
mem_ref, mem_flash = {}, {}
for n in mem_n:
    shapes = kernel_bench.attention_inputs(1, n, n, 1, 1, 64, "float32", abstract=True)
    mem_ref[n] = compiled.program_memory(reference_at_positions, *shapes)
    mem_flash[n] = compiled.program_memory(blockwise, *shapes)
for n in mem_n:
    square = n * n * 4
    assert mem_ref[n].temp_bytes >= square                 # the reference holds n² scores ...
    assert mem_ref[n].largest_array_bytes >= square
    # ... the blockwise program's largest array is a tile of scores or its own output.
    assert mem_flash[n].largest_array_bytes <= max(512 * 512 * 4, n * 64 * 4) < square
    print(f"n={n:6d}: scratch memory {fmt_bytes(mem_ref[n].temp_bytes):>9s} (reference)  "
          f"{fmt_bytes(mem_flash[n].temp_bytes):>9s} (blockwise); n²·4 = {fmt_bytes(square)}")
# The blockwise program's memory grows linearly in n (its output and tiles), not quadratically.
assert mem_flash[16384].temp_bytes < 4 * mem_flash[4096].temp_bytes

# %% tags=["hide-input"]
glue("ch6_device", DEVICE)
glue("ch6_mem_ref_16k", fmt_bytes(mem_ref[16384].temp_bytes))
glue("ch6_mem_flash_16k", fmt_bytes(mem_flash[16384].temp_bytes))
glue("ch6_square_16k", fmt_bytes(16384 ** 2 * 4))

# %%
# Where both run, the two programs take turns, so that whatever else runs on the machine slows
# both alike; each one's time is its median run. Beyond 4,096 only the blockwise one runs.
time_ref, time_flash, TIMED_RUNS = {}, {}, 5
glue("ch6_rounds", str(TIMED_RUNS))
for n in [512, 1024, 2048, 4096, 8192, 16384]:
    args = kernel_bench.attention_inputs(1, n, n, 1, 1, 64)
    fns = [partial(jax.jit(blockwise), *args)]
    if n <= 4096:
        fns.append(partial(jax.jit(reference_at_positions), *args))
    runs = timing.time_alternating(fns, rounds=TIMED_RUNS, warmup=1)
    time_flash[n] = runs[0]
    if n <= 4096:
        time_ref[n] = runs[1]
for n in time_flash:
    r = fmt_seconds(time_ref[n].median_s) if n in time_ref else "(not run)"
    print(f"n={n:6d}: blockwise {fmt_seconds(time_flash[n].median_s):>9s}   reference {r}")

# The 16k result, checked against the reference on its last 128 queries (a 128 × 16k problem).
q16, k16, v16, pos16, len16 = kernel_bench.attention_inputs(1, 16384, 16384, 1, 1, 64)
out16, lse16 = jax.jit(blockwise)(q16, k16, v16, pos16, len16)
tail_out, tail_lse = jax.jit(reference_at_positions)(q16[:, -128:], k16, v16, pos16[:, -128:],
                                                     len16)
assert jnp.allclose(out16[:, -128:], tail_out, atol=1e-5)
assert jnp.allclose(lse16[:, -128:], tail_lse, atol=1e-4)

# %% tags=["hide-input"]
expect_measured(time_flash[4096].median_s < time_ref[4096].median_s,
                "at 4,096 tokens the blockwise program's median run is faster than the "
                "reference's", expected="blockwise faster than the reference (medians)",
                measured=f"{fmt_seconds(time_flash[4096].median_s)} against "
                         f"{fmt_seconds(time_ref[4096].median_s)}")
glue("ch6_time_flash_16k", fmt_seconds(time_flash[16384].median_s))
glue("ch6_speedup_4k", fmt_ratio(time_ref[4096].median_s / time_flash[4096].median_s))
glue("ch6_n_max", f"{max(mem_n):,}"); glue("ch6_n_ref_max", f"{max(time_ref):,}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
ax1.loglog(mem_n, [mem_ref[n].temp_bytes for n in mem_n], "o-", label="reference")
ax1.loglog(mem_n, [mem_flash[n].temp_bytes for n in mem_n], "s-", label="blockwise")
ax1.loglog(mem_n, [n * n * 4 for n in mem_n], "k:", label="n² float32 values")
ax1.set_xlabel("sequence length n"); ax1.set_ylabel("scratch memory of the program (bytes)")
ax1.set_title("XLA's memory analysis (exact)", fontsize=9)
ax1.legend(fontsize=8); ax1.grid(True, which="both", alpha=0.3)
ax2.loglog(list(time_ref), [t.median_s for t in time_ref.values()], "o-", label="reference")
ax2.loglog(list(time_flash), [t.median_s for t in time_flash.values()], "s-", label="blockwise")
ax2.set_xlabel("sequence length n"); ax2.set_ylabel("time (s)")
ax2.set_title(f"Measured on {DEVICE}", fontsize=9)
ax2.legend(fontsize=8); ax2.grid(True, which="both", alpha=0.3)
plt.tight_layout()
glue_figure("ch6_measured_figure", fig, zh=[
    dict(title="XLA 的内存分析（精确）", xlabel="序列长度 n", ylabel="程序的临时内存（字节）",
         legend=["参考实现", "逐块实现", "n² 个 float32 值"]),
    dict(title=f"在 {DEVICE} 上测得", xlabel="序列长度 n", ylabel="时间（s）",
         legend=["参考实现", "逐块实现"])])

# %% [markdown]
# ```{glue:figure} ch6_measured_figure
# ```
#
# At $n =$ {glue:text}`ch6_n_max` the reference program would need {glue:text}`ch6_mem_ref_16k` of scratch
# memory — more than the {glue:text}`ch6_square_16k` of one $n \times n$ float32 matrix, because
# it keeps both scores and probabilities — while the blockwise program needs
# {glue:text}`ch6_mem_flash_16k`, and runs in {glue:text}`ch6_time_flash_16k` on
# {glue:text}`ch6_device` (its last queries checked against the reference). On a CPU the
# blockwise version is also faster, {glue:text}`ch6_speedup_4k` at $n =$ {glue:text}`ch6_n_ref_max`: it skips the
# key tiles that the causal mask hides and never streams the $n^2$ matrices through memory.
#
# ## FlashAttention-2
#
# FlashAttention-2 made the kernel considerably faster again with three changes, all about
# keeping the tensor cores busy.
#
# **Fewer non-matmul FLOPs.** Tensor cores do only matrix products. Everything else — the
# exponentials, the rescaling, the divisions — runs on the ordinary float32 units, which are
# much slower:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch6_measured_figure
# ```
#
# 在 $n =$ {glue:text}`ch6_n_max` 时，参考程序需要 {glue:text}`ch6_mem_ref_16k` 的临时内存——比
# 一个 $n \times n$ float32 矩阵的 {glue:text}`ch6_square_16k` 还多，因为它同时存着分数和概率——
# 而逐块程序只需要 {glue:text}`ch6_mem_flash_16k`，在 {glue:text}`ch6_device` 上耗时
# {glue:text}`ch6_time_flash_16k`（它最后的那些查询已与参考实现核对过）。在 CPU 上逐块版本也更快，
# 在 $n =$ {glue:text}`ch6_n_ref_max` 时快 {glue:text}`ch6_speedup_4k`：它跳过被因果掩码遮住的键
# 分块，也从不让 $n^2$ 的矩阵流经内存。
#
# ## FlashAttention-2
#
# FlashAttention-2 通过三处改动让内核又快了不少，三处都是为了让张量核心（tensor core）保持忙碌。
#
# **更少的非矩阵乘法 FLOPs。** 张量核心只做矩阵乘积。其他一切——求指数、重新缩放、除法——都在普通
# 的 float32 运算单元上执行，而它们慢得多：

# %%
a100_fp32 = chip_data["A100 40GB"]["fp32_flops_per_s"]
nonmatmul_cost = a100.bf16_flops_per_s / a100_fp32
assert nonmatmul_cost > 10


def fa1_step(o, m, l, s_RC, v_CH):
    """FlashAttention-1's update: the output is kept normalised after every KV tile."""
    m_new = jnp.maximum(m, s_RC.max(-1))
    p = jnp.exp(s_RC - m_new[:, None])
    l_new = jnp.exp(m - m_new) * l + p.sum(-1)
    o_new = ((l * jnp.exp(m - m_new))[:, None] * o + p @ v_CH) / l_new[:, None]
    return o_new, m_new, l_new


def fa2_step(o, m, l, s_RC, v_CH):
    """FlashAttention-2's update (the library's): unnormalised, divided once at the end."""
    return flash.online_softmax_step((o, m, l), s_RC, v_CH, "RC,CH->RH")


R, C, Hs = 128, 128, 64
tile = [jax.ShapeDtypeStruct(s, jnp.float32) for s in [(R, Hs), (R,), (R,), (R, C), (C, Hs)]]
matmul = 2 * R * C * Hs
extra = {name: compiled.compiled_cost(jax.jit(f), *tile)["flops"] - matmul
         for name, f in [("FA1", fa1_step), ("FA2", fa2_step)]}
assert extra["FA2"] < extra["FA1"]

# %% tags=["hide-input"]
glue("ch6_nonmatmul_cost", fmt_ratio(nonmatmul_cost, 0))
glue("ch6_a100_fp32", fmt_rate(a100_fp32, "FLOP/s"))
glue("ch6_a100_bf16", fmt_rate(a100.bf16_flops_per_s, "FLOP/s"))
print({k: fmt_flops(v) for k, v in extra.items()}, "non-matmul FLOPs per tile (XLA's count)")
glue("ch6_fa1_extra", fmt_count(extra["FA1"])); glue("ch6_fa2_extra", fmt_count(extra["FA2"]))
glue("ch6_R", str(R))

# %% [markdown]
# On an A100 that is {glue:text}`ch6_a100_bf16` for bfloat16 matrix products against
# {glue:text}`ch6_a100_fp32` for everything else: a non-matmul FLOP costs
# {glue:text}`ch6_nonmatmul_cost` as much as a matmul FLOP. FlashAttention-1 kept the output
# normalised after every KV tile (multiply by the old sum, divide by the new one);
# FlashAttention-2 keeps it unnormalised and divides once at the end, and stores only the
# log-sum-exp rather than both $m$ and $\ell$ for the backward pass. Compiled for one
# tile of {glue:text}`ch6_R` × {glue:text}`ch6_R` scores, XLA counts {glue:text}`ch6_fa1_extra` non-matmul FLOPs for the first
# update and {glue:text}`ch6_fa2_extra` for the second.
#
# FlashAttention-1 also ordered its loops the other way round: the *outer* loop ran over KV
# tiles and the inner one over query tiles, so every query tile's $o$, $m$, $\ell$ went back to
# HBM after each KV tile and were read again for the next. FlashAttention-2 puts the query tile
# outside; its accumulators stay on chip from the first KV tile to the last.
#
# **Parallelism over the sequence.** A GPU kernel is a grid of independent thread blocks, each
# running on one SM. FlashAttention-1 launched one per (sequence, head): enough when batch ×
# heads is large, but a long prompt usually comes with a small batch. FlashAttention-2 adds the
# query tiles to the grid — they are independent, since each owns its rows of the output.

# %% [markdown] tags=["lang-zh"]
# 在 A100 上，bfloat16 矩阵乘积的速度是 {glue:text}`ch6_a100_bf16`，其他一切只有
# {glue:text}`ch6_a100_fp32`：一个非矩阵乘法 FLOP 的代价是一个矩阵乘法 FLOP 的
# {glue:text}`ch6_nonmatmul_cost`。FlashAttention-1 在每个 KV 分块之后都让输出保持归一化（乘以旧的
# 和，再除以新的和）；FlashAttention-2 让它保持未归一化，只在最后除一次，并且为反向传播只保存
# LSE，而不是同时保存 $m$ 和 $\ell$。为一个 {glue:text}`ch6_R` × {glue:text}`ch6_R` 的分数分块
# 编译后，XLA 统计出第一种更新的非矩阵乘法 FLOPs 共 {glue:text}`ch6_fa1_extra`，第二种共
# {glue:text}`ch6_fa2_extra`。
#
# FlashAttention-1 的循环顺序也正好相反：*外层*循环遍历 KV 分块，内层遍历查询分块，所以每处理完一个
# KV 分块，每个查询分块的 $o$、$m$、$\ell$ 都要写回 HBM，处理下一个 KV 分块时再读出来。
# FlashAttention-2 把查询分块放在外层；它的累加量从第一个 KV 分块到最后一个都留在片上。
#
# **沿序列并行。** GPU 内核是由相互独立的线程块组成的网格（grid），每个线程块在一个 SM 上运行。
# FlashAttention-1 为每个（序列，头）启动一个线程块：当批次 × 头数很大时这就够了，但长提示词通常伴随
# 着小批次。FlashAttention-2 把查询分块也加进网格——它们相互独立，因为每个分块拥有输出中属于自己的
# 那些行。

# %%
llama_heads, long_T = 32, 8192
fa1_blocks = 1 * llama_heads
fa2_blocks = 1 * llama_heads * (long_T // block_q_gpu)
busy_fa1, busy_fa2 = min(1, fa1_blocks / a100_sms), min(1, fa2_blocks / a100_sms)
assert busy_fa1 < 0.5 and busy_fa2 == 1

# The library's Pallas kernel uses FlashAttention-2's grid. On a CPU, Pallas interprets it.
Bp, Tp, Np, Kp, Hp = 2, 40, 4, 2, 16
small = kernel_bench.attention_inputs(Bp, Tp, Tp, Np, Kp, Hp)
p_out, p_lse = pallas_flash_attention(*small, block_q=16, block_k=16)
r_out, r_lse = jax.jit(reference_at_positions)(*small)
assert jnp.allclose(p_out, r_out, atol=1e-5) and jnp.allclose(p_lse, r_lse, atol=1e-5)
grid = (Bp, Np, -(-Tp // 16))

# %% tags=["hide-input"]
glue("ch6_fa1_blocks", str(fa1_blocks)); glue("ch6_fa2_blocks", f"{fa2_blocks:,}")
glue("ch6_busy_fa1", fmt_percent(busy_fa1))
glue("ch6_pallas_grid", " × ".join(map(str, grid)))
print(f"Pallas kernel (grid {grid}, interpreted: {jax.default_backend() == 'cpu'}) "
      "equals the reference")

# %% [markdown]
# A prefill of {glue:text}`ch6_n_ex` tokens of a 32-head model at batch 1 gives
# FlashAttention-1 {glue:text}`ch6_fa1_blocks` thread blocks for the A100's
# {glue:text}`ch6_a100_sms` SMs — {glue:text}`ch6_busy_fa1` of the chip at most — and
# FlashAttention-2 {glue:text}`ch6_fa2_blocks`. The library's Pallas kernel
# (`inferbook.kernels.pallas`) is written with that grid, one program per (batch row, query
# head, query tile) — {glue:text}`ch6_pallas_grid` programs for the small problem above, which
# Pallas' interpreter ran on this CPU and which matches the reference. On a GPU the same code
# is compiled by Triton.
#
# **Work partitioning between warps.** Inside a thread block the work is split over warps,
# groups of threads that execute in lockstep. FlashAttention-1 split the *keys*: each warp
# held a slice of the $K$ and $V$ tile, computed its share of every query row's scores and of
# $PV$, and then the warps had to exchange their partial outputs through shared memory and
# add them up — a "split-K" scheme. FlashAttention-2 splits the *queries*: each warp owns a
# slice of the rows, sees all of $K$ and $V$, and finishes its rows alone.

# %% [markdown] tags=["lang-zh"]
# 对一个 32 头的模型，以只有一个序列的批次预填充 {glue:text}`ch6_n_ex` 个词元时，FlashAttention-1
# 给 A100 的 {glue:text}`ch6_a100_sms` 个 SM 只提供 {glue:text}`ch6_fa1_blocks` 个线程块——最多只
# 用上芯片的 {glue:text}`ch6_busy_fa1`——而 FlashAttention-2 提供 {glue:text}`ch6_fa2_blocks` 个。
# 库中的 Pallas 内核（`inferbook.kernels.pallas`）就是按这种网格写的，每个（批次中的行，查询头，
# 查询分块）一个程序——对上面那个小问题是 {glue:text}`ch6_pallas_grid` 个程序；它们由 Pallas 的
# 解释器在这台 CPU 上运行，结果与参考实现一致。在 GPU 上，同样的代码由 Triton 编译。
#
# **线程束之间的工作划分。** 在一个线程块内部，工作分给若干个线程束（warp），即步调一致地执行的一组
# 线程。FlashAttention-1 切分的是*键*：每个线程束拿着 $K$、$V$ 分块的一片，计算每个查询行的分数和
# $PV$ 中属于自己的那一份，然后各线程束必须通过共享内存交换部分输出，再把它们加起来——这是一种
# “split-K”方案。FlashAttention-2 切分的是*查询*：每个线程束拥有若干行，能看到全部的 $K$ 和 $V$，
# 独自算完自己的行。

# %%
warps = 4
exchange_fa1 = (warps - 1) * block_q_gpu * H_gpu * 4     # float32 partial outputs to combine
per_head = exchange_fa1 * (long_T // block_q_gpu) * (long_T // block_k_gpu)
assert per_head > standard_io_bytes(long_T, long_T, H_gpu, b16) / 100

# %% tags=["hide-input"]
glue("ch6_exchange_tile", fmt_bytes(exchange_fa1, 0)); glue("ch6_warps", str(warps))
glue("ch6_exchange_head", fmt_bytes(per_head))

# %% [markdown]
# With {glue:text}`ch6_warps` warps and an output tile of {glue:text}`ch6_bq` rows, split-K writes and reads back
# {glue:text}`ch6_exchange_tile` of partial outputs in shared memory for every KV tile —
# {glue:text}`ch6_exchange_head` for one head of an {glue:text}`ch6_n_ex`-token prefill, plus
# a synchronisation of the warps each time. Split-Q exchanges nothing.
#
# ## Summary
#
# - Standard attention writes and reads $T \times S$ matrices; its arithmetic intensity is
#   about $H/b$ FLOPs per byte, below any accelerator's critical intensity. It is bound by
#   memory traffic and needs $O(TS)$ memory.
# - The online softmax keeps three numbers per query row (running maximum, sum, unnormalised
#   output) and rescales them when the maximum grows, so keys can be visited in tiles; the
#   result, and its log-sum-exp, are exact.
# - FlashAttention tiles queries and keys so each tile is read once into fast memory: HBM
#   traffic falls from $O(n^2)$ to $O(n^2H/b_q)$ and memory from $O(n^2)$ to $O(n)$. On this
#   device the longest prefill measured needs megabytes instead of gigabytes.
# - FlashAttention-2 does fewer non-matmul FLOPs (one division at the end), parallelises over
#   query tiles as well as batch and heads, and splits queries rather than keys across warps.
# - At decode time there is one query per sequence, and this grid runs dry: chapter 7.

# %% [markdown] tags=["lang-zh"]
# 用 {glue:text}`ch6_warps` 个线程束、{glue:text}`ch6_bq` 行的输出分块时，split-K 每处理一个 KV
# 分块，都要在共享内存中写入再读回 {glue:text}`ch6_exchange_tile` 的部分输出——对一个
# {glue:text}`ch6_n_ex` 个词元的预填充，一个头就是 {glue:text}`ch6_exchange_head`，而且每次还要让
# 各线程束同步一次。split-Q 什么都不用交换。
#
# ## 小结
#
# - 标准注意力要写出并读回 $T \times S$ 的矩阵；它的算术强度约为每字节 $H/b$ FLOPs，低于任何加速器
#   的临界强度。它受限于内存流量，并需要 $O(TS)$ 的内存。
# - 在线 softmax 为每个查询行保留三个数（累计最大值、累计和、未归一化的输出），最大值变大时就重新
#   缩放它们，于是键可以分块遍历；结果及其 LSE 都是精确的。
# - FlashAttention 对查询和键分块，让每个分块只被读进快速内存一次：HBM 流量从 $O(n^2)$ 降到
#   $O(n^2H/b_q)$，内存从 $O(n^2)$ 降到 $O(n)$。在这台设备上，实测的最长预填充所需的内存以 MB
#   计，而不是以 GB 计。
# - FlashAttention-2 做更少的非矩阵乘法 FLOPs（最后只除一次），除了批次和头之外还在查询分块上并行，
#   并且在线程束之间切分查询而不是键。
# - 到了解码阶段，每个序列只有一个查询，这种网格就分不出足够的活了：见第 7 章。
