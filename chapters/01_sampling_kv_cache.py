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
# # Sampling and the KV cache
#
# A trained language model does one thing: given a sequence of tokens, it returns, for every
# position, a distribution over the token that comes next. Generating text is a loop around
# that function — read the distribution at the last position, pick a token, append it, ask
# again. This chapter builds that loop twice. The first version is the obvious one and
# recomputes everything at every step. The second keeps the keys and values of past tokens in a
# **KV cache** and does only the new work. Along the way we will see why the cache is correct
# (causal masking), why generation splits into two workloads with very different costs
# (*prefill* and *decode*), what we are trying to optimise (latency to the first token, time per
# token, throughput), and what the cache costs in memory.
#
# Everything below runs on your device. The first cell prepares JAX; it must run before any
# other JAX work (see [How to run this book](../book/how_to_run.md)).

# %% [markdown] tags=["lang-zh"]
# # 采样与 KV 缓存
#
# 训练好的语言模型只做一件事：给它一串词元（token），它为每一个位置返回下一个词元的概率分布。生成文本就是
# 绕着这个函数转的一个循环——读出最后一个位置的分布，选一个词元，把它接到末尾，再问一次。本章把
# 这个循环写两遍。第一版是最直白的写法，每一步都把所有东西重新算一遍。第二版把过去词元的键和值
# 保存在 **KV 缓存**里，只做新增的那部分工作。一路上我们会看到：为什么缓存是正确的（因果掩码）；
# 为什么生成会分成两种代价迥异的工作负载（*预填充*和*解码*）；我们要优化的是什么（首个词元的延迟、
# 每个词元的时间、吞吐量）；以及缓存要在内存上付出什么代价。
#
# 下面的一切都在你的设备上运行。第一个代码单元格负责准备 JAX，它必须在任何其他 JAX 操作之前运行
# （见[如何运行本书](../book/how_to_run.md)）。

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book.listing import show_source
from inferbook.model import attention, decode, decode_layout, decoder, kvcache
from inferbook.model.presets import get_preset
from inferbook.perf import compiled, counts, read_roof, timing

print(info.describe())
DEVICE = timing.device_name()

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
    fmt_tokens_per_s,
    glue,
)

# %% [markdown]
# ## A model to sample from
#
# We use a small LLaMA-style model with random weights: the library's `small` preset. Random
# weights produce gibberish, but gibberish costs exactly as much to compute as prose, and every
# question in this chapter is about cost and correctness, not quality.

# %% [markdown] tags=["lang-zh"]
# ## 一个用来采样的模型
#
# 我们使用一个权重随机的小型 LLaMA 式模型：库中的 `small` 预设。随机权重只会生成胡言乱语，但胡言乱语
# 的计算代价与正经文字完全一样，而本章的每一个问题关心的都是代价和正确性，而不是质量。

# %%
cfg = get_preset("small")
params = decoder.init_params(cfg, seed=0)
n_params = sum(w.size for w in jax.tree.leaves(params))
assert n_params == counts.param_count(cfg)      # the estimator counts what the model holds

# %% tags=["hide-input"]
glue("ch1_L", str(cfg.L)); glue("ch1_D", str(cfg.D)); glue("ch1_N", str(cfg.N))
glue("ch1_K", str(cfg.K)); glue("ch1_V", fmt_count(cfg.V))
glue("ch1_params", fmt_count(n_params))
print(cfg)

# %% [markdown]
# It has {glue:text}`ch1_L` layers of width $D =$ {glue:text}`ch1_D`, {glue:text}`ch1_N`
# query heads sharing {glue:text}`ch1_K` key/value heads, a vocabulary of
# {glue:text}`ch1_V` tokens, and {glue:text}`ch1_params` parameters. The whole forward pass is
# one short function. Its only moving part is `attend`, a callback that decides what the
# queries of each layer look at; the rest of this chapter is about choosing it well.

# %% [markdown] tags=["lang-zh"]
# 它有 {glue:text}`ch1_L` 层，宽度 $D =$ {glue:text}`ch1_D`；{glue:text}`ch1_N` 个查询头共享
# {glue:text}`ch1_K` 个键/值头；词表有 {glue:text}`ch1_V` 个词元；参数共 {glue:text}`ch1_params`。
# 整个前向计算就是一个简短的函数。它唯一可变的部分是 `attend`：一个回调函数，决定每一层的查询去看
# 哪些内容；本章余下的部分讲的就是如何选好它。

# %%
show_source(decoder.transformer)

# %% [markdown]
# ### Text from a trained model
#
# Random weights answer cost questions, but they cannot show what sampling *does*. For that we
# load a trained model: SmolLM2-135M-Instruct {cite:p}`allal2025smollm2`, a Llama of
# {glue:text}`ch1_real_L` layers and width {glue:text}`ch1_real_D` with
# {glue:text}`ch1_real_params` parameters, its tokenizer and its chat template (the library's
# `load_pretrained`; the first run downloads it). We render one question with the chat template,
# {glue:text}`ch1_real_prompt_tokens` tokens including the template's system prompt, and sample
# an answer with several rules at once, one per row of a batch. Each step is the model's
# forward pass (one prefill, then one decode step per token, explained below) followed by a
# *sampler*: greedy takes the most likely token; **temperature** $\tau$ divides the logits by
# $\tau$ before the softmax, sharpening the distribution below 1 and flattening it above; and
# **top-p** (nucleus sampling) keeps the smallest set of tokens whose probabilities add up to
# $p$ and draws among them only. The random draws are seeded, so the text below is the same
# on every run of the same software.

# %% [markdown] tags=["lang-zh"]
# ### 训练好的模型写出的文字
#
# 随机权重能回答代价的问题，却无法展示采样到底*做了*什么。为此我们加载一个训练好的模型：
# SmolLM2-135M-Instruct {cite:p}`allal2025smollm2`，一个 {glue:text}`ch1_real_L` 层、宽度
# {glue:text}`ch1_real_D` 的 Llama，参数共 {glue:text}`ch1_real_params`，连同它的分词器和对话模板
# （库中的 `load_pretrained`；第一次运行时会下载它）。我们用对话模板渲染一个问题，连同模板里的系统
# 提示词共 {glue:text}`ch1_real_prompt_tokens` 个词元，然后在一个批次里同时用几种规则采样回答，每种
# 规则占一行。每一步先做模型的前向计算（一次预填充，然后每个词元一个解码步骤，下文会解释），再交给
# *采样器*：贪心取最可能的词元；**温度** $\tau$ 在 softmax 之前把 logits 除以 $\tau$，小于 1 时分布
# 变尖锐，大于 1 时变平坦；**top-p**（核采样）只保留概率之和达到 $p$ 的最小词元集合，只在其中抽取。
# 随机抽取用的是固定的种子，所以只要软件相同，每次运行得到的文字都一样。

# %%
from inferbook.model.pretrained import load_pretrained
from inferbook.model.sampling import GREEDY, Sampler, sample

model = load_pretrained("smollm2-135m-instruct")
real_cfg, real_params = model.cfg, model.params
assert sum(w.size for w in jax.tree.leaves(real_params)) == counts.param_count(real_cfg)
question = "Write one sentence about the sea."
real_prompt = model.prompt(question, chat=True)
print(model.chat_text([{"role": "user", "content": question}]))

# %%
samplers = {"greedy": GREEDY, "τ = 0.7": Sampler(0.7), "τ = 1.0": Sampler(1.0),
            "τ = 1.0, top-p = 0.9": Sampler(1.0, top_p=0.9), "τ = 1.5": Sampler(1.5)}
