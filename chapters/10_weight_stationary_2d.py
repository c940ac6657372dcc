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
# # 2D weight-stationary sharding
#
# The 1D layout of chapters 8 and 9 has a flaw that only shows at scale. Each block ends in an
# AllReduce of the activations $[B, D]$, and that array does not shrink as chips are added:
# more chips mean less arithmetic and fewer weights per chip, but the same collective. And
# the weight blocks grow lopsided — $W_\text{in}[D, F_Y]$ keeps all of $D$ while $F_Y$ shrinks
# to a sliver.
#
# **2D weight-stationary** sharding {cite:p}`pope2023esti` splits every weight matrix along
# *both* of its dimensions, $D$ over one group of mesh axes ($X$) and $F$ over the others
# ($YZ$), so each chip holds a roughly square block. Activations between blocks are split over
# $D$ on every chip, and each collective moves a $1/X$ or $1/YZ$ slice instead of the whole.
# This chapter runs the layout, derives its communication time and its best $X$ and $YZ$
# (appendix B and worked problem 7 of {cite:t}`austin2025scaling`), and follows the bytes of
# compiled programs from 8 to 128 chips to the point where 2D overtakes 1D.
#
# To compile programs for meshes of up to 128 devices, this chapter asks for 128 emulated
# devices. It runs computations on eight of them; the larger meshes are only compiled, from
# shapes, to read their collectives. A last section takes the program across hosts: it runs
# as two processes, as a pod's hosts run it, and what crosses between hosts is priced on the
# data-centre network.

# %% [markdown] tags=["lang-zh"]
# # 二维权重驻留分片
#
# 第 8、9 章的一维布局有一个只在大规模时才显现的缺陷。每个块都以对激活值 $[B, D]$ 的全规约结束，而这个
# 数组不会随着芯片增多而变小：芯片越多，每个芯片上的计算和权重越少，集合通信却不变。而且权重块会变得
# 失衡——$W_\text{in}[D, F_Y]$ 保留了完整的 $D$，而 $F_Y$ 缩成了细细的一条。
#
# **二维权重驻留**分片 {cite:p}`pope2023esti` 把每个权重矩阵沿它的*两个*维度切分，$D$ 切分在一组网格轴上
# （$X$），$F$ 切分在其余的轴上（$YZ$），于是每个芯片持有一个大致呈正方形的块。块与块之间的激活值在每个
# 芯片上都按 $D$ 切分，每次集合通信移动的是 $1/X$ 或 $1/YZ$ 的一片，而不是全部。本章运行这种布局，推导它
# 的通信时间以及最优的 $X$ 和 $YZ$（{cite:t}`austin2025scaling` 的附录 B 与例题 7），并沿着从 8 个到
# 128 个芯片的编译后程序追踪字节数，直到二维超过一维的那一点。
#
# 为了给最多 128 个设备的网格编译程序，本章申请了 128 个模拟设备。计算只在其中八个上运行；更大的网格
# 只从形状编译，用来读出它们的集合通信。最后一节把程序带过主机的边界：它像 pod 的各台主机那样以两个进程
# 运行，主机之间传递的内容则按数据中心网络估算耗时。

# %%
import inferbook

info = inferbook.setup(cpu_devices=128)

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book.figures import glue_figure
from inferbook.book.listing import show_source
from inferbook.book.present import fmt_bytes, fmt_ratio, fmt_seconds, glue
from inferbook.model import decode, decoder
from inferbook.model.config import ModelConfig
from inferbook.model.generate_args import random_prompts
from inferbook.model.presets import get_preset
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel import weight_stationary
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import make_plan, param_specs, shard_params
from inferbook.perf import collectives, comm_time, counts, hlo
from inferbook.perf.hardware import get_chip

print(info.describe())

# %% [markdown]
# ## The algorithm
#
# Worked problem 7 gives the MLP block in five lines. With the input split over all chips,
# $\text{In}[B, D_{XYZ}]$:
#
# 1. $\text{In}[B, D_X] = \text{AllGather}_{YZ}(\text{In}[B, D_{XYZ}])$
# 2. $\text{Tmp}[B, F_{YZ}]\{U_X\} = \text{In}[B, D_X] \cdot W_\text{in}[D_X, F_{YZ}]$ — a
#    partial sum, since each chip saw only its $D_X$ slice
# 3. $\text{Tmp}[B, F_{YZ}] = \text{AllReduce}_X(\text{Tmp}[B, F_{YZ}]\{U_X\})$
# 4. $\text{Out}[B, D_X]\{U_{YZ}\} = \text{Tmp}[B, F_{YZ}] \cdot W_\text{out}[F_{YZ}, D_X]$
# 5. $\text{Out}[B, D_{XYZ}] = \text{ReduceScatter}_{YZ}(\text{Out}[B, D_X]\{U_{YZ}\})$
#
# The library's version, one chip's view, with the RMSNorm in front (whose sum of squares over
# the split $D$ needs one tiny AllReduce of its own):

# %% [markdown] tags=["lang-zh"]
# ## 算法
#
# 例题 7 用五行写出了 MLP 块。输入在所有芯片上切分，$\text{In}[B, D_{XYZ}]$：
#
# 1. $\text{In}[B, D_X] = \text{AllGather}_{YZ}(\text{In}[B, D_{XYZ}])$
# 2. $\text{Tmp}[B, F_{YZ}]\{U_X\} = \text{In}[B, D_X] \cdot W_\text{in}[D_X, F_{YZ}]$——一个部分和，
#    因为每个芯片只看到了它自己的 $D_X$ 片
# 3. $\text{Tmp}[B, F_{YZ}] = \text{AllReduce}_X(\text{Tmp}[B, F_{YZ}]\{U_X\})$
# 4. $\text{Out}[B, D_X]\{U_{YZ}\} = \text{Tmp}[B, F_{YZ}] \cdot W_\text{out}[F_{YZ}, D_X]$
# 5. $\text{Out}[B, D_{XYZ}] = \text{ReduceScatter}_{YZ}(\text{Out}[B, D_X]\{U_{YZ}\})$
#
# 下面是库中的版本，一个芯片的视角，前面加上了 RMSNorm（它要对切分后的 $D$ 求平方和，因此自己也需要一次
# 很小的全规约）：

