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
# # Decoding kernels
#
# Chapter 6 made prefill attention fast by tiling it. A decode step is a different problem.
# Each sequence brings *one* new query, which must read every key and value in its cache. The
# work per byte is tiny, so the step is bound by memory bandwidth — and reaching the bandwidth
# requires the whole chip to be reading at once, which FlashAttention's schedule does not
# arrange when there is one query per sequence. This chapter follows the fixes in the order
# the CIS 565 project {cite:p}`cis565llm2023` presents them: Flash-Decoding
# {cite:p}`dao2023flashdecoding` splits the cache across the chip, FlashDecoding++
# {cite:p}`hong2023flashdecodingpp` removes the synchronisation that splitting needs, and
# PagedAttention {cite:p}`kwon2023pagedattention` changes where the cache lives. Each comes with
# its implementation in the library, a check against the reference, and a measurement on your
# device; the project's own measurements close the chapter.

# %% [markdown] tags=["lang-zh"]
# # 解码内核
#
# 第 6 章通过分块让预填充的注意力变快了。解码步骤是另一个问题。每个序列只带来*一个*新查询，而它
# 必须读取缓存中的每一个键和值。每字节的工作量极少，所以这一步受限于内存带宽——而要达到带宽上限，
# 需要整块芯片同时读取；当每个序列只有一个查询时，FlashAttention 的调度安排不出这一点。本章按照
# CIS 565 项目 {cite:p}`cis565llm2023` 介绍的顺序讲解这些修正：Flash-Decoding
# {cite:p}`dao2023flashdecoding` 把缓存切分到整块芯片上，FlashDecoding++
# {cite:p}`hong2023flashdecodingpp` 去掉了切分所需的同步，PagedAttention
# {cite:p}`kwon2023pagedattention` 则改变了缓存存放的位置。每一种都配有库中的实现、与参考实现的
# 对照检验，以及在你的设备上的测量；本章最后是那个项目自己的测量结果。

# %%
import textwrap
from functools import partial

import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.kernels import flash_decoding, kernel_bench, paged
from inferbook.kernels.pallas import pallas_flash_decoding
from inferbook.model import decoder
from inferbook.model.attention import attend, attention_mask, reference_at_positions
from inferbook.model.presets import get_preset
from inferbook.perf import compiled, counts, read_roof, timing
from inferbook.perf.hardware import get_chip

print(info.describe())
DEVICE = timing.device_name()
on_chip = {c["chip"]: c for c in bookdata.load("gpu_on_chip.json")["chips"]}
reference = jax.jit(reference_at_positions, static_argnames=("window",))

# %% tags=["hide-input"]
from inferbook.book.chinese_numbers import to_chinese
from inferbook.book.claims import expect_measured
from inferbook.book.figures import glue_figure
from inferbook.book.present import (
    bilingual,
    fmt_bytes,
    fmt_count,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)

glue("ch7_device", DEVICE)

# %% [markdown]
# ## Why FlashAttention leaves the chip idle at decode
#
# One decode step of one sequence: a query per head, $N$ of them, against $S$ cached keys and
# values per KV head. The arithmetic is $4NSH$ FLOPs (scores and weighted sum); the memory
# traffic is the cache, $2KSH$ elements. With $G = N/K$ query heads per KV head and $b$ bytes
# per element, the intensity is $2G/b$ FLOPs per byte — a handful, for any model. Batching does
# not help: every sequence has its own cache.

# %% [markdown] tags=["lang-zh"]
# ## 为什么 FlashAttention 在解码时让芯片闲着
#
# 一个序列的一个解码步骤：每个头一个查询，共 $N$ 个，对着每个 KV 头的 $S$ 个缓存的键和值。计算量是
# $4NSH$ FLOPs（算分数，再按权重求和）；内存流量就是缓存，$2KSH$ 个元素。每个 KV 头对应
# $G = N/K$ 个查询头、每个元素 $b$ 字节时，强度为每字节 $2G/b$ FLOPs——对任何模型都只有寥寥几个。
# 批处理也帮不上忙：每个序列都有自己的缓存。

