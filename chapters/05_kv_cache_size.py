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
# # How big is the KV cache, and how to shrink it
#
# Chapter 1 bought speed with memory: the KV cache stores every layer's keys and values so that
# no decode step recomputes them. This chapter asks what that memory costs for real models,
# what it does to the number of requests a chip can serve, and then goes through every way
# people have found to make it smaller — fewer key/value heads, local attention, sharing a cache
# between layers, fewer bits per number, forgetting unimportant tokens, wasting less of the
# memory that is allocated, and finding more memory elsewhere. Each technique is implemented in
# the library, checked against a reference, and measured. The chapter follows the second half
# of Pierre Lienhart's article on KV caching {cite:p}`lienhart2023kvcache` and the "tricks"
# section of the scaling book's inference chapter {cite:p}`austin2025scaling`.

# %% [markdown] tags=["lang-zh"]
# # KV 缓存有多大，又如何缩小
#
# 第 1 章用内存换来了速度：KV 缓存保存每一层的键和值，这样任何一个解码步骤都不必重新计算它们。本章要
# 问：对真实的模型来说，这块内存要花多少；它对一块芯片能服务的请求数有什么影响；然后逐一考察人们找到
# 的每一种缩小缓存的办法——更少的键/值头、局部注意力、在层之间共享缓存、每个数用更少的位、忘掉不重要
# 的词元（token）、少浪费已分配的内存，以及到别处找更多的内存。每一种技术都在库中实现，与参照对照检查，并加以
# 测量。本章依据 Pierre Lienhart 关于 KV 缓存的文章的后半部分 {cite:p}`lienhart2023kvcache`，以及
# 《How to Scale Your Model》推理一章中的“技巧”一节 {cite:p}`austin2025scaling`。

# %%
import inspect
from functools import partial

import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.memory import kv_evict, kv_quant, kv_share, kv_window
from inferbook.model import decode, decoder, kvcache
from inferbook.model.attention import attention_mask, attention_reference
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset
from inferbook.perf import compiled, counts, latency, phase_time, roofline, timing
from inferbook.perf.hardware import CHIPS, get_chip
from inferbook.serving import memory_sim

print(info.describe())
DEVICE = timing.device_name()
BF16 = counts.dtype_bytes("bfloat16")

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
# ## Counting the bytes
#
# For every token of every sequence, each of the $L$ layers stores one key vector and one value
# vector of $H$ numbers for each of its KV heads. With $p$ bytes per number, a batch of $B$
# sequences of $S$ tokens holds
#
# $$\text{KV bytes} = 2 \cdot B \cdot S \cdot L \cdot K \cdot H \cdot p .$$
#
# In the original multi-head attention every query head has its own key/value head, $K = N$,
# and usually $N H = D$, so the formula is often written $2 B S L D p$. We keep $K$ and $H$
# apart: the query heads never enter the cache, and models with $K < N$ — grouped-query
# attention, below — store $G = N/K$ times less. The estimator's formula, and the library's
# cache measured against it:

# %% [markdown] tags=["lang-zh"]
# ## 数一数字节
#
# 对每个序列的每个词元，$L$ 层中的每一层都为它的每个 KV 头保存一个键向量和一个值向量，每个向量有 $H$
# 个数。每个数占 $p$ 字节时，一个由 $B$ 条序列、每条 $S$ 个词元组成的批次占用
#
# $$\text{KV 缓存字节数} = 2 \cdot B \cdot S \cdot L \cdot K \cdot H \cdot p .$$
#
# 在最初的多头注意力中，每个查询头都有自己的键/值头，$K = N$，而且通常 $N H = D$，所以这个公式常被写
# 成 $2 B S L D p$。我们把 $K$ 和 $H$ 分开写：查询头从不进入缓存，而 $K < N$ 的模型——也就是下文的分
# 组查询注意力——存的字节只有原来的 $1/G$，$G = N/K$。下面是估算器的公式，以及对照它测量的库中的缓存：

# %%
show_source(counts.kv_bytes_per_token)

# %%
tiny = get_preset("tiny")
assert kvcache.cache_bytes(kvcache.init_cache(tiny, 3, 100)) == \
    counts.kv_cache_bytes(tiny, 3, 100, 4)          # float32: 4 bytes per number

# %% [markdown]
# ## Popular models
#
# Here is the formula applied to the models of Lienhart's table and a few later ones, their
# sizes taken from the library's presets (each preset cites its config). Everything is in
# bfloat16, two bytes per number. The last column is the number of cached tokens whose keys and
# values weigh as much as the model's weights.

# %% [markdown] tags=["lang-zh"]
# ## 常见的模型
#
# 下面把这个公式用到 Lienhart 表格里的模型和几个更晚的模型上，它们的尺寸取自库中的预设（每个预设都注
# 明了它的配置出处）。一切都按 bfloat16 计，每个数两个字节。最后一列是一个词元数：这么多词元的键和值，
# 与模型的权重一样大。

# %%
table_models = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "opt-13b", "opt-30b", "opt-66b",
                "mpt-7b", "mpt-30b", "bloom-176b", "falcon-7b", "falcon-40b", "mistral-7b",
                "llama-3-8b", "llama-3-70b"]
rows = []
for name in table_models:
    c = get_preset(name)
    per_token = counts.kv_bytes_per_token(c, BF16)
    weights = counts.param_bytes(c, BF16)
    rows.append((c, per_token, weights, weights / per_token))

# %% tags=["hide-input"]
Markdown("| model | L | N | K | H | attention | KV per token | weights | tokens = weights |\n"
         "|---|---:|---:|---:|---:|---|---:|---:|---:|\n" + "\n".join(
             f"| {c.name} | {c.L} | {c.N} | {c.K} | {c.H} | {c.attention_kind} | "
             f"{fmt_bytes(t, 2)} | {fmt_bytes(w)} | {fmt_count(round(n))} |"
             for c, t, w, n in rows))
# %%
kv = {c.name: t for c, t, _, _ in rows}
l7 = get_preset("llama-2-7b")
l7_token, l7_weights = kv["llama-2-7b"], counts.param_bytes(l7, BF16)
l7_equal = l7_weights / l7_token
# Every multi-head model of 7B parameters or more stores at least half a megabyte per token ...
assert all(t >= 0.5e6 for c, t, _, _ in rows if c.attention_kind == "MHA")
# ... while grouped-query LLaMA-2 70B stores less per token than multi-head LLaMA-2 13B.
assert kv["llama-2-70b"] < kv["llama-2-13b"] / 2
l70_cfg = get_preset("llama-2-70b")
assert get_preset("falcon-7b").K == 1

