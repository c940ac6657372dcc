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
# # Transformer inference arithmetic
#
# How fast *should* a transformer generate text? Carol Chen's "Transformer Inference
# Arithmetic" {cite:p}`chen2022arithmetic` answers that from first principles, with no
# experiment and nothing harder than multiplication: count the bytes that must move and the
# FLOPs that must happen, divide by what the hardware offers, and the result is a floor on
# latency that turns out to sit close to what a well-tuned engine achieves. This chapter redoes
# her whole argument with the library — the KV cache's costs, how much fits on a GPU, what
# tensor parallelism must communicate, latency at small and large batch, which batch sizes make
# sense, where the FLOPs go, what the element-wise operations cost — and ends, as she does, by
# holding the estimates against measurements of NVIDIA's FasterTransformer.
#
# Her examples run on NVIDIA A100s and use two models: one she calls
# {glue:text}`ch4_intro_p52_hers` parameters ({glue:text}`ch4_intro_L52` layers of width
# {glue:text}`ch4_intro_D52`; {glue:text}`ch4_intro_p52` in the library's preset, whose
# {glue:text}`ch4_intro_V52`-token vocabulary is our assumption) and one of
# {glue:text}`ch4_intro_p13` ({glue:text}`ch4_intro_L13` layers of width
# {glue:text}`ch4_intro_D13`), both GPT-style with a plain MLP four times the model width.
# Hardware numbers come from the library's registry, which takes the A100 datasheet's
# {glue:text}`ch4_intro_bw` where she rounded to {glue:text}`ch4_intro_her_bw`; the
# [errata](../book/errata.py) page sets her figures beside ours.

# %% [markdown] tags=["lang-zh"]
# # Transformer 推理计算
#
# Transformer 生成文本*应该*有多快？Carol Chen 的《Transformer Inference Arithmetic》
# {cite:p}`chen2022arithmetic` 从第一性原理回答了这个问题：不做实验，用到的最难的运算不过是乘法——
# 数一数必须搬运的字节和必须完成的 FLOPs，除以硬件所能提供的速度，得到的就是延迟的下限，而这个
# 下限离一个调校良好的引擎实际达到的水平并不远。本章用我们的库把她的整个论证重做一遍——KV 缓存的
# 代价、一块 GPU 上能放下多少、张量并行必须通信些什么、小批次和大批次下的延迟、哪些批量大小是合理的、
# FLOPs 花在了哪里、逐元素操作要花多少——最后也像她一样，拿这些估算去对照 NVIDIA FasterTransformer
# 的实测。
#
# 她的例子运行在 NVIDIA A100 上，用到两个模型：一个她称为 {glue:text}`ch4_intro_p52_hers`参数的模型
# （{glue:text}`ch4_intro_L52` 层，宽度 {glue:text}`ch4_intro_D52`；库中预设的参数量是
# {glue:text}`ch4_intro_p52`，其中词表有 {glue:text}`ch4_intro_V52` 个词元（token），这是我们的假设），另一个
# 参数量为 {glue:text}`ch4_intro_p13`（{glue:text}`ch4_intro_L13` 层，宽度 {glue:text}`ch4_intro_D13`）；
# 两者都是 GPT 式的，MLP 是普通的两层结构，隐藏宽度 $F = 4D$。硬件数字来自库的注册表，它采用 A100
# 数据手册上的 {glue:text}`ch4_intro_bw`，而她取整为 {glue:text}`ch4_intro_her_bw`；
# [勘误](../book/errata.py)页把她的数字和我们的并排列出。

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset
from inferbook.perf import counts, latency, roofline
from inferbook.perf.hardware import get_chip
from inferbook.perf.step_cost import step_time, work_time

print(info.describe())
a100 = get_chip("A100 40GB")
m52, m13 = get_preset("kipply-52b"), get_preset("kipply-13b")
assumptions = bookdata.load("kipply_assumptions.json")        # what the post assumed
print(a100)
print(m52)

# %% tags=["hide-input"]
from inferbook.book.figures import glue_figure
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)

# She names the models by round sizes; the presets' counts depend on a vocabulary the post
# does not give (our assumption), so both are shown.
glue("ch4_intro_p52_hers", fmt_count(assumptions["round_parameter_counts"]["kipply-52b"], 0))
glue("ch4_intro_p52", fmt_count(counts.param_count(m52)))
glue("ch4_intro_V52", f"{m52.V:,}")
glue("ch4_intro_p13", fmt_count(counts.param_count(m13)))
glue("ch4_intro_L52", str(m52.L)); glue("ch4_intro_D52", f"{m52.D:,}")
glue("ch4_intro_L13", str(m13.L)); glue("ch4_intro_D13", f"{m13.D:,}")
glue("ch4_intro_bw", fmt_rate(a100.hbm_bytes_per_s, "B/s", 3))
glue("ch4_intro_her_bw", fmt_rate(assumptions["assumed_a100"]["hbm_bytes_per_s"], "B/s", 1));

# %% [markdown]
# ## The KV cache
#
# Sampling a token means running it through every layer, where its query attends to the keys
# and values of every token before it. Keeping those keys and values — the KV cache, shaped
# $[B, 2, N, S, H]$ in GPT-2's `past` — saves recomputing them at every step. Per token it
# stores a key and a value vector for every KV head of every layer:
# $2 \cdot L \cdot K \cdot H$ numbers, times 2 bytes in bfloat16.
#
# Computing them costs two matrix–vector products per layer with $W_K, W_V \in
# \mathbb{R}^{D \times K H}$: $2 \cdot 2 \cdot L \cdot D \cdot KH$ FLOPs, which is
# $4 L D^2$ for the 52B model (its $K H = D$).

# %% [markdown] tags=["lang-zh"]
# ## KV 缓存
#
# 采样一个词元，意味着让它经过每一层；在每一层里，它的查询要关注它之前每个词元的键和值。把这些键和
# 值保存下来——这就是 KV 缓存，在 GPT-2 的 `past` 中形状为 $[B, 2, N, S, H]$——就不必在每一步都重新
# 计算它们。对每个词元，缓存为每一层的每个 KV 头存一个键向量和一个值向量：共
# $2 \cdot L \cdot K \cdot H$ 个数，在 bfloat16 下每个数 2 字节。
#
# 计算它们，每层要用 $W_K, W_V \in \mathbb{R}^{D \times K H}$ 做两次矩阵–向量乘法：共
# $2 \cdot 2 \cdot L \cdot D \cdot KH$ FLOPs，对 52B 模型而言就是 $4 L D^2$（它的 $K H = D$）。

# %%
kv_token = counts.kv_bytes_per_token(m52)
kv_flops = latency.kv_projection_flops(m52)
mem_s, compute_s = latency.kv_projection_times(m52, a100)
ratio = latency.break_even_tokens(a100)
assert kv_token == 2 * 2 * m52.L * m52.D and kv_flops == 2 * 2 * m52.L * m52.D ** 2
assert mem_s / compute_s == roofline.critical_batch(a100)      # the chip's ratio, nothing else

# %% tags=["hide-input"]
glue("ch4_kv_token", fmt_bytes(kv_token))
glue("ch4_kv_flops", f"{kv_flops:,}")
glue("ch4_kv_mem", fmt_seconds(mem_s, 2))
glue("ch4_kv_compute", fmt_seconds(compute_s, 2))
glue("ch4_ratio", f"{ratio:.0f}")
glue("ch4_a100_flops", fmt_rate(a100.bf16_flops_per_s, "FLOP/s", 0))
glue("ch4_a100_bw", fmt_rate(a100.hbm_bytes_per_s, "B/s", 3));

# %% [markdown]
# The 52B model stores {glue:text}`ch4_kv_token` of cache per token, and computing one token's
# keys and values takes {glue:text}`ch4_kv_flops` FLOPs. An A100 does
# {glue:text}`ch4_a100_flops` of bfloat16 arithmetic and reads {glue:text}`ch4_a100_bw`, so
# loading the two weight matrices takes {glue:text}`ch4_kv_mem` while the arithmetic for one
# token takes {glue:text}`ch4_kv_compute`.
#
# ### FLOPs against memory
#
# The two times share the factor $2 \cdot 2 \cdot L \cdot D^2$, so their ratio has nothing to
# do with the model: it is the chip's FLOP/s divided by its bytes/s, times the bytes per
# weight over the 2 FLOPs each weight does per token — {glue:text}`ch4_ratio` for an A100.
# Computing keys and values for up to that many tokens takes as long as for one: the weights
# have to stream in anyway, and the arithmetic overlaps with the loading. Below that many
# tokens per step the work is *memory-bound* (arithmetic units idle while bytes arrive), above
# it *FLOP-bound* (memory idle while arithmetic finishes). The same holds for the whole
# forward pass, whose FLOPs and bytes are both {glue:text}`ch4_kv_times` larger than the
# key/value part's.

