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
# # Exercises: inference on many chips
#
# These exercises go with [chapter 8](../chapters/08_sharding_prefill.py) (sharding prefill),
# [chapter 9](../chapters/09_sharding_generation.py) (sharding generation and the KV cache)
# and [chapter 10](../chapters/10_weight_stationary_2d.py) (2D weight-stationary sharding).
# They follow the distributed-inference sections of the scaling book {cite:p}`austin2025scaling`
# and its worked problem 7, with every constant read from the library's hardware table and
# model presets. The last exercise runs the 2D algorithm for real, with `shard_map`, on the
# eight emulated devices `inferbook.setup()` provides.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted*. The notebook runs from top to bottom
# at any stage, and `summary` at the end adds up your points.

# %% [markdown] tags=["lang-zh"]
# # 练习：多芯片推理
#
# 这些练习配合[第 8 章](../chapters/08_sharding_prefill.py)（预填充的分片）、
# [第 9 章](../chapters/09_sharding_generation.py)（生成与 KV 缓存的分片）和
# [第 10 章](../chapters/10_weight_stationary_2d.py)（二维权重驻留分片）。它们沿着《How to Scale Your Model》
# {cite:p}`austin2025scaling` 中分布式推理的各节及其例题 7 展开，每一个常数都从库的硬件表和模型预设中
# 读出。最后一个练习用 `shard_map`，在 `inferbook.setup()` 提供的八个模拟设备上真正运行二维算法。
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行它
# 后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示）或*未作答*。无论做到哪一步，这个笔记本都能
# 从头运行到尾，最后的 `summary` 会把你的得分加起来。

# %%
import inferbook

info = inferbook.setup()

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.parallel.mesh import named_mesh, shard_map
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch08")
summary("ch09")
summary("ch10")

# %% [markdown]
# ## Part 1: sharding prefill
#
# In the 1D weight-stationary layout {cite:p}`shoeybi2019megatron` every one of $M$ devices
# holds a slice of the heads of $W_Q$, $W_K$, $W_V$, $W_O$ and a slice of the MLP's hidden
# width $F$. The activations $[B, T, D]$ are replicated; each device computes its share of the
# attention block's output and of the MLP block's output, and those shares are *partial sums*
# of the full $[B, T, D]$ result, which one AllReduce over the $M$ devices completes.
#
# **1.1** Prefill one prompt of $T = 2048$ tokens of Llama-2-7B in bfloat16 on $M = 8$
# devices. How many bytes do the arrays that are AllReduced in *one layer* hold (add up the
# sizes of the arrays, whatever algorithm moves them)?

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：预填充的分片
#
# 在一维权重驻留布局 {cite:p}`shoeybi2019megatron` 中，$M$ 个设备中的每一个都持有 $W_Q$、$W_K$、$W_V$、
# $W_O$ 的一部分头，以及 MLP 隐藏宽度 $F$ 的一片。激活值 $[B, T, D]$ 在每个设备上都有一份；每个设备计算
# 它在注意力块输出和 MLP 块输出中的那一份，这些份额都是完整 $[B, T, D]$ 结果的*部分和*，由一次在 $M$
# 个设备上的全规约补全。
#
# **1.1** 在 $M = 8$ 个设备上，以 bfloat16 对 Llama-2-7B 预填充一段 $T = 2048$ 个词元（token）的提示词。在*一层*
# 中被全规约的那些数组共有多少字节（把这些数组的大小加起来即可，不管用什么算法搬运它们）？

# %%
llama = get_preset("llama-2-7b")
T, M = 2048, 8
print(f"Llama-2-7B: L = {llama.L}, D = {llama.D}, F = {llama.F}")

# %%
# BEGIN SOLUTION
allreduce_bytes = 2 * (1 * T * llama.D * 2)       # after attention and after the MLP
# END SOLUTION

# %%
check("ch08.allreduce_bytes_per_layer", allreduce_bytes)

# %% [markdown]
# **1.2** On $M = 2$ devices instead, would those AllReduces be exactly as large? Answer
# `True` or `False`.

# %% [markdown] tags=["lang-zh"]
# **1.2** 如果换成 $M = 2$ 个设备，这些全规约的大小会完全一样吗？回答 `True` 或 `False`。

# %%
# BEGIN SOLUTION
same_on_two = True
# END SOLUTION

# %%
check("ch08.allreduce_same_on_two", same_on_two)

