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
# # Exercises: sampling and the KV cache
#
# These exercises go with [chapter 1](../chapters/01_sampling_kv_cache.py). The first part
# recomputes the numbers of Lienhart's article on KV caching {cite:p}`lienhart2023kvcache`
# from the library's model presets and hardware table; the second counts the work of naive
# and cached generation; the third asks for three small functions the library is built on.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted* for a question you have not answered
# yet. The notebook runs from top to bottom at any stage, and `summary` at the end adds up
# your points. Numbers must be within the tolerance listed in the table below; functions are
# called on random inputs beside the library's own version, each call with a time limit.
#
# On the book's site every solution hides behind a *Show solution* toggle. The notebook you
# open in Colab has no solutions in it. Instructors grade a submitted notebook with
# `inferbook grade NOTEBOOK.ipynb --results results.json`, which also writes a Gradescope
# report.

# %% [markdown] tags=["lang-zh"]
# # 练习：采样与 KV 缓存
#
# 这些练习配合[第 1 章](../chapters/01_sampling_kv_cache.py)。第一部分用库中的模型预设和硬件表，重新
# 计算 Lienhart 关于 KV 缓存的文章 {cite:p}`lienhart2023kvcache` 里的数字；第二部分数一数朴素生成和
# 带缓存生成的工作量；第三部分请你写出三个小函数，库正是建立在它们之上的。
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行它
# 后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示），对还没回答的问题则回答*未作答*。无论做到
# 哪一步，这个笔记本都能从头运行到尾，最后的 `summary` 会把你的得分加起来。数值答案必须落在下表所列
# 的容差之内；函数会在随机输入上与库自己的版本一起调用，每次调用都有时间限制。
#
# 在本书网站上，每个解答都藏在*显示解答*按钮后面。你在 Colab 中打开的笔记本里没有解答。教师用
# `inferbook grade NOTEBOOK.ipynb --results results.json` 为提交的笔记本评分，它还会写出一份
# Gradescope 报告。

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf import counts
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch01")

# %% [markdown]
# ## Part 1: how big is the cache?
#
# A KV cache holds, for every token of every sequence, one key vector and one value vector of
# $H$ numbers for each of the $K$ key/value heads of each of the $L$ layers. The article sizes
# it for a small and a large model with multi-head attention ($K = N$): Meta's Llama-2-7B and
# BigScience's BLOOM-176B, both stored in 16-bit floats (2 bytes per number), and asks how much
# of an NVIDIA A10 — a 24 GB GPU popular for its price — is left for the cache once the weights
# are loaded. Here is everything you need:

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：缓存有多大？
#
# KV 缓存为每个序列的每个词元（token），在 $L$ 层中每一层的 $K$ 个键/值头上，各保存一个键向量和一个值向量，
# 每个向量有 $H$ 个数。那篇文章为一小一大两个采用多头注意力（$K = N$）的模型估算了缓存的大小：Meta 的
# Llama-2-7B 和 BigScience 的 BLOOM-176B，二者都以 16 位浮点数存储（每个数 2 字节）。文章还问：把权重
# 加载进 NVIDIA A10——一款以价格实惠著称、内存 24 GB 的 GPU——之后，还剩多少留给缓存？你需要的一切
# 都在这里：

# %%
llama = get_preset("llama-2-7b")
bloom = get_preset("bloom-176b")
a10 = get_chip("A10")
for cfg in (llama, bloom):
    print(f"{cfg.name:11s} L={cfg.L}, K={cfg.K}, H={cfg.H}, D={cfg.D}, V={cfg.V}; "
          f"{counts.param_count(cfg):,} parameters")
print(f"{a10.name}: hbm_bytes={a10.hbm_bytes:,.0f}  hbm_bytes_per_s={a10.hbm_bytes_per_s:,.0f}")
print(f"     bf16_flops_per_s={a10.bf16_flops_per_s:,.0f}")

# %% [markdown]
# **1.1** How many bytes of cache does one token of Llama-2-7B take, at 2 bytes per number?
# Write the formula with the preset's fields rather than reading the answer off
# `counts.kv_bytes_per_token` (the check compares with it).

# %% [markdown] tags=["lang-zh"]
# **1.1** 每个数 2 字节时，Llama-2-7B 的一个词元要占多少字节的缓存？请用预设的字段写出公式，而不要
# 直接从 `counts.kv_bytes_per_token` 读出答案（检查会与它比较）。