# %% [markdown] tags=["lang-zh"]
# 52B 模型每个词元要存 {glue:text}`ch4_kv_token` 的缓存，而算出一个词元的键和值需要
# {glue:text}`ch4_kv_flops` FLOPs。一块 A100 的 bfloat16 算力是 {glue:text}`ch4_a100_flops`，读取速度是
# {glue:text}`ch4_a100_bw`，所以载入这两个权重矩阵要 {glue:text}`ch4_kv_mem`，而一个词元的计算只要
# {glue:text}`ch4_kv_compute`。
#
# ### FLOPs 对内存
#
# 这两个时间有公因子 $2 \cdot 2 \cdot L \cdot D^2$，所以它们的比值与模型无关：它等于芯片的 FLOP/s
# 除以它的 bytes/s，再乘以每个权重的字节数、除以每个权重对每个词元做的 2 FLOPs——对 A100 来说是
# {glue:text}`ch4_ratio`。为不超过这么多个词元计算键和值，花的时间和只算一个词元一样：权重反正都要
# 流进来，而计算与载入相互重叠。每步的词元数低于这个值时，工作是*内存受限*的（字节还在路上，计算
# 单元闲着）；高于它时是*计算受限*的，即受 FLOP/s 限制（计算还没做完，内存闲着）。整个前向计算也是
# 如此，它的 FLOPs 和字节数都是键/值部分的 {glue:text}`ch4_kv_times`。

# %%
P52 = counts.param_count(m52)
tokens = np.arange(1, 801)


def forward_time(n_tokens, gpus):
    """Roofline time of a forward pass over n tokens: load the weights or do 2·P·n FLOPs."""
    return roofline.roofline_time(2 * P52 * n_tokens, counts.param_bytes(m52), a100) / gpus


t1 = forward_time(1, 1)
assert forward_time(int(ratio), 1) == t1                     # free up to the ratio...
assert np.isclose(forward_time(2 * int(ratio) + 2, 1), 2 * forward_time(int(ratio) + 1, 1))
assert forward_time(1, 4) == t1 / 4                          # ...and four GPUs divide it
share_kv = latency.kv_projection_flops(m52) / counts.approx_flops_per_token(m52)
assert share_kv == 1 / 6

# %% tags=["hide-input"]
glue("ch4_fwd_1", fmt_seconds(t1))
glue("ch4_fwd_4", fmt_seconds(forward_time(1, 4)))
glue("ch4_kv_share", "1/6")
glue("ch4_kv_times", fmt_ratio(1 / share_kv, 0))

fig, ax = plt.subplots(figsize=(6.5, 3.8))
ax.plot(tokens, [counts.param_bytes(m52) / a100.hbm_bytes_per_s * 1e3] * len(tokens),
        label="load every weight (memory)")
ax.plot(tokens, 2 * P52 * tokens / a100.bf16_flops_per_s * 1e3, label="2·P FLOPs per token")
ax.plot(tokens, [forward_time(n, 1) * 1e3 for n in tokens], "k--", lw=1, label="roofline: the larger")
ax.axvline(ratio, color="gray", ls=":")
ax.set_xlabel("tokens in the forward pass")
ax.set_ylabel("time on one A100 (ms)")
ax.set_title(f"{m52.name}: a forward pass is free up to {ratio:.0f} tokens", fontsize=10)
ax.legend(fontsize=8)
ax.grid(alpha=0.3)
glue_figure("ch4_forward_figure", fig, zh=dict(
    title=f"{m52.name}：{ratio:.0f} 个词元以内，前向计算的时间不变",
    xlabel="前向计算中的词元数", ylabel="在一块 A100 上的时间（ms）",
    legend=["读取每个权重（内存）", "每个词元 2·P FLOPs", "屋顶线：取两者中较大者"]))

# %% [markdown]
# ```{glue:figure} ch4_forward_figure
# ```
#
# A forward pass of the 52B model costs {glue:text}`ch4_fwd_1` on one A100 for any number of
# tokens up to the ratio — {glue:text}`ch4_fwd_4` on four GPUs sharing the weights — and grows
# linearly past it. (In practice the flat line tilts up a little, because intermediate results
# move through memory too; see "intermediate memory costs" below.)
#
# The cache's key/value computation is {glue:text}`ch4_kv_share` of a token's FLOPs
# ($4LD^2$ of $24LD^2$). That is not the saving: without a cache, step $t$ would recompute keys
# and values for all $t$ earlier tokens, so the FLOPs saved per step grow with the sequence
# ($t \cdot 4LD^2$ against the step's own $24LD^2$), and generation without a cache is
# quadratic in its length. At small batch sizes, though, the weights must be read anyway, and
# recomputing the keys and values of a short prefix can hide entirely behind that read — for
# up to about {glue:text}`ch4_ratio` tokens on an A100.
#
# ## Capacity
#
# An A100 holds {glue:text}`ch4_hbm`. What must fit is the weights and the KV cache
# (activations are small, as chapter 3 showed).

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch4_forward_figure
# ```
#
# 在一块 A100 上，52B 模型的一次前向计算，只要词元数不超过这个比值，耗时都是 {glue:text}`ch4_fwd_1`
# ——四块 GPU 分担权重时是 {glue:text}`ch4_fwd_4`——超过之后则线性增长。（实际上那条水平线会略微
# 上翘，因为中间结果也要经过内存；见下文“中间结果的内存代价”。）
#
# 缓存中键/值的计算占一个词元 FLOPs 的 {glue:text}`ch4_kv_share`（$24LD^2$ 中的 $4LD^2$）。省下的并不
# 是这一部分：没有缓存时，第 $t$ 步要为之前全部 $t$ 个词元重新计算键和值，所以每步省下的 FLOPs 随
# 序列变长而增长（$t \cdot 4LD^2$，而这一步本身只有 $24LD^2$），没有缓存的生成，代价随长度平方增长。
# 不过在批量大小较小时，权重反正要读一遍，为一段短前缀重算键和值可以完全被这次读取掩盖——在
# A100 上，前缀最多可达大约 {glue:text}`ch4_ratio` 个词元。
#
# ## 容量
#
# 一块 A100 有 {glue:text}`ch4_hbm`。要放下的是权重和 KV 缓存（激活值很小，第 3 章已经说明）。

