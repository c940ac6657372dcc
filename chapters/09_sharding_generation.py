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
# # Sharding generation and the KV cache
#
# Prefill shards like training (chapter 8). Generation does not. A decode step processes a
# handful of tokens — one per sequence in the batch — so it is bound by memory bandwidth, it
# has a latency target per token, and every microsecond of communication shows. That rules
# out most of what works for training {cite:p}`austin2025scaling`:
#
# - **Gathering the weights (FSDP) is out.** A step is already waiting for weights to stream
#   from HBM; streaming them over an interconnect several times slower instead is the wrong
#   direction. We want to move activations, never weights.
# - **Data parallelism does not help.** Copies of the model each read all of their weights
#   every step, so a step is no faster; it is simply several independent servers.
# - **Sequence parallelism has nothing to split.** A decode step has one new token per
#   sequence.
#
# What remains is model parallelism — and a new object to shard: the KV cache, which in long
# contexts is larger than the weights and must never be copied. This chapter runs the 1D
# layout of chapter 8 as a decode step, finds how far it can go before the interconnect
# dominates, shards the cache over heads and then over the batch with the algorithm of the
# sources, splits a long context's cache over positions, and ends with the fixed cost every
# small collective pays. As before, everything runs on emulated devices, so we report bytes,
# FLOPs and collective schedules; times come from formulas with the constants of real chips.

# %% [markdown] tags=["lang-zh"]
# # 生成与 KV 缓存的分片
#
# 预填充像训练一样分片（第 8 章）。生成则不然。一个解码步骤只处理寥寥几个词元（token）——批次中每个序列
# 一个——所以它受内存带宽限制，每个词元都有延迟目标，通信的每一微秒都看得出来。这就排除了大部分
# 适用于训练的做法 {cite:p}`austin2025scaling`：
#
# - **收集权重（FSDP）行不通。** 一个步骤本来就在等待权重从 HBM 流进来；改为让它们流过慢好几倍的
#   互连，方向就错了。我们要移动的是激活值，绝不是权重。
# - **数据并行没有帮助。** 模型的每个副本每一步都要读取自己的全部权重，所以一步并不会变快；这不过是
#   几台独立的服务器而已。
# - **序列并行无可切分。** 一个解码步骤中，每个序列只有一个新词元。
#
# 剩下的就是模型并行——外加一个需要分片的新对象：KV 缓存，它在长上下文中比权重还大，而且绝不能被
# 复制。本章把第 8 章的一维布局当作解码步骤来运行，找出它在互连占主导之前能走多远；用原文的算法先按
# 头、再按批次对缓存分片；把长上下文的缓存按位置切分；最后讲每一次小型集合通信都要付出的固定开销。
# 和之前一样，一切都在模拟设备上运行，所以我们报告字节数、FLOPs 和集合通信的调度；时间则来自代入
# 真实芯片常数的公式。

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax.sharding import PartitionSpec as P

from inferbook.book.listing import show_source
from inferbook.model import decode, decoder
from inferbook.model.generate_args import random_prompts
from inferbook.model.presets import get_preset
from inferbook.parallel import kv_sharding
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.mesh import named_mesh, shard_map
from inferbook.parallel.sharding import make_plan, shard_params
from inferbook.perf import collectives, comm_time, counts, hlo
from inferbook.perf.hardware import get_chip

print(info.describe())

# %% tags=["hide-input"]
from inferbook.book.figures import glue_figure
from inferbook.book.present import fmt_bytes, fmt_ratio, fmt_seconds, glue

# %% [markdown]
# ## The model and the reference
#
# A small grouped-query model: eight query heads share four KV heads, in a single layer (the
# collectives of a layer repeat identically in every layer, so one shows them all). We
# generate greedily for a batch of eight ragged prompts on one device; every sharded run
# below must produce exactly these tokens.

# %% [markdown] tags=["lang-zh"]
# ## 模型与参照
#
# 一个小型的分组查询模型：八个查询头共享四个 KV 头，只有一层（一层中的集合通信在每一层都原样重复，
# 所以一层就能把它们全部展示出来）。我们在单个设备上，为一个由八个长短不一的提示词组成的批次做贪心
# 生成；下面每一次分片运行都必须产生完全相同的词元。

# %%
cfg = get_preset("demo-gqa")
params = decoder.init_params(cfg, seed=0)
prompts = random_prompts([5, 9, 3, 16, 12, 7, 1, 10], cfg.V)
n_new = 8
reference = decode.generate(params, cfg, prompts, n_new).tokens
tokens_BT, lengths_B = decode.pad_prompts(prompts, 16)
B, S = len(prompts), tokens_BT.shape[1] + n_new
print(cfg)