# %% [markdown]
# So adding devices divides the arithmetic but not the communication, and at some degree of
# model parallelism the AllReduce takes longer than the matrix products it follows. For an MLP
# block, per token, each device does $2 \cdot D \cdot F / M$ FLOPs per weight matrix at $C$
# FLOP/s, and the AllReduce of $D$ bfloat16 activations takes $2 \cdot 2D / W_\text{ici}$,
# where $W_\text{ici}$ is the bandwidth of one axis of the interconnect — a ring that sends both
# ways at once, so twice one link's one-way bandwidth. The ratio
# $\alpha = C / W_\text{ici}$ is the chip's *interconnect intensity*.
#
# **1.3** Compute $\alpha$ for a TPU v5e.

# %% [markdown] tags=["lang-zh"]
# 所以增加设备能分摊计算，却分摊不了通信，在某个模型并行度上，全规约会比它所跟随的矩阵乘积耗时更长。
# 对于一个 MLP 块，每个词元在每个权重矩阵上，每个设备做 $2 \cdot D \cdot F / M$ FLOPs，速度为 $C$
# FLOP/s；而对 $D$ 个 bfloat16 激活值的全规约耗时 $2 \cdot 2D / W_\text{ici}$，其中 $W_\text{ici}$ 是互连
# 一个轴的带宽——这个环同时向两个方向发送，所以等于一条链路的单向带宽乘以 2。比值 $\alpha = C / W_\text{ici}$
# 就是芯片的*互连强度*。
#
# **1.3** 计算 TPU v5e 的 $\alpha$。

# %%
v5e = get_chip("TPU v5e")
print(f"TPU v5e: bf16 {v5e.bf16_flops_per_s:.3g} FLOP/s; one link {v5e.link_bytes_per_s:.3g} B/s "
      "one way")

# %%
# BEGIN SOLUTION
W_ici = 2 * v5e.link_bytes_per_s
alpha = v5e.bf16_flops_per_s / W_ici
# END SOLUTION

# %%
check("ch08.alpha", alpha)

# %% [markdown]
# **1.4** With a plain two-matrix MLP the arithmetic and the AllReduce take equally long at
# $M^* = F / \alpha$. The scaling book's 18B model has a *gated* MLP (three matrices). Up to how
# many devices does its MLP block's arithmetic still hide the AllReduce on a TPU v5e?

# %% [markdown] tags=["lang-zh"]
# **1.4** 对于普通的两矩阵 MLP，计算与全规约在 $M^* = F / \alpha$ 时耗时相等。《How to Scale Your Model》的 18B 模型用
# 的是*门控* MLP（三个矩阵）。在 TPU v5e 上，直到多少个设备为止，它的 MLP 块的计算仍能掩盖住全规约？

# %%
big = get_preset("scaling-book-18b")
print(f"scaling-book-18b: D = {big.D}, F = {big.F}, MLP {big.mlp}")

# %%
# BEGIN SOLUTION
prefill_limit = 3 * big.F / (2 * alpha)
# END SOLUTION

# %%
check("ch08.prefill_parallel_limit", prefill_limit)

# %% [markdown]
# **1.5** Sequence parallelism splits a long prompt's positions over $Q$ devices instead. For
# attention each device needs every other device's keys and values: in *ring attention*
# {cite:p}`liu2023ring` the devices pass their key and value blocks around a ring, one hop per
# step, until every block has visited every device. Split Llama-2-7B's 2,048-token prompt over
# $Q = 4$ devices (no model parallelism). How many bytes of blocks does one device send in one
# layer (bfloat16)?

# %% [markdown] tags=["lang-zh"]
# **1.5** 序列并行则把一段长提示词的位置切分到 $Q$ 个设备上。做注意力时，每个设备都需要其他每个设备的键和
# 值：在*环形注意力* {cite:p}`liu2023ring` 中，设备沿着一个环传递各自的键块和值块，每步一跳，直到每个块
# 都到访过每个设备。把 Llama-2-7B 的 2,048 个词元的提示词切分到 $Q = 4$ 个设备上（不做模型并行）。一个设备
# 在一层中发送的块共有多少字节（bfloat16）？

# %%
Q = 4