# %%
w52 = counts.param_bytes(m52)
min_gpus = latency.min_chips_for_weights(m52, a100)
assert min_gpus == 3
rows = []
for gpus in (3, 4, 8, 16):
    free = gpus * a100.hbm_bytes - w52
    tokens_fit = latency.kv_capacity_tokens(m52, a100, gpus)
    rows.append((gpus, free, tokens_fit, roofline.max_batch(m52, a100, 2048, gpus)))
    assert tokens_fit == int(free // kv_token)
cap = {g: (t, b) for g, _, t, b in rows}
assert cap[4][0] > 3 * cap[3][0]           # the fourth GPU more than triples the cache space

# %% tags=["hide-input"]
glue("ch4_hbm", fmt_bytes(a100.hbm_bytes, 0))
glue("ch4_w52", fmt_bytes(w52))
glue("ch4_params52", fmt_count(P52))
glue("ch4_min_gpus", str(min_gpus))
glue("ch4_free3", fmt_bytes(rows[0][1]))
glue("ch4_cap3", f"{cap[3][0]:,}")
glue("ch4_batch3", str(cap[3][1]))
glue("ch4_cap4", f"{cap[4][0]:,}")
glue("ch4_batch4", str(cap[4][1]))
glue("ch4_cap_gain", fmt_ratio(cap[4][0] / cap[3][0]))
Markdown("| A100s | memory left for the cache | tokens that fit | sequences of 2,048 |\n"
         "|---:|---:|---:|---:|\n" + "\n".join(
             f"| {g} | {fmt_bytes(f)} | {t:,} | {b} |" for g, f, t, b in rows))

# %% [markdown]
# The weights alone take {glue:text}`ch4_w52` ({glue:text}`ch4_params52` parameters at two
# bytes), so at least {glue:text}`ch4_min_gpus` GPUs are needed just to hold them. Three leave
# {glue:text}`ch4_free3` for the cache: {glue:text}`ch4_cap3` tokens, which is
# {glue:text}`ch4_batch3` sequences of 2,048 tokens. That is a miserable batch: a step at
# batch 3 is deeply memory-bound, and the arithmetic units sit idle. A fourth GPU multiplies
# the cache space by {glue:text}`ch4_cap_gain` ({glue:text}`ch4_cap4` tokens,
# {glue:text}`ch4_batch4` such sequences) and also divides more evenly: powers of two split
# heads and hidden dimensions cleanly. Since the weights cost the same however large the batch,
# each model instance wants as large a batch as its memory allows.
#
# The arithmetic has not aged. For Llama-3.1-70B {cite:p}`grattafiori2024llama3` in bfloat16
# on H100s of {glue:text}`ch4_h100_memory` each:

# %% [markdown] tags=["lang-zh"]
# 仅权重就占 {glue:text}`ch4_w52`（{glue:text}`ch4_params52`个参数，每个两字节），所以光是放下它们，
# 就至少需要 {glue:text}`ch4_min_gpus` 块 GPU。三块 GPU 给缓存留下 {glue:text}`ch4_free3`：可容纳
# {glue:text}`ch4_cap3` 个词元，也就是 {glue:text}`ch4_batch3` 个 2,048 词元的序列。这个批次小得可怜：
# 批量大小为 3 的一步严重内存受限，计算单元都闲着。第四块 GPU 让缓存空间变为原来的
# {glue:text}`ch4_cap_gain`（{glue:text}`ch4_cap4` 个词元，{glue:text}`ch4_batch4` 个这样的序列），
# 而且切分起来也更均匀：2 的幂能把头和隐藏维度切得整整齐齐。既然无论批次多大，权重的代价都一样，
# 每个模型实例都希望在内存允许的范围内把批次做得尽量大。
#
# 这套计算并没有过时。以 bfloat16 的 Llama-3.1-70B {cite:p}`grattafiori2024llama3` 为例，放在每块
# {glue:text}`ch4_h100_memory` 的 H100 上：

# %%
l31 = get_preset("llama-3.1-70b")
h100 = get_chip("H100 SXM")
l31_min = latency.min_chips_for_weights(l31, h100)
l31_tokens = {g: latency.kv_capacity_tokens(l31, h100, g) for g in (l31_min, 4, 8)}
assert l31_min == 2 and l31_tokens[4] > 5 * l31_tokens[2]    # the third GPU onward is all cache
free8, per = 8 * h100.hbm_bytes - counts.param_bytes(l31), counts.kv_bytes_per_token(l31)
assert l31_tokens[8] * per <= free8 < (l31_tokens[8] + 1) * per
assert counts.kv_bytes_per_token(l31.replace(K=l31.N)) == l31.G * per   # one KV head per query

# %% tags=["hide-input"]
glue("ch4_l31_weights", fmt_bytes(counts.param_bytes(l31)))
glue("ch4_h100_memory", fmt_bytes(h100.hbm_bytes, 0))
glue("ch4_l31_ctx", fmt_count(l31.max_seq_len))
glue("ch4_l31_min", str(l31_min))
glue("ch4_l31_tok2", fmt_count(l31_tokens[2]))
glue("ch4_l31_tok4", fmt_count(l31_tokens[4]))
glue("ch4_l31_tok8", fmt_count(l31_tokens[8]))
glue("ch4_l31_G", str(l31.G))

# %% [markdown]
# Its {glue:text}`ch4_l31_weights` of weights need {glue:text}`ch4_l31_min` GPUs, which leave
# room for {glue:text}`ch4_l31_tok2` tokens of cache; four hold {glue:text}`ch4_l31_tok4`, and
# a full board of eight {glue:text}`ch4_l31_tok8` — against a context window of
# {glue:text}`ch4_l31_ctx` tokens per request. With one KV head per query head, as in the
# 52B model, a token's cache would be {glue:text}`ch4_l31_G` times larger and the same memory
# would hold that many times fewer tokens (grouped-query attention, chapter 5).
#
# The same two questions — how many chips the weights need, and what each token of context
# costs — for the model families readers serve today, each read from its published
# configuration (the presets name their sources), in bfloat16 on H100s:

# %% [markdown] tags=["lang-zh"]
# 它的 {glue:text}`ch4_l31_weights` 权重需要 {glue:text}`ch4_l31_min` 块 GPU，剩下的空间能容纳的缓存
# 词元数为 {glue:text}`ch4_l31_tok2`；四块能容纳 {glue:text}`ch4_l31_tok4`，插满八块的一整台机器则是
# {glue:text}`ch4_l31_tok8`——而每个请求的上下文窗口就有 {glue:text}`ch4_l31_ctx` 个词元。如果像
# 52B 模型那样每个查询头配一个 KV 头，一个词元的缓存会变为原来的 {glue:text}`ch4_l31_G` 倍，同样的
# 内存能容纳的词元也会按同样的比例减少（分组查询注意力，第 5 章）。
#
# 对今天读者在线服务的各个模型家族，问同样的两个问题——权重需要几块芯片，上下文中每个词元要花多少
# 缓存——每个模型都按它公开的配置读取（预设里注明了出处），在 H100 上以 bfloat16 计：

# %%
family_table = ["llama-3.2-1b", "gemma-3-1b", "pythia-1b", "smollm3-3b", "gemma-3-4b",
                "olmo-2-7b", "llama-3.1-8b", "qwen3-8b", "gemma-3-27b", "llama-3.1-70b",
                "deepseek-v3"]
today = {}
for name in family_table:
    c = get_preset(name)
    per_token = counts.kv_bytes_per_token(c)
    today[name] = dict(cfg=c, params=counts.param_count(c), weights=counts.param_bytes(c),
                       chips=latency.min_chips_for_weights(c, h100), per_token=per_token,
                       over_context=counts.kv_cache_bytes(c, 1, c.max_seq_len) / c.max_seq_len,
                       windowed=sum(w is not None for w in c.windows))
g27, olmo, l8 = today["gemma-3-27b"], today["olmo-2-7b"], today["llama-3.1-8b"]
assert olmo["cfg"].K == olmo["cfg"].N and olmo["per_token"] == 4 * l8["per_token"]  # MHA vs GQA
assert olmo["params"] < l8["params"]                   # ... with fewer parameters
assert g27["windowed"] >= 5 * (g27["cfg"].L - g27["windowed"])   # five local layers a global
assert g27["over_context"] < g27["per_token"] / 5

# %% tags=["hide-input"]
Markdown("| model | parameters | weights | H100s for the weights | KV cache per token "
         "| per token over its whole context |\n|---|---:|---:|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {fmt_count(r['params'])} | {fmt_bytes(r['weights'])} | {r['chips']} | "
             f"{fmt_bytes(r['per_token'], 1)} | {fmt_bytes(r['over_context'], 1)} "
             f"({fmt_count(r['cfg'].max_seq_len)} tokens) |" for n, r in today.items()))

# %% tags=["hide-input"]
glue("ch4_olmo_kv", fmt_bytes(olmo["per_token"], 0))
glue("ch4_l8_kv", fmt_bytes(l8["per_token"], 0))
glue("ch4_olmo_vs_l8", fmt_ratio(olmo["per_token"] / l8["per_token"], 0))
glue("ch4_olmo_params", fmt_count(olmo["params"]))
glue("ch4_l8_params", fmt_count(l8["params"]))
glue("ch4_g27_params", fmt_count(g27["params"]))
glue("ch4_g27_chips", str(g27["chips"]))
glue("ch4_g27_kv", fmt_bytes(g27["per_token"], 0))
glue("ch4_g27_windowed", str(g27["windowed"]))
glue("ch4_g27_L", str(g27["cfg"].L))
glue("ch4_g27_window", f"{g27['cfg'].window:,}")
glue("ch4_g27_ctx", fmt_count(g27["cfg"].max_seq_len))
glue("ch4_g27_over", fmt_bytes(g27["over_context"], 0));