# %% tags=["hide-input"]
glue("ch5_l7_token", fmt_bytes(l7_token, 2))
glue("ch5_bloom_token", fmt_bytes(kv["bloom-176b"], 2))
glue("ch5_l7_weights", fmt_bytes(l7_weights))
glue("ch5_l7_equal", fmt_count(round(l7_equal)))
glue("ch5_l7_equal_512", str(int(l7_equal // 512)))
glue("ch5_l70_token", fmt_bytes(kv["llama-2-70b"], 2))
glue("ch5_l13_token", fmt_bytes(kv["llama-2-13b"], 2))
glue("ch5_falcon7_token", fmt_bytes(kv["falcon-7b"], 2))
glue("ch5_l70_K", str(l70_cfg.K)); glue("ch5_l70_N", str(l70_cfg.N))
glue("ch5_mistral_W", f"{get_preset('mistral-7b').window:,}")

# %% [markdown]
# LLaMA-2 7B stores {glue:text}`ch5_l7_token` per token, BLOOM-176B {glue:text}`ch5_bloom_token`.
# The 7B model's weights take {glue:text}`ch5_l7_weights`, the same memory as the cache of
# {glue:text}`ch5_l7_equal` tokens — for instance {glue:text}`ch5_l7_equal_512` sequences of
# 512 tokens, a modest batch. The cache is not a detail next to the weights; at serving batch
# sizes it is the larger of the two.
#
# The table also shows what later models did about it. LLaMA-2 70B stores
# {glue:text}`ch5_l70_token` per token, less than the {glue:text}`ch5_l13_token` of LLaMA-2 13B,
# because it has {glue:text}`ch5_l70_K` KV heads for {glue:text}`ch5_l70_N` query heads;
# Falcon-7B, with a single KV head, stores
# {glue:text}`ch5_falcon7_token`.
#
# ### Today's families
#
# The models served today push the same lever further, and add two more. Gemma-2 and Phi-3
# give some or all layers a sliding window, so their cache per token shrinks as the context
# outgrows the window (the sliding-window section below); DeepSeek's latent attention caches
# one compressed vector per token and layer instead of keys and values per head. Mixtures of
# experts (Mixtral, Qwen3-30B-A3B, DeepSeek) change the weights, not the cache. The same
# formula, read from each model's published config (the presets cite them), in bfloat16:

# %% [markdown] tags=["lang-zh"]
# LLaMA-2 7B 每个词元存 {glue:text}`ch5_l7_token`，BLOOM-176B 存 {glue:text}`ch5_bloom_token`。这个
# 7B 模型的权重占 {glue:text}`ch5_l7_weights`，与 {glue:text}`ch5_l7_equal` 个词元的缓存占的内存一样
# 多——比如 {glue:text}`ch5_l7_equal_512` 条 512 个词元的序列，一个不算大的批次。与权重相比，缓存绝不
# 是细枝末节；在推理服务常用的批量大小下，它是两者中较大的那个。
#
# 表格也显示了后来的模型是怎么应对的。LLaMA-2 70B 每个词元存 {glue:text}`ch5_l70_token`，比 LLaMA-2
# 13B 的 {glue:text}`ch5_l13_token` 还少，因为它的 {glue:text}`ch5_l70_N` 个查询头只配了
# {glue:text}`ch5_l70_K` 个 KV 头；只有一个 KV 头的 Falcon-7B 存 {glue:text}`ch5_falcon7_token`。
#
# ### 今天的模型家族
#
# 今天在线服务的模型把这根杠杆推得更远，还添上了另外两根。Gemma-2 和 Phi-3 给部分或全部层配上滑动窗
# 口，所以当上下文长过窗口时，它们每个词元的缓存会变小（见下文滑动窗口一节）；DeepSeek 的潜在注意力
# 为每个词元、每一层缓存一个压缩后的向量，而不是每个头的键和值。混合专家模型（Mixtral、Qwen3-30B-A3B、
# DeepSeek）改变的是权重，不是缓存。同一个公式，用各模型公开的配置（预设里注明了出处），按 bfloat16
# 计：

# %%
family_models = ["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
                 "qwen2.5-7b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "gemma-2-9b",
                 "phi-3-mini", "deepseek-v2-lite", "deepseek-v3"]
fam = {}
for name in family_models:
    c = get_preset(name)
    full = counts.kv_bytes_per_token(c, BF16)
    at_context = counts.kv_cache_bytes(c, 1, c.max_seq_len, BF16) / c.max_seq_len
    cached = (f"latent {c.mla.R_kv} + rotary key {c.mla.H_rope}" if c.mla is not None
              else f"K = {c.K} of N = {c.N} heads of H = {c.H}")
    windows = sum(w is not None for w in c.windows)
    fam[name] = dict(cfg=c, full=full, at_context=at_context, cached=cached, windows=windows,
                     params=counts.param_count(c))

# %% tags=["hide-input"]
Markdown("| model | parameters | what a layer caches per token | windowed layers | KV per token "
         "| per token over its whole context |\n|---|---:|---|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {fmt_count(r['params'])} | {r['cached']} | {r['windows']} of "
             f"{r['cfg'].L} | {fmt_bytes(r['full'], 1)} | {fmt_bytes(r['at_context'], 1)} "
             f"({fmt_count(r['cfg'].max_seq_len)} tokens) |" for n, r in fam.items()))
# %%
ds3, l405 = fam["deepseek-v3"], fam["llama-3.1-405b"]
assert ds3["params"] > l405["params"] and ds3["full"] < l405["full"] / 5   # latent attention
assert fam["mixtral-8x7b"]["full"] == counts.kv_bytes_per_token(get_preset("mistral-7b"))
gemma, phi = fam["gemma-2-9b"], fam["phi-3-mini"]
assert gemma["at_context"] < gemma["full"] and phi["at_context"] < phi["full"] / 1.9
assert phi["full"] > fam["llama-3.1-8b"]["full"]          # multi-head ...
assert phi["params"] < fam["llama-3.1-8b"]["params"] / 2  # ... with less than half the weights
assert 2 * gemma["windows"] == gemma["cfg"].L             # Gemma-2: every other layer slides

# %% tags=["hide-input"]
glue("ch5_ds3_latent", str(ds3["cfg"].mla.R_kv))
glue("ch5_gemma_window", f"{gemma['cfg'].window:,}")
glue("ch5_ds3_token", fmt_bytes(ds3["full"], 1))
glue("ch5_l405_token", fmt_bytes(l405["full"], 1))
glue("ch5_ds3_vs_l405", fmt_ratio(l405["full"] / ds3["full"]))
glue("ch5_gemma_token", fmt_bytes(gemma["full"], 1))
glue("ch5_gemma_ctx", fmt_bytes(gemma["at_context"], 1))
glue("ch5_phi_token", fmt_bytes(phi["full"], 1))
glue("ch5_l31_8b_token", fmt_bytes(fam["llama-3.1-8b"]["full"], 1))

# %% [markdown]
# DeepSeek-V3, the largest model in the table, stores {glue:text}`ch5_ds3_token` per token and
# Llama-3.1-405B {glue:text}`ch5_l405_token`, {glue:text}`ch5_ds3_vs_l405` as much, because
# DeepSeek's layers cache a latent of {glue:text}`ch5_ds3_latent` numbers instead of keys and values
# per head. Gemma-2-9B stores {glue:text}`ch5_gemma_token` per token while every layer still
# holds it, but every other layer keeps only a {glue:text}`ch5_gemma_window`-token window, so
# over its whole context a token costs {glue:text}`ch5_gemma_ctx`. Phi-3-mini, multi-head with
# less than half the parameters of Llama-3.1-8B, stores {glue:text}`ch5_phi_token` per token to
# Llama's {glue:text}`ch5_l31_8b_token`.
#
# ## What fits on a chip
#
# Whatever memory the weights leave is all the cache can have. For LLaMA-2 7B in bfloat16 on
# common accelerators, and for two 7–8B models with grouped-query attention:

# %% [markdown] tags=["lang-zh"]
# 表中最大的模型 DeepSeek-V3 每个词元存 {glue:text}`ch5_ds3_token`，而 Llama-3.1-405B 存
# {glue:text}`ch5_l405_token`，是前者的 {glue:text}`ch5_ds3_vs_l405`，因为 DeepSeek 的各层缓存的是一
# 个由 {glue:text}`ch5_ds3_latent` 个数组成的潜在向量，而不是每个头的键和值。只要每一层都还保留着某
# 个词元，Gemma-2-9B 每个词元就要存 {glue:text}`ch5_gemma_token`；但它每隔一层只保留一个
# {glue:text}`ch5_gemma_window` 个词元的窗口，所以在它的整个上下文上平均下来，一个词元只占
# {glue:text}`ch5_gemma_ctx`。Phi-3-mini 采用多头注意力，参数还不到 Llama-3.1-8B 的一半，每个词元却
# 要存 {glue:text}`ch5_phi_token`，而 Llama 只存 {glue:text}`ch5_l31_8b_token`。
#
# ## 一块芯片上放得下什么
#
# 权重留下多少内存，缓存就只能有多少。下面是 LLaMA-2 7B 以 bfloat16 放在常见加速器上的情况，以及两个
# 采用分组查询注意力的 7–8B 模型：

# %%
chip_names = ["A10", "L4", "A100 40GB", "A100 80GB", "H100 SXM", "TPU v5e"]
cap_models = [l7, get_preset("mistral-7b"), get_preset("llama-3-8b")]
capacity = {(m.name, ch): latency.kv_capacity_tokens(m, get_chip(ch), 1)
            for m in cap_models for ch in chip_names}

# %% tags=["hide-input"]
Markdown("| chip | memory | " + " | ".join(f"{m.name}: tokens" for m in cap_models)
         + " | llama-2-7b: sequences of 4,096 |\n|---|---:|" + "---:|" * (len(cap_models) + 1)
         + "\n" + "\n".join(
             f"| {ch} | {fmt_bytes(get_chip(ch).hbm_bytes, 0)} | "
             + " | ".join(fmt_count(capacity[m.name, ch]) for m in cap_models)
             + f" | {roofline.max_batch(l7, get_chip(ch), 4096)} |" for ch in chip_names))
# %%
a10 = get_chip("A10")
a10_free = a10.hbm_bytes - l7_weights
assert capacity["llama-2-7b", "A10"] == int(a10_free // l7_token)
assert roofline.max_batch(l7, a10, 4096) < 10                   # fewer than ten long requests
assert capacity["llama-3-8b", "A10"] > 3 * capacity["llama-2-7b", "A10"]
l3_8b = get_preset("llama-3-8b")      # slightly larger, a quarter of the KV heads:
assert counts.param_count(l3_8b) > counts.param_count(l7) and 4 * l3_8b.K == l7.K

# %% tags=["hide-input"]
glue("ch5_a10_free", fmt_bytes(a10_free))
glue("ch5_a10_tokens", fmt_count(capacity["llama-2-7b", "A10"]))
glue("ch5_a10_batch4k", str(roofline.max_batch(l7, a10, 4096)))
glue("ch5_v5e_tokens", fmt_count(capacity["llama-2-7b", "TPU v5e"]))
glue("ch5_a10_l3_tokens", fmt_count(capacity["llama-3-8b", "A10"]))
glue("ch5_v5e_hbm", fmt_bytes(get_chip("TPU v5e").hbm_bytes, 0))

# %% [markdown]
# On an A10, LLaMA-2 7B leaves {glue:text}`ch5_a10_free` for the cache: room for
# {glue:text}`ch5_a10_tokens` tokens in total, prompts included — just
# {glue:text}`ch5_a10_batch4k` requests of 4,096 tokens at once. A TPU v5e, with
# {glue:text}`ch5_v5e_hbm` of memory, holds the weights with room for only
# {glue:text}`ch5_v5e_tokens` tokens. LLaMA-3 8B, a slightly larger
# model with a quarter of the KV heads, fits {glue:text}`ch5_a10_l3_tokens` tokens on the same
# A10. Every request served at once needs its own cache, so this number caps the batch size, and
# with it throughput (chapter 3). The same bytes are also read at every decode step, so a
# smaller cache is a faster step as well: shrinking the cache helps capacity, latency and
# throughput at once.
#
# ### Why input tokens are billed
#
# API providers charge for prompt tokens, not only for generated ones. The numbers say why:
# before a single output token exists, prefill has pushed every prompt token through the model
# and left its keys and values in memory for the rest of the request. For a 1,000-token prompt
# to LLaMA-2 7B:

# %% [markdown] tags=["lang-zh"]
# 在 A10 上，LLaMA-2 7B 给缓存留下 {glue:text}`ch5_a10_free`：总共能放 {glue:text}`ch5_a10_tokens`
# 个词元，提示词也算在内——同时只能容纳 {glue:text}`ch5_a10_batch4k` 个 4,096 个词元的请求。TPU v5e
# 有 {glue:text}`ch5_v5e_hbm` 内存，放下权重之后只剩 {glue:text}`ch5_v5e_tokens` 个词元的空间。
# LLaMA-3 8B 是一个稍大、但 KV 头只有四分之一的模型，在同一块 A10 上能放
# {glue:text}`ch5_a10_l3_tokens` 个词元。每个同时服务的请求都需要自己的缓存，所以这个数限制了批量大
# 小，也就限制了吞吐量（第 3 章）。每个解码步骤还要把这些字节读一遍，所以缓存越小，步骤也越快：缩小
# 缓存对容量、延迟和吞吐量同时有益。
#
# ### 为什么输入词元也要收费
#
# API 提供商不只对生成的词元收费，也对提示词的词元收费。数字说明了原因：在第一个输出词元出现之前，预
# 填充已经让提示词的每个词元都走过了整个模型，并把它们的键和值留在内存里，直到请求结束。以交给
# LLaMA-2 7B 的一个 1,000 个词元的提示词为例：

# %%
prompt = 1000
prompt_kv = counts.kv_cache_bytes(l7, 1, prompt, BF16)
prompt_flops = counts.forward_flops(l7, 1, prompt, logits_for=1)
per_token_flops = counts.flops_per_token(l7)
# The prompt's FLOPs in their parts: the attention and MLP weights at every position, the
# attention products over the full prompt × prompt square (what a dense kernel computes,
# causal mask or not), the unembedding at the last position only.
parts = counts.param_counts(l7)
prompt_weight_flops = prompt * 2 * (parts["attention"] + parts["mlp"])
prompt_attn_flops = counts.attention_flops(l7, 1, prompt, prompt)
assert prompt_flops == prompt_weight_flops + prompt_attn_flops + 2 * l7.D * l7.V
a100 = get_chip("A100 80GB")
assert abs(prompt_flops / (prompt * per_token_flops) - 1) < 0.1    # ≈ 2·P FLOPs per token

# %% tags=["hide-input"]
glue("ch5_prompt_kv", fmt_bytes(prompt_kv))
glue("ch5_prompt_flops", fmt_flops(prompt_flops))
glue("ch5_token_flops", fmt_flops(per_token_flops))
glue("ch5_prompt_weight_flops", fmt_flops(prompt_weight_flops))
glue("ch5_prompt_attn_flops", fmt_flops(prompt_attn_flops))
glue("ch5_prompt_a100", fmt_seconds(prompt_flops / a100.bf16_flops_per_s))
glue("ch5_prompt_share", fmt_percent(prompt_kv / (a100.hbm_bytes - l7_weights), 1))

# %% [markdown]
# About {glue:text}`ch5_token_flops` per token (twice the parameters that multiply). The
# prompt's tokens do {glue:text}`ch5_prompt_weight_flops` in the attention and MLP weights (the
# unembedding runs at the last position only), and the attention products add
# {glue:text}`ch5_prompt_attn_flops` — every query against every prompt key, the full square a
# dense kernel computes though the causal mask discards half of it: {glue:text}`ch5_prompt_flops`
# in all, {glue:text}`ch5_prompt_a100` of an A100's peak arithmetic — and
# {glue:text}`ch5_prompt_kv` of cache, held until the request ends:
# {glue:text}`ch5_prompt_share` of what an 80 GB A100 has left after the weights. Memory held is
# memory another request cannot use.
#
# ## The levers
#
# Each factor of $2 B S L K H p$ is a way to shrink the cache, and each has been tried:
#
# - **$B$**, the batch: smaller batches use less memory, but the batch is what makes serving
#   cheap (chapter 3). Not a lever we want to pull.
# - **$S$**, the tokens kept per sequence: local attention keeps only a window; eviction keeps a
#   budget of important tokens.
# - **$L$**, the layers: a smaller model, or layers that *share* one cache.
# - **$K$**, the KV heads: multi-query and grouped-query attention.
# - **$H$**, the head dimension: fixed by the model family; nothing to gain without another model.
# - **$p$**, the bytes per number: quantize the cache.
#
# Two more levers are not in the formula: waste less of the memory that is allocated (paging),
# and bring more memory (offloading, more devices). We take them in turn.
#
# ## Fewer KV heads: MQA and GQA
#
# The query heads never enter the cache. Multi-query attention (MQA) {cite:p}`shazeer2019mqa`
# keeps all $N$ query heads but gives them a single key/value head; grouped-query attention
# (GQA) {cite:p}`ainslie2023gqa` is the middle ground, $K$ KV heads each shared by a group of
# $G = N/K$ query heads. Multi-head attention is GQA with $K = N$, MQA is GQA with $K = 1$. The
# cache shrinks by $G$, and the scaling book notes that quality suffers little. The library's
# attention has handled it from the start: it views the $N$ query heads as $K$ groups of $G$
# and never copies a key. For LLaMA-2 70B's shape:

# %% [markdown] tags=["lang-zh"]
# 每个词元约 {glue:text}`ch5_token_flops`（参与乘法的每个参数各做一次乘法、一次加法）。提示词的词元
# 在注意力和 MLP 的权重上做了 {glue:text}`ch5_prompt_weight_flops`（反嵌入只在最后一个位置上做），注
# 意力的乘积又加上 {glue:text}`ch5_prompt_attn_flops`——每个查询对着提示词的每个键，也就是稠密内核算
# 出的整个正方形，尽管因果掩码会丢掉其中一半：合计 {glue:text}`ch5_prompt_flops`，按 A100 的峰值算力
# 需要 {glue:text}`ch5_prompt_a100`——还有 {glue:text}`ch5_prompt_kv` 的缓存，一直占到请求结束：这是
# 一块 80 GB 的 A100 放下权重后所剩内存的 {glue:text}`ch5_prompt_share`。被占着的内存，别的请求就用
# 不了。
#
# ## 各根杠杆
#
# $2 B S L K H p$ 中的每个因子都是缩小缓存的一个途径，而且每一个都有人试过：
#
# - **$B$**，批次：批次越小，用的内存越少，但正是批次让推理服务变得便宜（第 3 章）。这不是我们想拉的
#   杠杆。
# - **$S$**，每条序列保留的词元：局部注意力只保留一个窗口；淘汰只保留预算之内的重要词元。
# - **$L$**，层数：换一个更小的模型，或者让几层*共享*一份缓存。
# - **$K$**，KV 头：多查询注意力和分组查询注意力。
# - **$H$**，头维度：由模型家族决定；不换模型就没有什么可省的。
# - **$p$**，每个数的字节数：量化缓存。
#
# 还有两根杠杆不在公式里：少浪费已分配的内存（分页），以及找来更多的内存（卸载、更多设备）。我们逐一
# 来看。
#
# ## 更少的 KV 头：MQA 与 GQA
#
# 查询头从不进入缓存。多查询注意力（MQA）{cite:p}`shazeer2019mqa` 保留全部 $N$ 个查询头，但只给它们
# 一个键/值头；分组查询注意力（GQA）{cite:p}`ainslie2023gqa` 取其中间：$K$ 个 KV 头，每个由一组
# $G = N/K$ 个查询头共用。多头注意力就是 $K = N$ 的 GQA，MQA 就是 $K = 1$ 的 GQA。缓存缩小为原来的
# $1/G$，而《How to Scale Your Model》指出，质量损失很小。库中的注意力从一开始就支持这种结构：它把 $N$ 个查询头看
# 成 $K$ 组、每组 $G$ 个，从不复制任何一个键。以 LLaMA-2 70B 的形状为例：

# %%
l70 = get_preset("llama-2-70b")
h100 = get_chip("H100 SXM")
gqa_rows = []
for K in (l70.N, l70.K, 1):
    c = l70.replace(K=K)
    gqa_rows.append((K, c.attention_kind, counts.kv_bytes_per_token(c, BF16),
                     roofline.max_batch(c, h100, 4096, chips=8)))
assert gqa_rows[0][2] == 8 * gqa_rows[1][2] == 64 * gqa_rows[2][2]
assert gqa_rows[1][3] > 7 * gqa_rows[0][3]

# %% tags=["hide-input"]
glue("ch5_gqa_batch_mha", str(gqa_rows[0][3])); glue("ch5_gqa_batch_gqa", str(gqa_rows[1][3]))
Markdown("| KV heads K | kind | KV per token | sequences of 4,096 on 8 H100s |\n"
         "|---:|---|---:|---:|\n" + "\n".join(
             f"| {K} | {kind} | {fmt_bytes(t)} | {b} |" for K, kind, t, b in gqa_rows))

# %% [markdown]
# With {glue:text}`ch5_l70_N` KV heads (one per query head), eight H100s hold
# {glue:text}`ch5_gqa_batch_mha` sequences of 4,096 tokens next to the weights; with the
# {glue:text}`ch5_l70_K` heads LLaMA-2 70B actually has, {glue:text}`ch5_gqa_batch_gqa`.
#
# Fewer bytes are also fewer bytes to *read*. We measure one decode step of the library's model
# on this device, in a configuration where the cache dominates the traffic — one layer of
# width 256 with 16 query heads of 64, {glue:text}`ch5_gqa_B` sequences of
# {glue:text}`ch5_gqa_S` cached tokens, float32 — with $K$ = 16, 4 and 1 KV heads. The three
# variants take turns, {glue:text}`ch5_gqa_rounds` rounds after {glue:text}`ch5_gqa_warmup` of warm-up, so that
# whatever else the machine is doing falls on all of them alike, and each one's time is its
# median step:

# %% [markdown] tags=["lang-zh"]
# 用 {glue:text}`ch5_l70_N` 个 KV 头（每个查询头一个）时，八块 H100 在权重之外能放下
# {glue:text}`ch5_gqa_batch_mha` 条 4,096 个词元的序列；用 LLaMA-2 70B 实际拥有的
# {glue:text}`ch5_l70_K` 个头时，能放下 {glue:text}`ch5_gqa_batch_gqa` 条。
#
# 字节少了，要*读*的字节也就少了。我们在这台设备上测量库中模型的一个解码步骤，所用的配置让缓存主导数
# 据流量——一层，宽度 256，16 个 64 维的查询头，{glue:text}`ch5_gqa_B` 条序列，每条缓存了
# {glue:text}`ch5_gqa_S` 个词元，float32——分别用 $K$ = 16、4 和 1 个 KV 头。三个变体轮流运行，先热身 {glue:text}`ch5_gqa_warmup` 轮，
# 再计时 {glue:text}`ch5_gqa_rounds` 轮，让机器上的其他活动对它们的影响相同；每个变体的时间取其步骤的中位数：

# %%
att = ModelConfig(L=1, D=256, F=512, N=16, K=16, H=64, V=512, max_seq_len=8192,
                  name="attention-heavy")
B_att, S_att = 4, 4096            # the cache of the later sections' measurements
# Here a longer one, so that even K = 1 reads several times the weights: the step's fixed costs
# and the machine's noise then cannot hide the difference in bytes.
S_gqa, GQA_ROUNDS, GQA_WARMUP = 4 * S_att, 9, 2
gqa_cfg = {K: att.replace(K=K, max_seq_len=S_gqa) for K in (16, 4, 1)}
steppers = {K: timing.decode_step_timer(decoder.init_params(c), c, B_att, S_gqa)
            for K, c in gqa_cfg.items()}
gqa_runs = timing.time_alternating(list(steppers.values()), rounds=GQA_ROUNDS,
                                   warmup=GQA_WARMUP)
gqa_time = {K: t.median_s for K, t in zip(steppers, gqa_runs)}
gqa_bytes = {K: counts.kv_cache_bytes(c, B_att, S_gqa, 4) for K, c in gqa_cfg.items()}
weights_att = counts.param_bytes(att, 4)
assert gqa_bytes[16] > 10 * weights_att and gqa_bytes[1] > 2 * weights_att   # cache-bound

# %% tags=["hide-input"]
MQA_CEILING = 0.7           # the claim's bound, glued into the sentence that states it
expect_measured(gqa_time[1] < MQA_CEILING * gqa_time[16] and gqa_time[1] < gqa_time[4],
                "fewer KV heads make a cache-bound decode step faster: K = 1's median step "
                f"takes under {fmt_percent(MQA_CEILING)} of K = 16's, and less than K = 4's",
                expected=f"K = 1 under {fmt_percent(MQA_CEILING)} of K = 16's median, and under "
                "K = 4's",
                measured=", ".join(f"K = {K}: {fmt_seconds(t)}" for K, t in gqa_time.items()))
for K in gqa_time:
    print(f"K={K:2d}: cache {fmt_bytes(gqa_bytes[K]):>9s}  step {fmt_seconds(gqa_time[K])}"
          f"  ({DEVICE})")
glue("ch5_gqa_mha_time", fmt_seconds(gqa_time[16]))
glue("ch5_mqa_ceiling", fmt_percent(MQA_CEILING))
glue("ch5_gqa_mqa_time", fmt_seconds(gqa_time[1]))
glue("ch5_gqa_speedup", fmt_ratio(gqa_time[16] / gqa_time[1]))
glue("ch5_device", DEVICE)
glue("ch5_gqa_B", str(B_att)); glue("ch5_gqa_S", f"{S_gqa:,}")
glue("ch5_gqa_rounds", str(GQA_ROUNDS)); glue("ch5_gqa_warmup", str(GQA_WARMUP))

fig, ax = plt.subplots(figsize=(6, 3.6))
ax.plot([gqa_bytes[K] / 1e6 for K in gqa_time], [gqa_time[K] * 1e3 for K in gqa_time], "o-")
for K in gqa_time:
    ax.annotate(f"K={K}", (gqa_bytes[K] / 1e6, gqa_time[K] * 1e3), textcoords="offset points",
                xytext=(5, -12))
ax.set_xlabel("KV cache read per step (MB)")
ax.set_ylabel("decode step (ms)")
ax.set_title(f"Decode step against KV heads, measured on {DEVICE}", fontsize=9)
ax.grid(alpha=0.3)
glue_figure("ch5_gqa_figure", fig, zh=dict(
    title=f"解码步骤与 KV 头数，在 {DEVICE} 上测得", xlabel="每步读取的 KV 缓存（MB）",
    ylabel="解码步骤（ms）"))

# %% [markdown]
# ```{glue:figure} ch5_gqa_figure
# ```
#
# Multi-head attention takes {glue:text}`ch5_gqa_mha_time` per step, multi-query
# {glue:text}`ch5_gqa_mqa_time`: {glue:text}`ch5_gqa_speedup` faster, on
# {glue:text}`ch5_device` (the chapter checks that the median multi-query step takes under
# {glue:text}`ch5_mqa_ceiling` of the median multi-head step, and less than the grouped variant
# between them). Step time falls with the bytes of cache read, as a memory-bound step
# should (chapter 2), though not in proportion: the step has fixed costs, and with $G$ query
# heads sharing each key the attention products become small matrix products, which a CPU in
# particular runs well below its bandwidth. That sharing is the other effect the scaling book
# points out: attention now does $G$ times more arithmetic per byte it reads.
#
# ## A window instead of the whole past
#
# In **local** (sliding-window) attention a token attends only to the $W$ tokens before it.
# Mistral 7B {cite:p}`jiang2023mistral` does this in every layer with $W =$
# {glue:text}`ch5_mistral_W`. Since no query
# will ever look further back, the cache never needs more than $W$ slots per layer: slot
# $t \bmod W$ holds position $t$, and each new token overwrites the one that just fell out of
# the window — a ring buffer. Models that mix a few **global** layers (full attention) with
# many local ones {cite:p}`gemmateam2024gemma2,characterai2024inference` keep long-range
# information and most of the savings. The library's `kv_window` module implements the ring
# and the mixed pattern; its attention masks each slot by the position it holds:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch5_gqa_figure
# ```
#
# 多头注意力每步耗时 {glue:text}`ch5_gqa_mha_time`，多查询注意力耗时 {glue:text}`ch5_gqa_mqa_time`：
# 在 {glue:text}`ch5_device` 上快了 {glue:text}`ch5_gqa_speedup`（本章检验多查询注意力步骤时间的中位数不到多头注意力的
# {glue:text}`ch5_mqa_ceiling`，也少于介于两者之间的分组查询注意力）。步骤时间随读取的缓存字节数下降，正
# 如内存受限的步骤所应有的那样（第 2 章），但并不成正比：每一步都有固定开销；而且 $G$ 个查询头共用每
# 个键时，注意力的乘积变成了小矩阵乘法，运行这类乘法的速度远低于带宽所允许的，在 CPU 上尤其如此。这
# 种共享正是《How to Scale Your Model》指出的另一个效果：注意力每读一个字节，要做的计算多了 $G$ 倍。
#
# ## 用一个窗口代替全部过去
#
# 在**局部**（滑动窗口）注意力中，一个词元只关注它之前的 $W$ 个词元。Mistral 7B
# {cite:p}`jiang2023mistral` 在每一层都这样做，$W =$ {glue:text}`ch5_mistral_W`。既然没有哪个查询会
# 往更远处看，缓存每层就从不需要多于 $W$ 个槽位：槽位 $t \bmod W$ 存放位置 $t$，每个新词元覆盖刚刚滑
# 出窗口的那个——这就是一个环形缓冲区。把少数**全局**层（完整注意力）与许多局部层混在一起的模型
# {cite:p}`gemmateam2024gemma2,characterai2024inference`，既保留了长距离的信息，又得到了大部分节省。
# 库中的 `kv_window` 模块实现了这个环和混合模式；它的注意力按每个槽位存放的位置为它加掩码：

# %%
show_source(kv_window.slot_positions)

# %% [markdown]
# We check it on a tiny model with one local layer (window 8) and one global layer. A
# 36-token sequence goes in three chunks of 12: the first fills the ring (and wraps around it),
# the next two attend to it. Every logit must equal a forward pass without a cache that masks
# each layer with its window — and the local layer's cache must hold 8 slots.

# %% [markdown] tags=["lang-zh"]
# 我们在一个小模型上检查它：一个局部层（窗口 8）和一个全局层。一条 36 个词元的序列分三块送入，每块
# 12 个：第一块填满这个环（还绕回了开头），后两块关注它。所有 logits 都必须等于一次不带缓存、用各层
# 的窗口做掩码的前向计算所得的结果——而且局部层的缓存必须只有 8 个槽位。

# %%
w_cfg = tiny
windows = kv_window.layer_windows(w_cfg.L, 8, local_per_global=1)
w_params = decoder.init_params(w_cfg, seed=1)
seq = jax.random.randint(jax.random.key(0), (1, 36), 0, w_cfg.V)
ring = kv_window.init_cache(w_cfg, windows, 1, 36)
cached = []
for start in (0, 12, 24):
    logits, new = kv_window.extend(w_params, w_cfg, windows, seq[:, start:start + 12], ring)
    ring = kv_window.append(ring, windows, *new)
    cached.append(logits[0])
reference = kv_window.forward_reference(w_params, w_cfg, windows, seq)[0]
window_err = float(jnp.max(jnp.abs(jnp.concatenate(cached) - reference)))
assert window_err < 1e-4, window_err
assert [k.shape[2] for k in ring.k] == [8, 36]

# %% tags=["hide-input"]
glue("ch5_window_err", f"{window_err:.1e}")
print(windows, [k.shape[2] for k in ring.k], f"largest logit difference {window_err:.1e}")

# %% [markdown]
# The cached logits match the masked reference to {glue:text}`ch5_window_err`, and the local
# layers never hold more than their window. What the window saves grows with the context. For a
# model shaped like LLaMA-3 8B, per sequence, with all layers global, with a window of 4,096 in
# every layer (Mistral's choice), and with five local layers of window 1,024 per global one (the
# ratio of Gemma 3):

# %% [markdown] tags=["lang-zh"]
# 带缓存的 logits 与加了掩码的参照结果相差不超过 {glue:text}`ch5_window_err`，而局部层保存的从不超过
# 它的窗口。窗口省下的随上下文增长。对一个形状与 LLaMA-3 8B 相同的模型，按每条序列计，比较三种情况：
# 所有层都是全局层；每一层都用 4,096 的窗口（Mistral 的选择）；每个全局层配五个窗口为 1,024 的局部层
# （Gemma 3 的比例）：

# %%
l3 = get_preset("llama-3-8b")
patterns = {"all global": (None,) * l3.L,
            "all local, W = 4,096": kv_window.layer_windows(l3.L, 4096),
            "5 local (W = 1,024) : 1 global": kv_window.layer_windows(l3.L, 1024, 5)}
ctx = 32768
full_32k = kv_window.kv_bytes_per_sequence(l3, patterns["all global"], ctx, BF16)
local_32k = kv_window.kv_bytes_per_sequence(l3, patterns["all local, W = 4,096"], ctx, BF16)
mixed_32k = kv_window.kv_bytes_per_sequence(l3, patterns["5 local (W = 1,024) : 1 global"], ctx,
                                            BF16)
assert full_32k == counts.kv_cache_bytes(l3, 1, ctx, BF16)
assert local_32k == full_32k / 8 and mixed_32k < full_32k / 4
assert len({kv_window.kv_bytes_per_sequence(l3, w, 1024) for w in patterns.values()}) == 1

# %% tags=["hide-input"]
contexts = np.geomspace(512, 131072, 30).astype(int)
fig, ax = plt.subplots(figsize=(6, 3.6))
for label, w in patterns.items():
    ax.loglog(contexts, [kv_window.kv_bytes_per_sequence(l3, w, int(s), BF16) / 1e9
                         for s in contexts], label=label)
ax.set_xlabel("tokens in the sequence")
ax.set_ylabel("KV cache per sequence (GB, bfloat16)")
ax.set_title("llama-3-8b shape: where local attention pays")
ax.legend(); ax.grid(alpha=0.3, which="both")
glue_figure("ch5_window_figure", fig, zh=dict(
    title="llama-3-8b 的形状：局部注意力在哪里划算", xlabel="序列中的词元数",
    ylabel="每条序列的 KV 缓存（GB，bfloat16）",
    legend=["全部为全局层", "全部为局部层，W = 4,096", "5 个局部层（W = 1,024）: 1 个全局层"]))
glue("ch5_w_full", fmt_bytes(full_32k)); glue("ch5_w_local", fmt_bytes(local_32k))
glue("ch5_w_mixed", fmt_bytes(mixed_32k)); glue("ch5_w_mixed_x", fmt_ratio(full_32k / mixed_32k))

# %% [markdown]
# ```{glue:figure} ch5_window_figure
# ```
#
# At 32,768 tokens a full cache holds {glue:text}`ch5_w_full` per sequence, an all-local one
# {glue:text}`ch5_w_local`, and the 5:1 mix {glue:text}`ch5_w_mixed` —
# {glue:text}`ch5_w_mixed_x` less, with every sixth layer still seeing the whole context. Below
# the window there is no saving at all: local attention pays only for long sequences.
#
# ## One cache for several layers
#
# A model can be trained so that a few adjacent layers use the same keys and values
# {cite:p}`brandon2024cla`: the first layer of each group computes and caches them, the others
# attend to that cache with their own queries. Character.AI combines this with local layers
# {cite:p}`characterai2024inference`. The cache shrinks by the group size. The scaling book
# adds a caveat: the shared cache is still read by every layer that uses it, so a decode step
# reads as many bytes as before and need not get faster. `kv_share` implements the pattern (its
# tests check cached decoding against recomputation); here we count, from XLA's analysis of the
# compiled decode step, what a step holds and what it reads, for pairs of layers sharing a
# cache in the attention-heavy configuration:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch5_window_figure
# ```
#
# 在 32,768 个词元时，完整的缓存每条序列占 {glue:text}`ch5_w_full`，全部为局部层时占
# {glue:text}`ch5_w_local`，5:1 的混合占 {glue:text}`ch5_w_mixed`——缩小了 {glue:text}`ch5_w_mixed_x`，
# 而每六层中仍有一层能看到整个上下文。序列短于窗口时则毫无节省：局部注意力只对长序列划算。
#
# ## 几层共用一份缓存
#
# 模型可以这样训练：几个相邻的层使用同一组键和值 {cite:p}`brandon2024cla`——每组的第一层计算并缓存它
# 们，其余各层用自己的查询去关注这份缓存。Character.AI 把这种做法与局部层结合了起来
# {cite:p}`characterai2024inference`。缓存按组的大小成比例缩小。《How to Scale Your Model》补充了一个提醒：共享的
# 缓存仍要被每个使用它的层读一遍，所以一个解码步骤读取的字节和以前一样多，未必会变快。`kv_share` 实
# 现了这种模式（它的测试把带缓存的解码与重新计算作比较）；这里我们在注意力占主导的那个配置中，让两层
# 一组共用一份缓存，从 XLA 对编译后解码步骤的分析中数出一个步骤占用多少、读取多少：

# %%
att4 = att.replace(L=2)
p4 = decoder.init_params(att4)
share = {"own cache per layer": kv_share.share_adjacent(2, 1),
         "pairs share a cache": kv_share.share_adjacent(2, 2)}
held, read = {}, {}
for label, src in share.items():
    cache = kv_share.init_cache(att4, src, B_att, 1024)
    held[label] = kvcache.cache_bytes(cache)
    read[label] = compiled.compiled_cost(kv_share.extend, p4, att4, src,
                                      jnp.zeros((B_att, 1), jnp.int32), cache)["bytes_accessed"]
    print(f"{label:22s} holds {fmt_bytes(held[label]):>9s}, step reads {fmt_bytes(read[label])}")
own, pair = share
assert held[pair] * 2 == held[own]
assert read[pair] > 0.9 * read[own]           # the bytes read per step hardly move

# %% tags=["hide-input"]
glue("ch5_share_held", fmt_bytes(held[pair])); glue("ch5_share_held_own", fmt_bytes(held[own]))
glue("ch5_share_read", fmt_bytes(read[pair])); glue("ch5_share_read_own", fmt_bytes(read[own]))

# %% [markdown]
# Sharing halves the memory ({glue:text}`ch5_share_held` instead of
# {glue:text}`ch5_share_held_own`) but a step still reads {glue:text}`ch5_share_read` against
# {glue:text}`ch5_share_read_own`: capacity doubles, but the bytes a step reads, which set the
# time of a memory-bound step, stay where they were. (A kernel that served both layers of a pair
# from one read could change that, but the two layers run one after the other with an MLP
# between them.)
#
# ## Fewer bytes per number: an int8 cache
#
# Weight-only quantization (GPTQ, AWQ) leaves the cache alone; methods that quantize activations
# too (LLM.int8() {cite:p}`dettmers2022llmint8`, SmoothQuant {cite:p}`xiao2023smoothquant`)
# produce a quantized cache as a side effect, but a decode step is memory-bound, so faster
# int8 arithmetic buys little. What helps is storing the cache in 8 bits and converting back when
# reading it — TensorRT-LLM and vLLM do this with int8 or fp8. `kv_quant` gives each key and
# value vector its own scale (its largest magnitude over 127), so no calibration is needed:

# %% [markdown] tags=["lang-zh"]
# 共享让内存减半（{glue:text}`ch5_share_held`，而不是 {glue:text}`ch5_share_held_own`），但一个步骤
# 仍要读取 {glue:text}`ch5_share_read`，对比 {glue:text}`ch5_share_read_own`：容量翻了一番，但一个步
# 骤读取的字节——它们决定了内存受限的步骤的时间——丝毫未减。（如果有一个内核能用一次读取同时服务一组中
# 的两层，情况就不同了；但这两层是一前一后运行的，中间还隔着一个 MLP。）
#
# ## 每个数少用几个字节：int8 缓存
#
# 只量化权重的方法（GPTQ、AWQ）不动缓存；连激活也量化的方法（LLM.int8()
# {cite:p}`dettmers2022llmint8`、SmoothQuant {cite:p}`xiao2023smoothquant`）顺带得到了量化的缓存，但
# 解码步骤是内存受限的，所以更快的 int8 计算帮不了多少。真正有用的是把缓存以 8 位存储，读取时再转换
# 回来——TensorRT-LLM 和 vLLM 就是用 int8 或 fp8 这样做的。`kv_quant` 给每个键向量和值向量各配一个缩
# 放因子（它的最大绝对值除以 127），因此不需要校准：

# %%
show_source(kv_quant.quantize)

# %% [markdown]
# Rounding moves each element by at most half a step, which bounds how far an attention output
# can move (the derivation is in `kv_quant.attention_error_bound`). We measure the error on the
# library's own keys, values and queries — the second layer of the `tiny` preset over a
# 256-token sequence — and compare it with the bound:

# %% [markdown] tags=["lang-zh"]
# 舍入让每个元素最多移动半个量化步长，这就限定了一个注意力输出最多能偏移多远（推导见
# `kv_quant.attention_error_bound`）。我们在库自己的键、值和查询上测量误差——`tiny` 预设的第二层，序
# 列长 256 个词元——并与这个上界比较：

# %%
qm = tiny
qm_params = decoder.init_params(qm, seed=0)


@jax.jit
def capture(tokens_BT):
    """Queries, keys and values of every layer from a forward pass without a cache."""
    B, T = tokens_BT.shape
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    mask = attention_mask(pos, pos[0], jnp.full((B,), T))
    seen = []

    def attend(i, q, k, v):
        seen.append((q, k.swapaxes(1, 2), v.swapaxes(1, 2)))
        return attention_reference(q, k.swapaxes(1, 2), v.swapaxes(1, 2), mask)[0]

    decoder.transformer(qm_params, qm, tokens_BT, pos, attend)
    return seen, mask


T_q = 256
qkv, causal = capture(jax.random.randint(jax.random.key(2), (1, T_q), 0, qm.V))
q, k, v = qkv[1]


@jax.jit
def int8_attention_error(q, k, v, mask):
    """Largest error per output of attention over the int8 cache, and its a-priori bound."""
    (kq, ks), (vq, vs) = kv_quant.quantize(k), kv_quant.quantize(v)
    T = q.shape[1]
    approx = kv_quant.attend_per_head(q, kq, vq, ks, vs, jnp.arange(T)[None], jnp.array([T]))[0]
    exact = attention_reference(q, k, v, mask)[0]
    return (jnp.abs(approx - exact).max(-1), kv_quant.attention_error_bound(q, k, v, mask),
            jnp.linalg.norm(approx - exact) / jnp.linalg.norm(exact))


err, bound, rel = int8_attention_error(q, k, v, causal)
assert bool(jnp.all(err <= bound + 1e-6))
rel = float(rel)

# %% tags=["hide-input"]
glue("ch5_q_err", f"{float(err.max()):.1e}"); glue("ch5_q_bound", f"{float(bound.max()):.1e}")
glue("ch5_q_rel", fmt_percent(rel, 2))
print(f"largest error {float(err.max()):.1e}, largest bound {float(bound.max()):.1e}, "
      f"relative error {rel:.2%}")

# %% [markdown]
# The largest error is {glue:text}`ch5_q_err`, inside its bound of {glue:text}`ch5_q_bound`;
# over all outputs the relative error is {glue:text}`ch5_q_rel`.
#
# The memory: per element, one byte for the code plus a share of the four-byte scale, against
# two bytes for bfloat16. What a decode step must read is fixed by the compiled program: its
# input buffers are the cache (the program reads every element, since each one can change the
# output), and its temporary buffers show whether it made a float copy of the cache on the way.
# XLA's memory analysis of the compiled step gives both. (Its *cost* analysis is the wrong tool
# here: it undercounts what happens inside loops — for this step it reports fewer bytes than
# the cache itself — and it charges every operand of every operation as a
# main-memory access, including the converted head that never leaves the processor's caches.)

# %% [markdown] tags=["lang-zh"]
# 最大误差是 {glue:text}`ch5_q_err`，在它的上界 {glue:text}`ch5_q_bound` 之内；在全部输出上，相对误
# 差是 {glue:text}`ch5_q_rel`。
#
# 再看内存：每个元素用一个字节存编码，再分摊四字节缩放因子的一小份，而 bfloat16 要两个字节。一个解码
# 步骤必须读取什么，由编译后的程序决定：它的输入缓冲区就是缓存（程序会读每一个元素，因为每一个都可能
# 改变输出），而它的临时缓冲区则表明它是否在途中做了一份缓存的浮点副本。XLA 对编译后步骤的内存分析同
# 时给出这两者。（它的*开销*分析在这里不是合适的工具：它少算了循环内部发生的事——对这个步骤，它报告的
# 字节数比缓存本身还少——而且它把每个运算的每个操作数都算作一次主存访问，包括那个转换后从未离开处理器
# 缓存的头。）

# %%
tok_att = jnp.zeros((B_att, 1), jnp.int32)
p_att = decoder.init_params(att)
non_cache_args = sum(x.nbytes for x in jax.tree.leaves(p_att)) + tok_att.nbytes
step_memory = {}
for name, dtype in [("int8", jnp.int8), ("bfloat16", jnp.bfloat16)]:
    cache = kv_quant.init_cache(att, B_att, S_att, dtype)
    compiled = kv_quant.extend.lower(p_att, att, tok_att, cache).compile()
    mem = compiled.memory_analysis()
    cache_in = mem.argument_size_in_bytes - non_cache_args
    assert cache_in == kvcache.cache_bytes(cache) + cache.lengths.nbytes
    step_memory[name] = (cache_in, mem.temp_size_in_bytes)
    if name == "int8":        # the cost analysis misses most trips through the per-head loop:
        cost = compiled.cost_analysis()               # it reports less than the cache itself
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        assert cost["bytes accessed"] < cache_in
    print(f"{name:9s} cache read by the step {fmt_bytes(cache_in):>9s}, "
          f"temporaries {fmt_bytes(mem.temp_size_in_bytes)}")
int8_share = step_memory["int8"][0] / step_memory["bfloat16"][0]
assert int8_share <= 0.55
assert step_memory["int8"][1] < step_memory["int8"][0] / 4      # no float copy of the cache
f32_bytes = kvcache.cache_bytes(kv_quant.init_cache(att, B_att, S_att, jnp.float32))
int8_bytes = kvcache.cache_bytes(kv_quant.init_cache(att, B_att, S_att, jnp.int8))

# %% tags=["hide-input"]
glue("ch5_int8_share", fmt_percent(int8_share, 1))
glue("ch5_int8_share_f32", fmt_percent(int8_bytes / f32_bytes, 1))
glue("ch5_int8_temp", fmt_bytes(step_memory["int8"][1]))
glue("ch5_int8_bpe", f"{kv_quant.bytes_per_element(att.H):.3f}")
glue("ch5_int8_capacity", fmt_ratio(1 / int8_share, 2))

# %% [markdown]
# The int8 step reads {glue:text}`ch5_int8_share` of the bfloat16 step's cache bytes
# ({glue:text}`ch5_int8_bpe` bytes per element for $H = 64$); its cache is
# {glue:text}`ch5_int8_share_f32` the size of a float32 one. Its temporary buffers,
# {glue:text}`ch5_int8_temp`, hold one head at a time, not a converted cache.
#
# How the int8 cache is read decides whether this turns into speed. Converting the whole cache to
# float before the attention products — the obvious code — makes XLA write a float copy of the
# cache and read it again, more traffic than a float cache. So `kv_quant` walks through the
# cache one KV head at a time, converting a head's block and using it while it is still in the
# processor's caches (real int8 kernels do the same in registers):

# %% [markdown] tags=["lang-zh"]
# int8 的步骤读取的缓存字节是 bfloat16 步骤的 {glue:text}`ch5_int8_share`（$H = 64$ 时每个元素
# {glue:text}`ch5_int8_bpe` 字节）；它的缓存大小是 float32 缓存的 {glue:text}`ch5_int8_share_f32`。
# 它的临时缓冲区 {glue:text}`ch5_int8_temp` 一次只存一个头，而不是一份转换后的缓存。
#
# int8 缓存怎么读，决定了这能否变成速度。在注意力乘积之前把整个缓存转换成浮点数——最直白的写法——会让
# XLA 把缓存的浮点副本写出去再读回来，流量比浮点缓存还大。所以 `kv_quant` 一次处理缓存中的一个 KV 头：
# 转换一个头的数据块，趁它还在处理器缓存里就用掉（真正的 int8 内核在寄存器里做同样的事）：

# %%
show_source(kv_quant.attend_per_head)

# %% [markdown]
# Now the step time. On a CPU, bfloat16 arithmetic is emulated and slow, so we compare the int8
# cache with a **float32** cache read by the same per-head code; with the library's standard
# decode step (`decode.extend`, one batched product over the float32 cache); and with the
# obvious way to read an int8 cache, written here: convert every layer's whole cache to float,
# then attend as usual. We time the part of the step that reads the cache (`extend`, the whole
# forward pass; the append that follows writes one token and is the same for all), alternating
# the variants over {glue:text}`ch5_i8_rounds` rounds after one of warm-up so that other
# activity on the machine affects them alike, and report each one's median call.

# %% [markdown] tags=["lang-zh"]
# 现在看步骤时间。在 CPU 上，bfloat16 计算是模拟出来的，很慢，所以我们拿 int8 缓存与以下几种作比较：
# 由同样的逐头代码读取的 **float32** 缓存；库的标准解码步骤（`decode.extend`，对 float32 缓存做一次
# 覆盖整个批次的乘积）；以及读取 int8 缓存最直白的办法，写在下面：先把每一层的整个缓存转换成浮点数，
# 再照常做注意力。我们为步骤中读取缓存的部分计时（`extend`，即整个前向计算；随后的追加只写一个词元，
# 对所有变体都一样），先热身一轮，再分 {glue:text}`ch5_i8_rounds` 轮交替运行各个变体，让机器上的其他活动对它们的
# 影响相同，并取每个变体调用时间的中位数。

# %%
@partial(jax.jit, static_argnames=("cfg",))
def extend_convert_everything(params, cfg, tokens_BT, cache):
    """The naive int8 read: dequantize each layer's whole cache, then the float32 step."""
    floats = kvcache.KVCache(
        tuple(kv_quant.dequantize(c, sc) for c, sc in zip(cache.k, cache.k_scale)),
        tuple(kv_quant.dequantize(c, sc) for c, sc in zip(cache.v, cache.v_scale)),
        cache.lengths)
    return decode.extend(params, cfg, tokens_BT, floats)[0]


filled = jnp.full((B_att,), S_att - 1, jnp.int32)
int8_cache = kv_quant.init_cache(att, B_att, S_att, jnp.int8)._replace(lengths=filled)
f32_qcache = kv_quant.init_cache(att, B_att, S_att, jnp.float32)._replace(lengths=filled)
f32_cache = kvcache.init_cache(att, B_att, S_att)._replace(lengths=filled)
per_head = jax.jit(lambda p, t, c: kv_quant.extend(p, att, t, c)[0])
step_fns = {
    "int8 cache, per-head reader": (per_head, int8_cache),
    "float32 cache, per-head reader": (per_head, f32_qcache),
    "float32 cache, decode.extend": (jax.jit(lambda p, t, c: decode.extend(p, att, t, c)[0]),
                                     f32_cache),
    "int8 cache, convert everything": (lambda p, t, c: extend_convert_everything(p, att, t, c),
                                       int8_cache),
}
I8_ROUNDS = 9
i8_runs = timing.time_alternating([partial(fn, p_att, tok_att, c) for fn, c in step_fns.values()],
                                  rounds=I8_ROUNDS, warmup=1)
int8_time = {label: t.median_s for label, t in zip(step_fns, i8_runs)}
glue("ch5_i8_rounds", str(I8_ROUNDS))
for label, t in int8_time.items():
    print(f"{label:32s} {fmt_seconds(t)}  ({DEVICE})")
t_i8, t_f32, t_lib, t_naive = int8_time.values()
bytes_ratio = kvcache.cache_bytes(int8_cache) / kvcache.cache_bytes(f32_qcache)

# %% tags=["hide-input"]
# The claims' bounds, glued into the sentences that state them.
NAIVE_FACTOR = 2            # converting everything first, against the per-head reader
I8_CEILING = 1.25           # the per-head reader: int8 cache against float32 cache
expect_measured(t_naive > NAIVE_FACTOR * t_i8, "converting the whole int8 cache first takes "
                f"over {fmt_ratio(NAIVE_FACTOR, 0)} the per-head reader's time (medians)",
                expected=f"over {fmt_ratio(NAIVE_FACTOR, 0)} the per-head reader's median",
                measured=f"{fmt_seconds(t_naive)} against {fmt_seconds(t_i8)}")
expect_measured(t_i8 < I8_CEILING * t_f32, "on the int8 cache the per-head reader's median "
                f"call takes under {fmt_percent(I8_CEILING)} of its median on the float32 cache",
                expected=f"under {fmt_percent(I8_CEILING)} of the float32 cache's median",
                measured=f"{fmt_seconds(t_i8)} against {fmt_seconds(t_f32)}")
glue("ch5_naive_factor", fmt_ratio(NAIVE_FACTOR, 0))
glue("ch5_i8_ceiling", fmt_percent(I8_CEILING))
glue("ch5_t_i8", fmt_seconds(t_i8)); glue("ch5_t_f32", fmt_seconds(t_f32))
glue("ch5_t_lib", fmt_seconds(t_lib)); glue("ch5_t_naive", fmt_seconds(t_naive))
glue("ch5_t_ratio", fmt_percent(t_i8 / t_f32)); glue("ch5_t_bytes_ratio", fmt_percent(bytes_ratio))
glue("ch5_t_naive_x", fmt_ratio(t_naive / t_i8))

# %% [markdown]
# Converting everything first is the slowest of all: {glue:text}`ch5_t_naive`,
# {glue:text}`ch5_t_naive_x` the per-head reader's time (the chapter checks over
# {glue:text}`ch5_naive_factor`), because XLA writes the converted cache to memory and reads it
# back. The per-head reader takes {glue:text}`ch5_t_i8` against
# {glue:text}`ch5_t_f32` for the float32 cache with the same code, on {glue:text}`ch5_device`:
# {glue:text}`ch5_t_ratio` of the time for {glue:text}`ch5_t_bytes_ratio` of the cache bytes
# (the chapter checks under {glue:text}`ch5_i8_ceiling`).
# The library's standard float32 step, one large batched product that XLA spreads over all
# cores, takes {glue:text}`ch5_t_lib`. On a CPU the saving in bytes turns into much less
# saving in time, if any: turning a code back into a float is an instruction per element, and
# a processor with few cores converts not much faster than it reads floats from memory. XLA:CPU
# offers no way around it — its matrix products, and its integer products too, convert int8
# operands to float first, in a full-size copy. GPUs and TPUs convert in registers inside the
# kernel that reads the cache, which is where int8 and fp8 KV caches are used in practice. What
# the int8 cache gives everywhere is capacity: {glue:text}`ch5_int8_capacity` the tokens of a
# 16-bit cache in the same memory.
#
# ## Forgetting tokens: StreamingLLM and H2O
#
# Attention in trained models concentrates on a few tokens. If the cache dropped the tokens that
# get almost no attention, the output would barely change, and the cache could have a fixed size
# whatever the length of the sequence. Several methods do this without retraining:
#
# - **StreamingLLM** {cite:p}`xiao2024streamingllm` observed that the first few tokens receive
#   a lot of attention whatever they say — *attention sinks* — and so do the most recent ones.
#   It keeps a handful of initial tokens and a sliding window of recent ones.
# - **H2O** {cite:p}`zhang2023h2o` keeps a budget of tokens: the most recent ones, plus the
#   *heavy hitters*, those with the largest attention accumulated over all steps so far. When
#   the cache is full, it drops the token with the least.
# - **Scissorhands** {cite:p}`liu2023scissorhands` rests on the same "persistence of
#   importance": tokens that mattered keep mattering. It keeps recent tokens and those with high
#   attention over a recent history window, and drops many tokens at once to reach a target
#   compression instead of one per step.
# - **FastGen** {cite:p}`ge2024fastgen` fixes an error target instead of a budget. After
#   prefill it profiles each attention head and picks, per head, the cheapest policy that
#   recovers the attention to within the target — keep special tokens, punctuation, a local
#   window, heavy hitters, or combinations — falling back to the full cache when nothing cheaper
#   is good enough.
#
# `kv_evict` implements StreamingLLM and H2O per KV head, with a cache that holds exactly the
# budget (its tests replay both policies in plain Python and compare the kept tokens). What each
# rule can keep is easiest to see first on a stream of queries and keys built with the structure
# they look for — a sink at the first position, {glue:text}`ch5_ev_heavy` heavy hitters, a
# preference for recent tokens under RoPE — checking that the structure is there before
# measuring; a trained model follows.

# %% [markdown] tags=["lang-zh"]
# 先全部转换的做法是所有方案中最慢的：{glue:text}`ch5_t_naive`，是逐头读取器所用时间的
# {glue:text}`ch5_t_naive_x`（本章检验它超过 {glue:text}`ch5_naive_factor`），因为 XLA 会把转换后的
# 缓存写进内存再读回来。在 {glue:text}`ch5_device`
# 上，逐头读取器耗时 {glue:text}`ch5_t_i8`，用同样的代码读取 float32 缓存则耗时
# {glue:text}`ch5_t_f32`：用 {glue:text}`ch5_t_bytes_ratio` 的缓存字节，花了
# {glue:text}`ch5_t_ratio` 的时间（本章检验它不到 {glue:text}`ch5_i8_ceiling`）。
# 库的标准 float32 步骤——一次覆盖整个批次的大乘积，由 XLA 分摊到所
# 有核上——耗时 {glue:text}`ch5_t_lib`。在 CPU 上，字节上的节省转化成的时间节省要少得多，甚至没有：把
# 一个编码转换回浮点数，每个元素要一条指令，而核数不多的处理器做转换，并不比它从内存读浮点数快多少。
# XLA:CPU 没有提供绕过去的办法——它的矩阵乘法，连同整数乘法，都会先把 int8 操作数转换成浮点数，存成一
# 份完整大小的副本。GPU 和 TPU 在读取缓存的内核里、在寄存器中完成转换，int8 和 fp8 的 KV 缓存在实践
# 中正是用在那里。int8 缓存在哪里都能带来的，是容量：在同样的内存里，它容纳的词元数是 16 位缓存的
# {glue:text}`ch5_int8_capacity`。
#
# ## 忘掉一些词元：StreamingLLM 与 H2O
#
# 在训练好的模型中，注意力集中在少数几个词元上。如果缓存丢掉那些几乎得不到注意力的词元，输出几乎不会
# 变，而缓存的大小就可以固定下来，不管序列有多长。有几种方法不需重新训练就能做到这一点：
#
# - **StreamingLLM** {cite:p}`xiao2024streamingllm` 观察到，最前面的几个词元不论内容是什么，都会得到
#   大量注意力——即*注意力汇聚点*——最近的几个词元也是如此。它保留少量起始词元，外加一个由最近词元组成
#   的滑动窗口。
# - **H2O** {cite:p}`zhang2023h2o` 保留一个预算之内的词元：最近的那些，再加上*高关注词元*，即到目前
#   为止在所有步骤上累计注意力最大的那些。缓存满了，就丢掉累计注意力最小的那个词元。
# - **Scissorhands** {cite:p}`liu2023scissorhands` 基于同样的“重要性的持续性”：重要过的词元会一直重
#   要。它保留最近的词元，以及在最近一段历史窗口中注意力高的词元；为了达到目标压缩率，它一次丢掉许多
#   词元，而不是每一步丢一个。
# - **FastGen** {cite:p}`ge2024fastgen` 固定的是误差目标，而不是预算。预填充之后，它对每个注意力头做
#   一次剖析，为每个头挑出能把注意力恢复到目标之内的最便宜的策略——保留特殊词元、标点、一个局部窗口、
#   高关注词元，或它们的组合——如果没有更便宜的策略够好，就退回到完整的缓存。
#
# `kv_evict` 按 KV 头实现了 StreamingLLM 和 H2O，缓存恰好容纳预算那么多词元（它的测试用纯 Python 重
# 放两种策略，并比较保留下来的词元）。每条规则能保留什么，先在一个按它们所找的结构构造出来的查询和键
# 的流上最容易看清——第一个位置上有一个汇聚点，{glue:text}`ch5_ev_heavy` 的词元是高关注词元，在 RoPE
# 下偏好最近的词元——并在测量之前先确认这种结构确实存在；随后再看一个训练好的模型。

# %%
T_ev, K_ev, G_ev, H_ev = 256, 2, 2, 64


@partial(jax.jit, static_argnums=2)
def last_query_attention(q_BTNH, k_BSKH_or_BKSH, heads_first):
    """Attention probabilities of the final query over all keys [B, N, S] (causal)."""
    k_BKSH = k_BSKH_or_BKSH if heads_first else k_BSKH_or_BKSH.swapaxes(1, 2)
    G = q_BTNH.shape[2] // k_BKSH.shape[1]
    s_BNS = jnp.einsum("BNH,BNSH->BNS", q_BTNH[:, -1], jnp.repeat(k_BKSH, G, axis=1))
    return jax.nn.softmax(s_BNS / np.sqrt(q_BTNH.shape[-1]), axis=-1)


def top_share_of(p_BNS, fraction=0.05):
    """Share of the attention that goes to the top `fraction` of the keys, averaged."""
    n = max(1, int(p_BNS.shape[-1] * fraction))
    return float(jnp.sort(p_BNS, -1)[..., -n:].sum(-1).mean())


qs, ks_, vs_ = kv_evict.structured_stream(jax.random.key(0), 2, T_ev, K_ev, G_ev, H_ev)
pos_ev = jnp.broadcast_to(jnp.arange(T_ev), (2, T_ev))
full_ev = jax.jit(attention_reference)(qs, ks_.swapaxes(1, 2), vs_.swapaxes(1, 2),
                                       attention_mask(pos_ev, pos_ev[0], jnp.full((2,), T_ev)))[0]
last = last_query_attention(qs, ks_, False)
sink_share = float(last[..., 0].mean())
top_share = top_share_of(last)
model_top = top_share_of(last_query_attention(qkv[1][0], qkv[1][1], True))
assert top_share > 0.5 and top_share > 2 * model_top and sink_share > 10 / T_ev

# %% tags=["hide-input"]
glue("ch5_ev_heavy", fmt_percent(inspect.signature(kv_evict.structured_stream)
                                 .parameters["heavy_fraction"].default))
glue("ch5_ev_sink", fmt_percent(sink_share)); glue("ch5_ev_top", fmt_percent(top_share))
glue("ch5_ev_model_top", fmt_percent(model_top))
glue("ch5_ev_top_frac", fmt_percent(inspect.signature(top_share_of).parameters["fraction"]
                                    .default))

# %% [markdown]
# In the structured stream the last query puts {glue:text}`ch5_ev_sink` of its attention on the
# first token and {glue:text}`ch5_ev_top` on its top {glue:text}`ch5_ev_top_frac` of tokens;
# in our random-weight model the top {glue:text}`ch5_ev_top_frac` get only
# {glue:text}`ch5_ev_model_top`. Now the error of the attention output,
# measured in units of a typical value vector, for budgets from 8 to 128 of the 256 tokens:
# StreamingLLM with 4 sinks, the same window without sinks, and H2O with half its budget for
# recent tokens (the paper's split).

# %% [markdown] tags=["lang-zh"]
# 在这个结构化的流中，最后一个查询把 {glue:text}`ch5_ev_sink` 的注意力放在第一个词元上，把
# {glue:text}`ch5_ev_top` 放在排名前 {glue:text}`ch5_ev_top_frac` 的词元上；而在我们权重随机的模型中，
# 排名前 {glue:text}`ch5_ev_top_frac` 的词元只得到 {glue:text}`ch5_ev_model_top`。现在来看注意力输出
# 的误差，以一个典型值向量的大小为单位，预算从 8 到 128（共 256 个词元）：带 4 个汇聚点的
# StreamingLLM、去掉汇聚点的同样窗口，以及把一半预算留给最近词元的 H2O（论文中的分法）。

# %%
budgets = [8, 16, 32, 64, 128]
policies = {"StreamingLLM (4 sinks + window)": ("streaming", 4, lambda b: 0),
            "window only (no sinks)": ("streaming", 0, lambda b: 0),
            "H2O (heavy hitters + recent)": ("h2o", 0, lambda b: b // 2)}
ev_err = {label: [kv_evict.relative_error(kv_evict.attend_stream(
    qs, ks_, vs_, max(budgets), b, pol, n_sink, n_recent(b))[0], full_ev, vs_, b)
    for b in budgets]
    for label, (pol, n_sink, n_recent) in policies.items()}
stream, window_only, h2o = ev_err.values()
assert all(a > b for e in ev_err.values() for a, b in zip(e, e[1:]))   # more budget, less error
assert all(h < s for h, s in zip(h2o, stream))                          # H2O beats the window
assert all(s < w for s, w in zip(stream, window_only))                  # sinks matter

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6, 3.6))
for label, e in ev_err.items():
    ax.plot(budgets, e, "o-", label=label)
ax.set_xscale("log", base=2)
ax.set_xlabel(f"cache budget (tokens kept per head, of {T_ev})")
ax.set_ylabel("attention output error\n(in typical value norms)")
ax.set_title("Eviction policies on a structured attention stream")
ax.legend(); ax.grid(alpha=0.3)
glue_figure("ch5_evict_figure", fig, zh=dict(
    title="结构化注意力流上的淘汰策略", xlabel=f"缓存预算（每个头保留的词元数，共 {T_ev} 个）",
    ylabel="注意力输出的误差\n（以典型值向量的范数为单位）",
    legend=["StreamingLLM（4 个汇聚点 + 窗口）", "仅窗口（无汇聚点）", "H2O（高关注词元 + 最近词元）"]))
glue("ch5_ev_h2o_32", f"{h2o[2]:.2f}"); glue("ch5_ev_stream_32", f"{stream[2]:.2f}")
glue("ch5_ev_window_32", f"{window_only[2]:.2f}")

# %% [markdown]
# ```{glue:figure} ch5_evict_figure
# ```
#
# Errors fall as the budget grows, for every policy. At a budget of 32 (an eighth of the
# sequence), H2O's error is {glue:text}`ch5_ev_h2o_32`, StreamingLLM's
# {glue:text}`ch5_ev_stream_32`, and the window without sinks {glue:text}`ch5_ev_window_32`:
# keeping the sinks helps a plain window, and keeping the tokens that have collected attention
# helps more, because here the heavy hitters are scattered through the sequence. None of these
# numbers says anything about a trained model's accuracy — the trained model below does — but
# they show what each rule can and cannot keep. And the memory gain is real: the cache holds the
# budget, not the sequence, so its size and the bytes a step reads stop growing with length.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch5_evict_figure
# ```
#
# 对每一种策略，误差都随预算增大而下降。在预算为 32（序列的八分之一）时，H2O 的误差是
# {glue:text}`ch5_ev_h2o_32`，StreamingLLM 是 {glue:text}`ch5_ev_stream_32`，不带汇聚点的窗口是
# {glue:text}`ch5_ev_window_32`：保留汇聚点对单纯的窗口有帮助，而保留那些积累了注意力的词元帮助更大，
# 因为在这里高关注词元散布在整条序列中。这些数字说明不了训练好的模型的准确率（那要看下文在训练好的模型上的测量），但
# 它们显示了每条规则能保留什么、不能保留什么。而内存上的收益是实实在在的：缓存容纳的是预算，而不是整
# 条序列，所以它的大小和一个步骤读取的字节都不再随长度增长。


# %% [markdown]
# ### On a trained model
#
# Whether any of this matters is a question about trained models, so we now load one: the
# book's SmolLM2-135M-Instruct (chapter 1), {glue:text}`ch5_sm_L` layers, each with
# {glue:text}`ch5_sm_K` KV heads for {glue:text}`ch5_sm_N` query heads. Its text is the opening
# of Arthur Conan Doyle's "A Scandal in Bohemia" (1891, public domain, transcribed by Project
# Gutenberg; the data file names its source), {glue:text}`ch5_story_tokens` tokens. First,
# where its attention goes on the first {glue:text}`ch5_map_T` of them. On the left, one head's
# attention map — layer {glue:text}`ch5_map_layer`, the layer whose first token draws most,
# and its head {glue:text}`ch5_map_head`; on the right, for every layer, the share of attention
# that lands on the first token, averaged over heads and over the queries from position
# {glue:text}`ch5_map_from` on, against the share an even spread over the visible tokens would
# give it.

# %% [markdown] tags=["lang-zh"]
# ### 在训练好的模型上
#
# 这一切是否要紧，是关于训练好的模型的问题，所以我们现在加载一个：本书的 SmolLM2-135M-Instruct（第 1
# 章），共 {glue:text}`ch5_sm_L` 层，每层 {glue:text}`ch5_sm_N` 个查询头配 {glue:text}`ch5_sm_K` 个
# KV 头。给它的文本是 Arthur Conan Doyle《波希米亚丑闻》的开头（1891 年，属于公有领域，由 Project
# Gutenberg 录入；数据文件注明了出处），共 {glue:text}`ch5_story_tokens` 个词元。先看它在前
# {glue:text}`ch5_map_T` 个词元上把注意力放在哪里。左图是一个头的注意力图——第
# {glue:text}`ch5_map_layer` 层（第一个词元在这一层得到的注意力最多）的第 {glue:text}`ch5_map_head`
# 个头；右图对每一层给出落在第一个词元上的注意力份额，对各个头、对从位置 {glue:text}`ch5_map_from`
# 起的各个查询取平均，并与注意力在可见词元上均匀分布时它应得的份额作比较。

# %%
from inferbook.memory import kv_quality
from inferbook.model.pretrained import load_pretrained

smol = load_pretrained("smollm2-135m-instruct")
sm_cfg, sm_params = smol.cfg, smol.params
story = bookdata.load("scandal_in_bohemia.json")
story_ids = smol.tokenizer.encode("\n\n".join(story["paragraphs"]))
print(story["source"])
map_T, map_from = 48, 4
map_probs = kv_quality.attention_probs(sm_params, sm_cfg, jnp.asarray([story_ids[:map_T]]))
layer_sink = [kv_quality.sink_share(p, map_from)[0] for p in map_probs]     # [L, B, N, T, T]
uniform_sink = kv_quality.sink_share(map_probs[0], map_from)[1]
map_layer = int(np.argmax(layer_sink))
map_head = int(jnp.argmax(map_probs[map_layer, 0, :, map_from:, 0].mean(-1)))
sink_factor = 5
sink_layers = sum(s > sink_factor * uniform_sink for s in layer_sink)
assert layer_sink[map_layer] > 10 * uniform_sink     # the sink: far above an even spread ...
assert sink_layers > sm_cfg.L // 2                   # ... in most layers, not in one
first_word = smol.decode(story_ids[:1]).strip()
assert first_word == story["paragraphs"][0].split()[0]

# %% tags=["hide-input"]
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.8), layout="constrained")
ax0.imshow(np.asarray(map_probs[map_layer, 0, map_head]), cmap="magma", vmin=0, vmax=1)
ax0.set_xlabel("key position"); ax0.set_ylabel("query position")
ax0.set_title(f"attention map, layer {map_layer}, head {map_head}")
ax1.bar(range(sm_cfg.L), layer_sink)
ax1.axhline(uniform_sink, color="black", ls="--", label="an even spread")
ax1.set_xlabel("layer"); ax1.set_ylabel("attention on the first token")
ax1.legend()
glue_figure("ch5_sink_figure", fig, zh=[
    dict(xlabel="键的位置", ylabel="查询的位置", title=f"注意力图，第 {map_layer} 层，第 {map_head} 个头"),
    dict(xlabel="层", ylabel="落在第一个词元上的注意力", legend=["均匀分布"])])
glue("ch5_sm_L", str(sm_cfg.L)); glue("ch5_sm_K", str(sm_cfg.K)); glue("ch5_sm_N", str(sm_cfg.N))
glue("ch5_story_tokens", fmt_count(len(story_ids))); glue("ch5_map_T", str(map_T))
glue("ch5_map_layer", str(map_layer)); glue("ch5_map_head", str(map_head))
glue("ch5_map_from", str(map_from))
glue("ch5_sink_top", fmt_percent(layer_sink[map_layer]))
glue("ch5_sink_uniform", fmt_percent(uniform_sink, 1))
glue("ch5_sink_ratio", fmt_ratio(layer_sink[map_layer] / uniform_sink, 0))
glue("ch5_sink_layers", str(sink_layers))
glue("ch5_sink_factor", fmt_ratio(sink_factor, 0)); glue("ch5_first_word", first_word)

# %% [markdown]
# ```{glue:figure} ch5_sink_figure
# ```
#
# The bright left column is the attention sink: in layer {glue:text}`ch5_map_layer` the first
# token, the word "{glue:text}`ch5_first_word`", collects {glue:text}`ch5_sink_top` of the attention on average, where
# an even spread would give it {glue:text}`ch5_sink_uniform` — {glue:text}`ch5_sink_ratio` as
# much — and {glue:text}`ch5_sink_layers` of the {glue:text}`ch5_sm_L` layers give it more than
# {glue:text}`ch5_sink_factor` its even share. What the first token says does not matter; that it comes first
# does. The second bright band, along the diagonal, is the recent tokens.
#
# Now the cheaper caches, each judged by what the model does with it. Two measures, on the
# first {glue:text}`ch5_tm_T` tokens of the story: the *perplexity* of the text — the exponential
# of the mean negative log-likelihood of each next token, counted from position
# {glue:text}`ch5_tm_budget` on, where eviction has started — and the *greedy agreement*: the
# full cache continues the first {glue:text}`ch5_tm_prompt` tokens greedily for
# {glue:text}`ch5_tm_cont` tokens, and we feed that continuation to each cheaper cache and count
# how often its most likely next token is the one the full cache chose. The evicting caches hold
# {glue:text}`ch5_tm_budget` tokens per KV head in every layer: a window alone, the same window
# with four sinks (StreamingLLM), and H2O with half its budget for recent tokens. The quantized
# caches keep every token with int8 codes (one scale per vector, as above) or int4 codes (one
# scale per 32 numbers). Sizes are at the last token, as a share of a full 16-bit cache.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch5_sink_figure
# ```
#
# 左边那一列亮色就是注意力汇聚点：在第 {glue:text}`ch5_map_layer` 层，第一个词元（单词“{glue:text}`ch5_first_word`”）平均得到
# {glue:text}`ch5_sink_top` 的注意力，而均匀分布只会给它 {glue:text}`ch5_sink_uniform`——是后者的
# {glue:text}`ch5_sink_ratio`；{glue:text}`ch5_sm_L` 层中有 {glue:text}`ch5_sink_layers` 层给它的注意
# 力超过其均匀份额的 {glue:text}`ch5_sink_factor`。第一个词元是什么词无关紧要，要紧的是它排在最前面。沿对角线的第二条亮带，是
# 最近的词元。
#
# 现在来看更省的缓存，每一种都按模型用它做出的结果来评判。两个指标，都在故事的前
# {glue:text}`ch5_tm_T` 个词元上计算：文本的*困惑度*——每个下一个词元的平均负对数似然的指数，从位置
# {glue:text}`ch5_tm_budget` 起计算，淘汰从那里开始——以及*贪心一致率*：完整的缓存从前
# {glue:text}`ch5_tm_prompt` 个词元出发，用贪心解码续写 {glue:text}`ch5_tm_cont` 个词元；我们把这段续
# 写喂给每一种更省的缓存，数一数它最可能的下一个词元有多少次正是完整缓存选中的那个。做淘汰的缓存在每一
# 层的每个 KV 头上保留 {glue:text}`ch5_tm_budget` 个词元：单纯的窗口、同样的窗口加四个汇聚点
# （StreamingLLM），以及把一半预算留给最近词元的 H2O。量化的缓存保留全部词元，用 int8 编码（同上，每个
# 向量一个缩放因子）或 int4 编码（每 32 个数一个缩放因子）。大小取最后一个词元处的值，以占完整 16 位
# 缓存的比例表示。

# %%
tm_T, tm_prompt, tm_budget = 128, 48, 32
tm_cont = smol.generate([story_ids[:tm_prompt]], tm_T - tm_prompt, stop_at_eos=False).tokens[0]
tm_batch = jnp.asarray([story_ids[:tm_T], story_ids[:tm_prompt] + list(tm_cont)])


def cache_quality(logits_BTV):
    """(perplexity of the story past the budget, agreement with the full cache's greedy run)."""
    return (kv_quality.perplexity(logits_BTV[:1], tm_batch[:1], tm_budget),
            kv_quality.greedy_agreement(logits_BTV[1:], tm_batch[1:], tm_prompt - 1))


def evicted(policy, n_sink, n_recent):
    return kv_evict.model_logits(sm_params, sm_cfg, tm_batch, tm_budget, tm_budget, policy,
                                 n_sink, n_recent)


int4_group = 32
tm_runs = {   # label: (logits, cache size as a share of a full 16-bit cache)
    "full cache": (decoder.forward(sm_params, sm_cfg, tm_batch), 1.0),
    "int8 codes": (kv_quality.forward_kv_bits(sm_params, sm_cfg, tm_batch, 8),
                   kv_quant.bytes_per_element(sm_cfg.H) / BF16),
    "int4 codes": (kv_quality.forward_kv_bits(sm_params, sm_cfg, tm_batch, 4, int4_group),
                   kv_quality.kv_bits_bytes_per_element(4, int4_group) / BF16),
    "window": (evicted("streaming", 0, 0), tm_budget / tm_T),
    "sinks + window (StreamingLLM)": (evicted("streaming", 4, 0), tm_budget / tm_T),
    "heavy hitters + recent (H2O)": (evicted("h2o", 0, tm_budget // 2), tm_budget / tm_T),
}
tm_quality = {label: cache_quality(logits) for label, (logits, _) in tm_runs.items()}
for label, (ppl, agree) in tm_quality.items():
    print(f"{label:32s} size {tm_runs[label][1]:6.1%}  perplexity {ppl:7.2f}  "
          f"greedy agreement {agree:6.1%}")

# %%
q = {label.split(" (")[0]: v for label, v in tm_quality.items()}
ppl_full, agree_full = q["full cache"]
assert agree_full == 1.0                       # the full cache's logits are the greedy run's
assert q["int8 codes"][0] < 1.02 * ppl_full and q["int8 codes"][1] >= 0.95
assert q["int4 codes"][0] > q["int8 codes"][0]           # four bits cost more than eight
assert q["window"][0] > 3 * ppl_full and q["window"][1] < 0.5   # no sinks: the model breaks
for policy in ("sinks + window", "heavy hitters + recent"):
    assert q[policy][0] < 1.5 * ppl_full and q[policy][0] < q["window"][0] / 3

# %% tags=["hide-input"]
Markdown("| cache | size | perplexity | greedy agreement |\n|---|---:|---:|---:|\n" + "\n".join(
    f"| {label} | {fmt_percent(tm_runs[label][1])} | {ppl:.1f} | {fmt_percent(agree)} |"
    for label, (ppl, agree) in tm_quality.items()))

# %% tags=["hide-input"]
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 3.4), layout="constrained")
tm_labels = list(tm_quality)
tm_rows = np.arange(len(tm_labels))
ax0.barh(tm_rows, [v[0] for v in tm_quality.values()])
ax0.axvline(ppl_full, color="black", ls="--", lw=1)
ax0.set_xscale("log"); ax0.set_xlabel("perplexity of the story (lower is better)")
ax1.barh(tm_rows, [100 * v[1] for v in tm_quality.values()])
ax1.set_xlabel("greedy agreement with the full cache (%)")
for ax in (ax0, ax1):
    ax.set_yticks(tm_rows, [""] * len(tm_rows)); ax.invert_yaxis()
for row, label in zip(tm_rows, tm_labels):
    ax0.text(-0.02, row, label, transform=ax0.get_yaxis_transform(), ha="right", va="center")
tm_labels_zh = {"full cache": "完整缓存", "int8 codes": "int8 编码", "int4 codes": "int4 编码",
                "window": "窗口", "sinks + window (StreamingLLM)": "汇聚点 + 窗口（StreamingLLM）",
                "heavy hitters + recent (H2O)": "高关注词元 + 最近词元（H2O）"}
glue_figure("ch5_quality_figure", fig, zh=[
    dict(xlabel="故事的困惑度（越低越好）", texts=[tm_labels_zh[t] for t in tm_labels]),
    dict(xlabel="与完整缓存的贪心一致率（%）")])
glue("ch5_tm_T", str(tm_T)); glue("ch5_tm_prompt", str(tm_prompt))
glue("ch5_tm_budget", str(tm_budget)); glue("ch5_tm_cont", str(tm_T - tm_prompt))
glue("ch5_tm_ppl_full", f"{ppl_full:.1f}")
glue("ch5_tm_ppl_window", f"{q['window'][0]:.0f}")
glue("ch5_tm_agree_window", fmt_percent(q["window"][1]))
glue("ch5_tm_ppl_stream", f"{q['sinks + window'][0]:.1f}")
glue("ch5_tm_agree_stream", fmt_percent(q["sinks + window"][1]))
glue("ch5_tm_ppl_h2o", f"{q['heavy hitters + recent'][0]:.1f}")
glue("ch5_tm_agree_h2o", fmt_percent(q["heavy hitters + recent"][1]))
glue("ch5_tm_ppl_int8", f"{q['int8 codes'][0]:.1f}")
glue("ch5_tm_agree_int8", fmt_percent(q["int8 codes"][1]))
glue("ch5_tm_ppl_int4", f"{q['int4 codes'][0]:.1f}")
glue("ch5_tm_agree_int4", fmt_percent(q["int4 codes"][1]))
glue("ch5_tm_size_evict", fmt_percent(tm_budget / tm_T))

# %% [markdown]
# ```{glue:figure} ch5_quality_figure
# ```
#
# With the full cache the story's perplexity is {glue:text}`ch5_tm_ppl_full`. A window of the
# last {glue:text}`ch5_tm_budget` tokens, {glue:text}`ch5_tm_size_evict` of the cache, sends it
# to {glue:text}`ch5_tm_ppl_window` and agrees with the full cache's next token only
# {glue:text}`ch5_tm_agree_window` of the time: once the first token leaves the cache, the
# attention that the heads parked on it has to go somewhere, and the model falls apart — the
# failure StreamingLLM was built to explain. Keeping four sink tokens in the same budget brings
# the perplexity back to {glue:text}`ch5_tm_ppl_stream` ({glue:text}`ch5_tm_agree_stream`
# agreement), and H2O, which keeps the sink because it has collected the most attention, to
# {glue:text}`ch5_tm_ppl_h2o` ({glue:text}`ch5_tm_agree_h2o`). The int8 cache is almost free:
# {glue:text}`ch5_tm_ppl_int8`, {glue:text}`ch5_tm_agree_int8` agreement; int4 costs more,
# {glue:text}`ch5_tm_ppl_int4` and {glue:text}`ch5_tm_agree_int4`. A short text on a small
# model is one data point, not a benchmark — the papers evaluate many models and tasks — but it
# shows each effect they report, measured.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch5_quality_figure
# ```
#
# 用完整的缓存时，故事的困惑度是 {glue:text}`ch5_tm_ppl_full`。只保留最近 {glue:text}`ch5_tm_budget`
# 个词元的窗口——缓存的 {glue:text}`ch5_tm_size_evict`——把它推到 {glue:text}`ch5_tm_ppl_window`，与完
# 整缓存的下一个词元只有 {glue:text}`ch5_tm_agree_window` 的时候一致：第一个词元一旦离开缓存，各个头
# 原先停放在它身上的注意力就得另找去处，模型随之崩溃——StreamingLLM 正是为解释这种失败而提出的。在同样
# 的预算里保留四个汇聚点，困惑度就回到 {glue:text}`ch5_tm_ppl_stream`（一致率
# {glue:text}`ch5_tm_agree_stream`）；H2O 因为汇聚点积累的注意力最多而保留了它，困惑度为
# {glue:text}`ch5_tm_ppl_h2o`（{glue:text}`ch5_tm_agree_h2o`）。int8 缓存几乎没有代价：
# {glue:text}`ch5_tm_ppl_int8`，一致率 {glue:text}`ch5_tm_agree_int8`；int4 的代价更大，分别是
# {glue:text}`ch5_tm_ppl_int4` 和 {glue:text}`ch5_tm_agree_int4`。一个小模型上的一段短文本只是一个数据
# 点，不是基准测试——论文评估了许多模型和任务——但它把论文报告的每一种效应都实测了出来。

# %% [markdown]
# ## Wasting less of what is allocated: paging
#
# So far we assumed every allocated byte holds a token. Systems before vLLM
# {cite:p}`kwon2023pagedattention` gave each request one contiguous region, reserved at
# admission for the longest the request might become, because their attention kernels wanted
# each sequence's cache in one piece. Three kinds of waste follow: slots reserved for tokens not
# yet generated, slots never used because the request ended early (internal fragmentation), and
# free memory in holes too small for the next request (external fragmentation). The PagedAttention
# paper measured how much of the KV memory held actual tokens in such a system, and how much
# with paging, which hands out small fixed-size blocks as a sequence grows (the engine's
# `BlockManager`, chapter 12). Its figures are in the book's data:

# %% [markdown] tags=["lang-zh"]
# ## 少浪费已分配的内存：分页
#
# 到目前为止，我们都假设每个分配出去的字节都存着一个词元。vLLM {cite:p}`kwon2023pagedattention` 之前
# 的系统给每个请求一段连续的区域，在接纳请求时就按它可能达到的最大长度预留，因为它们的注意力内核要求
# 每条序列的缓存连成一片。由此产生三种浪费：为尚未生成的词元预留的槽位；因请求提前结束而从未用上的槽
# 位（内部碎片）；以及夹在空洞里、小到放不下下一个请求的空闲内存（外部碎片）。PagedAttention 论文测
# 量了在这样的系统中 KV 内存有多少真正存着词元，以及采用分页之后又有多少——分页随着序列的增长分发固定
# 大小的小块（引擎的 `BlockManager`，第 12 章）。论文的数据收在本书的数据文件里：

# %%
paper = bookdata.load("pagedattention_waste.json")
shares = paper["token_state_share"]
paper_waste = {k: 1 - v for k, v in shares.items()}

# %% tags=["hide-input"]
glue("ch5_paper_low", fmt_percent(min(paper_waste["orca_max"], paper_waste["orca_oracle"])))
glue("ch5_paper_high", fmt_percent(max(paper_waste["orca_max"], paper_waste["orca_oracle"])))
glue("ch5_paper_paged", fmt_percent(paper["paged_waste_at_most"]))
glue("ch5_sg_in", fmt_count(round(paper["sharegpt_mean_input_tokens"])))
glue("ch5_sg_out", fmt_count(round(paper["sharegpt_mean_output_tokens"])))
glue("ch5_sg_max", f"{paper['max_len']:,}")
print(paper["source"])
print({k: fmt_percent(v) for k, v in paper_waste.items()})

# %% [markdown]
# Between {glue:text}`ch5_paper_low` and {glue:text}`ch5_paper_high` of the memory wasted with
# contiguous reservations, against less than {glue:text}`ch5_paper_paged` with paging. We check
# those numbers on our own allocators. `memory_sim.simulate` serves a queue of requests with
# log-normal lengths around the means of the paper's ShareGPT trace
# ({glue:text}`ch5_sg_in` prompt and {glue:text}`ch5_sg_out` output tokens, at most
# {glue:text}`ch5_sg_max` in all) from a pool of 40,000 token slots: with contiguous regions
# sized for the maximum length, for the next power of two, or for the exact final length (an
# oracle, first-fit in one address space), and with 16-token pages from the engine's block
# manager. The breakdown is averaged over the steps in which a request was waiting — the pool is
# full, so every slot not holding a token is a loss.

# %% [markdown] tags=["lang-zh"]
# 采用连续预留时，有 {glue:text}`ch5_paper_low` 到 {glue:text}`ch5_paper_high` 的内存被浪费，而采用
# 分页时不到 {glue:text}`ch5_paper_paged`。我们在自己的分配器上检验这些数字。`memory_sim.simulate` 用
# 一个有 40,000 个词元槽位的池子服务一队请求，请求长度服从对数正态分布，均值取论文中 ShareGPT 轨迹的
# 均值（提示词 {glue:text}`ch5_sg_in` 个词元、输出 {glue:text}`ch5_sg_out` 个词元，总共最多
# {glue:text}`ch5_sg_max` 个）；分配方式有：按最大长度、按下一个 2 的幂、或按确切的最终长度划分的连
# 续区域（最后一种是预知一切的“神谕”，在单一地址空间中首次适配），以及引擎的块管理器提供的 16 个词元
# 一页的分页。各部分的占比是在有请求等待的那些步骤上平均得出的——此时池子已满，所以每个没有存词元的槽
# 位都是损失。

# %%
requests = memory_sim.synthetic_requests(600, seed=0,
                                        mean_prompt=paper["sharegpt_mean_input_tokens"],
                                        mean_output=paper["sharegpt_mean_output_tokens"],
                                        max_len=paper["max_len"])
mem = {s: memory_sim.simulate(requests, 40_000, s, max_len=paper["max_len"], block_size=16)
       for s in memory_sim.SCHEMES}

# %% tags=["hide-input"]
labels = {"max": "contiguous, max length", "pow2": "contiguous, power of two",
          "oracle": "contiguous, exact (oracle)", "paged": "paged, 16-token blocks"}
parts = [("tokens", "token states"), ("reserved", "reserved for future tokens"),
         ("internal", "internal fragmentation"), ("external", "free but unusable")]
fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
rows, left = np.arange(len(mem)), np.zeros(len(mem))
for attr, name in parts:
    vals = np.array([getattr(b, attr) for b in mem.values()]) * 100
    ax.barh(rows, vals, left=left, label=name)
    left += vals
ax.scatter([100 * shares[f"orca_{s}"] for s in ("max", "pow2", "oracle")] + [100 * shares["vllm"]],
           rows, marker="|", s=300, color="black", zorder=3,
           label="token states reported (Kwon et al.)")
# The schemes' names are texts beside the rows, not tick labels, so that the Chinese figure
# can carry their Chinese (`glue_figure` translates an axes' texts).
ax.set_yticks(rows, [""] * len(rows))
for row, s in zip(rows, mem):
    ax.text(-0.02, row, labels[s], transform=ax.get_yaxis_transform(), ha="right", va="center")
ax.set_xlabel("share of the KV memory pool (%), averaged while requests wait")
ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.4, -0.22), ncol=3)
ax.invert_yaxis()
labels_zh = {"max": "连续，按最大长度", "pow2": "连续，按 2 的幂", "oracle": "连续，按确切长度（神谕）",
             "paged": "分页，16 个词元一块"}