# %%
show_source(weight_stationary.mlp_2d)

# %% [markdown]
# Attention takes the same shape with heads in place of $F$: $W_Q[D_X, N_{YZ}, H]$,
# $W_O[N_{YZ}, H, D_X]$. Its projections end in a ReduceScatter over $X$ that also splits the
# *batch* over $X$, and an AllGather over $X$ brings the batch back before $W_O$; so the $X$
# chips of a group neither repeat each other's attention nor keep copies of each other's KV
# cache, which is split over heads on $YZ$ and over the batch on $X$.
#
# ## Running it
#
# A small one-layer model on a $2 \times 4$ mesh: $X$ is the axis `x` (two chips), $YZ$ the
# axis `y` (four). We generate greedily with the sharded prefill and decode programs and
# compare with the single-device decoder.

# %% [markdown] tags=["lang-zh"]
# 注意力也是同样的形状，只是用头代替 $F$：$W_Q[D_X, N_{YZ}, H]$，$W_O[N_{YZ}, H, D_X]$。它的投影以一次
# 在 $X$ 上的规约散射结束，这同时也把*批次*切分到了 $X$ 上；在 $W_O$ 之前，一次在 $X$ 上的全收集再把批次
# 收回来。这样，一组中的 $X$ 个芯片既不会重复彼此的注意力计算，也不会保存彼此 KV 缓存的副本——缓存在
# $YZ$ 上按头切分，在 $X$ 上按批次切分。
#
# ## 运行它
#
# 一个只有一层的小模型，放在 $2 \times 4$ 的网格上：$X$ 是轴 `x`（两个芯片），$YZ$ 是轴 `y`（四个）。
# 我们用分片的预填充和解码程序做贪心生成，并与单设备解码器比较。

# %%
cfg = get_preset("demo-gqa")
params = decoder.init_params(cfg, seed=0)
prompts = random_prompts([5, 9, 3, 16, 12, 7, 1, 10], cfg.V)
n_new = 8
reference = decode.generate(params, cfg, prompts, n_new).tokens
tokens_BT, lengths_B = decode.pad_prompts(prompts, 16)
B, S = len(prompts), tokens_BT.shape[1] + n_new

mesh = named_mesh("2x4")
plan = make_plan(cfg, mesh, "2d-ws")

sharded = shard_params(params, cfg, plan)
cache = sd.init_cache(cfg, plan, B, S)
prefill = hlo.compile_fn(sd.prefill, sharded, cfg, plan, tokens_BT, lengths_B, cache)
step = hlo.compile_fn(sd.decode_step, sharded, cfg, plan, jnp.zeros((B,), jnp.int32), cache)
logits, cache = prefill(sharded, tokens_BT, lengths_B, cache)
out = []
for _ in range(n_new):
    out.append(jnp.argmax(logits, -1).astype(jnp.int32))
    logits, cache = step(sharded, out[-1], cache)