real_new = 32


def sample_rows(params, cfg, prompt, samplers, n_new, seed=0):
    """One prompt answered by several samplers at once: one batch row per sampler, a shared
    prefill and decode steps, each row's next token drawn by its own rule."""
    B = len(samplers)
    tokens_BT, lengths_B = decode.pad_prompts([prompt] * B)
    cache = kvcache.init_cache(cfg, B, tokens_BT.shape[1] + n_new)
    logits_BV, cache = decode.prefill(params, cfg, jnp.asarray(tokens_BT),
                                      jnp.asarray(lengths_B), cache)
    keys = jax.random.split(jax.random.key(seed), (n_new, B))
    rows = [[] for _ in range(B)]
    for step in range(n_new):
        next_B = jnp.concatenate([sample(logits_BV[b:b + 1], keys[step, b], s)
                                  for b, s in enumerate(samplers)])
        for row, t in zip(rows, next_B.tolist()):
            row.append(t)
        logits_BV, cache = decode.decode_step(params, cfg, next_B, cache)
    return rows


def until_eos(tokens, eos_ids):
    """The tokens before the first end-of-sequence id."""
    ends = [i for i, t in enumerate(tokens) if t in eos_ids]
    return tokens[:ends[0]] if ends else tokens


sampled = sample_rows(real_params, real_cfg, real_prompt, list(samplers.values()), real_new)
answers = {name: model.decode(until_eos(row, model.eos_ids))
           for name, row in zip(samplers, sampled)}
for name, text in answers.items():
    print(f"{name:>22s} | {text}")

# %% tags=["hide-input"]
glue("ch1_real_L", str(real_cfg.L)); glue("ch1_real_D", str(real_cfg.D))
glue("ch1_real_params", fmt_count(counts.param_count(real_cfg)))
glue("ch1_real_prompt_tokens", str(len(real_prompt)))
glue("ch1_real_new", str(real_new))
hot = max((s.temperature for s in samplers.values()))
glue("ch1_real_hot", f"{hot:g}")
glue("ch1_real_greedy", answers["greedy"])

# %% [markdown]
# Greedy decoding answers "{glue:text}`ch1_real_greedy`" — fluent, and the same on every run.
# Moderate temperatures give other fluent answers: every row starts from the same
# distribution, and a sampled token that is merely likely rather than the most likely sends
# the rest of the text down another path. At $\tau =$ {glue:text}`ch1_real_hot` the tail of
# the vocabulary gets enough probability to be drawn, and once an unlikely token is in the
# text the model conditions on it, so the answer drifts into nonsense; top-p cuts exactly
# that tail. None of this changes the cost of a step: the sampler reads one row of logits,
# whatever its rule.
#
# The two loops of this chapter — `naive_generate`, which recomputes the whole sequence for
# every token, and `generate`, which keeps the KV cache, both built below — give this model's
# greedy answer token for token:

# %% [markdown] tags=["lang-zh"]
# 贪心解码的回答是“{glue:text}`ch1_real_greedy`”——通顺，而且每次运行都一样。适中的温度给出另外几个
# 通顺的回答：每一行都从同一个分布出发，只要抽到一个“可能”但不是“最可能”的词元，后面的文字就走上了
# 另一条路。在 $\tau =$ {glue:text}`ch1_real_hot` 时，词表尾部的词元得到了足以被抽中的概率；一个不太
# 可能的词元一旦进入文本，模型就以它为条件继续，回答便滑向胡言乱语；top-p 截掉的正是这条尾巴。这些
# 都不改变一步的代价：无论规则如何，采样器只读一行 logits。
#
# 本章的两个循环——`naive_generate` 为每个词元重新计算整个序列，`generate` 保留 KV 缓存，两者都在下文
# 构建——对这个模型给出的贪心回答逐个词元完全相同：

# %%
cached_real = decode.generate(real_params, real_cfg, [real_prompt], real_new,
                              eos_id=model.eos_ids)
naive_real = decode.naive_generate(real_params, real_cfg, [real_prompt], real_new,
                                   eos_id=model.eos_ids, bucket=128)    # one compilation
assert cached_real.tokens == naive_real.tokens          # the same tokens, with or without a cache
assert model.decode(cached_real.tokens[0]) == answers["greedy"]   # and the batched loop's
print(model.decode(cached_real.tokens[0]))

# %% [markdown]
# How long should one of these decode steps take? Chapter 2's estimator predicts it from two
# numbers of the device — how fast it reads memory and how fast it multiplies matrices — and
# the bytes and FLOPs of the step. We measure both numbers here, predict the step of this model
# (float32 weights and cache, batch 1) and time the step itself, as `generate` runs it,
# alternating the measurements so that anything else the machine does touches all of them.

# %% [markdown] tags=["lang-zh"]
# 这样一个解码步骤应该花多长时间？第 2 章的估算器用设备的两个数——读内存有多快、做矩阵乘法有多快——
# 加上这一步的字节数和 FLOPs 来预测它。我们在这里测出这两个数，预测这个模型一步的时间（float32 的
# 权重和缓存，批次为 1），再按 `generate` 的方式为这一步本身计时；几项测量交替进行，让机器上的其他
# 活动对它们的影响相同。

# %%
import os

from inferbook.perf import microbench
from inferbook.perf.estimator import estimate

real_context = len(real_prompt) + real_new
# The cache `generate` allocated above (the prompt padded to 16, then the new tokens), so
# that the timed step is the very program it compiled.
real_slots = decode.pad_prompts([real_prompt], 16)[0].shape[1] + real_new
real_step_fn = timing.decode_step_timer(real_params, real_cfg, 1, real_slots, real_context)
# The step and the read kernels take turns, so whatever else the machine is doing slows them
# alike; the bandwidth is the fastest kernel's median run, from the same rounds as the step's
# median (a best run may catch the memory at a lucky moment).
real_step_bytes = (counts.matmul_params(real_cfg) * 4
                   + counts.kv_cache_bytes(real_cfg, 1, real_context, 4))