def sharded_greedy(plan):
    """Compile the plan's prefill and decode step, generate greedily, return both programs."""
    sharded = shard_params(params, cfg, plan)
    cache = sd.init_cache(cfg, plan, B, S)
    prefill = hlo.compile_fn(sd.prefill, sharded, cfg, plan, tokens_BT, lengths_B, cache)
    step = hlo.compile_fn(sd.decode_step, sharded, cfg, plan, jnp.zeros((B,), jnp.int32),
                          cache)
    logits, cache = prefill(sharded, tokens_BT, lengths_B, cache)
    out = []
    for _ in range(n_new):
        out.append(jnp.argmax(logits, -1).astype(jnp.int32))
        logits, cache = step(sharded, out[-1], cache)
    return np.stack(out, axis=1).tolist(), prefill, step, cache

# %% [markdown]
# ## The 1D layout, decoding
#
# On a $2 \times 4$ mesh, eight-way model parallelism splits the query heads and the MLP
# over both axes, exactly as in prefill. The cache is a different matter: four KV heads can
# only be split four ways.

# %% [markdown] tags=["lang-zh"]
# ## 一维布局下的解码
#
# 在一个 $2 \times 4$ 的网格上，八路模型并行把查询头和 MLP 切分到两个轴上，和预填充时完全一样。缓存
# 则是另一回事：四个 KV 头最多只能切成四份。