assert np.stack(out, axis=1).tolist() == reference
block = cache.k[0].addressable_shards[0].data.shape
assert block == (B // 2, cfg.K // 4, S, cfg.H)             # batch over X, heads over YZ

# %% tags=["hide-input"]
print(plan.describe())
for name, spec in param_specs(cfg, plan)["layers"][0].items():
    print(f"  {name:9s} {spec}")
glue("ch10_block", str(block))
print(f"tokens identical to the single-device run; cache block per device {block}")

# %% [markdown]
# The tokens are those of the single-device decoder, and each chip holds a KV-cache block of
# shape {glue:text}`ch10_block`: half the sequences (the batch split over $X$), one KV head
# (split over $YZ$). The decode step's collectives, with the label each got in the layout,
# against the estimator's inventory:

# %% [markdown] tags=["lang-zh"]
# 生成的词元（token）与单设备解码器的相同，每个芯片持有形状为 {glue:text}`ch10_block` 的 KV 缓存块：一半的序列
# （批次切分在 $X$ 上）、一个 KV 头（切分在 $YZ$ 上）。下面是解码步骤的集合通信，附有布局给每一次起的标签，
# 并与估算器的清单对照：

# %%
colls = hlo.collectives(step)
predicted = collectives.ws2d_collectives(cfg, B, 1, X=2, YZ=4, kv_heads=4, bytes_per_element=4)
assert hlo.bytes_by_scope(colls) == collectives.total_bytes(predicted, by="scope")
flops_step = hlo.flops(step)
flops_model = counts.forward_flops(cfg, B, 1, S + 1)
assert abs(flops_step / (flops_model / 8) - 1) < 0.1

# %% tags=["hide-input"]
print(hlo.format_table(colls))
print()
print(collectives.format_comms(predicted, hlo.bytes_by_scope(colls)))
glue("ch10_n_colls", str(len(colls)))

# %% [markdown]
# In the layer: the AllGathers over $YZ$ (`block_in`) and ReduceScatters over $YZ$
# (`block_out`) of steps 1 and 5, one for attention and one for the MLP; the AllReduce over
# $X$ of step 3 (`mlp_hidden`); the projections' ReduceScatters and the AllGather over $X$
# that split attention's batch; and the norms' small AllReduces. {glue:text}`ch10_n_colls`
# collectives in all, each matching its formula byte for byte, and each chip does an eighth of
# the arithmetic. There are more collectives than in 1D, but each moves a slice.
#
# ## How much time, and the best split
#
# Counting the MLP block as the sources do — bfloat16, an AllGather or ReduceScatter of an
# array of $A$ bytes costing $A / W_\text{ici}$ per mesh axis it runs over, an AllReduce
# twice that, $X$ on one axis of a 3D torus and $YZ$ on the other two — the 2D block costs
#
# $$T_\text{2D} = \frac{2BD}{2X\,W} + \frac{4BF}{YZ\,W} + \frac{2BD}{2X\,W}
#   = \frac{2BD}{X\,W} + \frac{4BF}{YZ\,W},$$
#
# and 1D, an AllReduce of $2BD$ bytes over all three axes, $T_\text{1D} = 4BD / (3W)$. With
# $X \cdot YZ = n$ fixed, the first term falls with $X$ and the second grows; the sum is least
# at $X = \sqrt{nD / 2F}$, which is $\sqrt{n/8}$ when $F = 4D$, where
#
# $$T_\text{2D} = \frac{\sqrt{128}\,BD}{\sqrt{n}\,W}.$$
#
# Unlike 1D, it keeps falling as chips are added. The two are equal at
# $n^* = 128 \cdot (3/4)^2$ chips.

# %% [markdown] tags=["lang-zh"]
# 在这一层中：步骤 1 和 5 在 $YZ$ 上的全收集（`block_in`）和规约散射（`block_out`），注意力和 MLP 各
# 一次；步骤 3 在 $X$ 上的全规约（`mlp_hidden`）；投影的规约散射，以及在 $X$ 上切分注意力批次的全收集；
# 还有归一化的小型全规约。共 {glue:text}`ch10_n_colls` 次集合通信，每一次都与它的公式逐字节吻合，而每个
# 芯片做八分之一的计算。集合通信比一维时多，但每一次移动的只是一片。
#
# ## 需要多少时间，以及最优的切分
#
# 像原文那样计算 MLP 块——bfloat16；对 $A$ 字节的数组做一次全收集或规约散射，在它经过的每个网格轴上花费
# $A / W_\text{ici}$，全规约再乘以 2；$X$ 在三维环面的一个轴上，$YZ$ 在另外两个轴上——二维块的代价为
#
# $$T_\text{2D} = \frac{2BD}{2X\,W} + \frac{4BF}{YZ\,W} + \frac{2BD}{2X\,W}
#   = \frac{2BD}{X\,W} + \frac{4BF}{YZ\,W},$$
#
# 而一维是在全部三个轴上对 $2BD$ 字节做一次全规约，$T_\text{1D} = 4BD / (3W)$。在 $X \cdot YZ = n$ 固定
# 时，第一项随 $X$ 下降，第二项随之增长；两者之和在 $X = \sqrt{nD / 2F}$ 处最小，当 $F = 4D$ 时就是
# $\sqrt{n/8}$，此时
#
# $$T_\text{2D} = \frac{\sqrt{128}\,BD}{\sqrt{n}\,W}.$$
#
# 与一维不同，它随芯片增多而持续下降。两者在 $n^* = 128 \cdot (3/4)^2$ 个芯片处相等。

# %%
D_, F_ = 4096, 4 * 4096
n_star = comm_time.ws2d_crossover_chips(D_, F_)
grid = np.geomspace(0.1, 100, 100001)
for n in (64, 256, 1024):
    x_opt = comm_time.ws2d_optimal_x(n, D_, F_)
    brute = grid[np.argmin([comm_time.ws2d_comm_time(1, D_, F_, x, n / x, 1.0) for x in grid])]
    assert abs(brute / x_opt - 1) < 1e-3 and abs(x_opt / np.sqrt(n / 8) - 1) < 1e-12
assert abs(n_star - 128 * (3 / 4) ** 2) < 1e-9

# %% tags=["hide-input"]
glue("ch10_nstar", f"{n_star:.0f}")
glue("ch10_nstar_gated", f"{comm_time.ws2d_crossover_chips(D_, 2 * F_):.0f}")
print(f"crossover at n* = {n_star:.1f} chips")

# %% [markdown]
# The crossover is at {glue:text}`ch10_nstar` chips. Worked problem 7 writes $N > 81$ for the
# same expression; $128 \cdot (3/4)^2$ is {glue:text}`ch10_nstar`, and the brute-force
# minimum above agrees with the closed form. (For a gated MLP, whose AllReduce over $X$ carries
# both the gate and the up projection, the same argument gives {glue:text}`ch10_nstar_gated`.)
#
# ## From 8 to 128 chips, read from compiled programs
#
# Now the same comparison from programs rather than formulas. For each chip count we build
# the 1D layout on a three-axis mesh (all axes split $F$) and the 2D layout at the best
# integer split $X \times YZ$ (with $YZ$ over two mesh axes), compile one MLP block of a model
# with $F = 4D$, read every collective, and price it the sources' way: bytes divided by the
# bandwidth of the mesh axes its device groups actually span, twice for an AllReduce.

# %% [markdown] tags=["lang-zh"]
# 交叉点在 {glue:text}`ch10_nstar` 个芯片处。例题 7 对同一个表达式写的是 $N > 81$；而
# $128 \cdot (3/4)^2$ 等于 {glue:text}`ch10_nstar`，上面用穷举求出的最小值也与闭式解一致。（对于门控
# MLP，它在 $X$ 上的全规约要同时携带门控投影和上投影，同样的论证给出 {glue:text}`ch10_nstar_gated`。）
#
# ## 从 8 个到 128 个芯片，从编译后的程序中读出
#
# 现在用程序而不是公式来做同样的比较。对每一种芯片数，我们在一个三轴网格上构建一维布局（所有轴都切分
# $F$），并按最优的整数切分 $X \times YZ$ 构建二维布局（$YZ$ 跨两个网格轴），为一个 $F = 4D$ 的模型编译
# 一个 MLP 块，读出每一次集合通信，再按原文的方式估算它的耗时：字节数除以它的设备组实际跨越的那些网格轴的
# 带宽，全规约再乘以 2。

# %%
chip = get_chip("TPU v5e")
W = comm_time.ici_bandwidth(chip)                  # one axis, both directions
mlp_cfg = ModelConfig(L=1, D=1024, F=4096, N=128, K=128, H=8, V=256, mlp="plain",
                      activation="gelu", name="mlp-4d")
B_tok = 16


def split3(n, parts):
    """n as a product of `parts` factors, as even as powers of two allow."""
    shape = [1] * parts
    for i in range(int(np.log2(n))):
        shape[i % parts] *= 2
    return sorted(shape, reverse=True)


def priced(compiled, mesh_):
    """Bytes per kind and time of the MLP's collectives (the norm statistics left out)."""
    t, by_kind = 0.0, {}
    for c in hlo.collectives(compiled):
        if c.scope == "norm":
            continue
        axes = len(hlo.group_axes(c, mesh_))
        t += (2 if c.kind == "all-reduce" else 1) * c.bytes / (axes * W)
        by_kind[c.kind] = by_kind.get(c.kind, 0) + c.bytes
    return t, by_kind


def mlp_block(layout, shape, names, x_axes=None):
    mesh_ = named_mesh(shape, names)
    plan_ = make_plan(mlp_cfg, mesh_, layout, x=x_axes)
    specs = param_specs(mlp_cfg, plan_)["layers"][0]
    layer = {k: jax.ShapeDtypeStruct(s, jnp.float32, sharding=jax.NamedSharding(mesh_, specs[k]))
             for k, s in decoder.param_shapes(mlp_cfg)["layers"][0].items()}
    x = jax.ShapeDtypeStruct((B_tok, 1, mlp_cfg.D), jnp.float32)
    return priced(hlo.compile_fn(weight_stationary.mlp_program(mlp_cfg, plan_), layer, x), mesh_)


chips_axis = [8, 16, 32, 64, 128]
rows = []
for n in chips_axis:
    t1, b1 = mlp_block("1d-ws", split3(n, 3), ("x", "y", "z"))
    X, YZ = comm_time.ws2d_best_split(n, mlp_cfg.D, mlp_cfg.F)
    t2, b2 = mlp_block("2d-ws", [X, *split3(YZ, 2)], ("x", "y", "z"), x_axes="x")
    f1 = comm_time.ws1d_comm_time(B_tok, mlp_cfg.D, W, bytes_per_element=4, axes=3)
    f2 = comm_time.ws2d_comm_time(B_tok, mlp_cfg.D, mlp_cfg.F, X, YZ, W, bytes_per_element=4)
    assert abs(t1 / f1 - 1) < 1e-9 and abs(t2 / f2 - 1) < 1e-9, (n, t1, f1, t2, f2)
    # Bytes per device, kind by kind: 1D an AllReduce of [B, D]; 2D an AllGather and a
    # ReduceScatter of [B, D_X] over YZ and, when X > 1, an AllReduce of [B, F_YZ] over X.
    a = 4
    assert b1 == {"all-reduce": B_tok * mlp_cfg.D * a}
    sliver = B_tok * mlp_cfg.D // X * a
    want = {"all-gather": sliver, "reduce-scatter": sliver}
    if X > 1:
        want["all-reduce"] = B_tok * mlp_cfg.F // YZ * a
    assert b2 == want, (n, b2, want)
    rows.append((n, X, YZ, t1, t2, b1, b2))
    moved = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in sorted(b2.items()))
    print(f"n={n:4d}  X={X:2d} × YZ={YZ:3d}   1D {fmt_seconds(t1):>9s}   "
          f"2D {fmt_seconds(t2):>9s}   2D moves: {moved}")