real_beside = read_roof.measure_beside(real_step_fn, real_step_bytes, name="the decode step")
real_bw = real_beside.typical.best
real_step = real_beside.program.median_s
# The device's memory: what JAX reports for an accelerator, the machine's RAM for a CPU.
memory = ((jax.devices()[0].memory_stats() or {}).get("bytes_limit")
          or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
real_chip = microbench.measured_chip(real_bw, microbench.peak_matmul_flops(),
                                     memory_bytes=memory)
# The bare roofline (`efficiency="ideal"`) at the roofs measured here: chapter 2 fits the rest.
real_estimate = estimate(real_cfg, real_chip, batch=1, context=real_context,
                         weight_bytes=4, kv_bytes=4, efficiency="ideal")
real_error = real_step / real_estimate.step_time_s

# %% tags=["hide-input"]
REAL_RATIO_LOW, REAL_RATIO_HIGH = 0.5, 2      # glued into the sentence that states them
expect_measured(REAL_RATIO_LOW <= real_error <= REAL_RATIO_HIGH, "the estimator predicts the "
                "trained model's decode step on this device: measured / predicted between "
                f"{fmt_ratio(REAL_RATIO_LOW, 1)} and {fmt_ratio(REAL_RATIO_HIGH, 0)}",
                expected=f"measured / predicted between {fmt_ratio(REAL_RATIO_LOW, 1)} and "
                         f"{fmt_ratio(REAL_RATIO_HIGH, 0)}",
                measured=f"{fmt_seconds(real_step)} measured, "
                         f"{fmt_seconds(real_estimate.step_time_s)} predicted")
glue("ch1_real_context", str(real_context)); glue("ch1_real_device", DEVICE)
glue("ch1_real_bytes", fmt_bytes(real_estimate.total_bytes))
glue("ch1_real_bw", fmt_rate(real_bw))
glue("ch1_real_pred", fmt_seconds(real_estimate.step_time_s))
glue("ch1_real_step", fmt_seconds(real_step))
glue("ch1_real_ratio", fmt_ratio(real_error, 2))
glue("ch1_real_low", fmt_ratio(REAL_RATIO_LOW, 1))
glue("ch1_real_high", fmt_ratio(REAL_RATIO_HIGH, 0))
print(f"{DEVICE}: reads {fmt_rate(real_bw)}; predicted {fmt_seconds(real_estimate.step_time_s)}"
      f", measured {fmt_seconds(real_step)} (medians), measured / predicted "
      f"{fmt_ratio(real_error, 2)}")

# %% [markdown]
# With {glue:text}`ch1_real_context` tokens in the cache, a step reads
# {glue:text}`ch1_real_bytes` of weights and cache. At the {glue:text}`ch1_real_bw` this device
# reads (the fastest read kernel's median run, timed in turns with the step), the estimator
# predicts {glue:text}`ch1_real_pred` per step; the step took
# {glue:text}`ch1_real_step` on {glue:text}`ch1_real_device`, {glue:text}`ch1_real_ratio` the
# prediction (the chapter checks that it lies between {glue:text}`ch1_real_low` and
# {glue:text}`ch1_real_high`). The rest of the chapter explains why a step of a trained model costs what a step
# of random weights of the same shape costs, and why that cost is a matter of bytes.

# %% [markdown] tags=["lang-zh"]
# 缓存中有 {glue:text}`ch1_real_context` 个词元时，一步要读 {glue:text}`ch1_real_bytes` 的权重和缓存。
# 按这台设备 {glue:text}`ch1_real_bw` 的读取速率（最快的读取内核与这一步轮流计时时的中位
# 运行），估算器预测每步 {glue:text}`ch1_real_pred`；在
# {glue:text}`ch1_real_device` 上这一步实际耗时 {glue:text}`ch1_real_step`，是预测的
# {glue:text}`ch1_real_ratio`（本章检验它在 {glue:text}`ch1_real_low` 与 {glue:text}`ch1_real_high`
# 之间）。本章余下的部分解释：为什么训练好的模型一步的代价，与形状相同的随机权重
# 一步的代价一样；为什么这个代价取决于字节数。

# %% [markdown]
# ## Sampling, naively
#
# The loop reads the model's distribution at the last position, takes the most likely token
# (greedy decoding; any other sampling rule would cost the same), appends it and repeats:

# %% [markdown] tags=["lang-zh"]
# ## 朴素的采样
#
# 循环读出模型在最后一个位置的分布，取最可能的词元（贪心解码；换成任何别的采样规则，代价都一样），
# 把它接到末尾，然后重复：

# %%
def sample_naively(params, cfg, prompt, n_new):
    """Greedy generation that recomputes the whole sequence for every new token."""
    tokens = list(prompt)
    for _ in range(n_new):
        logits_TV = decoder.forward(params, cfg, jnp.asarray([tokens]))[0]   # every position
        tokens.append(int(jnp.argmax(logits_TV[-1])))                     # ... to use the last
    return tokens[len(prompt):]


prompt = [17, 4, 1999, 23, 5, 811, 42, 7]
naive_tokens = sample_naively(params, cfg, prompt, 4)
assert naive_tokens == decode.naive_generate(params, cfg, [prompt], 4).tokens[0]
naive_tokens

# %% [markdown]
# It works, and it is wasteful in two ways. Each step pushes the *whole* sequence through the
# model again, although only the last position's output is used. And each step has a new
# length, so JAX compiles a new program for it (the library's `naive_generate` pads lengths up
# to a multiple of 64 to limit that).
#
# How wasteful? Step $t$ of generating after a prompt of $p$ tokens runs the model over
# $p + t$ tokens. The matrix multiplications cost about $2P$ FLOPs per token for $P$ weights,
# so $2P(p + t)$ per step and a total that grows like $n^2$ over $n$ steps. Attention compares
# every token with every earlier one: about $4 L N H (p+t)^2$ FLOPs per step, a total that grows
# like $n^3$. Generating twice as many tokens costs $2^2$ to $2^3$ times as much.
#
# ## The past does not change
#
# The way out is in the attention mask. A token attends only to itself and to tokens before it.
# So the keys and values computed at position $i$ depend only on tokens $0 \dots i$ — in every
# layer, since each layer's input at position $i$ also depends only on those tokens. Appending a
# token changes nothing that was already computed. We can check that directly, by capturing
# every layer's keys and values for a text and for the same text one token longer:

# %% [markdown] tags=["lang-zh"]
# 它能用，但在两方面都很浪费。每一步都把*整个*序列重新送进模型，尽管只用到最后一个位置的输出。而且
# 每一步的长度都不同，JAX 要为它编译一个新程序（库里的 `naive_generate` 把长度补齐到 64 的倍数，
# 以减少编译的次数）。
#
# 浪费多少？在 $p$ 个词元的提示词之后生成第 $t$ 步，要让模型处理 $p + t$ 个词元。对 $P$ 个权重而言，
# 矩阵乘法每个词元大约花 $2P$ FLOPs，所以每步 $2P(p + t)$，$n$ 步的总量按 $n^2$ 增长。注意力要把每个
# 词元与它之前的每个词元比较：每步约 $4 L N H (p+t)^2$ FLOPs，总量按 $n^3$ 增长。生成的词元数翻一番，
# 代价就是原来的 $2^2$ 到 $2^3$ 倍。
#
# ## 过去不会改变
#
# 出路藏在注意力掩码里。一个词元只关注它自己和它之前的词元。所以在位置 $i$ 算出的键和值只依赖于词元
# $0 \dots i$——每一层都是如此，因为每一层在位置 $i$ 的输入同样只依赖于这些词元。追加一个词元，不会
# 改变任何已经算好的东西。我们可以直接验证这一点：对一段文本，以及多一个词元的同一段文本，分别捕获
# 每一层的键和值：

# %%
@jax.jit
def keys_and_values(params, tokens_T):
    """Every layer's keys and values [T, K, H] for one sequence, from a plain forward pass."""
    T = tokens_T.shape[0]
    pos_BT = jnp.arange(T)[None]
    mask_BTS = attention.attention_mask(pos_BT, pos_BT[0], jnp.array([T]))
    captured = []

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        captured.append((k_BTKH[0], v_BTKH[0]))
        return attention.attend(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2), mask_BTS)

    decoder.transformer(params, cfg, tokens_T[None], pos_BT, attend)
    return captured


text = jnp.asarray(prompt + naive_tokens)
shorter, longer = keys_and_values(params, text[:-1]), keys_and_values(params, text)
change = max(float(jnp.max(jnp.abs(a[: len(text) - 1] - b)))
             for (ka, va), (kb, vb) in zip(longer, shorter) for a, b in ((ka, kb), (va, vb)))
assert change < 1e-5, change
print(f"largest change in any past key or value after appending a token: {change:.1e}")

