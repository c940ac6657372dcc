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
# # Exercises: mixtures of experts
#
# These exercises go with [chapter 14](../chapters/14_mixture_of_experts.py), serving sparse
# models. The scaling book's worked problems 5 and 6 {cite:p}`austin2025scaling`, as the source
# asks them (total and active parameters, the critical batch, the cache, the FLOPs; the expert
# sharding of an 8 × 16 slice), are problems 5 and 6 of
# [the performance-model exercises](02_performance_models.py); this page goes on from them,
# with every constant read from the library's presets and hardware table. The last exercise
# is a router, the first thing an MoE layer computes.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted*. The notebook runs from top to bottom
# at any stage, and `summary` at the end adds up your points.

# %% [markdown] tags=["lang-zh"]
# # 练习：混合专家
#
# 这些练习配合[第 14 章](../chapters/14_mixture_of_experts.py)：为稀疏模型提供服务。《How to Scale Your Model》
# {cite:p}`austin2025scaling` 的例题 5 和例题 6，按原书的问法（总参数和激活参数、临界批量、缓存、
# FLOPs；8 × 16 切片上的专家分片），是[性能模型练习](02_performance_models.py)的第 5 题和第 6 题；
# 本页在它们的基础上继续，每个常数都从库的预设和硬件表中读取。最后一个练习是路由器——MoE 层计算的
# 第一样东西。
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行
# 它后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示）或*未作答*。无论做到哪一步，这个笔记本
# 都能从头运行到尾，最后的 `summary` 会把你的得分加起来。

# %%
import inferbook

info = inferbook.setup()

import math

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.grading import check, summary
from inferbook.model.features import MoE
from inferbook.model.presets import get_preset
from inferbook.perf import counts, moe_layouts, params, step_cost
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch14")

# %% [markdown]
# ## Part 1: the sparse step
#
# A decode step of $B$ tokens sends each token to $k$ of the $E$ experts of every MoE layer,
# and reads the weights of the experts that at least one token chose.
#
# **1.1** With balanced routing, how many distinct experts does one DeepSeek-V3 layer touch,
# on average, in a step of $B = 32$ tokens?

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：稀疏的一步
#
# 一个处理 $B$ 个词元（token）的解码步骤，在每个 MoE 层把每个词元发给 $E$ 个专家中的 $k$ 个，并读取至少被一个
# 词元选中的那些专家的权重。
#
# **1.1** 在路由均衡的情况下，一个处理 $B = 32$ 个词元的步骤中，DeepSeek-V3 的一层平均触及多少个
# 不同的专家？

# %%
v3 = get_preset("deepseek-v3")
print(f"DeepSeek-V3: E = {v3.moe.E}, k = {v3.moe.k}")

# %%
# BEGIN SOLUTION
E, k = v3.moe.E, v3.moe.k
touched = E * (1 - (1 - k / E) ** 32)
# END SOLUTION

# %%
check("ch14.experts_touched_v3", touched)

# %% [markdown]
# **1.2** How many bytes of bfloat16 weights does a decode step of Mixtral-8x7B read when
# $B = 4$ tokens share it? Everything but the routed experts is read whole; each MoE layer reads
# the experts the batch touches (`params.tensors` lists every weight with its role; the routed
# experts' role is `"expert"`).

# %% [markdown] tags=["lang-zh"]
# **1.2** 当 $B = 4$ 个词元共享一个解码步骤时，Mixtral-8x7B 的这一步要读取多少字节的 bfloat16 权重？
# 除路由专家之外的一切都整个读取；每个 MoE 层读取这个批次触及的专家（`params.tensors` 列出每个权重
# 及其角色；路由专家的角色是 `"expert"`）。

# %%
mixtral = get_preset("mixtral-8x7b")
print(f"Mixtral-8x7B: E = {mixtral.moe.E}, k = {mixtral.moe.k}, "
      f"{counts.param_count(mixtral):,} parameters")

# %%
# BEGIN SOLUTION
routed = sum(t.size for t in params.tensors(mixtral) if t.role == "expert")
share = 1 - (1 - mixtral.moe.k / mixtral.moe.E) ** 4
read_b4 = 2 * (counts.param_count(mixtral) - routed + routed * share)
# END SOLUTION

# %%
check("ch14.weights_read_mixtral_b4", read_b4)

# %% [markdown]
# **1.3** One MoE layer of DeepSeek-V3 on an H100, bfloat16 weights and arithmetic: from how
# many tokens per step is it compute-bound? Its $E$ experts have $P_e = 3 D F_e$ parameters
# each; a step does $2 k P_e$ FLOPs per token and reads the touched experts. (Where the batch
# touches every expert, the answer is $E/k$ times a dense layer's.)

