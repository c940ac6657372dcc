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
# # Rooflines: when is inference compute-bound?
#
# Chapter 1 found a decode step waiting on memory: it reads every weight to do two FLOPs with
# each. That changes as more work shares the same bytes. This chapter makes the idea exact with
# the *roofline model* {cite:p}`williams2009roofline`: for each part of a transformer — the
# weight matmuls, attention — it counts the FLOPs done per byte moved and compares that with
# what the chip can do per byte it reads. The comparison says when inference is compute-bound:
# prefill almost always, the weight matmuls of decoding only once many sequences share a step,
# attention during decoding never {cite:p}`austin2025scaling,chen2022arithmetic`. The chapter
# ends by measuring the roofline on the device you are running and comparing the library's
# decode step with the prediction.

# %% [markdown] tags=["lang-zh"]
# # 屋顶线：推理什么时候是计算受限的？
#
# 第 1 章发现解码步骤在等内存：它把每个权重读一遍，却只用每个权重做两次 FLOP。当更多的工作共享
# 同样的字节时，情况就变了。本章用*屋顶线模型* {cite:p}`williams2009roofline` 把这个想法说准确：
# 对 Transformer 的每一部分——权重矩阵乘法、注意力——数出每移动一个字节所做的 FLOPs，再与芯片
# 每读一个字节能做的运算相比较。比较的结果告诉我们推理什么时候是计算受限的：预填充几乎总是；解码
# 中的权重矩阵乘法只有在许多序列共享一步时才是；解码中的注意力则从来不是
# {cite:p}`austin2025scaling,chen2022arithmetic`。本章最后在你正在使用的设备上测量屋顶线，并把库的
# 解码步骤与预测相比较。

# %%
import os

import inferbook

info = inferbook.setup()

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

from inferbook.book.listing import show_source
from inferbook.model.presets import get_preset
from inferbook.perf import bench_targets, calibration, counts, roofline, timing
from inferbook.perf.bench_targets import TARGETS
from inferbook.perf.hardware import CHIPS, get_chip

print(info.describe())
DEVICE = timing.device_name()

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

# %% [markdown]
# ## Two roofs
#
# A chip can do at most $C$ FLOPs per second and read at most $W$ bytes per second from its
# memory. An operation that performs $F$ FLOPs on $M$ bytes that must come from memory
# therefore takes at least
#
# $$ T \ge \max\left(\frac{F}{C}, \frac{M}{W}\right), $$
#
# assuming, as the hardware is built to allow, that the loading overlaps with the arithmetic.
# Which term wins depends on the operation's **arithmetic intensity** $F / M$, FLOPs per byte,
# against the chip's $C / W$: above it the operation is compute-bound, below it memory-bound.
# The registry's chips (bfloat16 dense peak, memory bandwidth):

# %% [markdown] tags=["lang-zh"]
# ## 两个屋顶
#
# 一块芯片每秒最多做 $C$ 次 FLOP，每秒最多从内存读取 $W$ 个字节。所以，一个对必须从内存读来的
# $M$ 个字节执行 $F$ 次 FLOP 的操作，至少需要
#
# $$ T \ge \max\left(\frac{F}{C}, \frac{M}{W}\right), $$
#
# 这里假定加载与运算相互重叠，硬件正是为此而设计的。哪一项胜出，取决于这个操作的**算术强度**
# $F / M$（每字节的 FLOPs）与芯片的 $C / W$ 孰高孰低：高于它，操作是计算受限的；低于它，则是
# 内存受限的。库中登记的芯片（bfloat16 稠密峰值、内存带宽）如下：

# %% tags=["hide-input"]
rows = []
for chip in CHIPS.values():
    rows.append(f"| {chip.name} | {fmt_rate(chip.bf16_flops_per_s, 'FLOP/s')} | "
                f"{fmt_rate(chip.hbm_bytes_per_s)} | {roofline.critical_intensity(chip):,.0f} |")
Markdown("| chip | C (bf16) | W | C / W (FLOPs per byte) |\n|---|---:|---:|---:|\n"
         + "\n".join(rows))

# %%
v5e, h100, a100 = get_chip("TPU v5e"), get_chip("H100 SXM"), get_chip("A100 40GB")
ci = {c.name: roofline.critical_intensity(c) for c in CHIPS.values()}
assert 100 < min(ci.values()) and max(ci.values()) < 1000

# %% tags=["hide-input"]
glue("ch2_ci_v5e", f"{ci['TPU v5e']:.0f}")
glue("ch2_ci_h100", f"{ci['H100 SXM']:.0f}")
glue("ch2_ci_a100", f"{ci['A100 40GB']:.0f}")
glue("ch2_ci_min", f"{min(ci.values()):.0f}")
glue("ch2_ci_max", f"{max(ci.values()):.0f}")

intensity = np.geomspace(0.1, 3000, 200)
fig, ax = plt.subplots(figsize=(6.5, 4))
for chip in (v5e, h100, a100):
    attainable = np.minimum(chip.bf16_flops_per_s, intensity * chip.hbm_bytes_per_s)
    ax.loglog(intensity, attainable, label=chip.name)
    ax.axvline(ci[chip.name], ls=":", lw=0.8, color=ax.lines[-1].get_color())
ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
ax.set_ylabel("attainable FLOP/s")
ax.set_title("The roofline: memory-bound left of each dotted line, compute-bound right",
             fontsize=10)
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch2_roofline_figure", fig, zh=dict(
    title="屋顶线：每条点线左侧内存受限，右侧计算受限", xlabel="算术强度（每字节的 FLOPs）",
    ylabel="可达到的 FLOP/s"), keep=[chip.name for chip in (v5e, h100, a100)])

# %% [markdown]
# ```{glue:figure} ch2_roofline_figure
# ```
#
# Every chip in the registry needs between {glue:text}`ch2_ci_min` and
# {glue:text}`ch2_ci_max` FLOPs per byte before arithmetic becomes its bottleneck:
# {glue:text}`ch2_ci_v5e` for a TPU v5e, {glue:text}`ch2_ci_a100` for an A100,
# {glue:text}`ch2_ci_h100` for an H100. (kipply calls the A100's figure the
# "flops to bandwidth ratio"; chapter 4 follows her argument.)
#
# ## Matrix multiplications
#
# Every weight in a transformer — the attention projections $W_Q, W_K, W_V, W_O$ and the MLP
# matrices — is used in a product of the same form: activations $[B, D]$ times weights
# $[D, F]$, where $B$ counts the tokens in the step. In bfloat16 it does $2BDF$ FLOPs and
# moves $2BD + 2DF + 2BF$ bytes (read the activations and the weights, write the result):

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_roofline_figure
# ```
#
# 库中登记的每块芯片，都要每字节做 {glue:text}`ch2_ci_min` 到 {glue:text}`ch2_ci_max` 次 FLOP，
# 计算才会成为它的瓶颈：TPU v5e 是 {glue:text}`ch2_ci_v5e`，A100 是 {glue:text}`ch2_ci_a100`，
# H100 是 {glue:text}`ch2_ci_h100`。（kipply 把 A100 的这个数叫作“flops to bandwidth ratio”，即
# FLOPs 与带宽之比；第 4 章沿用了她的论证。）
#
# ## 矩阵乘法
#
# Transformer 中的每个权重——注意力投影 $W_Q, W_K, W_V, W_O$ 和 MLP 的矩阵——都用在同一种形式的
# 乘积里：激活值 $[B, D]$ 乘以权重 $[D, F]$，其中 $B$ 是这一步的词元（token）数。在 bfloat16 下，它做
# $2BDF$ FLOPs，移动 $2BD + 2DF + 2BF$ 个字节（读取激活值和权重，写出结果）：

# %%
show_source(roofline.matmul_bytes, roofline.matmul_intensity)

# %% [markdown]
# When $B$ is small next to $D$ and $F$ — a decode step's batch against a model's width — the
# weights dominate the bytes and the intensity is $2BDF / 2DF = B$. The matmul turns
# compute-bound when $B$ passes the chip's $C / W$. That threshold, in tokens per step, is the
# **critical batch size**:
#
# $$ B_\text{crit} = \frac{C}{W} \cdot \frac{\text{bytes per weight}}{2}. $$

# %% [markdown] tags=["lang-zh"]
# 当 $B$ 比 $D$ 和 $F$ 小得多时——解码步骤的批次相对于模型的宽度正是如此——字节主要来自权重，
# 强度为 $2BDF / 2DF = B$。$B$ 一旦超过芯片的 $C / W$，矩阵乘法就转为计算受限。这个以每步词元数
# 计的阈值，就是**临界批量大小**：
#
# $$ B_\text{crit} = \frac{C}{W} \cdot \frac{\text{每个权重的字节数}}{2}. $$

# %%
show_source(roofline.critical_batch)

# %%
D = F = 8192
bs = np.arange(1, 1025)
# Where does the intensity cross each chip's line? Search, counting activations too.
for chip in (v5e, h100, a100):
    crossing = next(b for b in bs if roofline.matmul_intensity(b, D, F) >= ci[chip.name])
    b_crit = roofline.critical_batch(chip)
    assert b_crit <= crossing <= 1.1 * b_crit + 1, (chip.name, crossing, b_crit)
    print(f"{chip.name:10s} B_crit {b_crit:6.1f}   first compute-bound batch {crossing}")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(bs, [roofline.matmul_intensity(b, D, F) for b in bs], "k", label=f"[B, {D}]·[{D}, {F}]")
for chip in (v5e, h100, a100):
    ax.axhline(ci[chip.name], ls=":", label=f"C / W of {chip.name}",
               color=plt.get_cmap("tab10")(list(CHIPS).index(chip.name) % 10))
ax.set_xlabel("tokens per step, B")
ax.set_ylabel("FLOPs per byte (bfloat16)")
ax.set_title("A weight matmul's intensity grows with the batch", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch2_matmul_figure", fig, zh=dict(
    title="权重矩阵乘法的强度随批次增长", xlabel="每步的词元数 B",
    ylabel="每字节的 FLOPs（bfloat16）",
    legend=[f"[B, {D}]·[{D}, {F}]"] + [f"{chip.name} 的 C / W" for chip in (v5e, h100, a100)]))

# %% [markdown]
# ```{glue:figure} ch2_matmul_figure
# ```
#
# The curve crosses each chip's line a little after $B_\text{crit}$ (activations add a few
# bytes the formula ignores). Quantization moves the threshold. Storing weights in int8 halves
# the bytes per weight and so halves $B_\text{crit}$; doing the arithmetic in int8 as well
# doubles $C$ and brings it back {cite:p}`austin2025scaling`:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_matmul_figure
# ```
#
# 曲线越过每块芯片那条线的位置，比 $B_\text{crit}$ 稍晚一点（激活值多出了几个公式忽略掉的字节）。
# 量化会移动这个阈值。把权重存成 int8，每个权重的字节数减半，$B_\text{crit}$ 也随之减半；如果运算
# 也用 int8，$C$ 翻番，阈值又回到原处 {cite:p}`austin2025scaling`：

# %%
formats = [("bf16 weights, bf16 math", 2, "bf16"), ("int8 weights, bf16 math", 1, "bf16"),
           ("int8 weights, int8 math", 1, "int8"), ("int4 weights, bf16 math", 0.5, "bf16")]
bc = {label: roofline.critical_batch(v5e, wb, math) for label, wb, math in formats}
assert bc["int8 weights, bf16 math"] == bc["bf16 weights, bf16 math"] / 2
assert bc["int8 weights, int8 math"] == bc["bf16 weights, bf16 math"]

# %% tags=["hide-input"]
table = "| chip | " + " | ".join(f[0] for f in formats) + " |\n|---|" + "---:|" * len(formats)
for chip in CHIPS.values():      # a chip without an int8 peak (Gaudi 3) has no int8 column
    cells = [f"{roofline.critical_batch(chip, wb, math):.0f}"
             if math == "bf16" or chip.int8_ops_per_s else "—" for _, wb, math in formats]
    table += f"\n| {chip.name} | " + " | ".join(cells) + " |"
glue("ch2_bcrit_v5e", f"{bc['bf16 weights, bf16 math']:.0f}")
glue("ch2_bcrit_v5e_int8w", f"{bc['int8 weights, bf16 math']:.0f}")
glue("ch2_bcrit_h100", f"{roofline.critical_batch(h100):.0f}")
Markdown(table)