# %% [markdown]
# Nothing in the past moved (up to floating-point noise). So we store every layer's keys and
# values as we go — the **KV cache** — and each new token only needs its own query, key and
# value, plus the cached keys and values of everything before it.
#
# ## Prefill, then decode
#
# With a cache, generation has two phases {cite:p}`austin2025scaling,lienhart2023kvcache`:
#
# - **Prefill** runs the whole prompt through the model in one pass, exactly like the naive
#   forward pass, but keeps every layer's keys and values. Its output is the distribution of
#   the first new token and a filled cache.
# - **Decode** steps each feed *one* token per sequence. The token's query attends to the
#   cached keys and values and to its own; its key and value are then appended to the cache.
#
# In the library, `prefill` and `extend` (one or more new tokens per sequence against a cache)
# share `attend_cached`, which computes attention over two sets of keys — those in the cache and
# the new ones — and merges the two partial results with their log-sum-exps. This is the same
# identity FlashAttention and Flash-Decoding rest on (chapters 6 and 7); here it lets a step read
# the cache without writing it, and the new keys and values are appended afterwards.

# %% [markdown] tags=["lang-zh"]
# 过去的东西一点也没动（浮点噪声除外）。于是我们边算边把每一层的键和值存下来——这就是
# **KV 缓存**——每个新词元只需要算出它自己的查询、键和值，再加上它之前所有词元缓存好的键和值。
#
# ## 先预填充，再解码
#
# 有了缓存，生成就分为两个阶段 {cite:p}`austin2025scaling,lienhart2023kvcache`：
#
# - **预填充**一次性把整个提示词送进模型，与朴素的前向计算完全一样，但保留每一层的键和值。它的输出是
#   第一个新词元的分布，以及一个填好的缓存。
# - **解码**步骤每次为每个序列输入*一个*词元。这个词元的查询关注缓存中的键和值以及它自己的键和值；
#   随后它的键和值被追加到缓存中。
#
# 在库中，`prefill` 和 `extend`（每个序列针对缓存输入一个或多个新词元）共用 `attend_cached`：它在两组
# 键上计算注意力——缓存里的键和新来的键——再用两部分各自的 LSE（log-sum-exp，指数和的对数）把两个部分结果
# 合并起来。FlashAttention 和 Flash-Decoding 依赖的也正是这个恒等式（第 6 章和第 7 章）；在这里，它让
# 一步计算只读缓存而不写缓存，新的键和值在之后才追加进去。

# %%
show_source(decode.attend_cached, kvcache.append)

# %% [markdown]
# The claim that matters is that the cache changes the cost and nothing else. We check it on a
# *ragged* batch — prompts of different lengths decoded together — against recomputation:
# first the logits of every step, then the generated tokens.

# %% [markdown] tags=["lang-zh"]
# 要紧的论断是：缓存只改变代价，别的什么都不改变。我们在一个*参差不齐*的批次上检验它——长度不同的
# 提示词一起解码——并与重新计算对比：先比较每一步的 logits，再比较生成的词元。

# %%
prompts = [prompt, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], [271, 828]]
n_new = 12
tokens_BT, lengths_B = decode.pad_prompts(prompts)
cache = kvcache.init_cache(cfg, len(prompts), tokens_BT.shape[1] + n_new)
logits_BV, cache = decode.prefill(params, cfg, jnp.asarray(tokens_BT), jnp.asarray(lengths_B),
                                  cache)
seqs = [list(p) for p in prompts]
worst = 0.0
for step in range(n_new):
    # Recompute from scratch; padding to a fixed width keeps this to a single compilation.
    full_BTV = decoder.forward(params, cfg, *map(jnp.asarray, decode.pad_prompts(seqs, 32)))
    last_BV = full_BTV[jnp.arange(len(seqs)), jnp.asarray([len(s) - 1 for s in seqs])]
    worst = max(worst, float(jnp.max(jnp.abs(last_BV - logits_BV))))
    next_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    for s, t in zip(seqs, next_B.tolist()):
        s.append(t)
    logits_BV, cache = decode.decode_step(params, cfg, next_B, cache)

assert worst < 1e-4, worst
cached_tokens = decode.generate(params, cfg, prompts, n_new).tokens
assert cached_tokens == [s[len(p):] for s, p in zip(seqs, prompts)]   # = recomputation's

# %% tags=["hide-input"]
glue("ch1_logit_error", f"{worst:.1e}")
glue("ch1_n_new", str(n_new))
print(f"largest logit difference over {n_new} steps: {worst:.1e}; tokens identical")

# %% [markdown]
# Over {glue:text}`ch1_n_new` steps the cached logits never differ from recomputation by more
# than {glue:text}`ch1_logit_error`, and the generated tokens are identical — for every prompt
# of the ragged batch.
#
# ## Two workloads
#
# Prefill and decode run the same weights but are different problems. Prefill multiplies each
# weight matrix by a $[T, D]$ block of activations: every weight read from memory takes part in
# $T$ multiply-adds, $2T$ FLOPs. A decode step multiplies it by one row per sequence: $2B$ FLOPs
# per weight for a batch of $B$. The ratio of arithmetic to memory traffic — the **arithmetic
# intensity**, FLOPs per byte — decides which resource runs out first; chapter 2 develops the
# idea. Here we read both numbers from XLA's analysis of the two compiled programs: a prefill of
# 512 tokens and one decode step, both at batch 1.

# %% [markdown] tags=["lang-zh"]
# 在 {glue:text}`ch1_n_new` 步中，带缓存的 logits 与重新计算的结果之差从未超过
# {glue:text}`ch1_logit_error`，生成的词元也完全相同——对这个参差批次中的每一个提示词都是如此。
#
# ## 两种工作负载
#
# 预填充和解码使用同样的权重，却是两个不同的问题。预填充把每个权重矩阵乘以一个 $[T, D]$ 的激活块：
# 从内存读出的每个权重参与 $T$ 次乘加，即 $2T$ FLOPs。解码步骤把它乘以每个序列的一行：对 $B$ 个序列
# 的批次，每个权重 $2B$ FLOPs。计算量与内存流量之比——**算术强度**，即每字节的 FLOPs——决定哪种资源
# 先耗尽；第 2 章会展开这个概念。这里我们从 XLA 对两个编译后程序的分析中读出这两个数：一次 512 个
# 词元的预填充，和一个解码步骤，两者的批次都只有一个序列。

# %%
T_prompt = 512
tok_1T = jnp.zeros((1, T_prompt), jnp.int32)
cache_1 = kvcache.init_cache(cfg, 1, T_prompt + 64)
prefill_cost = compiled.compiled_cost(decode.prefill, params, cfg, tok_1T, jnp.array([T_prompt]),
                                   cache_1)
step_cache = cache_1._replace(lengths=jnp.array([T_prompt]))
step_cost = compiled.compiled_cost(decode.extend, params, cfg, jnp.zeros((1, 1), jnp.int32),
                                step_cache)

intensity_prefill = prefill_cost["flops"] / prefill_cost["bytes_accessed"]
intensity_decode = step_cost["flops"] / step_cost["bytes_accessed"]
# A decode step reads every weight and the cache about once: under one FLOP per byte.
assert intensity_decode < 1
assert step_cost["bytes_accessed"] >= counts.param_bytes(cfg, 4)
assert intensity_prefill > 10 * intensity_decode

# %% tags=["hide-input"]
for name, c in [("prefill, 512 tokens", prefill_cost), ("decode step, batch 1", step_cost)]:
    print(f"{name:22s} {fmt_flops(c['flops']):>14s} {fmt_bytes(c['bytes_accessed']):>10s}  "
          f"{c['flops'] / c['bytes_accessed']:8.1f} FLOPs/byte")
