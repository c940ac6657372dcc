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
# # Latency, throughput and memory
#
# Chapter 2 established the two facts a decode step is built on: a weight matrix multiplied by a
# batch of $B$ tokens does $2B$ FLOPs per weight it reads, so it is memory-bound until $B$
# reaches the chip's critical batch; and attention against a KV cache is memory-bound at every
# batch size. This chapter turns those facts into the three numbers a serving system is judged
# by — how long each step takes (latency), how many tokens per second it produces (throughput),
# and whether it fits in memory at all — and then walks through one real model, LLaMA-2 13B,
# where the KV cache, not the weights, turns out to set the limits
# {cite:p}`austin2025scaling,pope2023esti`.

# %%
import inferbook

info = inferbook.setup()

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

from inferbook.book.listing import show_source
from inferbook.model.presets import get_preset
from inferbook.perf import counts, latency, roofline
from inferbook.perf.hardware import get_chip

print(info.describe())

# %% tags=["hide-input"]
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)

# %% [markdown]
# ## The step time to remember
#
# Take one decode step of $B$ sequences. Every weight is read once, whatever $B$ is; each
# sequence's cached keys and values are read once too. If nothing waits on arithmetic, the step
# takes the time to read all of that:
#
# $$
# T_\text{step} \ge \frac{B \cdot \text{KV bytes per sequence} + \text{weight bytes}}
#                        {\text{memory bandwidth}}, \qquad
# \text{tokens/s} \le \frac{B \cdot \text{memory bandwidth}}
#                          {B \cdot \text{KV bytes per sequence} + \text{weight bytes}} .
# $$
#
# As $B$ grows, the $2B$ FLOPs per weight eventually take longer than reading the weight. The
# attention part never does (its arithmetic intensity stays near one FLOP per byte), so the
# general form keeps attention memory-bound and gives the weight matmuls the larger of their
# two times:
#
# $$
# T_\text{step} = \underbrace{\frac{B \cdot \text{KV bytes per sequence}}{W}}_{\text{attention}}
#   + \underbrace{\max\left(\frac{2 B P}{C}, \frac{\text{weight bytes}}{W}\right)}_{\text{weights}}
# $$
#
# with $P$ parameters, aggregate bandwidth $W$ and aggregate FLOP/s $C$ of all the chips that
# share the model. These are the two functions the estimator uses:

# %%
show_source(roofline.step_time_lower_bound, roofline.step_time)

# %% [markdown]
# ### A quick estimate
#
# The scaling book poses a check of these formulas {cite:p}`austin2025scaling`: a dense model of
# 30 billion parameters stored in int8 (one byte per weight, bfloat16 arithmetic), a KV cache of
# 100 kB per token, an 8,192-token context, served on a TPU v5e 4×4 slice (16 chips). What is
# the floor on the step time at batch 4, and at batch 256?

# %%
v5e = get_chip("TPU v5e")
quiz = dict(params=30e9, weight_bytes=1, kv_per_token=100e3, context=8192, chips=16)
quiz_steps = {}
for B in (4, 256):
    kv = B * quiz["context"] * quiz["kv_per_token"]
    weights = quiz["params"] * quiz["weight_bytes"]
    quiz_steps[B] = roofline.step_time(quiz["params"], weights, kv, B, v5e, quiz["chips"])
    flop_time = 2 * B * quiz["params"] / (quiz["chips"] * v5e.bf16_flops_per_s)
    load_time = weights / (quiz["chips"] * v5e.hbm_bytes_per_s)
    print(f"B={B:3d}: KV {fmt_bytes(kv)}, attention {fmt_seconds(kv / (16 * v5e.hbm_bytes_per_s))}"
          f", weight FLOPs {fmt_seconds(flop_time)}, weight load {fmt_seconds(load_time)}"
          f" -> step {fmt_seconds(quiz_steps[B])}")
    if B == 4:
        assert flop_time < load_time          # small batch: the weights are a load problem
        assert quiz_steps[4] == roofline.step_time_lower_bound(weights, kv, v5e, 16)
    else:
        assert flop_time > load_time          # large batch: the matmuls are compute-bound
kv_seq_quiz = quiz["context"] * quiz["kv_per_token"]