# %% [markdown]
# This is the first half of the chapter's answer.
#
# - **Prefill** multiplies every weight by all $T$ tokens of a prompt at once. A prompt of a
#   few hundred tokens already passes $B_\text{crit}$: prefill is compute-bound, and its cost
#   is FLOPs over peak.
# - **Decoding** has one new token per sequence per step, so only batching sequences raises
#   $B$. A TPU v5e needs {glue:text}`ch2_bcrit_v5e` sequences decoding together in bfloat16
#   ({glue:text}`ch2_bcrit_v5e_int8w` with int8 weights), an H100
#   {glue:text}`ch2_bcrit_h100` — each with its own KV cache in memory. Below that, a step costs
#   the time to read the weights, however many sequences share it.
#
# ## Attention
#
# Attention is different: its "weights" are the KV cache, and every sequence has its own. One
# layer of multi-head attention over $B$ sequences, $T$ new queries each against $S$ keys,
# reads the queries and the cache and writes the output — without writing the $T \times S$
# score matrix, as a fused kernel does (chapter 6). Both products, $QK^\top$ and $PV$, do
# $2BTSNH$ FLOPs:

# %% [markdown] tags=["lang-zh"]
# 这是本章答案的前一半。
#
# - **预填充**把每个权重一次性乘以提示词的全部 $T$ 个词元。几百个词元的提示词就已越过
#   $B_\text{crit}$：预填充是计算受限的，它的代价就是 FLOPs 除以峰值。
# - **解码**每步每个序列只有一个新词元，所以只有对序列做批处理才能提高 $B$。TPU v5e 需要
#   {glue:text}`ch2_bcrit_v5e` 个序列以 bfloat16 一起解码（int8 权重时是
#   {glue:text}`ch2_bcrit_v5e_int8w` 个），H100 需要 {glue:text}`ch2_bcrit_h100` 个——每个序列在内存中
#   都有自己的 KV 缓存。低于这个数，一步的代价就是读取权重的时间，不管有多少个序列共享这一步。
#
# ## 注意力
#
# 注意力不一样：它的“权重”是 KV 缓存，而每个序列都有自己的一份。一层多头注意力作用于 $B$ 个
# 序列，每个序列有 $T$ 个新查询对着 $S$ 个键，它读取查询和缓存并写出输出——不写出 $T \times S$ 的
# 分数矩阵，融合内核正是这样做的（第 6 章）。两个乘积 $QK^\top$ 和 $PV$ 各做 $2BTSNH$ FLOPs：

# %%
show_source(roofline.attention_cost, roofline.attention_intensity)

# %% [markdown]
# The batch cancels: $B$ sequences bring $B$ times the FLOPs and $B$ times the bytes. With
# $N = K$ heads in bfloat16 the intensity is $ST / (S + T)$. In **prefill** ($S = T$) that is
# $T/2$, so a long prompt's attention is compute-bound once $T$ is about twice the chip's
# $C / W$. In **generation** ($T = 1$) it is $S / (S + 1)$, below one FLOP per byte for any
# context: decoding attention is memory-bound at every batch size. Grouped-query attention, $G$
# query heads per KV head, reuses each key $G$ times and raises the intensity towards $G$ —
# still far below any chip's $C / W$.

# %% [markdown] tags=["lang-zh"]
# 批次在这里被约掉了：$B$ 个序列带来 $B$ 倍的 FLOPs，也带来 $B$ 倍的字节。在 $N = K$ 个头、
# bfloat16 的情况下，强度为 $ST / (S + T)$。在**预填充**中（$S = T$），它等于 $T/2$，所以一旦 $T$ 达到
# 约 $2 \cdot C / W$，长提示词的注意力就是计算受限的。在**生成**中（$T = 1$），它是 $S / (S + 1)$，
# 无论上下文多长都低于每字节一个 FLOP：解码注意力在任何批量大小下都是内存受限的。分组查询注意力
# 让每 $G$ 个查询头共享一个 KV 头，每个键被重复使用 $G$ 次，强度也随之升向 $G$——但仍远低于任何
# 芯片的 $C / W$。

# %%
contexts = np.unique(np.geomspace(1, 131072, 200).astype(int))
prefill_threshold = next(t for t in range(1, 10_000)
                         if roofline.attention_intensity(t, t) >= ci["TPU v5e"])
assert abs(prefill_threshold - 2 * ci["TPU v5e"]) <= 1
assert all(roofline.attention_intensity(1, s) < 1 for s in contexts)
assert all(roofline.attention_intensity(1, s, 8) < 8 for s in contexts)

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(contexts, [roofline.attention_intensity(s, s) for s in contexts], label="prefill, T = S")
for G in (1, 8):
    ax.loglog(contexts, [roofline.attention_intensity(1, s, G) for s in contexts],
              label=f"generate, T = 1, G = {G}")
for chip in (v5e, h100):
    ax.axhline(ci[chip.name], ls=":", color="gray")
    ax.annotate(f"C / W {chip.name}", (1.2, ci[chip.name] * 1.1), fontsize=8, color="gray")
ax.set_xlabel("context S (keys per query)")
ax.set_ylabel("FLOPs per byte (bfloat16)")
ax.set_title("Attention: prefill grows with the prompt, generation stays below G", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch2_attention_figure", fig, zh=dict(
    title="注意力：预填充随提示词增长，生成停留在 G 以下", xlabel="上下文 S（每个查询的键数）",
    ylabel="每字节的 FLOPs（bfloat16）",
    legend=["预填充，T = S"] + [f"生成，T = 1，G = {G}" for G in (1, 8)],
    texts=[f"{chip.name} 的 C / W" for chip in (v5e, h100)]))
glue("ch2_prefill_attention_v5e", f"{prefill_threshold:,}");

# %% [markdown]
# ```{glue:figure} ch2_attention_figure
# ```
#
# On a TPU v5e a prompt's attention is compute-bound from about
# {glue:text}`ch2_prefill_attention_v5e` tokens. During generation the weights get cheaper per
# token as the batch grows, the caches do not: every added sequence adds its cache to the bytes
# of every step. Once the caches outweigh the weights, batching buys little. The batch where
# they weigh the same is the weight bytes over one sequence's cache:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_attention_figure
# ```
#
# 在 TPU v5e 上，提示词的注意力从大约 {glue:text}`ch2_prefill_attention_v5e` 个词元起就是计算受限的。
# 在生成过程中，批次越大，权重分摊到每个词元上就越便宜，缓存却不会：每增加一个序列，每一步要读的
# 字节就多出它的一份缓存。一旦缓存比权重还大，批处理就收效甚微。两者一样大时的批次，等于权重的
# 字节数除以一个序列的缓存：

# %%
context = 4096
rows = []
for name in ("llama-2-13b", "llama-3-8b", "llama-3-70b", "mistral-7b"):
    cfg = get_preset(name)
    per_seq = counts.kv_cache_bytes(cfg, 1, context)
    rows.append((name, cfg.K, per_seq, counts.param_bytes(cfg) / per_seq))
even = {r[0]: r[3] for r in rows}
assert even["llama-3-8b"] > 3 * even["llama-2-13b"]       # GQA: four times smaller caches

# %% tags=["hide-input"]
glue("ch2_even_13b", f"{even['llama-2-13b']:.1f}")
glue("ch2_even_l3", f"{even['llama-3-8b']:.0f}")
glue("ch2_l3_K", str(get_preset("llama-3-8b").K)); glue("ch2_l3_N", str(get_preset("llama-3-8b").N))
Markdown(f"| model | K | KV cache of one {context:,}-token sequence | batch where caches = weights |"
         "\n|---|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {k} | {fmt_bytes(b)} | {e:.1f} |" for n, k, b, e in rows))

# %% [markdown]
# LLaMA-2 13B's caches outweigh its weights from a batch of {glue:text}`ch2_even_13b`; LLaMA-3
# 8B, with {glue:text}`ch2_l3_K` KV heads for {glue:text}`ch2_l3_N` query heads, only from
# about {glue:text}`ch2_even_l3`. Both are
# far below $B_\text{crit}$: at long contexts, decoding is memory-bound through and through, and
# chapter 3 turns this into step times and throughputs.
#
# ## The roofline on your device
#
# Now a measurement. We time the library's decode step — exactly as `decode.generate` runs it,
# the sampling step and then the in-place append to the cache — at batch sizes from 1 to 256,
# and put two predictions beside it:
#
# - the **roofline** with two measured constants, as an *empirical* roofline takes them: $W$,
#   the device's read roof (the fastest of several read kernels, each by its best run, or the
#   model's weights streaming through its matmuls at batch 1, if that was faster), and $C$,
#   the best FLOP/s the model's matmuls reach at any batch. A step costs
#   $\text{KV bytes} / W + \max(2BP / C, \text{weight bytes} / W)$;
# - a **calibrated** prediction that keeps the roofline's split of a step into a weight part
#   and a cache part, but takes each part's time from the device instead of from the two roofs:
#   the model's weight matmuls at $B$ rows, run alone in one program, and its attention over
#   $B$ caches. A program run alone also pays what every program pays — the call, the
#   dispatch, on an accelerator a launch per kernel — and a sum of such parts pays it once
#   per part: on an H200 that sum predicted {glue:text}`ch2_sum_of_parts` the measured step at
#   batch 1 (the run is on record below). So each part counts only its *work*, its time
#   beyond the same program for a *skeleton* of the model (the same layers and operations at
#   tiny widths), and the fixed costs count once, as the skeleton's own step. Attention is
#   timed where the step runs it, inside a step, because a compiler is free to schedule a
#   program that holds only attention differently from a whole step — how many threads its
#   cache products get, for one. Its work is what an *attention skeleton* — the skeleton with
#   the model's own heads and caches — adds to the skeleton's step:
#
# $$t_\text{step} \approx t^\text{skeleton}_\text{step} + (t_\text{matmuls} - t^\text{skeleton}_\text{matmuls}) + (t^\text{attention skeleton}_\text{step} - t^\text{skeleton}_\text{step}).$$
#
# The five programs are timed in alternation with the step, so that whatever else runs on the
# machine affects them alike, and each reports its median over the rounds: at least five, and
# more while a batch size's timed runs add up to less than {glue:text}`ch2_row_budget`. Each
# timed call follows an untimed call of its own program, as a step follows a step in a
# generation. Nothing in either prediction is fitted to the decode step.
# `inferbook.perf.calibration` does the measuring:

# %% [markdown] tags=["lang-zh"]
# LLaMA-2 13B 的缓存从批次 {glue:text}`ch2_even_13b` 起就比权重还大；LLaMA-3 8B 用
# {glue:text}`ch2_l3_K` 个 KV 头对应 {glue:text}`ch2_l3_N` 个查询头，要到大约
# {glue:text}`ch2_even_l3` 才会如此。两者都远低于 $B_\text{crit}$：在长上下文下，解码彻头彻尾是内存
# 受限的，第 3 章会把这一点换算成步骤时间和吞吐量。
#
# ## 你的设备上的屋顶线
#
# 现在来做一次测量。我们为库的解码步骤计时——完全按 `decode.generate` 运行它的方式，先是采样步骤，
# 再就地追加到缓存——批量大小从 1 到 256，并在旁边放上两个预测：
#
# - 带两个实测常数的**屋顶线**，取法与*经验*屋顶线相同：$W$ 是设备的读取屋顶（几个读取内核中最快
#   的那个，每个取它最好的一次运行；如果批次为 1 时模型的权重流过它的矩阵乘法更快，就取后者），$C$
#   是模型的矩阵乘法在任何批次下达到的最佳 FLOP/s。一步的代价是
#   $\text{KV 字节数} / W + \max(2BP / C, \text{权重字节数} / W)$；
# - 一个**校准后的**预测：它保留屋顶线把一步拆成权重部分和缓存部分的做法，但每一部分的时间都取自
#   设备，而不是来自两个屋顶：模型的权重矩阵乘法在 $B$ 行下单独放在一个程序里运行；以及它在 $B$ 个
#   缓存上的注意力。单独运行的程序也要付出每个程序都要付出的代价——调用、分派，在加速器上还有每个
#   内核的启动——把这样的部分加起来，这份代价就每个部分付一次：在 H200 上，这样的和预测出的时间是
#   批次为 1 时实测步骤的 {glue:text}`ch2_sum_of_parts`（这次运行的记录见下文）。所以每一部分只计它的
#   *工作*，即它比*骨架*模型（层和操作都相同，宽度极小）的同一个程序多用的时间；固定开销只计一次，
#   就是骨架模型自己的一步。注意力则在步骤实际运行它的地方计时，也就是在一步之内，因为编译器可以
#   用不同于完整一步的方式来安排只含注意力的程序——比如给其中与缓存相乘的运算分配多少线程。它的
#   工作，就是*注意力骨架*——带有模型自己的注意力头和缓存的骨架——比骨架的一步多出的时间：
#
# $$t_\text{step} \approx t^\text{skeleton}_\text{step} + (t_\text{matmuls} - t^\text{skeleton}_\text{matmuls}) + (t^\text{attention skeleton}_\text{step} - t^\text{skeleton}_\text{step}).$$
#
# 这五个程序与步骤本身交替计时，这样机器上其他正在运行的东西对它们的影响都一样，每一项报告它在
# 各轮中的中位数：至少五轮；一个批量大小的计时运行加起来不到 {glue:text}`ch2_row_budget` 时，还会
# 再多跑几轮。每次计时的调用之前，都先不计时地运行一次同一个程序，就像生成时一步紧跟着一步。两个
# 预测中没有任何东西是对着解码步骤拟合出来的。测量由 `inferbook.perf.calibration` 完成：