glue("ch1_int_prefill", f"{intensity_prefill:,.0f}")
glue("ch1_int_decode", f"{intensity_decode:.2f}")
glue("ch1_int_ratio", fmt_ratio(intensity_prefill / intensity_decode, 0))
glue("ch1_int_matmul_prefill", f"{2 * T_prompt / 4:,.0f}")

# %% [markdown]
# The decode step performs {glue:text}`ch1_int_decode` FLOPs per byte it moves: it reads every
# weight and the cache once and does almost nothing with them. The prefill performs
# {glue:text}`ch1_int_prefill`, {glue:text}`ch1_int_ratio` more. (Its matrix multiplications
# alone reach $2T / 4 =$ {glue:text}`ch1_int_matmul_prefill` FLOPs per float32 weight byte; the
# compiled program's average is lower because this straightforward attention writes its
# $T \times T$ score matrices to memory and reads them back — the traffic FlashAttention removes
# in chapter 6.) Modern accelerators can do a few hundred FLOPs in the time it takes to read one
# byte from their memory, so prefill keeps their arithmetic busy while decode leaves it idle,
# waiting for weights to stream in. A decode step is **memory-bound**: its time is, to a good
# approximation, the bytes it must read divided by memory bandwidth. That single fact drives most
# of the rest of this book.
#
# ## Counting the work
#
# The library's estimator has the FLOP count of a forward pass as a formula:
# $2 \times$ (weights in matrix products) per token, plus $4 L N H$ per query–key pair for the
# two attention products. Before trusting it we compare it with XLA's count of the compiled
# programs, for the naive step (a forward pass over all $t$ tokens) and the cached step (one
# token against a cache of $t$ slots), at several lengths.

# %% [markdown] tags=["lang-zh"]
# 解码步骤每搬运一个字节只做 {glue:text}`ch1_int_decode` 次浮点运算：它把每个权重和缓存各读一遍，
# 却几乎不拿它们做什么。预填充则达到 {glue:text}`ch1_int_prefill`，是解码的
# {glue:text}`ch1_int_ratio`。（仅看矩阵乘法，预填充每个 float32 权重字节能达到 $2T / 4 =$
# {glue:text}`ch1_int_matmul_prefill` FLOPs；编译后程序的平均值更低，是因为这种直白的注意力实现把
# $T \times T$ 的分数矩阵写进内存再读回来——第 6 章的 FlashAttention 消除的正是这部分流量。）现代
# 加速器从内存读一个字节的时间里，可以做几百次浮点运算，所以预填充能让算力忙起来，解码却让算力闲着，
# 等待权重一点点流进来。解码步骤是**内存受限**的：它的时间近似等于必须读取的字节数除以内存带宽。
# 这一个事实驱动着本书余下的大部分内容。
#
# ## 数一数工作量
#
# 库的估算器把一次前向计算的 FLOP 数写成一个公式：每个词元 $2 \times$（参与矩阵乘积的权重数），
# 再加上两次注意力乘积中每个查询–键对的 $4 L N H$。在信任它之前，我们在几个长度上把它与 XLA 对
# 编译后程序的计数作比较：朴素的步骤（对全部 $t$ 个词元做一次前向计算）和带缓存的步骤（一个词元，
# 对着有 $t$ 个槽位的缓存）。

# %%
lengths = [256, 512, 1024]
naive_flops = {t: compiled.compiled_cost(decode.last_logits, params, cfg,
                                      jnp.zeros((1, t), jnp.int32), jnp.array([t]),
                                      optimized=False)["flops"] for t in lengths}
cached_flops = {t: compiled.compiled_cost(decode.extend, params, cfg, jnp.zeros((1, 1), jnp.int32),
                                       kvcache.init_cache(cfg, 1, t), optimized=False)["flops"]
                for t in lengths}
for t in lengths:
    naive_formula = counts.forward_flops(cfg, 1, t)                  # all t positions
    cached_formula = counts.forward_flops(cfg, 1, 1, kv_len=t + 1)   # cache slots + itself
    assert abs(naive_flops[t] / naive_formula - 1) < 0.05, (t, naive_flops[t], naive_formula)
    assert abs(cached_flops[t] / cached_formula - 1) < 0.05, (t, cached_flops[t], cached_formula)
    print(f"t={t:5d}  naive step {fmt_flops(naive_flops[t]):>14s} (formula "
          f"{fmt_flops(naive_formula)})   cached step {fmt_flops(cached_flops[t]):>13s} "
          f"(formula {fmt_flops(cached_formula)})")

# %% [markdown]
# The formula agrees with the compiler to within a few percent at every length (XLA also counts
# the normalisations and the softmax, which the formula leaves out). Summing the per-step counts
# gives the total work of generating $n$ tokens from a short prompt with each method:

# %% [markdown] tags=["lang-zh"]
# 在每个长度上，公式与编译器的计数都只差几个百分点（XLA 还计入了归一化和 softmax，公式没有算它们）。
# 把每一步的计数加起来，就得到两种方法从一个很短的提示词出发、生成 $n$ 个词元的总工作量：

# %%
n_axis = np.unique(np.geomspace(16, 4096, 40).astype(int))
p0 = 16


def total_flops(n, cached):
    steps = np.arange(n)
    if cached:
        return sum(counts.forward_flops(cfg, 1, 1, kv_len=p0 + t + 1) for t in steps)
    return sum(counts.forward_flops(cfg, 1, p0 + t, logits_for=1) for t in steps)


naive_total = np.array([total_flops(n, False) for n in n_axis])
cached_total = np.array([total_flops(n, True) for n in n_axis])
ratio_1024 = total_flops(1024, False) / total_flops(1024, True)
# Doubling n: naive work grows by more than 2x (quadratic and cubic terms), cached by about 2x.
growth_naive = total_flops(2048, False) / total_flops(1024, False)
growth_cached = total_flops(2048, True) / total_flops(1024, True)
assert growth_naive > 3 and growth_cached < 2.5

# %% tags=["hide-input"]
glue("ch1_flops_ratio_1024", fmt_ratio(ratio_1024, 0))
glue("ch1_growth_naive", fmt_ratio(growth_naive)); glue("ch1_growth_cached", fmt_ratio(growth_cached))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(n_axis, naive_total, label="naive (recompute the prefix)")
ax.loglog(n_axis, cached_total, label="KV cache")
ax.set_xlabel("tokens generated, n")
ax.set_ylabel("total FLOPs")
ax.set_title(f"Work to generate n tokens ({cfg.name} model, {p0}-token prompt)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch1_work_figure", fig, zh=dict(
    title=f"生成 n 个词元的工作量（{cfg.name} 模型，提示词 {p0} 个词元）",
    xlabel="生成的词元数 n", ylabel="总 FLOPs", legend=["朴素（重算前缀）", "KV 缓存"]))