# %% [markdown]
# What a token costs is decided by the attention, not by the size of the model. OLMo-2-7B
# ({glue:text}`ch4_olmo_params` parameters) gives every query head its own keys and values and
# stores {glue:text}`ch4_olmo_kv` per token, {glue:text}`ch4_olmo_vs_l8` the
# {glue:text}`ch4_l8_kv` of Llama-3.1-8B ({glue:text}`ch4_l8_params` parameters,
# grouped-query attention). Gemma-3-27B's
# {glue:text}`ch4_g27_params` parameters need {glue:text}`ch4_g27_chips` H100s, and a token
# costs {glue:text}`ch4_g27_kv` while every layer holds it; but {glue:text}`ch4_g27_windowed`
# of its {glue:text}`ch4_g27_L` layers keep only the last {glue:text}`ch4_g27_window` tokens,
# so over a {glue:text}`ch4_g27_ctx`-token context a token costs {glue:text}`ch4_g27_over`.
#
# ## Model parallelism
#
# *Tensor parallelism* splits every weight matrix across the $N$ GPUs (attention by heads, the
# MLP by its hidden dimension), so the weight loading and the FLOPs are both divided by $N$.
# The price is communication: each layer ends its attention and its MLP with a partial sum
# that must be added up across GPUs — an all-reduce of the $[B, D]$ activation, done as a
# reduce-scatter and an all-gather. Each GPU sends $(N-1)/N \cdot D$ numbers in each of these
# four steps: $4 (N-1) D / N$ per layer per token. The KV cache is split by heads along with
# $W_K$ and $W_V$. *Pipeline parallelism* — whole layers per GPU — sends only one $D$-vector
# per boundary, but leaves all but one GPU idle for a single request.
#
# The A100's NVLink moves {glue:text}`ch4_link_one` each way on each of its
# {glue:text}`ch4_links` links. NVIDIA quotes the total of both directions; a send time needs
# one direction:

# %% [markdown] tags=["lang-zh"]
# 一个词元的代价由注意力决定，而不是由模型的大小决定。OLMo-2-7B（{glue:text}`ch4_olmo_params` 个
# 参数）给每个查询头都配了自己的键和值，每个词元存 {glue:text}`ch4_olmo_kv`，是 Llama-3.1-8B
# （{glue:text}`ch4_l8_params` 个参数，分组查询注意力）的 {glue:text}`ch4_l8_kv` 的
# {glue:text}`ch4_olmo_vs_l8`。Gemma-3-27B
# 的 {glue:text}`ch4_g27_params` 个参数需要 {glue:text}`ch4_g27_chips` 块 H100；当每一层都保存一个
# 词元时，它要花 {glue:text}`ch4_g27_kv`；但它的 {glue:text}`ch4_g27_L` 层中有
# {glue:text}`ch4_g27_windowed` 层只保留最近的 {glue:text}`ch4_g27_window` 个词元，所以在
# {glue:text}`ch4_g27_ctx` 个词元的上下文中，平均每个词元只花 {glue:text}`ch4_g27_over`。
#
# ## 模型并行
#
# *张量并行*把每个权重矩阵切分到 $N$ 块 GPU 上（注意力按头切，MLP 按隐藏维度切），于是权重的载入和
# FLOPs 都被除以 $N$。代价是通信：每一层的注意力和 MLP 结束时都得到一个部分和，必须在 GPU 之间加
# 起来——对 $[B, D]$ 激活做一次全规约（all-reduce），拆成一次规约散射（reduce-scatter）和一次
# 全收集（all-gather）来完成。在这四步的每一步里，每块 GPU 发送 $(N-1)/N \cdot D$ 个数：每层每个词元
# 共 $4 (N-1) D / N$ 个。KV 缓存随 $W_K$ 和 $W_V$ 一起按头切分。*流水线并行*——每块 GPU 放若干整层
# ——在每个边界只发送一个 $D$ 维向量，但对单个请求来说，除了一块 GPU 之外，其余都闲着。
#
# A100 的 NVLink 有 {glue:text}`ch4_links` 条链路，每一条每个方向传输 {glue:text}`ch4_link_one`。
# NVIDIA 报的是两个方向的总和；而计算发送时间只需要一个方向：

# %%
show_source(latency.tp_comm_bytes_per_token)

# %%
link = a100.interconnect_bytes_per_s
comm_rows = []
for n in (2, 4, 8):
    per_token = latency.tp_comm_bytes_per_token(m52, n)
    comm_rows.append((n, per_token, counts.kv_bytes_per_token_per_shard(m52, n)))
    assert np.isclose(per_token, m52.L * 4 * (n - 1) / n * m52.D * 2)
    assert counts.kv_bytes_per_token_per_shard(m52, n) * n == kv_token

# %% tags=["hide-input"]
glue("ch4_link_one", fmt_rate(a100.link_bytes_per_s, "B/s", 0))
glue("ch4_links", str(a100.links))
glue("ch4_link", fmt_rate(link))
glue("ch4_link_both", fmt_rate(2 * link))
Markdown(f"| GPUs | bytes each GPU sends per token ({m52.name}) | KV cache per token per GPU |\n"
         "|---:|---:|---:|\n" + "\n".join(f"| {n} | {fmt_bytes(c)} | {fmt_bytes(k)} |"
                                         for n, c, k in comm_rows))

# %% [markdown]
# One direction of all links together is {glue:text}`ch4_link` ({glue:text}`ch4_link_both`
# counting both).
#
# ## Latency
#
# Put the pieces together for one decode step on $N$ GPUs. With $P$ parameters, memory
# bandwidth $A_{bm}$, FLOP/s $A_f$ and link bandwidth $A_c$:
#
# - at **small batch** the step is memory-bound: $2P / (N A_{bm})$ to read the bfloat16 weights,
#   plus the fixed latency of each of the $4L$ collectives, since every layer waits for its
#   messages — about {glue:text}`ch4_hop` each over NVLink by her estimate (the registry's
#   `hop_latency_s`);
# - at **large batch** it is FLOP-bound: $B \cdot 2P / (N A_f)$, while the collectives move
#   $B \cdot 2 \cdot 4 L D / A_c$ bytes (rounding $(N-1)/N$ up to 1); those transfers overlap
#   with the arithmetic, so the larger of the two counts.
#
# Both leave out reading the KV cache (it depends on the context) and the unembedding's extra
# traffic. Her example is a Gopher-sized model {cite:p}`rae2021gopher` on 16 A100s. In the
# library each of her formulas lists the step's parts and collectives the way she counts them
# (a step's cost), and its one step-time formula, `step_cost.step_time` (chapter 3), prices
# them: her "compute" is the parts' roofline (`step_cost.work_time`), her "comms" the
# collectives' time (the cost's `comm_s`).

# %% [markdown] tags=["lang-zh"]
# 所有链路的一个方向加起来是 {glue:text}`ch4_link`（两个方向都算则是 {glue:text}`ch4_link_both`）。
#
# ## 延迟
#
# 把这些部分拼起来，看 $N$ 块 GPU 上的一个解码步骤。设参数量为 $P$，内存带宽为 $A_{bm}$，FLOP/s 为
# $A_f$，链路带宽为 $A_c$：
#
# - 在**小批次**下，这一步是内存受限的：读取 bfloat16 权重要 $2P / (N A_{bm})$，再加上 $4L$ 次集合
#   通信各自的固定延迟，因为每一层都要等它的消息——按她的估计，经 NVLink 每次约
#   {glue:text}`ch4_hop`（注册表中的 `hop_latency_s`）；
# - 在**大批次**下，这一步是计算受限的：$B \cdot 2P / (N A_f)$，同时集合通信要搬运
#   $B \cdot 2 \cdot 4 L D / A_c$ 字节（把 $(N-1)/N$ 向上取整为 1）；这些传输与计算重叠，所以取两者中
#   较大的那个。
#
# 两者都没有计入读取 KV 缓存（它取决于上下文）和反嵌入带来的额外流量。她的例子是一个 Gopher 规模的
# 模型 {cite:p}`rae2021gopher`，跑在 16 块 A100 上。在库中，她的每个公式都按她的算法列出这一步的
# 各部分和集合通信（即这一步的成本），再由库中唯一的步骤时间公式 `step_cost.step_time`（第 3 章）
# 算出它的耗时：她的“计算”是各部分的屋顶线（`step_cost.work_time`），她的“通信”是集合通信的时间
# （成本的 `comm_s`）。

# %%
show_source(latency.small_batch_cost)

# %%
gopher = get_preset("gopher-280b")
small = latency.small_batch_cost(gopher, a100, 16)
comm_b1 = latency.large_batch_cost(gopher, a100, 16, 1).comm_s
large = latency.large_batch_cost(gopher, a100, 16, 512)
small_s, small_compute = step_time(small, a100, 16), work_time(small, a100, 16)
large_s, large_compute = step_time(large, a100, 16), work_time(large, a100, 16)
assert small.comm_s == 4 * gopher.L * a100.hop_latency_s
assert comm_b1 < small.comm_s / 50           # at batch 1 the bytes are nothing; latency rules
assert large_s == large_compute > large.comm_s