parts_zh = {"token states": "词元状态", "reserved for future tokens": "为后续词元预留",
            "internal fragmentation": "内部碎片", "free but unusable": "空闲但无法使用",
            "token states reported (Kwon et al.)": "论文报告的词元状态（Kwon 等）"}
glue_figure("ch5_paging_figure", fig, zh=dict(
    xlabel="占 KV 内存池的比例（%），在有请求等待时取平均",
    legend=[parts_zh[t.get_text()] for t in ax.get_legend().get_texts()],
    texts=[labels_zh[s] for s in mem]))
for s, b in mem.items():
    print(f"{labels[s]:28s} tokens {b.tokens:6.1%}  waste {b.waste:6.1%}  "
          f"requests decoding at once {b.running:6.1f}")

# %%
assert paper_waste["orca_oracle"] <= mem["max"].waste <= paper_waste["orca_max"]
assert min(mem[s].waste for s in ("max", "pow2", "oracle")) > 0.4
assert mem["paged"].waste < paper["paged_waste_at_most"]
assert mem["oracle"].waste > 10 * mem["paged"].waste

# %% tags=["hide-input"]
glue("ch5_pg_max", fmt_percent(mem["max"].waste))
glue("ch5_pg_pow2", fmt_percent(mem["pow2"].waste))
glue("ch5_pg_oracle", fmt_percent(mem["oracle"].waste))
glue("ch5_pg_paged", fmt_percent(mem["paged"].waste, 1))
glue("ch5_pg_batch", fmt_ratio(mem["paged"].running / mem["max"].running))