# %%
# BEGIN SOLUTION
kv_bytes_llama = 2 * llama.L * llama.K * llama.H * 2      # a key and a value, per layer and head
# END SOLUTION

# %%
check("ch01.kv_bytes_per_token_llama_2_7b", kv_bytes_llama)

# %% [markdown]
# **1.2** The same for BLOOM-176B.

# %% [markdown] tags=["lang-zh"]
# **1.2** 对 BLOOM-176B 算同样的数。

# %%
# BEGIN SOLUTION
kv_bytes_bloom = 2 * bloom.L * bloom.K * bloom.H * 2
# END SOLUTION

# %%
check("ch01.kv_bytes_per_token_bloom_176b", kv_bytes_bloom)

# %% [markdown]
# **1.3** Load Llama-2-7B's weights (2 bytes each) onto an A10. How many tokens of cache fit in
# the memory that is left? Count the parameters exactly (`counts.param_count`), and round
# down: a token's keys and values are stored whole or not at all.

# %% [markdown] tags=["lang-zh"]
# **1.3** 把 Llama-2-7B 的权重（每个 2 字节）加载到 A10 上。剩下的内存能放下多少个词元的缓存？请精确地
# 数出参数的个数（`counts.param_count`），并向下取整：一个词元的键和值要么整个存下，要么不存。

# %%
# BEGIN SOLUTION
weight_bytes = counts.param_count(llama) * 2
a10_tokens = (a10.hbm_bytes - weight_bytes) // kv_bytes_llama
# END SOLUTION

# %%
check("ch01.a10_tokens_after_weights", a10_tokens)

# %% [markdown]
# That budget is shared by every sequence served at once, prompts and answers together: a few
# dozen conversations of a few hundred tokens each, on a GPU that holds the model comfortably.
#
# **1.4** After how many tokens does the cache of Llama-2-7B weigh as much as its weights?

# %% [markdown] tags=["lang-zh"]
# 这份预算由同时服务的所有序列共享，提示词和回答都算在内：在一块能轻松装下模型的 GPU 上，也只够
# 几十段、每段几百个词元的对话。
#
# **1.4** Llama-2-7B 的缓存要积累多少个词元，才与它的权重一样大？

# %%
# BEGIN SOLUTION
tokens_like_weights = counts.param_count(llama) * 2 / kv_bytes_llama
# END SOLUTION

# %%
check("ch01.weights_in_tokens", tokens_like_weights)

# %% [markdown] tags=["solution"]
# The article answers this with round numbers: 14 GB of weights over half a megabyte per
# token. The weights are rounded up — the model has fewer than seven billion parameters. Half
# a megabyte is a token's exact size in binary units and rounds it down in decimal ones (a
# token takes a little more than half a decimal megabyte). Either way the quotient comes out
# too high: a larger numerator, a denominator no larger. The library's exact counts avoid that
# (the errata page has the numbers).

# %% [markdown] tags=["solution", "lang-zh"]
# 那篇文章用的是凑整的数：14 GB 的权重除以每个词元半兆字节。权重被往上凑了整——这个模型的参数其实
# 不到七十亿。半兆字节在二进制单位下恰好是一个词元的大小，在十进制单位下却把它往下凑了整（一个词元
# 略多于十进制的半兆字节）。两处凑整都让商偏大：分子更大，分母却没有更大。库的精确计数避免了这个
# 问题（勘误页上有具体的数）。

# %% [markdown]
# **1.5** A user sends a prompt of 1,000 tokens (a little under two pages). How many bytes of
# cache does its prefill write?

# %% [markdown] tags=["lang-zh"]
# **1.5** 一位用户发来一个 1,000 个词元的提示词（不到两页纸）。它的预填充要写入多少字节的缓存？

# %%
# BEGIN SOLUTION
prompt_kv_bytes = 1000 * kv_bytes_llama
# END SOLUTION

# %%
check("ch01.prompt_kv_bytes", prompt_kv_bytes)

# %% [markdown]
# **1.6** And how many FLOPs does that prefill cost, by the rule of thumb of 2 FLOPs per
# parameter per token? Count as parameters the weights that multiply activations — every
# matrix, the output projection included — but not the embedding table (a lookup) or the
# normalisation gains.

# %% [markdown] tags=["lang-zh"]
# **1.6** 按照“每个参数每个词元 2 FLOPs”的经验法则，这次预填充要花多少 FLOPs？把与激活相乘的权重
# 算作参数——每一个矩阵，包括输出投影——但不算嵌入表（它只是查表）和归一化的增益。