assert rows[0][3] < rows[0][4] and rows[-1][4] < rows[-1][3]      # 1D first, then 2D
assert all(r[5] == rows[0][5] for r in rows)                      # 1D bytes never change
last_1d = max(r[0] for r in rows if r[3] < r[4])                  # 1D still cheaper here
first_2d = min(r[0] for r in rows if r[4] < r[3])                 # 2D cheaper from here on
assert last_1d < n_star < first_2d

# %% tags=["hide-input"]
glue("ch10_last_1d", str(last_1d))
glue("ch10_first_2d", str(first_2d))
glue("ch10_last_x1", str(max(r[0] for r in rows if r[1] == 1)))
glue("ch10_B_tok", str(B_tok))
glue("ch10_t1", fmt_seconds(rows[0][3]))
glue("ch10_t2_128", fmt_seconds(rows[-1][4]))
glue("ch10_gain_128", fmt_ratio(rows[-1][3] / rows[-1][4]))

# %% [markdown]
# For every chip count, the bytes of each kind of collective in the compiled program are
# those of the formula, and so is the time they price to — exactly, not approximately. The 1D
# block's collectives are the same at every size ({glue:text}`ch10_t1` per block at a batch
# of {glue:text}`ch10_B_tok` float32 tokens); the 2D block's shrink, and at 128 chips take
# {glue:text}`ch10_t2_128`, {glue:text}`ch10_gain_128` less.

# %% [markdown] tags=["lang-zh"]
# 对每一种芯片数，编译后程序中每一类集合通信的字节数都与公式相同，估算出的时间也相同——是完全相同，
# 不是近似相同。一维块的集合通信在每种规模下都一样（批次为 {glue:text}`ch10_B_tok` 个 float32 词元时，
# 每块 {glue:text}`ch10_t1`）；二维块的则不断缩小，到 128 个芯片时只需 {glue:text}`ch10_t2_128`，一维
# 是它的 {glue:text}`ch10_gain_128`。

# %%
n_cont = np.geomspace(10, 1024, 200)
t2_cont = [comm_time.ws2d_comm_time(B_tok, mlp_cfg.D, mlp_cfg.F,
                                   comm_time.ws2d_optimal_x(n, mlp_cfg.D, mlp_cfg.F),
                                   n / comm_time.ws2d_optimal_x(n, mlp_cfg.D, mlp_cfg.F), W,
                                   bytes_per_element=4) for n in n_cont]
