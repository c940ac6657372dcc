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
# # Exercises: sampling and the KV cache
#
# These exercises go with [chapter 1](../chapters/01_sampling_kv_cache.py). The first part
# recomputes the numbers of Lienhart's article on KV caching {cite:p}`lienhart2023kvcache`
# from the library's model presets and hardware table; the second counts the work of naive
# and cached generation; the third asks for three small functions the library is built on.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted* for a question you have not answered
# yet. The notebook runs from top to bottom at any stage, and `summary` at the end adds up
# your points. Numbers must be within the tolerance listed in the table below; functions are
# called on random inputs beside the library's own version, each call with a time limit.
#
# On the book's site every solution hides behind a *Show solution* toggle. The notebook you
# open in Colab has no solutions in it. Instructors grade a submitted notebook with
# `inferbook grade NOTEBOOK.ipynb --results results.json`, which also writes a Gradescope
# report.

# %%
import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf import counts
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch01")

# %% [markdown]
# ## Part 1: how big is the cache?
#
# A KV cache holds, for every token of every sequence, one key vector and one value vector of
# $H$ numbers for each of the $K$ key/value heads of each of the $L$ layers. The article sizes
# it for a small and a large model with multi-head attention ($K = N$): Meta's Llama-2-7B and
# BigScience's BLOOM-176B, both stored in 16-bit floats (2 bytes per number), and asks how much
# of an NVIDIA A10 — a 24 GB GPU popular for its price — is left for the cache once the weights
# are loaded. Here is everything you need:

# %%
llama = get_preset("llama-2-7b")
bloom = get_preset("bloom-176b")
a10 = get_chip("A10")
for cfg in (llama, bloom):
    print(f"{cfg.name:11s} L={cfg.L}, K={cfg.K}, H={cfg.H}, D={cfg.D}, V={cfg.V}; "
          f"{counts.param_count(cfg):,} parameters")
print(f"{a10.name}: hbm_bytes={a10.hbm_bytes:,.0f}  hbm_bytes_per_s={a10.hbm_bytes_per_s:,.0f}")
print(f"     bf16_flops_per_s={a10.bf16_flops_per_s:,.0f}")

# %% [markdown]
# **1.1** How many bytes of cache does one token of Llama-2-7B take, at 2 bytes per number?
# Write the formula with the preset's fields rather than reading the answer off
# `counts.kv_bytes_per_token` (the check compares with it).

# %%
# BEGIN SOLUTION
kv_bytes_llama = 2 * llama.L * llama.K * llama.H * 2      # a key and a value, per layer and head
# END SOLUTION

# %%
check("ch01.kv_bytes_per_token_llama_2_7b", kv_bytes_llama)

# %% [markdown]
# **1.2** The same for BLOOM-176B.

# %%
# BEGIN SOLUTION
kv_bytes_bloom = 2 * bloom.L * bloom.K * bloom.H * 2
# END SOLUTION

# %%
check("ch01.kv_bytes_per_token_bloom_176b", kv_bytes_bloom)

# %% [markdown]
# **1.3** Load Llama-2-7B's weights (2 bytes each) onto an A10. How many tokens of cache fit in
# the memory that is left? Count the parameters exactly (`counts.param_count`), and round
# down: a token's keys and values are stored whole or not at all.

# %%
# BEGIN SOLUTION
weight_bytes = counts.param_count(llama) * 2
a10_tokens = (a10.hbm_bytes - weight_bytes) // kv_bytes_llama
# END SOLUTION

# %%
check("ch01.a10_tokens_after_weights", a10_tokens)

# %% [markdown]
# That budget is shared by every sequence served at once, prompts and answers together: a few
# dozen conversations of a few hundred tokens each, on a GPU that holds the model comfortably.
#
# **1.4** After how many tokens does the cache of Llama-2-7B weigh as much as its weights?

# %%
# BEGIN SOLUTION
tokens_like_weights = counts.param_count(llama) * 2 / kv_bytes_llama
# END SOLUTION

# %%
check("ch01.weights_in_tokens", tokens_like_weights)

# %% [markdown] tags=["solution"]
# The article answers this with round numbers: 14 GB of weights over half a megabyte per
# token. The weights are rounded up — the model has fewer than seven billion parameters. Half
# a megabyte is a token's exact size in binary units and rounds it down in decimal ones (a
# token takes a little more than half a decimal megabyte). Either way the quotient comes out
# too high: a larger numerator, a denominator no larger. The library's exact counts avoid that
# (the errata page has the numbers).

