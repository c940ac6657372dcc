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
# # Exercises: serving
#
# These exercises go with [chapter 11](../chapters/11_inference_engine.py) (the inference
# engine), [chapter 12](../chapters/12_paged_kv_prefix_caching.py) (paged KV memory and prefix
# caching) and [chapter 13](../chapters/13_speculative_decoding.py) (speculative decoding).
# Part 1 schedules requests by hand and prices disaggregated serving with the estimator; part 2
# counts what paging saves {cite:p}`kwon2023pagedattention` and asks for the block-table lookup
# and the prefix-cache match {cite:p}`zheng2024sglang`; part 3 works through the arithmetic of
# speculative decoding and its acceptance rule {cite:p}`leviathan2023speculative`.
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
from inferbook.model.presets import get_preset
from inferbook.perf import counts
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch11")
summary("ch12")
summary("ch13")

# %% [markdown]
# ## Part 1: scheduling and its costs
#
# An engine with four decode slots receives eight requests at once. Each asks for a number of
# new tokens, listed below in arrival order. Prefilling a request yields its first token;
# every *generate step* then gives each request in a slot one more token, and a request
# leaves its slot once it has all of its tokens.
#
# **1.1** *Static batching* takes the first four requests, prefills them together, and runs
# generate steps until the last of the four is done; then it takes the next four. How many
# generate steps does it run in all?

# %%
output_lengths = [3, 12, 5, 7, 20, 2, 9, 4]
slots = 4

# %%
# BEGIN SOLUTION
static_steps = sum(max(output_lengths[i:i + slots]) - 1
                   for i in range(0, len(output_lengths), slots))
# END SOLUTION

# %%
check("ch11.static_steps", static_steps)

# %% [markdown]
# **1.2** An engine that refills a slot as soon as it frees up (interleaving prefills with
# generate steps, as JetStream does {cite:p}`jetstream2024`) prefills the next waiting request
# into every free slot before each generate step. How many generate steps does it need for the
# same eight requests? Simulate it.

# %%
# BEGIN SOLUTION
waiting = list(output_lengths)
running = []                                  # tokens still to come for each occupied slot
interleaved_steps = 0
while waiting or running:
    while waiting and len(running) < slots:
        left = waiting.pop(0) - 1             # the prefill gave the first token
        if left > 0:
            running.append(left)
    if running:
        interleaved_steps += 1
        running = [r - 1 for r in running if r > 1]
# END SOLUTION

# %%
check("ch11.interleaved_steps", interleaved_steps)

# %% [markdown]
# The library's orchestrator replays exactly these schedules (chapter 11), and the check
# counts its generate calls. Next, the costs behind *disaggregated* serving, where one server
# prefills and another generates, by the estimator's roofline model: a decode step reads the
# KV cache of the whole batch at HBM speed plus the weights (or spends the matmuls' time, if
# that is longer); a prefill takes the longer of its FLOPs at peak and its bytes at HBM speed;
# shipping a prompt's KV cache costs its bytes over the link.
#
# **1.3** One decode step of Llama-2-7B on a TPU v5e: a batch of 32 sequences with 2,048
# tokens of context each, weights and cache in bfloat16. Use `counts.param_bytes`,
# `counts.kv_bytes_per_token` and `counts.forward_flops(cfg, batch, 1, 0, logits_for=1)`.

# %%
llama = get_preset("llama-2-7b")
v5e = get_chip("TPU v5e")

# %%
# BEGIN SOLUTION
kv_read = 32 * 2048 * counts.kv_bytes_per_token(llama, 2) / v5e.hbm_bytes_per_s
weights_read = counts.param_bytes(llama, 2) / v5e.hbm_bytes_per_s
matmuls = counts.forward_flops(llama, 32, 1, 0, logits_for=1) / v5e.bf16_flops_per_s
decode_step = kv_read + max(weights_read, matmuls)
# END SOLUTION

# %%
check("ch11.decode_step_seconds", decode_step)