t1_flat = comm_time.ws1d_comm_time(B_tok, mlp_cfg.D, W, bytes_per_element=4, axes=3)

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(n_cont, np.full_like(n_cont, t1_flat * 1e6), color="C0", label="1D formula")
ax.loglog(n_cont, np.array(t2_cont) * 1e6, color="C1", label="2D formula, optimal X")
ax.loglog([r[0] for r in rows], [r[3] * 1e6 for r in rows], "o", color="C0",
          label="1D, compiled program")
ax.loglog([r[0] for r in rows], [r[4] * 1e6 for r in rows], "s", color="C1",
          label="2D, compiled program (integer split)")
ax.axvline(n_star, color="gray", ls=":", label=f"crossover n* = {n_star:.0f}")
ax.set_xlabel("chips n")
ax.set_ylabel("communication per MLP block (µs)")
ax.set_title(f"One MLP block, D = {mlp_cfg.D}, F = 4D, batch {B_tok}, float32, {chip.name}")
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch10_comm_figure", fig, zh=dict(
    title=f"一个 MLP 块，D = {mlp_cfg.D}，F = 4D，批量大小 {B_tok}，float32，{chip.name}",
    xlabel="芯片数 n", ylabel="每个 MLP 块的通信时间（µs）",
    legend=["一维公式", "二维公式，最优 X", "一维，编译后的程序", "二维，编译后的程序（整数切分）",
            f"交叉点 n* = {n_star:.0f}"]))

# %% [markdown]
# ```{glue:figure} ch10_comm_figure
# ```
#
# Each compiled point equals the formula at its integer split. Up to
# {glue:text}`ch10_last_x1` chips the best split is $X = 1$: 2D degenerates into an AllGather
# and a ReduceScatter over every chip, with no AllReduce at all, which still costs more than
# 1D's single AllReduce because it runs over two axes of the torus rather than three (and sits
# below the curve for the real-valued optimum, which assumes $X > 1$). Once $X > 1$ pays, the
# 2D points fall with the curve and cross the 1D line between {glue:text}`ch10_last_1d` and
# {glue:text}`ch10_first_2d` chips, around the predicted {glue:text}`ch10_nstar`.
#
# Why does 2D keep improving when 1D stalls? Its communication falls like $1/\sqrt{n}$ while
# its arithmetic falls like $1/n$, so for a fixed batch it too becomes communication-bound
# eventually — but at a far larger chip count, and a larger batch pushes that point further
# out again. That is what lets very large models be served with low latency on very large
# slices: more chips keep buying time, instead of buying collectives.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch10_comm_figure
# ```
#
# 每一个编译得到的点都等于它那个整数切分下的公式值。直到 {glue:text}`ch10_last_x1` 个芯片为止，最优
# 切分都是 $X = 1$：二维退化为在所有芯片上的一次全收集和一次规约散射，完全没有全规约；它仍然比一维的
# 单次全规约代价更高，因为它只跑在环面的两个轴上，而不是三个（它也因此落在实数最优解曲线的下方，那条
# 曲线假设 $X > 1$）。一旦 $X > 1$ 变得划算，二维的点就随曲线下降，并在 {glue:text}`ch10_last_1d` 到
# {glue:text}`ch10_first_2d` 个芯片之间穿过一维的直线，正在预测的 {glue:text}`ch10_nstar` 附近。
#
# 为什么一维停滞不前时，二维还能继续改进？它的通信按 $1/\sqrt{n}$ 下降，而计算按 $1/n$ 下降，所以对于
# 固定的批次，它最终也会变成受通信限制的——但那要到大得多的芯片数才会发生，而更大的批次又会把这一点推得
# 更远。正是这一点，让非常大的模型能够在非常大的切片上以低延迟提供服务：更多的芯片持续换来的是时间，
# 而不是集合通信。

# %% [markdown]
# ## From one host to a pod
#
# Every mesh so far lived in one Python process. A pod does not: a TPU slice of several hosts,
# or a few GPU servers of eight, runs JAX as a *multi-controller* program
# {cite:p}`jax2024multiprocess`, one process per host. Each process joins the job
# (`jax.distributed.initialize`, with the address of process 0, which serves as coordinator),
# sees every device of the job in `jax.devices()`, and addresses only its own. It then runs the
# *same* program — the same jitted prefill and decode step over a mesh of all the devices —
# and the collectives cross hosts where the mesh does. What changes is at the edges:
#
# - **inputs**: an array on the mesh is assembled from what each process holds. A process
#   places only the prompt rows its devices hold (`multihost.process_rows`, with
#   `jax.make_array_from_process_local_data`) and reads only its blocks of each weight from
#   the checkpoint (`checkpoint_shards`, safetensors' lazy slices under
#   `jax.make_array_from_callback`);
# - **output**: the sampled tokens leave the program replicated, so every process has them,
#   and process 0 alone writes them.
#
# Here is one process of such a job, as the library runs it; between `join` and the report
# it is the loop of the earlier sections, unchanged.

# %% [markdown] tags=["lang-zh"]
# ## 从一台主机到一个 pod
#
# 到目前为止，每个网格都只在一个 Python 进程里。pod 不是这样：一个由若干台主机组成的 TPU 切片，或者几台各有
# 八块 GPU 的服务器，以*多控制器*程序的方式运行 JAX {cite:p}`jax2024multiprocess`，每台主机一个进程。每个进程
# 加入作业（`jax.distributed.initialize`，给出进程 0 的地址，由它充当协调者），在 `jax.devices()` 中看到
# 作业的每一个设备，但只寻址它自己的那些。然后它运行*同一个*程序——同样的经过 jit 的预填充和解码步骤，
# 作用在由全部设备组成的网格上——网格跨越主机的地方，集合通信也就跨越主机。变化的只在边缘：
#
# - **输入**：网格上的一个数组由每个进程持有的部分拼成。一个进程只放置它的设备所持有的那些提示词行
#   （`multihost.process_rows`，借助 `jax.make_array_from_process_local_data`），并且只从检查点读取每个
#   权重中属于它的块（`checkpoint_shards`，在 `jax.make_array_from_callback` 中使用 safetensors 的惰性切片）；
# - **输出**：采样得到的词元以复制的形式离开程序，所以每个进程都有它们，只由进程 0 写出。
#
# 下面是这样一个作业中的一个进程，即库运行它的方式；在 `join` 与报告之间，它就是前面各节的循环，
# 没有任何改动。

