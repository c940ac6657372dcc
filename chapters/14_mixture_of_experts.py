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
# # Mixture of experts: serving sparse models
#
# A mixture of experts replaces each MLP with $E$ of them and a router that sends every token
# to $k$ {cite:p}`shazeer2017moe,fedus2022switch`. The model holds $E$ experts' weights but
# spends only $k$ experts' FLOPs on a token, which is how today's largest open models —
# Mixtral {cite:p}`jiang2024mixtral`, Qwen3's MoE models, DeepSeek-V3
# {cite:p}`deepseekai2024v3` — grow their parameters without growing their cost per token.
# For serving, that split between the weights a model *has* and the weights a token *uses*
# changes the arithmetic of the earlier chapters in three places, and this chapter takes them
# in turn:
#
# - **The roofline.** A decode step reads only the experts its tokens were routed to, so the
#   bytes it reads grow with the batch. An MoE layer becomes compute-bound at about $E/k$
#   times a dense layer's critical batch; the whole step, whose attention and embeddings are
#   dense, at about total over active parameters times it — less than $E/k$.
# - **Sharding.** Experts are whole units of weight that can live on different chips. *Expert
#   parallelism* gives each chip its own experts and sends every token to the chips of its
#   experts with an AllToAll, instead of splitting every expert over every chip.
# - **The cache.** DeepSeek's models pair their experts with *multi-head latent attention*,
#   which caches one compressed vector per token instead of keys and values
#   {cite:p}`deepseekai2024v2`.
#
# As in chapters 8 to 10, sharded programs run on emulated devices, so we report bytes,
# collectives and tokens, never their wall-clock time.

# %% [markdown] tags=["lang-zh"]
# # 混合专家：稀疏模型的推理服务
#
# 混合专家（MoE）把每个 MLP 换成 $E$ 个 MLP，再加一个路由器，把每个词元（token）发给其中 $k$ 个
# {cite:p}`shazeer2017moe,fedus2022switch`。模型持有 $E$ 个专家的权重，却只在一个词元上花 $k$ 个专家
# 的 FLOPs；今天最大的开放模型——Mixtral {cite:p}`jiang2024mixtral`、Qwen3 的 MoE 模型、DeepSeek-V3
# {cite:p}`deepseekai2024v3`——正是这样在不增加每个词元代价的前提下增加参数的。对推理服务来说，模型
# *拥有*的权重与一个词元*用到*的权重之间的这种分离，在三个地方改变了前面各章的计算，本章依次讨论：
#
# - **屋顶线。** 一个解码步骤只读取它的词元被路由到的专家，所以它读取的字节数随批次增长。一个 MoE 层
#   在约为稠密层临界批量的 $E/k$ 倍时变为计算受限；整个步骤的注意力和嵌入是稠密的，它约在总参数与激活
#   参数之比乘以该临界批量时变为计算受限——比 $E/k$ 倍小。
# - **分片。** 专家是一个个完整的权重单元，可以放在不同的芯片上。*专家并行*让每块芯片持有自己的专家，
#   用一次全交换（AllToAll）把每个词元发到它的专家所在的芯片，而不是把每个专家都切分到每块芯片上。
# - **缓存。** DeepSeek 的模型给专家配上了*多头潜在注意力*：它为每个词元缓存一个压缩向量，而不是键和值
#   {cite:p}`deepseekai2024v2`。
#
# 与第 8 章到第 10 章一样，分片后的程序运行在模拟设备上，所以我们报告字节数、集合通信和词元，从不报告
# 它们的实际运行时间。

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
from inferbook.grading import registry
from inferbook.model import decode, decoder, kvcache, mla
from inferbook.model.config import ModelConfig
from inferbook.model.features import MLA, MoE
from inferbook.model.moe import route
from inferbook.model.presets import get_preset
from inferbook.parallel import expert_parallel
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import make_plan, shard_params
from inferbook.perf import collectives, counts, estimator, hlo, moe_layouts, params, roofline
from inferbook.perf.decode_attention_cost import decode_attention_per_cached_token
from inferbook.perf.hardware import get_chip
from inferbook.perf.step_cost import step_time

print(info.describe())
v5e, h100 = get_chip("TPU v5e"), get_chip("H100 SXM")

# %% tags=["hide-input"]
from inferbook.book.figures import glue_figure
from inferbook.book.present import fmt_bytes, fmt_count, fmt_ratio, fmt_seconds, glue

# %% [markdown]
# ## Total and active parameters
#
# Worked problem 5 of the scaling book {cite:p}`austin2025scaling` turns its invented 18B model
# into a mixture of 16 experts, 2 per token. Beside it, three models readers serve today. The
# *active* parameters are those one token uses: everything but the routed experts, plus $k$
# of them.

# %% [markdown] tags=["lang-zh"]
# ## 总参数与激活参数
#
# 《How to Scale Your Model》 {cite:p}`austin2025scaling` 的例题 5 把它虚构的 18B 模型改成 16 个专家的混合，每个
# 词元用 2 个。旁边是读者如今实际部署的三个模型。*激活*参数是一个词元用到的参数：除路由专家之外的
# 一切，再加上其中 $k$ 个专家。

# %%
base = get_preset("scaling-book-18b")
wp5 = base.replace(moe=MoE(E=16, k=2, F=base.F), name="worked problem 5")
models = {"worked problem 5": wp5, "Mixtral-8x7B": get_preset("mixtral-8x7b"),
          "Qwen3-30B-A3B": get_preset("qwen3-30b-a3b"), "DeepSeek-V3": get_preset("deepseek-v3")}
rows = []
for label, cfg in models.items():
    P, A = params.param_count(cfg), params.active_param_count(cfg)
    rows.append(f"| {label} | {cfg.moe.E} | {cfg.moe.k} | {fmt_count(P)} | {fmt_count(A)} | "
                f"{fmt_ratio(P / A)} |")
P5, A5 = params.param_count(wp5), params.active_param_count(wp5)
# The problem's own route: the dense model plus 15 (or 1) more copies of its MLP; the
# library also counts the router, D·E numbers per layer, which the problem leaves out.
mlp18, router = counts.param_counts(base)["mlp"], base.L * base.D * 16
assert P5 == counts.param_count(base) + 15 * mlp18 + router
assert A5 == counts.param_count(base) + mlp18 + router
published = bookdata.load("scaling_book_published.json")
v3 = models["DeepSeek-V3"]

# %% tags=["hide-input"]
glue("ch14_wp5_total", fmt_count(P5))
glue("ch14_wp5_active", fmt_count(A5, 2))
glue("ch14_wp5_flops", fmt_count(2 * A5, 2))
glue("ch14_wp5_written",
     fmt_count(published["worked_problems"]["p5_forward_flops_active_param_000"]))