# %% [markdown]
# ```{glue:figure} ch5_paging_figure
# ```
#
# Reserving the maximum length wastes {glue:text}`ch5_pg_max` of the pool, inside the paper's
# range. Powers of two waste {glue:text}`ch5_pg_pow2` and even the oracle, which knows every
# answer's length in advance, {glue:text}`ch5_pg_oracle` — less than the paper found for those
# schemes (its workload and allocator are not ours), but still a large share, spent on
# reservations and holes. Paging wastes {glue:text}`ch5_pg_paged`, under the paper's bound, and
# the pool keeps {glue:text}`ch5_pg_batch` as many requests decoding at once as with
# maximum-length reservations — which is where vLLM's throughput gains came from. Paging also
# lets requests share blocks, such as a common prompt prefix (chapter 12).
#
# ## More memory: offloading and more devices
#
# The last lever is more memory. **Offloading** keeps the cache in host memory (or on disk) and
# streams it to the accelerator when needed, as FlexGen {cite:p}`sheng2023flexgen` does. The
# catch is bandwidth: a decode step reads the whole cache, and the host link is far slower than
# device memory.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch5_paging_figure
# ```
#
# 按最大长度预留浪费了池子的 {glue:text}`ch5_pg_max`，落在论文给出的范围之内。按 2 的幂预留浪费
# {glue:text}`ch5_pg_pow2`，就连预先知道每个回答长度的神谕也浪费 {glue:text}`ch5_pg_oracle`——比论文
# 对这些方案测得的要少（它的工作负载和分配器与我们的不同），但仍是很大的一部分，耗在了预留和空洞上。
# 分页只浪费 {glue:text}`ch5_pg_paged`，低于论文给出的上界，而且池子里同时在解码的请求数是按最大长度
# 预留时的 {glue:text}`ch5_pg_batch`——vLLM 的吞吐量提升正是从这里来的。分页还让请求可以共享块，比如
# 一段共同的提示词前缀（第 12 章）。
#
# ## 更多内存：卸载与更多设备
#
# 最后一根杠杆是更多的内存。**卸载**把缓存放在主机内存（或磁盘）里，需要时再传到加速器上，FlexGen
# {cite:p}`sheng2023flexgen` 就是这样做的。问题在于带宽：一个解码步骤要读取整个缓存，而主机链路比设
# 备内存慢得多。