# %% [markdown]
# **1.4** The prefill of one 4,096-token prompt on the same chip (no cached prefix): FLOPs
# from `counts.forward_flops(cfg, 1, 4096, 4096, logits_for=1)`; bytes: the weights, plus
# the new tokens' KV cache written.

# %%
# BEGIN SOLUTION
prefill_flops = counts.forward_flops(llama, 1, 4096, 4096, logits_for=1)
prefill_bytes = counts.param_bytes(llama, 2) + 4096 * counts.kv_bytes_per_token(llama, 2)
prefill_s = max(prefill_flops / v5e.bf16_flops_per_s, prefill_bytes / v5e.hbm_bytes_per_s)
# END SOLUTION

# %%
check("ch11.prefill_seconds", prefill_s)

# %% [markdown]
# **1.5** How long does shipping that prompt's KV cache to the generate server take over one
# of the chip's interconnect links (`link_bytes_per_s`, one way)?

# %%
# BEGIN SOLUTION
transfer_s = 4096 * 2 * llama.L * llama.K * llama.H * 2 / v5e.link_bytes_per_s
# END SOLUTION

# %%
check("ch11.kv_transfer_seconds", transfer_s)

# %% [markdown]
# ## Part 2: paged KV memory and prefix caching
#
# A paged cache hands out memory in blocks of `block_size` tokens, as a sequence needs them.
# Eight sequences hold the numbers of tokens below; blocks hold 16 tokens.
#
# **2.1** How many blocks do they occupy?

# %%
lengths = [37, 512, 129, 16, 1000, 250, 3, 64]
block_size = 16

# %%
# BEGIN SOLUTION
blocks = sum(math.ceil(n / block_size) for n in lengths)
# END SOLUTION

# %%
check("ch12.blocks_needed", blocks)

# %% [markdown]
# **2.2** What share of the token slots in those blocks holds nothing (the unfilled tails of
# the last blocks)?

# %%
# BEGIN SOLUTION
paged_waste = 1 - sum(lengths) / (blocks * block_size)
# END SOLUTION

# %%
check("ch12.paged_waste", paged_waste)

# %% [markdown]
# **2.3** A contiguous cache instead reserves the model's maximum length, 2,048 tokens, for
# every sequence up front. What share of that reservation holds nothing?

# %%
# BEGIN SOLUTION
contiguous_waste = 1 - sum(lengths) / (len(lengths) * 2048)
# END SOLUTION

# %%
check("ch12.contiguous_waste", contiguous_waste)

# %% [markdown]
# **2.4 The block table.** Number the pool's token slots block by block: block $n$ holds slots
# $n \cdot C, \dots, n \cdot C + C - 1$ for blocks of $C$ tokens. Row $b$ of the block table
# `block_table_BJ` ($[B, J]$) lists sequence $b$'s blocks in order, so its $j$-th block holds
# its positions $jC, \dots, jC + C - 1$. Given positions `pos_BT` ($[B, T]$, each below
# $J \cdot C$), return the physical slot of each, an integer array $[B, T]$.

