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
# # Exercises: how big is the KV cache, and how to shrink it
#
# These exercises go with [chapter 5](../chapters/05_kv_cache_size.py). Part 1 sizes the cache
# of multi-head, grouped-query and multi-query models and asks what fits on a chip; part 2 pulls
# each lever of the cache's size in turn — sliding windows, layers that share a cache, an int8
# cache, paging, sharding, offloading — following the second half of Lienhart's article on KV
# caching {cite:p}`lienhart2023kvcache` and the scaling book's list of tricks
# {cite:p}`austin2025scaling`; part 3 asks for two functions. (The article's first numbers —
# Llama-2-7B and BLOOM-176B per token, the A10's capacity — are in the
# [chapter 1 exercises](01_sampling_kv_cache.py).)
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint) or *not attempted*. The notebook runs top to bottom at any
# stage, and `summary` at the end adds up your points, with each question's tolerance. Chips
# come from `inferbook.perf.hardware` and models from the presets, in decimal units (24 GB = 24e9
# bytes); every cached number is 2 bytes (bfloat16) unless a question says otherwise.

# %% [markdown] tags=["lang-zh"]
# # 练习：KV 缓存有多大，又如何缩小
#
# 这些练习配合[第 5 章](../chapters/05_kv_cache_size.py)。第一部分计算多头、分组查询和多查询模型的缓存
# 大小，并问一块芯片上放得下多少；第二部分依次拉动决定缓存大小的每一根杠杆——滑动窗口、共享缓存的层、
# int8 缓存、分页、分片、卸载——依据的是 Lienhart 关于 KV 缓存的文章的后半部分
# {cite:p}`lienhart2023kvcache`，以及《How to Scale Your Model》列出的各种技巧 {cite:p}`austin2025scaling`；第三部分
# 请你写两个函数。（那篇文章最开始的几个数——Llama-2-7B 和 BLOOM-176B 每个词元（token）的缓存、A10 的容量——在
# [第 1 章的练习](01_sampling_kv_cache.py)里。）
#
# **怎么做。** 把每个 `...` 换成你的答案，把每个 `raise NotImplementedError` 换成你的代码，然后运行它
# 后面的那个单元格：`check` 会回答*通过*、*未通过*（附提示）或*未作答*。无论做到哪一步，这个笔记本都能
# 从头运行到尾，最后的 `summary` 会把你的得分加起来，并列出每道题的容差。芯片的数据来自
# `inferbook.perf.hardware`，模型来自预设，一律用十进制单位（24 GB = 24e9 字节）；除非题目另有说明，
# 每个缓存的数都占 2 字节（bfloat16）。

# %%
import inferbook

info = inferbook.setup()

import math

from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf import counts
from inferbook.perf.hardware import get_chip