# %%
pcie = next(c for c in CHIPS.values() if c.interconnect == "PCIe 4.0 x16").link_bytes_per_s
seq_4k = 4096
hbm_s = counts.kv_cache_bytes(l7, 1, seq_4k, BF16) / a100.hbm_bytes_per_s
host_s = phase_time.kv_transfer_seconds(l7, seq_4k, pcie, BF16)
assert host_s > 50 * hbm_s

# %% tags=["hide-input"]
glue("ch5_off_bytes", fmt_bytes(counts.kv_cache_bytes(l7, 1, seq_4k, BF16)))
glue("ch5_off_hbm", fmt_seconds(hbm_s)); glue("ch5_off_pcie", fmt_seconds(host_s))
glue("ch5_off_ratio", fmt_ratio(host_s / hbm_s, 0)); glue("ch5_pcie", fmt_rate(pcie))

# %% [markdown]
# One 4,096-token LLaMA-2 7B cache is {glue:text}`ch5_off_bytes`. An A100 reads it from its own
# memory in {glue:text}`ch5_off_hbm`; over a PCIe 4.0 x16 link ({glue:text}`ch5_pcie` one way)
# it takes {glue:text}`ch5_off_pcie`, {glue:text}`ch5_off_ratio` longer, at every step. That
# rules offloading out wherever latency matters; it suits offline batch jobs, where a large
# batch amortises each transfer.
#
# **More devices** pool their memory. With tensor parallelism (chapter 9) each chip holds a
# slice of the KV heads, so the per-chip cache falls with the chip count — until there are more
# chips than KV heads. A head cannot be split, so beyond that point heads are replicated, and an
# MQA model's single head sits whole on every chip: MQA's saving is lost. Sharding the cache by
# *sequence* (batch) instead {cite:p}`pope2023esti` brings it back.

