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
# # Exercises: mixtures of experts
#
# These exercises go with [chapter 14](../chapters/14_mixture_of_experts.py), serving sparse
# models. The scaling book's worked problems 5 and 6 {cite:p}`austin2025scaling`, as the source
# asks them (total and active parameters, the critical batch, the cache, the FLOPs; the expert
# sharding of an 8 × 16 slice), are problems 5 and 6 of
# [the performance-model exercises](02_performance_models.py); this page goes on from them,
# with every constant read from the library's presets and hardware table. The last exercise
# is a router, the first thing an MoE layer computes.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted*. The notebook runs from top to bottom
# at any stage, and `summary` at the end adds up your points.

# %%
import inferbook

info = inferbook.setup()

import math

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.grading import check, summary
from inferbook.model.features import MoE
from inferbook.model.presets import get_preset
from inferbook.perf import counts, moe_layouts, params
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch14")

# %% [markdown]
# ## Part 1: the sparse step
#
# A decode step of $B$ tokens sends each token to $k$ of the $E$ experts of every MoE layer,
# and reads the weights of the experts that at least one token chose.
#
# **1.1** With balanced routing, how many distinct experts does one DeepSeek-V3 layer touch,
# on average, in a step of $B = 32$ tokens?

# %%
v3 = get_preset("deepseek-v3")
print(f"DeepSeek-V3: E = {v3.moe.E}, k = {v3.moe.k}")

# %%
# BEGIN SOLUTION
E, k = v3.moe.E, v3.moe.k
touched = E * (1 - (1 - k / E) ** 32)
# END SOLUTION

# %%
check("ch14.experts_touched_v3", touched)

# %% [markdown]
# **1.2** How many bytes of bfloat16 weights does a decode step of Mixtral-8x7B read when
# $B = 4$ tokens share it? Everything but the routed experts is read whole; each MoE layer reads
# the experts the batch touches (`params.tensors` lists every weight with its role; the routed
# experts' role is `"expert"`).

# %%
mixtral = get_preset("mixtral-8x7b")
print(f"Mixtral-8x7B: E = {mixtral.moe.E}, k = {mixtral.moe.k}, "
      f"{counts.param_count(mixtral):,} parameters")

# %%
# BEGIN SOLUTION
routed = sum(t.size for t in params.tensors(mixtral) if t.role == "expert")
share = 1 - (1 - mixtral.moe.k / mixtral.moe.E) ** 4
read_b4 = 2 * (counts.param_count(mixtral) - routed + routed * share)
# END SOLUTION

# %%
check("ch14.weights_read_mixtral_b4", read_b4)

# %% [markdown]
# **1.3** One MoE layer of DeepSeek-V3 on an H100, bfloat16 weights and arithmetic: from how
# many tokens per step is it compute-bound? Its $E$ experts have $P_e = 3 D F_e$ parameters
# each; a step does $2 k P_e$ FLOPs per token and reads the touched experts. (Where the batch
# touches every expert, the answer is $E/k$ times a dense layer's.)

# %%
h100 = get_chip("H100 SXM")

# %%
# BEGIN SOLUTION
dense_bcrit = h100.bf16_flops_per_s / h100.hbm_bytes_per_s      # 2 FLOPs per 2-byte weight
layer_bcrit = dense_bcrit * v3.moe.E / v3.moe.k
# Check the assumption: at that batch every expert is touched.
assert v3.moe.E - v3.moe.E * (1 - (1 - v3.moe.k / v3.moe.E) ** layer_bcrit) < 1e-3
# END SOLUTION

# %%
check("ch14.moe_layer_bcrit_v3", layer_bcrit)

# %% [markdown]
# ## Part 2: expert parallelism
#
# Expert parallelism puts $E/Z$ whole experts on each of $Z$ chips and sends every token to
# the chips of its experts with an AllToAll. The buffer a chip sends has a fixed shape
# $[E, C, D]$: $C$ slots per expert, the *capacity*, $C = \lceil c \cdot N k / E \rceil$ for a
# chip's $N$ tokens and a capacity factor $c$.
#
# **2.1** Mixtral-8x7B on 8 chips, experts over all 8; a decode step of 64 sequences (8 per
# chip, one token each), capacity factor 1.25, bfloat16 activations. How many bytes does one
# chip's dispatch buffer hold?

# %%
# BEGIN SOLUTION
tokens = 64 // 8
C = math.ceil(1.25 * tokens * mixtral.moe.k / mixtral.moe.E)
dispatch_bytes = mixtral.moe.E * C * mixtral.D * 2
# END SOLUTION