# %%
show_source(calibration.model_matmul_program, calibration.attention_skeleton,
            calibration.Parts, calibration.decode_parts)

# %% [markdown]
# The model is the library's `cpu-336mb` preset, {glue:text}`ch2_sweep_params` parameters: big
# enough that reading its weights dominates a step's fixed costs. Every sequence has a
# 128-token cache.

# %% [markdown] tags=["lang-zh"]
# 模型是库中的 `cpu-336mb` 预设，参数共 {glue:text}`ch2_sweep_params`：它足够大，读取权重的时间
# 压过了一步的固定开销。每个序列都有一个 128 个词元的缓存。

# %%
sweep_cfg = get_preset("cpu-336mb")
# Five batch sizes, each timed as `inferbook bench` times a configuration (last section): at
# least five rounds, more while its timed runs add up to less than the bench's budget per
# configuration, each timed call after an untimed call of its own program. With five rounds
# and no more, one batch size in a few sweeps on a quiet CPU missed its prediction by over a
# tenth; the bench sweeps every batch size.
from inferbook.perf import bench

load_at_start = os.getloadavg()[0]
sweep = calibration.decode_sweep(sweep_cfg, batches=(1, 4, 16, 64, 256), context=128, repeats=5,
                                 lead_in=bench.LEAD_IN, budget_s=bench.ROW_BUDGET_S)
B_axis = np.array(sweep.column("batch"))
measured = np.array(sweep.column("measured_s"))
predicted = np.array(sweep.column("predicted_s"))
roofline_s = np.array(sweep.column("roofline_s"))
errors = predicted / measured - 1
roof_errors = roofline_s / measured - 1
b_crit_here = sweep.critical_batch
tput = B_axis / measured
KNEE = 0.8                  # the knee: where throughput first reaches this share of its best
knee = int(B_axis[np.argmax(tput >= KNEE * tput.max())])
attn_bw = sweep.points[-1].attention_bytes_per_s

# %% tags=["hide-input"]
glue("ch2_sweep_params", fmt_count(counts.param_count(sweep_cfg), 0))
glue("ch2_row_budget", fmt_seconds(bench.ROW_BUDGET_S, 0))
# The H200's run from before the prediction counted fixed costs once: its batch-1 step.
from inferbook.perf import bench_results

summed = [r for r in bench_results.load_results() if r["platform"] != "cpu"
          and "read_kernels" not in r]
assert summed, "the H200 run recorded with the sum of parts is on record"
first_gpu = next(r for r in summed[0]["rows"] if r["kind"] == "decode" and r["batch"] == 1)
glue("ch2_sum_of_parts", fmt_ratio(first_gpu["predicted_s"] / first_gpu["measured_s"]))
Markdown("| batch | measured | skeleton's step | matmuls' work | attention's work | calibrated "
         "prediction | error | roofline | error |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
         + "\n".join(
             f"| {p.batch} | {fmt_seconds(p.measured_s, 2)} | {fmt_seconds(p.overhead_s, 2)} | "
             f"{fmt_seconds(p.parts.matmul_work_s, 2)} | "
             f"{fmt_seconds(p.parts.attention_work_s, 2)} | {fmt_seconds(p.predicted_s, 2)} | "
             f"{p.error:+.1%} | {fmt_seconds(p.roofline_s, 2)} | "
             f"{p.roofline_s / p.measured_s - 1:+.0%} |" for p in sweep.points))

# %% tags=["hide-input"]
# The calibrated prediction holds, to the book's targets for it (`bench_targets`, the same
# numbers every recorded benchmark run is held to) when the machine was quiet as the sweep
# began — a 1-minute load average of at most half the cores — and to looser bounds when other
# work shared it (the book's build runs two pages at once, other programs may run beside it).
# Both thresholds are glued into the sentence that states them.
quiet_here = load_at_start <= bench_targets.QUIET_LOAD_PER_CORE * os.cpu_count()
LOADED_MEDIAN_ERROR, LOADED_WORST_ERROR = 0.25, 0.5
LIVE_MEDIAN_ERROR = TARGETS["median_abs_error"] if quiet_here else LOADED_MEDIAN_ERROR
LIVE_WORST_ERROR = TARGETS["worst_abs_error"] if quiet_here else LOADED_WORST_ERROR
expect_measured(np.median(np.abs(errors)) <= LIVE_MEDIAN_ERROR
                and np.max(np.abs(errors)) <= LIVE_WORST_ERROR,
                "the calibrated prediction follows the measured decode step at every batch: "
                f"a median error within {fmt_percent(LIVE_MEDIAN_ERROR)}, every error within "
                f"{fmt_percent(LIVE_WORST_ERROR)}",
                expected=f"a median error within {fmt_percent(LIVE_MEDIAN_ERROR)} and every "
                         f"error within {fmt_percent(LIVE_WORST_ERROR)} (load "
                         f"{load_at_start:.1f} at the start, {os.cpu_count()} cores)",
                measured=", ".join(f"batch {b}: {e:+.1%}" for b, e in zip(B_axis, errors)))
glue("ch2_median_error", fmt_percent(np.median(np.abs(errors)), 1))
glue("ch2_live_basis", bilingual(
    "the book's targets" if quiet_here else
    f"looser than the book's targets, as the machine's load was {load_at_start:.1f} when "
    "the sweep began",
    zh="即本书的目标" if quiet_here else
       f"比本书的目标宽松，因为扫描开始时机器的负载是 {load_at_start:.1f}"))
glue("ch2_knee_share", fmt_percent(KNEE))
glue("ch2_device", DEVICE)
glue("ch2_W", fmt_rate(sweep.bandwidth))
glue("ch2_C", fmt_rate(sweep.peak_flops, "FLOP/s"))
glue("ch2_weights", fmt_bytes(sweep.weight_bytes))
glue("ch2_bcrit_here", f"{b_crit_here:.0f}")
glue("ch2_worst_error", fmt_percent(np.max(np.abs(errors))))
glue("ch2_live_median", fmt_percent(LIVE_MEDIAN_ERROR))
glue("ch2_live_worst", fmt_percent(LIVE_WORST_ERROR))
glue("ch2_worst_roof_error", fmt_percent(np.max(np.abs(roof_errors))))
glue("ch2_worst_roof_batch", str(int(B_axis[np.argmax(np.abs(roof_errors))])))
glue("ch2_knee", str(knee))
glue("ch2_step_1", fmt_seconds(measured[0], 1))
glue("ch2_step_max", fmt_seconds(measured[-1], 1))
glue("ch2_tput_ratio", fmt_ratio(tput.max() / tput[0], 0))
glue("ch2_attn_bw", fmt_rate(attn_bw))
glue("ch2_attn_share", fmt_percent(attn_bw / sweep.bandwidth))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
ax1.loglog(B_axis, measured * 1e3, "o-", label="measured")
ax1.loglog(B_axis, predicted * 1e3, "s--", label="calibrated prediction")
ax1.loglog(B_axis, roofline_s * 1e3, ":", label="roofline (W and C)")
ax1.axvline(b_crit_here, color="gray", lw=0.8)
ax1.annotate("B_crit", (b_crit_here * 1.05, ax1.get_ylim()[0] * 1.2), fontsize=8)
ax1.set_xlabel("batch size B")
ax1.set_ylabel("decode step (ms)")
ax1.legend(fontsize=8)
ax1.grid(True, which="both", alpha=0.3)
ax2.semilogx(B_axis, tput, "o-", label="measured")
ax2.semilogx(B_axis, B_axis / predicted, "s--", label="calibrated prediction")
ax2.semilogx(B_axis, B_axis / roofline_s, ":", label="roofline")
ax2.axvline(b_crit_here, color="gray", lw=0.8)
ax2.set_xlabel("batch size B")
ax2.set_ylabel("tokens per second")
ax2.legend(fontsize=8)
ax2.grid(True, which="both", alpha=0.3)
fig.suptitle(f"{sweep_cfg.name}, context {sweep.context}: measured on {DEVICE}", fontsize=10)
fig.tight_layout()
glue_figure("ch2_sweep_figure", fig, zh=[
    dict(xlabel="批量大小 B", ylabel="解码步骤（ms）",
         legend=["实测", "校准后的预测", "屋顶线（W 和 C）"], texts=["B_crit"],
         suptitle=f"{sweep_cfg.name}，上下文 {sweep.context}：在 {DEVICE} 上测得"),
    dict(xlabel="批量大小 B", ylabel="每秒词元数", legend=["实测", "校准后的预测", "屋顶线"])])

# %% [markdown]
# ```{glue:figure} ch2_sweep_figure
# ```
#
# On {glue:text}`ch2_device` the read roof is {glue:text}`ch2_W` and the best matmul
# reaches {glue:text}`ch2_C`. The model's matmul weights are {glue:text}`ch2_weights`, so the
# roofline's knee — its critical batch — sits at $B =$ {glue:text}`ch2_bcrit_here`. The
# measured step takes {glue:text}`ch2_step_1` at batch 1 and {glue:text}`ch2_step_max` at the
# largest batch; the throughput rises {glue:text}`ch2_tput_ratio` and reaches
# {glue:text}`ch2_knee_share` of its best
# at batch {glue:text}`ch2_knee`: the knee of the measured curve. The calibrated prediction is
# within {glue:text}`ch2_worst_error` of the measured step at every batch size
# ({glue:text}`ch2_median_error` in the median; this page checks a median error within
# {glue:text}`ch2_live_median` and every error within {glue:text}`ch2_live_worst`,
# {glue:text}`ch2_live_basis`); the two-constant roofline is off by up to {glue:text}`ch2_worst_roof_error` (at batch
# {glue:text}`ch2_worst_roof_batch`). {glue:text}`ch2_valley_sentence` Attention, for its part,
# read the caches at {glue:text}`ch2_attn_bw` at the largest batch, {glue:text}`ch2_attn_share`
# of $W$: many small per-sequence products use the memory less well than one large one.
#
# The reason is in the matmuls themselves. Here is the FLOP rate the model's weight matmuls
# achieved at each batch size, against the two roofs — $C$, and $2B$ FLOPs per weight at
# bandwidth $W$:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_sweep_figure
# ```
#
# 在 {glue:text}`ch2_device` 上，读取屋顶是 {glue:text}`ch2_W`，最好的矩阵乘法达到
# {glue:text}`ch2_C`。模型矩阵乘法的权重有 {glue:text}`ch2_weights`，所以屋顶线的拐点——它的临界
# 批量——位于 $B =$ {glue:text}`ch2_bcrit_here`。实测的步骤在批次为 1 时耗时
# {glue:text}`ch2_step_1`，在最大的批次时耗时 {glue:text}`ch2_step_max`；吞吐量升到原来的
# {glue:text}`ch2_tput_ratio`，并在批次 {glue:text}`ch2_knee` 时达到其最佳值的
# {glue:text}`ch2_knee_share`：这就是实测曲线的拐点。在每个批量大小下，校准后的预测与实测步骤的
# 差距都在 {glue:text}`ch2_worst_error` 以内（中位数为 {glue:text}`ch2_median_error`；本页检验中位误差在
# {glue:text}`ch2_live_median` 以内、每个误差都在 {glue:text}`ch2_live_worst` 以内，
# {glue:text}`ch2_live_basis`）；两个常数的屋顶线则最多偏离
# {glue:text}`ch2_worst_roof_error`（在批次 {glue:text}`ch2_worst_roof_batch`）。
# {glue:text}`ch2_valley_sentence` 至于注意力，它在最大的批次下以 {glue:text}`ch2_attn_bw` 读取缓存，
# 是 $W$ 的 {glue:text}`ch2_attn_share`：许多按序列划分的小乘积，对内存的利用不如一个大乘积。
#
# 原因就在矩阵乘法本身。下面是模型的权重矩阵乘法在每个批量大小下实际达到的 FLOP 速率，并与两个
# 屋顶相对照——$C$，以及带宽 $W$ 下每个权重 $2B$ FLOPs：

# %%
achieved = 2 * B_axis * sweep.params / np.array(sweep.column("matmul_s"))
bytes_per_weight = sweep.weight_bytes / sweep.params
roof = np.minimum(sweep.peak_flops, 2 * B_axis * sweep.bandwidth / bytes_per_weight)
share_of_roof = achieved / roof
worst = int(np.argmin(share_of_roof))

