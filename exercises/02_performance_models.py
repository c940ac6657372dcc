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
# # Exercises: performance models
#
# These exercises go with the three chapters on performance models:
# [rooflines](../chapters/02_rooflines.py), [latency, throughput and
# memory](../chapters/03_latency_throughput_memory.py) and [transformer inference
# arithmetic](../chapters/04_inference_arithmetic.py). Part 1 asks when each piece of a
# transformer is compute-bound; part 2 works the step-time quiz, the LLaMA-2 13B tables and all
# seven worked problems of the scaling book's inference chapter {cite:p}`austin2025scaling`;
# part 3 goes through kipply's post and her exercises {cite:p}`chen2022arithmetic`.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint) or *not attempted*. The notebook runs top to bottom at any
# stage; `summary` at the end of each part adds up your points, with each question's tolerance.
#
# **Conventions.** Chips come from `inferbook.perf.hardware` and models from the presets in
# `inferbook.model.presets`, in decimal units (16 GB = 16e9 bytes). The sources round some of these
# figures differently — 8.1e11 B/s for a TPU v5e in the scaling book's quiz, 1.5e12 B/s for
# an A100 and 52e9 parameters in kipply's post — and a few of their answers contain slips
# (the book's [errata](../book/errata.py) lists them). The checks use the registry and exact
# parameter counts; an answer computed with a source's rounded figure is recognised and
# explained. Compute your answers from the objects below rather than typing numbers.

# %% [markdown] tags=["lang-zh"]
# # 练习：性能模型
#
# 这些练习配合讲性能模型的三章：[屋顶线](../chapters/02_rooflines.py)、
# [延迟、吞吐量与内存](../chapters/03_latency_throughput_memory.py)和
# [Transformer 推理计算](../chapters/04_inference_arithmetic.py)。第一部分问 Transformer 的每个部分何时是计算受限的；
# 第二部分做《How to Scale Your Model》推理一章中的步骤时间小测验、LLaMA-2 13B 的几张表，以及全部七道例题
# {cite:p}`austin2025scaling`；第三部分过一遍 kipply 的文章和她的练习 {cite:p}`chen2022arithmetic`。
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行它
# 后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示）或*未作答*。无论做到哪一步，这个笔记本都能
# 从头运行到尾；每一部分末尾的 `summary` 会把你的得分加起来，并列出每道题的容差。
#
# **约定。** 芯片来自 `inferbook.perf.hardware`，模型来自 `inferbook.model.presets` 中的预设，单位一律
# 是十进制（16 GB = 16e9 字节）。原始资料对其中一些数字的取整有所不同——《How to Scale Your Model》的小测验里
# TPU v5e 是 8.1e11 B/s，kipply 的文章里 A100 是 1.5e12 B/s、参数是 52e9 个——它们的答案里也有几处
# 笔误（本书的[勘误](../book/errata.py)页列出了这些）。检查使用注册表和精确的参数量；用原始资料的
# 取整数字算出的答案会被识别出来，并给出解释。请用下面的对象算出答案，而不要手敲数字。

# %%
import inferbook

info = inferbook.setup()

import math

from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf import comm_time, counts, phase_time, step_cost
from inferbook.perf.hardware import get_chip

v5e, h100 = get_chip("TPU v5e"), get_chip("H100 SXM")
a100 = get_chip("A100 40GB")
print(info.describe())
for chip in (v5e, h100, a100):
    print(f"{chip.name:10s} {chip.hbm_bytes:.3g} B at {chip.hbm_bytes_per_s:.4g} B/s")
    print(f"{'':10s} {chip.bf16_flops_per_s:.4g} FLOP/s bf16, {chip.int8_ops_per_s:.4g} op/s int8")

# %% [markdown]
# ## Part 1: rooflines
#
# A chip does at most $C$ FLOPs per second and reads at most $W$ bytes per second. An operation
# of $F$ FLOPs on $M$ bytes needs at least $\max(F/C,\ M/W)$: which term wins depends on its
# intensity $F/M$ against the chip's $C/W$.
#
# **1.1** At how many FLOPs per byte do a TPU v5e's two roofs meet (bfloat16)?

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：屋顶线
#
# 一块芯片每秒最多做 $C$ 次 FLOP，每秒最多读 $W$ 字节。一个在 $M$ 字节上做 $F$ 次 FLOP 的操作，至少
# 需要 $\max(F/C,\ M/W)$ 的时间：哪一项胜出，取决于它的强度 $F/M$ 与芯片的 $C/W$ 相比如何。
#
# **1.1** TPU v5e 的两个“屋顶”在每字节多少 FLOPs 处相交（bfloat16）？

# %%
# BEGIN SOLUTION
ci_v5e = v5e.bf16_flops_per_s / v5e.hbm_bytes_per_s
# END SOLUTION

# %%
check("ch02.critical_intensity_v5e", ci_v5e)

# %% [markdown]
# **1.2** A weight matmul $[B, D] \cdot [D, F]$ does $2BDF$ FLOPs, and when $B \ll D, F$ its
# bytes are essentially the weights. Quantization changes both sides. On a TPU v5e, what is the
# critical batch $B_\text{crit}$ — the tokens per step above which the matmul is compute-bound —
# with int8 weights but bfloat16 arithmetic? And with int8 weights *and* int8 arithmetic
# (`v5e.int8_ops_per_s`)?

# %% [markdown] tags=["lang-zh"]
# **1.2** 一个权重矩阵乘法 $[B, D] \cdot [D, F]$ 做 $2BDF$ FLOPs；当 $B \ll D, F$ 时，它的字节基本上
# 就是权重。量化会同时改变两边。在 TPU v5e 上，权重为 int8、计算为 bfloat16 时，临界批量
# $B_\text{crit}$——每步的词元（token）数超过它，矩阵乘法就是计算受限的——是多少？权重*和*计算都是 int8
# （`v5e.int8_ops_per_s`）时呢？