# %%
# BEGIN SOLUTION
multiplying = counts.param_count(llama) - llama.V * llama.D - (2 * llama.L + 1) * llama.D
prompt_flops = 2 * multiplying * 1000
# END SOLUTION

# %%
check("ch01.prompt_flops", prompt_flops)

# %% [markdown]
# This is why providers charge for input tokens: before the first word of the answer, the
# prompt has already taken memory (1.5) and compute (1.6).
#
# ## Part 2: the work of naive and cached generation
#
# The library's estimator counts one forward pass of $T$ new tokens per sequence, each attending
# to $S$ keys, with the logits computed for a single position, as
#
# $$2\,W\,T \;+\; 4\,L\,N\,H\,T\,S \;+\; 2\,D\,V,$$
#
# where $W$ is the number of weights in the attention and MLP blocks of all layers
# ($D \times NH$ for $W_Q$ and $W_O$ each, $D \times KH$ for $W_K$ and $W_V$ each, three
# $D \times F$ matrices for the gated MLP), the middle term is the two attention products
# ($QK^\top$ and the weighted sum of values, each $2 T S H$ per head and layer), and the last
# is the unembedding of one position.
#
# **2.1** A sequence holds 1,000 tokens and we want the distribution of the next one.
# Without a cache, the model runs over all 1,000 tokens ($T = S = 1000$). With a cache, only
# the last token runs, against the keys of all 1,000 ($T = 1$, $S = 1000$). Count the FLOPs of
# both for Llama-2-7B.

# %% [markdown] tags=["lang-zh"]
# 这就是服务商对输入词元收费的原因：在回答的第一个字出现之前，提示词已经占用了内存（1.5）和算力
# （1.6）。
#
# ## 第二部分：朴素生成与带缓存生成的工作量
#
# 库的估算器把一次前向计算——每个序列 $T$ 个新词元，每个词元关注 $S$ 个键，只为一个位置计算
# logits——的 FLOPs 计为
#
# $$2\,W\,T \;+\; 4\,L\,N\,H\,T\,S \;+\; 2\,D\,V,$$
#
# 其中 $W$ 是所有层中注意力块和 MLP 块的权重个数（$W_Q$ 和 $W_O$ 各 $D \times NH$，$W_K$ 和 $W_V$ 各
# $D \times KH$，门控 MLP 有三个 $D \times F$ 矩阵），中间一项是两次注意力乘积（$QK^\top$ 和值的
# 加权和，每个头、每层各 $2 T S H$），最后一项是一个位置的反嵌入。
#
# **2.1** 一个序列有 1,000 个词元，我们想要下一个词元的分布。没有缓存时，模型要处理全部 1,000 个词元
# （$T = S = 1000$）。有缓存时，只需处理最后一个词元，对着全部 1,000 个键（$T = 1$，$S = 1000$）。
# 请为 Llama-2-7B 分别算出两者的 FLOPs。

# %%
# BEGIN SOLUTION
def step_flops(cfg, T, S):
    """FLOPs of one forward pass: T new tokens against S keys, one position unembedded."""
    W = cfg.L * (2 * cfg.D * cfg.N * cfg.H + 2 * cfg.D * cfg.K * cfg.H + 3 * cfg.D * cfg.F)
    return 2 * W * T + 4 * cfg.L * cfg.N * cfg.H * T * S + 2 * cfg.D * cfg.V


naive_step = step_flops(llama, 1000, 1000)
cached_step = step_flops(llama, 1, 1000)
# END SOLUTION

# %%
check("ch01.naive_step_flops", naive_step)
check("ch01.cached_step_flops", cached_step)

# %% [markdown]
# **2.2** Now generate 1,000 new tokens after a prompt of 100. Naively, step $i$
# ($i = 0, \dots, 999$) runs the model over all $100 + i$ tokens. With the cache, a prefill
# runs over the 100 prompt tokens once, then each step $i = 1, \dots, 999$ runs one token
# against $100 + i$ keys. How many times more FLOPs does naive generation take in total?

# %% [markdown] tags=["lang-zh"]
# **2.2** 现在在 100 个词元的提示词之后生成 1,000 个新词元。朴素的做法中，第 $i$ 步
# （$i = 0, \dots, 999$）让模型处理全部 $100 + i$ 个词元。有缓存时，预填充先把 100 个提示词元处理一遍，
# 然后每一步 $i = 1, \dots, 999$ 用一个词元对着 $100 + i$ 个键计算。朴素生成的 FLOPs 总数是带缓存生成
# 的多少倍？