# %% tags=["hide-input"]
# The valley claim's bounds, glued into the sentence that states them.
VALLEY_CEILING, VALLEY_FEWEST, VALLEY_MOST = 0.7, 2, 32
glue("ch2_valley_ceiling", fmt_percent(VALLEY_CEILING))
glue("ch2_valley_fewest", str(VALLEY_FEWEST)); glue("ch2_valley_most", str(VALLEY_MOST))
if info.platform == "cpu":
    # XLA:CPU's products with a few rows reach neither roof: the valley the roofline cannot see.
    expect_measured(share_of_roof[worst] < VALLEY_CEILING
                    and VALLEY_FEWEST <= B_axis[worst] <= VALLEY_MOST,
                    "the model's matmuls fall into a valley below both roofs at a few rows: "
                    f"under {fmt_percent(VALLEY_CEILING)} of the roofline between "
                    f"{VALLEY_FEWEST} and {VALLEY_MOST} rows",
                    expected=f"below {fmt_percent(VALLEY_CEILING)} of the roofline somewhere "
                    f"between {VALLEY_FEWEST} and {VALLEY_MOST} rows",
                    measured=f"lowest {fmt_percent(share_of_roof[worst])} at "
                             f"{int(B_axis[worst])} rows")
    valley = bilingual(
        "On a CPU the roofline misses a valley: XLA's matrix products with a handful of "
        "rows run far below both of its roofs, so the step time rises long before the "
        "critical batch, and only a measurement of the matmuls at those shapes predicts it.",
        zh="在 CPU 上，屋顶线漏掉了一个低谷：XLA 只有寥寥几行的矩阵乘积远远低于它的两个屋顶，"
           "所以步骤时间早在临界批量之前就开始上升，只有在这些形状上实测矩阵乘法才能预测它。")
else:
    valley = bilingual(
        "The roofline's shape — flat, then linear — is what an accelerator delivers; the "
        "calibrated prediction adds what its kernels achieve at each shape.",
        zh="屋顶线的形状——先平坦、后线性——正是加速器所能做到的；校准后的预测再补上它的内核"
           "在每种形状上实际达到的水平。")

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(B_axis, roof, "k:", label="roofline: min(C, 2B·W / bytes per weight)")
ax.loglog(B_axis, achieved, "o-", label="the model's matmuls, measured")
ax.set_xlabel("rows B")
ax.set_ylabel("FLOP/s")
ax.set_title(f"Achieved matmul throughput at {sweep_cfg.name}'s shapes, {DEVICE}", fontsize=9)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch2_valley_figure", fig, zh=dict(
    title=f"{sweep_cfg.name} 形状下矩阵乘法实际达到的吞吐量，{DEVICE}", xlabel="行数 B",
    ylabel="FLOP/s", legend=["屋顶线：min(C, 2B·W / 每个权重的字节数)", "模型的矩阵乘法，实测"]))
glue("ch2_valley_batch", str(int(B_axis[worst])))
glue("ch2_valley_share", fmt_percent(share_of_roof[worst]))
glue("ch2_valley_sentence", valley);

# %% [markdown]
# ```{glue:figure} ch2_valley_figure
# ```
#
# At batch {glue:text}`ch2_valley_batch` the matmuls reach only {glue:text}`ch2_valley_share` of
# what the roofline allows. (On a CPU the chapter checks for that valley: under
# {glue:text}`ch2_valley_ceiling` of the roofline at some batch between
# {glue:text}`ch2_valley_fewest` and {glue:text}`ch2_valley_most`.) Accelerators come much closer to both roofs (chapter 4 holds the
# sources' estimates against measurements on A100s), which is why the sources can reason with
# two constants. The lesson carries over anyway: a roofline is a bound, and the distance to it
# belongs to the kernels, the shapes and the device — measure it where it matters.
#
# The scaling book's appendix shows the same kind of sweep on a TPU: step time almost flat up to
# a batch of about {glue:text}`ch2_bcrit_v5e` — the v5e's $B_\text{crit}$ — then growing
# linearly, and throughput levelling off beyond it {cite:p}`austin2025scaling`.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_valley_figure
# ```
#
# 在批次 {glue:text}`ch2_valley_batch` 时，矩阵乘法只达到屋顶线所允许的
# {glue:text}`ch2_valley_share`。（在 CPU 上，本章检验这个低谷：在批次 {glue:text}`ch2_valley_fewest` 到
# {glue:text}`ch2_valley_most` 之间的某处，不到屋顶线的 {glue:text}`ch2_valley_ceiling`。）加速器离两个屋顶要近得多（第 4 章把原文中的估算与 A100 上的实测
# 相对照），所以原文可以只凭两个常数来推理。不过这一课照样适用：屋顶线是一个界限，与它的差距取决于
# 内核、形状和设备——在要紧的地方，就去测量它。
#
# 《How to Scale Your Model》的附录在 TPU 上展示了同一类扫描：步骤时间几乎保持平坦，直到批次约为
# {glue:text}`ch2_bcrit_v5e`——即 v5e 的 $B_\text{crit}$——之后线性增长，吞吐量也在那之后趋于平稳
# {cite:p}`austin2025scaling`。

# %% [markdown]
# ## Weight formats on a trained model
#
# At batch 1 a decode step is a read of the weights, so the roofline says: fewer bytes per
# weight, a proportionally faster step — provided turning codes back into numbers costs
# nothing. Here is that claim tried on chapter 1's trained model, SmolLM2-135M-Instruct, with
# its layer matrices (the attention's and the MLP's) held in four formats:
#
# - **float32**, 4 bytes a weight;
# - **Q8_0**, llama.cpp's int8 format: 32 one-byte codes and one 16-bit scale per block of 32
#   weights, the estimator's `int8:32`;
# - **Q4_1**, the format of the file we load: 4-bit codes with a 16-bit scale *and* a 16-bit
#   minimum per 32 weights, the estimator's `int4+min:32`;
# - **Q4_0**, symmetric int4: 4-bit codes and one scale per 32 weights, the estimator's
#   `int4:32`.
#
# The quantized formats stay in their blocks in memory and are decoded inside each compiled
# step, next to the matmul that uses them (`QuantizedMatrix`, chapter 1). The tied embedding is
# the file's Q8_0 blocks in all four, as the estimator leaves embeddings out of a weight format.
#
# One caveat shapes what this section can show. The only trained weights we have are the
# file's Q4_1 values; "float32" here means those values decoded, not the original bfloat16
# checkpoint. So the section cannot show what int4 costs against the original model. What it
# can show: the bytes each format holds, exactly; each format's step time on your device; and
# what quantizing these weights *further* costs. Q8_0 and Q4_0 are made from the float32
# values by the `gguf` package's encoders (llama.cpp's reference rounding: to the nearest
# code, the scale set by each block's largest weight):

# %% [markdown] tags=["lang-zh"]
# ## 训练好的模型上的权重格式
#
# 批次为 1 时，一个解码步骤就是把权重读一遍。所以屋顶线说：每个权重的字节数越少，步骤就按比例越快
# ——前提是把编码变回数值不花任何代价。下面就在第 1 章那个训练好的模型 SmolLM2-135M-Instruct 上检验
# 这个说法：它的层矩阵（注意力的和 MLP 的）以四种格式存放：
#
# - **float32**，每个权重 4 个字节；
# - **Q8_0**，llama.cpp 的 int8 格式：每块 32 个权重，存 32 个一字节的编码和一个 16 位的缩放因子，
#   即估算器的 `int8:32`；
# - **Q4_1**，我们加载的文件所用的格式：4 位编码，每 32 个权重一个 16 位缩放因子*和*一个 16 位最小值，
#   即估算器的 `int4+min:32`；
# - **Q4_0**，对称的 int4：4 位编码，每 32 个权重一个缩放因子，即估算器的 `int4:32`。
#
# 量化的格式在内存中保持块的形式，在每个编译好的步骤里、紧挨着使用它们的矩阵乘法解码
# （`QuantizedMatrix`，第 1 章）。四种格式中，共享的嵌入都是文件里的 Q8_0 块，因为估算器也不把嵌入
# 算进权重格式。
#
# 有一点需要先说明，它决定了本节能说明什么。我们手上唯一训练好的权重，是文件里的 Q4_1 数值；这里的
# “float32”指的是把这些数值解码出来，而不是原始的 bfloat16 检查点。所以本节无法说明 int4 相对原始
# 模型损失了多少。它能说明的是：每种格式占多少字节，精确到字节；每种格式在你的设备上的步骤时间；以及
# 把这些权重*再*量化一次的代价。Q8_0 和 Q4_0 由 `gguf` 包的编码器从 float32 数值得到（llama.cpp 的
# 参考舍入：舍入到最近的编码，缩放因子由每块中最大的权重决定）：

# %%
import jax
import jax.numpy as jnp

from inferbook.book import bookdata
from inferbook.memory import kv_quality
from inferbook.model import decoder, requantize
from inferbook.model.pretrained import load_pretrained
from inferbook.perf import quant

show_source(requantize.encode_matrix)

# %%
smol = load_pretrained("smollm2-135m-instruct", keep_quantized=True)   # Q4_1 layers, as stored
wf_cfg = smol.cfg
float32_layers = jax.jit(lambda p: requantize.reencode_layers(p, None))(smol.params)
wf_params = {"float32": float32_layers,
             "Q8_0": requantize.reencode_layers(float32_layers, "Q8_0"),
             "Q4_1": smol.params,
             "Q4_0": requantize.reencode_layers(float32_layers, "Q4_0")}
# Each format's name in the estimator; float32 holds twice the estimator's bfloat16 count.
wf_formats = {"float32": "bf16", "Q8_0": "int8:32", "Q4_1": "int4+min:32", "Q4_0": "int4:32"}
wf_bytes = {k: requantize.layer_matrix_bytes(p) for k, p in wf_params.items()}
wf_counted = {k: quant.weight_bytes(wf_cfg, f, roles=("matrix",)) * (2 if k == "float32" else 1)
              for k, f in wf_formats.items()}
assert wf_bytes == wf_counted, (wf_bytes, wf_counted)     # every byte held, as counted

# Quality: the first wf_T tokens of chapter 5's story, one forward pass per format.
story = bookdata.load("scandal_in_bohemia.json")
wf_T = 256
wf_tokens = jnp.asarray([smol.tokenizer.encode("\n\n".join(story["paragraphs"][:40]))[:wf_T]])
assert wf_tokens.shape[1] == wf_T
wf_logits = {k: decoder.forward(p, wf_cfg, wf_tokens) for k, p in wf_params.items()}
# The float32 model's top next token at every position: what each format is held to.
wf_choice = jnp.concatenate([wf_tokens[:, :1], jnp.argmax(wf_logits["float32"][:, :-1], -1)], 1)
wf_ppl = {k: kv_quality.perplexity(lg, wf_tokens) for k, lg in wf_logits.items()}
wf_agree = {k: kv_quality.greedy_agreement(lg, wf_choice, 0) for k, lg in wf_logits.items()}

# Speed: one decode step at batch 1 (a 64-token cache), the four formats in alternation.
wf_timings = timing.time_alternating(
    [timing.decode_step_timer(p, wf_cfg, 1, 64) for p in wf_params.values()], rounds=5, warmup=1)
wf_step = {k: t.median_s for k, t in zip(wf_params, wf_timings)}
for k in wf_params:
    print(f"{k:8s} {fmt_bytes(wf_bytes[k]):>9s} of layer matrices   step {fmt_seconds(wf_step[k]):>9s}"
          f"   perplexity {wf_ppl[k]:6.2f}   same top token as float32 {wf_agree[k]:6.1%}")

# %%
Q8_PPL_TOLERANCE = 0.01     # Q8_0's perplexity within this share of float32's ...
Q8_AGREEMENT_FLOOR = 0.9    # ... and at least this share of the same top tokens
Q4_0_PPL_RISE = 0.1         # Q4_0's perplexity at least this share above float32's
np.testing.assert_allclose(wf_ppl["Q4_1"], wf_ppl["float32"], rtol=1e-3)   # the same values
assert abs(wf_ppl["Q8_0"] / wf_ppl["float32"] - 1) <= Q8_PPL_TOLERANCE
assert wf_agree["Q8_0"] >= Q8_AGREEMENT_FLOOR
assert wf_ppl["Q4_0"] >= (1 + Q4_0_PPL_RISE) * wf_ppl["float32"]
assert wf_agree["Q4_0"] < wf_agree["Q8_0"]

