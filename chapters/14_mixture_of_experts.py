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
#   bytes it reads grow with the batch, and the batch at which the step becomes compute-bound
#   is about $E/k$ times a dense model's.
# - **Sharding.** Experts are whole units of weight that can live on different chips. *Expert
#   parallelism* gives each chip its own experts and sends every token to the chips of its
#   experts with an AllToAll, instead of splitting every expert over every chip.
# - **The cache.** DeepSeek's models pair their experts with *multi-head latent attention*,
#   which caches one compressed vector per token instead of keys and values
#   {cite:p}`deepseekai2024v2`.
#
# As in chapters 8 to 10, sharded programs run on emulated devices, so we report bytes,
# collectives and tokens, never their wall-clock time.

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
from inferbook.model import decode, decoder, kvcache, mla
from inferbook.model.config import ModelConfig
from inferbook.model.features import MLA, MoE
from inferbook.model.moe import route
from inferbook.model.presets import get_preset
from inferbook.parallel import collectives, expert_parallel, hlo
from inferbook.parallel import sharded_decode as sd
from inferbook.parallel.mesh import named_mesh
from inferbook.parallel.sharding import make_plan, shard_params
from inferbook.perf import counts, estimator, moe_layouts, params, roofline
from inferbook.perf.hardware import get_chip
from inferbook.perf.latent_attention_cost import decode_attention_per_cached_token

print(info.describe())
v5e, h100 = get_chip("TPU v5e"), get_chip("H100 SXM")

# %% tags=["hide-input"]
from inferbook.book.present import fmt_bytes, fmt_count, fmt_ratio, fmt_seconds, glue

# %% [markdown]
# ## Total and active parameters
#
# Worked problem 5 of the scaling book {cite:p}`austin2025scaling` turns its invented 18B model
# into a mixture of 16 experts, 2 per token. Beside it, three models readers serve today. The
# *active* parameters are those one token uses: everything but the routed experts, plus $k$
# of them.

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

fig, ax = plt.subplots(figsize=(6.5, 4))
for label, (cfg, balanced) in routers.items():
    m = cfg.moe
    if balanced:
        grid = np.geomspace(1, batches[-1], 100)
        ax.semilogx(grid, [params.expected_experts(m.E, m.k, b) / m.E for b in grid],
                    label=f"E(1 − (1 − k/E)^B), E = {m.E}, k = {m.k}")
    mean = np.array([measured[label, B][0] for B in batches])
    ax.semilogx(batches, mean / m.E, "o" if balanced else "x", label=f"measured: {label}",
                color=ax.lines[-1].get_color() if balanced else "gray")
