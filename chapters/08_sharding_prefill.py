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
# # Sharding prefill
#
# A model too large for one accelerator, or a prompt too long to process on one in time, has
# to be spread over several. This chapter and the next two are about how. We start with
# prefill, the easy half: from the point of view of rooflines, **prefill is training without
# the backward pass** {cite:p}`austin2025scaling`. A prompt of $T$ tokens is a batch of $T$
# rows pushed through every weight matrix, large enough to keep the arithmetic units busy, so
# almost every technique that shards training shards prefill too — model (Megatron)
# parallelism, sequence parallelism, pipelining, even fully sharded weights. The one
# difference is that prefill must leave the keys and values behind, laid out the way the
# decode steps that follow will want them.
#
# We build two layouts and one foil. **Model parallelism** splits every weight matrix over
# devices and pays a collective per block; it helps until the interconnect, not the
# arithmetic, sets the pace. **Sequence parallelism** splits the prompt instead, and pays
# only in attention, where queries need everyone's keys. The **weight-gathered** layout
# moves weights instead of activations, which only pays when the batch of tokens is huge.
#
# All of it runs on a mesh of eight *emulated* devices (see
# [How to run this book](../book/how_to_run.md)). Emulation makes sharding real in shapes,
# bytes, FLOPs and the collectives in the compiled program, and in nothing else: this chapter
# reports bytes, FLOPs and collective schedules, and takes times only from formulas with the
# constants of real chips.

# %% [markdown] tags=["lang-zh"]
# # 预填充的分片
#
# 一个模型如果大到一个加速器放不下，或者一段提示词长到一个加速器无法及时处理完，就必须分散到
# 多个加速器上。本章和接下来的两章讲的就是怎么分。我们从预填充开始，这是容易的那一半：从屋顶线
# 的角度看，**预填充就是没有反向传播的训练** {cite:p}`austin2025scaling`。$T$ 个词元（token）的提示词
# 就是由 $T$ 行组成的一个批次，要穿过每一个权重矩阵，它大到足以让运算单元保持忙碌，所以几乎每一种
# 用于训练的分片技术也都适用于预填充——模型（Megatron）并行、序列并行、流水线，甚至完全分片的权重。
# 唯一的区别是，预填充必须把键和值留下来，并按照随后的解码步骤所需要的方式摆放好。
#
# 我们构建两种布局，外加一个对照。**模型并行**把每个权重矩阵切分到多个设备上，每个块都要付出一次
# 集合通信；在决定速度的是互连而不是计算之前，它都有帮助。**序列并行**转而切分提示词，只在注意力
# 中付出代价，因为那里的查询需要所有设备上的键。**权重收集**布局移动的是权重而不是激活值，只有在
# 词元批次非常大时才划算。
#
# 这一切都在一个由八个*模拟*设备组成的网格上运行（见[如何运行本书](../book/how_to_run.md)）。模拟
# 让分片在形状、字节数、FLOPs 以及编译后程序中的集合通信上都是真实的，除此之外则不然：本章报告
# 字节数、FLOPs 和集合通信的调度，时间只从公式得出，公式里用的是真实芯片的常数。

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book.listing import show_source
from inferbook.model import decode, decoder, kvcache
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset
from inferbook.parallel import sequence_parallel, weight_stationary
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import make_plan, param_specs, shard_params
from inferbook.perf import collectives, comm_time, counts, hlo
from inferbook.perf.hardware import get_chip

print(info.describe())

# %% tags=["hide-input"]
from inferbook.book.figures import glue_figure
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_flops,
    fmt_percent,
    fmt_ratio,
    glue,
)

# %% [markdown]
# ## A model, a mesh, a plan
#
# The model is small enough to run on eight emulated devices in seconds and wide enough that
# its matrix multiplications dominate its FLOPs. The mesh is eight devices in a row, one axis
# named `x`. A *plan*
# says which mesh axes split which dimension; for 1D model parallelism every axis splits the
# heads and the MLP width.

# %% [markdown] tags=["lang-zh"]
# ## 一个模型、一个网格、一份计划
#
# 这个模型足够小，能在八个模拟设备上几秒钟跑完；又足够宽，矩阵乘法在它的 FLOPs 中占绝大部分。
# 网格是排成一行的八个设备，只有一个名为 `x` 的轴。一份*计划*（plan）说明哪些网格轴切分哪个维度；
# 对于一维模型并行，每个轴都切分注意力头和 MLP 的宽度。

# %%
cfg = ModelConfig(L=2, D=512, F=2048, N=8, K=8, H=64, V=1024, name="demo-512")
params = decoder.init_params(cfg, seed=0)
print(cfg)
mesh8 = named_mesh("8")
plan = make_plan(cfg, mesh8, "1d-ws")
print(plan.describe())
layer_specs = param_specs(cfg, plan)["layers"][0]
for name in ("wq", "wk", "wo", "w_gate", "w_down", "attn_norm"):
    shape = decoder.param_shapes(cfg)["layers"][0][name]
    print(f"  {name:9s} {str(shape):16s} -> {layer_specs[name]}")