DEQUANT_FLOOR = 0.5         # on a CPU, a 4-bit step takes at least this share of float32's
wf_on_cpu = jax.devices()[0].platform == "cpu"
if wf_on_cpu:
    for k in ("Q4_1", "Q4_0"):
        share = wf_step[k] / wf_step["float32"]
        expect_measured(
            share >= DEQUANT_FLOOR,
            f"on a CPU, decoding {k}'s blocks in every step eats most of what its fewer bytes "
            f"save: its batch-1 step takes at least {fmt_percent(DEQUANT_FLOOR)} of the "
            "float32 step's time",
            expected=f"at least {fmt_percent(DEQUANT_FLOOR)} of the float32 step",
            measured=f"{fmt_percent(share)} ({fmt_seconds(wf_step[k])} against "
                     f"{fmt_seconds(wf_step['float32'])}, {DEVICE})")

# %% tags=["hide-input"]
wf_names = list(wf_params)
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(8, 3.2), layout="constrained")
ax0.bar(wf_names, [wf_bytes[k] / 1e6 for k in wf_names], color="tab:blue")
ax0.set_ylabel("MB"); ax0.set_title("layer matrices held", fontsize=10)
ax1.bar(wf_names, [wf_step[k] * 1e3 for k in wf_names], color="tab:orange")
ax1.set_ylabel("ms"); ax1.set_title(f"decode step at batch 1, {DEVICE}", fontsize=10)
glue_figure("ch2_wf_figure", fig, zh=[dict(title="层矩阵占用的字节"),
                                      dict(title=f"批次为 1 时的解码步骤，{DEVICE}")],
            keep=wf_names + ["MB", "ms"])
wf_short = {"float32": "f32", "Q8_0": "q8", "Q4_1": "q41", "Q4_0": "q40"}
for k, s in wf_short.items():
    glue(f"ch2_wf_bytes_{s}", fmt_bytes(wf_bytes[k]))
    glue(f"ch2_wf_t_{s}", fmt_seconds(wf_step[k]))
    glue(f"ch2_wf_ppl_{s}", f"{wf_ppl[k]:.2f}")
    glue(f"ch2_wf_agree_{s}", fmt_percent(wf_agree[k]))
glue("ch2_wf_bf16", fmt_bytes(quant.weight_bytes(wf_cfg, "bf16", roles=("matrix",))))
glue("ch2_wf_T", str(wf_T))
glue("ch2_wf_device", DEVICE)
glue("ch2_wf_byte_share", fmt_percent(wf_bytes["Q4_1"] / wf_bytes["float32"]))
glue("ch2_wf_time_share", fmt_percent(wf_step["Q4_1"] / wf_step["float32"]))
glue("ch2_wf_q8_ppl_tol", fmt_percent(Q8_PPL_TOLERANCE))
glue("ch2_wf_q8_agree_floor", fmt_percent(Q8_AGREEMENT_FLOOR))
glue("ch2_wf_q40_rise", fmt_percent(Q4_0_PPL_RISE))
glue("ch2_wf_dequant_floor", fmt_percent(DEQUANT_FLOOR))
glue("ch2_wf_here", bilingual(
    "This device is a CPU, so the chapter made that check here." if wf_on_cpu else
    "This device is not a CPU, so the chapter made no check of its times: they are what it "
    "measured.",
    zh="这台设备是 CPU，所以本章在这里做了这项检验。" if wf_on_cpu else
    "这台设备不是 CPU，所以本章没有检验它的时间：上面的数就是它测出来的。"))
Markdown("| layer matrices | estimator's format | bytes held | decode step, batch 1 | "
         "perplexity | same top token as float32 |\n|---|---|---:|---:|---:|---:|\n"
         + "\n".join(f"| {k} | `{wf_formats[k]}`{' × 2' if k == 'float32' else ''} | "
                     f"{fmt_bytes(wf_bytes[k])} | {fmt_seconds(wf_step[k])} | "
                     f"{wf_ppl[k]:.2f} | {fmt_percent(wf_agree[k])} |" for k in wf_names))

# %% [markdown]
# ```{glue:figure} ch2_wf_figure
# ```
#
# **Bytes.** The layer matrices hold {glue:text}`ch2_wf_bytes_f32` in float32
# ({glue:text}`ch2_wf_bf16` would be bfloat16's), {glue:text}`ch2_wf_bytes_q8` as Q8_0,
# {glue:text}`ch2_wf_bytes_q41` as Q4_1 and {glue:text}`ch2_wf_bytes_q40` as Q4_0: each is,
# to the byte, what the estimator counts for its format (the code asserts it). The 4-bit
# formats are not half of int8's bytes: the 16-bit scale, and Q4_1's minimum, weigh more
# against 16 bytes of codes than against 32.
#
# **Quality**, on the first {glue:text}`ch2_wf_T` tokens of the story: the perplexity and the
# share of positions at which each format's most likely next token is the float32 model's.
# Q4_1 gives float32's perplexity, {glue:text}`ch2_wf_ppl_f32`, as it must: they are the same
# numbers, decoded in the step or before it. Re-encoding them as Q8_0 is nearly lossless:
# perplexity {glue:text}`ch2_wf_ppl_q8`, within {glue:text}`ch2_wf_q8_ppl_tol` of float32's,
# and the same top token at {glue:text}`ch2_wf_agree_q8` of the positions (the chapter checks
# at least {glue:text}`ch2_wf_q8_agree_floor`) — with 127 codes on each side of zero, no
# weight moves by more than half its block's largest magnitude over 127. Q4_0 is a real loss: perplexity
# {glue:text}`ch2_wf_ppl_q40` (checked to be at least {glue:text}`ch2_wf_q40_rise` above
# float32's) and the same top token at only {glue:text}`ch2_wf_agree_q40`. Its sixteen codes
# are spread symmetrically around zero, so a block whose weights are not centred wastes some
# of them, where Q4_1's minimum places its sixteen codes exactly over the block's range; and
# these weights already sit on Q4_1's grid, so rounding them to another grid — nowhere finer,
# coarser wherever a block is off-centre — moves almost every one of them.
#
# **Time.** On {glue:text}`ch2_wf_device` a decode step at batch 1 took
# {glue:text}`ch2_wf_t_f32` with float32 layers, {glue:text}`ch2_wf_t_q8` with Q8_0,
# {glue:text}`ch2_wf_t_q41` with Q4_1 and {glue:text}`ch2_wf_t_q40` with Q4_0 (medians, the
# four timed in alternation). Q4_1 reads {glue:text}`ch2_wf_byte_share` of float32's layer
# bytes; its step took {glue:text}`ch2_wf_time_share` of float32's time. The roofline's
# prediction assumes the decoding is free, and where the same cores decode the blocks and do
# the arithmetic, it is not: XLA's CPU code turns every code back into a float32 number in
# every step, work comparable to reading the float32 bytes it saves. On a CPU the chapter
# checks that much, and no more: each 4-bit step takes at least
# {glue:text}`ch2_wf_dequant_floor` of the float32 step's time.
# {glue:text}`ch2_wf_here` On an accelerator, where bandwidth is scarcer than arithmetic,
# and with kernels written to decode the blocks in registers as they arrive (llama.cpp's, for
# one), fewer bytes are what make int4 worth it; the estimator's `--weights` option predicts
# that case, and only a measurement on the device says whether its kernels reach it.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_wf_figure
# ```
#
# **字节。** 层矩阵以 float32 存放时占 {glue:text}`ch2_wf_bytes_f32`（bfloat16 则是
# {glue:text}`ch2_wf_bf16`），Q8_0 占 {glue:text}`ch2_wf_bytes_q8`，Q4_1 占
# {glue:text}`ch2_wf_bytes_q41`，Q4_0 占 {glue:text}`ch2_wf_bytes_q40`：每一个都与估算器对其格式算出
# 的字节数一字节不差（代码断言了这一点）。4 位格式并不是 int8 字节数的一半：16 位的缩放因子，以及
# Q4_1 的最小值，相对 16 个字节的编码，比相对 32 个字节的编码分量更重。
#
# **质量**，在故事的前 {glue:text}`ch2_wf_T` 个词元上衡量：困惑度，以及每种格式最可能的下一个
# 词元与 float32 模型相同的位置所占的比例。Q4_1 的困惑度与 float32 相同，都是
# {glue:text}`ch2_wf_ppl_f32`，这是必然的：它们是同样的数，只是在步骤里解码还是在步骤之前解码。把它们
# 重新编码成 Q8_0 几乎没有损失：困惑度 {glue:text}`ch2_wf_ppl_q8`，与 float32 相差不到
# {glue:text}`ch2_wf_q8_ppl_tol`，最可能的词元在 {glue:text}`ch2_wf_agree_q8` 的位置上相同（本章检验
# 至少为 {glue:text}`ch2_wf_q8_agree_floor`）——正负两侧各有 127 个编码，每个权重最多移动块中最大权重
# 除以 127 的一半。Q4_0 则是实实在在的损失：困惑度 {glue:text}`ch2_wf_ppl_q40`（检验它至少比 float32
# 高 {glue:text}`ch2_wf_q40_rise`），最可能的词元只在 {glue:text}`ch2_wf_agree_q40` 的位置上相同。它的
# 十六个编码对称地分布在零的两侧，所以权重不以零为中心的块会浪费其中一些编码；而 Q4_1 的最小值把
# 十六个编码恰好铺在块的取值范围上。况且这些权重已经落在 Q4_1 的网格上，再舍入到另一个网格——它
# 没有一处更细，块的取值偏离零点的地方还更粗——几乎每个权重都会移动。
#
# **时间。** 在 {glue:text}`ch2_wf_device` 上，批次为 1 的解码步骤用 float32 层矩阵时耗时
# {glue:text}`ch2_wf_t_f32`，Q8_0 时 {glue:text}`ch2_wf_t_q8`，Q4_1 时 {glue:text}`ch2_wf_t_q41`，
# Q4_0 时 {glue:text}`ch2_wf_t_q40`（中位数，四者交替计时）。Q4_1 读取的层矩阵字节数是 float32 的
# {glue:text}`ch2_wf_byte_share`；它的步骤用了 float32 的 {glue:text}`ch2_wf_time_share` 的时间。屋顶线
# 的预测假定解码不花代价；而在同一些核心既要解码块又要做运算的地方，这并不成立：XLA 在 CPU 上生成的
# 代码在每一步都把每个编码变回一个 float32 数，这份工作与读取它省下的 float32 字节相当。在 CPU 上，
# 本章只检验这么多：每个 4 位格式的步骤至少要用 float32 步骤时间的
# {glue:text}`ch2_wf_dequant_floor`。{glue:text}`ch2_wf_here` 在加速器上，带宽比运算更稀缺，再配上在
# 寄存器里随到随解码的内核（例如 llama.cpp 的内核），字节更少正是 int4 值得使用的原因；估算器的
# `--weights` 选项预测的就是这种情形，而它的内核能否做到，只有在设备上测量才知道。

# %% [markdown]
# ```{admonition} Takeaways
# - An operation is compute-bound when its FLOPs per byte exceed the chip's $C / W$ — a few
#   hundred for current accelerators.
# - A weight matmul does about $B$ FLOPs per bfloat16 byte: prefill is compute-bound, decoding
#   needs $B_\text{crit} = (C / W) \cdot (\text{bytes per weight} / 2)$ sequences per step to
#   be. Quantized weights lower $B_\text{crit}$; quantized arithmetic raises it.
# - Decoding attention does about one FLOP per byte of KV cache at any batch size: it is always
#   memory-bound, and its cost grows with every sequence added.
# - On a real device the roofline is a floor. Measuring the kernels at the model's shapes turns
#   it into a prediction.
# - Fewer bytes per weight shorten a memory-bound step only where decoding them costs less
#   than reading the bytes they save: on the CPUs this book is built on, it does not. Quantizing a trained model's
#   weights further to 8 bits costs almost nothing; to a symmetric 4-bit grid, a measurable loss.
# ```

# %% [markdown] tags=["lang-zh"]
# ```{admonition} 要点
# - 当一个操作每字节的 FLOPs 超过芯片的 $C / W$ 时，它就是计算受限的——对当前的加速器而言，这个值
#   是几百。
# - 权重矩阵乘法每个 bfloat16 字节大约做 $B$ 次 FLOP：预填充是计算受限的；解码则要每步有
#   $B_\text{crit} = (C / W) \cdot (\text{每个权重的字节数} / 2)$ 个序列才能做到。量化的权重降低
#   $B_\text{crit}$；量化的运算则提高它。
# - 解码注意力在任何批量大小下，每字节 KV 缓存大约只做一次 FLOP：它总是内存受限的，而且每增加一个
#   序列，它的代价就随之增长。
# - 在真实设备上，屋顶线是一个下限。在模型的形状上测量内核，才能把它变成一个预测。
# - 每个权重的字节数减少，只有在解码它们比读取省下的字节更便宜时，才能缩短内存受限的步骤：在构建本书的 CPU
#   上并非如此。把训练好的模型的权重再量化到 8 位几乎没有代价；量化到对称的 4 位网格，则有可以测量
#   出来的损失。
# ```