# %% tags=["hide-input"]
glue("ch4_hop", fmt_seconds(a100.hop_latency_s, 0))
glue("ch4_gopher_params", fmt_count(counts.param_count(gopher)))
glue("ch4_gopher_small", fmt_seconds(small_compute))
glue("ch4_gopher_lat", fmt_seconds(small.comm_s, 2))
glue("ch4_gopher_b1_bytes", fmt_seconds(comm_b1, 0))
glue("ch4_gopher_large", fmt_seconds(large_compute))
glue("ch4_gopher_large_comm", fmt_seconds(large.comm_s))
glue("ch4_gopher_large_per_token", fmt_seconds(large_s / 512, 2))
glue("ch4_gopher_lat_share", fmt_percent(small.comm_s / (large_s + small.comm_s)));

# %% [markdown]
# With the preset's {glue:text}`ch4_gopher_params` parameters, a small-batch step costs
# {glue:text}`ch4_gopher_small` of weight loading plus {glue:text}`ch4_gopher_lat` of message
# latency; the bytes those messages carry at batch 1 would take only
# {glue:text}`ch4_gopher_b1_bytes`, so dropping that term is safe. At batch 512 the arithmetic
# takes {glue:text}`ch4_gopher_large` against {glue:text}`ch4_gopher_large_comm` of transfers:
# the step takes {glue:text}`ch4_gopher_large`, which produces 512 tokens at once
# ({glue:text}`ch4_gopher_large_per_token` per token). The message latency does not grow with
# the batch — one message carries the whole batch's activations — so it stays
# {glue:text}`ch4_gopher_lat`, {glue:text}`ch4_gopher_lat_share` of the large-batch step if it
# were not overlapped. Communication is what stops more chips from driving latency to zero:
# the FLOP and load terms shrink like $1/N$, the message latency does not.
#
# The library joins both regimes, and adds the KV read she leaves out, in
# `tensor_parallel_cost`: the roofline step plus the collectives, which `step_time` overlaps
# where they can be. Across batch sizes:

# %% [markdown] tags=["lang-zh"]
# 按预设的参数量 {glue:text}`ch4_gopher_params`，小批次下的一步要花 {glue:text}`ch4_gopher_small`
# 载入权重，另加 {glue:text}`ch4_gopher_lat` 的消息延迟；批量大小为 1 时，这些消息所携带的字节只需
# {glue:text}`ch4_gopher_b1_bytes`，所以略去这一项是安全的。批量大小为 512 时，计算要
# {glue:text}`ch4_gopher_large`，传输要 {glue:text}`ch4_gopher_large_comm`：这一步耗时
# {glue:text}`ch4_gopher_large`，一次产出 512 个词元（每个词元 {glue:text}`ch4_gopher_large_per_token`）。
# 消息延迟不随批次增长——一条消息就装下整个批次的激活——所以它保持为 {glue:text}`ch4_gopher_lat`；
# 如果不重叠，它占大批次一步的 {glue:text}`ch4_gopher_lat_share`。正是通信让更多的芯片无法把延迟压到
# 零：FLOP 项和载入项按 $1/N$ 缩小，消息延迟却不会。
#
# 库在 `tensor_parallel_cost` 中把两种情形合在一起，并补上了她略去的 KV 读取：屋顶线的一步，
# 加上集合通信，`step_time` 在能重叠的地方让它们重叠。在不同的批量大小下：

# %%
bs = np.unique(np.geomspace(1, 2048, 80).astype(int))
joined = [step_time(latency.tensor_parallel_cost(gopher, a100, 16, B, 0), a100, 16) for B in bs]
small_line = [small_s] * len(bs)
large_line = [work_time(latency.large_batch_cost(gopher, a100, 16, B), a100, 16) for B in bs]
comm_line = [latency.large_batch_cost(gopher, a100, 16, B).comm_s for B in bs]
for t, large_B in zip(joined, large_line):
    assert t >= max(small_compute, large_B) * 0.999

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(bs, np.array(small_line) * 1e3, ":", label="small batch: weights + message latency")
ax.loglog(bs, np.array(large_line) * 1e3, ":", label="large batch: FLOPs")
ax.loglog(bs, np.array(comm_line) * 1e3, ":", label="collective bytes")
ax.loglog(bs, np.array(joined) * 1e3, "k", label="joined (tensor_parallel_cost)")
ax.axvline(roofline.critical_batch(a100), color="gray", lw=0.8)
ax.set_xlabel("batch size B")
ax.set_ylabel("time per decode step (ms)")
ax.set_title(f"{gopher.name} on 16 × A100 40GB (no KV cache)", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch4_batch_figure", fig, zh=dict(
    title=f"{gopher.name}，16 × A100 40GB（不含 KV 缓存）",
    xlabel="批量大小 B", ylabel="每个解码步骤的时间（ms）",
    legend=["小批次：权重 + 消息延迟", "大批次：FLOPs", "集合通信的字节",
            "合并（tensor_parallel_cost）"]))

# %% [markdown]
# ```{glue:figure} ch4_batch_figure
# ```
#
# Her closing exercise is a check worth doing: the 52B model on four GPUs at batch 256.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch4_batch_figure
# ```
#
# 她最后的那道练习值得一做：52B 模型，四块 GPU，一个 256 个序列的批次。

# %%
ex10 = latency.large_batch_cost(m52, a100, 4, 256)
ex10_compute = work_time(ex10, a100, 4)
assert ex10_compute > ex10.comm_s
print(f"compute {fmt_seconds(ex10_compute)}, comms {fmt_seconds(ex10.comm_s)}, "
      f"step {fmt_seconds(step_time(ex10, a100, 4))}")

# %% tags=["hide-input"]
glue("ch4_ex10_compute", fmt_seconds(ex10_compute))
glue("ch4_ex10_comms", fmt_seconds(ex10.comm_s))

# %% [markdown]
# Compute {glue:text}`ch4_ex10_compute`, communication {glue:text}`ch4_ex10_comms`.
#
# These are floors, not forecasts: they assume perfect use of bandwidth and arithmetic,
# ignore softmaxes and other element-wise work, and treat communication as free of contention.
# Their value is in the reasoning — which term dominates, and what an optimisation can move.
#
# ## Batch sizes
#
# Comparing the two regimes' times, $2P/(N A_{bm})$ against $B \cdot 2P/(N A_f)$, brings back
# the same ratio: below {glue:text}`ch4_ratio` sequences a step is memory-bound, above it
# FLOP-bound. Given enough load one prefers to be FLOP-bound, where the hardware does the most
# work per second; past that point a larger batch no longer makes anything faster.
#
# Communication has its own version of the ratio. Each of the four collectives of a layer has
# to hide behind the matmul that consumes or produces it, so compare, matmul by matmul, the
# FLOPs with the bytes sent: a $[B, D]$ activation (2 bytes per number) feeds $2 B D \cdot
# \text{out}$ FLOPs.

# %% [markdown] tags=["lang-zh"]
# 计算 {glue:text}`ch4_ex10_compute`，通信 {glue:text}`ch4_ex10_comms`。
#
# 这些是下限，不是预测：它们假设带宽和计算都被完美利用，忽略 softmax 和其他逐元素的工作，并认为通信
# 没有争用。它们的价值在于推理本身——哪一项占主导，一项优化能改变什么。
#
# ## 批量大小
#
# 比较两种情形的时间，$2P/(N A_{bm})$ 对 $B \cdot 2P/(N A_f)$，又回到了同一个比值：序列数低于
# {glue:text}`ch4_ratio` 时，一步是内存受限的；高于它时是计算受限的。只要负载足够，人们更愿意处于
# 计算受限的状态，此时硬件每秒完成的工作最多；过了这个点，更大的批次不会让任何东西变得更快。
#
# 通信也有它自己版本的这个比值。一层中的四次集合通信，每一次都要被消耗它或产生它的那次矩阵乘法
# 掩盖，所以要逐个矩阵乘法地比较 FLOPs 与发送的字节：一个 $[B, D]$ 激活（每个数 2 字节）供给
# $2 B D \cdot \text{out}$ FLOPs。

# %%
per_byte = latency.flops_per_comm_byte(m52)
hw_comm = latency.comm_intensity(a100)
assert per_byte == {"qkv": 3 * m52.D, "o": m52.D, "w1": 4 * m52.D, "w2": 4 * m52.D}

# %% tags=["hide-input"]
Markdown("| matmul | FLOPs per byte communicated | on 8 GPUs (per GPU) |\n|---|---:|---:|\n"
         + "\n".join(f"| {k} | {v:,.0f} ({v / m52.D:g}·D) | {v / 8:,.0f} |"
                     for k, v in per_byte.items()))
# %%
assert per_byte["o"] / 8 < hw_comm < per_byte["o"] / 4
narrow = m52.replace(D=512, F=2048, N=4, K=4, H=128)
assert all(latency.flops_per_comm_byte(narrow)["o"] / n < hw_comm for n in (2, 4, 8))