# %%
h100 = get_chip("H100 SXM")
ridge = h100.bf16_flops_per_s / h100.hbm_bytes_per_s
for name in ("llama-2-7b", "mistral-7b"):
    cfg = get_preset(name)
    decode_intensity = 2 * (cfg.N // cfg.K) / 2
    assert decode_intensity < ridge / 50
    print(f"{name}: {decode_intensity:.0f} FLOPs per byte of cache read (bfloat16); "
          f"an H100 needs {ridge:,.0f} to be compute-bound")

# %% tags=["hide-input"]
glue("ch7_h100_ridge", f"{ridge:,.0f}")

# %% [markdown]
# So decode attention runs at the speed the cache can be read, and reading at full bandwidth
# takes many SMs issuing loads at once; one SM alone can pull only a small share of the HBM
# bandwidth. Now count the work units. FlashAttention's grid is one program per
# (sequence, query head, query tile); at decode there is one query tile, so a batch of $B$
# gives $B \cdot N$ programs — or $B \cdot K$ if, as a decode kernel should, the $G$ query
# heads that share a KV head are handled together so that each key is read once. For a
# Mistral-7B-shaped model ($K =$ {glue:text}`ch7_mistral_K`) at batch 1 that is
# {glue:text}`ch7_mistral_K` programs:

# %% [markdown] tags=["lang-zh"]
# 所以解码注意力的速度就是读取缓存的速度，而要以满带宽读取，需要许多 SM 同时发出载入请求；单个 SM
# 只能拉动 HBM 带宽的一小部分。现在来数一数工作单元。FlashAttention 的网格是每个（序列，查询头，
# 查询分块）一个程序；解码时只有一个查询分块，所以 $B$ 个序列的批次给出 $B \cdot N$ 个程序——如果像
# 解码内核应该做的那样，把共享一个 KV 头的 $G$ 个查询头放在一起处理、让每个键只读一次，那就是
# $B \cdot K$ 个。对一个形状与 Mistral-7B 相同的模型（$K =$ {glue:text}`ch7_mistral_K`），批次中
# 只有一个序列时，这就是 {glue:text}`ch7_mistral_K` 个程序：

# %%
mistral = get_preset("mistral-7b")
P_fd = 32
batches = np.array([1, 2, 4, 8, 16, 32, 64])


def busy_fraction(programs, sms):
    """Share of SMs with a program to run (one wave)."""
    return np.minimum(1.0, programs / sms)


h100_sms = on_chip["H100 SXM"]["sms"]
busy_b1 = busy_fraction(mistral.K, h100_sms)
assert busy_b1 < 0.1 and busy_fraction(mistral.K * P_fd, h100_sms) == 1.0

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for chip_name, style in (("H100 SXM", "-"), ("L4", "--")):
    sms = on_chip[chip_name]["sms"]
    ax.plot(batches, busy_fraction(batches * mistral.K, sms), "o" + style,
            label=f"one program per (sequence, KV head) — {chip_name}, {sms} SMs")
    ax.plot(batches, busy_fraction(batches * mistral.K * P_fd, sms), "s" + style,
            label=f"Flash-Decoding, P = {P_fd} chunks — {chip_name}")
ax.set_xscale("log", base=2)
ax.set_xlabel("batch size B")
ax.set_ylabel("share of SMs with work")
ax.set_title("Decode attention for Mistral-7B (K = 8): the grid against the chip")
ax.legend(fontsize=7)
ax.grid(True, alpha=0.3)
glue_figure("ch7_busy_figure", fig, zh=dict(
    title=f"Mistral-7B 的解码注意力（K = {mistral.K}）：网格与芯片", xlabel="批量大小 B",
    ylabel="有活可干的 SM 所占比例",
    legend=[text for chip_name in ("H100 SXM", "L4") for text in (
        f"每个（序列，KV 头）一个程序——{chip_name}，{on_chip[chip_name]['sms']} 个 SM",
        f"Flash-Decoding，P = {P_fd} 个块——{chip_name}")]))
glue("ch7_busy_b1", fmt_percent(busy_b1)); glue("ch7_h100_sms", str(h100_sms))
glue("ch7_full_batch", str(int(np.ceil(h100_sms / mistral.K))))
glue("ch7_P", str(P_fd)); glue("ch7_mistral_K", str(mistral.K))

# %% [markdown]
# ```{glue:figure} ch7_busy_figure
# ```
#
# At batch 1 the H100's {glue:text}`ch7_h100_sms` SMs have {glue:text}`ch7_mistral_K`
# programs between them: {glue:text}`ch7_busy_b1` of the chip does all the reading. It takes
# a batch of {glue:text}`ch7_full_batch` before every SM has work — and long contexts, where
# attention matters most, are exactly where memory limits the batch to a few sequences.
#
# ## Flash-Decoding: split the cache
#
# The one long dimension left is the cache itself. Flash-Decoding cuts each sequence's cache
# into $P$ chunks of $S/P$ slots and gives every (sequence, KV head, chunk) its own program:
#
# 1. **split** — chunk $p$ is slots $pS/P \ldots (p+1)S/P - 1$: a view of the cache, nothing
#    moves;
# 2. **attend** — each program computes attention of its queries over its chunk alone, the
#    FlashAttention way, and writes its output $O_p$ and the log-sum-exp $\lambda_p$ of its
#    scores;
# 3. **combine** — a small reduction: $\lambda = \log \sum_p e^{\lambda_p}$ and
#    $O = \sum_p e^{\lambda_p - \lambda} O_p$.
#
# Step 3 is chapter 6's merging rule applied to $P$ parts at once: each chunk's output is
# normalised over its own keys, and $e^{\lambda_p - \lambda}$ is the share of the total
# softmax weight that its keys carry. In the library:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch7_busy_figure
# ```
#
# 批次中只有一个序列时，H100 的 {glue:text}`ch7_h100_sms` 个 SM 一共只分到
# {glue:text}`ch7_mistral_K` 个程序：全部读取工作由芯片的 {glue:text}`ch7_busy_b1` 完成。要等批次
# 达到 {glue:text}`ch7_full_batch` 个序列，每个 SM 才都有活干——而长上下文恰恰是注意力最要紧的地方，
# 也正是内存把批次限制在寥寥几个序列的地方。
#
# ## Flash-Decoding：切分缓存
#
# 剩下的唯一一个长维度，就是缓存本身。Flash-Decoding 把每个序列的缓存切成 $P$ 块，每块 $S/P$ 个
# 槽位，并给每个（序列，KV 头，块）分配一个自己的程序：
#
# 1. **切分**——第 $p$ 块是槽位 $pS/P \ldots (p+1)S/P - 1$：只是缓存的一个视图，什么都不用搬；
# 2. **计算注意力**——每个程序按 FlashAttention 的方式，只在自己那一块上计算它的查询的注意力，写出
#    输出 $O_p$ 以及分数的 LSE（指数和的对数）$\lambda_p$；
# 3. **合并**——一次小小的归约：$\lambda = \log \sum_p e^{\lambda_p}$，
#    $O = \sum_p e^{\lambda_p - \lambda} O_p$。
#
# 第 3 步就是第 6 章的合并规则，一次用在 $P$ 个部分上：每块的输出只在它自己的键上归一化，而
# $e^{\lambda_p - \lambda}$ 是它的键在 softmax 总权重中所占的份额。库中的实现：

# %%
show_source(flash_decoding.combine_chunks, flash_decoding.flash_decoding)

# %% [markdown]
# Checked against the reference on a decode step for a ragged batch with grouped-query heads,
# for several numbers of chunks — including chunks that lie entirely beyond a short sequence's
# length, which must contribute nothing:

# %% [markdown] tags=["lang-zh"]
# 在一个带分组查询头的参差批次的解码步骤上，用几种不同的块数与参考实现对照检验——其中包括完全落在
# 短序列长度之外的块，它们必须毫无贡献：

# %%
B, N, K, H, S = 3, 8, 2, 32, 512
keys = jax.random.split(jax.random.key(0), 3)
q = jax.random.normal(keys[0], (B, 1, N, H))
k_cache, v_cache = (jax.random.normal(kk, (B, K, S, H)) for kk in keys[1:])
lengths = jnp.array([512, 300, 17])
q_pos = lengths[:, None] - 1
ref_out, ref_lse = reference(q, k_cache, v_cache, q_pos, lengths)
split = jax.jit(flash_decoding.flash_decoding, static_argnames=("num_splits", "window"))
for P in (8, 64):
    out, lse = split(q, k_cache, v_cache, q_pos, lengths, num_splits=P)
    assert jnp.allclose(out, ref_out, atol=1e-5) and jnp.allclose(lse, ref_lse, atol=1e-5)
print("split-KV attention equals the reference for every P")

# The Pallas kernel: grid (B, K, P), one program per sequence, KV head and chunk.
for P in (1, 4):
    out, lse = pallas_flash_decoding(q, k_cache, v_cache, q_pos, lengths, num_splits=P,
                                     block_k=32)
    assert jnp.allclose(out, ref_out, atol=1e-5) and jnp.allclose(lse, ref_lse, atol=1e-5)
print(f"Pallas Flash-Decoding (interpreted: {jax.default_backend() == 'cpu'}) equals the reference")

# %% tags=["hide-input"]
glue("ch7_pallas_grid", f"{B} × {K} × 4")

# %% [markdown]
# The library's Pallas version (`inferbook.kernels.pallas.pallas_flash_decoding`) has exactly
# this grid — {glue:text}`ch7_pallas_grid` programs above — and each program loads its
# queries once and walks its chunk in tiles; with `num_splits=1` it is the unsplit kernel, one
# program per (sequence, KV head). On a CPU it runs in Pallas' interpreter, which is how the
# tests check it; on a GPU, Triton compiles it.
#
# ## Measured on this device
#
# Decode attention for one sequence of a Mistral-7B-shaped layer ($N = 32$, $K = 8$,
# $H = 128$, float32), against context length: XLA's unsplit reference against the split
# version, and the bytes of cache each step reads against this device's read roof (the fastest
# of several read kernels, `inferbook.perf.read_roof`). At each length the two versions take
# turns after a warm-up, so that whatever else runs on the machine slows both alike, and each
# time is the median of {glue:text}`ch7_rounds` runs.

# %% [markdown] tags=["lang-zh"]
# 库中的 Pallas 版本（`inferbook.kernels.pallas.pallas_flash_decoding`）正是这种网格——上面共
# {glue:text}`ch7_pallas_grid` 个程序——每个程序把它的查询载入一次，再分块遍历自己那一块缓存；
# `num_splits=1` 时它就是不切分的内核，每个（序列，KV 头）一个程序。在 CPU 上它运行在 Pallas 的
# 解释器里，测试就是这样检查它的；在 GPU 上由 Triton 编译。
#
# ## 在这台设备上测量
#
# 对一个形状与 Mistral-7B 相同的层（$N = 32$，$K = 8$，$H = 128$，float32）中的一个序列，测量解码
# 注意力随上下文长度的变化：XLA 不切分的参考实现对比切分版本，每一步读取的缓存字节数对比这台设备
# 的读取屋顶（几个读取内核中最快的那个，`inferbook.perf.read_roof`）。在每个长度上，两个版本在预热之后
# 轮流运行，让机器上的其他活动对两者的影响相同；每个时间都是 {glue:text}`ch7_rounds` 次运行的中位数。

# %%
contexts = [2048, 8192, 32768]
Nm, Km, Hm = mistral.N, mistral.K, mistral.H
kernels = {"unsplit (reference)": reference_at_positions,
           f"split, P = {P_fd}": partial(flash_decoding.flash_decoding, num_splits=P_fd)}
jitted = {name: jax.jit(lambda *a, f=fn: f(*a)[0]) for name, fn in kernels.items()}
inputs = {S_: kernel_bench.attention_inputs(1, 1, S_, Nm, Km, Hm, "float32") for S_ in contexts}
# At each length the two versions take turns, so that whatever else runs on the machine slows
# both alike; each time is a median. The roof is the best read roof measured between them.
TIMED_RUNS = 9
times = {name: {} for name in kernels}
read_bw = 0.0
for S_ in contexts:
    runs = timing.time_alternating([partial(fn, *inputs[S_]) for fn in jitted.values()],
                                   rounds=TIMED_RUNS, warmup=1)
    for name, t in zip(jitted, runs):
        times[name][S_] = t.median_s
    read_bw = max(read_bw, read_roof.measure_read_roof(1 << 28, repeats=3).best)
glue("ch7_rounds", str(TIMED_RUNS))
del inputs
kv_bytes = {S_: 2 * Km * S_ * Hm * 4 for S_ in contexts}
achieved = {name: {S_: kv_bytes[S_] / t for S_, t in ts.items()} for name, ts in times.items()}

longest = contexts[-1]
unsplit_name, split_name = list(kernels)
frac = achieved[unsplit_name][longest] / read_bw
ratio = times[split_name][longest] / times[unsplit_name][longest]
# At long contexts a decode step is a read of the cache: time grows with S, and the step
# streams the cache at a sizeable part of the device's read bandwidth. The claims' bounds,
# glued into the sentences that state them (the floor on bandwidth holds while other
# programs share the machine):
growth = times[unsplit_name][contexts[-1]] / times[unsplit_name][contexts[-2]]
GROWTH_LOW, GROWTH_HIGH = 2, 10     # for a cache 4x longer
FRAC_FLOOR = 0.1                    # of the read roof
SPLIT_FACTOR = 2                    # split against unsplit, either way

# %% tags=["hide-input"]
for S_ in contexts:
    print(f"S={S_:6d}: cache {fmt_bytes(kv_bytes[S_]):>9s}  " + "  ".join(
        f"{name}: {fmt_seconds(times[name][S_])} ({fmt_rate(achieved[name][S_])})"
        for name in kernels))
print(f"read roof: {fmt_rate(read_bw)} ({DEVICE})")
span = f"{contexts[-1]:,} cached tokens take"
expect_measured(GROWTH_LOW < growth < GROWTH_HIGH, f"a decode step over a long cache grows with "
                f"the cache: {span} {fmt_ratio(GROWTH_LOW, 0)} to {fmt_ratio(GROWTH_HIGH, 0)} "
                f"the time of {contexts[-2]:,}", expected=f"between {fmt_ratio(GROWTH_LOW, 0)} "
                f"and {fmt_ratio(GROWTH_HIGH, 0)}", measured=fmt_ratio(growth))
expect_measured(frac > FRAC_FLOOR, "the step streams the cache at over "
                f"{fmt_percent(FRAC_FLOOR)} of the read roof",
                expected=f"over {fmt_percent(FRAC_FLOOR)}", measured=fmt_percent(frac))
# On a CPU there are no idle SMs to recruit: splitting changes little.
if info.platform == "cpu":
    # Within a factor of SPLIT_FACTOR either way: |log ratio| < log SPLIT_FACTOR.
    expect_measured(abs(np.log(ratio)) < np.log(SPLIT_FACTOR), "on a CPU, splitting the cache "
                    f"changes the step's time by less than a factor of {SPLIT_FACTOR}",
                    expected=f"split time between 1/{SPLIT_FACTOR} and {SPLIT_FACTOR}× the "
                    "unsplit", measured=fmt_ratio(ratio, 2))
glue("ch7_growth", fmt_ratio(growth)); glue("ch7_growth_low", fmt_ratio(GROWTH_LOW, 0))
glue("ch7_growth_high", fmt_ratio(GROWTH_HIGH, 0)); glue("ch7_frac_floor", fmt_percent(FRAC_FLOOR))
glue("ch7_split_factor", str(SPLIT_FACTOR)); glue("ch7_shorter", f"{contexts[-2]:,}")
glue("ch7_cache_factor", fmt_ratio(contexts[-1] / contexts[-2], 0))
glue("ch7_frac", fmt_percent(frac)); glue("ch7_read_bw", fmt_rate(read_bw))
glue("ch7_split_ratio", fmt_ratio(ratio, 2)); glue("ch7_longest", f"{longest:,}")
glue("ch7_kv_longest", fmt_bytes(kv_bytes[longest]))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
for name in kernels:
    ax1.loglog(contexts, [times[name][s] * 1e3 for s in contexts], "o-", label=name)
    ax2.semilogx(contexts, [achieved[name][s] / 1e9 for s in contexts], "o-", label=name)
ax2.axhline(read_bw / 1e9, color="k", ls=":", label="read roof")
ax1.set_xlabel("context length S"); ax1.set_ylabel("decode attention time (ms)")
ax2.set_xlabel("context length S"); ax2.set_ylabel("cache bytes read / time (GB/s)")
for ax in (ax1, ax2):
    ax.set_title(f"Measured on {DEVICE}", fontsize=9)
    ax.set_xticks(contexts, [f"{c:,}" for c in contexts])
    ax.minorticks_off()
    ax.legend(fontsize=8); ax.grid(True, alpha=0.3)
ax2.set_ylim(bottom=0)
plt.tight_layout()
kernels_zh = ["不切分（参考实现）", f"切分，P = {P_fd}"]
glue_figure("ch7_measured_figure", fig, zh=[
    dict(title=f"在 {DEVICE} 上测得", xlabel="上下文长度 S", ylabel="解码注意力的时间（ms）",
         legend=kernels_zh),
    dict(title=f"在 {DEVICE} 上测得", xlabel="上下文长度 S", ylabel="读取的缓存字节数 / 时间（GB/s）",
         legend=kernels_zh + ["读取屋顶"])])

# %% [markdown]
# ```{glue:figure} ch7_measured_figure
# ```
#
# At {glue:text}`ch7_longest` tokens the step reads {glue:text}`ch7_kv_longest` of cache at
# {glue:text}`ch7_frac` of this device's read roof, {glue:text}`ch7_read_bw` (the chapter
# checks over {glue:text}`ch7_frac_floor`): decode attention is a pass over the cache, and its
# time grows with the context — {glue:text}`ch7_growth` from {glue:text}`ch7_shorter` tokens
# to {glue:text}`ch7_longest`, a cache {glue:text}`ch7_cache_factor` as long (checked to lie between
# {glue:text}`ch7_growth_low` and {glue:text}`ch7_growth_high`). The split version takes
# {glue:text}`ch7_split_ratio` the time of the unsplit one here, less than a factor of
# {glue:text}`ch7_split_factor` either way as the chapter checks. That is the expected result on
# a CPU: XLA already spreads the one long matrix–vector product over all cores, so there is no
# idle hardware for the split to recruit. Flash-Decoding is a fix for a GPU's grid, and its
# gains must be measured on one.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch7_measured_figure
# ```
#
# 在 {glue:text}`ch7_longest` 个词元（token）时，这一步读取 {glue:text}`ch7_kv_longest` 的缓存，速度是这台
# 设备读取屋顶 {glue:text}`ch7_read_bw` 的 {glue:text}`ch7_frac`（本章检验它高于
# {glue:text}`ch7_frac_floor`）：解码注意力就是把缓存过一遍，它的时间随上下文增长——从
# {glue:text}`ch7_shorter` 个词元到 {glue:text}`ch7_longest` 个，缓存长度是原来的
# {glue:text}`ch7_cache_factor`，时间是原来的 {glue:text}`ch7_growth`（检验它在 {glue:text}`ch7_growth_low` 与 {glue:text}`ch7_growth_high` 之间）。
# 在这里，切分版本的用时是不切分版本的 {glue:text}`ch7_split_ratio`，如本章所检验，无论哪个方向都不到
# {glue:text}`ch7_split_factor` 倍。这在 CPU 上
# 是意料之中的结果：XLA 已经把那一个长长的矩阵–向量乘积分摊到所有核心上，没有闲置的硬件可供切分去
# 调动。Flash-Decoding 修正的是 GPU 的网格，它的收益必须在 GPU 上测量。

# %% tags=["hide-input"]
# Recorded runs are listed in an index file, fetched by name: on Colab only the files asked
# for by name are downloaded, so listing a folder would never see a new record.
gpu_records = bookdata.records("flash_decoding_index.json")
if not gpu_records:
    print("No GPU record in book/data. On a GPU, run\n"
          "  python -m inferbook.cli.kernel_bench --out book/data/flash_decoding_<device>.json\n"
          "  python -m inferbook.book.bookdata reindex\n"
          "and this cell plots it.")


def kernel_of(rows, prefix):
    """The name of the recorded kernel whose name starts with `prefix`."""
    return next(r["kernel"] for r in rows if r["kernel"].startswith(prefix))


def gpu_findings(record):
    """What one recorded sweep shows, at its longest context: the split Pallas kernel against
    the unsplit one and against XLA, how many programs the unsplit one runs for how many
    SMs, and the bandwidth each added byte of cache was read at (bytes added over time
    added between the two longest contexts) beside the average."""
    rows = record["rows"]
    fd, unsplit = kernel_of(rows, "Flash-Decoding"), kernel_of(rows, "unsplit (Pallas")
    xla = kernel_of(rows, "unsplit (XLA")
    at = {(r["kernel"], r["S"]): r for r in rows}
    S2, S1 = sorted({r["S"] for r in rows})[-2:]
    first = at[fd, S1]
    slope = ((at[fd, S1]["kv_bytes"] - at[fd, S2]["kv_bytes"])
             / (at[fd, S1]["seconds"] - at[fd, S2]["seconds"]))
    return dict(S=S1, B=first["B"], K=first["K"], programs=first["B"] * first["K"],
                sms=on_chip.get(record["chip"], {}).get("sms"), kv=first["kv_bytes"],
                t_fd=first["seconds"], t_unsplit=at[unsplit, S1]["seconds"],
                t_xla=at[xla, S1]["seconds"], hbm=first["hbm_fraction"], slope=slope,
                fixed=at[fd, S1]["seconds"] - first["kv_bytes"] / slope)


for record in gpu_records:
    rows = record["rows"]
    for r in rows:                                   # the file's bytes are the cache's bytes
        itemsize = jnp.dtype(r["dtype"]).itemsize
        assert r["kv_bytes"] == 2 * r["B"] * r["K"] * r["S"] * r["H"] * itemsize
    names = sorted({r["kernel"] for r in rows})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in names:
        mine = sorted((r["S"], r) for r in rows if r["kernel"] == name)
        ax1.loglog([s for s, _ in mine], [r["seconds"] * 1e6 for _, r in mine], "o-", label=name)
        if mine[0][1]["hbm_fraction"] is not None:
            ax2.semilogx([s for s, _ in mine], [100 * r["hbm_fraction"] for _, r in mine], "o-",
                         label=name)
    # Labels in symbols and units only: a recorded run appears in both editions, and this
    # figure exists only when one does, so it has no glued name for prose to show per language.
    ax1.set_xlabel("$S$"); ax1.set_ylabel("$t$ (µs)")
    ax2.set_xlabel("$S$"); ax2.set_ylabel("HBM %")
    b = rows[0]
    for ax in (ax1, ax2):
        ax.set_title(f"{record['device']}, B={b['B']} N={b['N']} K={b['K']} H={b['H']}, "
                     f"jax {record['jax_version']}, {record['date']}", fontsize=8)
        ax.legend(fontsize=7); ax.grid(True, which="both", alpha=0.3)
    plt.tight_layout()
    plt.show()


def gpu_sentence(record):
    f = gpu_findings(record)
    sm_en = f" for the GPU's {f['sms']} SMs" if f["sms"] else ""
    sm_zh = f"，而它有 {f['sms']} 个 SM" if f["sms"] else ""
    values = dict(dev=record["device"], jax=record["jax_version"], S=f"{f['S']:,}", B=f["B"],
                  kv=fmt_bytes(f["kv"]), fd=fmt_seconds(f["t_fd"]),
                  un=fmt_seconds(f["t_unsplit"]), xla=fmt_seconds(f["t_xla"]),
                  speedup=fmt_ratio(f["t_unsplit"] / f["t_fd"]),
                  vs_xla=fmt_ratio(f["t_xla"] / f["t_fd"], 2), programs=f["programs"],
                  hbm=fmt_percent(f["hbm"]), slope=fmt_rate(f["slope"]),
                  fixed=fmt_seconds(f["fixed"]))
    # Faster or slower: at a batch whose grid already fills the SMs, splitting may not pay.
    faster = f["t_unsplit"] >= f["t_fd"]
    values |= dict(than_un="faster than" if faster else "slower than",
                   than_xla="faster than" if f["t_xla"] >= f["t_fd"] else "slower than")
    values["speedup"] = fmt_ratio(max(f["t_unsplit"], f["t_fd"]) / min(f["t_unsplit"], f["t_fd"]))
    values["vs_xla"] = fmt_ratio(max(f["t_xla"], f["t_fd"]) / min(f["t_xla"], f["t_fd"]), 2)
    zh_values = {k: to_chinese(str(v)) for k, v in values.items()}
    zh_values |= dict(than_un="快" if faster else "慢",
                      than_xla="快" if f["t_xla"] >= f["t_fd"] else "慢")
    # A fixed cost under a twentieth of the step (or none, within the noise of a fit through
    # two points) leaves the kernel reading at the rate its added bytes show: bandwidth-bound.
    if f["fixed"] > 0.05 * f["t_fd"]:
        tail_en = ("so about {fixed} of the step is a cost that does not grow with the cache "
                   "— launches and synchronisation that a cache of this size is too small to "
                   "hide").format(**values)
        tail_zh = ("所以这一步中约有 {fixed} 是不随缓存增长的开销——内核启动和同步，这样大小的"
                   "缓存掩盖不了它们").format(**zh_values)
    else:
        tail_en = ("so almost none of the step is a fixed cost: at this batch the cache is "
                   "large enough that decode attention is bandwidth-bound")
        tail_zh = "所以这一步几乎没有固定开销：在这个批次下缓存足够大，解码注意力受带宽限制"
    return (
        "On {dev} (jax {jax}), at batch {B} and S = {S} ({kv} of cache), Pallas "
        "Flash-Decoding took {fd}: {speedup} {than_un} the same kernel unsplit ({un}), "
        "whose grid has {programs} programs{sm}, and {vs_xla} {than_xla} XLA's attention "
        "({xla}). It read the cache at {hbm} of the HBM bandwidth on the datasheet: "
        "between the two longest contexts each added byte was read at {slope}, "
        "{tail}".format(sm=sm_en, tail=tail_en, **values),
        "在 {dev}（jax {jax}）上，批次为 {B}、S = {S}（缓存 {kv}）时，Pallas Flash-Decoding "
           "用时 {fd}：比同一个内核不切分时（{un}）{than_un} {speedup}——不切分时网格有 {programs} "
           "个程序{sm}——比 XLA 的注意力（{xla}）{than_xla} {vs_xla}。它读取缓存的速度是"
           "数据手册上 HBM 带宽的 {hbm}：在最长的两个上下文之间，每多出的一个字节以 {slope} 的"
           "速度读取，{tail}".format(sm=sm_zh, tail=tail_zh, **zh_values))


sentences = [gpu_sentence(r) for r in gpu_records]
glue("ch7_gpu_note", bilingual(". ".join(en for en, _ in sentences), zh="。".join(
    zh for _, zh in sentences)) if sentences else bilingual(
    "No GPU measurement has been recorded in the book's data yet",
    zh="本书的数据中还没有记录任何 GPU 测量"))

# %% [markdown]
# {glue:text}`ch7_gpu_note`. The figures above, when a GPU run is on record, are that sweep —
# Pallas Flash-Decoding split and unsplit, and XLA's attention, recorded by
# `python -m inferbook.cli.kernel_bench` with the device, date and versions: decode
# attention's time $t$ against the context $S$, and the share of HBM bandwidth it reads at.
# Splitting is what lets one sequence use the whole GPU; what remains between it and the
# datasheet is the fixed cost of a step, which a larger batch or more heads share.

# %% [markdown] tags=["lang-zh"]
# {glue:text}`ch7_gpu_note`。有 GPU 运行的记录时，上面的图就是那一组扫描——Pallas
# Flash-Decoding 的切分与不切分版本，以及 XLA 的注意力——由 `python -m inferbook.cli.kernel_bench`
# 连同设备、日期和版本一起记录下来：解码注意力的用时 $t$ 随上下文 $S$ 的变化，以及它读取缓存时
# 达到的 HBM 带宽占比。切分让一个序列也能用上整块 GPU；它与数据手册之间剩下的差距，是一步的固定
# 开销，更大的批次或更多的头可以分摊它。

# %% [markdown]
# ## FlashDecoding++: one maximum for everyone
#
# Splitting has a cost of its own. Every chunk subtracts *its own* maximum before
# exponentiating, so the partial results are on different scales, and the combine must read
# every chunk's maximum (or log-sum-exp) before it can rescale anything: a synchronisation
# across programs that the FlashDecoding++ authors measured at a noticeable fraction of the
# attention time. Their observation: softmax is unchanged by subtracting *any* constant, and
# for a given model the scores fall in a predictable range. Pick one number $\varphi$ for the
# model in advance, let every chunk compute $e^{x - \varphi}$, and the partial sums simply
# add:
#
# $$O = \frac{\sum_p \sum_{j \in p} e^{x_j - \varphi} v_j}{\sum_p \sum_{j \in p} e^{x_j - \varphi}} .$$
#
# The risk is numerical. If a score lies far above $\varphi$, $e^{x - \varphi}$ overflows; if
# every score of a row lies far below it, the row's weights underflow and its sum loses its
# precision. So each chunk checks, for each of its rows, that the largest score is within
# $[\varphi + a, \varphi + b]$ — a local test, no communication — and if any row fails, the
# step is recomputed with per-chunk maxima. The answer is always exact; the speed depends on
# how rarely the fallback runs.

# %% [markdown] tags=["lang-zh"]
# ## FlashDecoding++：所有块共用一个最大值
#
# 切分也有它自己的代价。每一块在求指数之前都减去*它自己的*最大值，所以各部分结果的尺度各不相同，
# 合并时必须先读到每一块的最大值（或 LSE），才能重新缩放任何东西：这是一次跨程序的同步，
# FlashDecoding++ 的作者测得它占去注意力时间中相当可观的一部分。他们的观察是：softmax 减去*任意*
# 常数都不变，而对一个给定的模型，分数落在一个可以预测的范围内。事先为模型选定一个数 $\varphi$，
# 让每一块都计算 $e^{x - \varphi}$，各部分的和直接相加即可：
#
# $$O = \frac{\sum_p \sum_{j \in p} e^{x_j - \varphi} v_j}{\sum_p \sum_{j \in p} e^{x_j - \varphi}} .$$
#
# 风险在于数值。如果某个分数远高于 $\varphi$，$e^{x - \varphi}$ 就会溢出；如果一行的所有分数都远低于
# 它，这一行的权重就会下溢，它们的和也会失去精度。所以每一块都为自己的每一行检查最大分数是否落在
# $[\varphi + a, \varphi + b]$ 之内——这是局部的检查，不需要通信——只要有任何一行不满足，这一步就
# 改用每块各自的最大值重新计算。答案总是精确的；速度则取决于回退路径多久才运行一次。

# %%
show_source(flash_decoding.unified_max_attention)

# %% [markdown]
# How rarely depends on the model: $\varphi$, $a$ and $b$ must suit the distribution of its
# scores. FlashDecoding++ computes in float16, where the range is narrow: a chunk of $C$
# weights of at most $e^b$ must sum below float16's largest value, and weights below its
# smallest normal number lose precision. We take those bounds for chunks of
# {glue:text}`ch7_C` keys and look at the scores of the library's `small` model on random
# tokens, and of the same model with its queries multiplied by {glue:text}`ch7_q_scale` — a
# stand-in for a trained model whose attention is much more peaked than random weights make
# it.

# %% [markdown] tags=["lang-zh"]
# 回退路径多久运行一次，取决于模型：$\varphi$、$a$ 和 $b$ 必须适合它的分数分布。FlashDecoding++
# 用 float16 计算，它的范围很窄：一块中 $C$ 个至多为 $e^b$ 的权重，加起来必须小于 float16 的最大值；
# 而小于其最小正规数的权重会失去精度。我们按每块 {glue:text}`ch7_C` 个键取这两个界，考察库中
# `small` 模型在随机词元上的分数，以及同一个模型把查询乘以 {glue:text}`ch7_q_scale` 之后的分数——
# 后者代表一个训练过的模型，它的注意力比随机权重给出的要尖锐得多。

# %%
f16 = np.finfo(np.float16)
C_fdpp = 64
a_lo, b_hi = float(np.log(f16.smallest_normal)), float(np.log(float(f16.max) / C_fdpp))
small_cfg = get_preset("small")
small_params = decoder.init_params(small_cfg, seed=0)


@jax.jit
def layer_qkv(params, tokens_BT):
    """Every layer's rotated queries and this step's keys and values, from a forward pass."""
    B_, T_ = tokens_BT.shape
    pos = jnp.broadcast_to(jnp.arange(T_), (B_, T_))
    mask = attention_mask(pos, jnp.arange(T_), jnp.full((B_,), T_))
    got = []

    def capture(i, q_BTNH, k_BTKH, v_BTKH):
        got.append((q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2)))
        return attend(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2), mask)

    decoder.transformer(params, small_cfg, tokens_BT, pos, capture)
    return got


