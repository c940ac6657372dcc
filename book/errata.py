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
# # Errata: where the sources disagree
#
# The book computes every number from the library, so it inherits none of its sources' slips.
# This page lists the places where the sources disagree with each other or with their own
# formulas, says what the library computes instead, and why. The sources' figures come from
# `book/data/scaling_book_published.json` (the scaling book, *All About Transformer
# Inference* {cite:p}`austin2025scaling`, in its close translation and its freer rendering) and
# `book/data/kipply_assumptions.json` and `book/data/kipply_fastertransformer.csv`
# ({cite:t}`chen2022arithmetic`), and `book/data/lienhart_kv_caching.json`
# ({cite:t}`lienhart2023kvcache`). Each item's code is one click away, and every claim on the
# page is an assertion that ran when the book was built.

# %% [markdown] tags=["lang-zh"]
# # 勘误：原文彼此不一致之处
#
# 本书的每个数字都由库计算，所以不会继承原文的任何笔误。本页列出原文彼此矛盾、或与其自身公式不符的
# 地方，说明库算出的结果以及理由。原文中的数值取自 `book/data/scaling_book_published.json`（《How
# to Scale Your Model》第 7 部分 *All About Transformer Inference* {cite:p}`austin2025scaling`，包括
# 它的直译本和较自由的译本）、`book/data/kipply_assumptions.json` 与 `book/data/kipply_fastertransformer.csv`
# （{cite:t}`chen2022arithmetic`），以及 `book/data/lienhart_kv_caching.json`
# （{cite:t}`lienhart2023kvcache`）。每一条的代码都只需点一下就能看到，页面上的每一个论断都是一条
# 在构建本书时运行过的断言。

# %% tags=["hide-input"]
import dataclasses
import math

import inferbook

info = inferbook.setup()

from IPython.display import Markdown

from inferbook.book import bookdata
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)
from inferbook.model.features import MoE
from inferbook.model.presets import get_preset
from inferbook.perf import comm_time, counts, decode_roofline, estimator, latency, params, roofline
from inferbook.perf.hardware import get_chip
from inferbook.perf.step_cost import step_time, work_time

book = bookdata.load("scaling_book_published.json")
kipply = bookdata.load("kipply_assumptions.json")
lienhart = bookdata.load("lienhart_kv_caching.json")
v5e_slices = bookdata.load("tpu_v5e_slices.json")
ft_runs = bookdata.load("kipply_fastertransformer.csv")
v5e, a100, h100 = get_chip("TPU v5e"), get_chip("A100 40GB"), get_chip("H100 SXM")

# %% [markdown]
# ## The scaling book
#
# ### TPU v5e memory bandwidth: 8.1e11 or 8.2e11 B/s?
#
# The quiz and the worked problems divide by {glue:text}`err_bw_81` per chip, the sections on
# linear operations and the LLaMA-2 13B tables by {glue:text}`err_bw_82`. Google's documentation
# gives {glue:text}`err_bw_reg`, the registry's value, which every number in this book uses.
# The critical batch is {glue:text}`err_bcrit_v5e` with it — 240 either way, as the sources
# say — and a memory-bound step time moves by at most {glue:text}`err_bw_spread` between the
# three figures.

# %% [markdown] tags=["lang-zh"]
# ## 《How to Scale Your Model》
#
# ### TPU v5e 的内存带宽：8.1e11 还是 8.2e11 B/s？
#
# 小测验和例题按每个芯片 {glue:text}`err_bw_81` 来除，讲线性运算的各节和 LLaMA-2 13B 的表格则按
# {glue:text}`err_bw_82`。Google 的文档给出的是 {glue:text}`err_bw_reg`，也就是注册表中的值，本书的
# 每一个数字都用它。用这个值，临界批量大小为 {glue:text}`err_bcrit_v5e`——无论用哪个值都是 240，
# 与原文所说一致——而在这三个数值之间，一个内存受限的步骤时间最多变化 {glue:text}`err_bw_spread`。

# %% tags=["hide-input"]
used = book["v5e_hbm_bytes_per_s_used"]
bw81, bw82 = used["quiz_and_worked_problems"], used["linear_operations_and_llama_tables"]
assert bw81 < v5e.hbm_bytes_per_s < bw82
spread = bw82 / bw81 - 1
assert spread < 0.015
assert abs(roofline.critical_batch(v5e) - book["b_crit"]["TPU v5e"]) < 1
glue("err_bw_81", fmt_rate(bw81)); glue("err_bw_82", fmt_rate(bw82))
glue("err_bw_reg", fmt_rate(v5e.hbm_bytes_per_s))
glue("err_bcrit_v5e", f"{roofline.critical_batch(v5e):.1f}")
glue("err_bw_spread", fmt_percent(spread, 1));

# %% [markdown]
# ### The LLaMA-2 13B tables: units and the out-of-memory batch
#
# The tables for eight TPU v5e chips use {glue:text}`err_t_bw_used` of aggregate bandwidth
# (eight times {glue:text}`err_bw_82`) and call it "{glue:text}`err_t_bw_label`"; in binary units that is
# {glue:text}`err_t_bw_tib` TiB/s. The memory columns are labelled GiB but hold decimal
# gigabytes: one 8,192-token cache is printed as {glue:text}`err_t_kv_label` "GiB", which is
# {glue:text}`err_t_kv` — {glue:text}`err_t_kv_gib` GiB. The slice's
# "{glue:text}`err_t_hbm_label`" is eight chips of {glue:text}`err_t_hbm_chip`. The book writes
# decimal units throughout. The step times agree with the library's to within
# {glue:text}`err_t_step_diff` at every batch size (the library uses the registry's bandwidth
# and the exact {glue:text}`err_t_params` parameters):

# %% [markdown] tags=["lang-zh"]
# ### LLaMA-2 13B 的表格：单位与内存不足的批次
#
# 针对八个 TPU v5e 芯片的表格使用 {glue:text}`err_t_bw_used` 的总带宽（8 个芯片，每个
# {glue:text}`err_bw_82`），并称之为“{glue:text}`err_t_bw_label`”；换成二进制单位，它是
# {glue:text}`err_t_bw_tib` TiB/s。内存各列标的是 GiB，填的却是十进制的 GB：一个 8,192 词元（token）的缓存
# 印作 {glue:text}`err_t_kv_label` “GiB”，实际是 {glue:text}`err_t_kv`——即
# {glue:text}`err_t_kv_gib` GiB。这个切片的“{glue:text}`err_t_hbm_label`”是八个各有
# {glue:text}`err_t_hbm_chip` 的芯片。本书通篇使用十进制单位。在每一种批量大小下，步骤时间与库算出的
# 相差都在 {glue:text}`err_t_step_diff` 以内（库使用注册表中的带宽和精确的参数量
# {glue:text}`err_t_params`）：