# %% tags=["hide-input"]
# The o projection does D FLOPs per byte, D/N per GPU: the first to fall below the line.
glue("ch4_hw_comm", f"{hw_comm:,.0f}")
glue("ch4_o_8", f"{per_byte['o'] / 8:,.0f}")

# %% [markdown]
# An A100 does {glue:text}`ch4_hw_comm` FLOPs in the time it sends one byte over NVLink. Every
# entry must stay above that for communication to hide behind compute (when the step is
# FLOP-bound at all). The output projection is the tightest: $D$ FLOPs per byte, or $D/N$ per
# GPU. On eight GPUs the 52B model's is {glue:text}`ch4_o_8`, just under the line: a width per
# GPU of about {glue:text}`ch4_hw_comm` is where tensor parallelism stops hiding its
# communication, and a
# model of width 512 would be awkward on any number of GPUs.
#
# Which batch to run depends on the load. A lightly used API runs small batches, memory-bound
# — then even skipping the KV cache and recomputing can be reasonable. A busy API wants the
# smallest batch that is FLOP-bound, which serves everybody at the best per-request latency that
# full efficiency allows. A bulk job (evaluation, data generation) wants as many chips as it can
# use and the largest batch that fits.
#
# ## Counting FLOPs
#
# "Two FLOPs per parameter per token" can be checked by walking through a layer. With
# $W_Q, W_K, W_V, W_O \in \mathbb{R}^{D \times D}$ and an MLP of width $4D$:

# %% [markdown] tags=["lang-zh"]
# A100 经 NVLink 发送一个字节的时间里，能做 {glue:text}`ch4_hw_comm` FLOPs。要让计算掩盖通信
# （前提是这一步本来就是计算受限的），表中的每一项都必须高于这个数。最紧的是输出投影：每字节
# $D$ FLOPs，即每块 GPU $D/N$。在八块 GPU 上，52B 模型的这一项是 {glue:text}`ch4_o_8`，恰好落在线下：
# 每块 GPU 分到的宽度约为 {glue:text}`ch4_hw_comm` 时，张量并行的通信就再也无法被计算掩盖了；而宽度为 512
# 的模型，无论用多少块 GPU 都不好办。
#
# 跑多大的批次取决于负载。用得不多的 API 跑小批次，内存受限——这时甚至不用 KV 缓存、直接重算也可能
# 是合理的。繁忙的 API 想要计算受限的最小批次，它能在满效率所允许的范围内，给每个请求最好的延迟。
# 批量任务（评测、数据生成）则想用上尽可能多的芯片，跑放得下的最大批次。
#
# ## 数一数 FLOPs
#
# “每个参数、每个词元 2 FLOPs”这一说法，可以逐层走一遍来验证。设
# $W_Q, W_K, W_V, W_O \in \mathbb{R}^{D \times D}$，MLP 宽度为 $4D$：

# %%
breakdown = latency.layer_flop_breakdown(m52)
assert breakdown == {"qkv": 6 * m52.D ** 2, "o": 2 * m52.D ** 2, "mlp": 16 * m52.D ** 2}
per_token_52 = counts.approx_flops_per_token(m52)
assert per_token_52 == 24 * m52.L * m52.D ** 2

# %% tags=["hide-input"]
Markdown("| step | FLOPs per token per layer |\n|---|---:|\n" + "\n".join(
    f"| {k} | {v:,} ({v // m52.D ** 2}·D²) |" for k, v in breakdown.items())
    + f"\n| **all {m52.L} layers** | **{per_token_52:,}** |")
# %%
half = per_token_52 / 2
emb = counts.param_counts(m52)["embedding"] + counts.param_counts(m52)["unembedding"]

# %% tags=["hide-input"]
glue("ch4_24_total", f"{per_token_52:,}")
glue("ch4_24_half", fmt_count(half))
glue("ch4_P52", fmt_count(P52))
glue("ch4_emb52", fmt_count(emb, 2))
glue("ch4_2p_gap", fmt_percent(1 - half / P52, 1));

# %% [markdown]
# All layers together do {glue:text}`ch4_24_total` FLOPs per token: twice
# {glue:text}`ch4_24_half`, against the model's {glue:text}`ch4_P52` parameters. The gap,
# {glue:text}`ch4_2p_gap`, is the token embedding and unembedding
# ({glue:text}`ch4_emb52` parameters with the vocabulary our preset assumes; the post gives
# none). Using $24 L D^2$ or $2P$ in the latency formulas changes little.
#
# What about the attention scores, the softmax, the norms, the activation? They act on vectors
# of length $D$ (or $F$, or the context), not on $D \times D$ matrices, so they grow like $D$
# while the matmuls grow like $D^2$. XLA's count of a compiled decode step shows both parts; we
# compile models of kipply's shape at three widths and look at what the matmul formula misses.

# %% [markdown] tags=["lang-zh"]
# 所有层加起来，每个词元做 {glue:text}`ch4_24_total` FLOPs：即 {glue:text}`ch4_24_half` 乘以 2，而模型
# 有 {glue:text}`ch4_P52`个参数。差出的 {glue:text}`ch4_2p_gap` 是词元的嵌入和反嵌入（按我们的预设
# 所假设的词表，共 {glue:text}`ch4_emb52`个参数；原文没有给出词表）。在延迟公式里用 $24 L D^2$ 还是
# $2P$，差别不大。
#
# 那么注意力分数、softmax、归一化、激活函数呢？它们作用于长度为 $D$（或 $F$，或上下文长度）的向量，
# 而不是 $D \times D$ 的矩阵，所以它们按 $D$ 增长，而矩阵乘法按 $D^2$ 增长。XLA 对一个编译好的解码
# 步骤的计数同时包含这两部分；我们按 kipply 的模型形状编译三种宽度的模型，看看矩阵乘法公式漏掉了
# 什么。

# %%
def xla_flops(cfg, context=64):
    params = decoder.abstract_params(cfg)
    cache = jax.eval_shape(lambda: kvcache.init_cache(cfg, 1, context))
    tok = jax.ShapeDtypeStruct((1, 1), jnp.int32)
    cost = decode.extend.lower(params, cfg, tok, cache).compile().cost_analysis()
    return (cost[0] if isinstance(cost, (list, tuple)) else cost)["flops"]


widths = [256, 512, 1024]
rest = []
for D in widths:
    cfg = ModelConfig(L=2, D=D, F=4 * D, N=D // 64, K=D // 64, H=64, V=1024, mlp="plain",
                      activation="gelu", name=f"kipply-shaped D={D}")
    counted = xla_flops(cfg)
    matmuls = counts.forward_flops(cfg, 1, 1, kv_len=65)
    assert matmuls <= counted <= 1.05 * matmuls
    rest.append((counted - matmuls) / counted)
    print(f"D={D:5d}: XLA {counted:,.0f} FLOPs, matmul formula {matmuls:,}, "
          f"the rest {fmt_percent(rest[-1], 2)}")
assert rest[0] > rest[1] > rest[2]            # the vector work's share falls as D grows

# %% tags=["hide-input"]
glue("ch4_rest_small", fmt_percent(rest[0], 1))
glue("ch4_rest_big", fmt_percent(rest[-1], 1))
glue("ch4_width_small", fmt_count(widths[0]))
glue("ch4_width_big", fmt_count(widths[-1]));

# %% [markdown]
# The element-wise share falls from {glue:text}`ch4_rest_small` to
# {glue:text}`ch4_rest_big` as the width grows from {glue:text}`ch4_width_small` to
# {glue:text}`ch4_width_big`; at the width of the 52B model it is
# negligible *as FLOPs*. As time it is another matter.
#
# ## Intermediate memory costs
#
# Element-wise operations (biases, activations, dropout) and normalisations (softmax,
# layernorm) do few FLOPs, but each reads and writes its whole input: on a GPU they are
# memory-bound, and their time is bytes over bandwidth, however few their FLOPs. Unfused, a
# softmax might make four passes over memory where one read and one write would do; how much
# time these operations take depends on the software — kernel fusion — more than on the
# arithmetic. From the measurements of {cite:t}`ivanov2021datamovement` on a model of
# {glue:text}`ch4_inter_params` parameters ($D =$ {glue:text}`ch4_inter_D`), kipply adds up
# the memory-bound operations to a share of the step time. Their time grows like $D$ with the
# width, the matmuls' like $D^2$, so the share shrinks for a wider model:

# %% [markdown] tags=["lang-zh"]
# 宽度从 {glue:text}`ch4_width_small` 增加到 {glue:text}`ch4_width_big`，逐元素部分的占比从 {glue:text}`ch4_rest_small` 降到
# {glue:text}`ch4_rest_big`；到了 52B 模型的宽度，*就 FLOPs 而言*它可以忽略不计。就时间而言，则是
# 另一回事。
#
# ## 中间结果的内存代价
#
# 逐元素操作（偏置、激活函数、dropout）和归一化（softmax、layernorm）的 FLOPs 很少，但每一个都要读写
# 它的全部输入：在 GPU 上它们是内存受限的，无论 FLOPs 多么少，耗时都是字节数除以带宽。不做融合的话，
# 一个 softmax 可能要扫过内存四遍，而本来一读一写就够了；这些操作花多少时间，更多取决于软件——内核
# 融合——而不是计算。根据 {cite:t}`ivanov2021datamovement` 在一个参数量为
# {glue:text}`ch4_inter_params`（$D =$ {glue:text}`ch4_inter_D`）的模型上的测量，kipply 把内存受限的
# 操作加总，算出它们在一步时间中所占的份额。它们的时间随宽度按 $D$ 增长，矩阵乘法的时间按 $D^2$
# 增长，所以模型越宽，这个份额越小：

# %%
show_source(latency.intermediate_share_at_width)

# %%
inter = assumptions["intermediate_share"]
scaled = latency.intermediate_share_at_width(inter["share"], inter["d_model"], m52.D)
hers = latency.intermediate_share_approx(inter["share"], inter["d_model"], m52.D)
assert hers < scaled < inter["share"]

# %% tags=["hide-input"]
glue("ch4_inter_params", fmt_count(inter["params"], 0))
glue("ch4_inter_D", f"{inter['d_model']:,}")
glue("ch4_inter_share", fmt_percent(inter["share"]))
glue("ch4_inter_scaled", fmt_percent(scaled, 1))
glue("ch4_inter_hers", fmt_percent(hers, 1))

# %% [markdown]
# At {glue:text}`ch4_inter_share` of the step at that width, the memory-bound operations would
# take {glue:text}`ch4_inter_scaled` of a step of the 52B model with the same optimisations.
# (kipply's shortcut, dividing by the matmul time as if it had been the whole step, gives
# {glue:text}`ch4_inter_hers`.) Not zero, and that is one reason measured latencies sit above
# the roofline.
#
# ## Against real benchmarks
#
# kipply ran her 13B model with NVIDIA's FasterTransformer on one and on two A100s, at batch
# {glue:text}`ch4_ft_batch` with a context of {glue:text}`ch4_ft_context` tokens and
# {glue:text}`ch4_ft_new` new tokens. Her measurements are kept in
# `book/data/kipply_fastertransformer.csv`, each row naming its source. The per-token time
# follows from the total and the context time:

# %% [markdown] tags=["lang-zh"]
# 如果在那个宽度下它们占一步的 {glue:text}`ch4_inter_share`，那么在同样的优化下，这些内存受限的操作会
# 占 52B 模型一步的 {glue:text}`ch4_inter_scaled`。（kipply 的捷径是除以矩阵乘法的时间，仿佛那就是
# 整步的时间，这样得到 {glue:text}`ch4_inter_hers`。）不是零，这也是实测延迟高于屋顶线的原因之一。
#
# ## 对照真实的基准测试
#
# kipply 用 NVIDIA 的 FasterTransformer 在一块和两块 A100 上运行她的 13B 模型，批次中有
# {glue:text}`ch4_ft_batch` 个序列，上下文 {glue:text}`ch4_ft_context` 个词元，生成
# {glue:text}`ch4_ft_new` 个新词元。她的测量保存在 `book/data/kipply_fastertransformer.csv` 中，每一行
# 都注明了出处。每个新词元的时间由总时间和上下文时间得出：

# %%
runs = bookdata.load("kipply_fastertransformer.csv")
assert len({(r["batch"], r["context_tokens"], r["new_tokens"]) for r in runs}) == 1
assert all((r["model_layers"], r["d_model"], r["model_heads"], r["head_dim"])
           == (m13.L, m13.D, m13.N, m13.H) for r in runs)
for r in runs:
    r["ms_per_token"] = (r["total_ms"] - r["context_ms"]) / r["new_tokens"]
    assert abs(r["ms_per_token"] - r["reported_ms_per_token"]) < 0.05   # her rounded figures

# %% tags=["hide-input"]
glue("ch4_ft_batch", str(runs[0]["batch"]))
glue("ch4_ft_context", str(runs[0]["context_tokens"]))
glue("ch4_ft_new", str(runs[0]["new_tokens"]))
Markdown("| A100s | total (ms) | context (ms) | per new token (ms) | source |\n|---:|---:|---:|---:|---|\n"
         + "\n".join(f"| {r['gpus']} | {r['total_ms']} | {r['context_ms']} | "
                     f"{r['ms_per_token']:.2f} | {r['source']} |" for r in runs))

# %% [markdown]
# Our floors: a decode step loads the weights, $2P/(N A_{bm})$, plus $4L$ message latencies on
# two GPUs; the context pass over $T$ tokens is FLOP-bound, $2 P T / (N A_f)$. kipply then
# accounts for the gap with numbers read off her profiles, which
# `book/data/kipply_assumptions.json` keeps beside their source.

# %% [markdown] tags=["lang-zh"]
# 我们的下限：一个解码步骤载入权重，$2P/(N A_{bm})$，在两块 GPU 上再加 $4L$ 次消息延迟；对 $T$ 个
# 词元的上下文处理是计算受限的，$2 P T / (N A_f)$。kipply 接着用从她的性能剖析中读出的数字来解释其中
# 的差距，`book/data/kipply_assumptions.json` 把这些数字和它们的出处保存在一起。

# %%
profile = assumptions["profile_13b"]
lo, hi = profile["comm_us_per_layer"]
assert 4 * a100.hop_latency_s * 1e6 < lo
pred = {}
for r in runs:
    n = r["gpus"]
    floor = latency.small_batch_cost(m13, a100, n)
    share = profile["bandwidth_share"][str(n)]
    refined = work_time(floor, a100, n) / share \
        + profile["intermediate_activations_ms"][str(n)] / 1e3 + floor.comm_s
    context = 2 * counts.param_count(m13) * r["context_tokens"] / (n * a100.bf16_flops_per_s)
    assert context >= counts.param_bytes(m13) / (n * a100.hbm_bytes_per_s)   # FLOP-bound
    pred[n] = dict(floor=step_time(floor, a100, n), refined=refined, context=context,
                   measured=r["ms_per_token"] / 1e3, context_measured=r["context_ms"] / 1e3)
for n, p in pred.items():
    assert p["floor"] < p["refined"] < p["measured"]        # floors stay below measurement
    assert p["context"] < p["context_measured"]
    print(f"{n} A100: floor {fmt_seconds(p['floor'])}, with profile numbers "
          f"{fmt_seconds(p['refined'])}, measured {fmt_seconds(p['measured'])}; context floor "
          f"{fmt_seconds(p['context'])}, measured {fmt_seconds(p['context_measured'])}")
frac = {n: p["floor"] / p["measured"] for n, p in pred.items()}
assert frac[2] < frac[1]                  # two GPUs are further from their floor
assert abs(pred[1]["refined"] / pred[1]["measured"] - 1) < 0.1

# %% tags=["hide-input"]
glue("ch4_bw_share1", fmt_percent(profile["bandwidth_share"]["1"]))
glue("ch4_bw_share2", fmt_percent(profile["bandwidth_share"]["2"]))
glue("ch4_inter_ms1", fmt_seconds(profile["intermediate_activations_ms"]["1"] / 1e3))
glue("ch4_comm_prof", f"{lo}–{hi} µs")
glue("ch4_comm_est", fmt_seconds(4 * a100.hop_latency_s, 0))
glue("ch4_ft_floor1", fmt_seconds(pred[1]["floor"]))
glue("ch4_ft_floor2", fmt_seconds(pred[2]["floor"]))
glue("ch4_ft_frac1", fmt_percent(frac[1]))
glue("ch4_ft_frac2", fmt_percent(frac[2]))
glue("ch4_ft_ref1", fmt_seconds(pred[1]["refined"]))
glue("ch4_ft_ref2", fmt_seconds(pred[2]["refined"]))
glue("ch4_ft_ctx1", fmt_seconds(pred[1]["context"]))
glue("ch4_ft_ctx2", fmt_seconds(pred[2]["context"]))
glue("ch4_ft_comm2", fmt_seconds(latency.small_batch_cost(m13, a100, 2).comm_s, 2))

