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
# # Sampling and the KV cache
#
# A trained language model does one thing: given a sequence of tokens, it returns, for every
# position, a distribution over the token that comes next. Generating text is a loop around
# that function — read the distribution at the last position, pick a token, append it, ask
# again. This chapter builds that loop twice. The first version is the obvious one and
# recomputes everything at every step. The second keeps the keys and values of past tokens in a
# **KV cache** and does only the new work. Along the way we will see why the cache is correct
# (causal masking), why generation splits into two workloads with very different costs
# (*prefill* and *decode*), what we are trying to optimise (latency to the first token, time per
# token, throughput), and what the cache costs in memory.
#
# Everything below runs on your device. The first cell prepares JAX; it must run before any
# other JAX work (see [How to run this book](../book/how_to_run.md)).

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book.listing import show_source
from inferbook.model import attention, decode, decoder, kvcache
from inferbook.model.presets import get_preset
from inferbook.perf import compiled, counts, microbench, timing

print(info.describe())
DEVICE = timing.device_name()

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
    fmt_tokens_per_s,
    glue,
)

# %% [markdown]
# ## A model to sample from
#
# We use a small LLaMA-style model with random weights: the library's `small` preset. Random
# weights produce gibberish, but gibberish costs exactly as much to compute as prose, and every
# question in this chapter is about cost and correctness, not quality.

# %%
cfg = get_preset("small")
params = decoder.init_params(cfg, seed=0)
n_params = sum(w.size for w in jax.tree.leaves(params))
assert n_params == counts.param_count(cfg)      # the estimator counts what the model holds

# %% tags=["hide-input"]
glue("ch1_L", str(cfg.L)); glue("ch1_D", str(cfg.D)); glue("ch1_N", str(cfg.N))
glue("ch1_K", str(cfg.K)); glue("ch1_V", fmt_count(cfg.V))
glue("ch1_params", fmt_count(n_params))
print(cfg)

# %% [markdown]
# It has {glue:text}`ch1_L` layers of width $D =$ {glue:text}`ch1_D`, {glue:text}`ch1_N`
# query heads sharing {glue:text}`ch1_K` key/value heads, a vocabulary of
# {glue:text}`ch1_V` tokens, and {glue:text}`ch1_params` parameters. The whole forward pass is
# one short function. Its only moving part is `attend`, a callback that decides what the
# queries of each layer look at; the rest of this chapter is about choosing it well.

# %%
show_source(decoder.transformer)

# %% [markdown]
# ## Sampling, naively
#
# The loop reads the model's distribution at the last position, takes the most likely token
# (greedy decoding; any other sampling rule would cost the same), appends it and repeats:

# %%
def sample_naively(params, cfg, prompt, n_new):
    """Greedy generation that recomputes the whole sequence for every new token."""
    tokens = list(prompt)
    for _ in range(n_new):
        logits_TV = decoder.forward(params, cfg, jnp.asarray([tokens]))[0]   # every position
        tokens.append(int(jnp.argmax(logits_TV[-1])))                     # ... to use the last
    return tokens[len(prompt):]


prompt = [17, 4, 1999, 23, 5, 811, 42, 7]
naive_tokens = sample_naively(params, cfg, prompt, 4)
assert naive_tokens == decode.naive_generate(params, cfg, [prompt], 4).tokens[0]
naive_tokens

# %% [markdown]
# It works, and it is wasteful in two ways. Each step pushes the *whole* sequence through the
# model again, although only the last position's output is used. And each step has a new
# length, so JAX compiles a new program for it (the library's `naive_generate` pads lengths up
# to a multiple of 64 to limit that).
#
# How wasteful? Step $t$ of generating after a prompt of $p$ tokens runs the model over
# $p + t$ tokens. The matrix multiplications cost about $2P$ FLOPs per token for $P$ weights,
# so $2P(p + t)$ per step and a total that grows like $n^2$ over $n$ steps. Attention compares
# every token with every earlier one: about $4 L N H (p+t)^2$ FLOPs per step, a total that grows
# like $n^3$. Generating twice as many tokens costs $2^2$ to $2^3$ times as much.
#
# ## The past does not change
#
# The way out is in the attention mask. A token attends only to itself and to tokens before it.
# So the keys and values computed at position $i$ depend only on tokens $0 \dots i$ — in every
# layer, since each layer's input at position $i$ also depends only on those tokens. Appending a
# token changes nothing that was already computed. We can check that directly, by capturing
# every layer's keys and values for a text and for the same text one token longer:

# %%
@jax.jit
def keys_and_values(params, tokens_T):
    """Every layer's keys and values [T, K, H] for one sequence, from a plain forward pass."""
    T = tokens_T.shape[0]
    pos_BT = jnp.arange(T)[None]
    mask_BTS = attention.attention_mask(pos_BT, pos_BT[0], jnp.array([T]))
    captured = []

    def attend(i, q_BTNH, k_BTKH, v_BTKH):
        captured.append((k_BTKH[0], v_BTKH[0]))
        return attention.attend(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2), mask_BTS)

    decoder.transformer(params, cfg, tokens_T[None], pos_BT, attend)
    return captured


text = jnp.asarray(prompt + naive_tokens)
shorter, longer = keys_and_values(params, text[:-1]), keys_and_values(params, text)
change = max(float(jnp.max(jnp.abs(a[: len(text) - 1] - b)))
             for (ka, va), (kb, vb) in zip(longer, shorter) for a, b in ((ka, kb), (va, vb)))
assert change < 1e-5, change
print(f"largest change in any past key or value after appending a token: {change:.1e}")

# %% [markdown]
# Nothing in the past moved (up to floating-point noise). So we store every layer's keys and
# values as we go — the **KV cache** — and each new token only needs its own query, key and
# value, plus the cached keys and values of everything before it.
#
# ## Prefill, then decode
#
# With a cache, generation has two phases {cite:p}`austin2025scaling,lienhart2023kvcache`:
#
# - **Prefill** runs the whole prompt through the model in one pass, exactly like the naive
#   forward pass, but keeps every layer's keys and values. Its output is the distribution of
#   the first new token and a filled cache.
# - **Decode** steps each feed *one* token per sequence. The token's query attends to the
#   cached keys and values and to its own; its key and value are then appended to the cache.
#
# In the library, `prefill` and `extend` (one or more new tokens per sequence against a cache)
# share `attend_cached`, which computes attention over two sets of keys — those in the cache and
# the new ones — and merges the two partial results with their log-sum-exps. This is the same
# identity FlashAttention and Flash-Decoding rest on (chapters 6 and 7); here it lets a step read
# the cache without writing it, and the new keys and values are appended afterwards.

# %%
show_source(decode.attend_cached, kvcache.append)

# %% [markdown]
# The claim that matters is that the cache changes the cost and nothing else. We check it on a
# *ragged* batch — prompts of different lengths decoded together — against recomputation:
# first the logits of every step, then the generated tokens.

# %%
prompts = [prompt, [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7], [271, 828]]
n_new = 12
tokens_BT, lengths_B = decode.pad_prompts(prompts)
cache = kvcache.init_cache(cfg, len(prompts), tokens_BT.shape[1] + n_new)
logits_BV, cache = decode.prefill(params, cfg, jnp.asarray(tokens_BT), jnp.asarray(lengths_B),
                                  cache)
seqs = [list(p) for p in prompts]
worst = 0.0
for step in range(n_new):
    # Recompute from scratch; padding to a fixed width keeps this to a single compilation.
    full_BTV = decoder.forward(params, cfg, *map(jnp.asarray, decode.pad_prompts(seqs, 32)))
    last_BV = full_BTV[jnp.arange(len(seqs)), jnp.asarray([len(s) - 1 for s in seqs])]
    worst = max(worst, float(jnp.max(jnp.abs(last_BV - logits_BV))))
    next_B = jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
    for s, t in zip(seqs, next_B.tolist()):
        s.append(t)
    logits_BV, cache = decode.decode_step(params, cfg, next_B, cache)