# %% tags=["hide-input"]
tab = book["llama2_13b_tables"]
llama = get_preset("llama-2-13b")
S, chips = tab["context"], tab["chips"]
W_used = tab["bandwidth_used_bytes_per_s"]
assert W_used == chips * bw82
kv_1 = counts.kv_cache_bytes(llama, 1, S)
assert round(kv_1 / 1e9, 1) == tab["kv_gib"][0]           # the "GiB" figure is decimal GB
assert round(kv_1 / 2 ** 30, 1) != tab["kv_gib"][0]
weights = counts.param_bytes(llama)
rows, diffs = [], []
for variant, kv_cfg, published in (("K = 40", llama, tab),
                                   ("K = 8", llama.replace(K=8), tab["small_kv"])):
    for B, ms in zip(tab["batch"], published["step_ms"]):
        kv = counts.kv_cache_bytes(kv_cfg, B, S)
        ours = step_time(decode_roofline.decode_step_cost(counts.param_count(llama), weights, kv, B), v5e, chips)
        diffs.append(abs(ours * 1e3 / ms - 1))
        rows.append(f"| {variant} | {B} | {ms} ms | {fmt_seconds(ours, 2)} |")
assert max(diffs) < 0.01
largest = roofline.max_batch(llama, v5e, S, chips)
total_16 = weights + counts.kv_cache_bytes(llama, 16, S)
assert largest == 15 and total_16 > chips * v5e.hbm_bytes
glue("err_t_bw_used", fmt_rate(W_used, digits=2)); glue("err_t_bw_label", tab["hbm_bandwidth_label"])
glue("err_t_bw_tib", f"{W_used / 2 ** 40:.2f}")
glue("err_t_kv_label", str(tab["kv_gib"][0])); glue("err_t_kv", fmt_bytes(kv_1, 2))
glue("err_t_kv_gib", f"{kv_1 / 2 ** 30:.2f}")
glue("err_t_hbm_label", tab["hbm_label"]); glue("err_t_hbm_chip", fmt_bytes(v5e.hbm_bytes, 0))
glue("err_t_step_diff", fmt_percent(max(diffs), 1))
glue("err_t_params", fmt_count(counts.param_count(llama), 2))
glue("err_t_16", fmt_bytes(total_16)); glue("err_t_hbm", fmt_bytes(chips * v5e.hbm_bytes, 0))
glue("err_t_largest", str(largest))
glue("err_oom_000", book["llama2_13b_tables"]["oom_text_000"])
Markdown("| KV heads | batch | published step time | library |\n|---|---:|---:|---:|\n"
         + "\n".join(rows))

# %% [markdown]
# The close translation says the model runs out of memory at batch sizes "beyond 16"
# ("{glue:text}`err_oom_000`"); the freer rendering says batch 16 already does. The second is
# right: batch 16 needs {glue:text}`err_t_16` against {glue:text}`err_t_hbm`, and the largest
# batch that fits is {glue:text}`err_t_largest`.
#
# ### The H100's critical batch
#
# The scaling book puts the H100's critical batch at "about {glue:text}`err_h100_pub`"; the
# freer rendering's table derives it as "{glue:text}`err_h100_table`". The H100 SXM's dense
# bfloat16 peak over its bandwidth gives {glue:text}`err_h100_ours`. The table's numerator is
# {glue:text}`err_h100_x` the dense bfloat16 peak — NVIDIA's FP8 figure *with* 2:4 sparsity —
# and would give {glue:text}`err_h100_sparse`.

# %% [markdown] tags=["lang-zh"]
# 直译本说模型在批量大小“超过 16”时内存不足（“{glue:text}`err_oom_000`”）；较自由的译本则说批次为
# 16 时就已经不足。后者是对的：批次为 16 时需要 {glue:text}`err_t_16`，而可用的是
# {glue:text}`err_t_hbm`，放得下的最大批次是 {glue:text}`err_t_largest`。
#
# ### H100 的临界批量大小
#
# 《How to Scale Your Model》把 H100 的临界批量大小定为“约 {glue:text}`err_h100_pub`”；较自由的译本在表格中把它
# 推导为“{glue:text}`err_h100_table`”。用 H100 SXM 稠密 bfloat16 的峰值除以它的带宽，得到
# {glue:text}`err_h100_ours`。那张表的分子是稠密 bfloat16 峰值的 {glue:text}`err_h100_x`——那是
# NVIDIA *带* 2:4 稀疏的 FP8 数值——由它得到的是 {glue:text}`err_h100_sparse`。

# %% tags=["hide-input"]
h100_bcrit = roofline.critical_batch(h100)
assert abs(h100_bcrit - book["b_crit"]["H100"]) / h100_bcrit > 0.04
glue("err_h100_pub", str(book["b_crit"]["H100"]))
glue("err_h100_table", book["b_crit"]["h100_table_002"])
glue("err_h100_ours", f"{h100_bcrit:.0f}")
table_flops = book["b_crit"]["h100_table_002_flops"]
assert abs(table_flops / (4 * h100.bf16_flops_per_s) - 1) < 0.02
glue("err_h100_sparse", f"{table_flops / h100.hbm_bytes_per_s:,.0f}")
glue("err_h100_x", fmt_ratio(table_flops / h100.bf16_flops_per_s, 0));

# %% [markdown]
# ### Worked problems 1–3: the invented 18.4B model
#
# Problem 1 asks for the KV cache per token in int8. The close translation answers
# $L \cdot K \cdot H$ = {glue:text}`err_p1_000`, counting keys but not values; the freer
# rendering answers $2 \cdot L \cdot K \cdot H$ = {glue:text}`err_p1_002`. The library's
# `kv_bytes_per_token` gives {glue:text}`err_p1_ours` bytes — both a key and a value per KV
# head per layer — and equals the bytes the library's cache allocates.
#
# Problem 2 inherits the slip. Serving 128k-token sequences on a TPU v5e 4×4 slice in int8,
# the close translation fits a batch of {glue:text}`err_p2_000` ({glue:text}`err_p2k1_000`
# with one KV head), the freer rendering {glue:text}`err_p2_002`
# ({glue:text}`err_p2k1_002`). The library's `max_batch` gives {glue:text}`err_p2_ours`
# ({glue:text}`err_p2k1_ours`) for 128,000 tokens, and {glue:text}`err_p2_131k` if "128k"
# means 131,072.
#
# Problem 3, the time to read every int8 parameter once: the close translation gets
# {glue:text}`err_p3_000` by rounding the parameter count to 18e9, the freer rendering
# {glue:text}`err_p3_002`; the library, with {glue:text}`err_p_params` parameters and the
# registry's bandwidth, {glue:text}`err_p3_ours`.