x = np.arange(len(pred))
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.8))
ax1.bar(x - 0.27, [pred[n]["floor"] * 1e3 for n in pred], 0.27, label="roofline floor (library)")
ax1.bar(x, [pred[n]["refined"] * 1e3 for n in pred], 0.27,
        label="floor with profile numbers (kipply)")
ax1.bar(x + 0.27, [pred[n]["measured"] * 1e3 for n in pred], 0.27, label="measured (kipply)")
ax1.set_xticks(x, [f"{n} × A100" for n in pred])
ax1.set_ylabel("ms per new token")
ax1.set_title("decode step, batch 1", fontsize=10)
ax1.legend(fontsize=7)
ax2.bar(x - 0.2, [pred[n]["context"] * 1e3 for n in pred], 0.4, label="FLOP-bound floor (library)")
ax2.bar(x + 0.2, [pred[n]["context_measured"] * 1e3 for n in pred], 0.4, label="measured (kipply)")
ax2.set_xticks(x, [f"{n} × A100" for n in pred])
ax2.set_ylabel("ms")
ax2.set_title("context pass, 512 tokens", fontsize=10)
ax2.legend(fontsize=7)
fig.suptitle(f"{m13.name} with FasterTransformer: measurements by Chen (2022) beside the "
             "library's prediction", fontsize=10)
fig.tight_layout()
glue_figure("ch4_fastertransformer_figure", fig, zh=[
    dict(title="解码步骤，批量大小 1", ylabel="每个新词元的时间（ms）",
         legend=["屋顶线下限（本库）", "加上剖析数据的下限（kipply）", "实测（kipply）"],
         suptitle=f"{m13.name} 在 FasterTransformer 上：Chen（2022）的实测与本库的预测"),
    dict(title="上下文处理，512 个词元", ylabel="时间（ms）",
         legend=["计算受限的下限（本库）", "实测（kipply）"])])

# %% [markdown]
# ```{glue:figure} ch4_fastertransformer_figure
# ```
#
# On one GPU the floor, {glue:text}`ch4_ft_floor1`, is {glue:text}`ch4_ft_frac1` of the
# measured time. Her profiles show the matmuls reaching {glue:text}`ch4_bw_share1` of the
# memory bandwidth, and the memory-bound intermediate operations taking
# {glue:text}`ch4_inter_ms1` per token; with those the estimate rises to
# {glue:text}`ch4_ft_ref1`, and the rest is small operations — the embedding lookup, top-k
# sampling, kernel launches. On two GPUs the floor ({glue:text}`ch4_ft_floor2`, including
# {glue:text}`ch4_ft_comm2` of message latency that nothing can overlap) is
# {glue:text}`ch4_ft_frac2` of the measurement: smaller tensors per GPU use the bandwidth less
# well ({glue:text}`ch4_bw_share2`), and with the profile's numbers the estimate reaches
# {glue:text}`ch4_ft_ref2`. The remainder fits her profile's communication time of
# {glue:text}`ch4_comm_prof` per layer, more than the {glue:text}`ch4_comm_est` that four
# messages of {glue:text}`ch4_hop` would take.
#
# The context pass misses by more. Its floor — {glue:text}`ch4_ft_ctx1` on one GPU,
# {glue:text}`ch4_ft_ctx2` on two — assumes the matmuls run at the A100's peak. The profile
# shows the big MLP matmul of the context pass reaching about three quarters of it and the attention
# projections about half:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch4_fastertransformer_figure
# ```
#
# 在一块 GPU 上，下限 {glue:text}`ch4_ft_floor1` 是实测时间的 {glue:text}`ch4_ft_frac1`。她的性能剖析
# 显示，矩阵乘法达到了内存带宽的 {glue:text}`ch4_bw_share1`，内存受限的中间操作每个词元耗时
# {glue:text}`ch4_inter_ms1`；算上这些，估算升到 {glue:text}`ch4_ft_ref1`，剩下的是些小操作——嵌入
# 查找、top-k 采样、内核启动。在两块 GPU 上，下限（{glue:text}`ch4_ft_floor2`，其中包括
# {glue:text}`ch4_ft_comm2` 无法与任何东西重叠的消息延迟）是实测的 {glue:text}`ch4_ft_frac2`：每块
# GPU 上的张量更小，带宽利用得更差（{glue:text}`ch4_bw_share2`），用上剖析中的数字，估算达到
# {glue:text}`ch4_ft_ref2`。剩下的部分与她剖析出的每层 {glue:text}`ch4_comm_prof` 通信时间相符，多于
# 四条各 {glue:text}`ch4_hop` 的消息所需的 {glue:text}`ch4_comm_est`。
#
# 上下文处理差得更多。它的下限——一块 GPU 上 {glue:text}`ch4_ft_ctx1`，两块上
# {glue:text}`ch4_ft_ctx2`——假设矩阵乘法以 A100 的峰值运行。剖析显示，上下文处理中那个大的 MLP
# 矩阵乘法大约达到峰值的四分之三，注意力的投影大约达到一半：

# %%
C = a100.bf16_flops_per_s
T_ctx = runs[0]["context_tokens"]
mlp_expected = roofline.matmul_flops(T_ctx, m13.D, m13.F) / C
proj_expected = roofline.matmul_flops(T_ctx, m13.D, m13.D) / C
mlp_eff = mlp_expected / (profile["mlp_matmul_us_512_tokens"] * 1e-6)
proj_eff = proj_expected / (profile["attention_projection_us_512_tokens"] * 1e-6)
assert 0.5 < proj_eff < mlp_eff < 1

# %% tags=["hide-input"]
glue("ch4_mlp_shape", f"[{T_ctx}, {m13.D}] · [{m13.D}, {m13.F}]")
glue("ch4_proj_shape", f"[{T_ctx}, {m13.D}] · [{m13.D}, {m13.D}]")
glue("ch4_mlp_expected", fmt_seconds(mlp_expected, 0))
glue("ch4_proj_expected", fmt_seconds(proj_expected, 0))
glue("ch4_mlp_eff", fmt_percent(mlp_eff))
glue("ch4_proj_eff", fmt_percent(proj_eff));

# %% [markdown]
# A {glue:text}`ch4_mlp_shape` product should take {glue:text}`ch4_mlp_expected` at peak and
# reached {glue:text}`ch4_mlp_eff` of it; the {glue:text}`ch4_proj_shape` projection, {glue:text}`ch4_proj_expected` at peak, reached {glue:text}`ch4_proj_eff`. Matmuls
# of these shapes simply do not reach an A100's peak — the same lesson chapter 2 draws on a CPU:
# a roofline is a floor, and the distance to it is specific to the kernels, the shapes and the
# device.
#
# ```{admonition} Takeaways
# - A step costs the larger of (bytes / bandwidth) and (FLOPs / peak). For weights the crossover
#   is the chip's FLOP-to-byte ratio in tokens per step — about two hundred on an A100 — whatever
#   the model.
# - Memory decides the batch: weights first, then whatever room is left for KV caches.
# - Tensor parallelism divides bytes and FLOPs by $N$ but adds $4L$ collectives per step; their
#   latency sets a floor that more GPUs cannot remove.
# - The estimates land within a factor of two of a tuned engine at batch 1, and the gap can be
#   accounted for: achieved bandwidth, memory-bound element-wise work, communication latency.
# ```

# %% [markdown] tags=["lang-zh"]
# 一个 {glue:text}`ch4_mlp_shape` 的乘积在峰值下应耗时 {glue:text}`ch4_mlp_expected`，实际达到了峰值的
# {glue:text}`ch4_mlp_eff`；{glue:text}`ch4_proj_shape` 的投影在峰值下应耗时
# {glue:text}`ch4_proj_expected`，实际达到 {glue:text}`ch4_proj_eff`。这些形状的矩阵乘法就是达不到
# A100 的峰值——这和第 2 章在 CPU 上得出的教训一样：屋顶线是一个下限，离它有多远，取决于具体的内核、
# 形状和设备。
#
# ```{admonition} 要点
# - 一步的代价是（字节 / 带宽）与（FLOPs / 峰值）中较大的那个。对权重而言，两者的交点是芯片的 FLOP
#   与字节之比，以每步的词元数计——在 A100 上大约两百——与模型无关。
# - 内存决定批次：先放权重，剩下的空间都留给 KV 缓存。
# - 张量并行把字节和 FLOPs 都除以 $N$，但每步增加 $4L$ 次集合通信；它们的延迟构成一个下限，再多的
#   GPU 也去不掉。
# - 批量大小为 1 时，估算值都在调校良好的引擎实测值的一半以上，而且差距可以一一解释：实际达到的
#   带宽、内存受限的逐元素工作、通信延迟。
# ```