# %% tags=["hide-input"]
glue("ch3_quiz_kv_seq", fmt_bytes(kv_seq_quiz))
glue("ch3_quiz_4", fmt_seconds(quiz_steps[4]))
glue("ch3_quiz_256", fmt_seconds(quiz_steps[256]))
glue("ch3_quiz_ratio", fmt_ratio(quiz_steps[256] / quiz_steps[4]))
glue("ch3_quiz_tput_ratio", fmt_ratio((256 / quiz_steps[256]) / (4 / quiz_steps[4])));

# %% [markdown]
# Each sequence's cache holds {glue:text}`ch3_quiz_kv_seq`. At batch 4 the weight matmuls
# finish their arithmetic long before the weights have streamed in, so the floor is simply
# bytes over bandwidth: {glue:text}`ch3_quiz_4`. At batch 256 the matmuls are compute-bound,
# and the 256 caches add their own read time on top: {glue:text}`ch3_quiz_256`,
# {glue:text}`ch3_quiz_ratio` the latency for {glue:text}`ch3_quiz_tput_ratio` the throughput.
#
# ## Latency against throughput
#
# That is the trade every serving system makes. Small batches give each user fast steps but
# leave the chips' arithmetic idle; large batches use the chips well and make everybody wait.
# How many chips serve one copy of the model is the second knob: more chips divide the bytes
# each must read (lower latency) but add communication, and fewer chips have less memory for KV
# caches, which caps the batch. Charting every (chips, batch) setting by latency and by
# throughput per chip — the cost of a token — shows the *Pareto frontier*: the settings no other
# setting beats on both at once {cite:p}`pope2023esti`.
#
# We chart LLaMA-2 13B on TPU v5e slices of 1 to 128 chips with 2,048-token contexts. Chips
# share the model by tensor parallelism, so each step also pays two all-reduces per layer over
# the chips' interconnect: their bytes overlap with the computation, their per-message latency
# does not (the model of {cite:t}`chen2022arithmetic`, chapter 4). Settings whose weights and
# caches do not fit in the slice's memory are left out.

# %%
show_source(latency.tensor_parallel_step_time)

# %%
llama = get_preset("llama-2-13b")
S_chat = 2048
chip_counts = [1, 2, 4, 8, 16, 32, 64, 128]
batches = [2 ** i for i in range(11)]


def frontier_points(weight_bytes):
    """(latency s, tokens/s per chip, chips, batch) of every setting that fits in memory."""
    points = []
    for n in chip_counts:
        for B in batches:
            if not roofline.estimate_decode(llama, v5e, batch=B, context=S_chat, chips=n,
                                            weight_bytes=weight_bytes).fits:
                continue
            t = latency.tensor_parallel_step_time(llama, v5e, n, B, S_chat, weight_bytes).total_s
            points.append((t, B / t / n, n, B))
    return points


settings = {"bf16 weights": frontier_points(2), "int8 weights": frontier_points(1)}
fronts = {}
for name, pts in settings.items():
    lat, thr = [p[0] for p in pts], [p[1] for p in pts]
    fronts[name] = [pts[i] for i in roofline.pareto_frontier(lat, thr)]

bf16, int8 = fronts["bf16 weights"], fronts["int8 weights"]
# The fastest settings use the most chips; the cheapest use fewer, with big batches.
assert bf16[0][2] == max(chip_counts) and bf16[-1][2] < max(chip_counts)
assert bf16[-1][3] > bf16[0][3]
# No setting beats the two ceilings on throughput per chip: the FLOP roof C / 2P, and the
# KV roof W / (KV bytes per sequence), approached when the caches dominate every step.
kv_seq = S_chat * counts.kv_bytes_per_token(llama)
flop_roof = v5e.bf16_flops_per_s / (2 * counts.param_count(llama))
kv_roof = v5e.hbm_bytes_per_s / kv_seq
for pts in settings.values():
    assert max(p[1] for p in pts) <= min(flop_roof, kv_roof)
# int8 weights: a better frontier at low latency, but no better maximum throughput.
assert int8[0][0] < bf16[0][0]
assert abs(int8[-1][1] / bf16[-1][1] - 1) < 0.02

# %% tags=["hide-input"]
glue("ch3_front_fast", fmt_seconds(bf16[0][0]))
glue("ch3_front_fast_chips", str(bf16[0][2]))
glue("ch3_front_cheap_chips", str(bf16[-1][2]))
glue("ch3_front_cheap_batch", str(bf16[-1][3]))
glue("ch3_front_cheap_tput", fmt_rate(bf16[-1][1], "tokens/s"))
glue("ch3_kv_roof", fmt_rate(kv_roof, "tokens/s"))
glue("ch3_flop_roof", fmt_rate(flop_roof, "tokens/s"))
glue("ch3_int8_fast", fmt_seconds(int8[0][0]))