assert worst < 1e-4, worst
cached_tokens = decode.generate(params, cfg, prompts, n_new).tokens
assert cached_tokens == [s[len(p):] for s, p in zip(seqs, prompts)]   # = recomputation's

# %% tags=["hide-input"]
glue("ch1_logit_error", f"{worst:.1e}")
glue("ch1_n_new", str(n_new))
print(f"largest logit difference over {n_new} steps: {worst:.1e}; tokens identical")

# %% [markdown]
# Over {glue:text}`ch1_n_new` steps the cached logits never differ from recomputation by more
# than {glue:text}`ch1_logit_error`, and the generated tokens are identical — for every prompt
# of the ragged batch.
#
# ## Two workloads
#
# Prefill and decode run the same weights but are different problems. Prefill multiplies each
# weight matrix by a $[T, D]$ block of activations: every weight read from memory takes part in
# $T$ multiply-adds, $2T$ FLOPs. A decode step multiplies it by one row per sequence: $2B$ FLOPs
# per weight for a batch of $B$. The ratio of arithmetic to memory traffic — the **arithmetic
# intensity**, FLOPs per byte — decides which resource runs out first; chapter 2 develops the
# idea. Here we read both numbers from XLA's analysis of the two compiled programs: a prefill of
# 512 tokens and one decode step, both at batch 1.

# %%
T_prompt = 512
tok_1T = jnp.zeros((1, T_prompt), jnp.int32)
cache_1 = kvcache.init_cache(cfg, 1, T_prompt + 64)
prefill_cost = compiled.compiled_cost(decode.prefill, params, cfg, tok_1T, jnp.array([T_prompt]),
                                   cache_1)
step_cache = cache_1._replace(lengths=jnp.array([T_prompt]))
step_cost = compiled.compiled_cost(decode.extend, params, cfg, jnp.zeros((1, 1), jnp.int32),
                                step_cache)

intensity_prefill = prefill_cost["flops"] / prefill_cost["bytes_accessed"]
intensity_decode = step_cost["flops"] / step_cost["bytes_accessed"]
# A decode step reads every weight and the cache about once: under one FLOP per byte.
assert intensity_decode < 1
assert step_cost["bytes_accessed"] >= counts.param_bytes(cfg, 4)
assert intensity_prefill > 10 * intensity_decode

# %% tags=["hide-input"]
for name, c in [("prefill, 512 tokens", prefill_cost), ("decode step, batch 1", step_cost)]:
    print(f"{name:22s} {fmt_flops(c['flops']):>14s} {fmt_bytes(c['bytes_accessed']):>10s}  "
          f"{c['flops'] / c['bytes_accessed']:8.1f} FLOPs/byte")
glue("ch1_int_prefill", f"{intensity_prefill:,.0f}")
glue("ch1_int_decode", f"{intensity_decode:.2f}")
glue("ch1_int_ratio", fmt_ratio(intensity_prefill / intensity_decode, 0))
glue("ch1_int_matmul_prefill", f"{2 * T_prompt / 4:,.0f}")

# %% [markdown]
# The decode step performs {glue:text}`ch1_int_decode` FLOPs per byte it moves: it reads every
# weight and the cache once and does almost nothing with them. The prefill performs
# {glue:text}`ch1_int_prefill`, {glue:text}`ch1_int_ratio` more. (Its matrix multiplications
# alone reach $2T / 4 =$ {glue:text}`ch1_int_matmul_prefill` FLOPs per float32 weight byte; the
# compiled program's average is lower because this straightforward attention writes its
# $T \times T$ score matrices to memory and reads them back — the traffic FlashAttention removes
# in chapter 6.) Modern accelerators can do a few hundred FLOPs in the time it takes to read one
# byte from their memory, so prefill keeps their arithmetic busy while decode leaves it idle,
# waiting for weights to stream in. A decode step is **memory-bound**: its time is, to a good
# approximation, the bytes it must read divided by memory bandwidth. That single fact drives most
# of the rest of this book.
#
# ## Counting the work
#
# The library's estimator has the FLOP count of a forward pass as a formula:
# $2 \times$ (weights in matrix products) per token, plus $4 L N H$ per query–key pair for the
# two attention products. Before trusting it we compare it with XLA's count of the compiled
# programs, for the naive step (a forward pass over all $t$ tokens) and the cached step (one
# token against a cache of $t$ slots), at several lengths.