# %%
# BEGIN SOLUTION
p, n = 100, 1000
naive_total = sum(step_flops(llama, p + i, p + i) for i in range(n))
cached_total = step_flops(llama, p, p) + sum(step_flops(llama, 1, p + i) for i in range(1, n))
flops_ratio = naive_total / cached_total
# END SOLUTION

# %%
check("ch01.generation_flops_ratio", flops_ratio)

# %% [markdown]
# **2.3** A decode step at batch size 1 multiplies each 2-byte weight once, by one token: 2
# FLOPs per weight. Is that step memory-bound on an A10 — does it perform fewer FLOPs per byte
# it reads than the A10 can perform per byte it can read? Answer `True` or `False`, computed from
# the chip's numbers.

# %% [markdown] tags=["lang-zh"]
# **2.3** 批量大小为 1 的解码步骤，把每个 2 字节的权重与一个词元相乘一次：每个权重 2 FLOPs。在 A10 上
# 这一步是内存受限的吗——也就是说，它每读一个字节所做的 FLOPs，是否少于 A10 每读一个字节的时间里所能
# 做的 FLOPs？请根据芯片的数字算出 `True` 或 `False` 作为答案。

# %%
# BEGIN SOLUTION
flops_per_byte = 2 / 2
memory_bound = flops_per_byte < a10.bf16_flops_per_s / a10.hbm_bytes_per_s
# END SOLUTION

# %%
check("ch01.decode_memory_bound", memory_bound)

# %% [markdown]
# ## Part 3: three functions the library is built on
#
# Each function below is called by its check on a few random inputs, and its output compared
# with the library's (the check never shows you the library's output, but the hints say what
# to look for). JAX arrays cannot be changed in place: build new ones, with
# `x.at[index].set(values)` or `jax.lax.dynamic_update_slice`. Plain NumPy works too — return
# an array either way.
#
# **3.1 Writing to the cache.** The library keeps each layer's keys in an array
# `cache_BKSH` of shape $[B, K, S, H]$: sequence $b$, KV head $k$, slot $s$. A step computes
# `new_BTKH`, shape $[B, T, K, H]$, for $T$ new tokens per sequence, and sequence $b$ must
# store them in slots `start_B[b]`, …, `start_B[b]` $+ T - 1$ — each sequence of a batch
# starts at its own position. Return the updated cache (every write fits: no slot beyond $S$).

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：库赖以建立的三个函数
#
# 下面的每个函数都会由它的检查在几组随机输入上调用，并把输出与库的输出比较（检查不会给你看库的输出，
# 但提示会告诉你该留意什么）。JAX 数组不能原地修改：用 `x.at[index].set(values)` 或
# `jax.lax.dynamic_update_slice` 构造新数组。纯 NumPy 也可以——两种情况下都返回一个数组即可。
#
# **3.1 写入缓存。** 库把每一层的键保存在形状为 $[B, K, S, H]$ 的数组 `cache_BKSH` 中：序列 $b$、
# KV 头 $k$、槽位 $s$。一步计算为每个序列的 $T$ 个新词元算出形状为 $[B, T, K, H]$ 的 `new_BTKH`，
# 序列 $b$ 必须把它们存进槽位 `start_B[b]`、…、`start_B[b]` $+ T - 1$——批次中的每个序列都从自己的
# 位置开始。返回更新后的缓存（每次写入都放得下：不会写到 $S$ 之外的槽位）。

# %%
def write_kv(cache_BKSH, new_BTKH, start_B):
    """The cache with sequence b's T new entries at slots start_B[b] ... start_B[b] + T - 1."""
    # BEGIN SOLUTION
    out = cache_BKSH
    for b in range(cache_BKSH.shape[0]):
        block_1KTH = new_BTKH[b].transpose(1, 0, 2)[None].astype(out.dtype)
        out = jax.lax.dynamic_update_slice(out, block_1KTH, (b, 0, start_B[b], 0))
    return out
    # END SOLUTION


# %%
check("ch01.write_kv", write_kv)

# %% [markdown]
# **3.2 Merging two partial attentions.** Split the keys of a query into two disjoint parts —
# the cache and the new tokens, or two chunks of a long cache — and compute attention over
# each part on its own. Part $i$ gives an output $o_i$, already normalised over its own keys,
# and the log-sum-exp $\ell_i = \log \sum_{s \in \text{part } i} e^{x_s}$ of its scores. Over
# all keys together,
#
# $$\ell = \log\left(e^{\ell_1} + e^{\ell_2}\right), \qquad
#   o = e^{\ell_1 - \ell}\, o_1 + e^{\ell_2 - \ell}\, o_2 .$$
#
# Write `merge`, for outputs of shape $[B, T, N, H]$ and log-sum-exps of shape $[B, T, N]$;
# return `(out, lse)`. The log-sum-exps may be in the thousands (so $e^{\ell}$ overflows, even
# in float64) or $-10^{30}$, the library's stand-in for "no visible key in this part".