def row_maxima(q_BTNH, k_BKSH, q_pos_BT=None):
    """The largest visible score of every query row (by default a causal prefill)."""
    B_, T_ = q_BTNH.shape[:2]
    S_ = k_BKSH.shape[2]
    if q_pos_BT is None:
        q_pos_BT = jnp.broadcast_to(jnp.arange(T_), (B_, T_))
    s = flash_decoding.chunk_scores(q_BTNH, k_BKSH, q_pos_BT, jnp.full((B_,), S_), 1)
    return np.asarray(s.max(axis=(2, 4))).ravel()


rng = np.random.default_rng(0)
calib, held_out = (jnp.asarray(rng.integers(0, small_cfg.V, (4, 256)), jnp.int32) for _ in range(2))
q_scale = 4.0
models = {"small (random weights)": 1.0, f"small, queries × {q_scale:.0f} (peaked)": q_scale}
phi, in_range, maxima = {}, {}, {}
for name, scale in models.items():
    cal = np.concatenate([row_maxima(q * scale, k) for q, k, _ in layer_qkv(small_params, calib)])
    grid = np.linspace(cal.min() - b_hi, cal.max() - a_lo, 400)
    cover = [np.mean((cal - g >= a_lo) & (cal - g <= b_hi)) for g in grid]
    best = np.flatnonzero(np.isclose(cover, max(cover)))   # calibrated offline, once per
    phi[name] = float(grid[best[len(best) // 2]])           # model: mid-way through the best
    maxima[name] = np.concatenate([row_maxima(q * scale, k)
                                   for q, k, _ in layer_qkv(small_params, held_out)])
    in_range[name] = np.mean((maxima[name] - phi[name] >= a_lo) & (maxima[name] - phi[name] <= b_hi))
    print(f"{name}: φ = {phi[name]:.2f}; rows in range on held-out text: "
          f"{fmt_percent(in_range[name], 2)}")

names = list(models)
assert in_range[names[0]] == 1.0 and in_range[names[1]] < 1.0
rows_per_step = 8 * small_cfg.N          # a decode step of 8 sequences, one row per query head
p_step = 1 - in_range[names[1]] ** rows_per_step

# %% tags=["hide-input"]
glue("ch7_C", str(C_fdpp)); glue("ch7_q_scale", f"{q_scale:.0f}")
glue("ch7_window", f"{b_hi - a_lo:.1f}")
glue("ch7_out_peaked", fmt_percent(1 - in_range[names[1]], 1))
glue("ch7_rows_per_step", str(rows_per_step)); glue("ch7_p_step", fmt_percent(p_step))

fig, ax = plt.subplots(figsize=(6.5, 3.8))
for name in models:
    ax.hist(maxima[name], bins=80, alpha=0.5, label=name)
    ax.axvspan(phi[name] + a_lo, phi[name] + b_hi, alpha=0.08, color="k")
ax.set_xlabel("largest score of a query row"); ax.set_ylabel("rows")
ax.set_title(f"Where φ + [a, b] (shaded, float16, chunks of {C_fdpp}) must fall", fontsize=9)
ax.legend(fontsize=8)
glue_figure("ch7_maxima_figure", fig, zh=dict(
    title=f"φ + [a, b]（阴影，float16，每块 {C_fdpp} 个键）必须落在哪里",
    xlabel="一个查询行的最大分数", ylabel="行数",
    legend=["small（随机权重）", f"small，查询 × {q_scale:.0f}（尖锐）"]))

# %%
# Exactness on a real decode step: the last position's queries against the cache, both models.
for name, scale in models.items():
    q_all, k_all, v_all = layer_qkv(small_params, held_out)[0]
    q_last, pos_last, lens = q_all[:, -1:] * scale, jnp.full((4, 1), 255), jnp.full((4,), 256)
    out, lse, redo = jax.jit(flash_decoding.unified_max_attention,
                             static_argnames=("num_splits", "window", "bounds"))(
        q_last, k_all, v_all, pos_last, lens, phi[name], num_splits=256 // C_fdpp,
        bounds=(a_lo, b_hi))
    r_out, r_lse = reference(q_last, k_all, v_all, pos_last, lens)
    assert jnp.allclose(out, r_out, atol=1e-5) and jnp.allclose(lse, r_lse, atol=1e-5)
    # Any row whose maximum is out of range, and only then, must trigger the fallback.
    m_last = row_maxima(q_last, k_all, pos_last)
    out_of_range = np.any((m_last - phi[name] < a_lo) | (m_last - phi[name] > b_hi))
    assert bool(redo) == bool(out_of_range)
    print(f"{name}: exact; recomputed: {bool(redo)}")

# %% [markdown]
# ```{glue:figure} ch7_maxima_figure
# ```
#
# The shaded band is $\varphi + [a, b]$: {glue:text}`ch7_window` wide in float16 with chunks
# of {glue:text}`ch7_C`. For the random-weight model one $\varphi$ covers every row, and the fast path always
# applies. For the peaked model, the best $\varphi$ still leaves {glue:text}`ch7_out_peaked` of
# rows outside — and because one such row sends the whole step down the slow path, a step of
# {glue:text}`ch7_rows_per_step` rows recomputes with probability {glue:text}`ch7_p_step`. This
# is the caveat the CIS 565 write-up draws from the FlashDecoding++ paper: the unified maximum
# is a per-model setting, and for a model whose scores spread widely it buys little. (In the
# library the check is global and the fallback recomputes everything; a kernel could recompute
# only the failing rows.) Both paths agree with the reference in every case above.
#
# ## PagedAttention: where the cache lives
#
# So far each sequence owned a contiguous cache of $S$ slots, allocated at the longest length
# it might reach. Requests do not know their length in advance, so a server reserves the
# maximum and most of it sits empty. PagedAttention borrows virtual memory's answer: store the
# cache in fixed-size **blocks** from a shared pool, and give every sequence a **block table**
# mapping its logical blocks to physical ones. A sequence then holds only the blocks it has
# filled, wasting less than one block. How much that matters, for requests whose lengths are
# spread evenly up to the maximum:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch7_maxima_figure
# ```
#
# 阴影带就是 $\varphi + [a, b]$：在 float16 下、每块 {glue:text}`ch7_C` 个键时，它宽
# {glue:text}`ch7_window`。对随机权重的模型，一个 $\varphi$ 就能覆盖所有行，快速路径总是适用。对
# 尖锐的模型，最好的 $\varphi$ 仍有 {glue:text}`ch7_out_peaked` 的行落在外面——而只要有一行这样，
# 整个步骤就要走慢速路径，所以一个有 {glue:text}`ch7_rows_per_step` 行的步骤需要重算的概率是
# {glue:text}`ch7_p_step`。这正是 CIS 565 的报告从 FlashDecoding++ 论文中得出的告诫：统一最大值是
# 按模型设定的，对分数分布很宽的模型，它收效甚微。（库中的检查是全局的，回退时全部重算；一个内核
# 可以只重算不满足条件的那些行。）在上面的每一种情况下，两条路径都与参考实现一致。
#
# ## PagedAttention：缓存放在哪里
#
# 到目前为止，每个序列都拥有一段 $S$ 个槽位的连续缓存，按它可能达到的最大长度分配。请求事先并不
# 知道自己的长度，所以服务器按最大值预留，其中大部分都空着。PagedAttention 借用了虚拟内存的答案：
# 把缓存存放在一个共享池里固定大小的**块**中，并给每个序列一张**块表**，把它的逻辑块映射到物理块。
# 这样一个序列只持有它已经填满的块，浪费不到一个块。对于长度在最大值以内均匀分布的请求，这有多大
# 影响：

# %%
max_len, block = 2048, 16
req_lengths = np.random.default_rng(1).integers(1, max_len + 1, size=10_000)
contiguous_use = req_lengths.sum() / (len(req_lengths) * max_len)
paged_use = req_lengths.sum() / (np.ceil(req_lengths / block) * block).sum()
assert paged_use > 0.99 > 0.6 > contiguous_use
llama7 = get_preset("llama-2-7b")
a100_80 = get_chip("A100 80GB")
kv_budget = a100_80.hbm_bytes - counts.param_bytes(llama7, 2)
per_token = counts.kv_bytes_per_token(llama7, 2)
seqs_contiguous = int(kv_budget // (max_len * per_token))
seqs_paged = int(kv_budget // (req_lengths.mean() / paged_use * per_token))

# %% tags=["hide-input"]
glue("ch7_contig_use", fmt_percent(contiguous_use)); glue("ch7_paged_use", fmt_percent(paged_use, 1))
glue("ch7_seqs_contig", str(seqs_contiguous)); glue("ch7_seqs_paged", str(seqs_paged))
glue("ch7_block", str(block)); glue("ch7_max_len", f"{max_len:,}")
print(f"memory holding real tokens: contiguous {fmt_percent(contiguous_use)}, "
      f"paged (blocks of {block}) {fmt_percent(paged_use, 1)}")
print(f"LLaMA-2 7B on an A100 80GB: {seqs_contiguous} sequences (contiguous) vs "
      f"{seqs_paged} (paged, on average)")

# %% [markdown]
# With requests of up to {glue:text}`ch7_max_len` tokens, contiguous reservation fills only
# {glue:text}`ch7_contig_use` of the cache memory with real tokens; blocks of
# {glue:text}`ch7_block` fill {glue:text}`ch7_paged_use`. For LLaMA-2 7B in bfloat16 on an
# A100 80GB that is the difference between {glue:text}`ch7_seqs_contig` and about
# {glue:text}`ch7_seqs_paged` sequences decoding together — and since a decode step reads the
# weights once for the whole batch, nearly that factor in throughput. Blocks can also be shared
# between sequences that start with the same prompt; chapter 12 builds prefix caching on that.
#
# The library's layout (`inferbook.kernels.paged`, which the engine's block manager and the KV-cache
# chapter build on) is a pool of `[num_blocks, K, block_size, H]` per layer — each block
# head-major, like the contiguous cache — and an int32 table `[B, max_blocks]`. The reference
# gathers each sequence's blocks into a contiguous cache and calls `attention_reference`; the
# kernel walks the logical blocks and fetches each straight from the pool:

# %% [markdown] tags=["lang-zh"]
# 请求最长 {glue:text}`ch7_max_len` 个词元时，连续预留只让缓存内存的 {glue:text}`ch7_contig_use`
# 装上真实的词元；用 {glue:text}`ch7_block` 个词元的块则能装满 {glue:text}`ch7_paged_use`。对
# bfloat16 的 LLaMA-2 7B、在 A100 80GB 上，这就是 {glue:text}`ch7_seqs_contig` 个序列与大约
# {glue:text}`ch7_seqs_paged` 个序列一起解码的差别——而由于一个解码步骤为整个批次只读一遍权重，
# 吞吐量也差不多相差这个比例。以相同提示词开头的序列还可以共享块；第 12 章在此基础上构建前缀缓存。
#
# 库中的布局（`inferbook.kernels.paged`，引擎的块管理器和讲 KV 缓存的那一章都建立在它之上）是每层
# 一个 `[num_blocks, K, block_size, H]` 的池——每个块以头为先排列，和连续缓存一样——再加上一张
# int32 的表 `[B, max_blocks]`。参考实现把每个序列的块收集到一段连续缓存里，再调用
# `attention_reference`；内核则遍历逻辑块，直接从池中取出每一块：

# %%
show_source(paged.paged_attention)

# %%
Bp, Kp, Hp, bs, Jp = 3, 2, 16, 8, 6
rng = np.random.default_rng(2)
num_blocks = 20
k_pool = jnp.asarray(rng.normal(size=(num_blocks, Kp, bs, Hp)), jnp.float32)
v_pool = jnp.asarray(rng.normal(size=(num_blocks, Kp, bs, Hp)), jnp.float32)
table = rng.permutation(num_blocks)[:Bp * Jp].reshape(Bp, Jp)
table[1, 0] = table[0, 0]                      # sequences 0 and 1 share their first block
table = jnp.asarray(table, jnp.int32)
kv_len = jnp.array([45, 20, 3])
qp = jnp.asarray(rng.normal(size=(Bp, 1, 4, Hp)), jnp.float32)
pos = kv_len[:, None] - 1
out_k, lse_k = jax.jit(paged.paged_attention)(qp, k_pool, v_pool, table, pos, kv_len)
out_g, lse_g = paged.paged_attention_reference(qp, k_pool, v_pool, table, pos, kv_len)
contiguous = paged.gather_blocks(k_pool, table), paged.gather_blocks(v_pool, table)
out_c, lse_c = reference(qp, *contiguous, pos, kv_len)
assert jnp.allclose(out_k, out_c, atol=1e-5) and jnp.allclose(lse_k, lse_c, atol=1e-5)
assert jnp.allclose(out_g, out_c, atol=1e-5)
print("block table (pool index of each logical block):\n", np.asarray(table))
print("paged kernel = gather-then-reference = reference on the contiguous cache")

# What each needs beyond its inputs, at a realistic size (compiled only, never run).
Bm, Sm, bsm = 4, 8192, 256
pool_shape = jax.ShapeDtypeStruct((Bm * Sm // bsm, mistral.K, bsm, mistral.H), jnp.float32)
shapes = (jax.ShapeDtypeStruct((Bm, 1, mistral.N, mistral.H), jnp.float32), pool_shape, pool_shape,
          jax.ShapeDtypeStruct((Bm, Sm // bsm), jnp.int32), jax.ShapeDtypeStruct((Bm, 1), jnp.int32),
          jax.ShapeDtypeStruct((Bm,), jnp.int32))
mem_gather = compiled.program_memory(paged.paged_attention_reference, *shapes)
mem_paged = compiled.program_memory(paged.paged_attention, *shapes)
cache_bytes = 2 * Bm * mistral.K * Sm * mistral.H * 4
assert mem_gather.temp_bytes >= cache_bytes > 20 * mem_paged.temp_bytes

# %% tags=["hide-input"]
glue("ch7_gather_mem", fmt_bytes(mem_gather.temp_bytes))
glue("ch7_paged_mem", fmt_bytes(mem_paged.temp_bytes))
glue("ch7_cache_bytes", fmt_bytes(cache_bytes))
glue("ch7_Bm", str(Bm)); glue("ch7_Sm", f"{Sm:,}")

# %% [markdown]
# The gathering reference needs {glue:text}`ch7_gather_mem` of scratch memory for
# {glue:text}`ch7_Bm` sequences of {glue:text}`ch7_Sm` tokens — a full contiguous copy of their {glue:text}`ch7_cache_bytes`
# cache, made at every step — while the paged kernel needs {glue:text}`ch7_paged_mem`. A GPU
# paged kernel goes further and folds the block-table lookup into its loads, with the same
# split-KV grid as Flash-Decoding when sequences are long.
#
# ## What the CIS 565 project measured
#
# The project forked vLLM, replaced its decode-attention kernel with a Flash-Decoding kernel
# of its own, and served models on one NVIDIA L4. Its reported numbers are kept, with their
# source, in `book/data/cis565_results.json`:

# %% [markdown] tags=["lang-zh"]
# 做收集的参考实现对 {glue:text}`ch7_Bm` 个序列、每个 {glue:text}`ch7_Sm` 个词元，需要
# {glue:text}`ch7_gather_mem` 的临时内存——这是它们那 {glue:text}`ch7_cache_bytes` 缓存的一份完整
# 的连续副本，每一步都要重新复制——而分页内核只需要 {glue:text}`ch7_paged_mem`。GPU 上的分页内核
# 更进一步，把块表查找折叠进它的载入操作；序列很长时，它使用与 Flash-Decoding 相同的切分 KV 网格。
#
# ## CIS 565 项目测到了什么
#
# 该项目复刻（fork）了 vLLM，用自己写的 Flash-Decoding 内核替换了它的解码注意力内核，并在一块
# NVIDIA L4 上提供模型服务。它报告的数字连同出处一起保存在 `book/data/cis565_results.json` 中：

# %%
cis = bookdata.load("cis565_results.json")
ftl = cis["first_token_latency"]
fd_gain = [r["baseline_kernel"] / r["flash_decoding"] for r in ftl["rows"]]
cache_gain = [r["flash_decoding"] / r["flash_decoding_cached"] for r in ftl["rows"]]
assert all(g > 1 for g in fd_gain) and fd_gain[-1] == max(fd_gain)
assert cache_gain[0] > cache_gain[-1]
network_share = max(r["network"] / r["baseline_kernel"] for r in ftl["rows"])
assert network_share < 0.05

# %% tags=["hide-input"]
print(textwrap.fill(cis["source"], 100))
cols = list(ftl["configurations"])
sizes = [r["model_size"] for r in ftl["rows"]]
fig, ax = plt.subplots(figsize=(7, 3.8))
width = 0.2
short = {"network": "network round trip only", "baseline_kernel": "baseline attention kernel",
         "flash_decoding": "Flash-Decoding kernel",
         "flash_decoding_cached": "Flash-Decoding kernel + prefix cache"}
for i, col in enumerate(cols):
    ax.bar(np.arange(len(sizes)) + (i - 1.5) * width, [r[col] for r in ftl["rows"]], width,
           label=short[col])
ax.set_xticks(np.arange(len(sizes)), sizes)
ax.set_xlabel("model size"); ax.set_ylabel("first-token latency (ms)")
ax.set_title("Reported by the CIS 565 project (one NVIDIA L4)", fontsize=9)
ax.legend(fontsize=8)
short_zh = {"network": "仅网络往返", "baseline_kernel": "基线注意力内核",
            "flash_decoding": "Flash-Decoding 内核",
            "flash_decoding_cached": "Flash-Decoding 内核 + 前缀缓存"}
glue_figure("ch7_cis_figure", fig, zh=dict(
    title="CIS 565 项目报告的结果（一块 NVIDIA L4）", xlabel="模型大小",
    ylabel="首个词元延迟（ms）", legend=[short_zh[col] for col in cols]))
glue("ch7_network_share", fmt_percent(network_share))
glue("ch7_fd_gain_lo", fmt_ratio(min(fd_gain), 2)); glue("ch7_fd_gain_hi", fmt_ratio(max(fd_gain), 2))
glue("ch7_cache_gain_lo", fmt_ratio(cache_gain[-1])); glue("ch7_cache_gain_hi", fmt_ratio(cache_gain[0]))

# %% [markdown]
# ```{glue:figure} ch7_cis_figure
# ```
#
# Swapping in Flash-Decoding cut the first-token latency by a factor between
# {glue:text}`ch7_fd_gain_lo` and {glue:text}`ch7_fd_gain_hi`, most for the largest model; the
# prefix cache (reusing earlier requests' keys and values) helped far more, from
# {glue:text}`ch7_cache_gain_hi` on the smallest model down to {glue:text}`ch7_cache_gain_lo`
# on the largest. The network round trip was at most {glue:text}`ch7_network_share` of the
# uncached latency. The throughput they report is
# a more sobering number:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch7_cis_figure
# ```
#
# 换上 Flash-Decoding 后，首个词元的延迟缩短了，原来的延迟是现在的 {glue:text}`ch7_fd_gain_lo`
# 到 {glue:text}`ch7_fd_gain_hi`，最大的模型缩短得最多；前缀缓存（重用先前请求的键和值）的帮助
# 大得多：从最小模型上的 {glue:text}`ch7_cache_gain_hi`，到最大模型上的
# {glue:text}`ch7_cache_gain_lo`。网络往返至多占无缓存时延迟的 {glue:text}`ch7_network_share`。他们
# 报告的吞吐量则没那么乐观：

# %%
tput = {r["framework"]: r["tokens_per_s"] for r in cis["throughput"]["rows"]}
base, fd, ds = tput["vLLM (baseline kernel)"], tput["vLLM (Flash-Decoding kernel)"], tput["DeepSpeed"]
gain = fd / base
# If a kernel makes attention f times faster, a step whose attention share is s speeds up by
# 1 / (1 - s (1 - 1/f)). The share that explains their gain if the kernel halved attention:
f_kernel = 2.0
share = (1 - 1 / gain) / (1 - 1 / f_kernel)
# Attention's share of a Mistral-7B decode step's bytes: the cache against weights + cache.
weights_m = counts.param_bytes(mistral, 2)
kv_tok = counts.kv_bytes_per_token(mistral, 2)
tokens_for_share = share / (1 - share) * weights_m / kv_tok
l4 = get_chip("L4")
max_cached = (l4.hbm_bytes - weights_m) / kv_tok
max_share = max_cached * kv_tok / (weights_m + max_cached * kv_tok)
assert 1 < gain < 1.2 and share < max_share

# %% tags=["hide-input"]
for name, value in tput.items():
    print(f"{name:32s} {value:>6,} tokens/s")
glue("ch7_tput_gain", fmt_ratio(gain, 2)); glue("ch7_ds_gain", fmt_ratio(ds / fd))
glue("ch7_f_kernel", fmt_ratio(f_kernel, 0)); glue("ch7_l4_mem", fmt_bytes(l4.hbm_bytes, 0))
glue("ch7_share", fmt_percent(share)); glue("ch7_tokens_share", fmt_count(round(tokens_for_share, -3)))
glue("ch7_max_share", fmt_percent(max_share)); glue("ch7_max_cached", fmt_count(round(max_cached, -3)))
cached_tokens = np.geomspace(1e3, max_cached, 50)
fig, ax = plt.subplots(figsize=(6.5, 3.5))
ax.semilogx(cached_tokens, 100 * cached_tokens * kv_tok / (weights_m + cached_tokens * kv_tok))
ax.axhline(100 * share, color="k", ls=":", label="share implied by the reported +throughput")
ax.set_xlabel("tokens in the KV cache, summed over the batch")
ax.set_ylabel("attention's share of step bytes (%)")
ax.set_title("Mistral-7B decode step in bfloat16, up to a full L4 (predicted)", fontsize=9)
ax.legend(fontsize=8); ax.grid(True, which="both", alpha=0.3)
glue_figure("ch7_share_figure", fig, zh=dict(
    title="bfloat16 的 Mistral-7B 解码步骤，直到装满一块 L4（预测）",
    xlabel="KV 缓存中的词元数（整个批次合计）", ylabel="注意力占一步字节数的比例（%）",
    legend=["报告的吞吐量增益所对应的比例"]))

# %% [markdown]
# ```{glue:figure} ch7_share_figure
# ```
#
# The Flash-Decoding kernel raised vLLM's throughput by {glue:text}`ch7_tput_gain`, and
# DeepSpeed (whose kernels and batching differ) delivered {glue:text}`ch7_ds_gain` that. The
# estimator explains why a better attention kernel moves end-to-end throughput so little. A
# decode step reads the weights and the cache; only the cache is attention's. If the kernel
# made attention {glue:text}`ch7_f_kernel` faster, a {glue:text}`ch7_tput_gain` gain means attention was about
# {glue:text}`ch7_share` of the step — which for Mistral-7B is where the batch holds about
# {glue:text}`ch7_tokens_share` cached tokens in total. On an L4's {glue:text}`ch7_l4_mem` the cache can grow to about
# {glue:text}`ch7_max_cached` tokens, where attention would be {glue:text}`ch7_max_share` of the
# step: decode kernels matter in proportion to how much of the memory traffic is cache, which
# is why they matter most for long contexts and large batches, and why batching, scheduling and
# memory management (the rest of this book) decide the rest.
#
# ## Summary
#
# - A decode step's attention does $2G/b$ FLOPs per byte of cache: it is a read of the cache,
#   and its speed is the bandwidth the kernel can draw.
# - FlashAttention's grid at decode has one program per sequence and head, too few to keep a
#   GPU's SMs reading at small batch. Flash-Decoding splits the cache into chunks, computes a
#   partial output and log-sum-exp per chunk in parallel, and combines them exactly.
# - FlashDecoding++ replaces the per-chunk maxima with one calibrated $\varphi$, checks each row
#   locally and recomputes when a row is out of range; how often that happens is a property of
#   the model's score distribution.
# - PagedAttention stores the cache in blocks of a shared pool addressed by a block table,
#   wasting less than a block per sequence instead of the unused part of a maximum-length
#   reservation, and reads blocks in place.
# - End to end, a faster attention kernel helps in proportion to the cache's share of the bytes
#   a step reads.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch7_share_figure
# ```
#
# Flash-Decoding 内核把 vLLM 的吞吐量提高到原来的 {glue:text}`ch7_tput_gain`，而 DeepSpeed（它的
# 内核和批处理方式都不同）的吞吐量是这个吞吐量的 {glue:text}`ch7_ds_gain`。估算器可以解释，为什么更好的
# 注意力内核对端到端吞吐量的影响这么小。一个解码步骤要读取权重和缓存；只有缓存属于注意力。如果内核
# 让注意力快了 {glue:text}`ch7_f_kernel`，那么 {glue:text}`ch7_tput_gain` 的增益意味着注意力约占
# 这一步的 {glue:text}`ch7_share`——对 Mistral-7B 来说，这对应于批次中缓存的词元总数约为
# {glue:text}`ch7_tokens_share` 的情形。在 L4 的 {glue:text}`ch7_l4_mem` 内存里，缓存的词元数最多
# 可以增长到约 {glue:text}`ch7_max_cached`，那时注意力将占这一步的 {glue:text}`ch7_max_share`：解码
# 内核的重要性与内存流量中缓存所占的比例成正比，所以它们对长上下文和大批次最为重要，而其余的一切由
# 批处理、调度和内存管理（本书的其余部分）决定。
#
# ## 小结
#
# - 解码步骤的注意力每字节缓存做 $2G/b$ FLOPs：它就是对缓存的一次读取，速度取决于内核能拉动的
#   带宽。
# - FlashAttention 的网格在解码时每个序列、每个头只有一个程序，批次小时太少，无法让 GPU 的各个 SM
#   都忙于读取。Flash-Decoding 把缓存切成块，并行地为每块算出部分输出和 LSE，再把它们精确地
#   合并起来。
# - FlashDecoding++ 用一个校准好的 $\varphi$ 代替各块自己的最大值，在本地检查每一行，一旦有行超出
#   范围就重新计算；这种情况多久发生一次，是模型分数分布的一个性质。
# - PagedAttention 把缓存存放在共享池的块中，用块表寻址，每个序列浪费不到一个块，而不是浪费按最大
#   长度预留的空间中没用上的部分；它还在原地读取这些块。
# - 从端到端来看，更快的注意力内核带来的帮助，与缓存在一步所读字节中所占的比例成正比。