# %%
lengths = [256, 512, 1024]
naive_flops = {t: compiled.compiled_cost(decode.last_logits, params, cfg,
                                      jnp.zeros((1, t), jnp.int32), jnp.array([t]),
                                      optimized=False)["flops"] for t in lengths}
cached_flops = {t: compiled.compiled_cost(decode.extend, params, cfg, jnp.zeros((1, 1), jnp.int32),
                                       kvcache.init_cache(cfg, 1, t), optimized=False)["flops"]
                for t in lengths}
for t in lengths:
    naive_formula = counts.forward_flops(cfg, 1, t)                  # all t positions
    cached_formula = counts.forward_flops(cfg, 1, 1, kv_len=t + 1)   # cache slots + itself
    assert abs(naive_flops[t] / naive_formula - 1) < 0.05, (t, naive_flops[t], naive_formula)
    assert abs(cached_flops[t] / cached_formula - 1) < 0.05, (t, cached_flops[t], cached_formula)
    print(f"t={t:5d}  naive step {fmt_flops(naive_flops[t]):>14s} (formula "
          f"{fmt_flops(naive_formula)})   cached step {fmt_flops(cached_flops[t]):>13s} "
          f"(formula {fmt_flops(cached_formula)})")

# %% [markdown]
# The formula agrees with the compiler to within a few percent at every length (XLA also counts
# the normalisations and the softmax, which the formula leaves out). Summing the per-step counts
# gives the total work of generating $n$ tokens from a short prompt with each method:

# %%
n_axis = np.unique(np.geomspace(16, 4096, 40).astype(int))
p0 = 16


def total_flops(n, cached):
    steps = np.arange(n)
    if cached:
        return sum(counts.forward_flops(cfg, 1, 1, kv_len=p0 + t + 1) for t in steps)
    return sum(counts.forward_flops(cfg, 1, p0 + t, logits_for=1) for t in steps)


naive_total = np.array([total_flops(n, False) for n in n_axis])
cached_total = np.array([total_flops(n, True) for n in n_axis])
ratio_1024 = total_flops(1024, False) / total_flops(1024, True)
# Doubling n: naive work grows by more than 2x (quadratic and cubic terms), cached by about 2x.
growth_naive = total_flops(2048, False) / total_flops(1024, False)
growth_cached = total_flops(2048, True) / total_flops(1024, True)
assert growth_naive > 3 and growth_cached < 2.5

# %% tags=["hide-input"]
glue("ch1_flops_ratio_1024", fmt_ratio(ratio_1024, 0))
glue("ch1_growth_naive", fmt_ratio(growth_naive)); glue("ch1_growth_cached", fmt_ratio(growth_cached))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(n_axis, naive_total, label="naive (recompute the prefix)")
ax.loglog(n_axis, cached_total, label="KV cache")
ax.set_xlabel("tokens generated, n")
ax.set_ylabel("total FLOPs")
ax.set_title(f"Work to generate n tokens ({cfg.name} model, {p0}-token prompt)")
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# Generating 1,024 tokens naively costs {glue:text}`ch1_flops_ratio_1024` the FLOPs of cached
# generation. Going from 1,024 to 2,048 tokens multiplies the naive work by
# {glue:text}`ch1_growth_naive` but the cached work by only {glue:text}`ch1_growth_cached`:
# with the cache, the matrix multiplications cost the same at every step and only attention
# grows, linearly in the context.
#
# ## Measured on this device
#
# FLOPs are not time. We time the two kinds of step — a naive forward pass over $t$ tokens,
# and one cached decode step with $t$ tokens in the cache, run exactly as `generate` runs it —
# at the same lengths. Each timing is the median of several runs after a warm-up, with
# compilation excluded.