ax.set_xlabel("tokens in the step, B")
ax.set_ylabel("share of the experts touched per layer")
ax.set_title("Experts a decode step reads: the library's routers against the formula",
             fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
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
    assert abs(exact / (dense * m.E / m.k) - 1) < 0.01     # every expert touched by then
    assert dense < whole < exact       # the dense parts (attention, shared experts) pull it down
    crit[label] = (dense, exact, whole)
    rows.append(f"| {label} | {chip.name} | {dense:,.0f} | {m.E}/{m.k} | "
                f"{dense * m.E / m.k:,.0f} | {exact:,.0f} | {whole:,.0f} |")

# %% tags=["hide-input"]
glue("ch14_bdense_v5e", f"{crit['worked problem 5'][0]:.0f}")
glue("ch14_wp5_bcrit_source", f"{published['b_crit']['TPU v5e']} × 16/2 = "
                              f"{published['worked_problems']['p5_b_crit']:,}")
glue("ch14_bcrit_wp5", f"{crit['worked problem 5'][1]:,.0f}")
glue("ch14_bcrit_v3", f"{crit['DeepSeek-V3'][1]:,.0f}")
glue("ch14_bwhole_v3", f"{crit['DeepSeek-V3'][2]:,.0f}")
Markdown("| model | chip | dense B_crit | E/k | E/k · B_crit | MoE layer, exact | whole model |\n"
         "|---|---|---:|---:|---:|---:|---:|\n" + "\n".join(rows))

# %% [markdown]
# On a TPU v5e a dense layer is compute-bound from {glue:text}`ch14_bdense_v5e` tokens in
# bfloat16, so problem 5's expert layers need {glue:text}`ch14_bcrit_wp5`: the problem's
# {glue:text}`ch14_wp5_bcrit_source`, with the registry's bandwidth for the source's round
# figure. A DeepSeek-V3 expert layer on an H100
# needs {glue:text}`ch14_bcrit_v3` tokens per step. The whole model crosses earlier
# ({glue:text}`ch14_bwhole_v3` tokens), because its attention and shared experts are dense
# and reach their own critical batch sooner; but at every batch below that, the step is
# reading weights — more of them than a dense model with the same FLOPs per token.
#
# Here is that comparison as a step time: the weight matmuls of a step on one H100 (the
# larger of their FLOPs over $C$ and their bytes over $W$; the cache and the interconnect
# come on top, as in chapters 3 and 9), beside each model's dense twin.

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
plt.show()

# %% [markdown]
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

# %%
show_source(expert_parallel.moe_expert_parallel)

# %% [markdown]
# A small model with eight experts (two per token), a shared expert and a dense first layer,
# as DeepSeek's models have; the unsharded model's greedy tokens are the reference.

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
# each expert gets $C$ slots per chip, fewer than the tokens a chip sends it whenever routing
# is uneven. The library reports the assignments it dropped; we count them ourselves from the
# unsharded router's choices, chip by chip, in token order.

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

# %% tags=["hide-input"]
glue("ch14_cap_C", str(C))
glue("ch14_cap_tokens", str(tokens))
glue("ch14_cap_dropped", str(sum(ours)))
glue("ch14_cap_share", f"{sum(ours) / experts_Nk.size:.0%}")
print(f"C = {C} slots per expert per chip; dropped per chip {dropped.tolist()}")

# %% [markdown]
# With {glue:text}`ch14_cap_tokens` tokens per chip the capacity is
# $C =$ {glue:text}`ch14_cap_C` (slots per expert per chip), and
# {glue:text}`ch14_cap_dropped` assignments ({glue:text}`ch14_cap_share` of all) find their
# expert full — exactly the count
# $\sum_e \max(0, n_e - C)$ over each chip's per-expert counts $n_e$. Training tolerates a few
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

# %% [markdown]
# Each chip holds {glue:text}`ch14_wp6_held` of the float32 weights, as the formula says
# (`moe_layouts.expert_parallel_param_bytes`), and the compiled decode step takes exactly
# that as its arguments besides the cache and the tokens. It also shows why inference leaves
# $X$ at one: every decode step gathers each chip's experts over $X$ again,
# {glue:text}`ch14_wp6_gathered` per chip for the 64-layer model — the FSDP pattern that
# chapter 9 ruled out for decoding.
#
# The problem itself puts the model on a TPU v5e $8 \times 16$ slice with $Y = 8$ and
# $Z = 16$, in int8. The simplest answer, the one the performance-model exercises grade,
# divides every weight by all 128 chips; in this layout only the experts are split 128 ways,
# while attention and the embeddings are split over $Y$ alone:

# %%
chips6 = 128
ours = moe_layouts.expert_parallel_param_bytes(wp5, X=1, Y=8, Z=16, bytes_per_param=1)
even = counts.param_bytes(wp5, 1) / chips6
assert ours > even

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
# {glue:text}`ch14_fewer_from` on. On the wire the gap widens: an AllReduce sends twice its
# array (a ReduceScatter, then an AllGather), an AllToAll $(n-1)/n$ of it, and tensor
# parallelism adds a second AllReduce per layer after attention. Expert parallelism pays
# elsewhere: every chip holds and reads the whole attention. Which costs more depends on the
# batch. Priced on eight H100s with the estimator's rule (the larger of the roofline and the
# collectives' bandwidth time, plus their latencies; `moe_layouts.moe_decode_step`):

# %%
grid = [8 * 2 ** i for i in range(12)]
tp = [moe_layouts.moe_decode_step(mixtral, h100, 8, b, "1d-ws") for b in grid]
ep = [moe_layouts.moe_decode_step(mixtral, h100, 8, b, "expert-parallel", capacity_factor=CF)
      for b in grid]
cross = moe_layouts.crossover_batch(mixtral, h100, 8, capacity_factor=CF)
assert cross is not None and cross in range(grid[0], grid[-1] + 1)
# Both layouts read the same experts; expert parallelism reads 7 more copies of the rest.
extra = ep[0].weight_bytes - tp[0].weight_bytes

# %% tags=["hide-input"]
glue("ch14_cross", f"{cross:,}")
glue("ch14_extra_read", fmt_bytes(extra))
glue("ch14_tp_lat", fmt_seconds(tp[0].comm.latency_s))
glue("ch14_ep_lat", fmt_seconds(ep[0].comm.latency_s))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(grid, [s.step_s * 1e3 for s in tp], "o-", label="tensor-parallel (1d-ws)")
ax.loglog(grid, [s.step_s * 1e3 for s in ep], "s-", label=f"expert-parallel, c = {CF}")
ax.axvline(cross, color="gray", ls=":", label=f"crossover, B = {cross:,}")
ax.set_xlabel("batch B (sequences, one token each)")
ax.set_ylabel("decode step (ms)")
ax.set_title(f"Mixtral-8x7B on 8 × {h100.name}, bf16 (formula)", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# At small batches tensor parallelism wins: the step is reading weights, and expert
# parallelism reads {glue:text}`ch14_extra_read` more per chip (every chip's copy of the
# attention and embeddings). Its advantage is in the collectives: about as many, but each a
# single pass where an AllReduce makes two — {glue:text}`ch14_ep_lat` of latency per step
# against {glue:text}`ch14_tp_lat` — and smaller. Once the step is compute-bound, both do the
# same FLOPs and the extra copies cost nothing, so from a batch of {glue:text}`ch14_cross`
# expert parallelism is the faster layout. (With the routing imbalance real traffic has, the
# slowest chip sets the step; these are expectations under balanced routing.)
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
# {glue:text}`ch14_mla_ratio` more.
#
# Attention over a cache of latents can be computed two ways. The *naive* form decompresses
# every cached latent into keys and values and runs ordinary attention. The *absorbed* form
# folds the decompression into the query and the output instead ($q^\top (W_{UK} c) =
# (W_{UK}^\top q)^\top c$), and attends over the latents as they are: one "KV head" $R_{kv} +
# H_\text{rope}$ wide shared by all $N$ query heads. They compute the same thing:

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
# (`latent_attention_cost.decode_attention_per_cached_token`). We check the absorbed count on
# the library's own decode step — XLA's FLOPs for two cache lengths, differenced — and place
# the forms beside multi-head and grouped attention of DeepSeek-V3's heads:

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
plt.show()

# %% [markdown]
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
#   a copy of attention on every chip, so tensor parallelism wins at small batches and expert
#   parallelism once the step is compute-bound.
# - Latent attention caches $R_{kv} + H_\text{rope}$ numbers per token and layer; in its
#   absorbed form every head shares them, bringing decoding attention near the ridge point.
# ```