# %%
def physical_slot(block_table_BJ, pos_BT, block_size):
    """The pool slot that holds position pos_BT[b, t] of sequence b."""
    # BEGIN SOLUTION
    table = np.asarray(block_table_BJ)
    pos = np.asarray(pos_BT)
    block = np.take_along_axis(table, pos // block_size, axis=1)
    return block * block_size + pos % block_size
    # END SOLUTION


# %%
check("ch12.physical_slot", physical_slot)

# %% [markdown]
# **2.5 The prefix cache.** A prefix cache remembers the KV blocks of earlier prompts so that a
# new prompt beginning the same way skips that part of its prefill. It keeps only *full*
# blocks, and a block is reusable only together with everything before it (its keys and values
# depend on every earlier token). Given the earlier prompts (lists of token ids, all of them
# cached), a new prompt and the block size, return how many tokens of the new prompt the cache
# can supply.

# %%
def prefix_match(cached_prompts, prompt, block_size):
    """Tokens of `prompt` covered by the longest cached prefix, in whole blocks."""
    # BEGIN SOLUTION
    best = 0
    for old in cached_prompts:
        full = min(len(old), len(prompt)) // block_size
        k = 0
        while k < full and old[k * block_size:(k + 1) * block_size] == \
                prompt[k * block_size:(k + 1) * block_size]:
            k += 1
        best = max(best, k)
    return best * block_size
    # END SOLUTION


# %%
check("ch12.prefix_match", prefix_match)

# %% [markdown]
# ## Part 3: speculative decoding
#
# A draft model proposes $\gamma$ tokens; the target model scores all of them in one forward
# pass and keeps the longest acceptable run, plus one token of its own. Under the analysis of
# {cite:t}`leviathan2023speculative`, each draft is accepted with the same probability
# $\alpha$, independently of the others.
#
# **3.1** A draft token $x$ drawn from the draft's distribution $q$ survives with probability
# $\min(1, p(x)/q(x))$, where $p$ is the target's distribution. What is $\alpha$ for the two
# distributions below?

# %%
p_target = [0.40, 0.25, 0.20, 0.10, 0.05]
q_draft = [0.20, 0.45, 0.15, 0.10, 0.10]

# %%
# BEGIN SOLUTION
alpha_pq = sum(min(a, c) for a, c in zip(p_target, q_draft))
# END SOLUTION

# %%
check("ch13.acceptance_rate", alpha_pq)

# %% [markdown]
# **3.2** With $\alpha = 0.8$ and $\gamma = 4$, how many tokens does one target step yield on
# average?

# %%
alpha, gamma, c = 0.8, 4, 0.05

# %%
# BEGIN SOLUTION
expected_tokens = (1 - alpha ** (gamma + 1)) / (1 - alpha)
# END SOLUTION

# %%
check("ch13.expected_tokens", expected_tokens)

# %% [markdown]
# **3.3** A draft step costs $c = 0.05$ target steps. How much faster than plain decoding is
# speculative decoding with these numbers, if a target step costs the same whether it scores
# one token or $\gamma + 1$?

# %%
# BEGIN SOLUTION
speedup = expected_tokens / (gamma * c + 1)
# END SOLUTION

# %%
check("ch13.speedup", speedup)

# %% [markdown]
# **3.4** Which $\gamma$ between 0 and 32 gives the largest speedup at $\alpha = 0.8$,
# $c = 0.05$?

# %%
# BEGIN SOLUTION
best_gamma = max(range(33), key=lambda g: (1 - alpha ** (g + 1)) / (1 - alpha) / (g * c + 1))
# END SOLUTION

# %%
check("ch13.best_gamma", best_gamma)

# %% [markdown]
# **3.5 The acceptance rule.** Write the rule with its random numbers given. `drafts` holds
# the $\gamma$ proposed tokens; `q[i]` ($\gamma$ rows of $V$) is the draft's distribution
# for draft $i$; `p[i]` the target's distribution at the same position, with one extra row
# `p[γ]` for the position after the last draft ($\gamma + 1$ rows); `u` one uniform number
# in $[0, 1)$ per draft. Draft $i$ (token $x$) is accepted when
# $u_i \cdot q_i(x) < p_i(x)$; the first rejection ends the run. Return `(n, dist)`: the
# number of drafts accepted, and the distribution the target's own token is then drawn from —
# the *residual* $\max(0, p_n - q_n)$, renormalised, after a rejection at draft $n$, or
# $p_\gamma$ itself when every draft was accepted. This rule makes every emitted token follow
# $p$ exactly, whatever $q$ is.

# %%
def accept(drafts, q, p, u):
    """(accepted drafts, distribution of the target's token) of one speculative round."""
    # BEGIN SOLUTION
    drafts, q, p, u = (np.asarray(a) for a in (drafts, q, p, u))
    n = 0
    while n < len(drafts) and u[n] * q[n, drafts[n]] < p[n, drafts[n]]:
        n += 1
    if n == len(drafts):
        return n, p[n]
    residual = np.maximum(p[n] - q[n], 0.0)
    return n, residual / residual.sum()
    # END SOLUTION


# %%
check("ch13.accept", accept)

# %% [markdown]
# ## Your score

# %%
summary("ch11")
summary("ch12")
summary("ch13")