# %% [markdown]
# ```{glue:figure} ch1_work_figure
# ```
#
# Generating 1,024 tokens naively costs {glue:text}`ch1_flops_ratio_1024` the FLOPs of cached
# generation. Going from 1,024 to 2,048 tokens multiplies the naive work by
# {glue:text}`ch1_growth_naive` but the cached work by only {glue:text}`ch1_growth_cached`:
# with the cache, the matrix multiplications cost the same at every step and only attention
# grows, linearly in the context.
#
# ## Measured on this device
#
# FLOPs are not time. We time the two kinds of step — a naive forward pass over $t$ tokens,
# and one cached decode step with $t$ tokens in the cache, run exactly as `generate` runs it —
# at the same lengths. Each timing is the median of several runs after a warm-up, with
# compilation excluded.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch1_work_figure
# ```
#
# 朴素地生成 1,024 个词元，FLOPs 是带缓存生成的 {glue:text}`ch1_flops_ratio_1024`。从 1,024 个词元
# 增加到 2,048 个，朴素方法的工作量变为原来的 {glue:text}`ch1_growth_naive`，带缓存的只变为
# 原来的 {glue:text}`ch1_growth_cached`：有了缓存，矩阵乘法在每一步的代价都相同，只有注意力随上下文线性增长。
#
# ## 在这台设备上测量
#
# FLOPs 不等于时间。我们在同样的长度上为两种步骤计时——对 $t$ 个词元做一次朴素的前向计算，以及缓存
# 中已有 $t$ 个词元时的一个解码步骤（完全按 `generate` 的方式运行）。每个计时都是预热之后多次运行的
# 中位数，不含编译时间。

# %%
naive_time, cached_time = {}, {}
for t in lengths:
    naive_time[t] = timing.time_fn(decode.last_logits, params, cfg, jnp.zeros((1, t), jnp.int32),
                                  jnp.array([t]), repeats=3).median_s
    cached_time[t] = timing.time_fn(timing.decode_step_timer(params, cfg, 1, t + 1),
                                   repeats=15).median_s
    print(f"t={t:5d}  naive step {fmt_seconds(naive_time[t]):>9s}   "
          f"cached step {fmt_seconds(cached_time[t]):>9s}   "
          f"ratio {naive_time[t] / cached_time[t]:6.1f}")

speedup_1024 = naive_time[1024] / cached_time[1024]
growth = {"naive": naive_time[1024] / naive_time[256],
          "cached": cached_time[1024] / cached_time[256]}

# %% tags=["hide-input"]
# Claims about this device's timings: strict when the book is built, a note for a reader
# whose machine is busy (`inferbook.book.claims`). Each bound is glued into the sentence that
# states it.
SPEEDUP_FLOOR = 10
expect_measured(speedup_1024 >= SPEEDUP_FLOOR, "with 1,024 tokens the cached step is at least "
                f"{fmt_ratio(SPEEDUP_FLOOR, 0)} faster than the naive one",
                expected=f"a speedup of at least {fmt_ratio(SPEEDUP_FLOOR, 0)}",
                measured=fmt_ratio(speedup_1024))
expect_measured(growth["naive"] > growth["cached"], "naive steps slow down faster than cached "
                "ones as the text grows from 256 to 1,024 tokens",
                expected="naive growth > cached growth",
                measured=f"naive {fmt_ratio(growth['naive'])}, cached "
                         f"{fmt_ratio(growth['cached'])}")
glue("ch1_speedup_1024", fmt_ratio(speedup_1024, 0))
glue("ch1_speedup_floor", fmt_ratio(SPEEDUP_FLOOR, 0))
glue("ch1_naive_1024", fmt_seconds(naive_time[1024]))
glue("ch1_cached_1024", fmt_seconds(cached_time[1024]))
glue("ch1_device", DEVICE)

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(lengths, [naive_time[t] * 1e3 for t in lengths], "o-", label="naive step")
ax.loglog(lengths, [cached_time[t] * 1e3 for t in lengths], "s-", label="cached decode step")
ax.set_xlabel("tokens already in the sequence, t")
ax.set_ylabel("time per new token (ms)")
ax.set_title(f"Measured on {DEVICE}", fontsize=9)
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch1_time_figure", fig, zh=dict(
    title=f"在 {DEVICE} 上测得", xlabel="序列中已有的词元数 t", ylabel="每个新词元的时间（ms）",
    legend=["朴素的步骤", "带缓存的解码步骤"]))

# %% [markdown]
# ```{glue:figure} ch1_time_figure
# ```
#
# With 1,024 tokens in the sequence, the naive step takes {glue:text}`ch1_naive_1024` and the
# cached step {glue:text}`ch1_cached_1024` on {glue:text}`ch1_device`:
# {glue:text}`ch1_speedup_1024` faster per token (the chapter checks at least
# {glue:text}`ch1_speedup_floor`).
#
# ### How fast can a decode step be?
#
# If a decode step is memory-bound, its floor is the time to read every weight it multiplies by
# (and the cache) once. We can measure how fast this device reads memory and compare a decode
# step against it. One read kernel is not enough: XLA may sum a large array on one core while
# the memory could feed two, and a "bandwidth" that a decode step beats is no bound. So the
# library takes the fastest of several programs that do little but read — XLA summing a large
# array, XLA copying it, numpy summing one slice per core in threads, weight matrices streamed
# through matrix–vector products — each the best of several runs, and the step itself: a read
# roof that nothing measured here exceeded (`inferbook.perf.read_roof`). A meaningful test
# needs weights large enough that reading them dominates the fixed costs of a step, so we use
# the library's `cpu-336mb` preset: {glue:text}`ch1_big_params` parameters,
# {glue:text}`ch1_big_weights` in float32, arranged as the library's batch-1 decode steps read
# them (its *decode layout*, which chapter 2 measures).

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch1_time_figure
# ```
#
# 序列中有 1,024 个词元时，在 {glue:text}`ch1_device` 上，朴素的步骤耗时 {glue:text}`ch1_naive_1024`，
# 带缓存的步骤耗时 {glue:text}`ch1_cached_1024`：每个词元快了 {glue:text}`ch1_speedup_1024`（本章检验至少快 {glue:text}`ch1_speedup_floor`）。
#
# ### 解码步骤最快能有多快？
#
# 如果解码步骤是内存受限的，它的下限就是把它要乘的每个权重（以及缓存）读一遍的时间。我们可以测出
# 这台设备读内存有多快，再拿解码步骤与它比较。只用一个读取内核是不够的：XLA 可能只用一个核心对大
# 数组求和，而内存本可以同时供给两个核心；一个被解码步骤超过的“带宽”算不上界限。所以库取几个几乎
# 只做读取的程序中最快的那个——XLA 对一个大数组求和、XLA 复制它、numpy 在多个线程中每个核心对一段
# 求和、让权重矩阵流过矩阵–向量乘积——每个都取多次运行中最好的一次，再加上解码步骤本身：这样得到的
# 读取屋顶，这里测到的任何东西都没有超过它（`inferbook.perf.read_roof`）。要让测试有意义，权重必须
# 足够大，使读取它们的时间压过一步中的固定开销，所以我们用库中的 `cpu-336mb` 预设：参数共
# {glue:text}`ch1_big_params`，float32 下占 {glue:text}`ch1_big_weights`，按库在批次为 1 的解码步骤中
# 读取它们的方式排列（即它的*解码布局*，第 2 章会测量它）。

# %%
big = get_preset("cpu-336mb")
# The weights as the library's batch-1 decode steps read them: the decode layout (chapter 2).
big_params = decode_layout.to_decode_layout(decoder.init_params(big, seed=0), big)
big_step_fn = timing.decode_step_timer(big_params, big, 1, 128)
# What a step must read: every weight it multiplies by (one row of the embedding table is
# all it takes from that) and the cache of 127 tokens.
bytes_per_step = counts.matmul_params(big) * 4 + counts.kv_cache_bytes(big, 1, 128, 4)
# The reads and the step take turns, each timed call right after an untimed call of its own
# program (as a step follows a step in `generate`): whatever else the machine is doing falls
# on all of them alike. The roof is each read kernel's best run (and the step's, had it beaten
# them); `typical` holds the kernels' median runs, from the same rounds as the step's median.
beside = read_roof.measure_beside(big_step_fn, bytes_per_step, name="the decode step")
roof, typical = beside.roof, beside.typical
step_s = beside.program.median_s
read_bw = roof.best
achieved_bw = beside.program_rate
utilisation = beside.utilisation
step_vs_reads = beside.share_of_typical
assert utilisation <= 1.0                     # by construction: no step beats the roof
del big_params