# %% [markdown]
# ## Measured on real hardware
#
# The sweep above ran on whatever device is executing this page, with a few repeats. The
# library's benchmark, `inferbook bench` (`make bench` in a checkout), does the same work
# more thoroughly — batch sizes 1 to 256 at two context lengths, more repeats, prefill as well
# — and records the result, with the device, the date and the library and JAX versions, in a
# file under `book/data/bench/`. For each decode configuration it reports the *model bandwidth
# utilisation*: the bytes a step must move (every weight, every cached key and value) divided
# by the step time and by the run's read roof — the fastest that any read kernel, read again
# beside every configuration, or any decode step itself read memory during the whole run. A
# step is a read of its bytes, so the roof is never below it: no step can beat the roof it is
# measured against. Each timed call follows an untimed call of the same program, as a step
# follows a step in a generation, so that no call is charged for what a different program
# before it left behind (in the caches, or a thread pool gone idle); the record says so
# (`lead_in`). Every configuration, decode and prefill, carries the calibrated
# prediction. Here is every run on
# record: the measured time against the calibrated prediction.

# %% [markdown] tags=["lang-zh"]
# ## 在真实硬件上的测量
#
# 上面的扫描运行在正在执行这一页的设备上，只重复了几次。库的基准测试 `inferbook bench`（在代码
# 检出中用 `make bench`）做同样的工作，但更彻底——在两种上下文长度下测量批量大小 1 到 256，重复更多
# 次，还包括预填充——并把结果连同设备、日期以及库和 JAX 的版本，记录在 `book/data/bench/` 下的一个
# 文件里。对每个解码配置，它报告*模型带宽利用率*（MBU）：一步必须移动的字节（每个权重、每个缓存的
# 键和值）除以步骤时间，再除以这次运行的读取屋顶——在整次运行中，任何一个读取内核（在每个配置旁边
# 都重新读一次）或任何一个解码步骤本身读取内存的最快速度。一步就是对它的字节的一次读取，所以屋顶
# 从不低于它：没有哪一步能超过用来衡量它的屋顶。每次计时的调用之前，都先不计时地运行一次同一个程序，
# 就像生成时一步紧跟着一步，这样就没有哪次调用要为前面另一个程序留下的状态（缓存里的内容，或已经闲下
# 来的线程池）付出代价；记录里写明了这一点（`lead_in`）。每个配置，无论解码还是预填充，都带有校准后的预测。下面是
# 有记录的每一次运行：实测时间与校准后的预测相对照。

# %%
from inferbook.perf import bench_results

records = bench_results.load_results()
STATUS = {None: ("held to the targets", "按目标考核"),
          "gpu": ("not held: the targets are the CPU benchmark's", "不考核：这些目标属于 CPU 基准"),
          "model": ("not held: another model or dtype", "不考核：别的模型或数据类型"),
          "earlier": ("not held: recorded before the read roof", "不考核：记录于读取屋顶之前"),
          "load": ("not held: recorded under load", "不考核：有负载时记录")}
MARK = {True: ("met", "达到"), False: ("missed", "未达到"), None: ("not measured", "未测量")}


def label(rec, lang="en"):
    why = bench_targets.why_not_held(rec)
    extra = {"en": {"earlier": ", before the read roof", "load": ", under load"},
             "zh": {"earlier": "，读取屋顶之前", "load": "，有负载"}}[lang].get(why, "")
    sep = "，" if lang == "zh" else ", "
    return sep.join([rec["device"], f"{rec['model']} ({rec['dtype']})",
                     f"jax {rec['jax_version']}", rec["date"][:10]]) + extra


def target_cell(rec):
    why = bench_targets.why_not_held(rec)
    if why is not None:
        return STATUS[why][0]
    return "; ".join(f"{k.replace('_', ' ')}: {MARK[ok][0]}"
                     for k, ok in bench_targets.check(rec).items())


def percent_or_na(x, digits=0):
    return "n/a" if x is None else fmt_percent(x, digits)


# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 5))
for rec in records:
    rows = [r for r in rec["rows"] if r.get("predicted_s")]
    ax.loglog([r["measured_s"] * 1e3 for r in rows], [r["predicted_s"] * 1e3 for r in rows],
              "o" if bench_targets.held(rec) else "x", alpha=0.8, label=label(rec))
lo, hi = ax.get_xlim()
line = np.geomspace(lo, hi, 50)
ax.plot(line, line, "k-", lw=0.8, label="prediction = measurement")
ax.fill_between(line, (1 - TARGETS["worst_abs_error"]) * line,
                (1 + TARGETS["worst_abs_error"]) * line, color="gray", alpha=0.2,
                label=f"±{fmt_percent(TARGETS['worst_abs_error'])}")
ax.set_xlabel("measured step or prefill (ms)")
ax.set_ylabel("calibrated prediction (ms)")
ax.set_title("Measured against predicted, every run on record", fontsize=10)
ax.legend(fontsize=6, loc="upper left")
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch2_records_figure", fig, zh=dict(
    title="实测与预测对比，所有有记录的运行", xlabel="实测的步骤或预填充（ms）",
    ylabel="校准后的预测（ms）",
    legend=[label(rec, "zh") for rec in records]
    + ["预测 = 实测", f"±{fmt_percent(TARGETS['worst_abs_error'])}"]))

Markdown("| device | model | JAX | date | load at start | read roof | MBU at batch 1 "
         "| vs transformers | median \\|error\\| | worst \\|error\\| | targets |\n"
         "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|\n" + "\n".join(
             f"| {r['device']} | {r['model']} ({r['dtype']}) | {r['jax_version']} | "
             f"{r['date'][:10]} | {r['load_average_before'][0]:.1f} | "
             f"{fmt_rate(r['read_bytes_per_s'])} ({r.get('read_kernel') or 'one read'}) | "
             f"{fmt_percent(r['summary']['mbu_measured'])} | "
             + ("n/a" if not r["summary"].get("peer_speedup")
                else fmt_ratio(r["summary"]["peer_speedup"], 2)) + " | "
             f"{fmt_percent(r['summary']['median_abs_error'], 1)} | "
             f"{fmt_percent(r['summary']['worst_abs_error'], 1)} | {target_cell(r)} |"
             for r in records))

# %%
held = [r for r in records if bench_targets.held(r)]
for rec in held:        # every quiet CPU run of the benchmark model: what each target needs
    assert set(bench_targets.check(rec)) == set(TARGETS)    # (what it missed is stated below)
    decode_batches = {r["batch"] for r in rec["rows"] if r["kind"] == "decode"}
    assert 1 in decode_batches and any(r["kind"] == "prefill" for r in rec["rows"])
    assert all(r["mbu_measured"] <= 1.0 for r in rec["rows"])     # under the roof, by design


# %% tags=["hide-input"]
def held_sentence(rec, lang):
    results = bench_targets.check(rec)
    met = [k for k, ok in results.items() if ok]
    missed = [k for k, ok in results.items() if ok is False]
    unmeasured = [k for k, ok in results.items() if ok is None]
    when = f"jax {rec['jax_version']}, {rec['date'][:10]}" + (", quick" if rec["quick"] else "")
    words = {"mbu": ("MBU", "MBU"), "peer_speedup": ("the speedup over transformers",
                                                     "相对 transformers 的加速"),
             "median_abs_error": ("the median error", "误差中位数"),
             "worst_abs_error": ("the worst error", "最坏误差")}
    summary = rec["summary"]
    value = {"mbu": fmt_percent(summary["mbu_measured"], 1),
             "peer_speedup": fmt_ratio(summary.get("peer_speedup") or 0.0, 2),
             "median_abs_error": fmt_percent(summary["median_abs_error"], 1),
             "worst_abs_error": fmt_percent(summary["worst_abs_error"], 1)}
    if lang == "en":
        text = f"{when}: " + (", ".join(words[k][0] for k in met) + " met" if met else "")
        if missed:
            text += ("; " if met else "") + ", ".join(
                f"{words[k][0]} missed ({value[k]})" for k in missed)
    else:
        text = f"{when}：" + ("、".join(words[k][1] for k in met) + "达标" if met else "")
        if missed:
            text += ("；" if met else "") + "、".join(
                f"{words[k][1]}未达标（{value[k]}）" for k in missed)
    if unmeasured:
        text += (f" ({', '.join(words[k][0] for k in unmeasured)} not measured: no peer ran)"
                 if lang == "en" else
                 f"（{'、'.join(words[k][1] for k in unmeasured)}未测量：没有运行对比）")
    return text


glue("ch2_target_mbu", fmt_percent(TARGETS["mbu"]))
glue("ch2_target_peer", fmt_ratio(TARGETS["peer_speedup"], 0))
glue("ch2_target_median", fmt_percent(TARGETS["median_abs_error"]))
glue("ch2_target_worst", fmt_percent(TARGETS["worst_abs_error"]))
glue("ch2_quiet_share", fmt_percent(bench_targets.QUIET_LOAD_PER_CORE))
glue("ch2_held_runs", bilingual(
    "Held to them: " + "; ".join(held_sentence(r, "en") for r in held) + "."
    if held else "No run measured against the read roof has been recorded on a quiet machine "
    "yet: the runs above were recorded under load or before the read roof, and are shown "
    "for what they measured, not held to the targets.",
    zh=("按目标考核的运行：" + "；".join(held_sentence(r, "zh") for r in held) + "。")
    if held else "还没有在空闲机器上、以读取屋顶为准记录的运行：上面的运行要么是在有负载时记录的，"
    "要么记录于读取屋顶之前；它们按所测的内容展示，但不按目标考核。"))


def read_spread_sentence(runs):
    """What a typical read reached against the best one, in the held runs that kept the read
    kernels' medians: why a median step misses a roof set by the luckiest read."""
    kept = [r for r in runs if r["summary"].get("read_median_share")]
    if not kept:
        return "", ""
    shares = [r["summary"]["read_median_share"] for r in kept]
    steps = [r["summary"]["step_vs_read_median"] for r in kept]
    lo, hi = fmt_percent(min(shares)), fmt_percent(max(shares))
    s_lo, s_hi = fmt_percent(min(steps)), fmt_percent(max(steps))

    def span(a, b, sep):
        return a if a == b else f"{a}{sep}{b}"
    en = (f" The MBU target compares the step's median with the roof, and the roof is the best "
          f"call of the fastest read: in these runs the read kernels' own medians reached "
          f"{span(lo, hi, ' to ')} of their best run, so no median could come much nearer. "
          f"Like against like, the batch-1 step's median read its bytes at "
          f"{span(s_lo, s_hi, ' to ')} of the rate of the reads' medians.")
    zh = (f"MBU 目标拿步骤的中位数与屋顶相比，而屋顶是最快的读取内核最好的一次调用：在这些运行中，"
          f"读取内核自己的中位数只达到它们最好一次的 {span(lo, hi, '到')}，所以任何中位数都不可能"
          f"离屋顶近多少。同类相比，批次为 1 的步骤的中位数读取字节的速率，是读取内核中位数速率的 "
          f"{span(s_lo, s_hi, '到')}。")
    return en, zh


spread_en, spread_zh = read_spread_sentence(held)
glue("ch2_read_spread", bilingual(spread_en, zh=spread_zh))

# %% [markdown]
# ```{glue:figure} ch2_records_figure
# ```
#
# The book holds a CPU run of the benchmark model to four targets: an MBU of at least
# {glue:text}`ch2_target_mbu` at batch 1; at least {glue:text}`ch2_target_peer` the speed of
# transformers' `generate` per generated token, on the same architecture, weights and prompt,
# with its static cache (`--peer on`); and the calibrated prediction within
# {glue:text}`ch2_target_median` in the median over every decode and prefill configuration,
# {glue:text}`ch2_target_worst` at worst. They bind a run that started on a quiet machine — a
# 1-minute load average of at most {glue:text}`ch2_quiet_share` of the cores — because a
# measurement shared with other work says more about that work than about the library.
# `make bench` exits with an error when such a run misses one; the run is recorded all the
# same, and here is what each one met and missed. {glue:text}`ch2_held_runs`
# {glue:text}`ch2_read_spread`

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_records_figure
# ```
#
# 本书要求基准模型在 CPU 上的一次运行达到四个目标：批次为 1 时 MBU 至少 {glue:text}`ch2_target_mbu`；
# 每生成一个词元的速度，至少是 transformers 的 `generate`（同样的架构、权重和提示词，使用它的静态
# 缓存，`--peer on`）的 {glue:text}`ch2_target_peer`；校准后的预测在所有解码和预填充配置上的
# 误差中位数在 {glue:text}`ch2_target_median` 以内，最坏在 {glue:text}`ch2_target_worst` 以内。这些
# 目标约束的是在空闲机器上开始的运行——1 分钟平均负载至多为核心数的
# {glue:text}`ch2_quiet_share`——因为与其他工作共享机器时的测量，更多反映的是那些工作，而不是库。
# 这样的运行如果有一项未达标，`make bench` 就会以错误退出；运行照样记录在案，下面列出每一次达到了
# 哪些目标、没有达到哪些。{glue:text}`ch2_held_runs`
# {glue:text}`ch2_read_spread`