# %%
naive_time, cached_time = {}, {}
for t in lengths:
    naive_time[t] = timing.time_fn(decode.last_logits, params, cfg, jnp.zeros((1, t), jnp.int32),
                                  jnp.array([t]), repeats=3).median_s
    cached_time[t] = timing.time_fn(timing.decode_step_timer(params, cfg, 1, t + 1),
                                   repeats=15).median_s
    print(f"t={t:5d}  naive step {fmt_seconds(naive_time[t]):>9s}   "
          f"cached step {fmt_seconds(cached_time[t]):>9s}   "
          f"ratio {naive_time[t] / cached_time[t]:6.1f}")

speedup_1024 = naive_time[1024] / cached_time[1024]
growth = {"naive": naive_time[1024] / naive_time[256],
          "cached": cached_time[1024] / cached_time[256]}

# %% tags=["hide-input"]
# Claims about this device's timings: strict when the book is built, a note for a reader
# whose machine is busy (`inferbook.book.claims`).
expect_measured(speedup_1024 >= 10, "with 1,024 tokens the cached step is at least ten times "
                "faster than the naive one", expected="a speedup of at least 10×",
                measured=fmt_ratio(speedup_1024))
expect_measured(growth["naive"] > growth["cached"], "naive steps slow down faster than cached "
                "ones as the text grows from 256 to 1,024 tokens",
                expected="naive growth > cached growth",
                measured=f"naive {fmt_ratio(growth['naive'])}, cached "
                         f"{fmt_ratio(growth['cached'])}")
glue("ch1_speedup_1024", fmt_ratio(speedup_1024, 0))
glue("ch1_naive_1024", fmt_seconds(naive_time[1024]))
glue("ch1_cached_1024", fmt_seconds(cached_time[1024]))
glue("ch1_device", DEVICE)

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(lengths, [naive_time[t] * 1e3 for t in lengths], "o-", label="naive step")
ax.loglog(lengths, [cached_time[t] * 1e3 for t in lengths], "s-", label="cached decode step")
ax.set_xlabel("tokens already in the sequence, t")
ax.set_ylabel("time per new token (ms)")
ax.set_title(f"Measured on {DEVICE}", fontsize=9)
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# With 1,024 tokens in the sequence, the naive step takes {glue:text}`ch1_naive_1024` and the
# cached step {glue:text}`ch1_cached_1024` on {glue:text}`ch1_device`:
# {glue:text}`ch1_speedup_1024` faster per token.
#
# ### How fast can a decode step be?
#
# If a decode step is memory-bound, its floor is the time to read every weight (and the cache)
# once. We can measure how fast this device reads memory — the time to sum a large array, an
# operation that does nothing but read — and compare a decode step against it. A meaningful
# test needs weights large enough that reading them dominates the fixed costs of a step, so we
# use the library's `cpu-336mb` preset: {glue:text}`ch1_big_params` parameters,
# {glue:text}`ch1_big_weights` in float32.

# %%
big = get_preset("cpu-336mb")
big_params = decoder.init_params(big, seed=0)
big_step_fn = timing.decode_step_timer(big_params, big, 1, 128)
bytes_per_step = counts.param_bytes(big, 4) + counts.kv_cache_bytes(big, 1, 128, 4)
# Alternate the two measurements, so that anything else the machine is doing affects both.
rounds = []
for _ in range(3):
    read_bw = microbench.measure_bandwidth(1 << 29, repeats=5).reduction
    big_step = timing.time_fn(big_step_fn, repeats=5)
    rounds.append((read_bw, big_step))
read_bw = float(np.median([bw for bw, _ in rounds]))
step_s = float(np.median([s.median_s for _, s in rounds]))
achieved_bw = bytes_per_step / step_s
utilisation = achieved_bw / read_bw
del big_params