# %% tags=["hide-input"]
glue("ch1_big_params", fmt_count(counts.param_count(big)))
glue("ch1_big_weights", fmt_bytes(counts.param_bytes(big, 4), 0))
glue("ch1_big_bytes", fmt_bytes(bytes_per_step))
glue("ch1_read_bw", fmt_rate(read_bw))
glue("ch1_step_bw", fmt_rate(achieved_bw))
glue("ch1_big_step", fmt_seconds(step_s))
glue("ch1_utilisation", fmt_percent(utilisation))
glue("ch1_typical_bw", fmt_rate(typical.best))
glue("ch1_step_vs_reads", fmt_percent(step_vs_reads))
print(f"{DEVICE}: read roof {fmt_rate(read_bw)} ({roof.kernel}); decode step "
      f"{fmt_seconds(step_s)} (median) "
      f"moves {fmt_bytes(bytes_per_step)} = {fmt_rate(achieved_bw)} ({fmt_percent(utilisation)})")
print(f"median runs: fastest read {fmt_rate(typical.best)} ({typical.kernel}); "
      f"the step's {fmt_rate(achieved_bw)} is {fmt_percent(step_vs_reads)} of it")
# The claim we make for CPUs: most of a step is reading memory. It compares medians taken in
# the same rounds, so it holds while other programs share the machine (the test suite runs
# two notebooks at once) and when the memory is briefly faster than usual (a best run can
# catch such a burst; a median rarely does). `inferbook bench`, run alone, checks MBU
# against the best read of a whole run. On an accelerator this model is too small to hide
# the fixed cost of launching each kernel, and the ratio says more about launch overhead.
BANDWIDTH_FLOOR = 0.5
glue("ch1_floor", fmt_percent(BANDWIDTH_FLOOR, 0))
if info.platform == "cpu":
    expect_measured(step_vs_reads >= BANDWIDTH_FLOOR, "in its median run, a decode step of "
                    f"the cpu-336mb model streams its bytes at {fmt_percent(BANDWIDTH_FLOOR, 0)} "
                    "or more of the rate of the fastest read kernel's median run beside it",
                    expected=f"at least {fmt_percent(BANDWIDTH_FLOOR)} of "
                             f"{fmt_rate(typical.best)}",
                    measured=f"{fmt_percent(step_vs_reads)} ({fmt_rate(achieved_bw)})")

# %% [markdown]
# The decode step moves {glue:text}`ch1_big_bytes` in {glue:text}`ch1_big_step`, an effective
# {glue:text}`ch1_step_bw` — {glue:text}`ch1_utilisation` of this device's read roof,
# {glue:text}`ch1_read_bw`. A decode step is, to first order, a read of the weights. The roof
# is the best single run of any read, and memory is not that fast all the time: a busy
# machine slows it, and on some machines it is briefly faster than usual. So the chapter's
# check compares medians from the same rounds: the step's median rate is
# {glue:text}`ch1_step_vs_reads` of the fastest read kernel's median,
# {glue:text}`ch1_typical_bw`. (On a CPU the chapter expects at least {glue:text}`ch1_floor`;
# on a GPU or TPU this small model is dominated by kernel-launch overheads instead, which
# chapter 2 discusses.)
#
# ## What we optimise
#
# Training cares about one number, throughput. Serving cares about at least three
# {cite:p}`austin2025scaling`:
#
# - **time to first token (TTFT)** — the prefill of the prompt, plus any wait in a queue;
# - **time per output token (TPOT)** — one decode step, which sets how fast text streams out;
# - **throughput** — tokens produced per second per chip, which sets the cost.
#
# Different uses weigh them differently. *Offline* batch work (evaluations, synthetic data)
# cares only about throughput. A *chat* service must stream faster than people read while
# serving many users cheaply. *Edge* inference on a laptop serves one user and wants the lowest
# latency the hardware allows. Batching is the main lever, and it pulls throughput and latency
# apart: decoding several sequences together reads the weights once for all of them.

# %% [markdown] tags=["lang-zh"]
# 解码步骤在 {glue:text}`ch1_big_step` 内搬运了 {glue:text}`ch1_big_bytes`，有效速率为
# {glue:text}`ch1_step_bw`——是这台设备读取屋顶 {glue:text}`ch1_read_bw` 的
# {glue:text}`ch1_utilisation`。一阶近似下，一个解码步骤就是把权重读一遍。屋顶取的是所有读取中
# 最好的一次运行，而内存并非一直这么快：机器繁忙时它会变慢，有些机器上它还会短暂地快于平常。所以
# 本章的检验比较的是同一轮次中的中位数：步骤的中位速率是最快的读取内核的中位速率
# {glue:text}`ch1_typical_bw` 的 {glue:text}`ch1_step_vs_reads`。（在 CPU 上，本章期望至少达到
# {glue:text}`ch1_floor`；在 GPU 或 TPU 上，这个小模型的时间主要花在内核启动的开销上，第 2 章会讨论
# 这一点。）
#
# ## 我们优化什么
#
# 训练只关心一个数：吞吐量。推理服务至少关心三个 {cite:p}`austin2025scaling`：
#
# - **首个词元延迟（TTFT）**——提示词的预填充，加上在队列中的等待；
# - **每个输出词元的时间（TPOT）**——一个解码步骤，它决定文字流出的速度；
# - **吞吐量**——每块芯片每秒产出的词元数，它决定成本。
#
# 不同的用途看重的方面不同。*离线*的批次任务（评测、合成数据）只关心吞吐量。*聊天*服务既要以快于人
# 阅读的速度输出文字，又要便宜地服务大量用户。笔记本电脑上的*端侧*推理只服务一个用户，希望延迟低到
# 硬件所能允许的极限。批处理是主要的杠杆，它把吞吐量和延迟拉向两头：把几个序列放在一起解码，所有
# 序列只需把权重读一遍。

# %%
ttft = timing.time_fn(decode.prefill, params, cfg, tok_1T, jnp.array([T_prompt]), cache_1,
                     repeats=5).median_s
# The two batch sizes take turns, so that whatever else runs on the machine slows both alike;
# each one's time per step is its median.
tpot_runs = timing.time_alternating([timing.decode_step_timer(params, cfg, B, T_prompt + 1)
                                     for B in (1, 8)], rounds=15, warmup=1)
tpot = {B: t.median_s for B, t in zip((1, 8), tpot_runs)}
throughput = {B: B / tpot[B] for B in tpot}

# %% tags=["hide-input"]
expect_measured(throughput[8] > throughput[1], "batching raises the tokens per second",
                expected="batch 8 produces more tokens per second than batch 1",
                measured=f"{fmt_tokens_per_s(throughput[8])} against "
                         f"{fmt_tokens_per_s(throughput[1])}")
TPOT_FLOOR = 0.9                # a step's time, batch 8 against batch 1; below 1 for noise
expect_measured(tpot[8] >= TPOT_FLOOR * tpot[1], "batching makes no single sequence faster: the "
                f"median batch-8 step takes at least {fmt_percent(TPOT_FLOOR)} of the median "
                "batch-1 step", expected=f"a batch-8 step takes at least {fmt_percent(TPOT_FLOOR)} "
                "of a batch-1 step (medians)",
                measured=f"{fmt_seconds(tpot[8])} against {fmt_seconds(tpot[1])}")