# %% [markdown] tags=["lang-zh"]
# 一份 4,096 个词元的 LLaMA-2 7B 缓存有 {glue:text}`ch5_off_bytes`。A100 从自己的内存中读取它需要
# {glue:text}`ch5_off_hbm`；经 PCIe 4.0 x16 链路（单向 {glue:text}`ch5_pcie`）则要
# {glue:text}`ch5_off_pcie`，慢了 {glue:text}`ch5_off_ratio`，而且每一步都是如此。凡是在意延迟的场合，
# 卸载都用不上；它适合离线的批次任务，在那里一个大批次能摊薄每次传输的代价。
#
# **更多设备**能把各自的内存合在一起。采用张量并行（第 9 章）时，每块芯片存一部分 KV 头，所以每块芯
# 片上的缓存随芯片数增加而减少——直到芯片数多于 KV 头数。一个头不能切开，所以超过这一点之后，头就要复
# 制，而 MQA 模型唯一的那个头会完整地放在每一块芯片上：MQA 的节省就没了。改为按*序列*（批次）对缓存
# 做分片 {cite:p}`pope2023esti`，节省又回来了。

# %%
f7 = get_preset("falcon-7b")
shard_rows = []
for m in (l70, f7):
    for chips in (1, 8, 16):
        by_head = counts.kv_cache_bytes_per_shard(m, 64, 4096, head_shards=chips,
                                                    bytes_per_element=BF16)
        by_batch = counts.kv_cache_bytes_per_shard(m, 64, 4096, batch_shards=chips,
                                                     bytes_per_element=BF16)
        shard_rows.append((m.name, m.K, chips, by_head, by_batch))