# %% tags=["hide-input"]
glue("ch1_big_params", fmt_count(counts.param_count(big)))
glue("ch1_big_weights", fmt_bytes(counts.param_bytes(big, 4), 0))
glue("ch1_big_bytes", fmt_bytes(bytes_per_step))
glue("ch1_read_bw", fmt_rate(read_bw))
glue("ch1_step_bw", fmt_rate(achieved_bw))
glue("ch1_big_step", fmt_seconds(step_s))
glue("ch1_utilisation", fmt_percent(utilisation))
print(f"{DEVICE}: reads {fmt_rate(read_bw)}; decode step {fmt_seconds(step_s)} (medians) "
      f"moves {fmt_bytes(bytes_per_step)} = {fmt_rate(achieved_bw)} ({fmt_percent(utilisation)})")
# The claim we make for CPUs: most of a step is reading memory. The floor is loose enough to
# hold while other programs share the machine (the test suite runs two notebooks at once);
# `inferbook bench`, run alone, checks the tighter target. On an accelerator this model is
# too small to hide the fixed cost of launching each kernel, and the ratio says more about
# launch overhead.
floor = 0.5
glue("ch1_floor", fmt_percent(floor, 0))
if info.platform == "cpu":
    expect_measured(utilisation >= floor, "a decode step of the cpu-336mb model streams its "
                    "bytes at a large part of the read bandwidth",
                    expected=f"at least {fmt_percent(floor)} of {fmt_rate(read_bw)}",
                    measured=f"{fmt_percent(utilisation)} ({fmt_rate(achieved_bw)})")

# %% [markdown]
# The decode step moves {glue:text}`ch1_big_bytes` in {glue:text}`ch1_big_step`, an effective
# {glue:text}`ch1_step_bw` — {glue:text}`ch1_utilisation` of the {glue:text}`ch1_read_bw` this
# device achieves on a plain read. A decode step is, to first order, a memory copy of the
# weights. (On a CPU the chapter expects at least {glue:text}`ch1_floor`; on a GPU or TPU this
# small model is dominated by kernel-launch overheads instead, which chapter 2 discusses.)
#
# ## What we optimise
#
# Training cares about one number, throughput. Serving cares about at least three
# {cite:p}`austin2025scaling`:
#
# - **time to first token (TTFT)** — the prefill of the prompt, plus any wait in a queue;
# - **time per output token (TPOT)** — one decode step, which sets how fast text streams out;
# - **throughput** — tokens produced per second per chip, which sets the cost.
#
# Different uses weigh them differently. *Offline* batch work (evaluations, synthetic data)
# cares only about throughput. A *chat* service must stream faster than people read while
# serving many users cheaply. *Edge* inference on a laptop serves one user and wants the lowest
# latency the hardware allows. Batching is the main lever, and it pulls throughput and latency
# apart: decoding several sequences together reads the weights once for all of them.

# %%
ttft = timing.time_fn(decode.prefill, params, cfg, tok_1T, jnp.array([T_prompt]), cache_1,
                     repeats=5).median_s
tpot = {B: timing.time_fn(timing.decode_step_timer(params, cfg, B, T_prompt + 1),
                         repeats=15).median_s for B in (1, 8)}
throughput = {B: B / tpot[B] for B in tpot}

# %% tags=["hide-input"]
expect_measured(throughput[8] > throughput[1], "batching raises the tokens per second",
                expected="batch 8 produces more tokens per second than batch 1",
                measured=f"{fmt_tokens_per_s(throughput[8])} against "
                         f"{fmt_tokens_per_s(throughput[1])}")
expect_measured(tpot[8] >= 0.9 * tpot[1], "batching makes no single sequence faster",
                expected="a batch-8 step takes at least 90% of a batch-1 step",
                measured=f"{fmt_seconds(tpot[8])} against {fmt_seconds(tpot[1])}")