fig, ax = plt.subplots(figsize=(7, 4.5))
cmap = plt.get_cmap("viridis")
for k, n in enumerate(chip_counts):
    pts = [p for p in settings["bf16 weights"] if p[2] == n]
    ax.scatter([p[0] * 1e3 for p in pts], [p[1] for p in pts], s=14,
               color=cmap(k / (len(chip_counts) - 1)), label=f"{n} chips")
for name, style in (("bf16 weights", "-"), ("int8 weights", "--")):
    f = fronts[name]
    ax.plot([p[0] * 1e3 for p in f], [p[1] for p in f], style, color="black", lw=1.2,
            label=f"frontier, {name}")
ax.axhline(kv_roof, color="gray", lw=0.8, ls=":")
ax.annotate("KV roof", (0, kv_roof), xycoords=("axes fraction", "data"), xytext=(4, 3),
            textcoords="offset points", fontsize=8, color="gray")
ax.set_xscale("log")
ax.set_xlabel("latency per token (ms)")
ax.set_ylabel("throughput per chip (tokens/s)")
ax.set_title(f"{llama.name} on TPU v5e, context {S_chat:,}: every (chips, batch) that fits",
             fontsize=10)
ax.legend(fontsize=7, ncol=2)
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# Reading the frontier from left to right: the fastest setting uses all
# {glue:text}`ch3_front_fast_chips` chips at batch 1 ({glue:text}`ch3_front_fast` per token);
# moving right, batches grow and then chip counts shrink, until the cheapest setting serves
# batch {glue:text}`ch3_front_cheap_batch` on {glue:text}`ch3_front_cheap_chips` chips at
# {glue:text}`ch3_front_cheap_tput` per chip. Throughput per chip never passes
# {glue:text}`ch3_kv_roof`: with 2,048-token contexts every sequence brings its own cache to read
# at every step, and that ceiling sits far below the compute roof of
# {glue:text}`ch3_flop_roof`. Storing the weights in int8 moves the fast end of the frontier to
# {glue:text}`ch3_int8_fast` but leaves the maximum throughput where it was — the same pattern as
# the PaLM frontiers of {cite:t}`pope2023esti`. The caches are the problem; the rest of this
# chapter measures how big a problem.
#
# ## What uses the memory
#
# From here on we follow the scaling book and give every sequence an 8,192-token context.
#
# LLaMA-2 13B {cite:p}`touvron2023llama2` has these dimensions:

# %% tags=["hide-input"]
Markdown("| letter | meaning | LLaMA-2 13B |\n|---|---|---|\n" + "\n".join(
    f"| {k} | {m} | {getattr(llama, k):,} |" for k, m in
    [("L", "layers"), ("D", "model width"), ("F", "MLP width"), ("N", "query heads"),
     ("K", "key/value heads"), ("H", "head dimension"), ("V", "vocabulary")]))

# %% [markdown]
# Its parameters, counted by component from those letters (the same counts the model
# allocates; the library's tests check that to the byte):

# %%
parts = counts.param_counts(llama)
rows = [("MLP", "3·D·F·L", parts["mlp"]),
        ("attention", "(2·D·N·H + 2·D·K·H)·L", parts["attention"]),
        ("embedding and unembedding", "2·V·D", parts["embedding"] + parts["unembedding"]),
        ("norm gains", "(2L + 1)·D", parts["norms"])]
total = counts.param_count(llama)
assert sum(r[2] for r in rows) == total

# %% tags=["hide-input"]
Markdown("| component | formula | parameters |\n|---|---|---|\n"
         + "\n".join(f"| {a} | {b} | {fmt_count(c, 2)} |" for a, b, c in rows)
         + f"\n| **total** | | **{fmt_count(total, 2)}** |")
# %%
S = 8192
weights_bf16 = counts.param_bytes(llama, 2)
kv_8k = counts.kv_cache_bytes(llama, 1, S)
activations_8k = S * llama.D * 2          # one [T, D] bfloat16 activation for an 8k prefill
caches_to_exceed = int(np.ceil(weights_bf16 / kv_8k))
assert kv_8k == 2 * 2 * llama.H * llama.K * llama.L * S
assert 4 * kv_8k > weights_bf16 and caches_to_exceed == 4
assert activations_8k < 0.01 * weights_bf16