# %%
from inferbook.parallel import multihost, multihost_report

show_source(multihost_report.run_case)

# %% [markdown]
# On this machine the pod is two processes on loopback, each with four CPU devices, their
# collectives over gloo: the $2 \times 4$ mesh of "Running it", its $X$ axis across the two
# processes. The same prompts, the same weights; the job reports its tokens, what each
# process holds, and the collectives of the prefill and decode step it compiled, which we
# compare with the same programs compiled here, in one process. (As everywhere in this part,
# the processes' wall-clock time measures nothing and is not shown.)

# %% [markdown] tags=["lang-zh"]
# 在这台机器上，pod 就是回环地址上的两个进程，每个进程有四个 CPU 设备，它们之间的集合通信走 gloo：
# 也就是“运行它”一节中的 $2 \times 4$ 网格，它的 $X$ 轴横跨两个进程。同样的提示词，同样的权重；作业报告
# 它生成的词元、每个进程持有的内容，以及它编译出的预填充和解码步骤中的集合通信，我们把它们与在这里、
# 在一个进程中编译的同样的程序相比较。（与这一部分的其他地方一样，这些进程的挂钟时间什么也不衡量，
# 因此不予展示。）

# %%
job_case = multihost_report.Case((2, 4), "2d-ws", tuple(tuple(p) for p in prompts), n_new,
                                 model=cfg.name, seed=0, programs=True)
job = multihost_report.run_cases([job_case], processes=2)[0]
one_process = multihost_report.compiled_collectives(cfg, plan, B, tokens_BT.shape[1], S)
assert job["tokens"] == reference                              # the single-device tokens
assert job["collectives"] == one_process                       # the same programs
# The decode program the job compiled holds the collectives tabulated above, one by one.
assert [(c[0], c[1], c[2], c[3]) for c in job["collectives"]["decode"]] == \
    [(c.kind, c.bytes, c.group_size, c.scope) for c in colls]
held_here = multihost.addressable_bytes(sharded)               # all eight devices, here
assert sum(job["held"]) == held_here and job["held"][0] == job["held"][1]

# %% tags=["hide-input"]
for p, held in enumerate(job["held"]):
    print(f"process {p}: 4 devices, weights held {fmt_bytes(held)}")
print(f"collectives: prefill {len(job['collectives']['prefill'])}, "
      f"decode {len(job['collectives']['decode'])}, as compiled in one process")
glue("ch10_job_held", fmt_bytes(job["held"][0]))
glue("ch10_job_total", fmt_bytes(held_here))
glue("ch10_job_prefill", str(len(job["collectives"]["prefill"])))
glue("ch10_job_decode", str(len(job["collectives"]["decode"])))

# %% [markdown]
# The two processes generate the single-device tokens. Each holds
# {glue:text}`ch10_job_held` of the weights, half of the {glue:text}`ch10_job_total` that
# one process held for all eight devices. And the programs they compiled are the programs
# compiled here: the same {glue:text}`ch10_job_prefill` collectives in the prefill and
# {glue:text}`ch10_job_decode` in the decode step, of the same kinds, bytes, device groups and
# labels — the decode step's are the table above. Nothing in the program knows how many
# processes run it.
#
# The same job from the command line, as a reader types it on this machine, and on each of
# two hosts of a pod (`--process-id 1` on the second); a process that dies or a coordinator
# that does not answer ends every process of the job with one line, within the time set by
# `--timeout` and `--heartbeat-timeout`:
#
# ```bash
# inferbook generate --model demo-gqa --prompt-ids 1,2,3 --max-new-tokens 8 \
#     --mesh 2x4 --layout 2d-ws --processes 2
# inferbook generate --checkpoint ./model --prompt-ids 1,2,3 --max-new-tokens 8 \
#     --mesh 2x4 --layout 2d-ws --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0
# ```
#
# What does change across hosts is the network under the collectives. Inside a host the GPUs
# of a server share NVLink (on a TPU slice, ICI joins the hosts too); between hosts, or
# slices, the collectives run over the data-centre network, InfiniBand or Ethernet. The
# estimator's second tier prices that (`--chips-per-host`, `perf.dcn_comms`): a collective
# over $m$ hosts of $h$ chips runs hierarchically — an AllReduce reduce-scatters inside each
# host, all-reduces the $1/h$ share between hosts, and all-gathers back — so one chip sends
# $2 \frac{m-1}{m} \frac{A}{h}$ of an $A$-byte array over the network and the rest over its
# host's links, the two adding up to the flat ring's $2\frac{n-1}{n}A$.