# %% tags=["hide-input"]
Markdown("| model | K | chips | per chip, heads split | per chip, sequences split |\n"
         "|---|---:|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {K} | {c} | {fmt_bytes(h)} | {fmt_bytes(b)} |"
             for n, K, c, h, b in shard_rows))
# %%
per_chip = {(n, c): (h, b) for n, _, c, h, b in shard_rows}
assert per_chip["llama-2-70b", 16][0] == per_chip["llama-2-70b", 8][0]   # 8 heads: stuck at 8
assert per_chip["falcon-7b", 8][0] == per_chip["falcon-7b", 1][0]        # MQA: replicated
assert per_chip["falcon-7b", 8][1] == per_chip["falcon-7b", 1][1] / 8    # batch split works
pool_tokens = latency.kv_capacity_tokens(l70, h100, 8)

# %% tags=["hide-input"]
glue("ch5_pool_tokens", fmt_count(pool_tokens))
glue("ch5_pool_seqs", str(roofline.max_batch(l70, h100, 4096, chips=8)))

# %% [markdown]
# For 64 sequences of 4,096 tokens, LLaMA-2 70B's cache per chip stops shrinking at
# {glue:text}`ch5_l70_K` chips when heads are split, and Falcon-7B's does not shrink at all;
# splitting sequences divides both evenly. Eight H100s leave room for
# {glue:text}`ch5_pool_tokens` tokens of LLaMA-2 70B cache ({glue:text}`ch5_pool_seqs` sequences
# of 4,096). Pooling beyond one machine is possible too —
# Infinite-LLM {cite:p}`lin2024infinitellm` distributes attention and the cache across a
# cluster — at the price of network traffic at every step.
#
# ## All together
#
# The levers multiply. Take a LLaMA-3-8B-shaped model at 32,768 tokens and compare a
# multi-head bfloat16 cache with the same model using its {glue:text}`ch5_l3_K` KV heads, the
# 5:1 local/global mix, and an int8 cache:

# %% [markdown] tags=["lang-zh"]
# 对 64 条 4,096 个词元的序列，按头切分时，LLaMA-2 70B 每块芯片上的缓存到 {glue:text}`ch5_l70_K` 块
# 芯片就不再缩小，Falcon-7B 的则根本不缩小；按序列切分则能把两者都均匀地分开。八块 H100 能容纳
# LLaMA-2 70B 的 {glue:text}`ch5_pool_tokens` 个词元的缓存（{glue:text}`ch5_pool_seqs` 条 4,096 个词
# 元的序列）。把内存合在一起也可以超出一台机器——Infinite-LLM {cite:p}`lin2024infinitellm` 把注意力和
# 缓存分布到整个集群上——代价是每一步都有网络流量。
#
# ## 全部合起来
#
# 这些杠杆的效果是相乘的。取一个形状与 LLaMA-3-8B 相同、处理 32,768 个词元的模型，把多头的 bfloat16
# 缓存与同一个模型的另一种缓存作比较：用它的 {glue:text}`ch5_l3_K` 个 KV 头、5:1 的局部/全局混合，以
# 及 int8 缓存：

# %%
mha_l3 = l3.replace(K=l3.N)
baseline = counts.kv_cache_bytes(mha_l3, 1, ctx, BF16)
combined = kv_window.kv_bytes_per_sequence(l3, patterns["5 local (W = 1,024) : 1 global"], ctx,
                                           kv_quant.bytes_per_element(l3.H))
assert baseline / combined > 10

# %% tags=["hide-input"]
glue("ch5_l3_K", str(l3.K))
glue("ch5_all_base", fmt_bytes(baseline)); glue("ch5_all_comb", fmt_bytes(combined))
glue("ch5_all_ratio", fmt_ratio(baseline / combined, 0))
print(f"{fmt_bytes(baseline)} -> {fmt_bytes(combined)} per sequence "
      f"({baseline / combined:.0f}x smaller)")

# %% [markdown]
# {glue:text}`ch5_all_base` per sequence becomes {glue:text}`ch5_all_comb`,
# {glue:text}`ch5_all_ratio` smaller — more than the order of magnitude the scaling book
# promises — before paging removes the waste around it.
#
# ## Summary
#
# - The cache holds $2 B S L K H p$ bytes: half a megabyte per token for a 7B multi-head model,
#   as much as the weights after a few tens of thousands of tokens.
# - It caps the batch a chip can serve, and it is read at every step: smaller caches mean more
#   requests, lower latency and higher throughput together.
# - Fewer KV heads (GQA, MQA) shrink it by $N/K$ and speed up the step accordingly.
# - Local attention caps a layer's cache at its window; mixing in a few global layers keeps most
#   of the saving for long contexts.
# - Sharing a cache between layers saves memory but not the bytes a step reads.
# - An int8 cache with per-vector scales halves a 16-bit cache with a small, bounded error; it
#   only runs faster if the reader converts in small pieces.
# - Eviction (StreamingLLM, H2O, Scissorhands, FastGen) keeps a fixed budget of tokens that
#   matter; what it costs in accuracy depends on how concentrated attention is. On the trained
#   model, a window that lets the first token go breaks it; keeping the attention sinks, or
#   H2O's heavy hitters, keeps its perplexity close to the full cache's.
# - Contiguous reservations waste most of the memory they hold; paging wastes a few percent.
# - Offloading trades step time for capacity; more devices add memory, but split KV heads only as
#   far as there are heads.

# %% [markdown] tags=["lang-zh"]
# 每条序列的 {glue:text}`ch5_all_base` 变成了 {glue:text}`ch5_all_comb`，缩小了
# {glue:text}`ch5_all_ratio`——超过了《How to Scale Your Model》所承诺的一个数量级——而这还没算上分页消除的周边浪费。
#
# ## 小结
#
# - 缓存占 $2 B S L K H p$ 字节：一个 7B 的多头注意力模型每个词元要半 MB，几万个词元之后就和权重一样
#   多。
# - 它限制了一块芯片能服务的批次，而且每一步都要读它：缓存越小，请求越多、延迟越低、吞吐量越高，三者
#   兼得。
# - 更少的 KV 头（GQA、MQA）把它缩小 $N/K$ 倍，步骤也相应加快。
# - 局部注意力把一层的缓存限制在它的窗口之内；混入少数全局层，就能在长上下文中保住大部分节省。
# - 在层之间共享缓存能节省内存，但不能减少一个步骤读取的字节。
# - 带有逐向量缩放因子的 int8 缓存把 16 位缓存减半，误差小且有界；只有读取器分小块转换时，它才会跑得
#   更快。
# - 淘汰（StreamingLLM、H2O、Scissorhands、FastGen）保留固定预算之内的重要词元；它在准确率上的代价，
#   取决于注意力有多集中。在训练好的模型上，放走第一个词元的窗口会让模型崩溃；保留注意力汇聚点，或 H2O
#   的高关注词元，困惑度就与完整缓存的相差无几。
# - 连续预留浪费了它所占内存的大部分；分页只浪费百分之几。
# - 卸载用步骤时间换容量；更多设备带来更多内存，但按 KV 头切分，最多只能分到头数那么多份。