# %%
gpu_runs = [r for r in records if r["platform"] != "cpu"]


FLAT = 1.5          # "the step time stays within 1.5 times the batch-1 step"


def gpu_findings(rec):
    """What a GPU run on record shows at batch 1, in its own terms (no CPU target applies)."""
    cfg = get_preset(rec["model"])
    dec = [r for r in rec["rows"] if r["kind"] == "decode"]
    s = rec["summary"]
    first = next(r for r in dec if (r["batch"], r["context"]) == (s["batch"], s["context"]))
    short = [r for r in dec if r["context"] == s["context"]]
    peer = {p["name"].split(" (")[0]: p["seconds_per_token"] for p in rec.get("peer", [])}
    flat = [r for r in short if r["measured_s"] <= FLAT * first["measured_s"]]
    per_layer = [r["attention_s"] / cfg.L for r in dec]
    kv = [r["bytes"] - rec["weight_bytes"] for r in dec]
    return dict(first=first, skeleton=first.get("overhead_s", rec.get("overhead_s")),
                flat_batch=max(r["batch"] for r in flat), peer=peer, per_layer=per_layer,
                kv=kv, earlier="read_kernels" not in rec)


def gpu_sentence(rec):
    f = gpu_findings(rec)
    r1 = f["first"]
    v = dict(dev=rec["device"], jax=rec["jax_version"], model=rec["model"], dtype=rec["dtype"],
             t1=fmt_seconds(r1["measured_s"], 2), nbytes=fmt_bytes(r1["bytes"]),
             rate=fmt_rate(r1["bytes_per_s"]), spec=fmt_rate(rec["spec_bytes_per_s"]),
             spec_frac=fmt_percent(r1["bytes_per_s"] / rec["spec_bytes_per_s"]),
             roof=fmt_rate(rec["read_bytes_per_s"]),
             roof_frac=fmt_percent(r1["bytes_per_s"] / rec["read_bytes_per_s"]),
             skel=fmt_seconds(f["skeleton"], 2), flat=f["flat_batch"],
             skel_share=fmt_percent(f["skeleton"] / r1["measured_s"]), factor=fmt_ratio(FLAT),
             median=fmt_percent(rec["summary"]["median_abs_error"]),
             worst=fmt_percent(rec["summary"]["worst_abs_error"]),
             a_lo=fmt_seconds(min(f["per_layer"])), a_hi=fmt_seconds(max(f["per_layer"])),
             kv_lo=fmt_bytes(min(f["kv"])), kv_hi=fmt_bytes(max(f["kv"])))
    zv = {k: to_chinese(str(x)) for k, x in v.items()}
    en = ("{dev} (jax {jax}) ran {model} in {dtype}: at batch 1 a decode step took {t1}, moving "
          "{nbytes} at {rate} — {spec_frac} of the {spec} of its datasheet and {roof_frac} of "
          "the fastest read of the same run, {roof}. The skeleton's step alone, the same layers "
          "at tiny widths, took {skel}, {skel_share} of the step: costs that do not depend on "
          "the model's widths (launches, dispatch), not bytes. Up to batch {flat} the step "
          "stays within {factor} of its batch-1 time.").format(**v)
    zh = ("{dev}（jax {jax}）以 {dtype} 运行 {model}：批次为 1 时一个解码步骤耗时 {t1}，以 {rate} "
          "搬运 {nbytes}——是数据手册上 {spec} 的 {spec_frac}，是同一次运行中最快读取 {roof} 的 "
          "{roof_frac}。单是骨架模型（层相同、宽度极小）的一步就耗时 {skel}，占这一步的 "
          "{skel_share}：这是不取决于模型宽度的开销（内核启动、分派），而不是字节。直到批次 {flat}，"
          "步骤时间都保持在批次为 1 时的 {factor} 以内。").format(**zv)
    if "transformers generate" in f["peer"] and "inferbook decode.generate" in f["peer"]:
        ours, theirs = f["peer"]["inferbook decode.generate"], f["peer"]["transformers generate"]
        en += (f" Per generated token the library's `generate` took {fmt_seconds(ours, 2)} and "
               f"transformers' (static cache, torch.compile) {fmt_seconds(theirs, 2)}.")
        zh += (f"每生成一个词元，库的 `generate` 耗时 {to_chinese(fmt_seconds(ours, 2))}，"
               f"transformers（静态缓存，torch.compile）耗时 {to_chinese(fmt_seconds(theirs, 2))}。")
    if f["earlier"]:
        en += (" Its calibrated prediction was off by {median} in the median and {worst} at "
               "worst, because it was recorded before the prediction counted fixed costs once: "
               "its attention term, one layer's program times L, took {a_lo} to {a_hi} per "
               "layer whether the caches held {kv_lo} or {kv_hi} — a per-call cost, counted L "
               "times, on top of the matmul program's and the skeleton's own.").format(**v)
        zh += ("它的校准预测误差中位数为 {median}，最坏为 {worst}，因为它记录于预测只计一次固定开销"
               "之前：它的注意力项是单层程序的时间乘以 L，无论缓存是 {kv_lo} 还是 {kv_hi}，每层都要 "
               "{a_lo} 到 {a_hi}——这是每次调用的开销，被计了 L 次，还叠加在矩阵乘法程序和骨架模型"
               "自己的开销之上。").format(**zv)
    else:
        en += " Its calibrated prediction was off by {median} in the median, {worst} at worst.".format(**v)
        zh += "它的校准预测误差中位数为 {median}，最坏为 {worst}。".format(**zv)
    return en, zh


gpu_text = [gpu_sentence(r) for r in gpu_runs]
glue("ch2_gpu_runs", bilingual(
    " ".join(en for en, _ in gpu_text) if gpu_text else "No GPU run is on record yet.",
    zh="".join(zh for _, zh in gpu_text) if gpu_text else "目前还没有 GPU 运行的记录。"))

# %% [markdown]
# The targets are for this CPU and its benchmark model; a GPU run is on record for what it
# shows. {glue:text}`ch2_gpu_runs`

# %% [markdown] tags=["lang-zh"]
# 这些目标是为这台 CPU 和它的基准模型设定的；GPU 运行按它所展示的内容记录在案。
# {glue:text}`ch2_gpu_runs`

# %% [markdown]
# ### Two versions of JAX on one machine
#
# Colab runs an older JAX than this book's build machine, and XLA's CPU compiler changed in
# between. Here are the benchmark runs of this CPU under each version side by side: the decode
# step across batch sizes at the shorter context, and the batch-1 step against the read roof.

# %% [markdown] tags=["lang-zh"]
# ### 同一台机器上的两个 JAX 版本
#
# Colab 运行的 JAX 比本书的构建机器上的旧，而 XLA 的 CPU 编译器在两者之间有了变化。下面把这台 CPU
# 在每个版本下的基准测试运行并排放在一起：较短上下文下各个批量大小的解码步骤，以及批次为 1 的步骤
# 相对于读取屋顶的比例。

# %%
cpu_runs = [r for r in records if r["platform"] == "cpu" and not r["quick"]
            and r["model"] == bench_results.default_model("cpu")]
# Per version, the run that says most: measured against the read roof, on a quiet machine,
# the latest (records load oldest first).
by_version = {}
for rec in sorted(cpu_runs, key=lambda r: ("read_kernels" in r, bench_targets.quiet(r),
                                            r["date"])):
    by_version[rec["jax_version"]] = rec
versions = sorted(by_version, key=lambda v: tuple(int(x) for x in v.split(".")))
WHY = {None: ("", ""), "earlier": (" (before the read roof)", "（读取屋顶之前）"),
       "load": (" (under load)", "（有负载）")}


def decode_rows(rec, context):
    return sorted((r for r in rec["rows"] if r["kind"] == "decode" and r["context"] == context),
                  key=lambda r: r["batch"])


context0 = min(r["context"] for r in cpu_runs[0]["rows"] if r["kind"] == "decode")
mbu1 = [by_version[v]["summary"]["mbu_measured"] for v in versions]
why = {v: bench_targets.why_not_held(by_version[v]) for v in versions}

# %% tags=["hide-input"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
for v in versions:
    rows = decode_rows(by_version[v], context0)
    ax1.loglog([r["batch"] for r in rows], [r["measured_s"] * 1e3 for r in rows], "o-",
               label=f"jax {v}" + WHY[why[v]][0])
ax1.set_xlabel("batch size B")
ax1.set_ylabel(f"decode step, context {context0} (ms)")
ax1.legend(fontsize=8)
ax1.grid(True, which="both", alpha=0.3)
ax2.bar([f"jax {v}" for v in versions], [100 * m for m in mbu1], color="tab:blue")
ax2.axhline(100 * TARGETS["mbu"], color="gray", ls=":", label="target")
ax2.set_ylabel("batch-1 step, % of the read roof")
ax2.legend(fontsize=8)
fig.suptitle(f"{cpu_runs[0]['model']} on {cpu_runs[0]['device']}, by JAX version",
             fontsize=10)
fig.tight_layout()
glue_figure("ch2_versions_figure", fig, zh=[
    dict(xlabel="批量大小 B", ylabel=f"解码步骤，上下文 {context0}（ms）",
         legend=[f"jax {v}" + WHY[why[v]][1] for v in versions],
         suptitle=f"{cpu_runs[0]['device']} 上的 {cpu_runs[0]['model']}，按 JAX 版本"),
    dict(ylabel="批次为 1 的步骤，占读取屋顶的 %", legend=["目标"])],
    keep=[f"jax {v}" for v in versions])

Markdown("| JAX | date | load at start | step at batch 1 | at batch 8 | batch 1, % of the "
         "read roof | model's matmuls at batch 8 | held to the targets |\n"
         "|---|---|---:|---:|---:|---:|---:|---|\n" + "\n".join(
             f"| {v} | {r['date'][:10]} | {r['load_average_before'][0]:.1f} | "
             f"{fmt_seconds(step[1], 1)} | {fmt_seconds(step[8], 1)} | "
             f"{fmt_percent(r['summary']['mbu_measured'])} | {fmt_seconds(mm[8], 1)} | "
             f"{STATUS[why[v]][0]} |"
             for v in versions for r in [by_version[v]]
             for step in [{x['batch']: x['measured_s'] for x in decode_rows(r, context0)}]
             for mm in [{x['batch']: x['matmul_s'] for x in decode_rows(r, context0)}]))

# %%
old, new = versions[0], versions[-1]
# The matmuls alone, at the largest batch both runs measured.
matmul_at = {v: {r["batch"]: r["matmul_s"] for r in decode_rows(by_version[v], context0)}
             for v in versions}
B_top = max(set(matmul_at[old]) & set(matmul_at[new]))
not_held = [v for v in versions if why[v] is not None]

# %% tags=["hide-input"]
glue("ch2_jax_old", old)
glue("ch2_jax_new", new)
glue("ch2_jax_B", str(B_top))
glue("ch2_jax_mm_old", fmt_seconds(matmul_at[old][B_top]))
glue("ch2_jax_mm_new", fmt_seconds(matmul_at[new][B_top]))
glue("ch2_jax_status",
     bilingual("Every version's run is held to the targets: measured against the read roof on "
               "a quiet machine.",
               zh="每个版本的运行都按目标考核：在空闲机器上、以读取屋顶为准测得。")
     if not not_held else
     bilingual("The runs of jax " + " and ".join(f"{v}{WHY[why[v]][0]}" for v in not_held)
               + " are not held to the targets: their figures are shown for what they measured.",
               zh="jax " + "、".join(f"{v}{WHY[why[v]][1]}" for v in not_held)
               + " 的运行不按目标考核：它们的数字按所测的内容展示。"))