# %% tags=["hide-input"]
glue("ch3_total_params", fmt_count(total, 1))
glue("ch3_mlp_share", fmt_percent(parts["mlp"] / total))
glue("ch3_weights_bf16", fmt_bytes(weights_bf16))
glue("ch3_kv_8k", fmt_bytes(kv_8k))
glue("ch3_kv_per_token", fmt_bytes(counts.kv_bytes_per_token(llama)))
glue("ch3_activations", fmt_bytes(activations_8k, 0))
glue("ch3_caches_to_exceed", str(caches_to_exceed));

# %% [markdown]
# The MLPs hold {glue:text}`ch3_mlp_share` of the {glue:text}`ch3_total_params` parameters. In
# bfloat16 the weights take {glue:text}`ch3_weights_bf16`. Inference keeps no gradients and no
# optimizer state, and its activations are small: an 8,192-token prefill moves
# $[T, D]$ activations of {glue:text}`ch3_activations` from layer to layer (a fused attention
# kernel never writes the $T \times T$ score matrix; chapter 6). A long prompt can also be
# prefilled in chunks.
#
# What is new at inference time is the KV cache. For $T$ tokens it holds
#
# $$ \text{KV bytes} = 2 \cdot \text{bytes per element} \cdot H \cdot K \cdot L \cdot T, $$
#
# the 2 counting keys and values. LLaMA-2 13B stores {glue:text}`ch3_kv_per_token` per token,
# so one 8,192-token sequence needs {glue:text}`ch3_kv_8k`: {glue:text}`ch3_caches_to_exceed`
# such sequences need more memory than the weights. LLaMA-2 13B uses plain multi-head
# attention, $K = N$, the most expensive choice; chapter 5 is about the cheaper ones.
#
# ## LLaMA-2 13B on eight TPU v5e chips
#
# Now put the model on eight TPU v5e chips and ask what each batch size would cost, if every
# step ran at the roofline. The eight chips together have this much memory, bandwidth and
# arithmetic:

# %%
chips = 8
b_crit = roofline.critical_batch(v5e)
table_batches = [1, 8, 16, 32, 64, int(b_crit)]


def llama_table(cfg_kv, label):
    """Rows for each batch: KV bytes, total, fits, step time, tokens/s (weights of LLaMA-2 13B,
    KV cache of `cfg_kv`)."""
    rows = []
    for B in table_batches:
        kv = counts.kv_cache_bytes(cfg_kv, B, S)
        step = roofline.step_time(total, weights_bf16, kv, B, v5e, chips)
        lower = roofline.step_time_lower_bound(weights_bf16, kv, v5e, chips)
        rows.append(dict(B=B, kv=kv, total=weights_bf16 + kv,
                         fits=weights_bf16 + kv <= chips * v5e.hbm_bytes, step=step,
                         lower=lower, tput=roofline.tokens_per_s(B, step)))
    text = (f"**{label}**\n\n| batch | KV cache | weights + KV | fits in "
            f"{fmt_bytes(chips * v5e.hbm_bytes, 0)} | step time | tokens/s |\n"
            "|---:|---:|---:|:-:|---:|---:|\n")
    text += "\n".join(f"| {r['B']} | {fmt_bytes(r['kv'])} | {fmt_bytes(r['total'])} | "
                      f"{'yes' if r['fits'] else 'no'} | {fmt_seconds(r['step'], 2)} | "
                      f"{r['tput']:,.0f} |" for r in rows)
    return rows, text


mha_rows, mha_text = llama_table(llama, "LLaMA-2 13B (K = 40 KV heads), context 8,192")
# Up to B_crit the weight matmuls are memory-bound: the general step time is the lower bound.
assert all(np.isclose(r["step"], r["lower"], rtol=1e-12) for r in mha_rows)

# %% tags=["hide-input"]
glue("ch3_v5e_hbm", fmt_bytes(chips * v5e.hbm_bytes, 0))
glue("ch3_v5e_bw", fmt_rate(chips * v5e.hbm_bytes_per_s))
glue("ch3_v5e_flops", fmt_rate(chips * v5e.bf16_flops_per_s, "FLOP/s"))
glue("ch3_bcrit", f"{b_crit:.0f}")
Markdown(mha_text)