# %% [markdown]
# **1.5** A user sends a prompt of 1,000 tokens (a little under two pages). How many bytes of
# cache does its prefill write?

# %%
# BEGIN SOLUTION
prompt_kv_bytes = 1000 * kv_bytes_llama
# END SOLUTION

# %%
check("ch01.prompt_kv_bytes", prompt_kv_bytes)

# %% [markdown]
# **1.6** And how many FLOPs does that prefill cost, by the rule of thumb of 2 FLOPs per
# parameter per token? Count as parameters the weights that multiply activations — every
# matrix, the output projection included — but not the embedding table (a lookup) or the
# normalisation gains.

# %%
# BEGIN SOLUTION
multiplying = counts.param_count(llama) - llama.V * llama.D - (2 * llama.L + 1) * llama.D
prompt_flops = 2 * multiplying * 1000
# END SOLUTION

# %%
check("ch01.prompt_flops", prompt_flops)

# %% [markdown]
# This is why providers charge for input tokens: before the first word of the answer, the
# prompt has already taken memory (1.5) and compute (1.6).
#
# ## Part 2: the work of naive and cached generation
#
# The library's estimator counts one forward pass of $T$ new tokens per sequence, each attending
# to $S$ keys, with the logits computed for a single position, as
#
# $$2\,W\,T \;+\; 4\,L\,N\,H\,T\,S \;+\; 2\,D\,V,$$
#
# where $W$ is the number of weights in the attention and MLP blocks of all layers
# ($D \times NH$ for $W_Q$ and $W_O$ each, $D \times KH$ for $W_K$ and $W_V$ each, three
# $D \times F$ matrices for the gated MLP), the middle term is the two attention products
# ($QK^\top$ and the weighted sum of values, each $2 T S H$ per head and layer), and the last
# is the unembedding of one position.
#
# **2.1** A sequence holds 1,000 tokens and we want the distribution of the next one.
# Without a cache, the model runs over all 1,000 tokens ($T = S = 1000$). With a cache, only
# the last token runs, against the keys of all 1,000 ($T = 1$, $S = 1000$). Count the FLOPs of
# both for Llama-2-7B.

# %%
# BEGIN SOLUTION
def step_flops(cfg, T, S):
    """FLOPs of one forward pass: T new tokens against S keys, one position unembedded."""
    W = cfg.L * (2 * cfg.D * cfg.N * cfg.H + 2 * cfg.D * cfg.K * cfg.H + 3 * cfg.D * cfg.F)
    return 2 * W * T + 4 * cfg.L * cfg.N * cfg.H * T * S + 2 * cfg.D * cfg.V


naive_step = step_flops(llama, 1000, 1000)
cached_step = step_flops(llama, 1, 1000)
# END SOLUTION

# %%
check("ch01.naive_step_flops", naive_step)
check("ch01.cached_step_flops", cached_step)

# %% [markdown]
# **2.2** Now generate 1,000 new tokens after a prompt of 100. Naively, step $i$
# ($i = 0, \dots, 999$) runs the model over all $100 + i$ tokens. With the cache, a prefill
# runs over the 100 prompt tokens once, then each step $i = 1, \dots, 999$ runs one token
# against $100 + i$ keys. How many times more FLOPs does naive generation take in total?

# %%
# BEGIN SOLUTION
p, n = 100, 1000
naive_total = sum(step_flops(llama, p + i, p + i) for i in range(n))
cached_total = step_flops(llama, p, p) + sum(step_flops(llama, 1, p + i) for i in range(1, n))
flops_ratio = naive_total / cached_total
# END SOLUTION

# %%
check("ch01.generation_flops_ratio", flops_ratio)

# %% [markdown]
# **2.3** A decode step at batch size 1 multiplies each 2-byte weight once, by one token: 2
# FLOPs per weight. Is that step memory-bound on an A10 — does it perform fewer FLOPs per byte
# it reads than the A10 can perform per byte it can read? Answer `True` or `False`, computed from
# the chip's numbers.

# %%
# BEGIN SOLUTION
flops_per_byte = 2 / 2
memory_bound = flops_per_byte < a10.bf16_flops_per_s / a10.hbm_bytes_per_s
# END SOLUTION

# %%
check("ch01.decode_memory_bound", memory_bound)

