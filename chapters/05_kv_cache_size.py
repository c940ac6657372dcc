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
# # How big is the KV cache, and how to shrink it
#
# Chapter 1 bought speed with memory: the KV cache stores every layer's keys and values so that
# no decode step recomputes them. This chapter asks what that memory costs for real models,
# what it does to the number of requests a chip can serve, and then goes through every way
# people have found to make it smaller — fewer key/value heads, local attention, sharing a cache
# between layers, fewer bits per number, forgetting unimportant tokens, wasting less of the
# memory that is allocated, and finding more memory elsewhere. Each technique is implemented in
# the library, checked against a reference, and measured. The chapter follows the second half
# of Pierre Lienhart's article on KV caching {cite:p}`lienhart2023kvcache` and the "tricks"
# section of the scaling book's inference chapter {cite:p}`austin2025scaling`.

# %%
import inspect
from functools import partial

import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.memory import kv_evict, kv_quant, kv_share, kv_window
from inferbook.model import decode, decoder, kvcache
from inferbook.model.attention import attention_mask, attention_reference
from inferbook.model.config import ModelConfig
from inferbook.model.presets import get_preset
from inferbook.perf import compiled, counts, latency, phase_time, roofline, timing
from inferbook.perf.hardware import CHIPS, get_chip
from inferbook.serving import memory_sim

print(info.describe())
DEVICE = timing.device_name()
BF16 = counts.dtype_bytes("bfloat16")

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_flops,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)

# %% [markdown]
# ## Counting the bytes
#
# For every token of every sequence, each of the $L$ layers stores one key vector and one value
# vector of $H$ numbers for each of its KV heads. With $p$ bytes per number, a batch of $B$
# sequences of $S$ tokens holds
#
# $$\text{KV bytes} = 2 \cdot B \cdot S \cdot L \cdot K \cdot H \cdot p .$$
#
# In the original multi-head attention every query head has its own key/value head, $K = N$,
# and usually $N H = D$, so the formula is often written $2 B S L D p$. We keep $K$ and $H$
# apart: the query heads never enter the cache, and models with $K < N$ — grouped-query
# attention, below — store $G = N/K$ times less. The estimator's formula, and the library's
# cache measured against it:

# %%
show_source(counts.kv_bytes_per_token)

# %%
tiny = get_preset("tiny")
assert kvcache.cache_bytes(kvcache.init_cache(tiny, 3, 100)) == \
    counts.kv_cache_bytes(tiny, 3, 100, 4)          # float32: 4 bytes per number

# %% [markdown]
# ## Popular models
#
# Here is the formula applied to the models of Lienhart's table and a few later ones, their
# sizes taken from the library's presets (each preset cites its config). Everything is in
# bfloat16, two bytes per number. The last column is the number of cached tokens whose keys and
# values weigh as much as the model's weights.

# %%
table_models = ["llama-2-7b", "llama-2-13b", "llama-2-70b", "opt-13b", "opt-30b", "opt-66b",
                "mpt-7b", "mpt-30b", "bloom-176b", "falcon-7b", "falcon-40b", "mistral-7b",
                "llama-3-8b", "llama-3-70b"]
rows = []
for name in table_models:
    c = get_preset(name)
    per_token = counts.kv_bytes_per_token(c, BF16)
    weights = counts.param_bytes(c, BF16)
    rows.append((c, per_token, weights, weights / per_token))

# %% tags=["hide-input"]
Markdown("| model | L | N | K | H | attention | KV per token | weights | tokens = weights |\n"
         "|---|---:|---:|---:|---:|---|---:|---:|---:|\n" + "\n".join(
             f"| {c.name} | {c.L} | {c.N} | {c.K} | {c.H} | {c.attention_kind} | "
             f"{fmt_bytes(t, 2)} | {fmt_bytes(w)} | {fmt_count(round(n))} |"
             for c, t, w, n in rows))
# %%
kv = {c.name: t for c, t, _, _ in rows}
l7 = get_preset("llama-2-7b")
l7_token, l7_weights = kv["llama-2-7b"], counts.param_bytes(l7, BF16)
l7_equal = l7_weights / l7_token
# Every multi-head model of 7B parameters or more stores at least half a megabyte per token ...
assert all(t >= 0.5e6 for c, t, _, _ in rows if c.attention_kind == "MHA")
# ... while grouped-query LLaMA-2 70B stores less per token than multi-head LLaMA-2 13B.
assert kv["llama-2-70b"] < kv["llama-2-13b"] / 2
l70_cfg = get_preset("llama-2-70b")
assert get_preset("falcon-7b").K == 1