# %%
check("ch14.dispatch_buffer_bytes", dispatch_bytes)

# %% [markdown]
# **2.2** A chip holds 16 tokens for 8 experts, 2 per token, with a capacity factor of 1.
# How many slots does each expert keep?

# %%
# BEGIN SOLUTION
slots = math.ceil(1.0 * 16 * 2 / 8)
# END SOLUTION

# %%
check("ch14.capacity_slots", slots)

# %% [markdown]
# **2.3** Its router sends the eight experts these numbers of assignments (32 in all). How many
# assignments are dropped?

# %%
sent = [7, 5, 4, 4, 3, 3, 3, 3]

# %%
# BEGIN SOLUTION
dropped = sum(max(0, n - slots) for n in sent)
# END SOLUTION

# %%
check("ch14.capacity_drops", dropped)

# %% [markdown]
# **2.4** Expert parallelism reads a copy of the attention weights on every chip but moves
# smaller collectives; tensor parallelism (the 1D layout, `"1d-ws"`) splits everything.
# `moe_layouts.moe_decode_step(cfg, chip, chips, batch, layout, capacity_factor=...)` prices a
# decode step either way. For Mixtral-8x7B on 8 H100s with capacity factor 1.25, find the
# smallest batch — a multiple of 8, so each chip serves whole sequences — at which
# expert parallelism is no slower than tensor parallelism.

# %%
# BEGIN SOLUTION
def step(batch, layout):
    return moe_layouts.moe_decode_step(mixtral, h100, 8, batch, layout,
                                       capacity_factor=1.25).step_s


crossover = next(b for b in range(8, 2 ** 16, 8)
                 if step(b, "expert-parallel") <= step(b, "1d-ws"))
# END SOLUTION

# %%
check("ch14.ep_tp_crossover", crossover)

# %% [markdown]
# **2.5 Worked problem 6, in this layout.** The problem's model (its 18B model with 16 experts
# of the same width, 2 per token) on a TPU v5e 8 × 16 slice, int8 weights, experts split
# $[E_Z, D, F_Y]$ with $Z = 16$, $Y = 8$ (and $X = 1$). Here attention and the embeddings are
# split as the 1D layout splits them over $Y$ alone, and each group of $Y$ chips serves its
# own sequences. How many bytes of weights does each chip hold?

# %%
base = get_preset("scaling-book-18b")
wp5 = base.replace(moe=MoE(E=16, k=2, F=base.F))

# %%
# BEGIN SOLUTION
per_chip = moe_layouts.expert_parallel_param_bytes(wp5, X=1, Y=8, Z=16, bytes_per_param=1)
# END SOLUTION

# %%
check("ch14.wp6_bytes_per_chip", per_chip)

# %% [markdown]
# ## Part 3: latent attention
#
# **3.1** DeepSeek-V3 caches, per token and layer, a latent of $R_{kv}$ numbers and a rotary
# key of $H_\text{rope}$ numbers shared by all heads. How many bytes of bfloat16 cache does
# one token take across all layers?

# %%
print(v3.mla)

# %%
# BEGIN SOLUTION
mla_bytes = v3.L * (v3.mla.R_kv + v3.mla.H_rope) * 2
# END SOLUTION

# %%
check("ch14.mla_cache_bytes_v3", mla_bytes)

# %% [markdown]
# ## Part 4: a router
#
# **4.1** Write Mixtral's router: for each of $N$ tokens `x_ND` and a router matrix `w_DE`,
# the softmax of `x_ND @ w_DE` over the $E$ experts (in float32), the $k$ largest
# probabilities in decreasing order and the experts they belong to, the probabilities divided
# by their sum. Return `(weights [N, k], experts [N, k])`, the experts as integers.
# (`jax.lax.top_k` returns the largest values of the last axis and their indices.)


# %%
def top_k_router(x_ND, w_DE, k):
    """Each token's k experts and their weights, Mixtral's way."""
    # BEGIN SOLUTION
    logits = jnp.matmul(x_ND, w_DE, preferred_element_type=jnp.float32)
    probs = jax.nn.softmax(logits, axis=-1)
    weights, experts = jax.lax.top_k(probs, k)
    return weights / weights.sum(-1, keepdims=True), experts.astype(jnp.int32)
    # END SOLUTION


# %%
check("ch14.top_k_router", top_k_router)

# %% [markdown]
# ## Your score

# %%
summary("ch14")