# %%
max_b = roofline.max_batch(llama, v5e, S, chips)
assert not mha_rows[2]["fits"] and mha_rows[1]["fits"]           # batch 16 does not fit
assert max_b == 15
tput = {r["B"]: r["tput"] for r in mha_rows}
step = {r["B"]: r["step"] for r in mha_rows}
# Diminishing returns: 8x the batch from 8 to 64 buys far less than 8x the throughput.
assert tput[64] / tput[8] < 1.5
kv_bcrit = counts.kv_cache_bytes(llama, int(b_crit), S)

# %% tags=["hide-input"]
glue("ch3_mha_max_batch", str(max_b))
glue("ch3_step_1", fmt_seconds(step[1], 2))
glue("ch3_tput_1", f"{tput[1]:,.0f}")
glue("ch3_tput_8", f"{tput[8]:,.0f}")
glue("ch3_tput_64", f"{tput[64]:,.0f}")
glue("ch3_batch_x", fmt_ratio(64 / 8, 0))
glue("ch3_tput_bcrit", f"{tput[int(b_crit)]:,.0f}")
glue("ch3_bcrit_int", str(int(b_crit)))
glue("ch3_kv_bcrit", fmt_bytes(kv_bcrit))
glue("ch3_kv_bcrit_x", fmt_ratio(kv_bcrit / (chips * v5e.hbm_bytes), 0));

# %% [markdown]
# The slice has {glue:text}`ch3_v5e_hbm` of memory, {glue:text}`ch3_v5e_bw` of bandwidth and
# {glue:text}`ch3_v5e_flops` of bfloat16 arithmetic. At batch 1 a step takes at least
# {glue:text}`ch3_step_1`, {glue:text}`ch3_tput_1` tokens per second. Larger batches raise the
# throughput — {glue:text}`ch3_tput_8` at batch 8 — but with sharply diminishing returns:
# {glue:text}`ch3_tput_64` at batch 64, {glue:text}`ch3_batch_x` the batch for much less than twice
# the tokens, because every added sequence adds its own 8,192-token cache to read. And only batch
# {glue:text}`ch3_mha_max_batch` and below fit at all: batch 16 already needs more memory than the
# slice has. Reaching the critical batch of {glue:text}`ch3_bcrit_int`, where the weight matmuls
# would finally keep the chips busy, would take {glue:text}`ch3_kv_bcrit` of cache,
# {glue:text}`ch3_kv_bcrit_x` the slice's memory — and would still give only
# {glue:text}`ch3_tput_bcrit` tokens per second.
#
# ### A five times smaller cache
#
# Suppose the same model — same weights, same step — but a KV cache {glue:text}`ch3_gqa_x`
# smaller:
# {glue:text}`ch3_gqa_K` key and value heads shared by the {glue:text}`ch3_gqa_N` query heads
# (grouped-query attention with $G =$ {glue:text}`ch3_gqa_G`, the kind of choice LLaMA-2 70B
# and LLaMA-3 made; chapter 5). We keep the weight bytes of the original to
# isolate the effect of the cache.

# %%
gqa = llama.replace(K=8, name="llama-2-13b, K=8")
assert counts.kv_bytes_per_token(llama) == 5 * counts.kv_bytes_per_token(gqa)
gqa_rows, gqa_text = llama_table(gqa, "The same with K = 8 KV heads (5× smaller cache)")

# %% tags=["hide-input"]
for letter in "KNG":
    glue(f"ch3_gqa_{letter}", str(getattr(gqa, letter)))
glue("ch3_gqa_x", fmt_ratio(counts.kv_bytes_per_token(llama) / counts.kv_bytes_per_token(gqa), 0))
Markdown(gqa_text)

# %%
gqa_tput = {r["B"]: r["tput"] for r in gqa_rows}
gqa_step = {r["B"]: r["step"] for r in gqa_rows}
gqa_fit = max(r["B"] for r in gqa_rows if r["fits"])
assert gqa_fit == 64 and not gqa_rows[-1]["fits"]
assert all(gqa_step[B] < step[B] and gqa_tput[B] > tput[B] for B in table_batches)
# Throughput keeps scaling much further: 64 vs 8 is now well over twice as much.
assert gqa_tput[64] / gqa_tput[8] > 2