# %% [markdown] tags=["lang-zh"]
# ### 例题 1–3：虚构的 18.4B 模型
#
# 第 1 题要求 int8 下每个词元的 KV 缓存大小。直译本的答案是 $L \cdot K \cdot H$ =
# {glue:text}`err_p1_000`，只算了键而没算值；较自由的译本的答案是 $2 \cdot L \cdot K \cdot H$ =
# {glue:text}`err_p1_002`。库的 `kv_bytes_per_token` 给出 {glue:text}`err_p1_ours` 字节——每层每个
# KV 头既有一个键，也有一个值——并且与库的缓存实际分配的字节数相等。
#
# 第 2 题沿袭了这个笔误。在一个 TPU v5e 4×4 切片上以 int8 服务 128k 词元的序列，直译本算出能放下
# 的批次为 {glue:text}`err_p2_000`（只有一个 KV 头时为 {glue:text}`err_p2k1_000`），较自由的译本为
# {glue:text}`err_p2_002`（{glue:text}`err_p2k1_002`）。库的 `max_batch` 对 128,000 个词元给出
# {glue:text}`err_p2_ours`（{glue:text}`err_p2k1_ours`）；如果“128k”指的是 131,072，则为
# {glue:text}`err_p2_131k`。
#
# 第 3 题，把每个 int8 参数读取一遍所需的时间：直译本把参数量取整为 18e9，得到
# {glue:text}`err_p3_000`；较自由的译本得到 {glue:text}`err_p3_002`；库使用参数量 {glue:text}`err_p_params`
# 和注册表中的带宽，得到 {glue:text}`err_p3_ours`。

# %% tags=["hide-input"]
wp = book["worked_problems"]
m18 = get_preset("scaling-book-18b")
P18 = counts.param_count(m18)
assert round(P18 / 1e9, 1) == wp["p1_params"] / 1e9
kv18 = counts.kv_bytes_per_token(m18, 1)
assert kv18 == 2 * m18.L * m18.K * m18.H                    # keys and values, int8
assert abs(kv18 / wp["p1_kv_bytes_per_token_int8"]["002"] - 1) < 0.001
assert abs(kv18 / 2 / wp["p1_kv_bytes_per_token_int8"]["000"] - 1) < 0.001
ctx = int(wp["p2_context"])
p2 = roofline.max_batch(m18, v5e, ctx, 16, 1, 1)
p2_k1 = roofline.max_batch(m18.replace(K=1), v5e, ctx, 16, 1, 1)
p2_131k = roofline.max_batch(m18, v5e, 131072, 16, 1, 1)
assert (p2, p2_k1) == (wp["p2_max_batch"]["002"], wp["p2_max_batch_k1"]["002"])
assert p2 != wp["p2_max_batch"]["000"]
p3 = counts.param_bytes(m18, 1) / (16 * v5e.hbm_bytes_per_s)
assert round(p3 * 1e3, 1) == wp["p3_param_load_ms"]["002"]
glue("err_p1_000", fmt_bytes(wp["p1_kv_bytes_per_token_int8"]["000"], 0))
glue("err_p1_002", fmt_bytes(wp["p1_kv_bytes_per_token_int8"]["002"], 0))
glue("err_p1_ours", f"{kv18:,}")
glue("err_p2_000", str(wp["p2_max_batch"]["000"])); glue("err_p2_002", str(wp["p2_max_batch"]["002"]))
glue("err_p2k1_000", str(wp["p2_max_batch_k1"]["000"]))
glue("err_p2k1_002", str(wp["p2_max_batch_k1"]["002"]))
glue("err_p2_ours", str(p2)); glue("err_p2k1_ours", str(p2_k1)); glue("err_p2_131k", str(p2_131k))
glue("err_p3_000", fmt_seconds(wp["p3_param_load_ms"]["000"] / 1e3))
glue("err_p3_002", fmt_seconds(wp["p3_param_load_ms"]["002"] / 1e3))
glue("err_p3_ours", fmt_seconds(p3, 2)); glue("err_p_params", fmt_count(P18, 2));

# %% [markdown]
# (errata-wp5)=
# ### Worked problem 5: the mixture-of-experts variant
#
# With 16 experts of which 2 are active, the close translation counts
# {glue:text}`err_p5_active` active parameters and then writes the forward pass as
# $2 \cdot$ {glue:text}`err_p5_written` $\cdot T$ FLOPs. With its own count (the library's,
# from the config: {glue:text}`err_p5_ours` active of {glue:text}`err_p5_total`) it is
# $2 \cdot$ {glue:text}`err_p5_ours` $\cdot T$.
#
# Both renderings put the batch that makes the model compute-bound at
# {glue:text}`err_p5_bcrit_pub` tokens. That is the critical batch of the expert layers
# ({glue:text}`err_p5_bcrit_layers` with the registry's bandwidth, int8 weights and
# arithmetic): their bytes grow $E$-fold and their FLOPs $k$-fold. Attention and the
# embeddings are dense, so the whole model is compute-bound from
# {glue:text}`err_p5_bcrit_whole` tokens, total over active parameters
# ({glue:text}`err_p5_ratio`) times the dense {glue:text}`err_p5_bcrit_dense`, not $E/k$ times
# it. The freer rendering also writes the embedding's $D \cdot V$ term as
# "+ {glue:text}`err_p5_dv_pub`" in its parameter counts; it is {glue:text}`err_p5_dv`, and
# its totals are right.

# %% [markdown] tags=["lang-zh"]
# (errata-wp5)=
# ### 例题 5：混合专家变体
#
# 在 16 个专家中激活 2 个时，直译本算出激活参数为 {glue:text}`err_p5_active`，随后却把前向计算写成
# $2 \cdot$ {glue:text}`err_p5_written` $\cdot T$ FLOPs。按它自己的计数（也就是库根据配置算出的：
# 总参数 {glue:text}`err_p5_total`，其中激活 {glue:text}`err_p5_ours`），应为
# $2 \cdot$ {glue:text}`err_p5_ours` $\cdot T$。
#
# 两个译本都把让模型变为计算受限的批次定为 {glue:text}`err_p5_bcrit_pub` 个词元。这是专家层的临界
# 批量（用注册表中的带宽、int8 权重和 int8 运算，为 {glue:text}`err_p5_bcrit_layers`）：它们的字节数
# 变为 $E$ 倍，FLOPs 变为 $k$ 倍。注意力和嵌入是稠密的，所以整个模型从 {glue:text}`err_p5_bcrit_whole`
# 个词元起就是计算受限的，即稠密临界批量 {glue:text}`err_p5_bcrit_dense` 乘以总参数与激活参数之比
# （{glue:text}`err_p5_ratio`），而不是乘以 $E/k$。较自由的译本在参数计数中还把嵌入的 $D \cdot V$
# 一项写成“+ {glue:text}`err_p5_dv_pub`”；它其实是 {glue:text}`err_p5_dv`，而它算出的总数是对的。