# %% [markdown] tags=["lang-zh"]
# **1.3** DeepSeek-V3 的一个 MoE 层在 H100 上，权重和运算都用 bfloat16：它从每步多少个词元起变为
# 计算受限？它的 $E$ 个专家各有 $P_e = 3 D F_e$ 个参数；一步中每个词元做 $2 k P_e$ FLOPs，并读取被
# 触及的专家。（当批次触及每一个专家时，答案是稠密层的 $E/k$ 倍。）

# %%
h100 = get_chip("H100 SXM")

# %%
# BEGIN SOLUTION
dense_bcrit = h100.bf16_flops_per_s / h100.hbm_bytes_per_s      # 2 FLOPs per 2-byte weight
layer_bcrit = dense_bcrit * v3.moe.E / v3.moe.k
# Check the assumption: at that batch every expert is touched.
assert v3.moe.E - v3.moe.E * (1 - (1 - v3.moe.k / v3.moe.E) ** layer_bcrit) < 1e-3
# END SOLUTION

# %%
check("ch14.moe_layer_bcrit_v3", layer_bcrit)

# %% [markdown]
# ## Part 2: expert parallelism
#
# Expert parallelism puts $E/Z$ whole experts on each of $Z$ chips and sends every token to
# the chips of its experts with an AllToAll. The buffer a chip sends has a fixed shape
# $[E, C, D]$: $C$ slots per expert, the *capacity*, $C = \lceil c \cdot N k / E \rceil$ for a
# chip's $N$ tokens and a capacity factor $c$.
#
# **2.1** Mixtral-8x7B on 8 chips, experts over all 8; a decode step of 64 sequences (8 per
# chip, one token each), capacity factor 1.25, bfloat16 activations. How many bytes does one
# chip's dispatch buffer hold?

# %% [markdown] tags=["lang-zh"]
# ## 第二部分：专家并行
#
# 专家并行把 $E/Z$ 个完整的专家放到 $Z$ 块芯片的每一块上，并用一次全交换（AllToAll）把每个词元发到
# 它的专家所在的芯片。一块芯片发出的缓冲区有固定的形状 $[E, C, D]$：每个专家 $C$ 个槽位，即*容量*；
# 对一块芯片的 $N$ 个词元和容量因子 $c$，$C = \lceil c \cdot N k / E \rceil$。
#
# **2.1** Mixtral-8x7B 在 8 块芯片上，专家分布在全部 8 块上；一个处理 64 个序列的解码步骤（每块芯片
# 8 个，每个序列一个词元），容量因子 1.25，bfloat16 激活值。一块芯片的分发缓冲区有多少字节？

# %%
# BEGIN SOLUTION
tokens = 64 // 8
C = math.ceil(1.25 * tokens * mixtral.moe.k / mixtral.moe.E)
dispatch_bytes = mixtral.moe.E * C * mixtral.D * 2
# END SOLUTION

# %%
check("ch14.dispatch_buffer_bytes", dispatch_bytes)

# %% [markdown]
# **2.2** A chip holds 16 tokens for 8 experts, 2 per token, with a capacity factor of 1.
# How many slots does each expert keep?

# %% [markdown] tags=["lang-zh"]
# **2.2** 一块芯片为 8 个专家持有 16 个词元，每个词元 2 个专家，容量因子为 1。每个专家保留多少个
# 槽位？

# %%
# BEGIN SOLUTION
slots = math.ceil(1.0 * 16 * 2 / 8)
# END SOLUTION

# %%
check("ch14.capacity_slots", slots)

# %% [markdown]
# **2.3** Its router sends the eight experts these numbers of assignments (32 in all). How many
# assignments are dropped?

# %% [markdown] tags=["lang-zh"]
# **2.3** 它的路由器发给这八个专家的分配数如下（共 32 个）。有多少个分配被丢弃？

# %%
sent = [7, 5, 4, 4, 3, 3, 3, 3]

# %%
# BEGIN SOLUTION
dropped = sum(max(0, n - slots) for n in sent)
# END SOLUTION

# %%
check("ch14.capacity_drops", dropped)

# %% [markdown]
# **2.4** Expert parallelism reads a copy of the attention weights on every chip but moves
# smaller collectives; tensor parallelism (the 1D layout, `"1d-ws"`) splits everything.
# `moe_layouts.moe_decode_step(cfg, chip, chips, batch, layout, capacity_factor=...)` builds a
# decode step either way, one chip's share of it in its `cost`, which
# `step_cost.step_time(step.cost, chip)` prices. For Mixtral-8x7B on 8 H100s with capacity factor 1.25, find the
# smallest batch — a multiple of 8, so each chip serves whole sequences — at which
# expert parallelism is no slower than tensor parallelism.

# %% [markdown] tags=["lang-zh"]
# **2.4** 专家并行在每块芯片上都读取一份注意力权重的副本，但搬运的集合通信较小；张量并行（一维布局，
# `"1d-ws"`）则把一切都切分。
# `moe_layouts.moe_decode_step(cfg, chip, chips, batch, layout, capacity_factor=...)`
# 可以列出两种方式下的一个解码步骤，其 `cost` 是一块芯片在这一步中的份额，
# 由 `step_cost.step_time(step.cost, chip)` 算出耗时。对于 8 块 H100 上的 Mixtral-8x7B、容量因子
# 1.25，找出专家并行不慢于张量并行的最小批次——它须是 8 的倍数，这样每块芯片服务的都是完整的序列。