glue("ch14_v3_share", f"{params.active_param_count(v3) / params.param_count(v3):.1%}")
Markdown("| model | E | k | parameters | active | total / active |\n"
         "|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows))

# %% [markdown]
# The problem's model has {glue:text}`ch14_wp5_total` parameters of which
# {glue:text}`ch14_wp5_active` are active, so a forward pass costs
# {glue:text}`ch14_wp5_flops` FLOPs per token ($2 \times$ the active parameters). One rendering
# of the problem writes the FLOPs with {glue:text}`ch14_wp5_written` instead of its own count
# of active parameters; the errata page sets the two side by side ({ref}`errata-wp5`).
# DeepSeek-V3 uses {glue:text}`ch14_v3_share` of its weights per token.
#
# ## The weights a decode step reads
#
# A dense decode step reads every weight once, whatever the batch (chapter 2). An MoE layer
# reads only the experts that at least one token of the step was sent to. If the router is
# balanced, each token picks a given expert with probability $k/E$, and an expert is left out
# by all $B$ tokens with probability $(1 - k/E)^B$. The expected number of experts a step
# touches per layer is therefore
#
# $$ E_\text{touched}(B) = E \left(1 - \left(1 - \frac{k}{E}\right)^B\right), $$
#
# $k$ for one token, rising to all $E$ as the batch grows:

# %% [markdown] tags=["lang-zh"]
# 这道题的模型共有 {glue:text}`ch14_wp5_total`个参数，其中 {glue:text}`ch14_wp5_active`是激活的，
# 所以一次前向计算每个词元花费 {glue:text}`ch14_wp5_flops` FLOPs（激活参数的 $2 \times$）。这道题的
# 一个版本写的 FLOPs 用的是 {glue:text}`ch14_wp5_written`，而不是它自己算出的激活参数数；勘误页把两者
# 并列对照（{ref}`errata-wp5`）。DeepSeek-V3 每个词元用到它的权重的 {glue:text}`ch14_v3_share`。
#
# ## 解码步骤读取的权重
#
# 一个稠密模型的解码步骤把每个权重读取一遍，无论批次多大（第 2 章）。一个 MoE 层只读取这一步中至少
# 有一个词元被发去的那些专家。如果路由器是均衡的，每个词元以概率 $k/E$ 选中某个给定的专家，一个专家被
# 全部 $B$ 个词元都错过的概率是 $(1 - k/E)^B$。因此一步在每层平均触及的专家数是
#
# $$ E_\text{touched}(B) = E \left(1 - \left(1 - \frac{k}{E}\right)^B\right), $$
#
# 一个词元时为 $k$，随着批次增大升到全部 $E$ 个：

# %%
show_source(params.expected_experts)

# %% [markdown]
# That is a claim about the router, so we measure it on the library's. Two small models
# route like Mixtral (8 experts, 2 per token, softmax) and like DeepSeek-V3 (256 experts, 8
# per token, sigmoid scores with a selection bias, in 4 of 8 groups); their routers get
# random inputs in batches of every size, and we count the distinct experts each layer
# selects. DeepSeek-V3's selection bias starts at zero and is moved only to balance the load
# {cite:p}`deepseekai2024v3`; we run it at zero, and once more with a random bias, the way a
# badly balanced router would favour some experts.

# %% [markdown] tags=["lang-zh"]
# 这是一个关于路由器的论断，所以我们在库的路由器上测量它。两个小模型分别像 Mixtral 那样路由（8 个
# 专家，每个词元 2 个，softmax），以及像 DeepSeek-V3 那样路由（256 个专家，每个词元 8 个，带选择偏置的
# sigmoid 分数，在 8 组中选 4 组）；它们的路由器接收各种大小批次的随机输入，我们数出每一层选中的不同
# 专家数。DeepSeek-V3 的选择偏置从零开始，只为平衡负载而调整 {cite:p}`deepseekai2024v3`；我们让它
# 保持为零运行一次，再用随机偏置运行一次，模拟一个平衡得很差的路由器偏爱某些专家的情形。

# %%
def routing_model(moe: MoE, name: str) -> ModelConfig:
    return ModelConfig(L=4, D=64, F=64, N=4, K=4, H=16, V=64, moe=moe, name=name)


v3_routing = MoE(E=256, k=8, F=16, scoring="sigmoid", score_bias=True, groups=8, topk_groups=4,
                 routed_scale=2.5)
routers = {"Mixtral's routing": (routing_model(MoE(E=8, k=2, F=16), "mixtral-routing"), True),
           "DeepSeek-V3's routing": (routing_model(v3_routing, "v3-routing"), True),
           "DeepSeek-V3's, random bias": (routing_model(v3_routing, "v3-routing"), False)}
SKEWED = "DeepSeek-V3's, random bias"
batches = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
TRIALS = 16


def zero_bias(p: dict) -> dict:
    return dict(p, router_bias=jnp.zeros_like(p["router_bias"])) if "router_bias" in p else p


measured = {}
for label, (cfg, balanced) in routers.items():
    layers = decoder.init_params(cfg, seed=0)["layers"]
    layers = [zero_bias(p) for p in layers] if balanced else layers
    choose = jax.jit(lambda p, x, cfg=cfg: route(p, x, cfg)[1])
    for B in batches:
        touched = [len(np.unique(np.asarray(choose(p, jax.random.normal(
            jax.random.key(1000 * t + B), (B, cfg.D))))))
            for p in layers for t in range(TRIALS)]
        measured[label, B] = (np.mean(touched), np.std(touched) / np.sqrt(len(touched)))

gaps = {}
for label, (cfg, balanced) in routers.items():
    m = cfg.moe
    mean = np.array([measured[label, B][0] for B in batches])
    sem = np.array([measured[label, B][1] for B in batches])
    formula = np.array([params.expected_experts(m.E, m.k, B) for B in batches])
    # The formula is an upper bound (a skewed router touches fewer experts), up to noise: an
    # expert is missed with probability q = (1 - k/E)^B, so a count's variance is about
    # E·q·(1 - q) (experts counted as independent), and a mean's noise that over √draws.
    q = (1 - m.k / m.E) ** np.array(batches, float)
    noise = np.maximum(sem, np.sqrt(m.E * q * (1 - q) / (TRIALS * cfg.L)))
    assert np.all(mean <= formula + 3 * noise), (label, mean, formula)
    gaps[label] = float(np.max(1 - mean / formula))
    if balanced:                                    # a balanced router is close to it
        assert gaps[label] < 0.05, (label, mean, formula)
assert gaps[SKEWED] > 0.2

# %% tags=["hide-input"]
glue("ch14_trials", str(TRIALS * routers["Mixtral's routing"][0].L))
glue("ch14_route_worst", f"{max(gaps[k] for k, (_, ok) in routers.items() if ok):.1%}")
glue("ch14_route_skewed", f"{gaps[SKEWED]:.0%}")

zh_routers = {"Mixtral's routing": "Mixtral 的路由", "DeepSeek-V3's routing": "DeepSeek-V3 的路由",
              "DeepSeek-V3's, random bias": "DeepSeek-V3 的路由，随机偏置"}
zh_legend = []
fig, ax = plt.subplots(figsize=(6.5, 4))
for label, (cfg, balanced) in routers.items():
    m = cfg.moe
    if balanced:
        grid = np.geomspace(1, batches[-1], 100)
        ax.semilogx(grid, [params.expected_experts(m.E, m.k, b) / m.E for b in grid],
                    label=f"E(1 − (1 − k/E)^B), E = {m.E}, k = {m.k}")
        zh_legend.append(ax.lines[-1].get_label())
    zh_legend.append(f"实测：{zh_routers[label]}")
    mean = np.array([measured[label, B][0] for B in batches])
    ax.semilogx(batches, mean / m.E, "o" if balanced else "x", label=f"measured: {label}",
                color=ax.lines[-1].get_color() if balanced else "gray")
ax.set_xlabel("tokens in the step, B")
ax.set_ylabel("share of the experts touched per layer")
ax.set_title("Experts a decode step reads: the library's routers against the formula",
             fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch14_experts_figure", fig, zh=dict(
    title="解码步骤读取的专家：库中的路由器与公式对照", xlabel="这一步中的词元数 B",
    ylabel="每层被触及的专家所占比例", legend=zh_legend))

# %% [markdown]
# ```{glue:figure} ch14_experts_figure
# ```
#
# Each point is the mean over {glue:text}`ch14_trials` draws (four layers, several random
# batches). The balanced routers sit on the curve, at most {glue:text}`ch14_route_worst`
# below it; the router with a random bias touches up to {glue:text}`ch14_route_skewed` fewer
# experts. Below, never above: for probabilities $p_e$ summing to $k$, the expected count
# $\sum_e 1 - (1 - p_e)^B$ is largest when every $p_e$ is $k/E$, so a router that favours
# some experts touches fewer. The load-balancing losses and biases of MoE training push
# towards the formula's case, and the formula is what a server should plan for.
#
# In bytes, a step of $B$ tokens reads the dense part of the model and
# $E_\text{touched}(B)/E$ of the experts (`estimator.weight_bytes_read`):

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch14_experts_figure
# ```
#
# 每个点是 {glue:text}`ch14_trials` 次抽样的平均（四个层，若干个随机批次）。均衡的路由器落在曲线上，
# 最多比它低 {glue:text}`ch14_route_worst`；带随机偏置的路由器触及的专家最多少
# {glue:text}`ch14_route_skewed`。只会更低，不会更高：对和为 $k$ 的概率 $p_e$，期望个数
# $\sum_e 1 - (1 - p_e)^B$ 在每个 $p_e$ 都等于 $k/E$ 时最大，所以偏爱某些专家的路由器触及的专家更少。
# MoE 训练中的负载均衡损失和偏置把路由推向公式所设的情形，而服务器也应当按公式来规划。
#
# 换算成字节：一个处理 $B$ 个词元的步骤读取模型的稠密部分，以及专家中的 $E_\text{touched}(B)/E$
# （`estimator.weight_bytes_read`）：

# %%
rows, read = [], {}
for label in ("Mixtral-8x7B", "DeepSeek-V3"):
    cfg = models[label]
    total = counts.param_bytes(cfg, 2)
    experts = sum(t.size for t in params.tensors(cfg) if t.role == "expert") * 2
    for B in (1, 8, 64, 512):
        read[label, B] = estimator.weight_bytes_read(cfg, total, experts, B)
    rows.append(f"| {label} | {fmt_bytes(total)} | " + " | ".join(
        f"{fmt_bytes(read[label, B])}" for B in (1, 8, 64, 512)) + " |")
    assert abs(read[label, 1] / (params.active_param_count(cfg) * 2) - 1) < 1e-12  # active