# %% tags=["hide-input"]
parts = counts.param_counts(m18)
active = P18 + (2 - 1) * parts["mlp"]          # k = 2 expert MLPs per token instead of 1
total_moe = P18 + (16 - 1) * parts["mlp"]
assert abs(active / wp["p5_active_params"] - 1) < 0.005      # the source's own count...
assert abs(total_moe / wp["p5_total_params"] - 1) < 0.005
assert abs(active / wp["p5_forward_flops_active_param_000"] - 1) > 0.02   # ...not 32.2e9
glue("err_p5_active", fmt_count(wp["p5_active_params"]))
glue("err_p5_written", fmt_count(wp["p5_forward_flops_active_param_000"]))
glue("err_p5_ours", fmt_count(active, 2)); glue("err_p5_total", fmt_count(total_moe))
# The critical batch: the expert layers' is the source's E/k rule, the whole model's is lower.
wp5 = m18.replace(moe=MoE(E=16, k=2, F=m18.F))
dense_int8 = roofline.critical_batch(v5e, 1, "int8")
per_expert = 3 * m18.D * m18.F
layers_int8 = estimator.critical_batch_moe(wp5, 16 * per_expert, 16 * per_expert,
                                           2 * 2 * per_expert, v5e.int8_ops_per_s,
                                           v5e.hbm_bytes_per_s)
whole_int8 = estimator.estimate(wp5, v5e, batch=1, context=1, weights="int8",
                                compute="int8").critical_batch
ratio = params.param_count(wp5) / params.active_param_count(wp5)
assert book["b_crit"]["TPU v5e"] * 16 // 2 == wp["p5_b_crit"]          # the source's 240 · 16/2
assert abs(layers_int8 / (dense_int8 * 16 / 2) - 1) < 0.01
assert abs(whole_int8 / (dense_int8 * ratio) - 1) < 0.01 and whole_int8 < 0.9 * layers_int8
# D·V, written "131K" in the freer rendering: a thousand times too small (K for M), while the
# totals it prints include the right figure.
dv = m18.D * m18.V
written = float(wp["p5_embedding_term_002"].removesuffix("K")) * 1e3
assert abs(dv / (1000 * written) - 1) < 0.01
assert abs(total_moe / wp["p5_total_params"] - 1) < 0.005
glue("err_p5_bcrit_pub", f"{book['b_crit']['TPU v5e']} × 16/2 = {wp['p5_b_crit']:,}")
glue("err_p5_bcrit_layers", f"{layers_int8:,.0f}")
glue("err_p5_bcrit_whole", f"{whole_int8:,.0f}")
glue("err_p5_bcrit_dense", f"{dense_int8:.0f}")
glue("err_p5_ratio", fmt_ratio(ratio, 2))
glue("err_p5_dv_pub", wp["p5_embedding_term_002"])
glue("err_p5_dv", fmt_count(dv));

# %% [markdown]
# ### Worked problem 6: the smallest slice is a shape, not a chip count
#
# The problem asks for the smallest TPU v5e slice that holds the mixture-of-experts weights in
# int8. Neither rendering answers it: the close translation asks the question and stops, and
# the freer rendering leaves the problem out. The weights, {glue:text}`err_p6_bytes`, need
# {glue:text}`err_p6_chips` chips of {glue:text}`err_p6_hbm`. But a v5e slice comes in fixed
# shapes ({glue:text}`err_p6_shapes`), and the smallest that has that many chips is
# {glue:text}`err_p6_slice`, {glue:text}`err_p6_slice_chips` chips.

# %% [markdown] tags=["lang-zh"]
# ### 例题 6：最小的切片是一种形状，而不是一个芯片数
#
# 这道题问的是：能以 int8 放下混合专家模型权重的最小 TPU v5e 切片是多大。两个译本都没有给出答案：
# 直译本提出问题后就没有下文，较自由的译本则略去了这道题。权重为 {glue:text}`err_p6_bytes`，需要
# {glue:text}`err_p6_chips` 个各有 {glue:text}`err_p6_hbm` 的芯片。但 v5e 切片只有固定的几种形状
# （{glue:text}`err_p6_shapes`），其中芯片数不少于这个数的最小切片是 {glue:text}`err_p6_slice`，共
# {glue:text}`err_p6_slice_chips` 个芯片。

# %% tags=["hide-input"]
p6_chips = math.ceil(total_moe / v5e.hbm_bytes)               # int8: one byte per weight
shapes = [tuple(int(a) for a in t.split("x")) for t in v5e_slices["topologies"]]
smallest = min((s for s in shapes if math.prod(s) >= p6_chips), key=math.prod)
assert math.prod(smallest) > p6_chips                  # no slice has exactly that many chips
glue("err_p6_bytes", fmt_bytes(total_moe))
glue("err_p6_chips", str(p6_chips))
glue("err_p6_hbm", fmt_bytes(v5e.hbm_bytes, 0))
glue("err_p6_shapes", ", ".join("×".join(map(str, s)) for s in shapes))
glue("err_p6_slice", "×".join(map(str, smallest)))
glue("err_p6_slice_chips", str(math.prod(smallest)));

# %% [markdown]
# ### Worked problem 7: the 2D crossover
#
# Worked problem 7 finds that 2D weight-stationary sharding moves fewer bytes than 1D beyond
# $N >$ {glue:text}`err_p7_pub` chips. Its own expression, $128 \cdot (3/4)^2$, is
# {glue:text}`err_p7_formula`, and so is the library's `comm_time.ws2d_crossover_chips` for
# $F = 4D$ (chapter 10 also finds it from a brute-force minimum and from compiled programs).

# %% [markdown] tags=["lang-zh"]
# ### 例题 7：二维布局的交叉点
#
# 例题 7 得出：当 $N >$ {glue:text}`err_p7_pub` 个芯片时，二维权重驻留分片搬运的字节比一维更少。
# 但它自己的表达式 $128 \cdot (3/4)^2$ 等于 {glue:text}`err_p7_formula`，库的
# `comm_time.ws2d_crossover_chips` 在 $F = 4D$ 时给出的也是这个值（第 10 章还从暴力搜索的最小值和
# 编译出的程序中找到了它）。

# %% tags=["hide-input"]
n_star = comm_time.ws2d_crossover_chips(4096, 4 * 4096)
assert n_star == 128 * (3 / 4) ** 2 != wp["p7_crossover_chips"]
glue("err_p7_pub", str(wp["p7_crossover_chips"]))
glue("err_p7_formula", f"{n_star:.0f}");