# %% [markdown] tags=["lang-zh"]
# **3.2 合并两个部分注意力。** 把一个查询的键分成两个不相交的部分——缓存和新词元，或者一段长缓存的两个
# 分块——在每一部分上单独计算注意力。第 $i$ 部分给出一个输出 $o_i$（已经在它自己的键上归一化），以及
# 它的分数的 LSE（指数和的对数）$\ell_i = \log \sum_{s \in \text{part } i} e^{x_s}$。在全部键上，
#
# $$\ell = \log\left(e^{\ell_1} + e^{\ell_2}\right), \qquad
#   o = e^{\ell_1 - \ell}\, o_1 + e^{\ell_2 - \ell}\, o_2 .$$
#
# 请写出 `merge`，它的输入是形状为 $[B, T, N, H]$ 的输出和形状为 $[B, T, N]$ 的 LSE；返回
# `(out, lse)`。LSE 可能大到几千（于是 $e^{\ell}$ 会溢出，即使用 float64 也一样），也可能是
# $-10^{30}$——库用它表示“这一部分里没有可见的键”。

# %%
def merge(out1_BTNH, lse1_BTN, out2_BTNH, lse2_BTN):
    """Attention over the union of two disjoint sets of keys, from attention over each."""
    # BEGIN SOLUTION
    m_BTN = jnp.maximum(lse1_BTN, lse2_BTN)
    w1_BTN, w2_BTN = jnp.exp(lse1_BTN - m_BTN), jnp.exp(lse2_BTN - m_BTN)
    total_BTN = w1_BTN + w2_BTN
    out = (out1_BTNH * w1_BTN[..., None] + out2_BTNH * w2_BTN[..., None]) / total_BTN[..., None]
    return out, m_BTN + jnp.log(total_BTN)
    # END SOLUTION


# %%
check("ch01.merge_attention", merge)

# %% [markdown]
# **3.3 Top-k and top-p.** Before sampling, the library narrows the choice of each row of
# logits `logits_BV` ($[B, V]$). *Top-k* keeps the `top_k` largest logits. *Top-p* (nucleus)
# then takes the tokens still kept in decreasing order of probability (the softmax of the
# kept logits) and keeps each token while the probability mass *before* it is still below
# `top_p` — so the first token always stays, and the kept set is the smallest whose mass
# reaches `top_p`. Either may be `None` (off). Return the logits with every token that is not
# kept set to `-inf`. (No two logits of a row are equal.)

# %% [markdown] tags=["lang-zh"]
# **3.3 Top-k 与 top-p。** 在采样之前，库会为 logits `logits_BV`（$[B, V]$）的每一行缩小选择的范围。
# *Top-k* 保留最大的 `top_k` 个 logits。*Top-p*（核采样）接着把仍被保留的词元按概率（被保留的 logits
# 的 softmax）从大到小排列，只要某个词元*之前*的概率质量仍小于 `top_p`，就保留它——所以第一个词元
# 总会保留，保留下来的集合是质量达到 `top_p` 的最小集合。两者都可以是 `None`（关闭）。返回 logits，
# 把所有未被保留的词元设为 `-inf`。（同一行中没有两个相等的 logits。）

# %%
def filter_logits(logits_BV, top_k=None, top_p=None):
    """The logits, with the tokens outside the top-k / top-p support set to -inf."""
    # BEGIN SOLUTION
    logits = np.array(logits_BV, dtype=np.float32)
    for row in logits:
        order = np.argsort(-row)                       # token ids, largest logit first
        kept = order[: len(row) if top_k is None else top_k]
        if top_p is not None:
            probs = np.exp(row[kept] - row[kept[0]])
            probs /= probs.sum()
            kept = kept[np.cumsum(probs) - probs < top_p]
        removed = np.ones(len(row), bool)
        removed[kept] = False
        row[removed] = -np.inf
    return logits
    # END SOLUTION


# %%
check("ch01.filter_logits", filter_logits)

# %% [markdown]
# ## Your score

# %% [markdown] tags=["lang-zh"]
# ## 你的得分

# %%
summary("ch01")