# %% [markdown] tags=["lang-zh"]
# 两个进程生成的正是单设备的词元。每个进程持有 {glue:text}`ch10_job_held` 的权重，是一个进程为全部八个
# 设备持有的 {glue:text}`ch10_job_total` 的一半。而它们编译出的程序就是在这里编译出的程序：预填充中同样的
# {glue:text}`ch10_job_prefill` 次集合通信，解码步骤中同样的 {glue:text}`ch10_job_decode` 次，种类、字节数、
# 设备组和标签都相同——解码步骤的那些就是上面的表格。程序中没有任何东西知道有多少个进程在运行它。
#
# 同一个作业也可以从命令行运行：下面是读者在这台机器上，以及在一个 pod 的两台主机上各自输入的命令（第二台
# 主机上用 `--process-id 1`）；一个进程死掉，或者协调者没有应答，都会在 `--timeout` 和
# `--heartbeat-timeout` 设定的时间内，以一行信息结束作业的每一个进程：
#
# ```bash
# inferbook generate --model demo-gqa --prompt-ids 1,2,3 --max-new-tokens 8 \
#     --mesh 2x4 --layout 2d-ws --processes 2
# inferbook generate --checkpoint ./model --prompt-ids 1,2,3 --max-new-tokens 8 \
#     --mesh 2x4 --layout 2d-ws --coordinator 10.0.0.1:1234 --num-processes 2 --process-id 0
# ```
#
# 跨主机时真正变化的，是集合通信底下的网络。在一台主机内，服务器的各块 GPU 共享 NVLink（在 TPU 切片上，
# ICI 也把各主机连在一起）；在主机之间，或者切片之间，集合通信走数据中心网络，即 InfiniBand 或以太网。
# 估算器的第二层估算这部分耗时（`--chips-per-host`，`perf.dcn_comms`）：跨越 $m$ 台主机、每台 $h$ 个芯片的
# 集合通信按层次执行——全规约先在每台主机内做规约散射，再在主机之间对 $1/h$ 的份额做全规约，最后在主机内
# 做全收集——于是对一个 $A$ 字节的数组，单个芯片经网络发送 $2 \frac{m-1}{m} \frac{A}{h}$，其余经主机内的
# 链路发送，两者相加正好是扁平环的 $2\frac{n-1}{n}A$。

# %%
import dataclasses

from inferbook.book.present import fmt_percent, fmt_rate
from inferbook.perf import dcn_comms
from inferbook.perf.collectives import Comm, wire_bytes
from inferbook.perf.estimator import estimate

h100 = get_chip("H100 SXM")
per_host, A = 8, 2 ** 20
net = sum(wire_bytes(k, b, g) for tier, k, b, g in
          dcn_comms.host_phases("all-reduce", A, per_host, 2) if tier == "dcn")
assert net == 2 * (1 / 2) * A / per_host
share = net / wire_bytes("all-reduce", A, 2 * per_host)
nvlink, nic = h100.link_bytes_per_s * h100.links, h100.dcn_bytes_per_s
bw = dcn_comms.two_tier_time(Comm("x", "x", "all-reduce", 2 * per_host, A), h100,
                             per_host).bandwidth_s
flat_bw = wire_bytes("all-reduce", A, 2 * per_host) / nvlink
net_time = net / nic
assert bw > flat_bw and net_time / bw > 4 * share    # a small share of the bytes, not of the time

# %% tags=["hide-input"]
glue("ch10_dcn_share", fmt_percent(share, 1))
glue("ch10_nvlink_bw", fmt_rate(nvlink))
glue("ch10_nic_bw", fmt_rate(nic))
glue("ch10_dcn_lat", fmt_seconds(h100.dcn_latency_s))
glue("ch10_dcn_slowdown", fmt_ratio(bw / flat_bw))
glue("ch10_dcn_time_share", fmt_percent(net_time / bw))

# %% [markdown]
# On two DGX H100 servers an AllReduce over all sixteen GPUs sends only
# {glue:text}`ch10_dcn_share` of its bytes over the network, but each GPU's share of it is a
# {glue:text}`ch10_nic_bw` NIC against {glue:text}`ch10_nvlink_bw` of NVLink: those bytes take
# {glue:text}`ch10_dcn_time_share` of the collective's bandwidth time, which comes to
# {glue:text}`ch10_dcn_slowdown` that of a single NVLink domain of sixteen; and every pass
# adds a network step of {glue:text}`ch10_dcn_lat` {cite:p}`nvidia2020nccl`. For a whole model: Llama-3 70B decoding one sequence on H100s,
# eight to a server, against the same servers joined by an imaginary network as fast as their
# NVLink (its bandwidth, and NCCL's NVLink ring step for a message), both at the estimator's
# calibrated efficiency.

# %% [markdown] tags=["lang-zh"]
# 在两台 DGX H100 服务器上，对全部十六块 GPU 做一次全规约，只有 {glue:text}`ch10_dcn_share` 的字节经过
# 网络，但每块 GPU 在网络上分到的是一块 {glue:text}`ch10_nic_bw` 的网卡，而 NVLink 有
# {glue:text}`ch10_nvlink_bw`：这些字节占去这次集合通信带宽时间的 {glue:text}`ch10_dcn_time_share`，
# 使它达到一个由十六块 GPU 组成的 NVLink 域的 {glue:text}`ch10_dcn_slowdown`；每一趟还要加上一个
# {glue:text}`ch10_dcn_lat` 的网络步骤 {cite:p}`nvidia2020nccl`。对整个模型来说：在 H100 上对一个序列解码 Llama-3 70B，每台服务器八块，与
# 同样的服务器用一个假想的、与其 NVLink 一样快的网络（它的带宽，以及 NCCL 在 NVLink 上一次环形传递的消息
# 延迟）连起来相比，两者都按估算器校准后的效率计算。

# %%
big = get_preset("llama-3-70b")
# As if the servers were joined as fast as NVLink joins a server's GPUs.
as_fast = dataclasses.replace(h100, dcn_bytes_per_s=h100.link_bytes_per_s * h100.links,
                              dcn_latency_s=h100.step_latency_s)
gpus = [2, 4, 8, 16, 32, 64]
pod = [estimate(big, h100, batch=1, context=4096, chips=n, chips_per_host=per_host)
       for n in gpus]
flat = [estimate(big, as_fast, batch=1, context=4096, chips=n, chips_per_host=per_host)
        for n in gpus]
assert all(r.fits for r in pod)
for r, f in zip(pod, flat):
    if r.chips <= per_host:              # inside one server the two are one model
        assert r.step_time_s == f.step_time_s and r.dcn_time_s == 0
    else:                                # past it, the network costs
        assert r.step_time_s > f.step_time_s and r.dcn_time_s > 0