# %% [markdown]
# ### Appendix A: the floor of one layer
#
# Appendix A times a layer of two matmuls, $D =$ {glue:text}`err_a_D` and
# $F =$ {glue:text}`err_a_F`, in bfloat16 over {glue:text}`err_a_chips` TPU v5e chips, and puts
# the floor — each chip reading its share of the weights — at {glue:text}`err_a_pub`. That
# rounds the layer's $2DF$ = {glue:text}`err_a_params` parameters to
# {glue:text}`err_a_rounded`; the exact count gives {glue:text}`err_a_ours`.

# %% [markdown] tags=["lang-zh"]
# ### 附录 A：单层的下限
#
# 附录 A 为一个由两个矩阵乘法组成的层计时，$D =$ {glue:text}`err_a_D`，$F =$ {glue:text}`err_a_F`，
# 使用 bfloat16，分布在 {glue:text}`err_a_chips` 个 TPU v5e 芯片上，并把下限——每个芯片读取自己那份
# 权重——定为 {glue:text}`err_a_pub`。这是把该层的参数量 $2DF$ = {glue:text}`err_a_params` 取整为
# {glue:text}`err_a_rounded` 的结果；用精确的参数量得到的是 {glue:text}`err_a_ours`。

# %% tags=["hide-input"]
app = book["appendix_a"]
D_a, F_a, chips_a = 8192, 32768, 4
layer = 2 * D_a * F_a
floor_exact = step_time(decode_roofline.lower_bound_step_cost(2 * layer, 0), v5e, chips_a)
floor_rounded = step_time(decode_roofline.lower_bound_step_cost(2 * app["layer_params_rounded"], 0), v5e, chips_a)
assert abs(floor_rounded * 1e6 / app["layer_floor_us"] - 1) < 0.01     # the source's figure
assert floor_exact < 0.95 * floor_rounded
glue("err_a_D", f"{D_a:,}")
glue("err_a_F", f"{F_a:,}")
glue("err_a_chips", str(chips_a))
glue("err_a_pub", fmt_seconds(app["layer_floor_us"] / 1e6, 0))
glue("err_a_params", fmt_count(layer, 2))
glue("err_a_rounded", fmt_count(app["layer_params_rounded"]))
glue("err_a_ours", fmt_seconds(floor_exact, 0));

# %% [markdown]
# ### Appendix C: when is a collective latency-bound?
#
# A collective is latency-bound when the bytes each hop carries take less than the hop's
# fixed cost, about {glue:text}`err_c_hop` on ICI. The close translation gives {glue:text}`err_c_000` for 8-way
# sharding, the freer rendering about {glue:text}`err_c_002`. Both are right about different
# things: a shard of $b / n$ bytes crosses a link of {glue:text}`err_c_link` in under
# {glue:text}`err_c_hop` when the *shard* is below {glue:text}`err_c_shard`, that is when the
# *whole buffer* of 8 shards is below {glue:text}`err_c_whole`. The example that follows — a
# batch of 16 activations of width 8,192 in int8, {glue:text}`err_c_example` — is latency-bound
# on either reading. The library's `comm_time.latency_bound_bytes` takes the reading as an
# argument, so a number always says which one it means.

# %% [markdown] tags=["lang-zh"]
# ### 附录 C：集合通信什么时候延迟受限？
#
# 当每一跳传输的字节所用的时间少于这一跳的固定开销（在 ICI 上约为 {glue:text}`err_c_hop`）时，
# 集合通信就是延迟受限的。对于 8 路分片，直译本给出 {glue:text}`err_c_000`，较自由的译本给出约
# {glue:text}`err_c_002`。两者说的都对，只是说的不是同一件事：$b / n$ 字节的分片穿过一条
# {glue:text}`err_c_link` 的链路只需不到 {glue:text}`err_c_hop`，条件是*分片*小于
# {glue:text}`err_c_shard`，也就是由 8 个分片组成的*整个缓冲区*小于 {glue:text}`err_c_whole`。
# 紧接着的例子——一个批次的 16 个宽度为 8,192 的 int8 激活值，共 {glue:text}`err_c_example`——
# 按哪种理解都是延迟受限的。库的 `comm_time.latency_bound_bytes` 把采用哪种理解作为一个参数，
# 所以每个数字都会说明它指的是哪一种。

# %% tags=["hide-input"]
c = book["appendix_c_latency_bound_buffer_bytes"]
per_shard = comm_time.latency_bound_bytes(v5e, c["shards"], reading="per-shard")
whole = comm_time.latency_bound_bytes(v5e, c["shards"], reading="whole")
assert per_shard == v5e.link_bytes_per_s * v5e.hop_latency_s and whole == c["shards"] * per_shard
assert whole == c["000"] and per_shard == c["002"]
example = 16 * 8192 * 1
assert example < whole and example / c["shards"] < per_shard
glue("err_c_000", fmt_bytes(c["000"], 0)); glue("err_c_002", fmt_bytes(c["002"], 0))
glue("err_c_link", fmt_rate(v5e.link_bytes_per_s)); glue("err_c_hop", fmt_seconds(v5e.hop_latency_s, 0))
glue("err_c_shard", fmt_bytes(per_shard, 0)); glue("err_c_whole", fmt_bytes(whole, 0))
glue("err_c_example", fmt_bytes(example, 0));

# %% [markdown]
# ## KV caching explained
#
# Lienhart's article {cite:p}`lienhart2023kvcache` sizes Llama-2 7B's cache with round
# numbers: {glue:text}`err_l_w_pub` of float16 weights and {glue:text}`err_l_kv_pub` of keys and
# values per token, so that the cache matches the weights after
# "{glue:text}`err_l_tok_pub`" tokens, {glue:text}`err_l_seq_pub` sequences of
# {glue:text}`err_l_len` — {glue:text}`err_l_quot` tokens, the quotient in binary units (GiB
# over MiB). In those units the token's size is exact ({glue:text}`err_l_kv` bytes), but the
# weights are rounded up: they take {glue:text}`err_l_w` ({glue:text}`err_l_w_gib`). Exactly,
# the cache matches them after {glue:text}`err_l_tok` tokens, {glue:text}`err_l_seq` sequences
# of {glue:text}`err_l_len`.