# %% tags=["hide-input"]
glue("ch3_gqa_fit", str(gqa_fit))
glue("ch3_gqa_tput_64", f"{gqa_tput[64]:,.0f}")
glue("ch3_gqa_best_vs_mha_best", fmt_ratio(gqa_tput[64] / roofline.tokens_per_s(
    max_b, roofline.step_time(total, weights_bf16, counts.kv_cache_bytes(llama, max_b, S),
                              max_b, v5e, chips))))

bs = np.unique(np.geomspace(1, 256, 60).astype(int))
fig, ax = plt.subplots(figsize=(6.5, 4))
for cfg_kv, label in ((llama, "K = 40 (MHA)"), (gqa, "K = 8 (GQA, 5× smaller cache)")):
    t = [roofline.tokens_per_s(B, roofline.step_time(total, weights_bf16,
                                                     counts.kv_cache_bytes(cfg_kv, B, S), B,
                                                     v5e, chips)) for B in bs]
    fit = int((chips * v5e.hbm_bytes - weights_bf16) // (S * counts.kv_bytes_per_token(cfg_kv)))
    line, = ax.plot(bs, t, label=label)
    ax.plot(bs[bs <= fit], np.array(t)[bs <= fit], lw=3, color=line.get_color(), alpha=0.5)
    ax.axvline(fit, color=line.get_color(), ls=":", lw=1)
ax.set_xscale("log")
ax.set_xlabel("batch size B")
ax.set_ylabel("tokens/s (8 chips)")
ax.set_title("LLaMA-2 13B on 8 × TPU v5e, context 8,192 (thick: fits; dotted: largest batch)",
             fontsize=9)
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# Every batch size is faster and produces more tokens, and batches up to
# {glue:text}`ch3_gqa_fit` now fit: {glue:text}`ch3_gqa_tput_64` tokens per second at batch 64,
# {glue:text}`ch3_gqa_best_vs_mha_best` the best the original could fit. The returns still
# diminish, but the curve keeps climbing toward the critical batch instead of stopping at
# batch {glue:text}`ch3_mha_max_batch`.
#
# ## One command for all of it
#
# Everything in this chapter — memory, the step at each batch, the frontier — is what
# `inferbook estimate` computes, with more of the real system added: the collectives of the
# sharded layout on the chips' interconnect (chapters 8–10), the prefill and the time to the
# first token, quantized formats with their scales, sliding windows and mixtures of experts.
# [The estimator's fields](../book/estimate_reference.md) defines each number it prints. Here
# is the table above as the command line prints it:

# %%
import json
import shlex
import tempfile
from pathlib import Path

from IPython.display import Image, display

from inferbook.cli import main as inferbook_cli
from inferbook.model.presets_families import FAMILY_CONFIGS
from inferbook.perf.estimator import estimate
from inferbook.perf.pareto_plot import pareto_figure

sweep_batches = [1, 8, 15, 16, 32, 64]
argv = ["estimate", "--model", "llama-2-13b", "--hardware", "TPU v5e", "--chips", str(chips),
        "--batch", ",".join(map(str, sweep_batches)), "--context", str(S)]
print("$ inferbook " + " ".join(shlex.quote(a) for a in argv))
assert inferbook_cli(argv) == 0

# %%
cli_rows = [estimate(llama, v5e, batch=B, context=S, chips=chips) for B in sweep_batches]
by_batch = {r.batch: r for r in cli_rows}
for r in cli_rows:
    kv = counts.kv_cache_bytes(llama, r.batch, S)
    roof = roofline.step_time(total, weights_bf16, kv, r.batch, v5e, chips)
    # The chapter's step, plus the collectives: their bytes overlap, their latencies add.
    assert roof < r.step_time_s <= roof + r.comm_time_s
    assert r.fits == (weights_bf16 + kv <= chips * v5e.hbm_bytes)
assert cli_rows[0].max_batch == max_b and by_batch[15].fits and not by_batch[16].fits
comm_share = by_batch[1].comm_time_s / by_batch[1].step_time_s

# %% tags=["hide-input"]
glue("ch3_cli_comm_1", fmt_seconds(by_batch[1].comm_time_s))
glue("ch3_cli_comm_share", fmt_percent(comm_share))
glue("ch3_cli_layout", by_batch[1].layout)
glue("ch3_cli_ttft_1", fmt_seconds(by_batch[1].ttft_s))
glue("ch3_cli_ttft_15", fmt_seconds(by_batch[15].ttft_s))
glue("ch3_positions_13b", f"{llama.max_seq_len:,}")

# %% [markdown]
# The columns are this chapter's, with three new ones. The estimator warns (on stderr) that
# LLaMA-2 was trained on {glue:text}`ch3_positions_13b` positions — the scaling book's
# 8,192-token example asks for more than the model supports — and which batches do not fit.
# Its step times are a little longer than the table's: on eight chips the
# {glue:text}`ch3_cli_layout` layout (chapter 9) adds two all-reduces per layer, whose
# per-hop latencies cannot hide behind the work; at batch 1 they cost
# {glue:text}`ch3_cli_comm_1` per step, {glue:text}`ch3_cli_comm_share` of it. And it gives
# the time to the first token: prefilling one 8,192-token prompt takes
# {glue:text}`ch3_cli_ttft_1`, fifteen of them together {glue:text}`ch3_cli_ttft_15` —
# prefill is compute-bound, so its time grows with every prompt added.
#
# ### A model of today on eight H100s
#
# The same questions for Llama-3.1-70B {cite:p}`grattafiori2024llama3` on an 8-GPU H100
# board, with 8,192- and 32,768-token contexts. With {glue:text}`ch3_l70_K` KV heads for
# {glue:text}`ch3_l70_N` query heads, a token's cache is {glue:text}`ch3_l70_kv_frac` of a
# multi-head model's, so far larger batches fit:

# %%
h100 = get_chip("H100 SXM")
l70 = get_preset("llama-3.1-70b")
modern = [estimate(l70, h100, batch=B, context=ctx, prompt=2048, chips=8)
          for ctx in (8192, 32768) for B in (1, 4, 16, 64, 128, 256, 512)]
display(pareto_figure(modern))

# %% tags=["hide-input"]
glue("ch3_l70_K", str(l70.K))
glue("ch3_l70_N", str(l70.N))
glue("ch3_l70_kv_frac", f"1/{l70.N // l70.K}")

# %%
fit = {ctx: max(r.batch for r in modern if r.context == ctx and r.fits) for ctx in (8192, 32768)}
front = [r for r in modern if r.fits]
front = [front[i] for i in roofline.pareto_frontier([r.step_time_s for r in front],
                                                    [r.tokens_per_s_per_chip for r in front])]
assert fit[8192] > 2 * fit[32768]
assert all(a.tokens_per_s_per_chip < b.tokens_per_s_per_chip for a, b in zip(front, front[1:]))
fastest, cheapest = front[0], front[-1]
assert fastest.batch == 1 and cheapest.batch == fit[8192] and cheapest.context == 8192

# %% tags=["hide-input"]
glue("ch3_l70_fit_8k", str(fit[8192]))
glue("ch3_l70_fit_32k", str(fit[32768]))
glue("ch3_l70_max_8k", str(modern[0].max_batch))
glue("ch3_l70_max_32k", str(modern[7].max_batch))
glue("ch3_l70_fast", fmt_seconds(fastest.step_time_s))
glue("ch3_l70_fast_user", fmt_rate(fastest.tokens_per_s_per_user, "tokens/s"))
glue("ch3_l70_cheap_chip", fmt_rate(cheapest.tokens_per_s_per_chip, "tokens/s"))
glue("ch3_l70_cheap_step", fmt_seconds(cheapest.step_time_s))
glue("ch3_l70_layout", fastest.layout)
glue("ch3_l70_ctx_ratio", fmt_ratio(counts.kv_cache_bytes(l70, 1, 32768)
                                    / counts.kv_cache_bytes(l70, 1, 8192), 0))

# %% [markdown]
# Hollow points do not fit in the board's memory: at 8,192 tokens the largest batch is
# {glue:text}`ch3_l70_max_8k` (of those drawn, {glue:text}`ch3_l70_fit_8k`), at 32,768 only
# {glue:text}`ch3_l70_max_32k`. The frontier runs from batch 1, {glue:text}`ch3_l70_fast` per
# step ({glue:text}`ch3_l70_fast_user` for the one user), to batch
# {glue:text}`ch3_l70_fit_8k`, where each GPU produces {glue:text}`ch3_l70_cheap_chip` but
# every user waits {glue:text}`ch3_l70_cheap_step` per token. The longer context costs on both
# axes: every sequence's cache is {glue:text}`ch3_l70_ctx_ratio` larger, so fewer fit and each
# step reads more.
# (The {glue:text}`ch3_l70_layout` layout won on this shape; `--layout` picks one.)
#
# ### Estimating your own model
#
# To estimate a model of your own choosing, you need its `config.json`, the file that sits
# beside the weights on the Hugging Face hub (the page's *Files* tab, or
# `huggingface-cli download Qwen/Qwen3-30B-A3B config.json --local-dir qwen3`; no weights are
# needed). Below we write the keys of Qwen3-30B-A3B's published file, a mixture of
# {glue:text}`ch3_moe_E` experts of which each token uses {glue:text}`ch3_moe_k`; a downloaded
# file has more keys, which the estimator reads or ignores. Then one command sweeps the batch
# on one H100, the weights stored in fp8 with their scales, and draws the frontier:

# %%
folder = Path(tempfile.mkdtemp()) / "qwen3"
folder.mkdir()
(folder / "config.json").write_text(json.dumps(FAMILY_CONFIGS["qwen3-30b-a3b"], indent=1))
plot_path = folder / "pareto.png"
argv = ["estimate", "--config", str(folder / "config.json"), "--hardware", "H100 SXM",
        "--batch", "1,4,16,64,256,1024", "--context", "4096", "--prompt", "1024",
        "--weights", "fp8", "--plot", str(plot_path)]
print("$ inferbook " + " ".join(shlex.quote(a) for a in argv))
assert inferbook_cli(argv) == 0
Image(filename=str(plot_path))

# %%
qwen = get_preset("qwen3-30b-a3b")
moe_rows = {B: estimate(qwen, h100, batch=B, context=4096, prompt=1024, weights="fp8")
            for B in (1, 4, 16, 64, 256, 1024)}
one, many = moe_rows[1], moe_rows[256]
assert one.weight_bytes_read < 0.2 * one.param_bytes          # one token: 8 experts of 128
assert many.weight_bytes_read > 0.95 * many.param_bytes       # 256 tokens: nearly all of them
dense_bcrit = roofline.critical_batch(h100, one.weight_bytes)  # same bytes per weight
assert one.critical_batch > 5 * dense_bcrit

# %% tags=["hide-input"]
glue("ch3_moe_E", str(qwen.moe.E))
glue("ch3_moe_k", str(qwen.moe.k))
glue("ch3_moe_params", fmt_count(one.params))
glue("ch3_moe_active", fmt_count(one.active_params))
glue("ch3_moe_read_1", fmt_bytes(one.weight_bytes_read))
glue("ch3_moe_read_256", fmt_bytes(many.weight_bytes_read))
glue("ch3_moe_experts_16", f"{moe_rows[16].experts_touched:.0f}")
glue("ch3_moe_bcrit", f"{one.critical_batch:,.0f}")
glue("ch3_dense_bcrit", f"{dense_bcrit:.0f}")

# %% [markdown]
# Of its {glue:text}`ch3_moe_params` parameters a token uses {glue:text}`ch3_moe_active`, and
# a step at batch 1 reads only the experts its token was routed to,
# {glue:text}`ch3_moe_read_1` of weights. Each added sequence is routed to experts of its own:
# at batch 16 a layer already reads {glue:text}`ch3_moe_experts_16` experts on average, at
# batch 256 the step reads {glue:text}`ch3_moe_read_256`, nearly all of them
# ([the fields page](../book/estimate_reference.md) derives the expected count). So a mixture
# of experts stays memory-bound far longer than a dense model: its critical batch is
# {glue:text}`ch3_moe_bcrit` tokens against {glue:text}`ch3_dense_bcrit` for a dense model on
# the same GPU.
#
# ```{admonition} Takeaways
# - A decode step cannot be faster than (weights + every sequence's KV cache) / bandwidth; the
#   weight matmuls turn compute-bound only past the critical batch, attention never does.
# - Batch size and chip count move a deployment along a latency–throughput frontier. The
#   fastest settings use many chips and small batches; the cheapest use large batches on as few
#   chips as memory allows.
# - Past a few thousand tokens of context, the KV cache — not the weights — decides how large
#   a batch fits and how much throughput a chip can deliver. Shrinking it (chapter 5) pays off
#   in latency, throughput and maximum batch at once.
# - `inferbook estimate` puts all of this, plus communication, prefill and quantization, behind
#   one command that reads any model's `config.json`.
# ```