# %% [markdown]
# ```{glue:figure} ch2_versions_figure
# ```
#
# {glue:text}`ch2_jax_status` The two versions compile the same program differently. Under
# jax {glue:text}`ch2_jax_old` (Colab's), XLA:CPU used to rewrite the cache write of every decode
# step — a scatter into each sequence's slot of a [B, K, S, H] array — by moving the indexed
# axes to the front: it transposed every layer's whole cache, wrote the new token and
# transposed it back, two copies of the cache per step, which made every batch beyond the first
# few sequences markedly slower than under {glue:text}`ch2_jax_new` (the copies grow with the
# batch and the context). The library now writes
# the cache as a scatter into rows of a [B·K, S, H] view (`kvcache.write`), whose indexed axes
# are already in front, and a test compiles the append under each version and checks that no
# copy of the cache is left. What remains between the versions is in the matmuls themselves,
# which XLA hands to different kernels in each: the table's matmul column is the model's weight
# products timed alone. At batch {glue:text}`ch2_jax_B` they take {glue:text}`ch2_jax_mm_old`
# under jax {glue:text}`ch2_jax_old` and {glue:text}`ch2_jax_mm_new` under
# {glue:text}`ch2_jax_new`: the same shapes, the same weights, another compiler — a limit of
# XLA's, not of the model's code, and one the calibrated prediction already carries, since it
# times the matmuls under the version it runs on.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch2_versions_figure
# ```
#
# {glue:text}`ch2_jax_status` 两个版本对同一个程序的编译方式不同。在 jax {glue:text}`ch2_jax_old`
# （Colab 的版本）下，XLA:CPU 以前会改写每个解码步骤中的缓存写入——向一个 [B, K, S, H] 数组中每个
# 序列的槽位做 scatter——办法是把被索引的轴移到最前面：它转置每一层的整个缓存，写入新词元，再转置
# 回来，每一步要复制两次缓存。这使得除了最初几个序列之外，每个批次都明显比在
# {glue:text}`ch2_jax_new` 下慢（这些复制随批次和上下文而增长）。库现在把缓存写入实现为对一个
# [B·K, S, H] 视图的行做 scatter（`kvcache.write`），它被索引的轴本来就在最前面；一个测试在每个版本
# 下编译这个追加操作，并检查没有留下任何缓存的副本。两个版本之间剩下的差别在矩阵乘法本身：XLA 在
# 两个版本中把它们交给不同的内核。表中的矩阵乘法一列，是模型的权重乘积单独计时的结果。在批次
# {glue:text}`ch2_jax_B` 时，它们在 jax {glue:text}`ch2_jax_old` 下耗时 {glue:text}`ch2_jax_mm_old`，
# 在 {glue:text}`ch2_jax_new` 下耗时 {glue:text}`ch2_jax_mm_new`：同样的形状，同样的权重，换了一个
# 编译器——这是 XLA 的局限，而不是模型代码的局限，而且校准后的预测已经把它考虑在内，因为它是在自己
# 所运行的版本下为矩阵乘法计时的。

# %% [markdown]
# ### What moved the number
#
# A batch-1 step is a read of the weights, so how close it comes to the read roof depends on
# how the library asks XLA to read them. `inferbook bench --levers` (`--save` keeps the result
# in `book/data/decode_levers/`) times the library's step with and without each lever, in
# alternation, on the benchmark model with a 128-token cache; the table holds the latest
# recorded run under each JAX version. {glue:text}`ch2_levers_status`

# %% [markdown] tags=["lang-zh"]
# ### 是什么改变了这个数
#
# 批次为 1 的一步就是对权重的一次读取，所以它离读取屋顶有多近，取决于库怎样让 XLA 读取它们。
# `inferbook bench --levers`（加上 `--save` 会把结果保存在 `book/data/decode_levers/`）在基准模型、
# 128 个词元的缓存上，交替测量库的步骤在用与不用每个手段时的时间；表中是每个 JAX 版本最近一次记录的
# 运行。{glue:text}`ch2_levers_status`

# %%
from inferbook.book import bookdata

lever_runs = bookdata.records("decode_levers/index.json")
latest = {}
for rec in sorted(lever_runs, key=lambda r: (bench_targets.quiet(r), r["date"])):
    latest[rec["jax_version"]] = rec
lever_versions = sorted(latest, key=lambda v: tuple(int(x) for x in v.split(".")))
assert lever_versions, "no run of `inferbook bench --levers` on record"


def lever(v, name):
    return next(x for x in latest[v]["levers"] if x["lever"] == name)


def change_words(x):
    """A change of step time in words: 'a 31% shorter step' / 'a 2.5× longer step'."""
    c = x["after_s"] / x["before_s"]
    size = (fmt_percent(abs(c - 1), 0 if abs(c - 1) >= 0.1 else 1) if 0.5 < c < 2
            else fmt_ratio(max(c, 1 / c)))
    return bilingual(f"a {size} {'shorter' if c < 1 else 'longer'} step",
                     zh=f"步骤{'缩短' if c < 1 else '延长'} {to_chinese(size)}")


# %% tags=["hide-input"]
names = [x["lever"] for x in latest[lever_versions[-1]]["levers"]]
Markdown("| lever | " + " | ".join(f"jax {v}: before → after" for v in lever_versions)
         + " |\n|---|" + "---:|" * len(lever_versions) + "\n" + "\n".join(
             f"| {name} | " + " | ".join(
                 f"{fmt_seconds(x['before_s'], 2)} → {fmt_seconds(x['after_s'], 2)} "
                 f"({x['change']:+.0%})" for v in lever_versions for x in [lever(v, name)])
             + " |" for name in names))

# %% tags=["hide-input"]
loaded = [v for v in lever_versions if not bench_targets.quiet(latest[v])]
glue("ch2_levers_status", bilingual(
    "Each was recorded on a quiet machine." if not loaded else
    "Recorded while other work loaded the machine (jax " + ", ".join(
        f"{v}: load {latest[v]['load_average_before'][0]:.1f}" for v in loaded)
    + "), these figures are provisional: a quiet machine's may differ.",
    zh="每一次都是在空闲的机器上记录的。" if not loaded else
    "这些数字记录于机器上还有其他工作的时候（jax " + "，".join(
        f"{v}：负载 {latest[v]['load_average_before'][0]:.1f}" for v in loaded)
    + "），只是暂定的：空闲机器上的结果可能不同。"))
for key, v in (("old", lever_versions[0]), ("new", lever_versions[-1])):
    glue(f"ch2_lv_{key}", v)
    layout = (lever(v, "fused projections"), lever(v, "matrices stored [out, in]"))
    glue(f"ch2_lv_{key}_fused", change_words(layout[0]))
    glue(f"ch2_lv_{key}_t", change_words(layout[1]))
    glue(f"ch2_lv_{key}_weights", fmt_seconds(layout[0]["before_s"], 1))
    glue(f"ch2_lv_{key}_decode", fmt_seconds(layout[1]["after_s"], 1))
    glue(f"ch2_lv_{key}_b8", change_words(lever(v, "the decode layout at batch 8")))
    glue(f"ch2_lv_{key}_one", change_words(lever(v, "the append in the step's program")))
    glue(f"ch2_lv_{key}_bf16", change_words(
        lever(v, "bfloat16 weights, widened in the product")))
    for name, short in (("one core instead of all", "core"), ("synchronous dispatch", "sync"),
                        ("XNNPACK for the products (XLA flag)", "xnn")):
        found = [x for x in latest[v]["levers"] if x["lever"] == name]
        glue(f"ch2_lv_{key}_{short}", change_words(found[0]) if found else
             bilingual("not measured", zh="未测量"))

# %% [markdown]
# Each lever's change to the step under jax {glue:text}`ch2_lv_new`, and in parentheses under
# {glue:text}`ch2_lv_old`:
#
# - **Fused projections** — $W_Q$, $W_K$, $W_V$ side by side as one matrix, and $W_\text{gate}$,
#   $W_\text{up}$ as another: one product reads what three (two) did. Alone it gave
#   {glue:text}`ch2_lv_new_fused` ({glue:text}`ch2_lv_old_fused`).
# - **Matrices stored [out, in]** — each output's weights contiguous, the layout a
#   matrix–vector kernel streams fastest, and the one PyTorch keeps: {glue:text}`ch2_lv_new_t`
#   ({glue:text}`ch2_lv_old_t`). The two together are the library's *decode layout*
#   (`model.decode_layout`): the step went from {glue:text}`ch2_lv_new_weights` to
#   {glue:text}`ch2_lv_new_decode` ({glue:text}`ch2_lv_old_weights` to
#   {glue:text}`ch2_lv_old_decode`).
# - **The same layout at batch 8**, where the products are matrix–matrix ones:
#   {glue:text}`ch2_lv_new_b8` ({glue:text}`ch2_lv_old_b8`). Where that is a longer step,
#   XLA multiplies a few rows by an [out, in] matrix worse than by an [in, out] one; so the
#   library's decode steps read the decode layout at batch 1 and the weights' own layout
#   above it (`decode_layout.for_batch`), and so does `inferbook bench`.
# - **The append in the step's program**, its cache donated: one dispatch fewer, but XLA
#   copies every layer's cache, which the program both reads and writes —
#   {glue:text}`ch2_lv_new_one` ({glue:text}`ch2_lv_old_one`). `decode.generate` keeps the
#   append in a program of its own.
# - **bfloat16 weights, widened inside each product** — half the bytes to read:
#   {glue:text}`ch2_lv_new_bf16` ({glue:text}`ch2_lv_old_bf16`), depending on whether XLA
#   fuses the conversion into the product or converts every weight first. The book's CPU
#   model stays in float32.
# - **One core instead of all** — the whole process kept to one core:
#   {glue:text}`ch2_lv_new_core` ({glue:text}`ch2_lv_old_core`): what the other cores add to
#   the read.
# - **Synchronous dispatch** (`jax_cpu_enable_async_dispatch` off, each step run on the
#   calling thread): {glue:text}`ch2_lv_new_sync` ({glue:text}`ch2_lv_old_sync`).
# - **XNNPACK for the products**, an XLA flag: {glue:text}`ch2_lv_new_xnn`
#   ({glue:text}`ch2_lv_old_xnn`).
#
# The last two change the whole process, and their effect differs between the versions, so
# the library sets neither.

# %% [markdown] tags=["lang-zh"]
# 下面是每个手段在 jax {glue:text}`ch2_lv_new` 下对步骤的改变，括号里是在 {glue:text}`ch2_lv_old` 下的：
#
# - **融合投影**——把 $W_Q$、$W_K$、$W_V$ 并排成一个矩阵，把 $W_\text{gate}$、$W_\text{up}$ 并排成另一个：
#   一次乘积读完原来三次（两次）读的东西。单独使用时它带来 {glue:text}`ch2_lv_new_fused`
#   （{glue:text}`ch2_lv_old_fused`）。
# - **矩阵按 [out, in] 存放**——每个输出的权重连续存放，这是矩阵–向量内核读得最快的布局，也是
#   PyTorch 保存的布局：{glue:text}`ch2_lv_new_t`（{glue:text}`ch2_lv_old_t`）。两者合起来就是库的
#   *解码布局*（`model.decode_layout`）：步骤从 {glue:text}`ch2_lv_new_weights` 变为
#   {glue:text}`ch2_lv_new_decode`（{glue:text}`ch2_lv_old_weights` 变为
#   {glue:text}`ch2_lv_old_decode`）。
# - **批次为 8 时的同一布局**，这时的乘积是矩阵–矩阵乘积：{glue:text}`ch2_lv_new_b8`
#   （{glue:text}`ch2_lv_old_b8`）。如果步骤因此变长，说明 XLA 用 [out, in] 矩阵乘几行时比用
#   [in, out] 矩阵更差；所以库的解码步骤在批次为 1 时读取解码布局，批次更大时读取权重原来的布局
#   （`decode_layout.for_batch`），`inferbook bench` 也是如此。
# - **在步骤自己的程序里追加**，并捐出它的缓存：少一次分派，但 XLA 会复制每一层的缓存，因为这个
#   程序既读它又写它——{glue:text}`ch2_lv_new_one`（{glue:text}`ch2_lv_old_one`）。
#   `decode.generate` 把追加留在单独的程序里。
# - **bfloat16 权重，在每个乘积中加宽**——要读的字节减半：{glue:text}`ch2_lv_new_bf16`
#   （{glue:text}`ch2_lv_old_bf16`），取决于 XLA 是把转换融合进乘积，还是先把每个权重都转换一遍。
#   本书的 CPU 模型仍然使用 float32。
# - **只用一个核心**——整个进程只留在一个核心上：{glue:text}`ch2_lv_new_core`
#   （{glue:text}`ch2_lv_old_core`）：这就是其他核心为读取带来的。
# - **同步分派**（关掉 `jax_cpu_enable_async_dispatch`，每一步都在调用它的线程上运行）：
#   {glue:text}`ch2_lv_new_sync`（{glue:text}`ch2_lv_old_sync`）。
# - **乘积交给 XNNPACK**，一个 XLA 选项：{glue:text}`ch2_lv_new_xnn`（{glue:text}`ch2_lv_old_xnn`）。
#
# 最后两项改变的是整个进程，而且它们在两个版本中的效果不同，所以库两者都不设置。