# %% tags=["hide-input"]
glue("ch5_l7_token", fmt_bytes(l7_token, 2))
glue("ch5_bloom_token", fmt_bytes(kv["bloom-176b"], 2))
glue("ch5_l7_weights", fmt_bytes(l7_weights))
glue("ch5_l7_equal", fmt_count(round(l7_equal)))
glue("ch5_l7_equal_512", str(int(l7_equal // 512)))
glue("ch5_l70_token", fmt_bytes(kv["llama-2-70b"], 2))
glue("ch5_l13_token", fmt_bytes(kv["llama-2-13b"], 2))
glue("ch5_falcon7_token", fmt_bytes(kv["falcon-7b"], 2))
glue("ch5_l70_K", str(l70_cfg.K)); glue("ch5_l70_N", str(l70_cfg.N))
glue("ch5_mistral_W", f"{get_preset('mistral-7b').window:,}")

# %% [markdown]
# LLaMA-2 7B stores {glue:text}`ch5_l7_token` per token, BLOOM-176B {glue:text}`ch5_bloom_token`.
# The 7B model's weights take {glue:text}`ch5_l7_weights`, the same memory as the cache of
# {glue:text}`ch5_l7_equal` tokens — for instance {glue:text}`ch5_l7_equal_512` sequences of
# 512 tokens, a modest batch. The cache is not a detail next to the weights; at serving batch
# sizes it is the larger of the two.
#
# The table also shows what later models did about it. LLaMA-2 70B stores
# {glue:text}`ch5_l70_token` per token, less than the {glue:text}`ch5_l13_token` of LLaMA-2 13B,
# because it has {glue:text}`ch5_l70_K` KV heads for {glue:text}`ch5_l70_N` query heads;
# Falcon-7B, with a single KV head, stores
# {glue:text}`ch5_falcon7_token`.
#
# ### Today's families
#
# The models served today push the same lever further, and add two more. Gemma-2 and Phi-3
# give some or all layers a sliding window, so their cache per token shrinks as the context
# outgrows the window (the sliding-window section below); DeepSeek's latent attention caches
# one compressed vector per token and layer instead of keys and values per head. Mixtures of
# experts (Mixtral, Qwen3-30B-A3B, DeepSeek) change the weights, not the cache. The same
# formula, read from each model's published config (the presets cite them), in bfloat16:

# %%
family_models = ["llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
                 "qwen2.5-7b", "qwen3-8b", "qwen3-30b-a3b", "mixtral-8x7b", "gemma-2-9b",
                 "phi-3-mini", "deepseek-v2-lite", "deepseek-v3"]
fam = {}
for name in family_models:
    c = get_preset(name)
    full = counts.kv_bytes_per_token(c, BF16)
    at_context = counts.kv_cache_bytes(c, 1, c.max_seq_len, BF16) / c.max_seq_len
    cached = (f"latent {c.mla.R_kv} + rotary key {c.mla.H_rope}" if c.mla is not None
              else f"K = {c.K} of N = {c.N} heads of H = {c.H}")
    windows = sum(w is not None for w in c.windows)
    fam[name] = dict(cfg=c, full=full, at_context=at_context, cached=cached, windows=windows,
                     params=counts.param_count(c))

# %% tags=["hide-input"]
Markdown("| model | parameters | what a layer caches per token | windowed layers | KV per token "
         "| per token over its whole context |\n|---|---:|---|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {fmt_count(r['params'])} | {r['cached']} | {r['windows']} of "
             f"{r['cfg'].L} | {fmt_bytes(r['full'], 1)} | {fmt_bytes(r['at_context'], 1)} "
             f"({fmt_count(r['cfg'].max_seq_len)} tokens) |" for n, r in fam.items()))
# %%
ds3, l405 = fam["deepseek-v3"], fam["llama-3.1-405b"]
assert ds3["params"] > l405["params"] and ds3["full"] < l405["full"] / 5   # latent attention
assert fam["mixtral-8x7b"]["full"] == counts.kv_bytes_per_token(get_preset("mistral-7b"))
gemma, phi = fam["gemma-2-9b"], fam["phi-3-mini"]
assert gemma["at_context"] < gemma["full"] and phi["at_context"] < phi["full"] / 1.9
assert phi["full"] > fam["llama-3.1-8b"]["full"]          # multi-head ...
assert phi["params"] < fam["llama-3.1-8b"]["params"] / 2  # ... with less than half the weights
assert 2 * gemma["windows"] == gemma["cfg"].L             # Gemma-2: every other layer slides

# %% tags=["hide-input"]
glue("ch5_ds3_latent", str(ds3["cfg"].mla.R_kv))
glue("ch5_gemma_window", f"{gemma['cfg'].window:,}")
glue("ch5_ds3_token", fmt_bytes(ds3["full"], 1))
glue("ch5_l405_token", fmt_bytes(l405["full"], 1))
glue("ch5_ds3_vs_l405", fmt_ratio(l405["full"] / ds3["full"]))
glue("ch5_gemma_token", fmt_bytes(gemma["full"], 1))
glue("ch5_gemma_ctx", fmt_bytes(gemma["at_context"], 1))
glue("ch5_phi_token", fmt_bytes(phi["full"], 1))
glue("ch5_l31_8b_token", fmt_bytes(fam["llama-3.1-8b"]["full"], 1))

# %% [markdown]
# DeepSeek-V3, the largest model in the table, stores {glue:text}`ch5_ds3_token` per token and
# Llama-3.1-405B {glue:text}`ch5_l405_token`, {glue:text}`ch5_ds3_vs_l405` as much, because
# DeepSeek's layers cache a latent of {glue:text}`ch5_ds3_latent` numbers instead of keys and values
# per head. Gemma-2-9B stores {glue:text}`ch5_gemma_token` per token while every layer still
# holds it, but every other layer keeps only a {glue:text}`ch5_gemma_window`-token window, so
# over its whole context a token costs {glue:text}`ch5_gemma_ctx`. Phi-3-mini, multi-head with
# less than half the parameters of Llama-3.1-8B, stores {glue:text}`ch5_phi_token` per token to
# Llama's {glue:text}`ch5_l31_8b_token`.
#
# ## What fits on a chip
#
# Whatever memory the weights leave is all the cache can have. For LLaMA-2 7B in bfloat16 on
# common accelerators, and for two 7–8B models with grouped-query attention:

# %%
chip_names = ["A10", "L4", "A100 40GB", "A100 80GB", "H100 SXM", "TPU v5e"]
cap_models = [l7, get_preset("mistral-7b"), get_preset("llama-3-8b")]
capacity = {(m.name, ch): latency.kv_capacity_tokens(m, get_chip(ch), 1)
            for m in cap_models for ch in chip_names}

# %% tags=["hide-input"]
Markdown("| chip | memory | " + " | ".join(f"{m.name}: tokens" for m in cap_models)
         + " | llama-2-7b: sequences of 4,096 |\n|---|---:|" + "---:|" * (len(cap_models) + 1)
         + "\n" + "\n".join(
             f"| {ch} | {fmt_bytes(get_chip(ch).hbm_bytes, 0)} | "
             + " | ".join(fmt_count(capacity[m.name, ch]) for m in cap_models)
             + f" | {roofline.max_batch(l7, get_chip(ch), 4096)} |" for ch in chip_names))
# %%
a10 = get_chip("A10")
a10_free = a10.hbm_bytes - l7_weights
assert capacity["llama-2-7b", "A10"] == int(a10_free // l7_token)
assert roofline.max_batch(l7, a10, 4096) < 10                   # fewer than ten long requests
assert capacity["llama-3-8b", "A10"] > 3 * capacity["llama-2-7b", "A10"]
l3_8b = get_preset("llama-3-8b")      # slightly larger, a quarter of the KV heads:
assert counts.param_count(l3_8b) > counts.param_count(l7) and 4 * l3_8b.K == l7.K

# %% tags=["hide-input"]
glue("ch5_a10_free", fmt_bytes(a10_free))
glue("ch5_a10_tokens", fmt_count(capacity["llama-2-7b", "A10"]))
glue("ch5_a10_batch4k", str(roofline.max_batch(l7, a10, 4096)))
glue("ch5_v5e_tokens", fmt_count(capacity["llama-2-7b", "TPU v5e"]))
glue("ch5_a10_l3_tokens", fmt_count(capacity["llama-3-8b", "A10"]))
glue("ch5_v5e_hbm", fmt_bytes(get_chip("TPU v5e").hbm_bytes, 0))

# %% [markdown]
# On an A10, LLaMA-2 7B leaves {glue:text}`ch5_a10_free` for the cache: room for
# {glue:text}`ch5_a10_tokens` tokens in total, prompts included — just
# {glue:text}`ch5_a10_batch4k` requests of 4,096 tokens at once. A TPU v5e, with
# {glue:text}`ch5_v5e_hbm` of memory, holds the weights with room for only
# {glue:text}`ch5_v5e_tokens` tokens. LLaMA-3 8B, a slightly larger
# model with a quarter of the KV heads, fits {glue:text}`ch5_a10_l3_tokens` tokens on the same
# A10. Every request served at once needs its own cache, so this number caps the batch size, and
# with it throughput (chapter 3). The same bytes are also read at every decode step, so a
# smaller cache is a faster step as well: shrinking the cache helps capacity, latency and
# throughput at once.
#
# ### Why input tokens are billed
#
# API providers charge for prompt tokens, not only for generated ones. The numbers say why:
# before a single output token exists, prefill has pushed every prompt token through the model
# and left its keys and values in memory for the rest of the request. For a 1,000-token prompt
# to LLaMA-2 7B:

# %%
prompt = 1000
prompt_kv = counts.kv_cache_bytes(l7, 1, prompt, BF16)
prompt_flops = counts.forward_flops(l7, 1, prompt, logits_for=1)
per_token_flops = counts.flops_per_token(l7)
# The prompt's FLOPs in their parts: the attention and MLP weights at every position, the
# attention products over the full prompt × prompt square (what a dense kernel computes,
# causal mask or not), the unembedding at the last position only.
parts = counts.param_counts(l7)
prompt_weight_flops = prompt * 2 * (parts["attention"] + parts["mlp"])
prompt_attn_flops = counts.attention_flops(l7, 1, prompt, prompt)
assert prompt_flops == prompt_weight_flops + prompt_attn_flops + 2 * l7.D * l7.V
a100 = get_chip("A100 80GB")
assert abs(prompt_flops / (prompt * per_token_flops) - 1) < 0.1    # ≈ 2·P FLOPs per token

# %% tags=["hide-input"]
glue("ch5_prompt_kv", fmt_bytes(prompt_kv))
glue("ch5_prompt_flops", fmt_flops(prompt_flops))
glue("ch5_token_flops", fmt_flops(per_token_flops))
glue("ch5_prompt_weight_flops", fmt_flops(prompt_weight_flops))
glue("ch5_prompt_attn_flops", fmt_flops(prompt_attn_flops))
glue("ch5_prompt_a100", fmt_seconds(prompt_flops / a100.bf16_flops_per_s))
glue("ch5_prompt_share", fmt_percent(prompt_kv / (a100.hbm_bytes - l7_weights), 1))

# %% [markdown]
# About {glue:text}`ch5_token_flops` per token (twice the parameters that multiply). The
# prompt's tokens do {glue:text}`ch5_prompt_weight_flops` in the attention and MLP weights (the
# unembedding runs at the last position only), and the attention products add
# {glue:text}`ch5_prompt_attn_flops` — every query against every prompt key, the full square a
# dense kernel computes though the causal mask discards half of it: {glue:text}`ch5_prompt_flops`
# in all, {glue:text}`ch5_prompt_a100` of an A100's peak arithmetic — and
# {glue:text}`ch5_prompt_kv` of cache, held until the request ends:
# {glue:text}`ch5_prompt_share` of what an 80 GB A100 has left after the weights. Memory held is
# memory another request cannot use.
#
# ## The levers
#
# Each factor of $2 B S L K H p$ is a way to shrink the cache, and each has been tried:
#
# - **$B$**, the batch: smaller batches use less memory, but the batch is what makes serving
#   cheap (chapter 3). Not a lever we want to pull.
# - **$S$**, the tokens kept per sequence: local attention keeps only a window; eviction keeps a
#   budget of important tokens.
# - **$L$**, the layers: a smaller model, or layers that *share* one cache.
# - **$K$**, the KV heads: multi-query and grouped-query attention.
# - **$H$**, the head dimension: fixed by the model family; nothing to gain without another model.
# - **$p$**, the bytes per number: quantize the cache.
#
# Two more levers are not in the formula: waste less of the memory that is allocated (paging),
# and bring more memory (offloading, more devices). We take them in turn.
#
# ## Fewer KV heads: MQA and GQA
#
# The query heads never enter the cache. Multi-query attention (MQA) {cite:p}`shazeer2019mqa`
# keeps all $N$ query heads but gives them a single key/value head; grouped-query attention
# (GQA) {cite:p}`ainslie2023gqa` is the middle ground, $K$ KV heads each shared by a group of
# $G = N/K$ query heads. Multi-head attention is GQA with $K = N$, MQA is GQA with $K = 1$. The
# cache shrinks by $G$, and the scaling book notes that quality suffers little. The library's
# attention has handled it from the start: it views the $N$ query heads as $K$ groups of $G$
# and never copies a key. For LLaMA-2 70B's shape:

# %%
l70 = get_preset("llama-2-70b")
h100 = get_chip("H100 SXM")
gqa_rows = []
for K in (l70.N, l70.K, 1):
    c = l70.replace(K=K)
    gqa_rows.append((K, c.attention_kind, counts.kv_bytes_per_token(c, BF16),
                     roofline.max_batch(c, h100, 4096, chips=8)))
assert gqa_rows[0][2] == 8 * gqa_rows[1][2] == 64 * gqa_rows[2][2]
assert gqa_rows[1][3] > 7 * gqa_rows[0][3]

# %% tags=["hide-input"]
glue("ch5_gqa_batch_mha", str(gqa_rows[0][3])); glue("ch5_gqa_batch_gqa", str(gqa_rows[1][3]))
Markdown("| KV heads K | kind | KV per token | sequences of 4,096 on 8 H100s |\n"
         "|---:|---|---:|---:|\n" + "\n".join(
             f"| {K} | {kind} | {fmt_bytes(t)} | {b} |" for K, kind, t, b in gqa_rows))

# %% [markdown]
# With {glue:text}`ch5_l70_N` KV heads (one per query head), eight H100s hold
# {glue:text}`ch5_gqa_batch_mha` sequences of 4,096 tokens next to the weights; with the
# {glue:text}`ch5_l70_K` heads LLaMA-2 70B actually has, {glue:text}`ch5_gqa_batch_gqa`.
#
# Fewer bytes are also fewer bytes to *read*. We measure one decode step of the library's model
# on this device, in a configuration where the cache dominates the traffic — one layer of
# width 256 with 16 query heads of 64, four sequences of 4,096 cached tokens, float32 — with
# $K$ = 16, 4 and 1 KV heads:

# %%
att = ModelConfig(L=1, D=256, F=512, N=16, K=16, H=64, V=512, max_seq_len=8192,
                  name="attention-heavy")
B_att, S_att = 4, 4096
steppers = {K: timing.decode_step_timer(decoder.init_params(att.replace(K=K)), att.replace(K=K),
                                       B_att, S_att) for K in (16, 4, 1)}
# Two rounds, alternating the variants, so that other activity on the machine hits all alike;
# each variant's time is its fastest step, the one least disturbed by anything else.
gqa_rounds = {K: [timing.time_fn(f, repeats=4).min_s] for K, f in steppers.items()}
for _ in range(1):
    for K, f in steppers.items():
        gqa_rounds[K].append(timing.time_fn(f, repeats=4, warmup=0).min_s)
gqa_time = {K: min(ts) for K, ts in gqa_rounds.items()}
gqa_bytes = {K: counts.kv_cache_bytes(att.replace(K=K), B_att, S_att, 4) for K in gqa_time}
weights_att = counts.param_bytes(att, 4)
assert gqa_bytes[16] > 10 * weights_att                 # the cache dominates the traffic

# %% tags=["hide-input"]
expect_measured(gqa_time[1] < 0.7 * gqa_time[16] and gqa_time[1] < gqa_time[4],
                "fewer KV heads make a cache-bound decode step faster",
                expected="K = 1 under 70% of K = 16's time, and faster than K = 4",
                measured=", ".join(f"K = {K}: {fmt_seconds(t)}" for K, t in gqa_time.items()))
for K in gqa_time:
    print(f"K={K:2d}: cache {fmt_bytes(gqa_bytes[K]):>9s}  step {fmt_seconds(gqa_time[K])}"
          f"  ({DEVICE})")
glue("ch5_gqa_mha_time", fmt_seconds(gqa_time[16]))
glue("ch5_gqa_mqa_time", fmt_seconds(gqa_time[1]))
glue("ch5_gqa_speedup", fmt_ratio(gqa_time[16] / gqa_time[1]))
glue("ch5_device", DEVICE)

fig, ax = plt.subplots(figsize=(6, 3.6))
ax.plot([gqa_bytes[K] / 1e6 for K in gqa_time], [gqa_time[K] * 1e3 for K in gqa_time], "o-")
for K in gqa_time:
    ax.annotate(f"K={K}", (gqa_bytes[K] / 1e6, gqa_time[K] * 1e3), textcoords="offset points",
                xytext=(5, -12))
ax.set_xlabel("KV cache read per step (MB)")
ax.set_ylabel("decode step (ms)")
ax.set_title(f"Decode step against KV heads, measured on {DEVICE}", fontsize=9)
ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# Multi-head attention takes {glue:text}`ch5_gqa_mha_time` per step, multi-query
# {glue:text}`ch5_gqa_mqa_time`: {glue:text}`ch5_gqa_speedup` faster, on
# {glue:text}`ch5_device`. Step time falls with the bytes of cache read, as a memory-bound step
# should (chapter 2), though not in proportion: the step has fixed costs, and with $G$ query
# heads sharing each key the attention products become small matrix products, which a CPU in
# particular runs well below its bandwidth. That sharing is the other effect the scaling book
# points out: attention now does $G$ times more arithmetic per byte it reads.
#
# ## A window instead of the whole past
#
# In **local** (sliding-window) attention a token attends only to the $W$ tokens before it.
# Mistral 7B {cite:p}`jiang2023mistral` does this in every layer with $W =$
# {glue:text}`ch5_mistral_W`. Since no query
# will ever look further back, the cache never needs more than $W$ slots per layer: slot
# $t \bmod W$ holds position $t$, and each new token overwrites the one that just fell out of
# the window — a ring buffer. Models that mix a few **global** layers (full attention) with
# many local ones {cite:p}`gemmateam2024gemma2,characterai2024inference` keep long-range
# information and most of the savings. The library's `kv_window` module implements the ring
# and the mixed pattern; its attention masks each slot by the position it holds:

# %%
show_source(kv_window.slot_positions)

# %% [markdown]
# We check it on a tiny model with one local layer (window 8) and one global layer. A
# 36-token sequence goes in three chunks of 12: the first fills the ring (and wraps around it),
# the next two attend to it. Every logit must equal a forward pass without a cache that masks
# each layer with its window — and the local layer's cache must hold 8 slots.

# %%
w_cfg = tiny
windows = kv_window.layer_windows(w_cfg.L, 8, local_per_global=1)
w_params = decoder.init_params(w_cfg, seed=1)
seq = jax.random.randint(jax.random.key(0), (1, 36), 0, w_cfg.V)
ring = kv_window.init_cache(w_cfg, windows, 1, 36)
cached = []
for start in (0, 12, 24):
    logits, new = kv_window.extend(w_params, w_cfg, windows, seq[:, start:start + 12], ring)
    ring = kv_window.append(ring, windows, *new)
    cached.append(logits[0])
reference = kv_window.forward_reference(w_params, w_cfg, windows, seq)[0]
window_err = float(jnp.max(jnp.abs(jnp.concatenate(cached) - reference)))
assert window_err < 1e-4, window_err
assert [k.shape[2] for k in ring.k] == [8, 36]

# %% tags=["hide-input"]
glue("ch5_window_err", f"{window_err:.1e}")
print(windows, [k.shape[2] for k in ring.k], f"largest logit difference {window_err:.1e}")

# %% [markdown]
# The cached logits match the masked reference to {glue:text}`ch5_window_err`, and the local
# layers never hold more than their window. What the window saves grows with the context. For a
# model shaped like LLaMA-3 8B, per sequence, with all layers global, with a window of 4,096 in
# every layer (Mistral's choice), and with five local layers of window 1,024 per global one (the
# ratio of Gemma 3):

# %%
l3 = get_preset("llama-3-8b")
patterns = {"all global": (None,) * l3.L,
            "all local, W = 4,096": kv_window.layer_windows(l3.L, 4096),
            "5 local (W = 1,024) : 1 global": kv_window.layer_windows(l3.L, 1024, 5)}
ctx = 32768
full_32k = kv_window.kv_bytes_per_sequence(l3, patterns["all global"], ctx, BF16)
local_32k = kv_window.kv_bytes_per_sequence(l3, patterns["all local, W = 4,096"], ctx, BF16)
mixed_32k = kv_window.kv_bytes_per_sequence(l3, patterns["5 local (W = 1,024) : 1 global"], ctx,
                                            BF16)
assert full_32k == counts.kv_cache_bytes(l3, 1, ctx, BF16)
assert local_32k == full_32k / 8 and mixed_32k < full_32k / 4
assert len({kv_window.kv_bytes_per_sequence(l3, w, 1024) for w in patterns.values()}) == 1

# %% tags=["hide-input"]
contexts = np.geomspace(512, 131072, 30).astype(int)
fig, ax = plt.subplots(figsize=(6, 3.6))
for label, w in patterns.items():
    ax.loglog(contexts, [kv_window.kv_bytes_per_sequence(l3, w, int(s), BF16) / 1e9
                         for s in contexts], label=label)
ax.set_xlabel("tokens in the sequence")
ax.set_ylabel("KV cache per sequence (GB, bfloat16)")
ax.set_title("llama-3-8b shape: where local attention pays")
ax.legend(); ax.grid(alpha=0.3, which="both")
plt.show()
glue("ch5_w_full", fmt_bytes(full_32k)); glue("ch5_w_local", fmt_bytes(local_32k))
glue("ch5_w_mixed", fmt_bytes(mixed_32k)); glue("ch5_w_mixed_x", fmt_ratio(full_32k / mixed_32k))

# %% [markdown]
# At 32,768 tokens a full cache holds {glue:text}`ch5_w_full` per sequence, an all-local one
# {glue:text}`ch5_w_local`, and the 5:1 mix {glue:text}`ch5_w_mixed` —
# {glue:text}`ch5_w_mixed_x` less, with every sixth layer still seeing the whole context. Below
# the window there is no saving at all: local attention pays only for long sequences.
#
# ## One cache for several layers
#
# A model can be trained so that a few adjacent layers use the same keys and values
# {cite:p}`brandon2024cla`: the first layer of each group computes and caches them, the others
# attend to that cache with their own queries. Character.AI combines this with local layers
# {cite:p}`characterai2024inference`. The cache shrinks by the group size. The scaling book
# adds a caveat: the shared cache is still read by every layer that uses it, so a decode step
# reads as many bytes as before and need not get faster. `kv_share` implements the pattern (its
# tests check cached decoding against recomputation); here we count, from XLA's analysis of the
# compiled decode step, what a step holds and what it reads, for pairs of layers sharing a
# cache in the attention-heavy configuration:

# %%
att4 = att.replace(L=2)
p4 = decoder.init_params(att4)
share = {"own cache per layer": kv_share.share_adjacent(2, 1),
         "pairs share a cache": kv_share.share_adjacent(2, 2)}
held, read = {}, {}
for label, src in share.items():
    cache = kv_share.init_cache(att4, src, B_att, 1024)
    held[label] = kvcache.cache_bytes(cache)
    read[label] = compiled.compiled_cost(kv_share.extend, p4, att4, src,
                                      jnp.zeros((B_att, 1), jnp.int32), cache)["bytes_accessed"]
    print(f"{label:22s} holds {fmt_bytes(held[label]):>9s}, step reads {fmt_bytes(read[label])}")
own, pair = share
assert held[pair] * 2 == held[own]
assert read[pair] > 0.9 * read[own]           # the bytes read per step hardly move

# %% tags=["hide-input"]
glue("ch5_share_held", fmt_bytes(held[pair])); glue("ch5_share_held_own", fmt_bytes(held[own]))
glue("ch5_share_read", fmt_bytes(read[pair])); glue("ch5_share_read_own", fmt_bytes(read[own]))

# %% [markdown]
# Sharing halves the memory ({glue:text}`ch5_share_held` instead of
# {glue:text}`ch5_share_held_own`) but a step still reads {glue:text}`ch5_share_read` against
# {glue:text}`ch5_share_read_own`: capacity doubles, but the bytes a step reads, which set the
# time of a memory-bound step, stay where they were. (A kernel that served both layers of a pair
# from one read could change that, but the two layers run one after the other with an MLP
# between them.)
#
# ## Fewer bytes per number: an int8 cache
#
# Weight-only quantization (GPTQ, AWQ) leaves the cache alone; methods that quantize activations
# too (LLM.int8() {cite:p}`dettmers2022llmint8`, SmoothQuant {cite:p}`xiao2023smoothquant`)
# produce a quantized cache as a side effect, but a decode step is memory-bound, so faster
# int8 arithmetic buys little. What helps is storing the cache in 8 bits and converting back when
# reading it — TensorRT-LLM and vLLM do this with int8 or fp8. `kv_quant` gives each key and
# value vector its own scale (its largest magnitude over 127), so no calibration is needed:

# %%
show_source(kv_quant.quantize)

# %% [markdown]
# Rounding moves each element by at most half a step, which bounds how far an attention output
# can move (the derivation is in `kv_quant.attention_error_bound`). We measure the error on the
# library's own keys, values and queries — the second layer of the `tiny` preset over a
# 256-token sequence — and compare it with the bound:

# %%
qm = tiny
qm_params = decoder.init_params(qm, seed=0)


@jax.jit
def capture(tokens_BT):
    """Queries, keys and values of every layer from a forward pass without a cache."""
    B, T = tokens_BT.shape
    pos = jnp.broadcast_to(jnp.arange(T), (B, T))
    mask = attention_mask(pos, pos[0], jnp.full((B,), T))
    seen = []

    def attend(i, q, k, v):
        seen.append((q, k.swapaxes(1, 2), v.swapaxes(1, 2)))
        return attention_reference(q, k.swapaxes(1, 2), v.swapaxes(1, 2), mask)[0]

    decoder.transformer(qm_params, qm, tokens_BT, pos, attend)
    return seen, mask


T_q = 256
qkv, causal = capture(jax.random.randint(jax.random.key(2), (1, T_q), 0, qm.V))
q, k, v = qkv[1]


@jax.jit
def int8_attention_error(q, k, v, mask):
    """Largest error per output of attention over the int8 cache, and its a-priori bound."""
    (kq, ks), (vq, vs) = kv_quant.quantize(k), kv_quant.quantize(v)
    T = q.shape[1]
    approx = kv_quant.attend_per_head(q, kq, vq, ks, vs, jnp.arange(T)[None], jnp.array([T]))[0]
    exact = attention_reference(q, k, v, mask)[0]
    return (jnp.abs(approx - exact).max(-1), kv_quant.attention_error_bound(q, k, v, mask),
            jnp.linalg.norm(approx - exact) / jnp.linalg.norm(exact))


err, bound, rel = int8_attention_error(q, k, v, causal)
assert bool(jnp.all(err <= bound + 1e-6))
rel = float(rel)

# %% tags=["hide-input"]
glue("ch5_q_err", f"{float(err.max()):.1e}"); glue("ch5_q_bound", f"{float(bound.max()):.1e}")
glue("ch5_q_rel", fmt_percent(rel, 2))
print(f"largest error {float(err.max()):.1e}, largest bound {float(bound.max()):.1e}, "
      f"relative error {rel:.2%}")

# %% [markdown]
# The largest error is {glue:text}`ch5_q_err`, inside its bound of {glue:text}`ch5_q_bound`;
# over all outputs the relative error is {glue:text}`ch5_q_rel`.
#
# The memory: per element, one byte for the code plus a share of the four-byte scale, against
# two bytes for bfloat16. What a decode step must read is fixed by the compiled program: its
# input buffers are the cache (the program reads every element, since each one can change the
# output), and its temporary buffers show whether it made a float copy of the cache on the way.
# XLA's memory analysis of the compiled step gives both. (Its *cost* analysis is the wrong tool
# here: it undercounts what happens inside loops — for this step it reports fewer bytes than
# the cache itself — and it charges every operand of every operation as a
# main-memory access, including the converted head that never leaves the processor's caches.)

# %%
tok_att = jnp.zeros((B_att, 1), jnp.int32)
p_att = decoder.init_params(att)
non_cache_args = sum(x.nbytes for x in jax.tree.leaves(p_att)) + tok_att.nbytes
step_memory = {}
for name, dtype in [("int8", jnp.int8), ("bfloat16", jnp.bfloat16)]:
    cache = kv_quant.init_cache(att, B_att, S_att, dtype)
    compiled = kv_quant.extend.lower(p_att, att, tok_att, cache).compile()
    mem = compiled.memory_analysis()
    cache_in = mem.argument_size_in_bytes - non_cache_args
    assert cache_in == kvcache.cache_bytes(cache) + cache.lengths.nbytes
    step_memory[name] = (cache_in, mem.temp_size_in_bytes)
    if name == "int8":        # the cost analysis misses most trips through the per-head loop:
        cost = compiled.cost_analysis()               # it reports less than the cache itself
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        assert cost["bytes accessed"] < cache_in
    print(f"{name:9s} cache read by the step {fmt_bytes(cache_in):>9s}, "
          f"temporaries {fmt_bytes(mem.temp_size_in_bytes)}")
int8_share = step_memory["int8"][0] / step_memory["bfloat16"][0]
assert int8_share <= 0.55
assert step_memory["int8"][1] < step_memory["int8"][0] / 4      # no float copy of the cache
f32_bytes = kvcache.cache_bytes(kv_quant.init_cache(att, B_att, S_att, jnp.float32))
int8_bytes = kvcache.cache_bytes(kv_quant.init_cache(att, B_att, S_att, jnp.int8))

# %% tags=["hide-input"]
glue("ch5_int8_share", fmt_percent(int8_share, 1))
glue("ch5_int8_share_f32", fmt_percent(int8_bytes / f32_bytes, 1))
glue("ch5_int8_temp", fmt_bytes(step_memory["int8"][1]))
glue("ch5_int8_bpe", f"{kv_quant.bytes_per_element(att.H):.3f}")
glue("ch5_int8_capacity", fmt_ratio(1 / int8_share, 2))

# %% [markdown]
# The int8 step reads {glue:text}`ch5_int8_share` of the bfloat16 step's cache bytes
# ({glue:text}`ch5_int8_bpe` bytes per element for $H = 64$); its cache is
# {glue:text}`ch5_int8_share_f32` the size of a float32 one. Its temporary buffers,
# {glue:text}`ch5_int8_temp`, hold one head at a time, not a converted cache.
#
# How the int8 cache is read decides whether this turns into speed. Converting the whole cache to
# float before the attention products — the obvious code — makes XLA write a float copy of the
# cache and read it again, more traffic than a float cache. So `kv_quant` walks through the
# cache one KV head at a time, converting a head's block and using it while it is still in the
# processor's caches (real int8 kernels do the same in registers):

# %%
show_source(kv_quant.attend_per_head)

# %% [markdown]
# Now the step time. On a CPU, bfloat16 arithmetic is emulated and slow, so we compare the int8
# cache with a **float32** cache read by the same per-head code; with the library's standard
# decode step (`decode.extend`, one batched product over the float32 cache); and with the
# obvious way to read an int8 cache, written here: convert every layer's whole cache to float,
# then attend as usual. We time the part of the step that reads the cache (`extend`, the whole
# forward pass; the append that follows writes one token and is the same for all), alternating
# the variants over two rounds so that other activity on the machine affects them alike, and
# keep each one's fastest call, the one least disturbed.

# %%
@partial(jax.jit, static_argnames=("cfg",))
def extend_convert_everything(params, cfg, tokens_BT, cache):
    """The naive int8 read: dequantize each layer's whole cache, then the float32 step."""
    floats = kvcache.KVCache(
        tuple(kv_quant.dequantize(c, sc) for c, sc in zip(cache.k, cache.k_scale)),
        tuple(kv_quant.dequantize(c, sc) for c, sc in zip(cache.v, cache.v_scale)),
        cache.lengths)
    return decode.extend(params, cfg, tokens_BT, floats)[0]


filled = jnp.full((B_att,), S_att - 1, jnp.int32)
int8_cache = kv_quant.init_cache(att, B_att, S_att, jnp.int8)._replace(lengths=filled)
f32_qcache = kv_quant.init_cache(att, B_att, S_att, jnp.float32)._replace(lengths=filled)
f32_cache = kvcache.init_cache(att, B_att, S_att)._replace(lengths=filled)
per_head = jax.jit(lambda p, t, c: kv_quant.extend(p, att, t, c)[0])
step_fns = {
    "int8 cache, per-head reader": (per_head, int8_cache),
    "float32 cache, per-head reader": (per_head, f32_qcache),
    "float32 cache, decode.extend": (jax.jit(lambda p, t, c: decode.extend(p, att, t, c)[0]),
                                     f32_cache),
    "int8 cache, convert everything": (lambda p, t, c: extend_convert_everything(p, att, t, c),
                                       int8_cache),
}
rounds = {label: [] for label in step_fns}
for _ in range(2):
    for label, (fn, c) in step_fns.items():
        rounds[label].append(timing.time_fn(fn, p_att, tok_att, c, repeats=2, warmup=0).min_s)
int8_time = {label: min(ts) for label, ts in rounds.items()}          # fastest of four calls
for label, t in int8_time.items():
    print(f"{label:32s} {fmt_seconds(t)}  ({DEVICE})")
t_i8, t_f32, t_lib, t_naive = int8_time.values()
bytes_ratio = kvcache.cache_bytes(int8_cache) / kvcache.cache_bytes(f32_qcache)

# %% tags=["hide-input"]
expect_measured(t_naive > 2 * t_i8, "converting the whole int8 cache first costs more than "
                "it saves", expected="over twice the per-head reader's time",
                measured=f"{fmt_seconds(t_naive)} against {fmt_seconds(t_i8)}")
expect_measured(t_i8 < 1.25 * t_f32, "the per-head int8 reader is no slower than float32",
                expected="under 125% of the float32 cache's time",
                measured=f"{fmt_seconds(t_i8)} against {fmt_seconds(t_f32)}")
glue("ch5_t_i8", fmt_seconds(t_i8)); glue("ch5_t_f32", fmt_seconds(t_f32))
glue("ch5_t_lib", fmt_seconds(t_lib)); glue("ch5_t_naive", fmt_seconds(t_naive))
glue("ch5_t_ratio", fmt_percent(t_i8 / t_f32)); glue("ch5_t_bytes_ratio", fmt_percent(bytes_ratio))
glue("ch5_t_naive_x", fmt_ratio(t_naive / t_i8))

# %% [markdown]
# Converting everything first is the slowest of all: {glue:text}`ch5_t_naive`,
# {glue:text}`ch5_t_naive_x` the per-head reader's time, because XLA writes the converted cache
# to memory and reads it back. The per-head reader takes {glue:text}`ch5_t_i8` against
# {glue:text}`ch5_t_f32` for the float32 cache with the same code, on {glue:text}`ch5_device`:
# {glue:text}`ch5_t_ratio` of the time for {glue:text}`ch5_t_bytes_ratio` of the cache bytes.
# The library's standard float32 step, one large batched product that XLA spreads over all
# cores, takes {glue:text}`ch5_t_lib`. On a CPU the saving in bytes turns into much less
# saving in time, if any: turning a code back into a float is an instruction per element, and
# a processor with few cores converts not much faster than it reads floats from memory. XLA:CPU
# offers no way around it — its matrix products, and its integer products too, convert int8
# operands to float first, in a full-size copy. GPUs and TPUs convert in registers inside the
# kernel that reads the cache, which is where int8 and fp8 KV caches are used in practice. What
# the int8 cache gives everywhere is capacity: {glue:text}`ch5_int8_capacity` the tokens of a
# 16-bit cache in the same memory.
#
# ## Forgetting tokens: StreamingLLM and H2O
#
# Attention in trained models concentrates on a few tokens. If the cache dropped the tokens that
# get almost no attention, the output would barely change, and the cache could have a fixed size
# whatever the length of the sequence. Several methods do this without retraining:
#
# - **StreamingLLM** {cite:p}`xiao2024streamingllm` observed that the first few tokens receive
#   a lot of attention whatever they say — *attention sinks* — and so do the most recent ones.
#   It keeps a handful of initial tokens and a sliding window of recent ones.
# - **H2O** {cite:p}`zhang2023h2o` keeps a budget of tokens: the most recent ones, plus the
#   *heavy hitters*, those with the largest attention accumulated over all steps so far. When
#   the cache is full, it drops the token with the least.
# - **Scissorhands** {cite:p}`liu2023scissorhands` rests on the same "persistence of
#   importance": tokens that mattered keep mattering. It keeps recent tokens and those with high
#   attention over a recent history window, and drops many tokens at once to reach a target
#   compression instead of one per step.
# - **FastGen** {cite:p}`ge2024fastgen` fixes an error target instead of a budget. After
#   prefill it profiles each attention head and picks, per head, the cheapest policy that
#   recovers the attention to within the target — keep special tokens, punctuation, a local
#   window, heavy hitters, or combinations — falling back to the full cache when nothing cheaper
#   is good enough.
#
# `kv_evict` implements StreamingLLM and H2O per KV head, with a cache that holds exactly the
# budget (its tests replay both policies in plain Python and compare the kept tokens). Our
# models have random weights, so their attention has none of the structure these methods
# exploit. We therefore build a stream of queries and keys with that structure — a sink at the
# first position, {glue:text}`ch5_ev_heavy` heavy hitters, a preference for recent tokens under
# RoPE — and check the
# structure is there before measuring:

# %%
T_ev, K_ev, G_ev, H_ev = 256, 2, 2, 64


@partial(jax.jit, static_argnums=2)
def last_query_attention(q_BTNH, k_BSKH_or_BKSH, heads_first):
    """Attention probabilities of the final query over all keys [B, N, S] (causal)."""
    k_BKSH = k_BSKH_or_BKSH if heads_first else k_BSKH_or_BKSH.swapaxes(1, 2)
    G = q_BTNH.shape[2] // k_BKSH.shape[1]
    s_BNS = jnp.einsum("BNH,BNSH->BNS", q_BTNH[:, -1], jnp.repeat(k_BKSH, G, axis=1))
    return jax.nn.softmax(s_BNS / np.sqrt(q_BTNH.shape[-1]), axis=-1)


def top_share_of(p_BNS, fraction=0.05):
    """Share of the attention that goes to the top `fraction` of the keys, averaged."""
    n = max(1, int(p_BNS.shape[-1] * fraction))
    return float(jnp.sort(p_BNS, -1)[..., -n:].sum(-1).mean())


qs, ks_, vs_ = kv_evict.structured_stream(jax.random.key(0), 2, T_ev, K_ev, G_ev, H_ev)
pos_ev = jnp.broadcast_to(jnp.arange(T_ev), (2, T_ev))
full_ev = jax.jit(attention_reference)(qs, ks_.swapaxes(1, 2), vs_.swapaxes(1, 2),
                                       attention_mask(pos_ev, pos_ev[0], jnp.full((2,), T_ev)))[0]
last = last_query_attention(qs, ks_, False)
sink_share = float(last[..., 0].mean())
top_share = top_share_of(last)
model_top = top_share_of(last_query_attention(qkv[1][0], qkv[1][1], True))
assert top_share > 0.5 and top_share > 2 * model_top and sink_share > 10 / T_ev

# %% tags=["hide-input"]
glue("ch5_ev_heavy", fmt_percent(inspect.signature(kv_evict.structured_stream)
                                 .parameters["heavy_fraction"].default))
glue("ch5_ev_sink", fmt_percent(sink_share)); glue("ch5_ev_top", fmt_percent(top_share))
glue("ch5_ev_model_top", fmt_percent(model_top))
glue("ch5_ev_top_frac", fmt_percent(inspect.signature(top_share_of).parameters["fraction"]
                                    .default))

# %% [markdown]
# In the structured stream the last query puts {glue:text}`ch5_ev_sink` of its attention on the
# first token and {glue:text}`ch5_ev_top` on its top {glue:text}`ch5_ev_top_frac` of tokens;
# in our random-weight model the top {glue:text}`ch5_ev_top_frac` get only
# {glue:text}`ch5_ev_model_top`. Now the error of the attention output,
# measured in units of a typical value vector, for budgets from 8 to 128 of the 256 tokens:
# StreamingLLM with 4 sinks, the same window without sinks, and H2O with half its budget for
# recent tokens (the paper's split).

# %%
budgets = [8, 16, 32, 64, 128]
policies = {"StreamingLLM (4 sinks + window)": ("streaming", 4, lambda b: 0),
            "window only (no sinks)": ("streaming", 0, lambda b: 0),
            "H2O (heavy hitters + recent)": ("h2o", 0, lambda b: b // 2)}
ev_err = {label: [kv_evict.relative_error(kv_evict.attend_stream(
    qs, ks_, vs_, max(budgets), b, pol, n_sink, n_recent(b))[0], full_ev, vs_, b)
    for b in budgets]
    for label, (pol, n_sink, n_recent) in policies.items()}
stream, window_only, h2o = ev_err.values()
assert all(a > b for e in ev_err.values() for a, b in zip(e, e[1:]))   # more budget, less error
assert all(h < s for h, s in zip(h2o, stream))                          # H2O beats the window
assert all(s < w for s, w in zip(stream, window_only))                  # sinks matter

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6, 3.6))
for label, e in ev_err.items():
    ax.plot(budgets, e, "o-", label=label)
ax.set_xscale("log", base=2)
ax.set_xlabel(f"cache budget (tokens kept per head, of {T_ev})")
ax.set_ylabel("attention output error\n(in typical value norms)")
ax.set_title("Eviction policies on a structured attention stream")
ax.legend(); ax.grid(alpha=0.3)
plt.show()
glue("ch5_ev_h2o_32", f"{h2o[2]:.2f}"); glue("ch5_ev_stream_32", f"{stream[2]:.2f}")
glue("ch5_ev_window_32", f"{window_only[2]:.2f}")

# %% [markdown]
# Errors fall as the budget grows, for every policy. At a budget of 32 (an eighth of the
# sequence), H2O's error is {glue:text}`ch5_ev_h2o_32`, StreamingLLM's
# {glue:text}`ch5_ev_stream_32`, and the window without sinks {glue:text}`ch5_ev_window_32`:
# keeping the sinks helps a plain window, and keeping the tokens that have collected attention
# helps more, because here the heavy hitters are scattered through the sequence. None of these
# numbers says anything about a trained model's accuracy — the papers measure that — but they
# show what each rule can and cannot keep. And the memory gain is real: the cache holds the
# budget, not the sequence, so its size and the bytes a step reads stop growing with length.
#
# The same two policies run inside the library's model: `kv_evict.model_logits` decodes a
# sequence token by token with every layer's cache under the budget. Here is the `tiny` model
# (random weights) on 64 tokens, against its logits with the full cache:

# %%
ev_tokens = jax.random.randint(jax.random.key(4), (2, 64), 0, tiny.V)
ev_ref = decoder.forward(qm_params, tiny, ev_tokens)
ev_budgets = [8, 16, 32, 64]
model_err = {pol: [float(jnp.mean(jnp.abs(kv_evict.model_logits(
    qm_params, tiny, ev_tokens, 64, b, pol, 4 if pol == "streaming" else 0,
    0 if pol == "streaming" else b // 2) - ev_ref)) / jnp.mean(jnp.abs(ev_ref)))
    for b in ev_budgets] for pol in kv_evict.POLICIES}
for pol, e in model_err.items():
    print(pol, " ".join(f"budget {b}: {x:.3f}" for b, x in zip(ev_budgets, e)))
    assert e[-1] < 1e-5 and all(a > b for a, b in zip(e[:-1], e[1:]))   # exact with room

# %% tags=["hide-input"]
glue("ch5_ev_model_8", f"{model_err['h2o'][0]:.2f}")
glue("ch5_ev_model_8s", f"{model_err['streaming'][0]:.2f}")

# %% [markdown]
# With room for all 64 tokens both are exact; at a budget of 8 the logits are off by
# {glue:text}`ch5_ev_model_8` (H2O) and {glue:text}`ch5_ev_model_8s` (StreamingLLM) of their
# typical size. Which policy wins here is of no consequence: this model's attention has no
# sinks or heavy hitters to find.
#
# ## Wasting less of what is allocated: paging
#
# So far we assumed every allocated byte holds a token. Systems before vLLM
# {cite:p}`kwon2023pagedattention` gave each request one contiguous region, reserved at
# admission for the longest the request might become, because their attention kernels wanted
# each sequence's cache in one piece. Three kinds of waste follow: slots reserved for tokens not
# yet generated, slots never used because the request ended early (internal fragmentation), and
# free memory in holes too small for the next request (external fragmentation). The PagedAttention
# paper measured how much of the KV memory held actual tokens in such a system, and how much
# with paging, which hands out small fixed-size blocks as a sequence grows (the engine's
# `BlockManager`, chapter 12). Its figures are in the book's data:

# %%
paper = bookdata.load("pagedattention_waste.json")
shares = paper["token_state_share"]
paper_waste = {k: 1 - v for k, v in shares.items()}

# %% tags=["hide-input"]
glue("ch5_paper_low", fmt_percent(min(paper_waste["orca_max"], paper_waste["orca_oracle"])))
glue("ch5_paper_high", fmt_percent(max(paper_waste["orca_max"], paper_waste["orca_oracle"])))
glue("ch5_paper_paged", fmt_percent(paper["paged_waste_at_most"]))
glue("ch5_sg_in", fmt_count(round(paper["sharegpt_mean_input_tokens"])))
glue("ch5_sg_out", fmt_count(round(paper["sharegpt_mean_output_tokens"])))
glue("ch5_sg_max", f"{paper['max_len']:,}")
print(paper["source"])
print({k: fmt_percent(v) for k, v in paper_waste.items()})

# %% [markdown]
# Between {glue:text}`ch5_paper_low` and {glue:text}`ch5_paper_high` of the memory wasted with
# contiguous reservations, against less than {glue:text}`ch5_paper_paged` with paging. We check
# those numbers on our own allocators. `kv_memory.simulate` serves a queue of requests with
# log-normal lengths around the means of the paper's ShareGPT trace
# ({glue:text}`ch5_sg_in` prompt and {glue:text}`ch5_sg_out` output tokens, at most
# {glue:text}`ch5_sg_max` in all) from a pool of 40,000 token slots: with contiguous regions
# sized for the maximum length, for the next power of two, or for the exact final length (an
# oracle, first-fit in one address space), and with 16-token pages from the engine's block
# manager. The breakdown is averaged over the steps in which a request was waiting — the pool is
# full, so every slot not holding a token is a loss.

# %%
requests = memory_sim.synthetic_requests(600, seed=0,
                                        mean_prompt=paper["sharegpt_mean_input_tokens"],
                                        mean_output=paper["sharegpt_mean_output_tokens"],
                                        max_len=paper["max_len"])
mem = {s: memory_sim.simulate(requests, 40_000, s, max_len=paper["max_len"], block_size=16)
       for s in memory_sim.SCHEMES}

# %% tags=["hide-input"]
labels = {"max": "contiguous, max length", "pow2": "contiguous, power of two",
          "oracle": "contiguous, exact (oracle)", "paged": "paged, 16-token blocks"}
parts = [("tokens", "token states"), ("reserved", "reserved for future tokens"),
         ("internal", "internal fragmentation"), ("external", "free but unusable")]
fig, ax = plt.subplots(figsize=(6.5, 3.8), layout="constrained")
left = np.zeros(len(mem))
for attr, name in parts:
    vals = np.array([getattr(b, attr) for b in mem.values()]) * 100
    ax.barh([labels[s] for s in mem], vals, left=left, label=name)
    left += vals
ax.scatter([100 * shares[f"orca_{s}"] for s in ("max", "pow2", "oracle")] + [100 * shares["vllm"]],
           [labels[s] for s in mem], marker="|", s=300, color="black", zorder=3,
           label="token states reported (Kwon et al.)")
ax.set_xlabel("share of the KV memory pool (%), averaged while requests wait")
ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.4, -0.22), ncol=3)
ax.invert_yaxis()
plt.show()
for s, b in mem.items():
    print(f"{labels[s]:28s} tokens {b.tokens:6.1%}  waste {b.waste:6.1%}  "
          f"requests decoding at once {b.running:6.1f}")

# %%
assert paper_waste["orca_oracle"] <= mem["max"].waste <= paper_waste["orca_max"]
assert min(mem[s].waste for s in ("max", "pow2", "oracle")) > 0.4
assert mem["paged"].waste < paper["paged_waste_at_most"]
assert mem["oracle"].waste > 10 * mem["paged"].waste

# %% tags=["hide-input"]
glue("ch5_pg_max", fmt_percent(mem["max"].waste))
glue("ch5_pg_pow2", fmt_percent(mem["pow2"].waste))
glue("ch5_pg_oracle", fmt_percent(mem["oracle"].waste))
glue("ch5_pg_paged", fmt_percent(mem["paged"].waste, 1))
glue("ch5_pg_batch", fmt_ratio(mem["paged"].running / mem["max"].running))

# %% [markdown]
# Reserving the maximum length wastes {glue:text}`ch5_pg_max` of the pool, inside the paper's
# range. Powers of two waste {glue:text}`ch5_pg_pow2` and even the oracle, which knows every
# answer's length in advance, {glue:text}`ch5_pg_oracle` — less than the paper found for those
# schemes (its workload and allocator are not ours), but still a large share, spent on
# reservations and holes. Paging wastes {glue:text}`ch5_pg_paged`, under the paper's bound, and
# the pool keeps {glue:text}`ch5_pg_batch` as many requests decoding at once as with
# maximum-length reservations — which is where vLLM's throughput gains came from. Paging also
# lets requests share blocks, such as a common prompt prefix (chapter 12).
#
# ## More memory: offloading and more devices
#
# The last lever is more memory. **Offloading** keeps the cache in host memory (or on disk) and
# streams it to the accelerator when needed, as FlexGen {cite:p}`sheng2023flexgen` does. The
# catch is bandwidth: a decode step reads the whole cache, and the host link is far slower than
# device memory.

# %%
pcie = next(c for c in CHIPS.values() if c.interconnect == "PCIe 4.0 x16").link_bytes_per_s
seq_4k = 4096
hbm_s = counts.kv_cache_bytes(l7, 1, seq_4k, BF16) / a100.hbm_bytes_per_s
host_s = phase_time.kv_transfer_seconds(l7, seq_4k, pcie, BF16)
assert host_s > 50 * hbm_s

# %% tags=["hide-input"]
glue("ch5_off_bytes", fmt_bytes(counts.kv_cache_bytes(l7, 1, seq_4k, BF16)))
glue("ch5_off_hbm", fmt_seconds(hbm_s)); glue("ch5_off_pcie", fmt_seconds(host_s))
glue("ch5_off_ratio", fmt_ratio(host_s / hbm_s, 0)); glue("ch5_pcie", fmt_rate(pcie))

# %% [markdown]
# One 4,096-token LLaMA-2 7B cache is {glue:text}`ch5_off_bytes`. An A100 reads it from its own
# memory in {glue:text}`ch5_off_hbm`; over a PCIe 4.0 x16 link ({glue:text}`ch5_pcie` one way)
# it takes {glue:text}`ch5_off_pcie`, {glue:text}`ch5_off_ratio` longer, at every step. That
# rules offloading out wherever latency matters; it suits offline batch jobs, where a large
# batch amortises each transfer.
#
# **More devices** pool their memory. With tensor parallelism (chapter 9) each chip holds a
# slice of the KV heads, so the per-chip cache falls with the chip count — until there are more
# chips than KV heads. A head cannot be split, so beyond that point heads are replicated, and an
# MQA model's single head sits whole on every chip: MQA's saving is lost. Sharding the cache by
# *sequence* (batch) instead {cite:p}`pope2023esti` brings it back.

# %%
f7 = get_preset("falcon-7b")
shard_rows = []
for m in (l70, f7):
    for chips in (1, 8, 16):
        by_head = counts.kv_cache_bytes_per_shard(m, 64, 4096, head_shards=chips,
                                                    bytes_per_element=BF16)
        by_batch = counts.kv_cache_bytes_per_shard(m, 64, 4096, batch_shards=chips,
                                                     bytes_per_element=BF16)
        shard_rows.append((m.name, m.K, chips, by_head, by_batch))

# %% tags=["hide-input"]
Markdown("| model | K | chips | per chip, heads split | per chip, sequences split |\n"
         "|---|---:|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {K} | {c} | {fmt_bytes(h)} | {fmt_bytes(b)} |"
             for n, K, c, h, b in shard_rows))
# %%
per_chip = {(n, c): (h, b) for n, _, c, h, b in shard_rows}
assert per_chip["llama-2-70b", 16][0] == per_chip["llama-2-70b", 8][0]   # 8 heads: stuck at 8
assert per_chip["falcon-7b", 8][0] == per_chip["falcon-7b", 1][0]        # MQA: replicated
assert per_chip["falcon-7b", 8][1] == per_chip["falcon-7b", 1][1] / 8    # batch split works
pool_tokens = latency.kv_capacity_tokens(l70, h100, 8)

# %% tags=["hide-input"]
glue("ch5_pool_tokens", fmt_count(pool_tokens))
glue("ch5_pool_seqs", str(roofline.max_batch(l70, h100, 4096, chips=8)))

# %% [markdown]
# For 64 sequences of 4,096 tokens, LLaMA-2 70B's cache per chip stops shrinking at
# {glue:text}`ch5_l70_K` chips when heads are split, and Falcon-7B's does not shrink at all;
# splitting sequences divides both evenly. Eight H100s leave room for
# {glue:text}`ch5_pool_tokens` tokens of LLaMA-2 70B cache ({glue:text}`ch5_pool_seqs` sequences
# of 4,096). Pooling beyond one machine is possible too —
# Infinite-LLM {cite:p}`lin2024infinitellm` distributes attention and the cache across a
# cluster — at the price of network traffic at every step.
#
# ## All together
#
# The levers multiply. Take a LLaMA-3-8B-shaped model at 32,768 tokens and compare a
# multi-head bfloat16 cache with the same model using its {glue:text}`ch5_l3_K` KV heads, the
# 5:1 local/global mix, and an int8 cache:

# %%
mha_l3 = l3.replace(K=l3.N)
baseline = counts.kv_cache_bytes(mha_l3, 1, ctx, BF16)
combined = kv_window.kv_bytes_per_sequence(l3, patterns["5 local (W = 1,024) : 1 global"], ctx,
                                           kv_quant.bytes_per_element(l3.H))
assert baseline / combined > 10

# %% tags=["hide-input"]
glue("ch5_l3_K", str(l3.K))
glue("ch5_all_base", fmt_bytes(baseline)); glue("ch5_all_comb", fmt_bytes(combined))
glue("ch5_all_ratio", fmt_ratio(baseline / combined, 0))
print(f"{fmt_bytes(baseline)} -> {fmt_bytes(combined)} per sequence "
      f"({baseline / combined:.0f}x smaller)")

# %% [markdown]
# {glue:text}`ch5_all_base` per sequence becomes {glue:text}`ch5_all_comb`,
# {glue:text}`ch5_all_ratio` smaller — more than the order of magnitude the scaling book
# promises — before paging removes the waste around it.
#
# ## Summary
#
# - The cache holds $2 B S L K H p$ bytes: half a megabyte per token for a 7B multi-head model,
#   as much as the weights after a few tens of thousands of tokens.
# - It caps the batch a chip can serve, and it is read at every step: smaller caches mean more
#   requests, lower latency and higher throughput together.
# - Fewer KV heads (GQA, MQA) shrink it by $N/K$ and speed up the step accordingly.
# - Local attention caps a layer's cache at its window; mixing in a few global layers keeps most
#   of the saving for long contexts.
# - Sharing a cache between layers saves memory but not the bytes a step reads.
# - An int8 cache with per-vector scales halves a 16-bit cache with a small, bounded error; it
#   only runs faster if the reader converts in small pieces.
# - Eviction (StreamingLLM, H2O, Scissorhands, FastGen) keeps a fixed budget of tokens that
#   matter; what it costs in accuracy depends on how concentrated attention is.
# - Contiguous reservations waste most of the memory they hold; paging wastes a few percent.
# - Offloading trades step time for capacity; more devices add memory, but split KV heads only as
#   far as there are heads.