# %% [markdown]
# `wq` $[D, N \cdot H]$ is split over its heads (columns in blocks of $H$), `w_gate` $[D, F]$ over its columns and `w_down`
# $[F, D]$ over its rows: device $i$ owns heads $i$ and the $i$-th slice of the hidden layer,
# in the sources' notation $W_\text{in}[D, F_X]$ and $W_\text{out}[F_X, D]$. Norm gains are
# replicated. This is the layout of Megatron-LM {cite:p}`shoeybi2019megatron`.
#
# ## Model parallelism
#
# Here is the whole forward pass as one device sees it. Each line's comment gives the shape of
# *that device's* block; every collective is written out.

# %% [markdown] tags=["lang-zh"]
# `wq` $[D, N \cdot H]$ 按头切分（以 $H$ 列为一块），`w_gate` $[D, F]$ 按列切分，`w_down`
# $[F, D]$ 按行切分：设备 $i$ 拥有第 $i$ 个头和隐藏层的第 $i$ 片，用原文的记法就是
# $W_\text{in}[D, F_X]$ 和 $W_\text{out}[F_X, D]$。归一化的增益在每个设备上各有一份副本。这就是
# Megatron-LM 的布局 {cite:p}`shoeybi2019megatron`。
#
# ## 模型并行
#
# 下面是一个设备眼中的整个前向计算。每一行的注释给出*该设备*所持有的块的形状；每一次集合通信都
# 明确地写了出来。

# %%
show_source(weight_stationary.transformer_1d)

# %% [markdown]
# Activations $[B, T, D]$ are the same on every device. A device computes its heads' queries,
# keys and values, attends with them, and multiplies by its rows of $W_O$: the result is a
# *partial sum* over heads, completed by an AllReduce. The MLP does the same over $F$. Two
# AllReduces per layer, each of the full activations $B \cdot T \cdot D$ — whatever the number
# of devices.
#
# First the claim that matters: the sharded prefill computes what the single-device prefill
# computes. We compile it once, run it, and compare logits and KV cache.

# %% [markdown] tags=["lang-zh"]
# 激活值 $[B, T, D]$ 在每个设备上都相同。一个设备计算它那些头的查询、键和值，用它们做注意力，再
# 乘以 $W_O$ 中属于它的那些行：结果是对所有头求和的一个*部分和*，由一次全规约（AllReduce）补全。
# MLP 在 $F$ 上做同样的事。每层两次全规约，每次都作用于完整的激活值 $B \cdot T \cdot D$——不论
# 设备有多少个。
#
# 先验证最要紧的一点：分片后的预填充与单设备的预填充算出的结果相同。我们把它编译一次、运行，
# 然后比较 logits 和 KV 缓存。

# %%
B, T = 2, 128
tokens_BT = jax.random.randint(jax.random.key(1), (B, T), 0, cfg.V, jnp.int32)
lengths_B = jnp.array([T, 100], jnp.int32)                  # a ragged batch

ref_logits, ref_cache = decode.prefill(params, cfg, tokens_BT, lengths_B,
                                       kvcache.init_cache(cfg, B, T))
sharded = shard_params(params, cfg, plan)
prefill_1d = hlo.compile_fn(sd.prefill, sharded, cfg, plan, tokens_BT, lengths_B,
                            sd.init_cache(cfg, plan, B, T))
logits, cache = prefill_1d(sharded, tokens_BT, lengths_B, sd.init_cache(cfg, plan, B, T))

logit_err = float(jnp.max(jnp.abs(logits - ref_logits)))
cache_err = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(cache.k + cache.v,
                                                                ref_cache.k + ref_cache.v))