# %% [markdown]
# ## Part 3: three functions the library is built on
#
# Each function below is called by its check on a few random inputs, and its output compared
# with the library's (the check never shows you the library's output, but the hints say what
# to look for). JAX arrays cannot be changed in place: build new ones, with
# `x.at[index].set(values)` or `jax.lax.dynamic_update_slice`. Plain NumPy works too — return
# an array either way.
#
# **3.1 Writing to the cache.** The library keeps each layer's keys in an array
# `cache_BKSH` of shape $[B, K, S, H]$: sequence $b$, KV head $k$, slot $s$. A step computes
# `new_BTKH`, shape $[B, T, K, H]$, for $T$ new tokens per sequence, and sequence $b$ must
# store them in slots `start_B[b]`, …, `start_B[b]` $+ T - 1$ — each sequence of a batch
# starts at its own position. Return the updated cache (every write fits: no slot beyond $S$).

# %%
def write_kv(cache_BKSH, new_BTKH, start_B):
    """The cache with sequence b's T new entries at slots start_B[b] ... start_B[b] + T - 1."""
    # BEGIN SOLUTION
    out = cache_BKSH
    for b in range(cache_BKSH.shape[0]):
        block_1KTH = new_BTKH[b].transpose(1, 0, 2)[None].astype(out.dtype)
        out = jax.lax.dynamic_update_slice(out, block_1KTH, (b, 0, start_B[b], 0))
    return out
    # END SOLUTION


# %%
check("ch01.write_kv", write_kv)

# %% [markdown]
# **3.2 Merging two partial attentions.** Split the keys of a query into two disjoint parts —
# the cache and the new tokens, or two chunks of a long cache — and compute attention over
# each part on its own. Part $i$ gives an output $o_i$, already normalised over its own keys,
# and the log-sum-exp $\ell_i = \log \sum_{s \in \text{part } i} e^{x_s}$ of its scores. Over
# all keys together,
#
# $$\ell = \log\left(e^{\ell_1} + e^{\ell_2}\right), \qquad
#   o = e^{\ell_1 - \ell}\, o_1 + e^{\ell_2 - \ell}\, o_2 .$$
#
# Write `merge`, for outputs of shape $[B, T, N, H]$ and log-sum-exps of shape $[B, T, N]$;
# return `(out, lse)`. The log-sum-exps may be in the thousands (so $e^{\ell}$ overflows, even
# in float64) or $-10^{30}$, the library's stand-in for "no visible key in this part".

# %%
def merge(out1_BTNH, lse1_BTN, out2_BTNH, lse2_BTN):
    """Attention over the union of two disjoint sets of keys, from attention over each."""
    # BEGIN SOLUTION
    m_BTN = jnp.maximum(lse1_BTN, lse2_BTN)
    w1_BTN, w2_BTN = jnp.exp(lse1_BTN - m_BTN), jnp.exp(lse2_BTN - m_BTN)
    total_BTN = w1_BTN + w2_BTN
    out = (out1_BTNH * w1_BTN[..., None] + out2_BTNH * w2_BTN[..., None]) / total_BTN[..., None]
    return out, m_BTN + jnp.log(total_BTN)
    # END SOLUTION


# %%
check("ch01.merge_attention", merge)

# %% [markdown]
# **3.3 Top-k and top-p.** Before sampling, the library narrows the choice of each row of
# logits `logits_BV` ($[B, V]$). *Top-k* keeps the `top_k` largest logits. *Top-p* (nucleus)
# then takes the tokens still kept in decreasing order of probability (the softmax of the
# kept logits) and keeps each token while the probability mass *before* it is still below
# `top_p` — so the first token always stays, and the kept set is the smallest whose mass
# reaches `top_p`. Either may be `None` (off). Return the logits with every token that is not
# kept set to `-inf`. (No two logits of a row are equal.)

# %%
def filter_logits(logits_BV, top_k=None, top_p=None):
    """The logits, with the tokens outside the top-k / top-p support set to -inf."""
    # BEGIN SOLUTION
    logits = np.array(logits_BV, dtype=np.float32)
    for row in logits:
        order = np.argsort(-row)                       # token ids, largest logit first
        kept = order[: len(row) if top_k is None else top_k]
        if top_p is not None:
            probs = np.exp(row[kept] - row[kept[0]])
            probs /= probs.sum()
            kept = kept[np.cumsum(probs) - probs < top_p]
        removed = np.ones(len(row), bool)
        removed[kept] = False
        row[removed] = -np.inf
    return logits
    # END SOLUTION


# %%
check("ch01.filter_logits", filter_logits)

# %% [markdown]
# ## Your score

# %%
summary("ch01")