glue("ch1_ttft", fmt_seconds(ttft)); glue("ch1_T_prompt", f"{T_prompt:,}")
glue("ch1_tpot1", fmt_seconds(tpot[1])); glue("ch1_tpot8", fmt_seconds(tpot[8]))
glue("ch1_tpot_floor", fmt_percent(TPOT_FLOOR))
glue("ch1_tput1", fmt_tokens_per_s(throughput[1]))
glue("ch1_tput8", fmt_tokens_per_s(throughput[8]))
glue("ch1_tput_gain", fmt_ratio(throughput[8] / throughput[1]))
for B in tpot:
    print(f"batch {B}: TPOT {fmt_seconds(tpot[B])}, throughput "
          f"{fmt_tokens_per_s(throughput[B])}  ({DEVICE})")

# %% [markdown]
# For our small model on {glue:text}`ch1_device`, a {glue:text}`ch1_T_prompt`-token prompt
# reaches its first token after {glue:text}`ch1_ttft` of prefill. One sequence then decodes at
# {glue:text}`ch1_tpot1` per token ({glue:text}`ch1_tput1`); eight together take
# {glue:text}`ch1_tpot8` per step and produce {glue:text}`ch1_tput8`, {glue:text}`ch1_tput_gain`
# as many tokens per second, while no single sequence got faster: a step of eight took at least
# {glue:text}`ch1_tpot_floor` of a step of one, as the chapter checks. (On an accelerator the gain
# from batching approaches the ratio of the batch sizes; a CPU's matrix units run small
# batches inefficiently, which chapter 2 measures.) Chapters 2 and 3 turn this trade-off into equations, and chapter 11 into
# a serving engine.
#
# ## The price: memory
#
# The cache trades FLOPs for memory. Every token of every sequence stores a key and a value
# vector for each of the $K$ KV heads in each of the $L$ layers:
#
# $$\text{KV bytes per token} = 2 \cdot L \cdot K \cdot H \cdot \text{bytes per element}.$$
#
# The library's cache holds exactly that:

# %% [markdown] tags=["lang-zh"]
# 对于我们在 {glue:text}`ch1_device` 上的小模型，一个 {glue:text}`ch1_T_prompt` 个词元的提示词经过
# {glue:text}`ch1_ttft` 的预填充后得到第一个词元。之后，单个序列以每个词元 {glue:text}`ch1_tpot1` 的
# 速度解码（{glue:text}`ch1_tput1`）；八个序列一起时，每步需要 {glue:text}`ch1_tpot8`，产出
# {glue:text}`ch1_tput8`，每秒的词元数是前者的 {glue:text}`ch1_tput_gain`，而没有哪一个序列变快：本章检
# 验八个序列一步的耗时至少是一个序列一步的 {glue:text}`ch1_tpot_floor`。（在加速器上，批处理带来的增益接近批量大小之比；CPU 的矩阵单元处理小批次的效率很低，第 2 章会测量
# 这一点。）第 2 章和第 3 章把这种取舍写成方程，第 11 章则把它做成一个推理服务引擎。
#
# ## 代价：内存
#
# 缓存是用内存换 FLOPs。每个序列的每个词元，都要为 $L$ 层中每一层的 $K$ 个 KV 头各存一个键向量和
# 一个值向量：
#
# $$\text{每个词元的 KV 字节数} = 2 \cdot L \cdot K \cdot H \cdot \text{每个元素的字节数}.$$
#
# 库中的缓存存的正是这么多：

# %%
small_cache = kvcache.init_cache(cfg, 4, 1000)
assert kvcache.cache_bytes(small_cache) == counts.kv_cache_bytes(cfg, 4, 1000, 4)

llama13 = get_preset("llama-2-13b")
per_token = counts.kv_bytes_per_token(llama13, 2)
per_seq_8k = counts.kv_cache_bytes(llama13, 1, 8192, 2)
weights_13b = counts.param_bytes(llama13, 2)
caches_to_pass_weights = int(np.ceil(weights_13b / per_seq_8k))
assert 4 * per_seq_8k > weights_13b     # four 8k-token caches outweigh the whole model

# %% tags=["hide-input"]
glue("ch1_13b_per_token", fmt_bytes(per_token)); glue("ch1_13b_8k", fmt_bytes(per_seq_8k))
glue("ch1_13b_weights", fmt_bytes(weights_13b))
glue("ch1_13b_n_caches", str(caches_to_pass_weights))
print(f"LLaMA-2 13B, bfloat16: {fmt_bytes(per_token)} per token, {fmt_bytes(per_seq_8k)} per "
      f"8,192-token sequence; weights {fmt_bytes(weights_13b)}")

# %% [markdown]
# For LLaMA-2 13B in bfloat16 that is {glue:text}`ch1_13b_per_token` per token, or
# {glue:text}`ch1_13b_8k` for one sequence of 8,192 tokens. The weights occupy
# {glue:text}`ch1_13b_weights`, so {glue:text}`ch1_13b_n_caches` such sequences already need
# more memory than the model itself. And the cache is read in full at every decode step, so it
# costs bandwidth as well as capacity: a long conversation makes every one of its tokens slower.
# Chapter 5 measures that cost for popular models and takes apart the ways to shrink it —
# sharing KV heads, local attention, quantization, eviction, paging.
#
# ## Summary
#
# - Naive sampling recomputes the whole prefix for every token: $O(n^2)$ matrix work and
#   $O(n^3)$ attention work for $n$ tokens.
# - Causal masking means past keys and values never change, so they can be cached; with the
#   cache each step does $O(1)$ matrix work and $O(n)$ attention work, and the results are the
#   same.
# - Generation is two workloads: prefill (many tokens at once, compute-bound) and decode (one
#   token per sequence, memory-bound).
# - Serving optimises time to first token, time per output token and throughput, which batching
#   trades against each other.
# - The cache costs $2 L K H$ elements per token, which for real models quickly rivals the
#   weights.

# %% [markdown] tags=["lang-zh"]
# 对 bfloat16 的 LLaMA-2 13B 来说，每个词元要 {glue:text}`ch1_13b_per_token`，一个 8,192 个词元的
# 序列要 {glue:text}`ch1_13b_8k`。权重占 {glue:text}`ch1_13b_weights`，所以只要
# {glue:text}`ch1_13b_n_caches` 个这样的序列，所需内存就超过了模型本身。而且每个解码步骤都要把缓存
# 完整读一遍，所以它既占容量也耗带宽：一段长对话会让它的每一个词元都变慢。第 5 章会为常见模型测量
# 这部分代价，并逐一剖析缩小缓存的办法——共享 KV 头、局部注意力、量化、淘汰、分页。
#
# ## 小结
#
# - 朴素采样为每个词元重新计算整个前缀：生成 $n$ 个词元，矩阵计算量为 $O(n^2)$，注意力计算量为
#   $O(n^3)$。
# - 因果掩码意味着过去的键和值永远不变，因此可以缓存；有了缓存，每一步的矩阵计算量为 $O(1)$，注意力
#   计算量为 $O(n)$，结果不变。
# - 生成是两种工作负载：预填充（一次处理许多词元，计算受限）和解码（每个序列一个词元，内存受限）。
# - 推理服务要优化首个词元延迟、每个输出词元的时间和吞吐量，批处理让它们此消彼长。
# - 缓存每个词元要占 $2 L K H$ 个元素，对真实模型来说，它很快就能与权重比肩。