assert logit_err < 1e-4 and cache_err < 1e-4, (logit_err, cache_err)
block = cache.k[0].addressable_shards[0].data.shape
assert block == (B, cfg.K // 8, T, cfg.H)                  # each device keeps its heads' K, V

# %% tags=["hide-input"]
glue("ch8_logit_err", f"{logit_err:.1e}")
glue("ch8_cache_block", str(block))
print(f"largest logit difference {logit_err:.1e}, cache {cache_err:.1e}; "
      f"each device holds a cache block of shape {block}")

# %% [markdown]
# The logits agree to {glue:text}`ch8_logit_err`, and each device holds the cache for its own
# heads, blocks of shape {glue:text}`ch8_cache_block` — exactly what a head-sharded decode
# step will read.
#
# ### The communication, read from the program
#
# What does this program send between devices? `inferbook.perf.hlo` reads every collective out of
# the optimized program XLA compiled, with the label the layout gave it, its shape, the bytes
# of the array it works on and the size of the device groups. Beside it, the estimator's
# inventory of the 1D layout, computed from the model's dimensions alone.

# %% [markdown] tags=["lang-zh"]
# logits 的差异在 {glue:text}`ch8_logit_err` 以内，每个设备持有它自己那些头的缓存，块的形状为
# {glue:text}`ch8_cache_block`——正是按头分片的解码步骤将要读取的样子。
#
# ### 从程序中读出通信
#
# 这个程序在设备之间发送了什么？`inferbook.perf.hlo` 从 XLA 编译出的优化后程序中读出每一次
# 集合通信：布局给它的标签、它的形状、它所处理的数组的字节数，以及设备组的大小。与之并列的是
# 估算器对一维布局的清单，只由模型的各个维度算出。

# %%
colls = hlo.collectives(prefill_1d)
predicted = collectives.ws1d_collectives(cfg, B, T, m=8, bytes_per_element=4)
assert hlo.bytes_by_scope(colls) == collectives.total_bytes(predicted, by="scope")

flops_device = hlo.flops(prefill_1d)
flops_model = counts.forward_flops(cfg, B, T, T, logits_for=1)
assert abs(flops_device / (flops_model / 8) - 1) < 0.05
comm_1d = sum(c.bytes for c in colls)

# %% tags=["hide-input"]
print(hlo.format_table(colls))
print()
print(collectives.format_comms(predicted, hlo.bytes_by_scope(colls)))
glue("ch8_flops_device", fmt_flops(flops_device))
glue("ch8_flops_share", fmt_percent(flops_device / flops_model, 1))
glue("ch8_comm_1d", fmt_bytes(comm_1d))

# %% [markdown]
# The compiled program and the formula agree byte for byte: one AllGather to assemble the
# embeddings, two AllReduces of $[B, T, D]$ per layer, one of the float32 logits. Each device
# performs {glue:text}`ch8_flops_device` — {glue:text}`ch8_flops_share` of the model's FLOPs
# by XLA's count, within a few percent of the ideal one eighth (XLA also counts the norms
# and softmax, which every device repeats). The collectives move {glue:text}`ch8_comm_1d`.
#
# ### Up to the interconnect's limit
#
# Splitting over $M$ devices divides the arithmetic by $M$ but not the AllReduces: each still
# works on all $B \cdot T \cdot D$ activations. We check that on the compiled programs for
# $M = 2, 4, 8$ (compiled from shapes alone; nothing needs to run).

# %% [markdown] tags=["lang-zh"]
# 编译后的程序与公式逐字节吻合：一次全收集（AllGather）拼出嵌入，每层两次对 $[B, T, D]$ 的全规约，
# 还有一次对 float32 logits 的全规约。每个设备执行 {glue:text}`ch8_flops_device`——按 XLA 的计数，
# 占模型 FLOPs 的 {glue:text}`ch8_flops_share`，与理想的八分之一只差几个百分点（XLA 还计入了
# 归一化和 softmax，而它们每个设备都要重复一遍）。这些集合通信共移动 {glue:text}`ch8_comm_1d`。
#
# ### 直到互连的极限
#
# 切分到 $M$ 个设备上，计算量除以 $M$，全规约却不会：每一次仍然作用于全部 $B \cdot T \cdot D$ 个
# 激活值。我们在 $M = 2, 4, 8$ 的编译后程序上验证这一点（只从形状编译；什么都不用运行）。

# %%
rows = []
for m in (2, 4, 8):
    plan_m = make_plan(cfg, named_mesh(str(m)), "1d-ws")
    p_m, c_m = sd.abstract_inputs(cfg, plan_m, B, T)
    prog = prefill_1d if m == 8 else hlo.compile_fn(sd.prefill, p_m, cfg, plan_m, tokens_BT,
                                                     lengths_B, c_m)
    cs = hlo.collectives(prog)
    rows.append((m, hlo.flops(prog), sum(c.bytes for c in cs), sum(c.wire_bytes for c in cs)))
    assert hlo.bytes_by_scope(cs) == collectives.total_bytes(
        collectives.ws1d_collectives(cfg, B, T, m=m, bytes_per_element=4), by="scope")
for m, f, b, w in rows:
    print(f"M={m}:  FLOPs per device {fmt_flops(f):>14s}   collective bytes {fmt_bytes(b):>9s}"
          f"   sent per device (ring) {fmt_bytes(w):>9s}")
assert rows[0][1] > 3.5 * rows[2][1]                         # arithmetic falls like 1/M ...
assert rows[0][2] == rows[2][2]                              # ... the collectives do not

# %% [markdown]
# The FLOPs per device fall fourfold from two devices to eight; the collectives stay the same
# size (what each device actually sends with a ring algorithm even grows a little, as
# $2(M-1)/M$). Sooner or later communication takes longer than the arithmetic it serves.
#
# When? Take one MLP block. Each device does $2 \cdot T \cdot D \cdot F$ FLOPs per weight
# matrix divided by $M$, at $C$ FLOP/s; the AllReduce of $T \cdot D$ bfloat16 activations takes
# $2 \cdot 2 T D / W_\text{ici}$ on one axis of the interconnect. For the sources' two-matrix
# MLP the two are equal at
#
# $$M^* = \frac{F \cdot W_\text{ici}}{C} = \frac{F}{\alpha}, \qquad \alpha = \frac{C}{W_\text{ici}},$$
#
# and a gated MLP, with three matrices, does {glue:text}`ch8_gated_x` the arithmetic and can
# go {glue:text}`ch8_gated_x` further. We evaluate it with the constants of a TPU v5e, for
# the scaling book's 18B model,
# and check it against the whole forward pass — attention included — computed from the
# estimator's inventory of collectives and its FLOP count.

# %% [markdown] tags=["lang-zh"]
# 从两个设备到八个设备，每个设备的 FLOPs 降为四分之一；集合通信的大小保持不变（用环形算法时，
# 每个设备实际发送的量甚至还略有增长，按 $2(M-1)/M$ 变化）。迟早，通信所花的时间会超过它所服务的
# 计算。
#
# 什么时候？取一个 MLP 块。对每个权重矩阵，每个设备做 $2 \cdot T \cdot D \cdot F$ 除以 $M$ 的
# FLOPs，速度为 $C$ FLOP/s；对 $T \cdot D$ 个 bfloat16 激活值的全规约，在互连的一个轴上耗时
# $2 \cdot 2 T D / W_\text{ici}$。对于原文中由两个矩阵组成的 MLP，两者在下面这一点相等：
#
# $$M^* = \frac{F \cdot W_\text{ici}}{C} = \frac{F}{\alpha}, \qquad \alpha = \frac{C}{W_\text{ici}},$$
#
# 而门控 MLP 有三个矩阵，计算量是它的 {glue:text}`ch8_gated_x`，所以极限也能放宽到原来的
# {glue:text}`ch8_gated_x`。我们用 TPU v5e 的常数，对《How to Scale Your Model》的 18B 模型求出这个值，并与
# 整个前向计算（包括注意力）对照检验：后者由估算器的集合通信清单和它的 FLOP 计数算出。

# %%
chip = get_chip("TPU v5e")
W_ici = comm_time.ici_bandwidth(chip)                        # one axis, both directions
alpha = chip.bf16_flops_per_s / W_ici
big = get_preset("scaling-book-18b")
T_big = 8192
m_star = comm_time.prefill_model_parallel_limit(big, chip)


def prefill_times(cfg_, m, tokens):
    """Per-device arithmetic and communication time of a bf16 prefill (1D layout, one axis)."""
    flops = counts.forward_flops(cfg_, 1, tokens, tokens, logits_for=1)
    t_math = flops / (m * chip.bf16_flops_per_s)
    comms = collectives.ws1d_collectives(cfg_, 1, tokens, m, bytes_per_element=2)
    t_comm = sum((2 if c.kind == "all-reduce" else 1) * c.total / W_ici for c in comms)
    return t_math, t_comm


ms = np.array([1, 2, 4, 8, 16, 32, 64])
times = np.array([prefill_times(big, m, T_big) for m in ms])
whole_star = float(np.interp(0, times[:, 1] - times[:, 0], ms))   # comm overtakes math
assert times[0, 0] > times[0, 1] and times[-1, 0] < times[-1, 1]
assert 0.5 < whole_star / m_star < 2

# %% tags=["hide-input"]
glue("ch8_alpha", f"{alpha:,.0f}")
glue("ch8_chip", chip.name)
glue("ch8_F_over_alpha", f"{big.F / alpha:.1f}")
glue("ch8_F", f"{big.F:,}")
glue("ch8_gated_x", fmt_ratio(3 / 2))          # three weight matrices against two
glue("ch8_mstar", f"{m_star:.1f}")
glue("ch8_whole_star", f"{whole_star:.1f}")
glue("ch8_T_big", fmt_count(T_big))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(ms, times[:, 0] * 1e3, "o-", label="arithmetic per device")
ax.loglog(ms, times[:, 1] * 1e3, "s-", label="collectives (AllReduce, AllGather)")
ax.axvline(m_star, color="gray", ls=":", label=f"MLP limit 1.5·F/α ≈ {m_star:.0f}")
ax.set_xlabel("model-parallel devices M")
ax.set_ylabel("time per prefill (ms)")
ax.set_title(f"{big.name}, {T_big}-token prefill, bf16, on {chip.name} (formula)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch8_mp_limit_figure", fig, zh=dict(
    title=f"{big.name}，{T_big} 个词元的预填充，bf16，{chip.name}（公式）",
    xlabel="模型并行的设备数 M", ylabel="每次预填充的时间（ms）",
    legend=["每个设备的计算", "集合通信（全规约、全收集）", f"MLP 的极限 1.5·F/α ≈ {m_star:.0f}"]))

# %% [markdown]
# ```{glue:figure} ch8_mp_limit_figure
# ```
#
# On a {glue:text}`ch8_chip`, $\alpha =$ {glue:text}`ch8_alpha` FLOPs per byte of
# interconnect: the scaling book's "F / 2200". With $F =$ {glue:text}`ch8_F` the two-matrix
# limit is {glue:text}`ch8_F_over_alpha` devices and the gated MLP's {glue:text}`ch8_mstar`;
# the whole forward pass of a {glue:text}`ch8_T_big`-token prompt, attention included,
# crosses over at about {glue:text}`ch8_whole_star`. So model parallelism over one axis of the
# interconnect pays up to the single digits or low tens of devices, not hundreds. (Over two or
# three axes of a torus the AllReduce has two or three times the bandwidth, and the limit
# moves up in proportion.) The number of prompt tokens cancels: both sides grow linearly in
# $T$.
#
# ## Sequence parallelism
#
# Past that limit, prefill does what training does: it splits the *sequence*, like data
# parallelism over positions. Everything position-wise — the norms, the projections, the MLP —
# then needs no communication at all. Attention does: the queries of a device need the keys
# and values of every earlier position, and those live on other devices.
#
# Ring attention {cite:p}`liu2023ring` passes the key and value blocks around a ring. At step
# $r$ a device holds the block that started $r$ devices back, computes the attention of its
# own queries over it, and folds the result into its running output with the log-sum-exp rule
# that FlashAttention uses to merge blocks (chapter 6). After $Q-1$ steps every query has met
# every key.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch8_mp_limit_figure
# ```
#
# 在 {glue:text}`ch8_chip` 上，$\alpha =$ {glue:text}`ch8_alpha`，单位是每字节互连流量对应的
# FLOPs：这就是《How to Scale Your Model》里的“F / 2200”。取 $F =$ {glue:text}`ch8_F`，两矩阵 MLP 的极限是
# {glue:text}`ch8_F_over_alpha` 个设备，门控 MLP 的极限是 {glue:text}`ch8_mstar` 个；对于
# {glue:text}`ch8_T_big` 个词元的提示词，整个前向计算（包括注意力）大约在
# {glue:text}`ch8_whole_star` 个设备处交叉。所以，在互连的一个轴上，模型并行在个位数到一二十个设备
# 以内划算，而不是几百个。（在环面的两个或三个轴上，全规约可用的带宽随轴数成倍增加，极限也按比例
# 上移。）提示词的词元数会被约掉：两边都随 $T$ 线性增长。
#
# ## 序列并行
#
# 过了这个极限，预填充就像训练那样做：切分*序列*，相当于在位置上做数据并行。所有逐位置的
# 操作——归一化、投影、MLP——于是完全不需要通信。注意力则需要：一个设备上的查询需要之前每个位置的
# 键和值，而它们存放在别的设备上。
#
# 环形注意力 {cite:p}`liu2023ring` 沿着一个环传递键块和值块。在第 $r$ 步，一个设备持有从它往回数
# 第 $r$ 个设备出发的那个块，计算它自己的查询对这个块的注意力，再用 FlashAttention 合并块时所用的
# LSE（指数和的对数）规则（第 6 章）把结果并入它累计的输出。经过 $Q-1$ 步，每个查询都见过了每个键。

# %%
show_source(sequence_parallel.ring_attention)

# %% [markdown]
# Which positions each device holds matters. Cut the prompt into contiguous blocks, and under
# the causal mask the last device has work for every block while the first has work only for
# its own. Striping — position $p$ on device $p \bmod Q$, as in striped attention
# {cite:p}`brandon2023striped` — evens it out. We count the unmasked query–key pairs each
# device computes, both ways:

# %% [markdown] tags=["lang-zh"]
# 每个设备持有哪些位置，是有讲究的。把提示词切成连续的块，在因果掩码下，最后一个设备对每个块都
# 有活要干，而第一个设备只对它自己的块有活。条带化——把位置 $p$ 放到设备 $p \bmod Q$ 上，就像条带
# 注意力 {cite:p}`brandon2023striped` 那样——把工作量拉平了。我们按两种方式分别数一数每个设备计算的
# 未被掩码的查询–键对：

# %%
def pairs_per_device(T_, Q, striped):
    owner = np.arange(T_) % Q if striped else np.arange(T_) // (T_ // Q)
    # Query at position p sees p + 1 keys (itself and everything before it).
    return np.bincount(owner, weights=np.arange(T_) + 1, minlength=Q)


contiguous = pairs_per_device(4096, 8, striped=False)
striped = pairs_per_device(4096, 8, striped=True)
assert contiguous.max() / contiguous.min() > 10 and striped.max() / striped.min() < 1.01

# %% tags=["hide-input"]
glue("ch8_imbalance", fmt_ratio(contiguous.max() / contiguous.min(), 0))
glue("ch8_imbalance_striped", fmt_ratio(striped.max() / striped.min(), 3))
print(f"contiguous blocks: busiest/idlest = {contiguous.max() / contiguous.min():.1f}; "
      f"striped: {striped.max() / striped.min():.4f}")

# %% [markdown]
# Contiguous blocks leave the busiest device {glue:text}`ch8_imbalance` the useful work of the
# idlest; stripes are within {glue:text}`ch8_imbalance_striped`. Striping is also the layout
# in which the library keeps a sequence-sharded KV cache during decoding (chapter 9), so the
# keys prefill writes stay where they are.
#
# We run it on a $2 \times 4$ mesh: the sequence over `x` (two stripes), heads and MLP over
# `y` (four-way model parallelism), and compare with the single-device prefill again.

# %% [markdown] tags=["lang-zh"]
# 用连续的块时，最忙的设备的有效工作量是最闲设备的 {glue:text}`ch8_imbalance`；用条带时，这个比值
# 在 {glue:text}`ch8_imbalance_striped` 以内。条带也是库在解码期间存放按序列分片的 KV 缓存的布局
# （第 9 章），所以预填充写下的键就留在原地。
#
# 我们在一个 $2 \times 4$ 的网格上运行它：序列切分在 `x` 上（两个条带），注意力头和 MLP 切分在 `y` 上
# （四路模型并行），并再次与单设备的预填充比较。

# %%
mesh24 = named_mesh("2x4")
plan_sp = make_plan(cfg, mesh24, "1d-ws", seq="x")
sharded_sp = shard_params(params, cfg, plan_sp)
prefill_sp = hlo.compile_fn(sd.prefill, sharded_sp, cfg, plan_sp, tokens_BT, lengths_B,
                            sd.init_cache(cfg, plan_sp, B, T))
logits_sp, _ = prefill_sp(sharded_sp, tokens_BT, lengths_B, sd.init_cache(cfg, plan_sp, B, T))
sp_err = float(jnp.max(jnp.abs(logits_sp - ref_logits)))
assert sp_err < 1e-4, sp_err

colls_sp = hlo.collectives(prefill_sp)
predicted_sp = collectives.ring_attention_collectives(cfg, B, T, Q=2, m=4, bytes_per_element=4)
assert hlo.bytes_by_scope(colls_sp) == collectives.total_bytes(predicted_sp, by="scope")
ring_bytes = sum(c.bytes for c in colls_sp if c.scope == "ring")

# %% tags=["hide-input"]
print(plan_sp.describe())
print(hlo.format_table(colls_sp))
glue("ch8_sp_err", f"{sp_err:.1e}")
glue("ch8_ring_bytes", fmt_bytes(ring_bytes))
glue("ch8_sp_comm", fmt_bytes(sum(c.bytes for c in colls_sp)))

# %% [markdown]
# Same logits (to {glue:text}`ch8_sp_err`). The schedule shows the ring: per layer, one
# `collective-permute` of the keys and one of the values, between the two devices of each
# stripe pair, {glue:text}`ch8_ring_bytes` in all; the model-parallel AllReduces now work on
# half the tokens each. In total the program moves {glue:text}`ch8_sp_comm`, against
# {glue:text}`ch8_comm_1d` for eight-way model parallelism.
#
# How much does the ring cost at scale? Per layer a device sends its key and value blocks
# $Q - 1$ times, $2 \cdot \frac{T}{Q} K H$ elements, while it computes attention for
# $\frac{T}{Q}$ queries over all $T$ keys, about $4 \frac{T}{Q} \cdot T \cdot N H / 2$ FLOPs
# under the causal mask. The communication grows like $T$, the arithmetic like $T^2$: for
# long prompts the ring hides behind the attention it feeds. With LLaMA-3 70B on TPU v5e,
# eight-way model parallelism inside and eight stripes:

# %% [markdown] tags=["lang-zh"]
# logits 相同（差异在 {glue:text}`ch8_sp_err` 以内）。调度表中可以看到这个环：每层对键做一次
# `collective-permute`，对值做一次，在每对条带的两个设备之间进行，共 {glue:text}`ch8_ring_bytes`；
# 模型并行的全规约现在每次只作用于一半的词元。整个程序共移动 {glue:text}`ch8_sp_comm`，而八路模型
# 并行移动的是 {glue:text}`ch8_comm_1d`。
#
# 规模大了以后，环的代价有多大？每层中，一个设备把它的键块和值块发送 $Q - 1$ 次，共
# $2 \cdot \frac{T}{Q} K H$ 个元素；与此同时，它为 $\frac{T}{Q}$ 个查询对全部 $T$ 个键计算
# 注意力，在因果掩码下约为 $4 \frac{T}{Q} \cdot T \cdot N H / 2$ FLOPs。通信按 $T$ 增长，计算按
# $T^2$ 增长：对于长提示词，环的通信被它所供给的注意力计算掩盖。以 TPU v5e 上的 LLaMA-3 70B 为例，
# 内部做八路模型并行，再分成八个条带：

# %%
llama = get_preset("llama-3-70b")
Q, M = 8, 8
T_axis = np.array([1024, 2048, 4096, 8192, 16384, 32768, 131072])
kv_heads = max(llama.K // M, 1)
ring_s = np.array([2 * (Q - 1) * (t / Q) * kv_heads * llama.H * 2 / W_ici for t in T_axis])
attn_s = np.array([4 * (t / Q) * t * (llama.N // M) * llama.H / 2 / chip.bf16_flops_per_s
                   for t in T_axis])
t_hidden = float(np.interp(1.0, attn_s / ring_s, T_axis))
assert (attn_s / ring_s)[0] < 1 < (attn_s / ring_s)[-1]

# %% tags=["hide-input"]
glue("ch8_t_hidden", fmt_count(round(t_hidden, -2)))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(T_axis, ring_s * 1e3, "s-", label="ring: K, V blocks passed on (per layer)")
ax.loglog(T_axis, attn_s * 1e3, "o-", label="causal attention arithmetic (per layer)")
ax.set_xlabel("prompt length T (tokens)")
ax.set_ylabel("time per device (ms)")
ax.set_title(f"{llama.name}: Q = {Q} stripes, M = {M}, bf16, {chip.name} (formula)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch8_ring_figure", fig, zh=dict(
    title=f"{llama.name}：Q = {Q} 个条带，M = {M}，bf16，{chip.name}（公式）",
    xlabel="提示词长度 T（词元）", ylabel="每个设备的时间（ms）",
    legend=["环：传递 K、V 块（每层）", "因果注意力的计算（每层）"]))

# %% [markdown]
# ```{glue:figure} ch8_ring_figure
# ```
#
# Beyond about {glue:text}`ch8_t_hidden` tokens the attention arithmetic of a stripe outlasts
# passing the ring's blocks, so with overlapping (each step sends the next block while
# computing on the current one) sequence parallelism costs almost nothing on long prompts —
# the regime where it is needed. GQA helps here: only the $K$ key/value heads travel, not the
# $N$ query heads.
#
# ## The foil: gathering the weights
#
# Model parallelism moves activations and keeps weights still. The opposite choice splits the
# *batch* over devices, stores the weights split as before, and gathers each matrix whole just
# before using it — fully sharded data parallelism, or the weight-gathered layout of
# {cite:t}`pope2023esti`. Every device runs the unsharded model on its own sequences, and
# attention needs no communication. The price is that every forward pass moves every weight,
# whatever the number of tokens.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch8_ring_figure
# ```
#
# 超过大约 {glue:text}`ch8_t_hidden` 个词元，一个条带的注意力计算就比传递环上的块耗时更长，所以只要
# 让两者重叠（每一步在计算当前块的同时发送下一个块），序列并行在长提示词上几乎不花代价——而长提示词
# 恰恰是需要它的场合。GQA 在这里帮了忙：在环上传递的只有 $K$ 个键/值头，而不是 $N$ 个查询头。
#
# ## 对照：收集权重
#
# 模型并行移动激活值，让权重保持不动。相反的选择是把*批次*切分到各个设备上，权重仍像之前那样切分
# 存放，但在使用每个矩阵之前把它完整地收集起来——即完全分片数据并行，或 {cite:t}`pope2023esti` 的
# 权重收集布局。每个设备在自己的序列上运行未分片的模型，注意力不需要任何通信。代价是，每次前向
# 计算都要移动每一个权重，不论词元有多少。

# %%
B_wg = 8
plan_wg = make_plan(cfg, mesh8, "weight-gathered")
p_wg, c_wg = sd.abstract_inputs(cfg, plan_wg, B_wg, T)
tok_wg = jax.ShapeDtypeStruct((B_wg, T), jnp.int32)
len_wg = jax.ShapeDtypeStruct((B_wg,), jnp.int32)
prefill_wg = hlo.compile_fn(sd.prefill, p_wg, cfg, plan_wg, tok_wg, len_wg, c_wg)
colls_wg = hlo.collectives(prefill_wg)
wg_bytes = sum(c.bytes for c in colls_wg)
assert hlo.bytes_by_scope(colls_wg) == collectives.total_bytes(
    collectives.weight_gathered_collectives(cfg, 8, bytes_per_param=4), by="scope")
assert wg_bytes <= counts.param_bytes(cfg, 4)
one_d = collectives.total_bytes(collectives.ws1d_collectives(cfg, B_wg, T, 8, bytes_per_element=4))

# %% tags=["hide-input"]
glue("ch8_wg_bytes", fmt_bytes(wg_bytes))
glue("ch8_wg_1d_bytes", fmt_bytes(sum(one_d.values())))
print(f"weight-gathered: {len(colls_wg)} AllGathers, {fmt_bytes(wg_bytes)}; "
      f"1D for the same {B_wg}×{T} tokens: {fmt_bytes(sum(one_d.values()))}")

# %% [markdown]
# The program is a list of AllGathers, one per weight matrix, {glue:text}`ch8_wg_bytes` in
# all — nearly every parameter — against {glue:text}`ch8_wg_1d_bytes` of activations for 1D
# model parallelism on the same batch. Which is smaller depends only on the number of tokens
# in flight: 1D moves about $2 L \cdot BT \cdot D$ elements, the weights are fixed. For the
# 18B model:

# %% [markdown] tags=["lang-zh"]
# 这个程序就是一串全收集，每个权重矩阵一次，共 {glue:text}`ch8_wg_bytes`——几乎是全部参数——而在
# 同一个批次上，一维模型并行移动的激活值是 {glue:text}`ch8_wg_1d_bytes`。哪个更小，只取决于正在处理
# 的词元数：一维布局移动约 $2 L \cdot BT \cdot D$ 个元素，而权重的大小是固定的。对 18B 模型来说：

# %%
tokens_axis = np.geomspace(256, 1 << 20, 60)
wg_s = sum(c.total for c in collectives.weight_gathered_collectives(big, 8)) / W_ici
ws_s = np.array([sum((2 if c.kind == "all-reduce" else 1) * c.total
                     for c in collectives.ws1d_collectives(big, 1, int(t), 8)) / W_ici
                 for t in tokens_axis])
cross_tokens = float(np.interp(wg_s, ws_s, tokens_axis))
assert ws_s[0] < wg_s < ws_s[-1]

# %% tags=["hide-input"]
glue("ch8_cross_tokens", fmt_count(round(cross_tokens, -3)))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(tokens_axis, ws_s * 1e3, label="1D weight-stationary (activations move)")
ax.loglog(tokens_axis, np.full_like(tokens_axis, wg_s * 1e3),
          label="weight-gathered (weights move)")
ax.axvline(cross_tokens, color="gray", ls=":")
ax.set_xlabel("tokens in the forward pass, B·T")
ax.set_ylabel("communication time per pass (ms)")
ax.set_title(f"{big.name}, 8 devices, bf16, {chip.name} (formula)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch8_gather_figure", fig, zh=dict(
    title=f"{big.name}，8 个设备，bf16，{chip.name}（公式）",
    xlabel="前向计算中的词元数 B·T", ylabel="每次前向计算的通信时间（ms）",
    legend=["一维权重驻留（移动激活值）", "权重收集（移动权重）"]))

# %% [markdown]
# ```{glue:figure} ch8_gather_figure
# ```
#
# Gathering the weights wins only beyond about {glue:text}`ch8_cross_tokens` tokens per
# forward pass — a large batch of long prompts, the offline, throughput-bound end of prefill
# where {cite:t}`pope2023esti` switch layouts. For one prompt at a time, and for every decode
# step (chapter 9), activations are the small thing and weights stay where they are.
#
# ## Takeaways
#
# - Prefill shards like training. Model parallelism splits the heads and the MLP width and
#   pays two AllReduces of the activations per layer; their size does not shrink with the
#   number of devices, so it pays up to about $F / \alpha$ devices per interconnect axis.
# - Beyond that, split the sequence. Ring attention passes key/value blocks around the
#   devices, communication linear in $T$ under arithmetic quadratic in $T$; striping keeps the
#   causal work balanced and leaves the cache where decoding will read it.
# - Every collective claimed above is in the compiled program, byte for byte.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch8_gather_figure
# ```
#
# 只有当每次前向计算的词元超过大约 {glue:text}`ch8_cross_tokens` 个时，收集权重才占上风——那是由
# 长提示词组成的大批次，是预填充中离线的、受吞吐量限制的那一端，{cite:t}`pope2023esti` 正是在这里
# 切换布局。对于一次一个的提示词，以及每一个解码步骤（第 9 章），激活值才是小的那一方，权重待在
# 原地不动。
#
# ## 要点
#
# - 预填充像训练一样分片。模型并行切分注意力头和 MLP 的宽度，每层付出两次对激活值的全规约；它们的
#   大小不随设备数减小，所以在每个互连轴上，它在大约 $F / \alpha$ 个设备以内划算。
# - 超过这个数，就切分序列。环形注意力在设备之间传递键/值块，通信随 $T$ 线性增长，被随 $T$
#   平方增长的计算掩盖；条带化让因果掩码下的工作保持均衡，并把缓存留在解码将要读取它的地方。
# - 上文声称的每一次集合通信都在编译后的程序里，逐字节吻合。