glue("ch1_ttft", fmt_seconds(ttft)); glue("ch1_T_prompt", f"{T_prompt:,}")
glue("ch1_tpot1", fmt_seconds(tpot[1])); glue("ch1_tpot8", fmt_seconds(tpot[8]))
glue("ch1_tput1", fmt_tokens_per_s(throughput[1]))
glue("ch1_tput8", fmt_tokens_per_s(throughput[8]))
glue("ch1_tput_gain", fmt_ratio(throughput[8] / throughput[1]))
for B in tpot:
    print(f"batch {B}: TPOT {fmt_seconds(tpot[B])}, throughput "
          f"{fmt_tokens_per_s(throughput[B])}  ({DEVICE})")

# %% [markdown]
# For our small model on {glue:text}`ch1_device`, a {glue:text}`ch1_T_prompt`-token prompt
# reaches its first token after {glue:text}`ch1_ttft` of prefill. One sequence then decodes at
# {glue:text}`ch1_tpot1` per token ({glue:text}`ch1_tput1`); eight together take
# {glue:text}`ch1_tpot8` per step and produce {glue:text}`ch1_tput8`, {glue:text}`ch1_tput_gain`
# as many tokens per second, while no single sequence got faster. (On an accelerator the gain
# from batching approaches the ratio of the batch sizes; a CPU's matrix units run small
# batches inefficiently, which chapter 2 measures.) Chapters 2 and 3 turn this trade-off into equations, and chapter 11 into
# a serving engine.
#
# ## The price: memory
#
# The cache trades FLOPs for memory. Every token of every sequence stores a key and a value
# vector for each of the $K$ KV heads in each of the $L$ layers:
#
# $$\text{KV bytes per token} = 2 \cdot L \cdot K \cdot H \cdot \text{bytes per element}.$$
#
# The library's cache holds exactly that:

# %%
small_cache = kvcache.init_cache(cfg, 4, 1000)
assert kvcache.cache_bytes(small_cache) == counts.kv_cache_bytes(cfg, 4, 1000, 4)

llama13 = get_preset("llama-2-13b")
per_token = counts.kv_bytes_per_token(llama13, 2)
per_seq_8k = counts.kv_cache_bytes(llama13, 1, 8192, 2)
weights_13b = counts.param_bytes(llama13, 2)
caches_to_pass_weights = int(np.ceil(weights_13b / per_seq_8k))
assert 4 * per_seq_8k > weights_13b     # four 8k-token caches outweigh the whole model

# %% tags=["hide-input"]
glue("ch1_13b_per_token", fmt_bytes(per_token)); glue("ch1_13b_8k", fmt_bytes(per_seq_8k))
glue("ch1_13b_weights", fmt_bytes(weights_13b))
glue("ch1_13b_n_caches", str(caches_to_pass_weights))
print(f"LLaMA-2 13B, bfloat16: {fmt_bytes(per_token)} per token, {fmt_bytes(per_seq_8k)} per "
      f"8,192-token sequence; weights {fmt_bytes(weights_13b)}")

# %% [markdown]
# For LLaMA-2 13B in bfloat16 that is {glue:text}`ch1_13b_per_token` per token, or
# {glue:text}`ch1_13b_8k` for one sequence of 8,192 tokens. The weights occupy
# {glue:text}`ch1_13b_weights`, so {glue:text}`ch1_13b_n_caches` such sequences already need
# more memory than the model itself. And the cache is read in full at every decode step, so it
# costs bandwidth as well as capacity: a long conversation makes every one of its tokens slower.
# Chapter 5 measures that cost for popular models and takes apart the ways to shrink it —
# sharing KV heads, local attention, quantization, eviction, paging.
#
# ## Summary
#
# - Naive sampling recomputes the whole prefix for every token: $O(n^2)$ matrix work and
#   $O(n^3)$ attention work for $n$ tokens.
# - Causal masking means past keys and values never change, so they can be cached; with the
#   cache each step does $O(1)$ matrix work and $O(n)$ attention work, and the results are the
#   same.
# - Generation is two workloads: prefill (many tokens at once, compute-bound) and decode (one
#   token per sequence, memory-bound).
# - Serving optimises time to first token, time per output token and throughput, which batching
#   trades against each other.
# - The cache costs $2 L K H$ elements per token, which for real models quickly rivals the
#   weights.