# %% tags=["hide-input"]
glue("ch14_v3_read1", fmt_bytes(read["DeepSeek-V3", 1]))
glue("ch14_v3_read64", fmt_bytes(read["DeepSeek-V3", 64]))
glue("ch14_v3_total", fmt_bytes(counts.param_bytes(v3, 2)))
Markdown("| model (bf16) | all weights | read at B = 1 | B = 8 | B = 64 | B = 512 |\n"
         "|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows))

# %% [markdown]
# One DeepSeek-V3 token reads {glue:text}`ch14_v3_read1` of weights; a step of 64 reads
# {glue:text}`ch14_v3_read64`, already most of the {glue:text}`ch14_v3_total`. The sparsity
# that makes one token cheap is gone at the batch sizes a server runs.
#
# ## The critical batch of a sparse layer
#
# A weight matmul becomes compute-bound when its FLOPs per byte pass the chip's $C/W$; for a
# dense layer that happens at $B_\text{crit} = (C/W) \cdot (\text{bytes per weight}/2)$ tokens
# (chapter 2). An MoE layer of $E$ experts with $P_e$ parameters each does $2 k P_e$ FLOPs per
# token but reads $E_\text{touched}(B) \cdot P_e$ weights, so it is compute-bound from
#
# $$ B^\text{MoE}_\text{crit} = B_\text{crit} \cdot \frac{E_\text{touched}(B)}{k}
#    \;\approx\; \frac{E}{k} \, B_\text{crit}, $$
#
# the approximation holding once the batch touches every expert — which, at these batch sizes,
# it does. The library finds the exact crossing by bisection (`estimator.critical_batch_moe`).
# Its "dense twin" has one MLP of the active width: the same FLOPs per token, $1/(E/k)$ of the
# expert weights.

# %% [markdown] tags=["lang-zh"]
# 一个 DeepSeek-V3 词元读取 {glue:text}`ch14_v3_read1` 的权重；一个处理 64 个词元的步骤读取
# {glue:text}`ch14_v3_read64`，已是全部 {glue:text}`ch14_v3_total` 的大部分。让单个词元变便宜的稀疏性，
# 在服务器实际运行的批量大小下已经不复存在。
#
# ## 稀疏层的临界批量
#
# 当一个权重矩阵乘法每字节的 FLOPs 超过芯片的 $C/W$ 时，它就变为计算受限；对稠密层而言，这发生在
# $B_\text{crit} = (C/W) \cdot (\text{bytes per weight}/2)$ 个词元处（第 2 章）。一个有 $E$ 个专家、每个
# 专家 $P_e$ 个参数的 MoE 层，每个词元做 $2 k P_e$ FLOPs，却读取 $E_\text{touched}(B) \cdot P_e$ 个权重，
# 所以它从
#
# $$ B^\text{MoE}_\text{crit} = B_\text{crit} \cdot \frac{E_\text{touched}(B)}{k}
#    \;\approx\; \frac{E}{k} \, B_\text{crit} $$
#
# 起变为计算受限；近似在批次触及每一个专家之后成立——在这样的批量大小下，确实如此。库用二分法求出
# 准确的交点（`estimator.critical_batch_moe`）。它的“稠密孪生模型”只有一个宽度等于激活宽度的 MLP：
# 每个词元的 FLOPs 相同，专家权重只有 $1/(E/k)$。

# %%
def layer_critical_batch(cfg: ModelConfig, chip, weight_bytes: float = 2) -> float:
    """The batch at which one MoE layer's FLOPs catch up with the experts it reads."""
    m = cfg.moe
    per_expert = 3 * cfg.D * m.F
    layer = m.E * per_expert * weight_bytes
    return estimator.critical_batch_moe(cfg, layer, layer, 2 * m.k * per_expert,
                                        roofline.peak_flops_per_s(chip), chip.hbm_bytes_per_s)


rows, crit = [], {}
for label, chip in (("worked problem 5", v5e), ("Mixtral-8x7B", h100), ("DeepSeek-V3", h100)):
    cfg = models[label]
    m = cfg.moe
    dense = roofline.critical_batch(chip)
    exact = layer_critical_batch(cfg, chip)
    whole = estimator.estimate(cfg, chip, batch=1, context=1).critical_batch
    total_over_active = params.param_count(cfg) / params.active_param_count(cfg)
    assert abs(exact / (dense * m.E / m.k) - 1) < 0.01     # every expert touched by then
    assert abs(whole / (dense * total_over_active) - 1) < 0.01   # the whole step: P / A
    assert dense < whole < exact       # the dense parts (attention, shared experts) pull it down
    crit[label] = (dense, exact, whole, total_over_active)
    rows.append(f"| {label} | {chip.name} | {dense:,.0f} | {m.E}/{m.k} | "
                f"{dense * m.E / m.k:,.0f} | {exact:,.0f} | {fmt_ratio(total_over_active)} | "
                f"{whole:,.0f} |")

# %% tags=["hide-input"]
glue("ch14_bdense_v5e", f"{crit['worked problem 5'][0]:.0f}")
glue("ch14_wp5_bcrit_source", f"{published['b_crit']['TPU v5e']} × 16/2 = "
                              f"{published['worked_problems']['p5_b_crit']:,}")
glue("ch14_bcrit_wp5", f"{crit['worked problem 5'][1]:,.0f}")
glue("ch14_bcrit_v3", f"{crit['DeepSeek-V3'][1]:,.0f}")
glue("ch14_bwhole_v3", f"{crit['DeepSeek-V3'][2]:,.0f}")
glue("ch14_whole_x_v3", fmt_ratio(crit["DeepSeek-V3"][2] / crit["DeepSeek-V3"][0]))
glue("ch14_ek_v3", f"{v3.moe.E // v3.moe.k}")
glue("ch14_bwhole_wp5", f"{crit['worked problem 5'][2]:,.0f}")
Markdown("| model | chip | dense B_crit | E/k | E/k · B_crit | MoE layer, exact | total / active "
         "| whole model |\n|---|---|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows))

# %% [markdown]
# On a TPU v5e a dense layer is compute-bound from {glue:text}`ch14_bdense_v5e` tokens in
# bfloat16, so problem 5's expert layers need {glue:text}`ch14_bcrit_wp5`: the problem's
# {glue:text}`ch14_wp5_bcrit_source`, with the registry's bandwidth for the source's round
# figure; the whole model is compute-bound from {glue:text}`ch14_bwhole_wp5`. A DeepSeek-V3
# expert layer on an H100 needs {glue:text}`ch14_bcrit_v3` tokens per step. The whole model
# crosses earlier, at {glue:text}`ch14_bwhole_v3` tokens: {glue:text}`ch14_whole_x_v3` the
# dense critical batch, its total over its active parameters, where its experts alone would
# take $E/k =$ {glue:text}`ch14_ek_v3` times it. Its attention, embeddings and shared experts
# are dense — every token uses all of them — so they bring the model's bytes per FLOP down
# towards a dense model's. At every batch below that, the step is reading weights — more of
# them than a dense model with the same FLOPs per token.
#
# Here is that comparison as a step time: the weight matmuls of a step on one H100 (the
# larger of their FLOPs over $C$ and their bytes over $W$; the cache and the interconnect
# come on top, as in chapters 3 and 9), beside each model's dense twin.

# %% [markdown] tags=["lang-zh"]
# 在 TPU v5e 上，稠密层在 bfloat16 下从 {glue:text}`ch14_bdense_v5e` 个词元起变为计算受限，所以例题 5
# 的专家层需要 {glue:text}`ch14_bcrit_wp5` 个：即题目的 {glue:text}`ch14_wp5_bcrit_source`，只是把原文
# 取整的数字换成了注册表中的带宽；整个模型则从 {glue:text}`ch14_bwhole_wp5` 个词元起就是计算受限的。
# DeepSeek-V3 的一个专家层在 H100 上每步需要 {glue:text}`ch14_bcrit_v3` 个词元。整个模型越过得更早，
# 在 {glue:text}`ch14_bwhole_v3` 个词元处：是稠密临界批量的 {glue:text}`ch14_whole_x_v3`，即它的总参数
# 与激活参数之比，而单看专家则要 $E/k =$ {glue:text}`ch14_ek_v3` 倍。它的注意力、嵌入和共享专家是稠密
# 的——每个词元都用到它们的全部——所以它们把模型每个 FLOP 读取的字节数拉向稠密模型的水平。在低于它的
# 每一个批次上，这一步都在读取权重——比每个词元 FLOPs 相同的稠密模型读取得更多。
#
# 下面把这个比较换成一步的时间：一块 H100 上一步中的权重矩阵乘法（取 FLOPs 除以 $C$ 与字节数除以
# $W$ 中较大的那个；缓存和互连的开销另计，如第 3 章和第 9 章），与每个模型的稠密孪生模型并排。

# %%
def weights_step(cfg: ModelConfig, B: float, chip=h100) -> float:
    total = counts.param_bytes(cfg, 2)
    experts = sum(t.size for t in params.tensors(cfg) if t.role == "expert") * 2
    flops = 2 * params.active_param_count(cfg) * B
    return max(flops / roofline.peak_flops_per_s(chip),
               estimator.weight_bytes_read(cfg, total, experts, B) / chip.hbm_bytes_per_s)


def dense_twin(cfg: ModelConfig) -> ModelConfig:
    """The same model with one MLP as wide as the k experts (and shared experts) a token uses."""
    m = cfg.moe
    return cfg.replace(moe=None, F=m.k * m.F + m.shared_F, name=f"{cfg.name} (dense twin)")


grid = np.unique(np.geomspace(1, 32768, 120).astype(int))
step_times = {}
for label in ("Mixtral-8x7B", "DeepSeek-V3"):
    cfg, twin = models[label], dense_twin(models[label])
    flops_ratio = params.active_param_count(cfg) / params.param_count(twin)
    assert abs(flops_ratio - 1) < 0.01          # (routers and DeepSeek's dense layers differ)
    moe_t = np.array([weights_step(cfg, B) for B in grid])
    twin_t = np.array([weights_step(twin, B) for B in grid])
    assert np.all(moe_t >= twin_t * min(1, flops_ratio))     # never cheaper than its twin...
    assert abs(moe_t[-1] / twin_t[-1] / flops_ratio - 1) < 1e-9   # ...equal once compute-bound
    step_times[label] = moe_t, twin_t
mx, twin = models["Mixtral-8x7B"], dense_twin(models["Mixtral-8x7B"])

# %% tags=["hide-input"]
glue("ch14_mx_ratio_64", fmt_ratio(weights_step(mx, 64) / weights_step(twin, 64)))

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for ax, (label, (moe_t, twin_t)) in zip(axes, step_times.items()):
    ax.loglog(grid, moe_t * 1e3, label=label)
    ax.loglog(grid, twin_t * 1e3, "--", label="dense twin (same active parameters)")
    ax.axvline(crit[label][2], color="gray", ls=":", lw=0.8)
    ax.set_xlabel("tokens per step, B")
    ax.set_ylabel("weights' part of a step (ms)")
    ax.set_title(f"{label}, bf16, one {h100.name} (formula)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
fig.tight_layout()
glue_figure("ch14_twin_figure", fig, zh=[
    dict(title=f"{label}，bf16，一块 {h100.name}（公式）", xlabel="每步的词元数 B",
         ylabel="一步中权重部分的时间（ms）", legend=[label, "稠密孪生模型（激活参数相同）"])
    for label in step_times])

# %% [markdown]
# ```{glue:figure} ch14_twin_figure
# ```
#
# The dense twin's step is flat until its critical batch and then grows with the FLOPs; the
# MoE's step starts at the same height (one token reads the same active weights), climbs as
# the batch touches more experts — at 64 tokens Mixtral's weights take
# {glue:text}`ch14_mx_ratio_64` as long as its twin's — and meets the twin's line only where
# both are compute-bound (dotted: the whole model's critical batch). Serving an MoE
# efficiently therefore means large batches, and, since its weights do not fit one chip,
# many chips.
#
# ## Expert parallelism
#
# The 1D layout of chapters 8 and 9 would split every expert's $F$ over the $M$ chips, as it
# splits a dense MLP: *tensor parallelism*. Each chip then reads a $1/M$ slice of every
# expert a step touches, and every MoE block ends with an AllReduce of all tokens'
# activations. Experts suggest another split {cite:p}`lepikhin2021gshard`: give each of $Z$
# chips $E/Z$ whole experts, and move the *tokens* to them. Each chip routes its own tokens,
# writes a copy of each into a buffer of $C$ slots per expert, and one AllToAll over $Z$
# delivers every chip the tokens for its experts; after the experts run, a second AllToAll
# brings the results home, where each token sums its $k$ outputs with the router's weights.
#
# The buffer has a fixed shape $[E, C, D]$, because a collective's shape must be known when
# the program is compiled. $C$ is the *capacity*: with a *capacity factor* $c$, each expert
# keeps $C = \lceil c \cdot N k / E \rceil$ slots for a chip's $N$ tokens — $c$ times its share
# under perfect balance {cite:p}`lepikhin2021gshard,fedus2022switch`. Assignments past an
# expert's $C$-th are dropped (the token keeps only its other experts), and the layer counts
# them. With no capacity factor the library keeps $C = N$, which nothing can overflow.
#
# Attention has no experts to split. In this layout it runs *data-parallel*, as DeepSeek
# serves V3 {cite:p}`deepseekai2024v3`: the batch is split over the same $Z$ chips, each holds
# whole heads and attends over its own sequences' caches. Any remaining mesh axes, $Y$, split
# heads and every $F$ as the 1D layout does. Here is the MoE block, one chip's view:

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch14_twin_figure
# ```
#
# 稠密孪生模型的一步在到达其临界批量之前是平的，之后随 FLOPs 增长；MoE 的一步从同样的高度起步（一个
# 词元读取同样的激活权重），随着批次触及更多专家而攀升——64 个词元时，Mixtral 的权重耗时是它的孪生
# 模型的 {glue:text}`ch14_mx_ratio_64`——只在两者都计算受限的地方才与孪生模型的线相会（点线：整个模型的
# 临界批量）。所以高效地部署 MoE 意味着大批次，而且由于它的权重一块芯片放不下，还意味着许多芯片。
#
# ## 专家并行
#
# 第 8 章和第 9 章的一维布局会像切分稠密 MLP 那样，把每个专家的 $F$ 切分到 $M$ 块芯片上：即*张量
# 并行*。这样每块芯片读取一步所触及的每个专家的 $1/M$ 切片，而每个 MoE 块都以一次对所有词元激活值的
# 全规约（AllReduce）结束。GShard 的作者提出了另一种切法 {cite:p}`lepikhin2021gshard`：给 $Z$ 块芯片中的每一块
# $E/Z$ 个完整的专家，然后把*词元*搬到它们那里。每块芯片为自己的词元做路由，把每个词元的一份副本写进
# 一个每个专家 $C$ 个槽位的缓冲区，一次沿 $Z$ 的全交换（AllToAll）把每块芯片的专家要处理的词元送到
# 这块芯片；专家运行之后，第二次全交换把结果送回原处，在那里每个词元用路由器给出的权重把它的 $k$ 个
# 输出加起来。
#
# 缓冲区有固定的形状 $[E, C, D]$，因为集合通信的形状在程序编译时就必须已知。$C$ 是*容量*：对于
# *容量因子* $c$，每个专家为一块芯片的 $N$ 个词元保留 $C = \lceil c \cdot N k / E \rceil$ 个槽位——
# 是它在完全均衡时所占份额的 $c$ 倍 {cite:p}`lepikhin2021gshard,fedus2022switch`。一个专家第 $C$ 个之后
# 的分配会被丢弃（这个词元只保留它的其他专家），该层会统计这些丢弃。没有容量因子时，库取 $C = N$，
# 这样什么都不会溢出。
#
# 注意力没有专家可分。在这种布局中它以*数据并行*的方式运行，正如 DeepSeek 部署 V3 那样
# {cite:p}`deepseekai2024v3`：批次切分到同样的 $Z$ 块芯片上，每块芯片持有完整的注意力头，对自己那些
# 序列的缓存做注意力计算。其余的网格轴 $Y$ 像一维布局那样切分注意力头和每一个 $F$。下面是 MoE 块，
# 从一块芯片的视角看：

# %%
show_source(expert_parallel.moe_expert_parallel)

# %% [markdown]
# A small model with eight experts (two per token), a shared expert and a dense first layer,
# as DeepSeek's models have; the unsharded model's greedy tokens are the reference.

# %% [markdown] tags=["lang-zh"]
# 一个有八个专家（每个词元两个）、一个共享专家和一个稠密第一层的小模型，与 DeepSeek 的模型一样；未
# 分片模型的贪心输出词元作为参照。

# %%
cfg = ModelConfig(L=2, D=64, F=96, N=8, K=2, H=8, V=128, name="demo-moe",
                  moe=MoE(E=8, k=2, F=32, shared_F=32, dense_layers=(0,)))
weights = decoder.init_params(cfg, seed=0)
prompts = [[int(t) for t in jax.random.randint(jax.random.key(b), (n,), 0, cfg.V)]
           for b, n in enumerate([5, 9, 3, 16, 12, 7, 1, 10])]
n_new = 6
reference = decode.generate(weights, cfg, prompts, n_new).tokens
B = len(prompts)
print(cfg)

# %% [markdown]
# First every axis of a $1 \times 8$ mesh holds experts ($Z = 8$, one expert per chip, each
# chip serving one sequence), then a $2 \times 4$ mesh with experts over `y` ($Z = 4$) and
# heads and widths over `x` ($Y = 2$). For each, generation, the decode step's collectives
# read from the compiled program, and the library's inventory
# (`collectives.expert_parallel_collectives`) beside them.

# %% [markdown] tags=["lang-zh"]
# 先是 $1 \times 8$ 网格的每个轴都持有专家（$Z = 8$，每块芯片一个专家，每块芯片服务一个序列），然后是
# $2 \times 4$ 网格，专家沿 `y` 分布（$Z = 4$），注意力头和宽度沿 `x` 切分（$Y = 2$）。对每一种，我们
# 运行生成，从编译好的程序中读出解码步骤的集合通信，并把库的清单
# （`collectives.expert_parallel_collectives`）放在旁边。

# %%
def inventory(plan, batch, tokens=1, capacity_factor=None):
    return collectives.expert_parallel_collectives(
        cfg, batch, tokens, plan.size(plan.experts), plan.m, plan.size(plan.fsdp),
        plan.size(plan.kv_heads), capacity_factor, bytes_per_element=4, bytes_per_param=4)


steps = {}
for mesh_shape, experts in (("1x8", None), ("2x4", "y")):
    plan = make_plan(cfg, named_mesh(mesh_shape), "expert-parallel", experts=experts)
    print(plan.describe())
    assert sd.generate(weights, cfg, prompts, n_new, plan=plan).tokens == reference
    p_abs, c_abs = sd.abstract_inputs(cfg, plan, B, 32)
    step = hlo.compile_fn(sd.decode_step, p_abs, cfg, plan,
                          jax.ShapeDtypeStruct((B,), jnp.int32), c_abs)
    colls = hlo.collectives(step)
    predicted = inventory(plan, B)
    assert hlo.bytes_by_scope(colls) == collectives.total_bytes(predicted, by="scope")
    print(collectives.format_comms(predicted, hlo.bytes_by_scope(colls)), "\n")
    steps[mesh_shape] = (plan, colls)
plan8, colls8 = steps["1x8"]
a2a = [c for c in colls8 if c.scope == "dispatch"]
assert len(a2a) == cfg.L - 1 and all(c.group_size == 8 for c in a2a)

# Tensor parallelism, for comparison: the 1d-ws layout splits every expert's F eight ways.
plan_tp = make_plan(cfg, named_mesh("2x4"), "1d-ws")
assert sd.generate(weights, cfg, prompts, n_new, plan=plan_tp).tokens == reference

# %% tags=["hide-input"]
glue("ch14_dispatch_bytes", fmt_bytes(a2a[0].bytes))
glue("ch14_ep_colls", str(len(colls8)))

# %% [markdown]
# All three runs — two expert-parallel, one tensor-parallel — give the unsharded model's
# tokens. With experts over all eight chips, the decode step holds exactly
# {glue:text}`ch14_ep_colls` collectives: one AllToAll to the experts and one back per MoE
# layer, each of {glue:text}`ch14_dispatch_bytes` here, and nothing else — no AllReduce, since
# every chip runs whole heads and whole experts. The $2 \times 4$ mesh adds the 1D layout's
# collectives over $Y$ on top.
#
# ### Capacity and dropped tokens
#
# Now one MoE block alone (`expert_parallel.moe_program`), with a capacity factor of one half:
# each expert gets $C$ slots per chip, half its share of a chip's assignments under perfectly
# even routing, so experts overflow even then, and more where routing is uneven. The library
# reports the assignments it dropped; we count them ourselves from the unsharded router's
# choices, chip by chip, in token order.

# %% [markdown] tags=["lang-zh"]
# 所有三次运行——两次专家并行、一次张量并行——都给出了未分片模型的词元。当专家分布在全部八块芯片上时，
# 解码步骤恰好包含 {glue:text}`ch14_ep_colls` 次集合通信：每个 MoE 层一次全交换（AllToAll）送往专家、
# 一次送回，这里每次 {glue:text}`ch14_dispatch_bytes`，别无其他——没有全规约（AllReduce），因为每块芯片
# 运行的都是完整的注意力头和完整的专家。$2 \times 4$ 网格在此之上再加上一维布局沿 $Y$ 的集合通信。
#
# ### 容量与被丢弃的词元
#
# 现在单独看一个 MoE 块（`expert_parallel.moe_program`），容量因子取二分之一：每个专家在每块芯片上
# 有 $C$ 个槽位，只是路由完全均匀时它从一块芯片分到的分配数的一半，所以即使路由完全均匀，专家也会
# 溢出，路由不均匀时溢出得更多。库会报告它丢弃的分配；我们根据未分片路由器的选择，逐块芯片、按词元
# 顺序自己数一遍。

# %%
half = make_plan(cfg, named_mesh("2x4"), "expert-parallel", experts="y", capacity_factor=0.5)
layer = next(i for i in range(cfg.L) if cfg.is_moe_layer(i))
x_BTD = jax.random.normal(jax.random.key(5), (B, 4, cfg.D))
block = jax.jit(expert_parallel.moe_program(cfg, half, layer))
_, dropped = block(shard_params(weights, cfg, half)["layers"][layer], x_BTD)

p = weights["layers"][layer]
h_ND = decoder.rms_norm(x_BTD, p["mlp_norm"], cfg.norm_eps).reshape(-1, cfg.D)
experts_Nk = np.asarray(route(p, h_ND, cfg)[1])
chips = half.size(half.data)
tokens = len(h_ND) // chips
C = collectives.expert_capacity(tokens, cfg.moe.E, cfg.moe.k, 0.5)
ours = []
for chip_tokens in np.split(experts_Nk, chips):
    count = np.bincount(chip_tokens.reshape(-1), minlength=cfg.moe.E)
    ours.append(int(np.maximum(count - C, 0).sum()))
assert dropped.tolist() == ours
# Perfectly even routing: each chip's tokens·k assignments spread as evenly as whole numbers
# go. Its drops are what the capacity factor alone costs, and no routing drops fewer (the
# overflow Σ_e max(0, n_e − C) is convex in the counts).
share, extra = divmod(tokens * cfg.moe.k, cfg.moe.E)
even = [share + 1] * extra + [share] * (cfg.moe.E - extra)
even_dropped = chips * collectives.dropped_assignments(even, C)
assert C < share and 0 < even_dropped <= sum(ours) < 2 * even_dropped   # mostly the factor's

# %% tags=["hide-input"]
glue("ch14_cap_C", str(C))
glue("ch14_cap_tokens", str(tokens))
glue("ch14_cap_dropped", str(sum(ours)))
glue("ch14_cap_share", f"{sum(ours) / experts_Nk.size:.0%}")
glue("ch14_cap_even_share", str(share) if not extra else f"{share}–{share + 1}")
glue("ch14_cap_even_dropped", str(even_dropped))
glue("ch14_cap_uneven_dropped", str(sum(ours) - even_dropped))
print(f"C = {C} slots per expert per chip; dropped per chip {dropped.tolist()}")

# %% [markdown]
# With {glue:text}`ch14_cap_tokens` tokens per chip the capacity is
# $C =$ {glue:text}`ch14_cap_C` (slots per expert per chip), and
# {glue:text}`ch14_cap_dropped` assignments ({glue:text}`ch14_cap_share` of all) find their
# expert full — exactly the count
# $\sum_e \max(0, n_e - C)$ over each chip's per-expert counts $n_e$. Perfectly even routing
# would send every expert {glue:text}`ch14_cap_even_share` assignments per chip and still drop
# {glue:text}`ch14_cap_even_dropped` of them: those are the capacity factor's doing, and only
# {glue:text}`ch14_cap_uneven_dropped` come from the router's unevenness. Training tolerates a few
# dropped assignments; serving usually does not (the answer would depend on the other
# requests in the batch), which is why inference engines send variable-sized messages or pay
# for a generous capacity. The buffer, and so the AllToAll, grows with $C$.
#
# ## Worked problem 6: experts over Z, D over X, F over Y
#
# The scaling book's problem 6 shards the first expert matrix $[E, D, F]$ as
# $[E_Z, D_X, F_Y]$: experts over $Z$, each expert's $F$ over $Y$, and its $D$ over $X$, the
# axis that in training shards the weights FSDP-style. The library's layout takes all three
# (`x=` names the FSDP axes; their chips gather their experts before use and otherwise serve
# sequences of their own). On a $2 \times 2 \times 2$ mesh, for the problem's own model, from
# shapes alone (in float32: XLA on a CPU computes bfloat16 in float32, collectives included,
# so float32 keeps the compiled bytes those of the formula):

# %% [markdown] tags=["lang-zh"]
# 每块芯片 {glue:text}`ch14_cap_tokens` 个词元时，容量为 $C =$ {glue:text}`ch14_cap_C`（每块芯片上每个
# 专家的槽位数），有 {glue:text}`ch14_cap_dropped` 个分配（占全部的 {glue:text}`ch14_cap_share`）发现
# 它们的专家已满——恰好等于对每块芯片按专家统计的个数 $n_e$ 求得的 $\sum_e \max(0, n_e - C)$。若路由
# 完全均匀，每个专家从每块芯片分到 {glue:text}`ch14_cap_even_share` 个分配，仍会丢弃
# {glue:text}`ch14_cap_even_dropped` 个：这些是容量因子造成的，只有 {glue:text}`ch14_cap_uneven_dropped`
# 个来自路由器的不均匀。训练能
# 容忍少量被丢弃的分配；推理服务通常不能（答案会取决于批次中的其他请求），所以推理引擎会发送大小可变
# 的消息，或者为宽裕的容量买单。缓冲区，以及随之的全交换（AllToAll），随 $C$ 增长。
#
# ## 例题 6：专家沿 Z、D 沿 X、F 沿 Y
#
# 《How to Scale Your Model》的例题 6 把第一个专家矩阵 $[E, D, F]$ 分片为 $[E_Z, D_X, F_Y]$：专家沿 $Z$，每个专家
# 的 $F$ 沿 $Y$，它的 $D$ 沿 $X$——在训练中，这个轴以 FSDP 的方式对权重分片。库的布局三者都支持
# （`x=` 指定 FSDP 轴；这些轴上的芯片在使用前收集它们的专家，其余时候服务它们自己的序列）。在
# $2 \times 2 \times 2$ 网格上，针对这道题自己的模型，只根据形状（用 float32：CPU 上的 XLA 用 float32
# 计算 bfloat16，集合通信也一样，所以用 float32 能让编译出的字节数就是公式给出的字节数）：

# %%
mesh3 = named_mesh("2x2x2")
plan6 = make_plan(wp5, mesh3, "expert-parallel", x="x", experts="z")
p6, c6 = sd.abstract_inputs(wp5, plan6, 8, 16)


def device_bytes(tree) -> int:
    return sum(int(np.prod(a.sharding.shard_shape(a.shape))) * a.dtype.itemsize
               for a in jax.tree.leaves(tree))


held = moe_layouts.expert_parallel_param_bytes(wp5, X=2, Y=2, Z=2, bytes_per_param=4)
assert device_bytes(p6) == held
# The compiled decode step, for two of the model's 64 identical layers (a quick compile):
short = wp5.replace(L=2)
plan6s = make_plan(short, mesh3, "expert-parallel", x="x", experts="z")
p6s, c6s = sd.abstract_inputs(short, plan6s, 8, 16)
step6 = hlo.compile_fn(sd.decode_step, p6s, short, plan6s,
                       jax.ShapeDtypeStruct((8,), jnp.int32), c6s)
args = step6.memory_analysis().argument_size_in_bytes
assert args == moe_layouts.expert_parallel_param_bytes(short, 2, 2, 2, 4) + \
    device_bytes(c6s) + 8 * 4                                    # + the cache and the tokens
colls6 = hlo.collectives(step6)
gathered = sum(c.bytes for c in colls6 if c.scope == "fsdp_gather")
assert gathered == collectives.total_bytes(collectives.expert_parallel_collectives(
    short, 8, 1, 2, 2, 2, bytes_per_element=4, bytes_per_param=4),
    by="scope")[("fsdp_gather", "all-gather")]

# %% tags=["hide-input"]
print(plan6.describe())
glue("ch14_wp6_held", fmt_bytes(held))
glue("ch14_wp6_gathered", fmt_bytes(gathered / short.L * wp5.L))
# Of each gathered array a chip holds 1/X already and receives the rest over X.
received = collectives.wire_bytes("all-gather", gathered, plan6.size(plan6.fsdp))
assert received == gathered / 2
glue("ch14_wp6_received", fmt_bytes(received / short.L * wp5.L))

# %% [markdown]
# Each chip holds {glue:text}`ch14_wp6_held` of the float32 weights, as the formula says
# (`moe_layouts.expert_parallel_param_bytes`), and the compiled decode step takes exactly
# that as its arguments besides the cache and the tokens. It also shows why inference leaves
# $X$ at one: every decode step gathers each chip's experts over $X$ again — gathered arrays
# of {glue:text}`ch14_wp6_gathered` per chip for the 64-layer model, of which a chip holds
# half and receives the other {glue:text}`ch14_wp6_received` — the FSDP pattern that chapter 9
# ruled out for decoding.
#
# The problem itself puts the model on a TPU v5e $8 \times 16$ slice with $Y = 8$ and
# $Z = 16$, in int8. The simplest answer divides every weight by all 128 chips; in the
# problem's layout — the one problem 6 of the performance-model exercises grades — only the
# experts are split 128 ways, while attention and the embeddings are split over $Y$ alone:

# %% [markdown] tags=["lang-zh"]
# 每块芯片持有 {glue:text}`ch14_wp6_held` 的 float32 权重，与公式一致
# （`moe_layouts.expert_parallel_param_bytes`），而编译好的解码步骤除缓存和词元之外，正是以这些权重
# 作为输入。它也说明了推理为什么让 $X$ 保持为一：每个解码步骤都要沿 $X$ 重新收集每块芯片的专家——对
# 64 层的模型，每块芯片收集出的数组共 {glue:text}`ch14_wp6_gathered`，其中一半本就在这块芯片上，另外
# {glue:text}`ch14_wp6_received` 要从别的芯片接收——这正是第 9 章为解码排除掉的 FSDP 模式。
#
# 这道题本身把模型放在 TPU v5e $8 \times 16$ 切片上，$Y = 8$，$Z = 16$，用 int8。最简单的答案把每个
# 权重除以全部 128 块芯片；而在这道题的布局中——也就是性能模型练习第 6 题所评分的布局——只有专家被切成
# 128 份，注意力和嵌入只沿 $Y$ 切分：

# %%
chips6 = 128
ours = moe_layouts.expert_parallel_param_bytes(wp5, X=1, Y=8, Z=16, bytes_per_param=1)
even = counts.param_bytes(wp5, 1) / chips6
assert ours > even
# The layout problem 6 of the performance-model exercises grades is this one.
assert registry.get("ch03.wp6_load_time").reference() == ours / v5e.hbm_bytes_per_s

# %% tags=["hide-input"]
glue("ch14_wp6_even", fmt_bytes(even))
glue("ch14_wp6_ours", fmt_bytes(ours))
glue("ch14_wp6_load_even", fmt_seconds(even / v5e.hbm_bytes_per_s))
glue("ch14_wp6_load_ours", fmt_seconds(ours / v5e.hbm_bytes_per_s))
glue("ch14_wp6_free", fmt_bytes(v5e.hbm_bytes - ours))
glue("ch14_wp6_min", str(int(np.ceil(counts.param_bytes(wp5, 1) / v5e.hbm_bytes))))

# %% [markdown]
# An even split would leave {glue:text}`ch14_wp6_even` per chip, read in
# {glue:text}`ch14_wp6_load_even`; this layout holds {glue:text}`ch14_wp6_ours` per chip and
# reads it in {glue:text}`ch14_wp6_load_ours`, leaving {glue:text}`ch14_wp6_free` of each
# chip's memory for the caches. (The weights alone would fit on
# {glue:text}`ch14_wp6_min` chips.) Exercises on problems 5 and 6 are in
# [exercises 14](../exercises/14_mixture_of_experts.py).
#
# ## Expert parallel or tensor parallel?
#
# Same model, same chips, two layouts. Per MoE block, tensor parallelism AllReduces every
# token's activations, $B \cdot D$ numbers; expert parallelism sends each chip's buffer of
# $E \cdot C \cdot D$ numbers to the experts and back. We compile one MoE block of
# Mixtral-8x7B both ways on eight devices (from shapes, in float32) at three batch sizes, with
# a capacity factor of 1.25, and read what the programs move.

# %% [markdown] tags=["lang-zh"]
# 均匀切分会让每块芯片留下 {glue:text}`ch14_wp6_even`，读取耗时 {glue:text}`ch14_wp6_load_even`；这种
# 布局每块芯片持有 {glue:text}`ch14_wp6_ours`，读取耗时 {glue:text}`ch14_wp6_load_ours`，每块芯片还剩
# {glue:text}`ch14_wp6_free` 的内存给缓存。（单看权重，{glue:text}`ch14_wp6_min` 块芯片就放得下。）
# 关于例题 5 和 6 的练习在[练习 14](../exercises/14_mixture_of_experts.py)中。
#
# ## 专家并行还是张量并行？
#
# 同样的模型、同样的芯片、两种布局。每个 MoE 块中，张量并行对每个词元的激活值做全规约（AllReduce），
# 即 $B \cdot D$ 个数；专家并行把每块芯片的 $E \cdot C \cdot D$ 个数的缓冲区送往专家再送回。我们在八个
# 设备上把 Mixtral-8x7B 的一个 MoE 块按两种方式编译（只根据形状，用 float32），取三种批量大小，容量
# 因子为 1.25，然后读出这些程序搬运的数据量。

# %%
mixtral = models["Mixtral-8x7B"]
CF = 1.25
mesh8 = named_mesh("1x8")
rows, moved = [], {}
for layout in ("1d-ws", "expert-parallel"):
    plan = make_plan(mixtral, mesh8, layout, **({"capacity_factor": CF}
                                                if layout == "expert-parallel" else {}))
    layer_params = sd.abstract_inputs(mixtral, plan, 8, 8)[0]["layers"][0]
    for batch in (8, 64, 512):
        x = jax.ShapeDtypeStruct((batch, 1, mixtral.D), jnp.float32)
        program = hlo.compile_fn(expert_parallel.moe_program(mixtral, plan), layer_params, x)
        got = sum(c.bytes for c in hlo.collectives(program))
        if layout == "1d-ws":
            want = batch * mixtral.D * 4                                    # AllReduce [B, D]
        else:
            C = collectives.expert_capacity(batch // 8, mixtral.moe.E, mixtral.moe.k, CF)
            want = 2 * mixtral.moe.E * C * mixtral.D * 4                    # [E, C, D] twice
        assert got == want, (layout, batch, got, want)
        moved[layout, batch] = got
for batch in (8, 64, 512):
    rows.append(f"| {batch} | {fmt_bytes(moved['1d-ws', batch])} | "
                f"{fmt_bytes(moved['expert-parallel', batch])} |")

# %% tags=["hide-input"]
glue("ch14_fewer_from", str(min(b for b in (8, 64, 512)
                                if moved["expert-parallel", b] < moved["1d-ws", b])))
Markdown("| batch | tensor-parallel: AllReduce | expert-parallel: two AllToAlls |\n"
         "|---:|---:|---:|\n" + "\n".join(rows))

# %% [markdown]
# The compiled programs move exactly what the formulas say: $B \cdot D$ numbers for the
# AllReduce, $2 E C D \approx 2 c k B D / n$ for the two AllToAlls, fewer from a batch of
# {glue:text}`ch14_fewer_from` on. On the wire the gap widens: an AllReduce sends
# $2(n-1)/n$ of its array (a ReduceScatter, then an AllGather, each $(n-1)/n$), an AllToAll
# $(n-1)/n$ of it, and tensor parallelism adds a second AllReduce per layer after attention.
# Expert parallelism pays elsewhere: every chip holds and reads the whole attention. Which costs more depends on the
# batch. Priced on eight H100s with the estimator's rule (the larger of the roofline and the
# collectives' bandwidth time, plus their latencies: `moe_layouts.moe_decode_step` builds one
# chip's share of the step — its weights, cache and collectives, as the source counts them —
# and `step_cost.step_time` prices it). This view leaves out one thing the estimator counts,
# the routed rows' own trips through memory (`estimate_steps.routed_row_bytes`): a
# tensor-parallel chip moves every routed row, an expert-parallel chip only its experts' rows.

# %% [markdown] tags=["lang-zh"]
# 编译出的程序搬运的量与公式完全一致：全规约（AllReduce）为 $B \cdot D$ 个数，两次全交换（AllToAll）为
# $2 E C D \approx 2 c k B D / n$ 个数，从批次 {glue:text}`ch14_fewer_from` 起后者更少。在线路上差距
# 还会拉大：一次全规约要发送它的数组的 $2(n-1)/n$（先一次规约散射（ReduceScatter），再一次全收集
# （AllGather），各 $(n-1)/n$），一次全交换只发送其中的 $(n-1)/n$；而且张量并行在注意力之后每层还要再做
# 一次全规约。专家并行的代价在别处：每块芯片都持有并读取完整的注意力。哪种代价更高取决于批次。按估算器的规则
# （取屋顶线时间与集合通信的带宽时间中较大的那个，再加上它们的延迟：`moe_layouts.moe_decode_step`
# 按原文的算法列出一块芯片在这一步中的份额——权重、缓存和集合通信，`step_cost.step_time` 算出它的
# 耗时）在八块 H100 上估算一步的耗时。这个视图没有计入估算器另外计入的一项：路由行本身在内存中的往返
# （`estimate_steps.routed_row_bytes`）——张量并行的芯片要搬运全部路由行，专家并行的芯片只搬运属于
# 自己那些专家的行。

# %%
grid = [8 * 2 ** i for i in range(12)]
tp = [moe_layouts.moe_decode_step(mixtral, h100, 8, b, "1d-ws") for b in grid]
ep = [moe_layouts.moe_decode_step(mixtral, h100, 8, b, "expert-parallel", capacity_factor=CF)
      for b in grid]
cross = moe_layouts.crossover_batch(mixtral, h100, 8, capacity_factor=CF)
assert cross is not None and cross in range(grid[0], grid[-1] + 1)
# Both layouts read the same experts; expert parallelism reads 7 more copies of the rest.
extra = ep[0].weight_bytes - tp[0].weight_bytes


def parts(B: int, layout: str) -> tuple[float, float, float]:
    """(weights' read time, compute time, collectives' latency) of one step, in seconds."""
    step = moe_layouts.moe_decode_step(mixtral, h100, 8, B, layout,
                                       capacity_factor=CF if layout != "1d-ws" else None)
    return (step.weight_bytes / h100.hbm_bytes_per_s,
            step.flops / roofline.peak_flops_per_s(h100), step.comm.latency_s)


def compute_bound_from(layout: str) -> int:
    """The smallest batch (a multiple of 8) from which the layout's step is compute-bound."""
    return next(B for B in range(8, 2 ** 20, 8) if parts(B, layout)[1] >= parts(B, layout)[0])


tp_bound, ep_bound = compute_bound_from("1d-ws"), compute_bound_from("expert-parallel")
ep_read, compute, ep_latency = parts(cross, "expert-parallel")
tp_read, _, tp_latency = parts(cross, "1d-ws")
# Why expert parallelism wins at the crossover, as the numbers show it: tensor parallelism is
# compute-bound there already, expert parallelism is not yet...
assert tp_bound <= cross < ep_bound and tp_read <= compute < ep_read
# ...so its extra reads cost it only what they add beyond that compute time, which the
# latency it saves covers from this batch on and not a batch earlier.
exposed, saved = ep_read - compute, tp_latency - ep_latency
assert exposed <= saved
earlier = parts(cross - 8, "expert-parallel")
assert earlier[0] - parts(cross - 8, "1d-ws")[1] > parts(cross - 8, "1d-ws")[2] - earlier[2]
# (Each step is max(roofline, collectives' bandwidth) + latency, and at the crossover the
# bandwidth hides under the roofline in both layouts: the terms above are the whole step.)
at_cross = {layout: moe_layouts.moe_decode_step(mixtral, h100, 8, cross, layout,
                                                **({"capacity_factor": CF}
                                                   if layout != "1d-ws" else {}))
            for layout in ("1d-ws", "expert-parallel")}
assert abs(step_time(at_cross["expert-parallel"].cost, h100) - (ep_read + ep_latency)) < 1e-12
assert abs(step_time(at_cross["1d-ws"].cost, h100) - (compute + tp_latency)) < 1e-12

# %% tags=["hide-input"]
glue("ch14_cross", f"{cross:,}")
glue("ch14_extra_read", fmt_bytes(extra))
glue("ch14_tp_lat", fmt_seconds(tp[0].comm.latency_s))
glue("ch14_ep_lat", fmt_seconds(ep[0].comm.latency_s))
glue("ch14_tp_bound", f"{tp_bound:,}")
glue("ch14_ep_bound", f"{ep_bound:,}")
glue("ch14_cross_read", fmt_seconds(ep_read, 2))
glue("ch14_cross_compute", fmt_seconds(compute, 2))
glue("ch14_cross_exposed", fmt_seconds(exposed, 2))
glue("ch14_cross_saved", fmt_seconds(saved, 2))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(grid, [step_time(s.cost, h100) * 1e3 for s in tp], "o-", label="tensor-parallel (1d-ws)")
ax.loglog(grid, [step_time(s.cost, h100) * 1e3 for s in ep], "s-", label=f"expert-parallel, c = {CF}")
ax.axvline(cross, color="gray", ls=":", label=f"crossover, B = {cross:,}")
ax.set_xlabel("batch B (sequences, one token each)")
ax.set_ylabel("decode step (ms)")
ax.set_title(f"Mixtral-8x7B on 8 × {h100.name}, bf16 (formula)", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
glue_figure("ch14_layouts_figure", fig, zh=dict(
    title=f"Mixtral-8x7B 在 8 × {h100.name} 上，bf16（公式）",
    xlabel="批次 B（序列数，每条一个词元）", ylabel="解码步骤（ms）",
    legend=["张量并行（1d-ws）", f"专家并行，c = {CF}", f"交叉点，B = {cross:,}"]))

# %% [markdown]
# ```{glue:figure} ch14_layouts_figure
# ```
#
# At small batches tensor parallelism wins: the step is reading weights, and expert
# parallelism reads {glue:text}`ch14_extra_read` more per chip (every chip's copy of the
# attention and embeddings). Its advantage is in the collectives: about as many, but each a
# single pass where an AllReduce makes two — {glue:text}`ch14_ep_lat` of latency per step
# against {glue:text}`ch14_tp_lat` — and smaller. Tensor parallelism's step turns
# compute-bound first, from a batch of {glue:text}`ch14_tp_bound`; beyond it, reading fewer
# weights no longer shortens that step. Expert parallelism's step is still reading weights at
# a batch of {glue:text}`ch14_cross` — {glue:text}`ch14_cross_read` of weights against
# {glue:text}`ch14_cross_compute` of compute; it turns compute-bound only from
# {glue:text}`ch14_ep_bound` — but its extra copies now cost it only the
# {glue:text}`ch14_cross_exposed` by which its reads outlast that compute, less than the
# {glue:text}`ch14_cross_saved` of latency it saves. So from a batch of {glue:text}`ch14_cross`
# expert parallelism is the faster layout, before its own step is compute-bound. (With the
# routing imbalance real traffic has, the slowest chip sets the step; these are expectations
# under balanced routing.)
#
# ## Multi-head latent attention
#
# DeepSeek-V2 and V3 pair their experts with *latent attention* {cite:p}`deepseekai2024v2`:
# each token's keys and values for all $N$ heads are decompressed from one latent vector of
# $R_{kv}$ numbers, and the cache keeps that latent plus one small rotary key of $H_\text{rope}$
# numbers shared by all heads (`model.mla`). Per token and layer the cache holds
# $R_{kv} + H_\text{rope}$ numbers, against $2 K H$ for grouped-query attention. We measure it
# on the library's cache, allocating one for the full DeepSeek configurations (a few tokens
# long) and for the same models with multi-head and 8-group attention in place of the latent.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch14_layouts_figure
# ```
#
# 在小批次时张量并行胜出：这一步在读取权重，而专家并行每块芯片要多读 {glue:text}`ch14_extra_read`
# （每块芯片各有一份注意力和嵌入的副本）。它的优势在集合通信上：次数差不多，但每次只需一趟，而全规约
# （AllReduce）要两趟——每步的延迟为 {glue:text}`ch14_ep_lat`，对比 {glue:text}`ch14_tp_lat`——而且
# 数据量更小。张量并行的一步先变为计算受限，从批次 {glue:text}`ch14_tp_bound` 起；此后少读权重已不能
# 再缩短它的一步。专家并行的一步在批次 {glue:text}`ch14_cross` 时仍在读取权重——读权重要
# {glue:text}`ch14_cross_read`，计算只要 {glue:text}`ch14_cross_compute`；它要到 {glue:text}`ch14_ep_bound`
# 才变为计算受限——但这时它多读的副本只让它比这段计算时间多花 {glue:text}`ch14_cross_exposed`，少于它
# 省下的 {glue:text}`ch14_cross_saved` 延迟。所以从批次 {glue:text}`ch14_cross` 起，专家并行是更快的
# 布局，尽管它自己的一步还没有变为计算受限。（在真实流量带来的路由不均衡下，最慢的芯片决定一步的时间；
# 这里给出的是均衡路由下的期望值。）
#
# ## 多头潜在注意力
#
# DeepSeek-V2 和 V3 给它们的专家配上了*潜在注意力* {cite:p}`deepseekai2024v2`：每个词元在全部 $N$ 个头上
# 的键和值都从一个 $R_{kv}$ 个数的潜在向量解压出来，缓存中保存这个潜在向量，外加一个由所有头共享的、
# $H_\text{rope}$ 个数的小旋转键（`model.mla`）。每个词元每层的缓存是 $R_{kv} + H_\text{rope}$ 个数，
# 而分组查询注意力是 $2 K H$ 个。我们在库的缓存上测量它：为完整的 DeepSeek 配置分配一个缓存（只有几个
# 词元长），再为把潜在注意力换成多头注意力和 8 组注意力的同样模型各分配一个。

# %%
per_model = {}
for label in ("deepseek-v2-lite", "deepseek-v3"):
    full = get_preset(label)
    H = full.mla.H_v
    variants = {"MLA": full, "MHA": full.replace(mla=None, K=full.N, H=H),
                "GQA (K = 8)": full.replace(mla=None, K=8, H=H)}
    per = {}
    for name, c in variants.items():
        S = 4
        cache = kvcache.init_cache(c, 1, S, jnp.bfloat16)
        per[name] = kvcache.cache_bytes(cache) / S                     # measured
        assert per[name] == counts.kv_bytes_per_token(c, 2)             # = the formula
        del cache
    per_model[label] = per

# %% tags=["hide-input"]
glue("ch14_mla_v3", fmt_bytes(per_model["deepseek-v3"]["MLA"]))
glue("ch14_mha_v3", fmt_bytes(per_model["deepseek-v3"]["MHA"]))
glue("ch14_mla_ratio", fmt_ratio(per_model["deepseek-v3"]["MHA"]
                                 / per_model["deepseek-v3"]["MLA"], 0))
rows = [f"| {label} | {get_preset(label).N} | {fmt_bytes(per['MHA'])} | "
        f"{fmt_bytes(per['GQA (K = 8)'])} | {fmt_bytes(per['MLA'])} | "
        f"{fmt_ratio(per['MHA'] / per['MLA'])} |" for label, per in per_model.items()]
Markdown("| model | N | MHA | GQA, K = 8 | MLA | MHA / MLA |\n|---|---:|---:|---:|---:|---:|\n"
         + "\n".join(rows))

# %% [markdown]
# A DeepSeek-V3 token costs {glue:text}`ch14_mla_v3` of cache across its layers in bfloat16;
# with multi-head attention of the same heads it would cost {glue:text}`ch14_mha_v3`,
# {glue:text}`ch14_mla_ratio` as much.
#
# Attention over a cache of latents can be computed two ways. The *naive* form decompresses
# every cached latent into keys and values and runs ordinary attention. The *absorbed* form
# folds the decompression into the query and the output instead ($q^\top (W_{UK} c) =
# (W_{UK}^\top q)^\top c$), and attends over the latents as they are: one "KV head" $R_{kv} +
# H_\text{rope}$ wide shared by all $N$ query heads. They compute the same thing:

# %% [markdown] tags=["lang-zh"]
# 一个 DeepSeek-V3 词元在 bfloat16 下、所有层合计占用 {glue:text}`ch14_mla_v3` 的缓存；若用同样头数的
# 多头注意力，则要 {glue:text}`ch14_mha_v3`，是潜在注意力的 {glue:text}`ch14_mla_ratio`。
#
# 对潜在向量缓存的注意力有两种算法。*朴素*形式把每个缓存的潜在向量解压成键和值，再运行普通的注意力。
# *吸收*形式则把解压折进查询和输出之中（$q^\top (W_{UK} c) = (W_{UK}^\top q)^\top c$），直接对潜在向量
# 本身做注意力：一个宽 $R_{kv} + H_\text{rope}$ 的“KV 头”，由全部 $N$ 个查询头共享。两者计算的是同一个
# 东西：

# %%
tiny = ModelConfig(L=1, D=32, F=48, N=4, K=4, H=12, V=16, name="tiny-mla",
                   mla=MLA(R_kv=16, R_q=12, H_nope=8, H_rope=4, H_v=8))
p = decoder.init_params(tiny, 1)["layers"][0]
Bm, Tm = 2, 6
h = jax.random.normal(jax.random.key(2), (Bm, Tm, tiny.D))
pos = jnp.broadcast_to(jnp.arange(Tm, dtype=jnp.int32), (Bm, Tm))
lengths = jnp.full((Bm,), Tm, jnp.int32)
options = decode.layer_options(tiny)
attend = lambda i, q, k, v: decode.attend_cached(q, k, v, lengths, **options)  # noqa: E731
naive = mla.latent_attention(p, tiny, 0, h, pos, attend, form="naive")
absorbed = mla.latent_attention(p, tiny, 0, h, pos, attend, form="absorbed")
mla_err = float(jnp.max(jnp.abs(naive - absorbed)))
assert mla_err < 1e-4

# %% tags=["hide-input"]
glue("ch14_mla_err", f"{mla_err:.0e}")

# %% [markdown]
# (They agree to {glue:text}`ch14_mla_err`.) What the absorption trades shows on the
# roofline. Per cached token and layer, one decode query reads the same
# $R_{kv} + H_\text{rope}$ numbers in both forms; the naive form then spends
# $2 R_{kv} N (H_\text{nope} + H_v)$ FLOPs decompressing them, the absorbed form only
# $2N(2R_{kv} + H_\text{rope})$ to score and sum them
# (`decode_attention_cost.decode_attention_per_cached_token`). We check the absorbed count on
# the library's own decode step — XLA's FLOPs for two cache lengths, differenced — and place
# the forms beside multi-head and grouped attention of DeepSeek-V3's heads:

# %% [markdown] tags=["lang-zh"]
# （两者的差异在 {glue:text}`ch14_mla_err` 以内。）吸收带来的取舍体现在屋顶线上。每个缓存词元、每一层，
# 一个解码查询在两种形式中读取的都是同样的 $R_{kv} + H_\text{rope}$ 个数；朴素形式接着要花
# $2 R_{kv} N (H_\text{nope} + H_v)$ FLOPs 把它们解压，而吸收形式只需 $2N(2R_{kv} + H_\text{rope})$ 来
# 打分和求和（`decode_attention_cost.decode_attention_per_cached_token`）。我们在库自己的解码步骤上检查
# 吸收形式的计数——取 XLA 对两个缓存长度给出的 FLOPs 之差——并把这两种形式与 DeepSeek-V3 头配置下的
# 多头注意力和分组注意力放在一起：

# %%
probe = ModelConfig(L=1, D=64, F=64, N=4, K=4, H=192, V=64, name="probe",
                    mla=MLA(R_kv=512, H_nope=128, H_rope=64, H_v=128))
flops = []
with jax.default_device(jax.devices("cpu")[0]):      # the same count on every runtime
    probe_params = decoder.init_params(probe, 0)
    for S in (256, 512):
        cache = jax.eval_shape(lambda S=S: kvcache.init_cache(probe, 1, S))
        compiled = hlo.compile_fn(decode.decode_step, probe_params, probe,
                                  jax.ShapeDtypeStruct((1,), jnp.int32), cache)
        flops.append(hlo.flops(compiled))
per_token = (flops[1] - flops[0]) / 256
formula = decode_attention_per_cached_token(probe, "absorbed")[0]
assert abs(per_token / formula - 1) < 0.02, (per_token, formula)   # XLA adds the softmax's ops

forms = {"MHA": (v3.replace(mla=None, K=v3.N, H=v3.mla.H_v), None),
         "GQA, K = 8": (v3.replace(mla=None, K=8, H=v3.mla.H_v), None),
         "MLA, absorbed": (v3, "absorbed"), "MLA, naive": (v3, "naive")}
intensity = {name: np.divide(*decode_attention_per_cached_token(c, form))
             for name, (c, form) in forms.items()}
assert intensity["MHA"] < intensity["GQA, K = 8"] < intensity["MLA, absorbed"] \
    < roofline.critical_intensity(h100) < intensity["MLA, naive"]

# %% tags=["hide-input"]
glue("ch14_xla_gap", f"{per_token / formula - 1:.1%}")
glue("ch14_i_mha", f"{intensity['MHA']:.0f}")
glue("ch14_i_gqa", f"{intensity['GQA, K = 8']:.0f}")
glue("ch14_i_abs", f"{intensity['MLA, absorbed']:.0f}")
glue("ch14_i_naive", f"{intensity['MLA, naive']:,.0f}")
glue("ch14_ci_h100", f"{roofline.critical_intensity(h100):.0f}")

xs = np.geomspace(0.5, 1e5, 200)
fig, ax = plt.subplots(figsize=(6.5, 4))
for chip in (h100, v5e):
    ax.loglog(xs, np.minimum(chip.bf16_flops_per_s, xs * chip.hbm_bytes_per_s), label=chip.name)
for name, value in intensity.items():
    y = min(h100.bf16_flops_per_s, value * h100.hbm_bytes_per_s)
    ax.plot(value, y, "o", color="k")
    ax.annotate(f"{name} ({value:,.0f})", (value, y), textcoords="offset points",
                xytext=(6, -12), fontsize=8)
ax.set_xlabel("FLOPs per byte of cache read (bf16)")
ax.set_ylabel("attainable FLOP/s")
ax.set_title("Decoding attention, DeepSeek-V3's heads, per cached token (formula)", fontsize=10)
ax.legend(fontsize=8, loc="lower right")
ax.grid(True, which="both", alpha=0.3)
zh_forms = {"MHA": "MHA", "GQA, K = 8": "GQA，K = 8", "MLA, absorbed": "MLA，吸收形式",
            "MLA, naive": "MLA，朴素形式"}
glue_figure("ch14_mla_roofline_figure", fig, zh=dict(
    title="解码注意力，DeepSeek-V3 的注意力头，每个缓存词元（公式）",
    xlabel="每读取一字节缓存的 FLOPs（bf16）", ylabel="可达到的 FLOP/s",
    legend=[h100.name, v5e.name],
    texts=[f"{zh_forms[name]}（{value:,.0f}）" for name, value in intensity.items()]))

# %% [markdown]
# ```{glue:figure} ch14_mla_roofline_figure
# ```
#
# XLA's count of the library's step is within {glue:text}`ch14_xla_gap` of the formula (the
# difference is the softmax's elementwise work). Multi-head attention does
# {glue:text}`ch14_i_mha` FLOP per byte of cache and grouped attention {glue:text}`ch14_i_gqa`:
# both far below any chip's ridge, as chapter 2 found. Latent attention in the absorbed form
# does {glue:text}`ch14_i_abs` — close to the H100's {glue:text}`ch14_ci_h100` — because all
# 128 heads read the same latent: the cache is small *and* well used. The naive form would
# need {glue:text}`ch14_i_naive` FLOPs per byte, deep in compute-bound territory for no gain,
# which is why a decoder absorbs. (The library decodes in the absorbed form; the naive form
# is its reference.)
#
# ```{admonition} Takeaways
# - An MoE decode step reads the dense weights and the experts its tokens touch,
#   $E(1 - (1 - k/E)^B)$ of $E$ per layer: the active parameters at batch 1, nearly all of
#   them at the batch sizes servers run.
# - An MoE layer is compute-bound from about $E/k$ times a dense layer's critical batch; until
#   then its step is slower than that of a dense model with the same FLOPs per token.
# - Expert parallelism gives each chip whole experts and moves tokens with two AllToAlls of an
#   $[E, C, D]$ buffer; its capacity decides both what it moves and what it drops. It reads
#   a copy of attention on every chip, so tensor parallelism wins at small batches; expert
#   parallelism wins once tensor parallelism's step is compute-bound and the collective
#   latency it saves outweighs what its extra reads add beyond that compute time.
# - Latent attention caches $R_{kv} + H_\text{rope}$ numbers per token and layer; in its
#   absorbed form every head shares them, bringing decoding attention near the ridge point.
# ```

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch14_mla_roofline_figure
# ```
#
# XLA 对库中这一步的计数与公式相差不到 {glue:text}`ch14_xla_gap`（差异来自 softmax 的逐元素运算）。
# 多头注意力每字节缓存做 {glue:text}`ch14_i_mha` FLOP，分组注意力做 {glue:text}`ch14_i_gqa`：两者都远低于
# 任何芯片的拐点，正如第 2 章所发现的。吸收形式的潜在注意力做 {glue:text}`ch14_i_abs`——接近 H100 的
# {glue:text}`ch14_ci_h100`——因为全部 128 个头读取的是同一个潜在向量：缓存既小，*又*用得充分。朴素形式
# 则需要每字节 {glue:text}`ch14_i_naive` FLOPs，深入计算受限的区域却毫无收益，这就是解码器要做吸收的
# 原因。（库以吸收形式解码；朴素形式是它的参照。）
#
# ```{admonition} 要点
# - 一个 MoE 解码步骤读取稠密权重，以及它的词元触及的专家，每层 $E$ 个中的 $E(1 - (1 - k/E)^B)$ 个：
#   批量大小为 1 时就是激活参数，在服务器实际运行的批量大小下几乎是全部参数。
# - 一个 MoE 层大约从稠密层临界批量的 $E/k$ 倍起变为计算受限；在此之前，它的一步比每个词元 FLOPs 相同
#   的稠密模型更慢。
# - 专家并行让每块芯片持有完整的专家，用两次 $[E, C, D]$ 缓冲区的全交换（AllToAll）搬运词元；它的容量
#   既决定搬运多少，也决定丢弃多少。它在每块芯片上都读取一份注意力的副本，所以小批次时张量并行胜出；
#   一旦张量并行的一步变为计算受限，而专家并行省下的集合通信延迟又超过了它多读的权重在这段计算时间之外
#   多花的时间，专家并行就胜出。
# - 潜在注意力每个词元每层缓存 $R_{kv} + H_\text{rope}$ 个数；在吸收形式中每个头都共享它们，使解码注意力
#   接近拐点。
# ```