# %%
# BEGIN SOLUTION
block = 1 * (T // Q) * llama.K * llama.H * 2     # one device's keys (or values)
ring_bytes = 2 * block * (Q - 1)
# END SOLUTION

# %%
check("ch08.ring_bytes_per_layer", ring_bytes)

# %% [markdown]
# ## Part 2: sharding generation
#
# A decode step does little arithmetic; its time is that of loading the weights from HBM.
# Splitting them over $Y$ chips divides that time by $Y$, while the AllReduce of the step's
# $B \cdot D$ activations stays as it is. For an MLP of two int8 matrices,
# $T_\text{HBM} = 2DF / (Y W_\text{hbm})$ and $T_\text{ICI} = 2BD / W_\text{ici}$.
#
# **2.1** First the ratio that decides it: $\beta = W_\text{hbm} / W_\text{ici}$ for a TPU
# v5e.

# %% [markdown] tags=["lang-zh"]
# ## 第二部分：生成的分片
#
# 解码步骤的计算很少；它的时间就是从 HBM 加载权重的时间。把权重切分到 $Y$ 个芯片上，这段时间就除以 $Y$，
# 而对这一步 $B \cdot D$ 个激活值的全规约保持不变。对于由两个 int8 矩阵组成的 MLP，
# $T_\text{HBM} = 2DF / (Y W_\text{hbm})$，$T_\text{ICI} = 2BD / W_\text{ici}$。
#
# **2.1** 先求起决定作用的比值：TPU v5e 的 $\beta = W_\text{hbm} / W_\text{ici}$。

# %%
# BEGIN SOLUTION
beta = v5e.hbm_bytes_per_s / (2 * v5e.link_bytes_per_s)
# END SOLUTION

# %%
check("ch09.beta", beta)

# %% [markdown]
# **2.2** Past how many chips $Y$ does the AllReduce take longer than loading the weights, for
# the 18B model decoding a batch of $B = 16$?

# %% [markdown] tags=["lang-zh"]
# **2.2** 对于解码一个 $B = 16$ 的批次的 18B 模型，芯片数 $Y$ 超过多少时，全规约会比加载权重耗时更长？

# %%
# BEGIN SOLUTION
y_limit = big.F / (16 * beta)
# END SOLUTION

# %%
check("ch09.model_parallel_limit", y_limit)

# %% [markdown]
# **2.3** The KV cache is split too, but only as far as there are KV heads: with more chips
# than KV heads, a layout split over heads alone would keep copies of the same head. The
# scaling book splits the heads over $Y$ chips (as far as $K$ allows) and the batch over the
# remaining $Z$, a cache of shape $[B_Z, K_Y, S, H]$ per layer for keys and the same for
# values. Llama-3-70B serves a batch of 32 sequences of 8,192 tokens on 16 chips, in
# bfloat16. How many bytes of cache does each chip hold?

# %% [markdown] tags=["lang-zh"]
# **2.3** KV 缓存也要切分，但最多只能切成 KV 头的个数那么多份：芯片比 KV 头多时，只按头切分的布局会让不同芯片
# 保存同一个头的副本。《How to Scale Your Model》把头切分到 $Y$ 个芯片上（在 $K$ 允许的范围内），把批次切分到其余 $Z$ 个
# 芯片上，于是每层中键的缓存形状为 $[B_Z, K_Y, S, H]$，值也一样。Llama-3-70B 在 16 个芯片上以 bfloat16
# 为一个由 32 个序列组成、每个序列 8,192 个词元的批次提供服务。每个芯片持有多少字节的缓存？

# %%
llama3 = get_preset("llama-3-70b")
print(f"Llama-3-70B: L = {llama3.L}, K = {llama3.K}, H = {llama3.H}")

# %%
# BEGIN SOLUTION
Y = min(llama3.K, 16)
Z = 16 // Y
kv_per_chip = 2 * llama3.L * (32 // Z) * 8192 * (llama3.K // Y) * llama3.H * 2
# END SOLUTION

# %%
check("ch09.kv_bytes_per_chip", kv_per_chip)

# %% [markdown]
# **2.4** Small collectives are not bandwidth-bound at all. In the scaling book's model
# (appendix C) each hop of a ring costs at least $t_\text{hop}$, and carries one shard — the
# buffer's bytes divided by the $n$ devices — over one link, in one direction. Below what size
# of buffer (the whole array's bytes) is a collective over $n = 8$ TPU v5e chips
# latency-bound?

# %% [markdown] tags=["lang-zh"]
# **2.4** 小的集合通信根本不受带宽限制。在《How to Scale Your Model》的模型中（附录 C），环上的每一跳至少花费
# $t_\text{hop}$，它沿一条链路、朝一个方向搬运一个分片——缓冲区的字节数除以 $n$ 个设备。缓冲区（整个数组
# 的字节数）小于多大时，在 $n = 8$ 个 TPU v5e 芯片上的集合通信是延迟受限的？

# %%
print(f"TPU v5e: t_hop = {v5e.hop_latency_s:g} s")

# %%
# BEGIN SOLUTION
latency_bytes = 8 * v5e.link_bytes_per_s * v5e.hop_latency_s
# END SOLUTION

# %%
check("ch09.latency_bound_bytes", latency_bytes)

# %% [markdown]
# **2.5** Is the decode AllReduce of $B = 16$ int8 activations of width $D = 8192$ over those
# eight chips latency-bound? Answer `True` or `False`, computed.

# %% [markdown] tags=["lang-zh"]
# **2.5** 在这八个芯片上，对 $B = 16$ 个宽度为 $D = 8192$ 的 int8 激活值做的解码全规约，是延迟受限的吗？
# 回答 `True` 或 `False`，要通过计算得出。

# %%
# BEGIN SOLUTION
example_latency_bound = 16 * 8192 * 1 < latency_bytes
# END SOLUTION

# %%
check("ch09.example_latency_bound", example_latency_bound)

# %% [markdown]
# ## Part 3: 2D weight-stationary
#
# In the 2D layout (the scaling book's appendix B, after {cite:t}`pope2023esti`) the weights
# are split over both their dimensions: $W_\text{in}[D_X, F_{YZ}]$ and
# $W_\text{out}[F_{YZ}, D_X]$ on a mesh of $n = X \cdot YZ$ chips, and the activations between
# blocks are split over $D$ on all of them. Its MLP block, counted as worked problem 7 does
# (bfloat16, $X$ on one axis of a 3D torus, $YZ$ on the other two), costs
#
# $$T_\text{2D} = \frac{2BD}{X\,W} + \frac{4BF}{YZ\,W}, \qquad
#   T_\text{1D} = \frac{4BD}{3W}.$$
#
# **3.1** With $F = 4D$ and $n = 256$ chips, which $X$ (a real number) makes $T_\text{2D}$
# least?

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：二维权重驻留
#
# 在二维布局中（《How to Scale Your Model》的附录 B，源自 {cite:t}`pope2023esti`），权重沿它们的两个维度切分：在
# $n = X \cdot YZ$ 个芯片组成的网格上为 $W_\text{in}[D_X, F_{YZ}]$ 和 $W_\text{out}[F_{YZ}, D_X]$，块与块
# 之间的激活值在所有芯片上按 $D$ 切分。按例题 7 的算法（bfloat16，$X$ 在三维环面的一个轴上，$YZ$ 在
# 另外两个轴上），它的 MLP 块代价为
#
# $$T_\text{2D} = \frac{2BD}{X\,W} + \frac{4BF}{YZ\,W}, \qquad
#   T_\text{1D} = \frac{4BD}{3W}.$$
#
# **3.1** 取 $F = 4D$、$n = 256$ 个芯片，哪个 $X$（一个实数）使 $T_\text{2D}$ 最小？

# %%
n_chips, D = 256, 8192
F = 4 * D

# %%
# BEGIN SOLUTION
best_x = math.sqrt(n_chips * D / (2 * F))
# END SOLUTION

# %%
check("ch10.optimal_x", best_x)

# %% [markdown]
# **3.2** At its best $X$, from how many chips on does the 2D layout move less than the 1D
# layout (still $F = 4D$)?

# %% [markdown] tags=["lang-zh"]
# **3.2** 取最优的 $X$，芯片数从多少开始，二维布局移动的数据比一维布局少（仍取 $F = 4D$）？

# %%
# BEGIN SOLUTION
# 2D at the best X: 2·sqrt(2D·4F/n) (per B/W); 1D: 4D/3. Equal at n = 32·D·F/(4D/3)².
crossover = 32 * D * F / (4 * D / 3) ** 2
# END SOLUTION

# %%
check("ch10.crossover_chips", crossover)

# %% [markdown]
# **3.3** How many times less time does the 2D block spend communicating than the 1D block at
# $n = 256$, with the best split into whole numbers of chips ($X$ dividing 256)?

# %% [markdown] tags=["lang-zh"]
# **3.3** 在 $n = 256$ 时，用整数个芯片的最优切分（$X$ 整除 256），一维块花在通信上的时间是二维块的多少倍？

# %%
# BEGIN SOLUTION
t2 = min(2 * D / x + 4 * F / (n_chips // x) for x in (1, 2, 4, 8, 16, 32, 64, 128, 256))
gain = (4 * D / 3) / t2
# END SOLUTION

# %%
check("ch10.gain_at_256", gain)

# %% [markdown]
# **3.4 The block itself.** Now write the 2D MLP block as a `shard_map` body for the mesh below:
# two rows of four devices, axis `x` playing $X$ and axis `y` playing $YZ$. The cell after
# yours wraps it with the shardings shown; inside the body every array is one device's block:
#
# | array | global shape | split | one device's block |
# |---|---|---|---|
# | `x_Bd` | $[B, D]$ | $D$ over `x` and `y` | $[B, D_{XY}]$ |
# | `w_in_df` | $[D, F]$ | $D$ over `x`, $F$ over `y` | $[D_X, F_Y]$ |
# | `w_out_fd` | $[F, D]$ | $F$ over `y`, $D$ over `x` | $[F_Y, D_X]$ |
# | result | $[B, D]$ | $D$ over `x` and `y` | $[B, D_{XY}]$ |
#
# The block computes $\mathrm{gelu}(x W_\text{in}) W_\text{out}$ (`jax.nn.gelu`). Follow the
# five steps of worked problem 7: AllGather the input over $YZ$; multiply; AllReduce the
# partial sums over $X$ (before the nonlinearity!); multiply; ReduceScatter over $YZ$. The
# collectives are `jax.lax.all_gather(a, axis_name, axis=..., tiled=True)`,
# `jax.lax.psum(a, axis_name)` and
# `jax.lax.psum_scatter(a, axis_name, scatter_dimension=..., tiled=True)`. The check compares
# your block with the same computation on one device.

# %% [markdown] tags=["lang-zh"]
# **3.4 块本身。** 现在为下面的网格把二维 MLP 块写成一个 `shard_map` 函数体：两行、每行四个设备，轴 `x`
# 充当 $X$，轴 `y` 充当 $YZ$。你的单元格后面的那个单元格会按表中的分片方式把它包装起来；在函数体内，每个数组都是
# 一个设备的块：
#
# | 数组 | 全局形状 | 切分 | 一个设备的块 |
# |---|---|---|---|
# | `x_Bd` | $[B, D]$ | $D$ 切分在 `x` 和 `y` 上 | $[B, D_{XY}]$ |
# | `w_in_df` | $[D, F]$ | $D$ 切分在 `x` 上，$F$ 切分在 `y` 上 | $[D_X, F_Y]$ |
# | `w_out_fd` | $[F, D]$ | $F$ 切分在 `y` 上，$D$ 切分在 `x` 上 | $[F_Y, D_X]$ |
# | 结果 | $[B, D]$ | $D$ 切分在 `x` 和 `y` 上 | $[B, D_{XY}]$ |
#
# 这个块计算 $\mathrm{gelu}(x W_\text{in}) W_\text{out}$（`jax.nn.gelu`）。按例题 7 的五个步骤来：在 $YZ$
# 上全收集输入；相乘；在 $X$ 上对部分和做全规约（要在非线性之前！）；相乘；在 $YZ$ 上做规约散射。对应的
# 集合通信是 `jax.lax.all_gather(a, axis_name, axis=..., tiled=True)`、`jax.lax.psum(a, axis_name)` 和
# `jax.lax.psum_scatter(a, axis_name, scatter_dimension=..., tiled=True)`。检查会把你的块与单个设备上的同一
# 计算作比较。

# %%
mesh = named_mesh((2, 4))          # axes "x" (2 devices) and "y" (4 devices)
print(mesh)


# %%
def mlp_2d_body(x_Bd, w_in_df, w_out_fd):
    """One device's part of gelu(x @ W_in) @ W_out in the 2D layout."""
    # BEGIN SOLUTION
    x_BDx = jax.lax.all_gather(x_Bd, "y", axis=1, tiled=True)       # [B, D_X]
    tmp_BFy = jax.lax.psum(x_BDx @ w_in_df, "x")                     # [B, F_Y]
    out_BDx = jax.nn.gelu(tmp_BFy) @ w_out_fd                        # [B, D_X]{U_Y}
    return jax.lax.psum_scatter(out_BDx, "y", scatter_dimension=1, tiled=True)   # [B, D_XY]
    # END SOLUTION


# %%
ws2d_mlp = jax.jit(shard_map(
    mlp_2d_body, mesh,
    in_specs=(P(None, ("x", "y")), P("x", "y"), P("y", "x")),
    out_specs=P(None, ("x", "y"))))

# %%
check("ch10.ws2d_mlp", ws2d_mlp)

# %% [markdown]
# ## Your score

# %% [markdown] tags=["lang-zh"]
# ## 你的得分

# %%
summary("ch08")
summary("ch09")
summary("ch10")