best = min(pod, key=lambda r: r.step_time_s)
assert per_host < best.chips < gpus[-1] and pod[-1].step_time_s > best.step_time_s
assert flat[-1].step_time_s < best.step_time_s       # a network as fast as NVLink keeps gaining

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.plot(gpus, [r.step_time_s * 1e3 for r in pod], "o-", color="C3",
        label=f"{per_host} GPUs per server, data-centre network between")
ax.plot(gpus, [r.step_time_s * 1e3 for r in flat], "s-", color="C0",
        label="servers joined as fast as NVLink (imaginary)")
ax.plot(gpus, [r.comm_time_s * 1e3 for r in pod], "o--", color="C3", alpha=0.5,
        label="of which collectives, servers")
ax.plot(gpus, [r.dcn_time_s * 1e3 for r in pod], ":", color="C3",
        label="of which the network between servers")
ax.axvline(per_host, color="gray", ls=":")
ax.set_xscale("log", base=2)
ax.set_xticks(gpus, [str(n) for n in gpus])
ax.set_xlabel("GPUs")
ax.set_ylabel("decode step, predicted (ms)")
ax.set_title(f"{big.name}, batch 1, context 4,096, {h100.name}")
ax.legend(fontsize=8)
ax.grid(True, alpha=0.3)
glue_figure("ch10_hosts_figure", fig, zh=dict(
    title=f"{big.name}，批量大小 1，上下文 4,096，{h100.name}", xlabel="GPU 数",
    ylabel="解码步骤，预测值（毫秒）",
    legend=[f"每台服务器 {per_host} 块 GPU，其间为数据中心网络", "服务器之间与 NVLink 一样快（假想）",
            "其中集合通信，多台服务器", "其中服务器之间的网络"]))
glue("ch10_best_gpus", str(best.chips))
glue("ch10_best_step", fmt_seconds(best.step_time_s))
glue("ch10_64_step", fmt_seconds(pod[-1].step_time_s))
glue("ch10_64_flat", fmt_seconds(flat[-1].step_time_s))
glue("ch10_64_dcn", fmt_percent(pod[-1].dcn_time_s / pod[-1].step_time_s))

# %% [markdown]
# ```{glue:figure} ch10_hosts_figure
# ```
#
# Up to eight GPUs the two lines are one: the mesh has not left its server. Past the server
# boundary (the dotted line) each of the model's collectives pays the network, and since a
# decode step at batch 1 is a long chain of small AllReduces, mostly its latency: the step
# stops improving at {glue:text}`ch10_best_gpus` GPUs ({glue:text}`ch10_best_step`), and at
# sixty-four takes {glue:text}`ch10_64_step` — {glue:text}`ch10_64_dcn` of it on the network —
# where servers joined as fast as NVLink would take {glue:text}`ch10_64_flat`. Tensor parallelism wants
# one fast domain; across hosts, serving systems split the model by layers or replicate it
# instead, which is why NVLink domains grow (a GB200 NVL72 joins seventy-two GPUs) and why a
# TPU slice's ICI spans its hosts.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch10_hosts_figure
# ```
#
# 直到八块 GPU，两条线都是同一条：网格还没有离开它的服务器。越过服务器的边界（虚线）之后，模型的每一次集合
# 通信都要为网络付出代价，而批次为 1 的解码步骤是一长串小的全规约，付出的主要是延迟：步骤时间在
# {glue:text}`ch10_best_gpus` 块 GPU 时就不再改善（{glue:text}`ch10_best_step`），到六十四块时需要
# {glue:text}`ch10_64_step`——其中 {glue:text}`ch10_64_dcn` 花在网络上——而服务器之间与 NVLink 一样快时
# 只需要 {glue:text}`ch10_64_flat`。张量并行需要一个快速的域；跨主机时，推理服务系统改为按层切分模型或者复制
# 模型，这正是 NVLink 域越做越大（一个 GB200 NVL72 连接七十二块 GPU）、TPU 切片的 ICI 跨越其各主机的原因。

# %% [markdown]
# ## Takeaways
#
# - 2D weight-stationary sharding splits weights over $D$ (on $X$) and $F$ or the heads (on
#   $YZ$); activations travel as slices, through an AllGather and a ReduceScatter over $YZ$
#   and an AllReduce over $X$.
# - Its communication, $2BD/(XW) + 4BF/(YZ\,W)$, is least at $X = \sqrt{nD/2F}$ and then falls
#   like $1/\sqrt{n}$; 1D's stays constant.
# - By the sources' own formula 2D wins beyond $128 \cdot (3/4)^2 =$ {glue:text}`ch10_nstar`
#   chips (not 81), and the compiled programs agree.
# - A pod runs the same program, one process per host: only joining the job, the inputs
#   each process places and the output process 0 writes change, and the compiled
#   collectives are the same. What crosses hosts pays the data-centre network, which at
#   small batch ends the gains of tensor parallelism at the server's edge.

# %% [markdown] tags=["lang-zh"]
# ## 要点
#
# - 二维权重驻留分片把权重按 $D$（在 $X$ 上）以及 $F$ 或头（在 $YZ$ 上）切分；激活值以切片的形式传递，
#   经过 $YZ$ 上的全收集和规约散射，以及 $X$ 上的全规约。
# - 它的通信 $2BD/(XW) + 4BF/(YZ\,W)$ 在 $X = \sqrt{nD/2F}$ 处最小，之后按 $1/\sqrt{n}$ 下降；一维的
#   则保持不变。
# - 按原文自己的公式，二维在超过 $128 \cdot (3/4)^2 =$ {glue:text}`ch10_nstar` 个芯片后胜出（不是 81），
#   编译后的程序也证实了这一点。
# - 一个 pod 运行的是同一个程序，每台主机一个进程：变化的只有加入作业、每个进程放置的输入以及进程 0
#   写出的输出，编译出的集合通信完全相同。跨主机的部分要为数据中心网络付出代价，在小批次下，它让
#   张量并行的收益止步于服务器的边界。