print(info.describe())
models = {name: get_preset(name) for name in
          ("llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "mistral-7b", "falcon-7b")}
for cfg in models.values():
    print(f"{cfg.name:12s} L={cfg.L:3d} N={cfg.N:3d} K={cfg.K:3d} H={cfg.H:4d} "
          f"window={cfg.window}  {counts.param_count(cfg):,} parameters")
a10, h100 = get_chip("A10"), get_chip("H100 SXM")
print(f"A10: {a10.hbm_bytes:.3g} B; H100 SXM: {h100.hbm_bytes:.3g} B")

# %% [markdown]
# ## Part 1: the size of the cache
#
# For each token, each of the $L$ layers caches a key and a value vector of $H$ numbers per
# key/value head. Multi-head attention (MHA) has a KV head for every query head, $K = N$;
# grouped-query attention (GQA) shares each KV head among $G = N/K$ query heads; multi-query
# attention (MQA) has a single one, $K = 1$ {cite:p}`shazeer2019mqa,ainslie2023gqa`. The query
# heads never enter the cache.
#
# **1.1** How many bytes of cache per token do LLaMA-2 13B (MHA), LLaMA-2 70B (GQA) and
# Falcon-7B (MQA) store?

# %% [markdown] tags=["lang-zh"]
# ## 第一部分：缓存的大小
#
# 对每个词元，$L$ 层中的每一层都为每个键/值头缓存一个键向量和一个值向量，每个向量有 $H$ 个数。多头注意力
# （MHA）为每个查询头配一个 KV 头，$K = N$；分组查询注意力（GQA）让 $G = N/K$ 个查询头共用一个 KV 头；
# 多查询注意力（MQA）只有一个 KV 头，$K = 1$ {cite:p}`shazeer2019mqa,ainslie2023gqa`。查询头从不进入
# 缓存。
#
# **1.1** LLaMA-2 13B（MHA）、LLaMA-2 70B（GQA）和 Falcon-7B（MQA）每个词元各存多少字节的缓存？

# %%
# BEGIN SOLUTION
def kv_per_token(cfg, bytes_per_number=2):
    """Cache bytes of one token: a key and a value per KV head per layer."""
    return 2 * cfg.L * cfg.K * cfg.H * bytes_per_number


kv_13b = kv_per_token(models["llama-2-13b"])
kv_70b = kv_per_token(models["llama-2-70b"])
kv_falcon = kv_per_token(models["falcon-7b"])
# END SOLUTION

# %%
check("ch05.kv_per_token_llama_2_13b", kv_13b)
check("ch05.kv_per_token_llama_2_70b", kv_70b)
check("ch05.kv_per_token_falcon_7b", kv_falcon)

# %% [markdown]
# **1.2** Lienhart notes that Llama-2-7B's weights weigh as much as the cache of "a batch of 56
# sequences of 512 tokens". With exact counts (`counts.param_count`, 2 bytes per weight): how
# many whole sequences of 512 tokens have a cache no heavier than the weights?

# %% [markdown] tags=["lang-zh"]
# **1.2** Lienhart 指出，Llama-2-7B 的权重与“一个由 56 条 512 个词元的序列组成的批次”的缓存一样大。
# 用精确的计数（`counts.param_count`，每个权重 2 字节）算一算：缓存不超过权重大小的 512 个词元的序列，最多
# 有多少条（只算整条）？

# %%
# BEGIN SOLUTION
l7 = models["llama-2-7b"]
sequences_512 = math.floor(counts.param_count(l7) * 2 / (512 * kv_per_token(l7)))
# END SOLUTION

# %%
check("ch05.l7_sequences_of_512", sequences_512)

# %% [markdown]
# **1.3 What fits.** How many requests of 4,096 tokens can an A10 serve at once with
# Llama-2-7B? How long a single context can it hold for LLaMA-3 8B, a slightly larger model with
# a quarter of the KV heads?

# %% [markdown] tags=["lang-zh"]
# **1.3 放得下多少。** 用 Llama-2-7B 时，一块 A10 能同时服务多少个 4,096 个词元的请求？换成 LLaMA-3
# 8B——一个稍大、但 KV 头只有四分之一的模型——它能容纳的单个上下文最长是多少个词元？

# %%
# BEGIN SOLUTION
a10_batch = math.floor((a10.hbm_bytes - counts.param_count(l7) * 2) / (4096 * kv_per_token(l7)))
l3 = models["llama-3-8b"]
a10_l3_tokens = math.floor((a10.hbm_bytes - counts.param_count(l3) * 2) / kv_per_token(l3))
# END SOLUTION

# %%
check("ch05.a10_batch_4096", a10_batch)
check("ch05.a10_tokens_llama_3_8b", a10_l3_tokens)

# %% [markdown]
# **1.4 What GQA buys.** On 8 H100s (their memory pooled), how many requests of 4,096 tokens
# fit with LLaMA-2 70B? And with a multi-head variant of it ($K = N = 64$), whose $W_K$ and $W_V$
# — and so its weights — are larger too?

# %% [markdown] tags=["lang-zh"]
# **1.4 GQA 换来了什么。** 在 8 块 H100 上（它们的内存合起来用），LLaMA-2 70B 放得下多少个 4,096 个
# 词元的请求？换成它的多头变体（$K = N = 64$）呢？这个变体的 $W_K$ 和 $W_V$——因而它的权重——也更大。

# %%
# BEGIN SOLUTION
def fits(cfg, chip, context, chips):
    free = chips * chip.hbm_bytes - counts.param_count(cfg) * 2
    return max(0, math.floor(free / (context * kv_per_token(cfg))))


l70 = models["llama-2-70b"]
h100_batch_gqa = fits(l70, h100, 4096, 8)
h100_batch_mha = fits(l70.replace(K=l70.N), h100, 4096, 8)
# END SOLUTION

# %%
check("ch05.h100x8_batch_llama_2_70b", h100_batch_gqa)
check("ch05.h100x8_batch_mha_70b", h100_batch_mha)

# %%
summary("ch05")

# %% [markdown]
# ## Part 2: the levers
#
# **2.1 A sliding window.** Mistral 7B's layers attend only to the last 4,096 positions, so each
# layer keeps at most 4,096 tokens in a ring buffer. How many bytes of cache does one sequence
# of 32,768 tokens hold?

# %% [markdown] tags=["lang-zh"]
# ## 第二部分：各根杠杆
#
# **2.1 滑动窗口。** Mistral 7B 的各层只关注最近的 4,096 个位置，所以每一层在一个环形缓冲区里最多保留
# 4,096 个词元。一条 32,768 个词元的序列占多少字节的缓存？

# %%
# BEGIN SOLUTION
mistral = models["mistral-7b"]
mistral_32k = min(mistral.window, 32768) * kv_per_token(mistral)
# END SOLUTION

# %%
check("ch05.mistral_window_32k", mistral_32k)

# %% [markdown]
# **2.2 Local and global layers.** Give LLaMA-3 8B's 32 layers the pattern of five local layers
# (window 1,024) followed by one global layer, repeated from the first layer (so layers 6, 12,
# …, 30 — counting from 1 — are global). At 32,768 tokens, what fraction of the all-global
# cache does it keep?

# %% [markdown] tags=["lang-zh"]
# **2.2 局部层与全局层。** 给 LLaMA-3 8B 的 32 层套上这样的模式：五个局部层（窗口 1,024）之后跟一个
# 全局层，从第一层起重复（于是从 1 数起，第 6、12、…、30 层是全局层）。在 32,768 个词元时，它保留的
# 缓存占全部为全局层时的几分之几？

# %%
# BEGIN SOLUTION
pattern = [None if (i + 1) % 6 == 0 else 1024 for i in range(l3.L)]
kept = sum(32768 if w is None else min(w, 32768) for w in pattern)
mixed_share = kept / (l3.L * 32768)
# END SOLUTION

# %%
check("ch05.mixed_5_to_1_share", mixed_share)

# %% [markdown]
# **2.3 Sharing across layers.** Let groups of 3 adjacent layers of LLaMA-3 8B use one cache
# (the first layer of each group computes it, the other two read it). How many bytes per token
# does the model cache now? The scaling book warns that the step may not get faster: a shared
# cache is still read once per layer that uses it.

# %% [markdown] tags=["lang-zh"]
# **2.3 跨层共享。** 让 LLaMA-3 8B 每 3 个相邻的层组成一组，共用一份缓存（每组的第一层计算它，另外
# 两层读取它）。现在模型每个词元缓存多少字节？《How to Scale Your Model》提醒，这一步未必会变快：共享的缓存仍要被
# 每个使用它的层各读一遍。

# %%
# BEGIN SOLUTION
shared_per_token = kv_per_token(l3) / l3.L * math.ceil(l3.L / 3)
# END SOLUTION

# %%
check("ch05.shared_by_3_per_token", shared_per_token)

# %% [markdown]
# **2.4 Fewer bytes per number.** The library's int8 cache stores each $H$-vector as $H$
# one-byte codes and a float32 scale. How many bytes does one cached number cost with $H = 128$?
# Keeping Llama-2-7B's weights in bfloat16, how many tokens of such a cache fit on an A10?

# %% [markdown] tags=["lang-zh"]
# **2.4 每个数少用几个字节。** 库中的 int8 缓存把每个 $H$ 维向量存成 $H$ 个单字节的编码，外加一个
# float32 的缩放因子。$H = 128$ 时，每个缓存的数要花多少字节？Llama-2-7B 的权重仍用 bfloat16，一块 A10
# 上放得下多少个词元的这种缓存？

# %%
# BEGIN SOLUTION
bpe_int8 = 1 + 4 / l7.H
int8_tokens = math.floor((a10.hbm_bytes - counts.param_count(l7) * 2)
                         / kv_per_token(l7, bpe_int8))
# END SOLUTION

# %%
check("ch05.int8_bytes_per_element", bpe_int8)
check("ch05.int8_a10_tokens", int8_tokens)

# %% [markdown]
# **2.5 Paging.** Five requests end up with 300, 1,200, 45, 800 and 17 tokens. An allocator that
# reserves a contiguous 2,048-slot region per request (the maximum length) wastes most of it;
# PagedAttention {cite:p}`kwon2023pagedattention` hands out pages of 16 slots as tokens arrive.
# In each case, what fraction of the slots held by the requests contains a token?

# %% [markdown] tags=["lang-zh"]
# **2.5 分页。** 五个请求最终分别有 300、1,200、45、800 和 17 个词元。一个分配器若为每个请求预留一段
# 连续的 2,048 个槽位（最大长度），就会浪费其中的大部分；PagedAttention {cite:p}`kwon2023pagedattention`
# 则随着词元的到来一页一页地分配，每页 16 个槽位。两种情况下，各请求占用的槽位中有多大比例装着词元？

# %%
lengths = [300, 1200, 45, 800, 17]

# %%
# BEGIN SOLUTION
used_max = sum(lengths) / (len(lengths) * 2048)
used_paged = sum(lengths) / sum(math.ceil(n / 16) * 16 for n in lengths)
# END SOLUTION

# %%
check("ch05.max_reservation_used", used_max)
check("ch05.paged_used", used_paged)

# %% [markdown]
# **2.6 More devices.** Tensor parallelism splits the cache by KV heads. Falcon-7B has one, and a
# head cannot be split. Serving a batch of 64 sequences of 4,096 tokens on 8 GPUs, how many bytes
# of cache does each GPU hold if the cache is split by heads? (Splitting by sequence instead
# would divide the cache by 8.)

# %% [markdown] tags=["lang-zh"]
# **2.6 更多设备。** 张量并行按 KV 头切分缓存。Falcon-7B 只有一个 KV 头，而一个头是不能切开的。在 8 块
# GPU 上服务一个由 64 条 4,096 个词元的序列组成的批次，若按头切分缓存，每块 GPU 存多少字节的缓存？
# （改为按序列切分，缓存就会除以 8。）

# %%
# BEGIN SOLUTION
falcon = models["falcon-7b"]
mqa_per_gpu = 64 * 4096 * 2 * falcon.L * math.ceil(falcon.K / 8) * falcon.H * 2
# END SOLUTION

# %%
check("ch05.mqa_head_sharded_per_gpu", mqa_per_gpu)

# %% [markdown]
# **2.7 Offloading.** Keep the cache in host memory and stream it to the GPU at every step, as
# FlexGen does {cite:p}`sheng2023flexgen`. How many times longer does reading a 4,096-token
# Llama-2-7B cache take over a PCIe 4.0 x16 link (one way) than from an A100 80GB's own memory?

# %% [markdown] tags=["lang-zh"]
# **2.7 卸载。** 像 FlexGen 那样 {cite:p}`sheng2023flexgen`，把缓存放在主机内存里，每一步再把它传到
# GPU 上。经 PCIe 4.0 x16 链路（单向）读取一份 4,096 个词元的 Llama-2-7B 缓存，所需时间是从 A100 80GB
# 自己的内存中读取的多少倍？

# %%
pcie = get_chip("A10").link_bytes_per_s          # the registry's PCIe 4.0 x16, one way
a100 = get_chip("A100 80GB")
print(f"PCIe 4.0 x16: {pcie:.3g} B/s; A100 80GB HBM: {a100.hbm_bytes_per_s:.4g} B/s")

# %%
# BEGIN SOLUTION
cache_4k = 4096 * kv_per_token(l7)
offload_slowdown = (cache_4k / pcie) / (cache_4k / a100.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch05.offload_slowdown", offload_slowdown)

# %% [markdown]
# ## Part 3: two functions
#
# **3.1 The largest batch.** Return the largest batch of sequences of `context` tokens whose
# caches fit, beside the weights, in the memory of `chips` chips — `weight_bytes` per parameter
# (count them with `counts.param_count`), `kv_bytes` per cached number. Return 0 when the
# weights alone do not fit. The check compares with `roofline.max_batch` on random models and
# chips.

# %% [markdown] tags=["lang-zh"]
# ## 第三部分：两个函数
#
# **3.1 最大的批次。** 返回最大的批次：每条序列有 `context` 个词元，它们的缓存与权重一起放进 `chips`
# 块芯片的内存——每个参数占 `weight_bytes` 字节（用 `counts.param_count` 数参数），每个缓存的数占
# `kv_bytes` 字节。如果单是权重就放不下，返回 0。检查会在随机的模型和芯片上与 `roofline.max_batch`
# 比较。

# %%
def max_batch(cfg, chip, context, chips, weight_bytes, kv_bytes):
    """Sequences of `context` tokens that fit beside the weights on `chips` chips."""
    # BEGIN SOLUTION
    free = chips * chip.hbm_bytes - counts.param_count(cfg) * weight_bytes
    per_sequence = context * 2 * cfg.L * cfg.K * cfg.H * kv_bytes
    return max(0, math.floor(free / per_sequence))
    # END SOLUTION


# %%
check("ch05.max_batch_fn", max_batch)

# %% [markdown]
# **3.2 A model of local and global layers.** `windows` has one entry per layer: a window length
# for a local layer, `None` for a global one. Return the bytes of one sequence's cache after
# `seq_len` tokens, with `bytes_per_number` bytes per cached number.

# %% [markdown] tags=["lang-zh"]
# **3.2 由局部层和全局层组成的模型。** `windows` 为每一层给出一项：局部层是它的窗口长度，全局层是
# `None`。返回一条序列在 `seq_len` 个词元之后的缓存字节数，每个缓存的数占 `bytes_per_number` 字节。

# %%
def window_kv_bytes(cfg, windows, seq_len, bytes_per_number):
    """Cache bytes of one sequence when layer i keeps at most windows[i] tokens."""
    # BEGIN SOLUTION
    per_layer_token = 2 * cfg.K * cfg.H * bytes_per_number
    return per_layer_token * sum(seq_len if w is None else min(w, seq_len) for w in windows)
    # END SOLUTION


# %%
check("ch05.window_kv_bytes_fn", window_kv_bytes)

# %% [markdown]
# ## Your score

# %% [markdown] tags=["lang-zh"]
# ## 你的得分

# %%
summary("ch05")