# %%
# BEGIN SOLUTION
bcrit_int8_weights = v5e.bf16_flops_per_s * 1 / (2 * v5e.hbm_bytes_per_s)
bcrit_int8_both = v5e.int8_ops_per_s * 1 / (2 * v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch02.bcrit_v5e_int8_weights", bcrit_int8_weights)
check("ch02.bcrit_v5e_int8_both", bcrit_int8_both)

# %% [markdown]
# **1.3** The same for an H100 SXM with bfloat16 weights and arithmetic. (The registry stores
# the *dense* peak; NVIDIA's headline numbers assume 2:4 sparsity.)

# %% [markdown] tags=["lang-zh"]
# **1.3** 同样的问题，换成 H100 SXM，权重和计算都是 bfloat16。（注册表存的是*稠密*峰值；NVIDIA
# 宣传的数字假设了 2:4 稀疏。）

# %%
# BEGIN SOLUTION
bcrit_h100 = h100.bf16_flops_per_s * 2 / (2 * h100.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch02.bcrit_h100", bcrit_h100)

# %% [markdown]
# **1.4** A TPU v5e decodes 64 sequences at once with bfloat16 weights. Are its weight matmuls
# memory-bound? Answer `True` or `False`, computed.

# %% [markdown] tags=["lang-zh"]
# **1.4** 一块 TPU v5e 用 bfloat16 权重同时解码 64 个序列。它的权重矩阵乘法是内存受限的吗？回答
# `True` 或 `False`，要用计算得出。

# %%
# BEGIN SOLUTION
b64_memory_bound = 64 < v5e.bf16_flops_per_s * 2 / (2 * v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch02.decode_b64_memory_bound", b64_memory_bound)

# %% [markdown]
# **1.5** Attention's "weights" are the KV cache. One layer, one sequence, $T$ queries against
# $S$ keys, $N = G K$ query heads of dimension $H$, bfloat16: $4TSNH$ FLOPs (two products)
# against $2TNH \cdot 2$ bytes of queries and outputs plus $2SKH \cdot 2$ bytes of keys and
# values. Write the intensity as a function of $T$, $S$ and $G$ (the heads cancel).

# %% [markdown] tags=["lang-zh"]
# **1.5** 注意力的“权重”是 KV 缓存。一层、一个序列，$T$ 个查询对 $S$ 个键，$N = G K$ 个维度为 $H$
# 的查询头，bfloat16：$4TSNH$ FLOPs（两次乘积），对应 $2TNH \cdot 2$ 字节的查询和输出，加上
# $2SKH \cdot 2$ 字节的键和值。把强度写成 $T$、$S$ 和 $G$ 的函数（头数会约掉）。

# %%
def attention_intensity(T, S, G):
    """FLOPs per byte of attention: T queries, S keys, G query heads per KV head (bf16)."""
    # BEGIN SOLUTION
    return 2 * T * S * G / (T * G * 2 + S * 2)
    # END SOLUTION


# %%
check("ch02.attention_intensity_fn", attention_intensity)

# %% [markdown]
# **1.6** In prefill $S = T$. What is the shortest prompt whose multi-head attention ($G = 1$)
# is compute-bound on a TPU v5e? And in generation ($T = 1$), what intensity does attention
# reach with $G = 4$ against 8,192 cached keys?

# %% [markdown] tags=["lang-zh"]
# **1.6** 预填充时 $S = T$。在 TPU v5e 上，多头注意力（$G = 1$）达到计算受限的最短提示词有多长？在
# 生成时（$T = 1$），$G = 4$、缓存中有 8,192 个键时，注意力的强度能达到多少？

# %%
# BEGIN SOLUTION
prefill_threshold = 1
while 2 * prefill_threshold ** 2 / (4 * prefill_threshold) < ci_v5e:
    prefill_threshold += 1
decode_intensity_g4 = 2 * 1 * 8192 * 4 / (1 * 4 * 2 + 8192 * 2)
# END SOLUTION

# %%
check("ch02.prefill_attention_threshold", prefill_threshold)
check("ch02.decode_attention_intensity_gqa", decode_intensity_g4)

# %% [markdown]
# Decoding attention stays near $G$ FLOPs per byte however large the batch: every sequence
# brings its own cache. So once the caches outweigh the weights, batching helps little.
#
# **1.7** At what batch do LLaMA-2 13B's caches (4,096 tokens each, bfloat16) weigh as much as
# its bfloat16 weights? (Not necessarily a whole number.)

# %% [markdown] tags=["lang-zh"]
# 解码时的注意力，无论批次多大，都停留在每字节约 $G$ FLOPs：每个序列都带着自己的缓存。所以一旦缓存
# 比权重还大，批处理就帮不上什么忙了。
#
# **1.7** 批量大小为多少时，LLaMA-2 13B 的缓存（每个序列 4,096 个词元，bfloat16）和它的 bfloat16
# 权重一样大？（不一定是整数。）

# %%
llama13 = get_preset("llama-2-13b")

# %%
# BEGIN SOLUTION
even_batch = counts.param_count(llama13) * 2 / (
    4096 * 2 * llama13.L * llama13.K * llama13.H * 2)
# END SOLUTION

# %%
check("ch02.even_batch_llama_2_13b", even_batch)

# %% [markdown]
# **1.8 Write the critical batch.** Given a chip's peak FLOP/s, its bandwidth and the bytes per
# weight, return $B_\text{crit}$ (a float, no rounding). The check compares with
# `roofline.critical_batch` on random chips.

# %% [markdown] tags=["lang-zh"]
# **1.8 写出临界批量。** 给定芯片的峰值 FLOP/s、带宽和每个权重的字节数，返回 $B_\text{crit}$（浮点数，
# 不取整）。检查会在随机生成的芯片上与 `roofline.critical_batch` 比较。

# %%
def critical_batch(flops_per_s, hbm_bytes_per_s, weight_bytes):
    """Tokens per step above which a weight matmul is compute-bound."""
    # BEGIN SOLUTION
    return flops_per_s * weight_bytes / (2 * hbm_bytes_per_s)
    # END SOLUTION


# %%
check("ch02.critical_batch_fn", critical_batch)

# %% [markdown]
# **1.9 Appendix A of the scaling book.** It measures a layer of two matmuls with
# $D = 8{,}192$ and $F = 32{,}768$ in bfloat16, sharded over 4 TPU v5e chips: step time
# barely grows until a batch of about $B_\text{crit}$. What is the floor — the time for each
# chip to read its quarter of the layer's weights?

# %% [markdown] tags=["lang-zh"]
# **1.9 《How to Scale Your Model》的附录 A。** 它测量了一个由两次矩阵乘法组成的层，$D = 8{,}192$，$F = 32{,}768$，
# bfloat16，分片到 4 块 TPU v5e 芯片上：直到批次大约为 $B_\text{crit}$，步骤时间几乎都不增长。下限是
# 多少——也就是每块芯片读取这一层权重中属于它的四分之一所需的时间？

# %%
# BEGIN SOLUTION
layer_floor = 2 * 8192 * 32768 * 2 / (4 * v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch02.appendix_a_layer_floor", layer_floor)

# %%
summary("ch02")

# %% [markdown]
# ## Part 2: latency, throughput and memory
#
# A decode step of $B$ sequences reads every weight once and every sequence's cache once;
# attention is always memory-bound, the weight matmuls pay the larger of their FLOP time and
# their load time:
#
# $$T_\text{step} = \frac{B \cdot \text{KV bytes per sequence}}{W}
#   + \max\left(\frac{2BP}{C}, \frac{\text{weight bytes}}{W}\right),$$
#
# with $W$ and $C$ summed over the chips that share the model.
#
# **2.1 Write the step time.** For one chip (or aggregate $C$ and $W$), with `kv_bytes` the
# whole batch's cache.

# %% [markdown] tags=["lang-zh"]
# ## 第二部分：延迟、吞吐量与内存
#
# 一个包含 $B$ 个序列的解码步骤，把每个权重读一遍，把每个序列的缓存读一遍；注意力总是内存受限的，
# 权重矩阵乘法则取 FLOP 时间和载入时间中较大的那个：
#
# $$T_\text{step} = \frac{B \cdot \text{每个序列的 KV 字节数}}{W}
#   + \max\left(\frac{2BP}{C}, \frac{\text{权重字节数}}{W}\right),$$
#
# 其中 $W$ 和 $C$ 是共享这个模型的所有芯片的总和。
#
# **2.1 写出步骤时间。** 针对一块芯片（或者汇总后的 $C$ 和 $W$），`kv_bytes` 是整个批次的缓存。

# %%
def step_time(params, param_bytes, kv_bytes, batch, flops_per_s, hbm_bytes_per_s):
    """Seconds per decode step: the cache read plus the weights' FLOP or load time."""
    # BEGIN SOLUTION
    weights = max(2 * batch * params / flops_per_s, param_bytes / hbm_bytes_per_s)
    return kv_bytes / hbm_bytes_per_s + weights
    # END SOLUTION


# %%
check("ch03.step_time_fn", step_time)

# %% [markdown]
# **2.2 The step-time quiz.** A dense model of 30e9 parameters in int8 (bfloat16 arithmetic),
# 100 kB of cache per token, 8,192 tokens of context per sequence, on a TPU v5e 4×4 slice
# (16 chips). What is the step time at batch 4? At batch 256?

# %% [markdown] tags=["lang-zh"]
# **2.2 步骤时间小测验。** 一个 30e9 参数的稠密模型，以 int8 存储（bfloat16 计算），每个词元 100 kB
# 缓存，每个序列有 8,192 个词元的上下文，运行在 TPU v5e 4×4 切片（16 块芯片）上。批次中有 4 个序列
# 时，步骤时间是多少？256 个序列时呢？

# %%
# BEGIN SOLUTION
quiz = {}
for B in (4, 256):
    quiz[B] = step_time(30e9, 30e9, B * 8192 * 100e3, B, 16 * v5e.bf16_flops_per_s,
                        16 * v5e.hbm_bytes_per_s)
quiz_b4, quiz_b256 = quiz[4], quiz[256]
# END SOLUTION

# %%
check("ch03.quiz_step_b4", quiz_b4)
check("ch03.quiz_step_b256", quiz_b256)

# %% [markdown]
# At batch 4 the weights' load dominates; at 256 their FLOPs do, and 256 caches must be read
# as well. A step at batch 256 yields a token for each of 256 sequences instead of 4, and
# takes several times as long: throughput grows by the ratio of tokens per step divided by
# the ratio of your two answers — by a little less than the latency grows (chapter 3 works
# it out).
#
# ### LLaMA-2 13B
#
# **2.3** Count LLaMA-2 13B's parameters from its letters (the table in chapter 3 shows the
# components), and the bytes of one 8,192-token cache in bfloat16. How many such caches
# outweigh the bfloat16 weights (a whole number)? And how big is one $[T, D]$ activation of an
# 8,192-token prefill in bfloat16?

# %% [markdown] tags=["lang-zh"]
# 批量大小为 4 时，权重的载入占主导；为 256 时，权重的 FLOPs 占主导，而且还要读 256 份缓存。批次为
# 256 的一步给 256 个序列各产出一个词元，而不是 4 个，耗时也要长好几倍：吞吐量增长的倍数，等于每步
# 词元数之比除以你两个答案之比——比延迟增长的倍数略小一些（第 3 章会把它算出来）。
#
# ### LLaMA-2 13B
#
# **2.3** 根据 LLaMA-2 13B 的字母数出它的参数（第 3 章的表格列出了各个组成部分），再算出 bfloat16 下
# 一份 8,192 词元缓存的字节数。多少份这样的缓存会比 bfloat16 权重还大（一个整数）？8,192 个词元的
# 预填充中，一个 bfloat16 的 $[T, D]$ 激活有多大？

# %%
L, D, F, N, K, H, V = (llama13.L, llama13.D, llama13.F, llama13.N, llama13.K, llama13.H,
                       llama13.V)

# %%
# BEGIN SOLUTION
params_13b = L * (3 * D * F + 2 * D * N * H + 2 * D * K * H) + 2 * V * D + (2 * L + 1) * D
kv_8k = 2 * 2 * H * K * L * 8192
caches_exceeding = math.ceil(params_13b * 2 / kv_8k)
activation_8k = 8192 * D * 2
# END SOLUTION

# %%
check("ch03.llama_2_13b_params", params_13b)
check("ch03.kv_8k_llama_2_13b", kv_8k)
check("ch03.caches_exceed_weights", caches_exceeding)
check("ch03.activation_8k", activation_8k)

# %% [markdown]
# **2.4** Serve it on 8 TPU v5e chips with 8,192-token contexts. What is the largest batch that
# fits (weights and caches)? What would a step take at batch 64 if memory allowed? Now keep the
# weights but give the cache 8 KV heads instead of 40 (the scaling book's "five times smaller
# cache"): the step time at batch 240, and the largest batch that fits.

# %% [markdown] tags=["lang-zh"]
# **2.4** 在 8 块 TPU v5e 芯片上部署它，上下文为 8,192 个词元。放得下（权重加缓存）的最大批次是多少？
# 如果内存允许，批量大小为 64 时一步要多久？现在保持权重不变，但让缓存只有 8 个 KV 头而不是 40 个
# （即《How to Scale Your Model》所说的“缓存缩小到五分之一”）：求批量大小为 240 时的步骤时间，以及放得下的最大
# 批次。

# %%
# BEGIN SOLUTION
weights_13b = params_13b * 2
hbm8, W8, C8 = 8 * v5e.hbm_bytes, 8 * v5e.hbm_bytes_per_s, 8 * v5e.bf16_flops_per_s
max_batch_13b = math.floor((hbm8 - weights_13b) / kv_8k)
step_b64 = step_time(params_13b, weights_13b, 64 * kv_8k, 64, C8, W8)
kv_8k_gqa = kv_8k * 8 / K
step_gqa_b240 = step_time(params_13b, weights_13b, 240 * kv_8k_gqa, 240, C8, W8)
max_batch_gqa = math.floor((hbm8 - weights_13b) / kv_8k_gqa)
# END SOLUTION

# %%
check("ch03.llama_2_13b_max_batch", max_batch_13b)
check("ch03.llama_2_13b_step_b64", step_b64)
check("ch03.gqa_step_b240", step_gqa_b240)
check("ch03.gqa_max_batch", max_batch_gqa)

# %% [markdown]
# **2.5** With 40 KV heads, what throughput (tokens/s) does the step-time formula approach as
# the batch grows without bound (ignore memory)? Write $B / T_\text{step}$ for large $B$.

# %% [markdown] tags=["lang-zh"]
# **2.5** 有 40 个 KV 头时，随着批次无限增大（不考虑内存），步骤时间公式给出的吞吐量（词元/秒）趋近
# 于多少？写出 $B$ 很大时的 $B / T_\text{step}$。

# %%
# BEGIN SOLUTION
tput_ceiling = 1 / (kv_8k / W8 + 2 * params_13b / C8)
# END SOLUTION

# %%
check("ch03.throughput_ceiling", tput_ceiling)

# %% [markdown]
# ### The worked problems
#
# The scaling book invents a model like LLaMA-2 13B for its problems, with tied input and output
# embeddings; the library has it as a preset. Unless a problem says otherwise, everything is
# int8 (one byte per weight and per cached number) on a TPU v5e 4×4 slice of 16 chips.

# %% [markdown] tags=["lang-zh"]
# ### 例题
#
# 《How to Scale Your Model》为这些题目虚构了一个类似 LLaMA-2 13B 的模型，输入嵌入和输出嵌入共享权重；库中把它做成
# 了一个预设。除非题目另有说明，一切都是 int8（每个权重、每个缓存的数都占一个字节），运行在由 16 块
# 芯片组成的 TPU v5e 4×4 切片上。

# %%
m18 = get_preset("scaling-book-18b")
print(m18)

# %% [markdown]
# **Problem 1.** How many parameters does it have (count the norm gains too), and how many
# bytes of int8 cache per token?

# %% [markdown] tags=["lang-zh"]
# **题 1.** 它有多少个参数（归一化层的增益也要算上）？每个词元的 int8 缓存有多少字节？

# %%
# BEGIN SOLUTION
m = m18
p18 = m.L * m.D * (3 * m.F + 2 * m.H * (m.N + m.K)) + m.D * m.V + (2 * m.L + 1) * m.D
kv18 = 2 * m.L * m.K * m.H * 1
# END SOLUTION

# %%
check("ch03.wp1_params", p18)
check("ch03.wp1_kv_int8", kv18)

# %% [markdown]
# **Problem 2.** With the cache sharded over all 16 chips, what is the largest batch of
# 128k-token sequences (take 128k = 128,000) that fits beside the weights? And if the model
# had one KV head (its $W_K$ and $W_V$ shrink too)?

# %% [markdown] tags=["lang-zh"]
# **题 2.** 缓存分片到全部 16 块芯片上时，权重之外放得下的、由 128k 词元序列组成的最大批次是多少
# （取 128k = 128,000）？如果模型只有一个 KV 头（它的 $W_K$ 和 $W_V$ 也随之缩小）呢？

# %%
# BEGIN SOLUTION
free16 = 16 * v5e.hbm_bytes
wp2 = math.floor((free16 - p18) / (128_000 * kv18))
p18_k1 = p18 - m18.L * 2 * m18.D * m18.H * (m18.K - 1)
wp2_k1 = math.floor((free16 - p18_k1) / (128_000 * kv18 / m18.K))
# END SOLUTION

# %%
check("ch03.wp2_max_batch", wp2)
check("ch03.wp2_max_batch_k1", wp2_k1)

# %% [markdown]
# **Problem 3.** How long does it take to read every int8 weight once, with the weights split
# over the 16 chips? That is a floor on every step.

# %% [markdown] tags=["lang-zh"]
# **题 3.** 权重分在 16 块芯片上，把每个 int8 权重读一遍要多久？这是每一步的下限。

# %%
# BEGIN SOLUTION
wp3 = p18 / (16 * v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch03.wp3_load_time", wp3)

# %% [markdown]
# **Problem 4.** How to shard it? Two numbers decide. In decoding, 1D tensor parallelism over
# $Y$ chips reads $2DF/Y$ weight bytes per MLP block and all-reduces $[B, D]$ activations; the
# all-reduce stops hiding behind the weight load when $Y > F / (B \beta)$ with
# $\beta = W_\text{hbm} / W_\text{ici}$ (`comm_time.ici_bandwidth(v5e)` gives $W_\text{ici}$ of one
# axis). What is that limit at batch 32? Second: with the cache sharded over all chips, what is
# the floor on a step at problem 2's batch of 128,000-token sequences?

# %% [markdown] tags=["lang-zh"]
# **题 4.** 怎么分片？有两个数说了算。解码时，在 $Y$ 块芯片上做一维张量并行，每个 MLP 块读取
# $2DF/Y$ 字节的权重，并对 $[B, D]$ 激活做全规约；当 $Y > F / (B \beta)$ 时（其中
# $\beta = W_\text{hbm} / W_\text{ici}$，`comm_time.ici_bandwidth(v5e)` 给出一个轴的 $W_\text{ici}$），
# 全规约就再也无法被权重载入掩盖了。批量大小为 32 时，这个上限是多少？第二个数：缓存分片到所有芯片
# 上时，按题 2 的批次（128,000 词元的序列）跑一步，下限是多少？

# %%
# BEGIN SOLUTION
beta = v5e.hbm_bytes_per_s / comm_time.ici_bandwidth(v5e)
wp4_limit = m18.F / (32 * beta)
wp4_step = (p18 + wp2 * 128_000 * kv18) / (16 * v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch03.wp4_mp_limit_b32", wp4_limit)
check("ch03.wp4_step_floor", wp4_step)

# %% [markdown]
# **Problem 5.** Make the model a mixture of experts: $E = 16$ copies of each MLP, of which each
# token uses $k = 2$. How many parameters in total, and how many active per token? How many
# tokens per step must a TPU v5e batch for the MoE layers to be FLOP-bound (int8 weights and
# int8 arithmetic)? How many bytes of int8 cache per token? How many FLOPs per token does a
# forward pass cost (the $2P$ rule with active parameters)?

# %% [markdown] tags=["lang-zh"]
# **题 5.** 把模型改成混合专家：每个 MLP 有 $E = 16$ 份副本，每个词元用其中 $k = 2$ 份。总共有多少
# 参数，每个词元激活的参数又有多少？TPU v5e 每步的批次要有多少个词元，MoE 层才能达到计算受限（int8
# 权重、int8 计算）？每个词元的 int8 缓存有多少字节？一次前向计算每个词元要花多少 FLOPs（用激活参数
# 套 $2P$ 法则）？

# %%
# BEGIN SOLUTION
mlp18 = 3 * m18.L * m18.D * m18.F
moe_total = p18 + 15 * mlp18
moe_active = p18 + 1 * mlp18
moe_bcrit = v5e.int8_ops_per_s * 1 / (2 * v5e.hbm_bytes_per_s) * 16 / 2
moe_kv = kv18
moe_flops = 2 * moe_active
# END SOLUTION

# %%
check("ch03.wp5_total_params", moe_total)
check("ch03.wp5_active_params", moe_active)
check("ch03.wp5_bcrit", moe_bcrit)
check("ch03.wp5_kv_int8", moe_kv)
check("ch03.wp5_flops_per_token", moe_flops)

# %% [markdown]
# **Problem 6.** Shard the model over a TPU v5e 8×16 slice of 128 chips, $Y = 8$ and
# $Z = 16$, as the source shards experts: each expert matrix $[E, D, F]$ as $[E_Z, D, F_Y]$,
# so the experts are split over all 128 chips, and every other weight over the 8 chips of $Y$.
# How long does each chip take to read its int8 weights? How much memory is left on each
# chip? And how many chips at least are needed to hold the weights at all?

# %% [markdown] tags=["lang-zh"]
# **题 6.** 把模型分片到 128 块芯片的 TPU v5e 8×16 切片上，$Y = 8$，$Z = 16$，按原文切分专家的方式：
# 每个专家矩阵 $[E, D, F]$ 切分为 $[E_Z, D, F_Y]$，于是专家分到全部 128 块芯片上，其余每个权重则分到
# $Y$ 的 8 块芯片上。每块芯片读取它的 int8 权重要多久？每块芯片还剩多少内存？至少要多少块芯片才放得下
# 这些权重？

# %%
# BEGIN SOLUTION
experts_int8 = 16 * mlp18                    # one byte per parameter
wp6_per_chip = experts_int8 / 128 + (moe_total - experts_int8) / 8
wp6_load = wp6_per_chip / v5e.hbm_bytes_per_s
wp6_free = v5e.hbm_bytes - wp6_per_chip
wp6_chips = math.ceil(moe_total / v5e.hbm_bytes)
# END SOLUTION

# %%
check("ch03.wp6_load_time", wp6_load)
check("ch03.wp6_free_hbm", wp6_free)
check("ch03.wp6_min_chips", wp6_chips)

# %% [markdown]
# **Problem 7: 2D weight-stationary sharding.** Split $D$ over $X$ chips and $F$ over $YZ$
# chips, $n = X \cdot YZ$. Each MLP block gathers its input $[B, D_X]$ over $YZ$ and scatters its
# output back, and all-reduces the hidden $[B, F_{YZ}]$ over $X$. With $X$ on one torus axis and
# $YZ$ on two, in bfloat16:
#
# $$T_\text{2D} = \frac{2BD}{X\,W_\text{ici}} + \frac{4BF}{YZ\,W_\text{ici}}$$
#
# versus $4BD / (3 W_\text{ici})$ for 1D model parallelism over three axes. For this model,
# what is $T_\text{2D}$ at $B = 128$, $X = 8$, $YZ = 32$? Which (real) $X$ minimises it on 256
# chips? And beyond how many chips does 2D at its best $X$ beat 1D (with $F = 4D$)?

# %% [markdown] tags=["lang-zh"]
# **题 7：二维权重驻留分片。** 把 $D$ 切分到 $X$ 块芯片上，把 $F$ 切分到 $YZ$ 块芯片上，
# $n = X \cdot YZ$。每个 MLP 块在 $YZ$ 上收集它的输入 $[B, D_X]$，再把输出散射回去，并在 $X$ 上对
# 隐藏层 $[B, F_{YZ}]$ 做全规约。$X$ 放在环面的一个轴上，$YZ$ 放在另外两个轴上，bfloat16 下：
#
# $$T_\text{2D} = \frac{2BD}{X\,W_\text{ici}} + \frac{4BF}{YZ\,W_\text{ici}}$$
#
# 而在三个轴上做一维模型并行则是 $4BD / (3 W_\text{ici})$。对这个模型，$B = 128$、$X = 8$、$YZ = 32$
# 时 $T_\text{2D}$ 是多少？在 256 块芯片上，哪个（实数）$X$ 使它最小？芯片数超过多少时，取最优 $X$ 的
# 二维方案会胜过一维方案（设 $F = 4D$）？

# %%
# BEGIN SOLUTION
W_ici = comm_time.ici_bandwidth(v5e)
wp7_time = 2 * 128 * m18.D / (8 * W_ici) + 4 * 128 * m18.F / (32 * W_ici)
wp7_x = math.sqrt(256 * m18.D / (2 * m18.F))
# 4D/3 = 2·sqrt(2·D·F/n)  =>  n = 18·F/D
wp7_chips = 18 * m18.F / m18.D
# END SOLUTION

# %%
check("ch03.wp7_comm_time", wp7_time)
check("ch03.wp7_optimal_x", wp7_x)
check("ch03.wp7_crossover", wp7_chips)

# %%
summary("ch03")

# %% [markdown]
# ## Part 3: transformer inference arithmetic
#
# kipply's post works with an invented 52B model (64 layers of width 8,192, a plain MLP of
# $4D$) on A100 40GB GPUs, and a Gopher-sized 260B one. The presets add a vocabulary she does
# not give (65,536 for the 52B), and with it embedding parameters her counts leave out.

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：Transformer 推理计算
#
# kipply 的文章用的是一个虚构的 52B 模型（64 层，宽度 8,192，普通 MLP 宽 $4D$），运行在 A100 40GB
# GPU 上，另外还有一个 Gopher 规模的 260B 模型。预设补上了她没有给出的词表（52B 模型为 65,536），
# 也随之带来了她的计数中没有的嵌入参数。

# %%
m52, gopher, m13 = get_preset("kipply-52b"), get_preset("gopher-280b"), get_preset("kipply-13b")
for cfg in (m52, gopher, m13):
    print(f"{cfg.name:12s} L={cfg.L} D={cfg.D} F={cfg.F} N={cfg.N} K={cfg.K} H={cfg.H} "
          f"V={cfg.V}  {counts.param_count(cfg):,} parameters")
print(f"A100 40GB: NVLink {a100.interconnect_bytes_per_s:.3g} B/s one way, "
      f"message latency {a100.hop_latency_s:g} s")

# %% [markdown]
# **3.1** How many bytes of bfloat16 cache does one token of the 52B model take? And how many
# FLOPs can an A100 do in the time it reads one byte (her "flops to bandwidth ratio")?

# %% [markdown] tags=["lang-zh"]
# **3.1** 52B 模型的一个词元占多少字节的 bfloat16 缓存？A100 读取一个字节的时间里能做多少 FLOPs
# （她所说的“FLOPs 与带宽之比”）？

# %%
# BEGIN SOLUTION
kv52 = 2 * m52.L * m52.K * m52.H * 2
ratio_a100 = a100.bf16_flops_per_s / a100.hbm_bytes_per_s
# END SOLUTION

# %%
check("ch04.kv_bytes_per_token_52b", kv52)
check("ch04.flops_per_byte_a100", ratio_a100)

# %% [markdown]
# **3.2 Capacity.** How many A100 40GB at least hold the 52B model's bfloat16 weights? On four
# of them, how many tokens of cache fit beside the weights? On three, how many sequences of
# 2,048 tokens?

# %% [markdown] tags=["lang-zh"]
# **3.2 容量。** 至少要多少块 A100 40GB 才能放下 52B 模型的 bfloat16 权重？在四块上，权重之外还能
# 放下多少个词元的缓存？在三块上，能放下多少个 2,048 词元的序列？

# %%
# BEGIN SOLUTION
w52 = counts.param_count(m52) * 2
min_gpus = math.ceil(w52 / a100.hbm_bytes)
capacity4 = math.floor((4 * a100.hbm_bytes - w52) / kv52)
batch3 = math.floor((3 * a100.hbm_bytes - w52) / (2048 * kv52))
# END SOLUTION

# %%
check("ch04.min_gpus_52b", min_gpus)
check("ch04.capacity_4_gpus", capacity4)
check("ch04.batch_3_gpus", batch3)

# %% [markdown]
# **3.3 Tensor parallelism.** Each layer all-reduces a $[B, D]$ activation twice, each
# all-reduce a reduce-scatter plus an all-gather in which every GPU sends $(N-1)/N \cdot D$
# numbers. How many bytes does each of 4 GPUs send per token per step for the 52B model?

# %% [markdown] tags=["lang-zh"]
# **3.3 张量并行。** 每一层对一个 $[B, D]$ 激活做两次全规约，每次全规约由一次规约散射加一次全收集
# 组成，其中每块 GPU 发送 $(N-1)/N \cdot D$ 个数。对 52B 模型，4 块 GPU 中的每一块每步为每个词元发送
# 多少字节？

# %%
# BEGIN SOLUTION
comm4 = m52.L * 4 * (4 - 1) / 4 * m52.D * 2
# END SOLUTION

# %%
check("ch04.comm_bytes_4_gpus", comm4)

# %% [markdown]
# **3.4 Latency.** At small batch a step reads the weights (spread over $N$ GPUs) and then pays
# a fixed latency for each of the $4L$ messages; at large batch it does $B \cdot 2P$ FLOPs,
# overlapped with $B \cdot 2 \cdot 4 L D$ bytes of communication (here she rounds $(N-1)/N$ to
# 1). For the 260B model on 16 GPUs, what is the small-batch latency, and the latency at batch
# 512? Use the preset's parameter count.

# %% [markdown] tags=["lang-zh"]
# **3.4 延迟。** 小批次下，一步读取权重（分散在 $N$ 块 GPU 上），然后为 $4L$ 条消息各付一份固定延迟；
# 大批次下，它做 $B \cdot 2P$ FLOPs，同时与 $B \cdot 2 \cdot 4 L D$ 字节的通信重叠（这里她把
# $(N-1)/N$ 取整为 1）。260B 模型在 16 块 GPU 上，小批次延迟是多少？批量大小为 512 时的延迟呢？请
# 使用预设的参数量。

# %%
# BEGIN SOLUTION
Pg = counts.param_count(gopher)
gopher_small = 2 * Pg / (16 * a100.hbm_bytes_per_s) + 4 * gopher.L * a100.hop_latency_s
gopher_large = max(512 * 2 * Pg / (16 * a100.bf16_flops_per_s),
                   512 * 2 * 4 * gopher.L * gopher.D / a100.interconnect_bytes_per_s)
# END SOLUTION

# %%
check("ch04.gopher_small_batch", gopher_small)
check("ch04.gopher_large_batch", gopher_large)

# %% [markdown]
# **3.5 Counting FLOPs.** Her rule counts $24 D^2$ FLOPs per layer and token (two per weight of
# $4D^2$ attention and $8D^2$ MLP). What does it give for the 52B model? And if element-wise
# work takes 43% of a step at $D = 1{,}024$, growing like $D$ while the matmuls grow like $D^2$,
# what share of the step does it take at $D = 8{,}192$?

# %% [markdown] tags=["lang-zh"]
# **3.5 数一数 FLOPs。** 她的法则是每层每个词元 $24 D^2$ FLOPs（注意力有 $4D^2$ 个权重，MLP 有
# $8D^2$ 个，每个权重两次运算）。对 52B 模型它给出多少？如果在 $D = 1{,}024$ 时逐元素工作占一步的
# 43%，它按 $D$ 增长，而矩阵乘法按 $D^2$ 增长，那么在 $D = 8{,}192$ 时它占一步的多少？

# %%
# BEGIN SOLUTION
flops_24d2 = 24 * m52.D ** 2 * m52.L
s, r = 0.43, 8192 / 1024
share_8192 = s * r / (s * r + (1 - s) * r ** 2)
# END SOLUTION

# %%
check("ch04.flops_per_token_24d2", flops_24d2)
check("ch04.intermediate_share_52b", share_8192)

# %% [markdown]
# ### kipply's exercises
#
# **Exercise 1.** Given a batch, a context length and `next_n` new tokens, how many FLOPs does
# the KV cache save? Count as she does: without a cache, decode step $j$ ($j = 0, \dots,$
# `next_n` $- 1$) would recompute the keys and values of the $\text{context} + j$ earlier
# tokens, $2 \cdot 2 \cdot L \cdot D \cdot KH$ FLOPs per token, for every sequence.

# %% [markdown] tags=["lang-zh"]
# ### kipply 的练习
#
# **练习 1.** 给定一个批次、上下文长度和 `next_n` 个新词元，KV 缓存能省下多少 FLOPs？按她的方式来数：
# 没有缓存时，解码步骤 $j$（$j = 0, \dots,$ `next_n` $- 1$）要重新计算之前 $\text{context} + j$ 个
# 词元的键和值，每个词元 $2 \cdot 2 \cdot L \cdot D \cdot KH$ FLOPs，每个序列都是如此。

# %%
def kv_flops_saved(cfg, batch, context, next_n):
    """Key/value FLOPs a cache saves over `next_n` decode steps."""
    # BEGIN SOLUTION
    per_token = 2 * 2 * cfg.L * cfg.D * cfg.K * cfg.H
    earlier = next_n * context + next_n * (next_n - 1) // 2
    return batch * per_token * earlier
    # END SOLUTION


# %%
check("ch04.kv_flops_saved_fn", kv_flops_saved)

# %% [markdown]
# **Exercise 2.** What does the cache add to each step's memory time? For the 52B model on 4
# GPUs, batch 4, 2,048 tokens each: the time to read the caches.

# %% [markdown] tags=["lang-zh"]
# **练习 2.** 缓存给每一步的内存时间增加了多少？对 52B 模型，4 块 GPU，批次中 4 个序列，每个
# 2,048 个词元：求读取这些缓存的时间。

# %%
# BEGIN SOLUTION
kv_read = 4 * 2048 * kv52 / (4 * a100.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch04.ex2_kv_read_time", kv_read)

# %% [markdown]
# **Exercise 3.** Can the forward pass over the context be memory-bound while every sampling
# step of the same batch is FLOP-bound? Think of the weight matmuls only, and answer `True` or
# `False`.

# %% [markdown] tags=["lang-zh"]
# **练习 3.** 对上下文的前向计算是内存受限的，而同一批次的每个采样步骤却是计算受限的——这可能吗？只
# 考虑权重矩阵乘法，回答 `True` 或 `False`。

# %%
# BEGIN SOLUTION
forward_memory_steps_flops = False   # the forward pass multiplies each weight by B·T ≥ B tokens
# END SOLUTION

# %%
check("ch04.ex3_forward_memory_steps_flops", forward_memory_steps_flops)

# %% [markdown]
# **Exercise 4.** More GPUs than capacity needs: the 52B model on 16 GPUs instead of 4. What is
# its small-batch latency there? (Compare with 4 GPUs: the weight time shrinks fourfold, the
# message latencies do not.)

# %% [markdown] tags=["lang-zh"]
# **练习 4.** GPU 比容量所需的更多：把 52B 模型放在 16 块 GPU 上，而不是 4 块。这时它的小批次延迟是
# 多少？（和 4 块 GPU 比较：权重的时间缩短为四分之一，消息延迟却不变。）

# %%
# BEGIN SOLUTION
latency16 = w52 / (16 * a100.hbm_bytes_per_s) + 4 * m52.L * a100.hop_latency_s
# END SOLUTION

# %%
check("ch04.ex4_latency_16_gpus", latency16)

# %% [markdown]
# **Exercise 5.** The time of a whole sample: prefill the context, then decode. For the 13B
# model on one A100 with 512 tokens of context and 10 new tokens (her FasterTransformer run):
# the prefill takes `step_cost.step_time(phase_time.prefill_step_cost(m13, 512), a100)` (the
# prefill's cost, priced by the library's step time), then decode step $j$
# ($j = 0, \dots, 9$) takes the step time of 2.1 with the cache of $512 + j$ tokens.

# %% [markdown] tags=["lang-zh"]
# **练习 5.** 完整的一次采样所需的时间：先预填充上下文，再解码。对 13B 模型，一块 A100，512 个词元的
# 上下文，10 个新词元（她的 FasterTransformer 运行）：预填充用
# `step_cost.step_time(phase_time.prefill_step_cost(m13, 512), a100)`（预填充的成本，由库的步骤时间
# 公式算出耗时），然后解码步骤 $j$（$j = 0, \dots, 9$）的时间是 2.1 中
# 缓存有 $512 + j$ 个词元时的步骤时间。

# %%
# BEGIN SOLUTION
P13, w13 = counts.param_count(m13), counts.param_bytes(m13)
kv13 = counts.kv_bytes_per_token(m13)
sample = step_cost.step_time(phase_time.prefill_step_cost(m13, 512), a100) + sum(
    step_time(P13, w13, (512 + j) * kv13, 1, a100.bf16_flops_per_s, a100.hbm_bytes_per_s)
    for j in range(10))
# END SOLUTION

# %%
check("ch04.ex5_sample_time", sample)

# %% [markdown]
# **Exercise 6.** How small are the intermediate activations? The largest one of a 2,048-token
# prefill of the 52B model is the MLP's hidden $[T, F]$ in bfloat16. What fraction of the
# weights' bytes is it?

# %% [markdown] tags=["lang-zh"]
# **练习 6.** 中间激活有多小？52B 模型 2,048 个词元的预填充中，最大的中间激活是 MLP 的隐藏层
# $[T, F]$，bfloat16。它是权重字节数的几分之几？

# %%
# BEGIN SOLUTION
intermediate_share = 2048 * m52.F * 2 / w52
# END SOLUTION

# %%
check("ch04.ex6_intermediate_share", intermediate_share)

# %% [markdown]
# **Exercise 7.** A matmul whose $[B, D]$ input must be communicated (2 bytes per number) does
# $2 B D \cdot \text{out}$ FLOPs for $B D \cdot 2$ bytes sent; split over $N$ GPUs each does
# $1/N$ of them. For a narrow model with $D = 512$, how many FLOPs per byte sent does each of 2
# GPUs do in the attention output projection ($\text{out} = D$)? Compare it with what an A100
# needs to hide NVLink: its FLOP/s over NVLink's bytes/s.

# %% [markdown] tags=["lang-zh"]
# **练习 7.** 一个矩阵乘法，如果它的 $[B, D]$ 输入必须经过通信（每个数 2 字节），那么每发送
# $B D \cdot 2$ 字节就做 $2 B D \cdot \text{out}$ FLOPs；分到 $N$ 块 GPU 上，每块做其中的 $1/N$。对一个
# $D = 512$ 的窄模型，在注意力的输出投影中（$\text{out} = D$），2 块 GPU 中的每一块每发送一个字节做
# 多少 FLOPs？把它和 A100 掩盖 NVLink 通信所需的值比较：即它的 FLOP/s 除以 NVLink 的 bytes/s。

# %%
# BEGIN SOLUTION
narrow_o = 2 * 512 / 2 / 2
# END SOLUTION

# %%
check("ch04.ex7_narrow_o_per_gpu", narrow_o)

# %% [markdown]
# **Exercise 8.** Across hosts, AWS offers 400 Gb/s. How many FLOPs must an A100 do per byte it
# sends over such a link to keep communication hidden?

# %% [markdown] tags=["lang-zh"]
# **练习 8.** 跨主机时，AWS 提供 400 Gb/s。A100 经这样的链路每发送一个字节，必须做多少 FLOPs 才能
# 让通信保持隐藏？

# %%
# BEGIN SOLUTION
aws_intensity = a100.bf16_flops_per_s / (400e9 / 8)
# END SOLUTION

# %%
check("ch04.ex8_aws_comm_intensity", aws_intensity)

# %% [markdown]
# **Exercise 9.** Instead of reduce-scatter then all-gather, each GPU could gather every shard
# and add them all itself. How much message latency per step would the 260B model on 16 GPUs
# pay then?

# %% [markdown] tags=["lang-zh"]
# **练习 9.** 不做先规约散射、再全收集，而是让每块 GPU 收集所有分片，自己把它们全部加起来。这样，
# 260B 模型在 16 块 GPU 上每步要付多少消息延迟？

# %%
# BEGIN SOLUTION
allgather_latency = 2 * gopher.L * a100.hop_latency_s
# END SOLUTION

# %%
check("ch04.ex9_latency_all_gather", allgather_latency)

# %% [markdown]
# **Exercise 10.** The large-batch latency of the 52B model on 4 GPUs at batch 256: the FLOP
# time and the communication time (her formula, $(N-1)/N$ rounded to 1). She expects about 21
# ms and 4 ms.

# %% [markdown] tags=["lang-zh"]
# **练习 10.** 52B 模型在 4 块 GPU 上、批量大小为 256 时的大批次延迟：求 FLOP 时间和通信时间（用她的
# 公式，$(N-1)/N$ 取整为 1）。她预计分别约为 21 ms 和 4 ms。

# %%
# BEGIN SOLUTION
P52 = counts.param_count(m52)
ex10_compute = 256 * 2 * P52 / (4 * a100.bf16_flops_per_s)
ex10_comms = 256 * 2 * 4 * m52.L * m52.D / a100.interconnect_bytes_per_s
# END SOLUTION

# %%
check("ch04.ex10_compute", ex10_compute)
check("ch04.ex10_comms", ex10_comms)

# %% [markdown]
# **Exercise 11.** The last step multiplies the final vector by the unembedding matrix and
# samples from the logits. At small batch it is memory-bound: how long does one A100 take to
# read the 52B model's bfloat16 unembedding? (Splitting it over GPUs by vocabulary divides this,
# and each GPU can pre-select its top-k before a small gather.)

# %% [markdown] tags=["lang-zh"]
# **练习 11.** 最后一步把最终的向量乘以反嵌入矩阵，再从 logits 中采样。小批次下它是内存受限的：一块
# A100 读取 52B 模型的 bfloat16 反嵌入矩阵要多久？（把它按词表切分到多块 GPU 上，这个时间就被分摊了；
# 每块 GPU 还可以先选出自己的 top-k，再做一次小规模的收集。）

# %%
# BEGIN SOLUTION
unembed_read = m52.D * m52.V * 2 / a100.hbm_bytes_per_s
# END SOLUTION

# %%
check("ch04.ex11_unembedding_read", unembed_read)

# %% [markdown]
# Exercise 12 — how to shard the embeddings, the unembedding and the norms — asks for a design
# rather than a number; chapter 9 shows the library's answer.

# %% [markdown] tags=["lang-zh"]
# 练习 12——如何对嵌入、反嵌入和归一化层做分片——要的是一个设计，而不是一个数；第 9 章给出了库的答案。

# %%
summary("ch04")