# %%
mesh = named_mesh("2x4")
plan = make_plan(cfg, mesh, "1d-ws")
tokens_1d, prefill_1d, step_1d, cache_1d = sharded_greedy(plan)
assert tokens_1d == reference
block = cache_1d.k[0].addressable_shards[0].data.shape
assert block == (B // 2, cfg.K // 4, S, cfg.H)
assert cache_1d.k[0].addressable_shards[0].data.nbytes * 8 == cache_1d.k[0].nbytes

# %% tags=["hide-input"]
print(plan.describe())
glue("ch9_block", str(block))
print(f"tokens identical to the single-device run; cache block per device: {block}")

# %% [markdown]
# The sharded decoder reproduces the single-device tokens. The plan put the KV heads on the
# axis `y` (four ways) and the *batch* on `x` (two ways): each device holds a cache block of
# shape {glue:text}`ch9_block` — one KV head, for half the sequences — and no device holds a
# copy of another's. Why and how comes after we look at
# what a step costs.
#
# ## Moving activations, not weights
#
# The decode step's collectives, read from the compiled program, against the estimator's
# inventory:

# %% [markdown] tags=["lang-zh"]
# 分片后的解码器重现了单设备的词元。计划把 KV 头放在轴 `y` 上（四路），把*批次*放在 `x` 上（两路）：
# 每个设备持有形状为 {glue:text}`ch9_block` 的缓存块——一个 KV 头、一半的序列——没有哪个设备持有
# 另一个设备那部分的副本。为什么这样安排、又如何做到，等我们看过一步的代价之后再讲。
#
# ## 移动激活值，而不是权重
#
# 从编译后的程序中读出的解码步骤的集合通信，与估算器的清单对照：

# %%
colls_1d = hlo.collectives(step_1d)
Y = plan.size(plan.kv_heads)
predicted = collectives.ws1d_collectives(cfg, B, 1, plan.m, Y, bytes_per_element=4)
assert hlo.bytes_by_scope(colls_1d) == collectives.total_bytes(predicted, by="scope")
step_bytes_1d = sum(c.bytes for c in colls_1d)
assert [(c.scope, c.kind) for c in colls_1d] == [
    ("embed", "all-gather"), ("q_to_batch", "all-to-all"), ("out_to_heads", "all-to-all"),
    ("attn_out", "all-reduce"), ("mlp_out", "all-reduce"), ("logits", "all-reduce")]

# The same step with the weights gathered instead (FSDP): compiled from shapes alone.
plan_wg = make_plan(cfg, mesh, "weight-gathered")
p_wg, c_wg = sd.abstract_inputs(cfg, plan_wg, B, S)
step_wg = hlo.compile_fn(sd.decode_step, p_wg, cfg, plan_wg,
                         jax.ShapeDtypeStruct((B,), jnp.int32), c_wg)
step_bytes_wg = sum(c.bytes for c in hlo.collectives(step_wg))
assert step_bytes_wg > 100 * step_bytes_1d

# %% tags=["hide-input"]
print(hlo.format_table(colls_1d))
glue("ch9_step_bytes_1d", fmt_bytes(step_bytes_1d))
glue("ch9_step_bytes_wg", fmt_bytes(step_bytes_wg))
glue("ch9_wg_ratio", fmt_ratio(step_bytes_wg / step_bytes_1d, 0))
print(f"1D step moves {fmt_bytes(step_bytes_1d)}; weight-gathered step {fmt_bytes(step_bytes_wg)}")

# %% [markdown]
# A 1D decode step moves {glue:text}`ch9_step_bytes_1d`: an AllGather of the new tokens'
# embeddings, two AllReduces of the batch's activations per layer, two AllToAlls of queries
# and attention outputs per layer (the cache layout's price, below), and the logits. The
# weight-gathered step moves {glue:text}`ch9_step_bytes_wg`, {glue:text}`ch9_wg_ratio` as
# much, to process the same eight tokens.
#
# At the scale of a real deployment, the scaling book's 18B model on sixteen TPU v5e chips,
# the three strategies give these lower bounds on a step at batch 32 (int8 weights, cache
# ignored):

# %% [markdown] tags=["lang-zh"]
# 一维布局的一个解码步骤移动 {glue:text}`ch9_step_bytes_1d`：一次对新词元嵌入的全收集（AllGather），
# 每层两次对批次激活值的全规约，每层两次对查询和注意力输出的全交换（AllToAll，这是缓存布局的代价，
# 见下文），再加上 logits。权重收集的步骤
# 移动 {glue:text}`ch9_step_bytes_wg`，是前者的 {glue:text}`ch9_wg_ratio`，处理的却是同样的八个词元。
#
# 放到真实部署的规模上——《How to Scale Your Model》的 18B 模型运行在十六个 TPU v5e 芯片上——在批量大小为 32 时
# （int8 权重，不计缓存），三种策略给出的一步耗时下界如下：

# %%
chip = get_chip("TPU v5e")
W_ici = comm_time.ici_bandwidth(chip)
big = get_preset("scaling-book-18b")
chips, batch = 16, 32
weights = counts.param_bytes(big, 1)
t_model = weights / (chips * chip.hbm_bytes_per_s)                 # each chip reads 1/16
t_data = weights / chip.hbm_bytes_per_s                            # each replica reads it all
# Gathered, each chip receives 15/16 of the weights per step, over both axes of the torus:
# sixteen v5e chips are a 4x4 slice.
axes = 2
assert chip.torus_axes == axes
t_fsdp = weights * (chips - 1) / chips / comm_time.ici_bandwidth(chip, axes)
assert t_model < t_data < t_fsdp
assert weights > chip.hbm_bytes                                    # one copy does not even fit

# %% tags=["hide-input"]
glue("ch9_chip", chip.name)
for name, t in [("model parallel (16 ways)", t_model), ("data parallel (16 copies)", t_data),
                ("weights gathered (FSDP)", t_fsdp)]:
    print(f"{name:28s} {fmt_seconds(t):>9s}")
glue("ch9_t_model", fmt_seconds(t_model))
glue("ch9_t_data", fmt_seconds(t_data))
glue("ch9_t_fsdp", fmt_seconds(t_fsdp))

# %% [markdown]
# Splitting the weights over sixteen chips reads them in {glue:text}`ch9_t_model`. Sixteen
# copies each need {glue:text}`ch9_t_data` per step (and the model does not even fit on one
# chip's memory); gathering the weights over the interconnect, through both axes of the
# $4 \times 4$ slice, takes {glue:text}`ch9_t_fsdp`.
# Only model parallelism makes the step faster.
#
# ## How far model parallelism can go
#
# In prefill, model parallelism stops paying when the AllReduces outlast the *arithmetic*
# (chapter 8). A decode step's arithmetic hardly matters; what matters is the time to load the
# weights from HBM. Splitting them over $Y$ chips cuts that time, while the AllReduce of
# $B \cdot D$ activations stays put. For an MLP of two int8 matrices:
#
# $$T_\text{HBM} = \frac{2 D F}{Y \cdot W_\text{hbm}}, \qquad
#   T_\text{ICI} = \frac{2 B D}{W_\text{ici}}, \qquad
#   T_\text{ICI} > T_\text{HBM} \iff Y > \frac{F}{B \cdot \beta}, \quad
#   \beta = \frac{W_\text{hbm}}{W_\text{ici}}.$$

# %% [markdown] tags=["lang-zh"]
# 把权重切分到十六个芯片上，读完它们需要 {glue:text}`ch9_t_model`。十六个副本则每一步各需
# {glue:text}`ch9_t_data`（何况一个芯片的内存根本放不下这个模型）；通过互连收集权重（经由 $4 \times 4$
# 切片的两个轴）需要 {glue:text}`ch9_t_fsdp`。只有模型并行能让一步变快。
#
# ## 模型并行能走多远
#
# 在预填充中，一旦全规约的耗时超过*计算*，模型并行就不再划算（第 8 章）。解码步骤的计算几乎无关紧要；
# 要紧的是从 HBM 加载权重的时间。把权重切分到 $Y$ 个芯片上能缩短这段时间，而对 $B \cdot D$ 个激活值的
# 全规约却纹丝不动。对于由两个 int8 矩阵组成的 MLP：
#
# $$T_\text{HBM} = \frac{2 D F}{Y \cdot W_\text{hbm}}, \qquad
#   T_\text{ICI} = \frac{2 B D}{W_\text{ici}}, \qquad
#   T_\text{ICI} > T_\text{HBM} \iff Y > \frac{F}{B \cdot \beta}, \quad
#   \beta = \frac{W_\text{hbm}}{W_\text{ici}}.$$

# %%
beta = chip.hbm_bytes_per_s / W_ici
y_star = comm_time.model_parallel_limit(big.F, batch, chip)
Ys = np.geomspace(1, 512, 50)
t_hbm = 2 * big.D * big.F / (Ys * chip.hbm_bytes_per_s)
t_ici = np.full_like(Ys, comm_time.ws1d_comm_time(batch, big.D, W_ici, bytes_per_element=1))
assert t_hbm[Ys < y_star * 0.99].min() > t_ici[0] > t_hbm[Ys > y_star * 1.01].max()
SOURCE_BETA = 8                      # the scaling book's round figure for TPU v5e and v6e

# %% tags=["hide-input"]
glue("ch9_beta", f"{beta:.1f}")
glue("ch9_source_beta", str(SOURCE_BETA))
glue("ch9_ystar_source", f"{big.F / (batch * SOURCE_BETA):.0f}")
glue("ch9_ystar", f"{y_star:.0f}")
glue("ch9_F", f"{big.F:,}")
glue("ch9_batch", str(batch))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(Ys, t_hbm * 1e6, label="load the MLP weights from HBM")
ax.loglog(Ys, t_ici * 1e6, label="AllReduce of the activations")
ax.axvline(y_star, color="gray", ls=":", label=f"F / (B·β) = {y_star:.0f}")
ax.set_xlabel("model-parallel chips Y")
ax.set_ylabel("time per MLP block (µs)")
ax.set_title(f"{big.name}, batch {batch}, int8, {chip.name} (formula)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch9_mp_limit_figure", fig, zh=dict(
    title=f"{big.name}，批量大小 {batch}，int8，{chip.name}（公式）",
    xlabel="模型并行的芯片数 Y", ylabel="每个 MLP 块的时间（µs）",
    legend=["从 HBM 加载 MLP 权重", "激活值的全规约", f"F / (B·β) = {y_star:.0f}"]))

# %% [markdown]
# ```{glue:figure} ch9_mp_limit_figure
# ```
#
# On a {glue:text}`ch9_chip` $\beta =$ {glue:text}`ch9_beta`, and with $F =$ {glue:text}`ch9_F`
# and a batch of {glue:text}`ch9_batch` the weight load stays the bottleneck up to
# {glue:text}`ch9_ystar` chips — far beyond the prefill limit, because a decode step has so
# little arithmetic to hide behind. (The sources round $\beta$ to
# {glue:text}`ch9_source_beta` and get {glue:text}`ch9_ystar_source`; the registry's
# bandwidths give the number above.) A larger batch lowers the limit in
# proportion. But the argument assumes the KV cache splits $Y$ ways too, and it does not, on
# its own.
#
# ## Sharding the KV cache: over heads, then over the batch
#
# The cache is read in full at every step, so copying it onto several devices multiplies the
# memory traffic that sets the step time. Megatron's split over heads extends to it naturally
# — a device attends with its own heads, so it needs only their keys and values — but only
# $K$ ways: a multi-query model has one KV head to give. The sources' answer
# {cite:p}`pope2023esti,austin2025scaling`: split the KV heads over as many devices as $K$
# allows (the axes $Y$), and split the *batch* over the rest ($Z$), so the cache is
# $[B_Z, K_Y, S, H]$. The queries come out of the projection split over heads for every
# sequence, $[B, N_{YZ}, H]$, and must meet the cache split over sequences; one AllToAll over
# $Z$ trades the one split for the other, and a second one trades back after attention.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch9_mp_limit_figure
# ```
#
# 在 {glue:text}`ch9_chip` 上 $\beta =$ {glue:text}`ch9_beta`；取 $F =$ {glue:text}`ch9_F`、批量大小
# {glue:text}`ch9_batch`，直到 {glue:text}`ch9_ystar` 个芯片为止，权重的加载始终是瓶颈——远远超过预填充
# 的极限，因为解码步骤几乎没有可以用来掩盖通信的计算。（原文把 $\beta$ 取整为
# {glue:text}`ch9_source_beta`，得到 {glue:text}`ch9_ystar_source`；上面的数字用的是注册表中的带宽。）
# 批次越大，极限按比例越低。但这个论证假设 KV 缓存也切成了 $Y$ 份，而单靠它自己，缓存做不到这一点。
#
# ## KV 缓存的分片：先按头，再按批次
#
# 每一步都要把缓存完整地读一遍，所以把它复制到多个设备上，就会成倍增加决定步骤时间的内存流量。Megatron
# 按头切分的做法很自然地推广到缓存——一个设备用它自己的头做注意力，所以只需要这些头的键和值——但最多
# 只能切成 $K$ 份：多查询模型只有一个 KV 头可分。原文的答案 {cite:p}`pope2023esti,austin2025scaling`
# 是：在 $K$ 允许的范围内，把 KV 头切分到尽可能多的设备上（轴 $Y$），再把*批次*切分到其余的设备上（$Z$），
# 于是缓存为 $[B_Z, K_Y, S, H]$。查询从投影出来时，对每个序列都按头切分，$[B, N_{YZ}, H]$，却要与按
# 序列切分的缓存相遇；在 $Z$ 上的一次全交换把一种切分换成另一种，注意力之后再用第二次全交换换回来。

# %%
show_source(kv_sharding.attend_heads_then_batch)

# %% [markdown]
# We run it alone, on the decode step's shapes, and compare with attention over the whole,
# unsharded cache (`decode.attend_cached`, the reference the decoder uses).

# %% [markdown] tags=["lang-zh"]
# 我们在解码步骤的形状上单独运行它，并与对整个未分片缓存做的注意力比较（`decode.attend_cached`，解码器
# 所用的参照）。

# %%
keys = jax.random.split(jax.random.key(7), 5)
T1 = 1
q = jax.random.normal(keys[0], (B, T1, cfg.N, cfg.H))
k_new = jax.random.normal(keys[1], (B, T1, cfg.K, cfg.H))
v_new = jax.random.normal(keys[2], (B, T1, cfg.K, cfg.H))
ck = jax.random.normal(keys[3], (B, cfg.K, S, cfg.H))
cv = jax.random.normal(keys[4], (B, cfg.K, S, cfg.H))
cache_len = jnp.asarray(lengths_B)
ones = jnp.ones((B,), jnp.int32)

Zb, Yh, M = plan.kv_batch, plan.kv_heads, plan.model
heads = P(None, None, M, None)                   # q, o: [B, T, N_YZ, H]
new_kv = P(Zb, None, Yh, None)                   # k, v: [B_Z, T, K_Y, H]
cache_spec = P(Zb, Yh, None, None)               # cache: [B_Z, K_Y, S, H]


def body(q, k, v, ck, cv, cache_len, n_new):
    return kv_sharding.attend_heads_then_batch(plan, q, k, v, ck, cv, cache_len, n_new)


attend = shard_map(body, mesh, in_specs=(heads, new_kv, new_kv, cache_spec, cache_spec, P(), P()),
                   out_specs=(heads, cache_spec, cache_spec))
attend_prog = hlo.compile_fn(attend, q, k_new, v_new, ck, cv, cache_len, ones)
o, _, _ = attend_prog(q, k_new, v_new, ck, cv, cache_len, ones)
o_ref = decode.attend_cached(q, k_new, v_new, ones, None, ck, cv, cache_len)
a2a_err = float(jnp.max(jnp.abs(o - o_ref)))
assert a2a_err < 1e-5, a2a_err
a2a = hlo.collectives(attend_prog)
assert [c.kind for c in a2a] == ["all-to-all", "all-to-all"]
assert all(hlo.group_axes(c, mesh) == Zb for c in a2a)
assert all(c.bytes == B * T1 * cfg.N * cfg.H // plan.m * 4 for c in a2a)

# %% tags=["hide-input"]
print(hlo.format_table(a2a))
glue("ch9_a2a_err", f"{a2a_err:.1e}")
glue("ch9_a2a_bytes", fmt_bytes(a2a[0].bytes))

# %% [markdown]
# The output equals unsharded attention (to {glue:text}`ch9_a2a_err`). The program holds
# exactly the two AllToAlls, each within the groups along `x` — the batch axis $Z$ — and each
# of {glue:text}`ch9_a2a_bytes`, one device's slice of the queries.
#
# How does that compare with what the layout saves? For the 18B model on sixteen chips, its
# {glue:text}`ch9_K_big` KV heads split as far as they go and the batch takes the rest. At
# batch {glue:text}`ch9_batch` and {glue:text}`ch9_S_big` tokens of context, per layer and
# step, in int8:

# %% [markdown] tags=["lang-zh"]
# 输出等于未分片的注意力（差异在 {glue:text}`ch9_a2a_err` 以内）。程序中恰好有这两次全交换，都在沿
# `x`——即批次轴 $Z$——的设备组内进行，每次 {glue:text}`ch9_a2a_bytes`，也就是一个设备的那一片查询。
#
# 这与该布局省下的东西相比如何？对于运行在十六个芯片上的 18B 模型，它的 {glue:text}`ch9_K_big` 个
# KV 头切到不能再切，其余的切分交给批次。在批量大小 {glue:text}`ch9_batch`、上下文
# {glue:text}`ch9_S_big` 个词元时，每层每步、以 int8 计：

# %%
S_big, Yb = 8192, big.K
Zb2 = chips // Yb
kv_read = 2 * (batch // Zb2) * (big.K // Yb) * S_big * big.H           # K and V, int8
a2a_bytes = 2 * batch * big.N * big.H // chips                          # two AllToAlls
kv_if_copied = 2 * batch * (big.K // Yb) * S_big * big.H                # heads only, batch whole
assert a2a_bytes * 100 < kv_read and kv_if_copied == Zb2 * kv_read

# %% tags=["hide-input"]
glue("ch9_K_big", str(big.K))
glue("ch9_S_big", f"{S_big:,}")
glue("ch9_kv_read", fmt_bytes(kv_read))
glue("ch9_a2a_big", fmt_bytes(a2a_bytes))
glue("ch9_kv_copied", fmt_bytes(kv_if_copied))
print(f"cache read per device {fmt_bytes(kv_read)}; AllToAlls {fmt_bytes(a2a_bytes)}; "
      f"cache read if split over heads only {fmt_bytes(kv_if_copied)}")

# %% [markdown]
# Each device reads {glue:text}`ch9_kv_read` of cache per layer and step; had the cache been
# split over heads only (copied across the batch axis), it would read
# {glue:text}`ch9_kv_copied`. The two AllToAlls that avoid the copy move
# {glue:text}`ch9_a2a_big`: activations are small, caches are not.
#
# ## Long contexts: sharding the cache over positions
#
# When the batch is too small to split, or a single context too long for a device, the cache
# can be split over *positions*. Every device of the sequence axes computes the same queries,
# attends over its own stripe of positions, and the partial results are merged with their
# log-sum-exps — Flash-Decoding across devices instead of across blocks of one device.
# Chapter 8's sequence-parallel prefill already left the keys in this striped layout.

# %% [markdown] tags=["lang-zh"]
# 每个设备每层每步读取 {glue:text}`ch9_kv_read` 的缓存；如果缓存只按头切分（在批次轴上复制），它要读
# {glue:text}`ch9_kv_copied`。避免复制的两次全交换只移动 {glue:text}`ch9_a2a_big`：激活值很小，缓存
# 则不然。
#
# ## 长上下文：按位置对缓存分片
#
# 当批次太小、无法切分，或者单个上下文对一个设备来说太长时，可以按*位置*切分缓存。序列轴上的每个设备
# 计算相同的查询，对它自己那一条带的位置做注意力，再借助各自的 LSE（指数和的对数）合并部分结果——这就是跨设备
# 的 Flash-Decoding，而不是在一个设备的各个块之间做。第 8 章的序列并行预填充已经把键留在了这种条带
# 布局中。

# %%
show_source(kv_sharding.combine_over)

# %%
plan_seq = make_plan(cfg, mesh, "1d-ws", seq="x")
tokens_seq, _, step_seq, cache_seq = sharded_greedy(plan_seq)
assert tokens_seq == reference
colls_seq = hlo.collectives(step_seq)
assert hlo.bytes_by_scope(colls_seq) == collectives.total_bytes(
    collectives.seq_sharded_decode_collectives(cfg, B, 2, 4, bytes_per_element=4), by="scope")
combine = sum(c.bytes for c in colls_seq if c.scope == "combine")

# %% tags=["hide-input"]
print(plan_seq.describe())
print(hlo.format_table(colls_seq))
glue("ch9_combine", fmt_bytes(combine))
glue("ch9_seq_block", str(cache_seq.k[0].addressable_shards[0].data.shape))

# %% [markdown]
# Same tokens again. Each device's cache block is {glue:text}`ch9_seq_block`: all sequences,
# its heads, half the positions. The merge costs a max and two sums per layer,
# {glue:text}`ch9_combine` in all: float32 outputs and
# log-sum-exps of the queries, nothing the size of the cache. The price is elsewhere: the
# weights are *copied* over the sequence axis, so each device there repeats the model-parallel
# work and reads the same weight slices — which is why this layout is for contexts whose
# cache dwarfs the weights.
#
# ## Latency-bound collectives
#
# So far a collective cost its bytes divided by bandwidth. But each of its hops also has a
# fixed cost, about a microsecond on TPUs. Appendix C of the scaling book models an
# AllGather over a ring of $n$ devices as
#
# $$T = \max\left(\frac{t_\text{hop} \cdot n}{2},\; \frac{\text{bytes}}{W_\text{ici}}\right),$$
#
# so below some size a collective costs the same whatever it carries. The sources state the
# threshold two ways, and their figures differ by a factor of eight: the close Chinese
# translation of that chapter (*关于 Transformer 推理的一切*) bounds the *whole buffer*, bytes
# $< n \cdot W_\text{link} \cdot t_\text{hop}$; the freer one (*Transformer 推理全解*) bounds
# *one shard*, $W_\text{link} \cdot t_\text{hop}$. They are the same condition, applied to
# different quantities.

# %% [markdown] tags=["lang-zh"]
# 词元又一次相同。每个设备的缓存块为 {glue:text}`ch9_seq_block`：全部序列、它自己的头、一半的位置。
# 合并每层只需一次取最大值和两次求和，共 {glue:text}`ch9_combine`：都是查询的 float32 输出和
# LSE，没有任何与缓存一样大的东西。代价在别处：权重在序列轴上是*复制*的，所以序列轴上的每个设备都
# 重复模型并行的那份工作，读取相同的权重切片——这就是为什么这种布局适用于缓存远大于权重的上下文。
#
# ## 延迟受限的集合通信
#
# 到目前为止，一次集合通信的代价就是它的字节数除以带宽。但它的每一跳还有固定开销，在 TPU 上大约
# 一微秒。《How to Scale Your Model》的附录 C 把 $n$ 个设备组成的环上的一次全收集建模为
#
# $$T = \max\left(\frac{t_\text{hop} \cdot n}{2},\; \frac{\text{bytes}}{W_\text{ici}}\right),$$
#
# 所以低于某个大小时，集合通信不论搬运多少数据，代价都一样。原文用两种方式给出这个阈值，两者的数字
# 之比正是分片数 $n$：该章的直译本《关于 Transformer 推理的一切》限定的是*整个缓冲区*，字节数
# $< n \cdot W_\text{link} \cdot t_\text{hop}$；较自由的译本《Transformer 推理全解》限定的是*一个分片*，
# $W_\text{link} \cdot t_\text{hop}$。它们是同一个条件，只是用在不同的量上。

# %%
n8 = 8
whole = comm_time.latency_bound_bytes(chip, n8)
per_shard = comm_time.latency_bound_bytes(chip, n8, reading="per-shard")
assert whole == n8 * per_shard
# At the threshold both terms of appendix C's formula are equal.
assert comm_time.ring_collective_time(whole, chip, n8) == chip.hop_latency_s * n8 / 2
B_ex, D_ex = 16, 8192                                        # the sources' example, int8
example = B_ex * D_ex
assert (example < whole) == (example / n8 < per_shard)
step_colls = collectives.ws1d_collectives(big, B_ex, 1, n8, kv_heads=8, bytes_per_element=1)
assert all(c.bytes < whole for c in step_colls if c.kind == "all-reduce" and c.scope != "logits")

# %% tags=["hide-input"]
glue("ch9_B_ex", str(B_ex))
glue("ch9_D_ex", f"{D_ex:,}")
glue("ch9_whole", fmt_bytes(whole))
glue("ch9_per_shard", fmt_bytes(per_shard))
glue("ch9_example", fmt_bytes(example))
glue("ch9_example_shard", fmt_bytes(example / n8))
glue("ch9_y_latency", f"{example / per_shard:.1f}")

sizes = np.geomspace(1e3, 1e8, 200)
points = {}                                  # (kind, bytes) -> labels of the step's collectives
for c in step_colls:
    if c.group > 1:
        points.setdefault((c.kind, c.bytes), []).append(c.scope)
fig, ax = plt.subplots(figsize=(6.5, 4))
for kind, color in (("all-gather", "C0"), ("all-reduce", "C1")):
    t = [comm_time.ring_collective_time(x, chip, n8, kind) * 1e6 for x in sizes]
    ax.loglog(sizes, t, color=color, label=f"{kind} over {n8} chips (appendix C)")
    for (k, nbytes), labels in points.items():
        if k == kind:
            y = comm_time.ring_collective_time(nbytes, chip, n8, kind) * 1e6
            ax.plot(nbytes, y, "o", color=color)
            ax.annotate(", ".join(dict.fromkeys(labels)), (nbytes, y),
                        textcoords="offset points", xytext=(5, -12), fontsize=8)
ax.axvline(whole, color="gray", ls=":", label=f"threshold, whole buffer ({fmt_bytes(whole)})")
ax.set_xlabel("bytes in the collective (whole buffer)")
ax.set_ylabel("time (µs)")
ax.set_title(f"{big.name} decode step at batch {B_ex}, int8, {n8} × {chip.name} (formula)")
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch9_latency_figure", fig, zh=dict(
    title=f"{big.name} 的解码步骤，批量大小 {B_ex}，int8，{n8} × {chip.name}（公式）",
    xlabel="集合通信中的字节数（整个缓冲区）", ylabel="时间（µs）",
    legend=[f"全收集，{n8} 个芯片（附录 C）", f"全规约，{n8} 个芯片（附录 C）",
            f"阈值，整个缓冲区（{fmt_bytes(whole)}）"]),
    keep=[t.get_text() for t in ax.texts])      # the collectives' labels: names in the code

# %% [markdown]
# ```{glue:figure} ch9_latency_figure
# ```
#
# On a {glue:text}`ch9_chip` with eight shards the threshold is {glue:text}`ch9_whole` for the
# whole buffer, or {glue:text}`ch9_per_shard` for one shard. The sources' example — batch
# {glue:text}`ch9_B_ex`, $D =$ {glue:text}`ch9_D_ex`, int8 — is a {glue:text}`ch9_example`
# buffer of {glue:text}`ch9_example_shard` shards: latency-bound by either reading, provided
# each is applied to its own quantity (the freer translation compares the whole buffer with
# the per-shard figure). Every per-layer collective of the 18B model's decode step at that batch sits on the
# flat part of the curve. Put
# differently, model parallelism over $Y$ chips makes the AllReduce latency-bound once the
# shard $B D / Y$ drops below {glue:text}`ch9_per_shard`, here beyond
# {glue:text}`ch9_y_latency` chips. This is the analogue of the memory roofline for small
# matrix products: a fixed cost that small operations cannot amortise, and one more reason to
# batch.
#
# ## Takeaways
#
# - Decode moves activations, never weights: FSDP and data parallelism do not make a step
#   faster. Model parallelism does, far beyond the prefill limit, up to $Y = F/(B\beta)$.
# - The cache is split over KV heads as far as $K$ allows and over the batch beyond that,
#   at the price of two AllToAlls of queries and outputs per layer; no device copies another's
#   cache. For very long contexts it can be split over positions and merged Flash-style.
# - Small collectives are latency-bound: below a whole-buffer size of $n \cdot W \cdot
#   t_\text{hop}$ they cost a fixed time.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch9_latency_figure
# ```
#
# 在 {glue:text}`ch9_chip` 上，八个分片时，阈值对整个缓冲区是 {glue:text}`ch9_whole`，对一个分片是
# {glue:text}`ch9_per_shard`。原文的例子——批量大小 {glue:text}`ch9_B_ex`、$D =$ {glue:text}`ch9_D_ex`、
# int8——是一个 {glue:text}`ch9_example` 的缓冲区，每个分片 {glue:text}`ch9_example_shard`：按两种读法
# 都是延迟受限的，前提是每种读法都用在它自己的量上（较自由的译本拿整个缓冲区去和每个分片的数字比较）。
# 在这个批量大小下，18B 模型解码步骤中每一次逐层的集合通信都落在曲线平坦的部分。换一种说法：在 $Y$
# 个芯片上做模型并行，一旦分片 $B D / Y$ 小于 {glue:text}`ch9_per_shard`，全规约就变成延迟受限的——这里
# 是超过 {glue:text}`ch9_y_latency` 个芯片的时候。这与小矩阵乘积的内存屋顶线如出一辙：一个小操作无法
# 摊销的固定开销，也是又一个要凑成批次的理由。
#
# ## 要点
#
# - 解码移动的是激活值，绝不是权重：FSDP 和数据并行都不会让一步变快。模型并行可以，而且远远超过
#   预填充的极限，直到 $Y = F/(B\beta)$。
# - 缓存在 $K$ 允许的范围内按 KV 头切分，超出的部分按批次切分，代价是每层两次对查询和输出的全交换；
#   没有哪个设备复制另一个设备的缓存。对于非常长的上下文，还可以按位置切分，再像 Flash-Decoding 那样合并。
# - 小的集合通信是延迟受限的：整个缓冲区小于 $n \cdot W \cdot t_\text{hop}$ 时，它们的耗时是固定的。