# %% [markdown] tags=["lang-zh"]
# ## 《KV caching explained》
#
# Lienhart 的文章 {cite:p}`lienhart2023kvcache` 用整数估算 Llama-2 7B 的缓存：float16 权重
# {glue:text}`err_l_w_pub`，每个词元的键和值 {glue:text}`err_l_kv_pub`，因此缓存在
# “{glue:text}`err_l_tok_pub`”个词元之后与权重一样大，即 {glue:text}`err_l_seq_pub` 个
# {glue:text}`err_l_len` 词元的序列——{glue:text}`err_l_quot` 个词元，这是用二进制单位（GiB 除以
# MiB）算出的商。在这种单位下，每个词元的大小是精确的（{glue:text}`err_l_kv` 字节），但权重被向上
# 取整了：它们实际占 {glue:text}`err_l_w`（{glue:text}`err_l_w_gib`）。精确地说，缓存在
# {glue:text}`err_l_tok` 个词元之后与权重一样大，即 {glue:text}`err_l_seq` 个
# {glue:text}`err_l_len` 词元的序列。

# %% tags=["hide-input"]
l7 = get_preset(lienhart["model"])
w_l7, kv_l7 = counts.param_bytes(l7, 2), counts.kv_bytes_per_token(l7, 2)
w_pub, kv_pub = lienhart["weights_gib"] * 2 ** 30, lienhart["kv_mib_per_token"] * 2 ** 20
assert kv_l7 == kv_pub and w_l7 < w_pub                  # the cache is exact, the weights not
tok_pub = int(w_pub // kv_pub)
assert tok_pub == lienhart["sequences"] * lienhart["sequence_tokens"]    # where 28k comes from
assert f"{tok_pub // 1024}k" == lienhart["tokens_like_weights_label"]
tok_l7 = int(w_l7 // kv_l7)
assert tok_l7 < 0.95 * tok_pub
glue("err_l_w_pub", f"{lienhart['weights_gib']} GB")               # as the article writes
glue("err_l_kv_pub", f"{lienhart['kv_mib_per_token']} MB")
glue("err_l_tok_pub", lienhart["tokens_like_weights_label"])
glue("err_l_seq_pub", str(lienhart["sequences"]))
glue("err_l_len", str(lienhart["sequence_tokens"]))
glue("err_l_quot", f"{tok_pub:,}")
glue("err_l_w", fmt_bytes(w_l7, 2))
glue("err_l_w_gib", f"{w_l7 / 2 ** 30:.2f} GiB")
glue("err_l_kv", f"{kv_l7:,}")
glue("err_l_tok", f"{tok_l7:,}")
glue("err_l_seq", str(tok_l7 // lienhart["sequence_tokens"]));

# %% [markdown]
# ## Transformer Inference Arithmetic
#
# ### The A100's bandwidth, and the critical ratio
#
# The post's latency formulas use {glue:text}`err_k_bw` for the A100 (40 GB); the datasheet,
# and the registry, say {glue:text}`err_k_bw_reg` — she notes this herself. Her critical ratio,
# {glue:text}`err_k_ratio_pub`, is the FLOP rate over the byte rate (she writes the fraction
# upside down, $A_{bw}/A_f$); with her figures the library's `break_even_tokens` gives
# {glue:text}`err_k_ratio_hers`, with the datasheet's {glue:text}`err_k_ratio_ours`. Her
# one-GPU estimate for the 13B model, {glue:text}`err_k_ft_pub`, comes out of the library
# with her constants and her $12 L D^2$ parameters as {glue:text}`err_k_ft_hers`; the book's
# prediction, with the datasheet bandwidth and the embeddings counted, is
# {glue:text}`err_k_ft_ours`.

# %% [markdown] tags=["lang-zh"]
# ## 《Transformer Inference Arithmetic》
#
# ### A100 的带宽与临界比值
#
# 这篇文章的延迟公式对 A100（40 GB）使用 {glue:text}`err_k_bw`；数据手册和注册表给出的是
# {glue:text}`err_k_bw_reg`——她自己也指出了这一点。她的临界比值 {glue:text}`err_k_ratio_pub` 是
# FLOP 速率与字节速率之比（她把分数写反了，写成 $A_{bw}/A_f$）；用她的数值，库的
# `break_even_tokens` 给出 {glue:text}`err_k_ratio_hers`，用数据手册的数值则给出
# {glue:text}`err_k_ratio_ours`。她对 13B 模型在单个 GPU 上的估计是 {glue:text}`err_k_ft_pub`，
# 用她的常数和她的 $12 L D^2$ 个参数，库算出的是 {glue:text}`err_k_ft_hers`；本书的预测使用数据手册
# 的带宽，并计入嵌入，结果是 {glue:text}`err_k_ft_ours`。

# %% tags=["hide-input"]
her = kipply["assumed_a100"]
her_a100 = dataclasses.replace(a100, hbm_bytes_per_s=her["hbm_bytes_per_s"],
                               bf16_flops_per_s=her["bf16_flops_per_s"])
pub = kipply["published_results"]
assert her_a100.bf16_flops_per_s == a100.bf16_flops_per_s
assert round(latency.break_even_tokens(her_a100)) == pub["ratio_flops_per_byte"]
m13 = get_preset("kipply-13b")
her_13b = step_time(latency.small_batch_cost(m13, her_a100, 1, params=12 * m13.L * m13.D ** 2),
                    her_a100, 1)
ours_13b = step_time(latency.small_batch_cost(m13, a100, 1), a100, 1)
assert round(her_13b * 1e3, 1) == pub["ft_predicted_ms_per_token"]["1"]
glue("err_k_bw", fmt_rate(her["hbm_bytes_per_s"])); glue("err_k_bw_reg", fmt_rate(a100.hbm_bytes_per_s, digits=3))
glue("err_k_ratio_pub", str(pub["ratio_flops_per_byte"]))
glue("err_k_ratio_hers", f"{latency.break_even_tokens(her_a100):.1f}")
glue("err_k_ratio_ours", f"{latency.break_even_tokens(a100):.1f}")
glue("err_k_ft_pub", fmt_seconds(pub["ft_predicted_ms_per_token"]["1"] / 1e3))
glue("err_k_ft_hers", fmt_seconds(her_13b, 2)); glue("err_k_ft_ours", fmt_seconds(ours_13b, 2));

# %% [markdown]
# ### The 52B model's weights and KV capacity
#
# The post writes the weights as "52e12 · 2 = 104e12 bytes ≈ 104 GB"; 52e9 parameters are
# meant, {glue:text}`err_k_w_hers`. (The library's preset, with a vocabulary the post does not
# give, has {glue:text}`err_k_w_ours`.) With three GPUs it leaves {glue:text}`err_k_free3_pub`
# for the cache and divides by {glue:text}`err_k_kv_pub` per token: about
# {glue:text}`err_k_cap3_pub` tokens, "a batch of {glue:text}`err_k_b3_pub` with 2,048 tokens
# each". Exactly, her {glue:text}`err_k_free3` hold {glue:text}`err_k_cap3_hers` tokens of
# {glue:text}`err_k_kvtok` — room for {glue:text}`err_k_b3_hers` sequences of 2,048. With four
# GPUs she writes {glue:text}`err_k_free4_pub` / {glue:text}`err_k_kv_pub` ≈
# {glue:text}`err_k_cap4_pub`; the division gives {glue:text}`err_k_div4`, and the exact byte
# count {glue:text}`err_k_cap4_hers`. The library, with its preset's weights, gets
# {glue:text}`err_k_cap3_ours` and {glue:text}`err_k_cap4_ours` tokens.

# %% [markdown] tags=["lang-zh"]
# ### 52B 模型的权重与 KV 容量
#
# 文章把权重写成“52e12 · 2 = 104e12 bytes ≈ 104 GB”；意思应是 52e9 个参数，即
# {glue:text}`err_k_w_hers`。（库的预设带有一个文章没有给出的词表，为 {glue:text}`err_k_w_ours`。）
# 用三块 GPU 时，它为缓存留出 {glue:text}`err_k_free3_pub`，再除以每个词元 {glue:text}`err_k_kv_pub`：
# 约 {glue:text}`err_k_cap3_pub` 个词元，“批次为 {glue:text}`err_k_b3_pub`，每个 2,048 个词元”。
# 精确地算，她的 {glue:text}`err_k_free3` 能容纳 {glue:text}`err_k_cap3_hers` 个每个
# {glue:text}`err_k_kvtok` 的词元——足够放 {glue:text}`err_k_b3_hers` 个 2,048 词元的序列。用四块
# GPU 时，她写的是 {glue:text}`err_k_free4_pub` / {glue:text}`err_k_kv_pub` ≈
# {glue:text}`err_k_cap4_pub`；这个除法得到的是 {glue:text}`err_k_div4`，按精确字节数算则是
# {glue:text}`err_k_cap4_hers`。库使用它的预设的权重，得到 {glue:text}`err_k_cap3_ours` 和
# {glue:text}`err_k_cap4_ours` 个词元。

# %% tags=["hide-input"]
m52 = get_preset("kipply-52b")
P_her = kipply["round_parameter_counts"]["kipply-52b"]
w_her = 2 * P_her
kv_tok = counts.kv_bytes_per_token(m52)
cap_her = {n: int((n * a100.hbm_bytes - w_her) // kv_tok) for n in (3, 4)}
div4 = pub["free_gb_4_gpus"] / pub["kv_gb_per_token"]
assert cap_her[3] // 2048 < pub["batch_3_gpus_at_2048"]
assert abs(div4 / pub["capacity_tokens_4_gpus"] - 1) > 0.2
assert cap_her[4] > pub["capacity_tokens_4_gpus"] * 1.1
assert pub["weights_52b_bytes_written"] == 1000 * w_her        # e12 where e9 is meant
glue("err_k_free3_pub", fmt_bytes(pub["free_gb_3_gpus"] * 1e9, 0))
glue("err_k_kv_pub", fmt_bytes(pub["kv_gb_per_token"] * 1e9, 0))
glue("err_k_cap3_pub", f"{pub['capacity_tokens_3_gpus']:,}")
glue("err_k_b3_pub", str(pub["batch_3_gpus_at_2048"]))
glue("err_k_free4_pub", fmt_bytes(pub["free_gb_4_gpus"] * 1e9, 0))
glue("err_k_cap4_pub", f"{pub['capacity_tokens_4_gpus']:,}")
glue("err_k_div4", f"{div4:,.0f}")
cap_ours = {n: latency.kv_capacity_tokens(m52, a100, n) for n in (3, 4)}
glue("err_k_w_hers", fmt_bytes(w_her, 0)); glue("err_k_w_ours", fmt_bytes(counts.param_bytes(m52)))
glue("err_k_free3", fmt_bytes(3 * a100.hbm_bytes - w_her, 0)); glue("err_k_kvtok", fmt_bytes(kv_tok))
glue("err_k_cap3_hers", f"{cap_her[3]:,}"); glue("err_k_b3_hers", str(cap_her[3] // 2048))
glue("err_k_cap4_hers", f"{cap_her[4]:,}")
glue("err_k_cap3_ours", f"{cap_ours[3]:,}"); glue("err_k_cap4_ours", f"{cap_ours[4]:,}");

# %% [markdown]
# ### Communication: elements or bytes, and one latency formula
#
# Tensor parallelism sends "$4 (N-1) d_\text{model} / N$ bytes" per layer; that counts numbers,
# two bytes each in bfloat16, which her large-batch formula then includes (the library's
# `tp_comm_bytes_per_token` returns bytes). For the Gopher-sized model on 16 GPUs she
# states the small-batch message latency as $4 \cdot n_\text{layers} \cdot t_\text{message}$
# but computes "{glue:text}`err_k_lat_written`": the first product would be
# {glue:text}`err_k_lat_double`, the stated formula gives {glue:text}`err_k_lat`. At batch 512
# she reports a step of {glue:text}`err_k_512a` in one sentence and {glue:text}`err_k_512b` in
# the next; the library gives {glue:text}`err_k_512` (FLOPs {glue:text}`err_k_512_flops` against
# {glue:text}`err_k_512_comm` of communication). The next section recalls "our 512 batch on
# 52B", which was the 260B model, and puts the message latency at
# {glue:text}`err_k_lat_share_pub` of its communication time. Neither her figures nor the
# library's give that: {glue:text}`err_k_lat` of latency against her
# {glue:text}`err_k_comm_pub` of transfers is {glue:text}`err_k_lat_share_hers`, against the
# library's {glue:text}`err_k_512_comm` {glue:text}`err_k_lat_share`; the book quotes the
# library's.

# %% [markdown] tags=["lang-zh"]
# ### 通信：元素数还是字节数，以及一条延迟公式
#
# 张量并行每层发送“$4 (N-1) d_\text{model} / N$ bytes”；这数的其实是数值的个数，在 bfloat16 下每个
# 占两字节，她的大批次公式随后也把这一点算了进去（库的 `tp_comm_bytes_per_token` 返回的是字节数）。
# 对于 16 块 GPU 上 Gopher 规模的模型，她把小批次的消息延迟写作 $4 \cdot n_\text{layers} \cdot
# t_\text{message}$，实际算的却是“{glue:text}`err_k_lat_written`”：前一个乘积会得到
# {glue:text}`err_k_lat_double`，写出的公式给出的是 {glue:text}`err_k_lat`。在批次为 512 时，她在
# 一句话里报告一步耗时 {glue:text}`err_k_512a`，下一句里又是 {glue:text}`err_k_512b`；库给出的是
# {glue:text}`err_k_512`（FLOPs 需要 {glue:text}`err_k_512_flops`，通信需要
# {glue:text}`err_k_512_comm`）。下一节提到“我们在 52B 上的 512 批次”，其实那是 260B 的模型，并说
# 消息延迟占其通信时间的 {glue:text}`err_k_lat_share_pub`。无论用她的数值还是库的数值都得不到这个
# 结果：{glue:text}`err_k_lat` 的延迟，相对她的 {glue:text}`err_k_comm_pub` 传输时间是
# {glue:text}`err_k_lat_share_hers`，相对库的 {glue:text}`err_k_512_comm` 则是
# {glue:text}`err_k_lat_share`；本书引用库的数值。

# %% tags=["hide-input"]
gopher = get_preset("gopher-280b")
lat = latency.small_batch_cost(gopher, a100, 16).comm_s
assert lat == 4 * gopher.L * a100.hop_latency_s
big = latency.large_batch_cost(gopher, a100, 16, 512)
big_s, big_compute = step_time(big, a100, 16), work_time(big, a100, 16)
written = pub["gopher_large_batch_total_ms_written"]
assert round(big_s * 1e3) == written[0] != written[1]
glue("err_k_lat_written", pub["gopher_comms_written"])
glue("err_k_512a", fmt_seconds(written[0] / 1e3, 0)); glue("err_k_512b", fmt_seconds(written[1] / 1e3, 0))
assert big_s == big_compute and round(big_s * 1e3) == pub["gopher_large_batch_compute_ms"]
glue("err_k_lat_double", fmt_seconds(2 * lat, 2)); glue("err_k_lat", fmt_seconds(lat, 2))
glue("err_k_512", fmt_seconds(big_s)); glue("err_k_512_flops", fmt_seconds(big_compute))
glue("err_k_512_comm", fmt_seconds(big.comm_s))
share_hers = lat / (lat + pub["gopher_large_batch_comms_ms"] / 1e3)
assert abs(share_hers - pub["gopher_latency_share_of_comms"]) > 0.01
glue("err_k_lat_share", fmt_percent(lat / (lat + big.comm_s), 1))
glue("err_k_lat_share_pub", fmt_percent(pub["gopher_latency_share_of_comms"]))
glue("err_k_comm_pub", fmt_seconds(pub["gopher_large_batch_comms_ms"] / 1e3, 0))
glue("err_k_lat_share_hers", fmt_percent(share_hers, 1));

# %% [markdown]
# ### Intermediate memory costs
#
# Memory-bound element-wise work takes {glue:text}`err_i_share` of the step of a model of width
# {glue:text}`err_i_d`. Scaling its time like the width and the matmuls' like its square for
# width {glue:text}`err_i_d2`, the post computes {glue:text}`err_i_hers_formula` ≈
# {glue:text}`err_i_hers`, dividing by the matmul time as if it had been the whole step. The
# share of the wider model's step is {glue:text}`err_i_ours_formula` =
# {glue:text}`err_i_ours` (`latency.intermediate_share_at_width`).

# %% [markdown] tags=["lang-zh"]
# ### 中间结果的内存开销
#
# 对于宽度为 {glue:text}`err_i_d` 的模型，内存受限的逐元素运算占步骤时间的 {glue:text}`err_i_share`。
# 对宽度 {glue:text}`err_i_d2`，让它的时间随宽度增长、矩阵乘法的时间随宽度的平方增长，文章算出
# {glue:text}`err_i_hers_formula` ≈ {glue:text}`err_i_hers`——它除以的是矩阵乘法的时间，仿佛那就是
# 整个步骤。在更宽的模型的步骤中，这部分实际所占的比例是 {glue:text}`err_i_ours_formula` =
# {glue:text}`err_i_ours`（`latency.intermediate_share_at_width`）。

# %% tags=["hide-input"]
inter = kipply["intermediate_share"]
hers = latency.intermediate_share_approx(inter["share"], inter["d_model"], m52.D)
ours = latency.intermediate_share_at_width(inter["share"], inter["d_model"], m52.D)
assert abs(hers - pub["intermediate_share_52b"]) < 1e-9 and ours > 1.5 * hers
glue("err_i_share", fmt_percent(inter["share"])); glue("err_i_d", f"{inter['d_model']:,}")
glue("err_i_hers", fmt_percent(hers, 1)); glue("err_i_ours", fmt_percent(ours, 1))
r, sh = m52.D // inter["d_model"], inter["share"]
glue("err_i_d2", f"{m52.D:,}")
glue("err_i_hers_formula", f"{sh} · {r} / (1 · {r * r})")
glue("err_i_ours_formula", f"{sh} · {r} / ({sh} · {r} + {1 - sh:.2f} · {r * r})");

# %% [markdown]
# ### Which FasterTransformer run is which
#
# The post prints the two benchmark outputs as "180.86 ms (context time: 45.45 ms)" and
# "283.60 ms (context time: 63.17 ms)" right after discussing the two-GPU run, and before that
# quotes the one-GPU run as {glue:text}`err_f_pub1` per token. The new tokens after the context
# give {glue:text}`err_f_a` and {glue:text}`err_f_b` per token: the first output is the
# two-GPU run, the second the one-GPU run, whose context time ({glue:text}`err_f_ctx1`) is the
# one she compares with her one-GPU estimate. `book/data/kipply_fastertransformer.csv` stores them that way.

# %% [markdown] tags=["lang-zh"]
# ### 哪一次 FasterTransformer 运行是哪一次
#
# 文章在讨论完两块 GPU 的运行之后，紧接着印出两段基准测试输出：“180.86 ms (context time: 45.45 ms)”
# 和“283.60 ms (context time: 63.17 ms)”，而在那之前，它引用单块 GPU 的运行为每个词元
# {glue:text}`err_f_pub1`。用上下文之后的新词元来算，两者分别是每个词元 {glue:text}`err_f_a` 和
# {glue:text}`err_f_b`：第一段输出是两块 GPU 的运行，第二段才是单块 GPU 的运行；它的上下文时间
# （{glue:text}`err_f_ctx1`）正是她拿来与自己的单 GPU 估计比较的那个。
# `book/data/kipply_fastertransformer.csv` 就是这样保存它们的。

# %% tags=["hide-input"]
by_gpus = {r["gpus"]: r for r in ft_runs}
per_token = {n: (r["total_ms"] - r["context_ms"]) / r["new_tokens"] for n, r in by_gpus.items()}
assert all(abs(per_token[n] - by_gpus[n]["reported_ms_per_token"]) < 0.05 for n in (1, 2))
assert by_gpus[1]["context_ms"] > by_gpus[2]["context_ms"]
glue("err_f_pub1", f"{by_gpus[1]['reported_ms_per_token']} ms")
glue("err_f_ctx1", f"{by_gpus[1]['context_ms']} ms")
glue("err_f_a", f"{per_token[2]:.2f} ms"); glue("err_f_b", f"{per_token[1]:.2f} ms");