# %%
# BEGIN SOLUTION
def step(batch, layout):
    return step_cost.step_time(moe_layouts.moe_decode_step(
        mixtral, h100, 8, batch, layout, capacity_factor=1.25).cost, h100)


crossover = next(b for b in range(8, 2 ** 16, 8)
                 if step(b, "expert-parallel") <= step(b, "1d-ws"))
# END SOLUTION

# %%
check("ch14.ep_tp_crossover", crossover)

# %% [markdown]
# **2.5 Worked problem 6, in this layout.** The problem's model (its 18B model with 16 experts
# of the same width, 2 per token) on a TPU v5e 8 × 16 slice, int8 weights, experts split
# $[E_Z, D, F_Y]$ with $Z = 16$, $Y = 8$ (and $X = 1$). Here attention and the embeddings are
# split as the 1D layout splits them over $Y$ alone, and each group of $Y$ chips serves its
# own sequences. How many bytes of weights does each chip hold?

# %% [markdown] tags=["lang-zh"]
# **2.5 例题 6，用这种布局。** 例题的模型（它的 18B 模型，换成 16 个同样宽度的专家，每个词元 2 个）
# 放在 TPU v5e 8 × 16 切片上，int8 权重，专家按 $[E_Z, D, F_Y]$ 切分，$Z = 16$，$Y = 8$（$X = 1$）。
# 这里注意力和嵌入按一维布局的方式只沿 $Y$ 切分，每组 $Y$ 块芯片服务它自己的序列。每块芯片持有多少
# 字节的权重？

# %%
base = get_preset("scaling-book-18b")
wp5 = base.replace(moe=MoE(E=16, k=2, F=base.F))

# %%
# BEGIN SOLUTION
per_chip = moe_layouts.expert_parallel_param_bytes(wp5, X=1, Y=8, Z=16, bytes_per_param=1)
# END SOLUTION

# %%
check("ch14.wp6_bytes_per_chip", per_chip)

# %% [markdown]
# ## Part 3: latent attention
#
# **3.1** DeepSeek-V3 caches, per token and layer, a latent of $R_{kv}$ numbers and a rotary
# key of $H_\text{rope}$ numbers shared by all heads. How many bytes of bfloat16 cache does
# one token take across all layers?

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：潜在注意力
#
# **3.1** DeepSeek-V3 在每个词元、每一层缓存一个 $R_{kv}$ 个数的潜在向量，以及一个由所有注意力头共享
# 的 $H_\text{rope}$ 个数的旋转键。一个词元在所有层中共占多少字节的 bfloat16 缓存？

# %%
print(v3.mla)

# %%
# BEGIN SOLUTION
mla_bytes = v3.L * (v3.mla.R_kv + v3.mla.H_rope) * 2
# END SOLUTION

# %%
check("ch14.mla_cache_bytes_v3", mla_bytes)

# %% [markdown]
# ## Part 4: a router
#
# **4.1** Write Mixtral's router: for each of $N$ tokens `x_ND` and a router matrix `w_DE`,
# the softmax of `x_ND @ w_DE` over the $E$ experts (in float32), the $k$ largest
# probabilities in decreasing order and the experts they belong to, the probabilities divided
# by their sum. Return `(weights [N, k], experts [N, k])`, the experts as integers.
# (`jax.lax.top_k` returns the largest values of the last axis and their indices.)


# %% [markdown] tags=["lang-zh"]
# ## 第四部分：一个路由器
#
# **4.1** 写出 Mixtral 的路由器：对 $N$ 个词元 `x_ND` 和路由矩阵 `w_DE`，在 $E$ 个专家上对
# `x_ND @ w_DE` 做 softmax（用 float32），取最大的 $k$ 个概率（按从大到小的顺序）和它们所属的专家，
# 再把这些概率除以它们的和。返回 `(weights [N, k], experts [N, k])`，专家编号为整数。
# （`jax.lax.top_k` 返回最后一个轴上的最大值及其下标。）

# %%
def top_k_router(x_ND, w_DE, k):
    """Each token's k experts and their weights, Mixtral's way."""
    # BEGIN SOLUTION
    logits = jnp.matmul(x_ND, w_DE, preferred_element_type=jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    weights, experts = jax.lax.top_k(probs, k)
    return weights / weights.sum(-1, keepdims=True), experts.astype(jnp.int32)
    # END SOLUTION


# %%
check("ch14.top_k_router", top_k_router)

# %% [markdown]
# ## Your score

# %% [markdown] tags=["lang-zh"]
# ## 你的得分

# %%
summary("ch14")
