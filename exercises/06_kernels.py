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
# # Exercises: attention kernels
#
# These exercises go with [chapter 6](../chapters/06_flash_attention.py) (FlashAttention) and
# [chapter 7](../chapters/07_decoding_kernels.py) (Flash-Decoding and paged attention). Part 1
# counts the bytes that standard and tiled attention move through a GPU's memory and the
# programs their grids launch {cite:p}`dao2022flashattention,dao2023flashattention2`; part 2
# asks for the online-softmax step at the heart of FlashAttention; part 3 is about decoding,
# where a single query meets a long cache {cite:p}`dao2023flashdecoding,kwon2023pagedattention`.
#
# **How it works.** Replace every `...` with your answer and every
# `raise NotImplementedError` with your code, then run the cell after it: `check` answers
# *passed*, *failed* (with a hint), or *not attempted*. The notebook runs from top to bottom
# at any stage, and `summary` at the end adds up your points. Numbers must be within the
# tolerance listed in the tables below; functions are called on random inputs beside the
# library's own version, each call with a time limit.

# %%
import inferbook

info = inferbook.setup()

import math

import jax
import jax.numpy as jnp
import numpy as np

from inferbook.book import bookdata
from inferbook.grading import check, summary
from inferbook.model.presets import get_preset
from inferbook.perf.hardware import get_chip

print(info.describe())
summary("ch06")
summary("ch07")

# %% [markdown]
# ## Part 1: what standard attention costs in memory traffic
#
# Take one attention head of width $H = 128$ in bfloat16 (2 bytes per number) during the
# prefill of an $n$-token prompt, $n = 8192$, so $T = S = n$. The textbook implementation runs
# three separate kernels, and each one reads its inputs from HBM and writes its result back:
#
# 1. scores $X = QK^\top/\sqrt{H}$ from $Q$ and $K$ — an $n \times n$ matrix, written out;
# 2. probabilities $P = \mathrm{softmax}(X)$ — $X$ read in, another $n \times n$ matrix out;
# 3. output $O = PV$ — $P$ and $V$ read in, $O$ written out.
#
# **1.1** How many bytes cross the HBM boundary for this one head?

# %%
n, H, b = 8192, 128, 2

# %%
# BEGIN SOLUTION
qkvo = 4 * n * H * b                      # read Q, K, V once, write O once
score_matrices = 4 * n * n * b            # write X, read X, write P, read P
standard_bytes = qkvo + score_matrices
# END SOLUTION

# %%
check("ch06.standard_attention_bytes", standard_bytes)

# %% [markdown]
# **1.2** FlashAttention never writes $X$ or $P$. It cuts the queries into tiles of
# $b_q = 128$ rows; a tile stays on chip while every tile of $K$ and $V$ streams past it. $Q$
# is read once and $O$ written once, but $K$ and $V$ are read again for every query tile. How
# many bytes does it move for the same head?

# %%
b_q = 128

# %%
# BEGIN SOLUTION
flash_bytes = 2 * n * H * b + (n / b_q) * 2 * n * H * b
# END SOLUTION

# %%
check("ch06.flash_attention_bytes", flash_bytes)

# %% [markdown]
# The quotient of the two tends to $2b_q/H$ as $n$ grows: a constant factor, and larger query
# tiles buy more of it — as far as the SRAM of one streaming multiprocessor (SM) allows.
#
# **1.3** A GPU kernel is a grid of thread blocks, and each SM runs the blocks given to it.
# FlashAttention-1 launched one thread block per (sequence, head). For a single Llama-2-7B
# prompt (batch 1) on an A100, what share of the SMs have a block to run? (At most 1.)

# %%
on_chip = {c["chip"]: c for c in bookdata.load("gpu_on_chip.json")["chips"]}
a100_sms = on_chip["A100 40GB"]["sms"]
llama = get_preset("llama-2-7b")
print(f"A100: {a100_sms} SMs; Llama-2-7B: N = {llama.N} query heads")

# %%
# BEGIN SOLUTION
fa1_busy = min(1.0, 1 * llama.N / a100_sms)
# END SOLUTION

# %%
check("ch06.fa1_busy_share", fa1_busy)

# %% [markdown]
# **1.4** FlashAttention-2 also puts the query tiles on the grid (they own disjoint rows of the
# output, so nothing ties them together). How many thread blocks does the same 8,192-token
# prompt launch with $b_q = 128$?

# %%
# BEGIN SOLUTION
fa2_programs = 1 * llama.N * (n // b_q)
# END SOLUTION

# %%
check("ch06.fa2_programs", fa2_programs)

# %% [markdown]
# ## Part 2: the online softmax
#
# A query tile walks through the key tiles one at a time, keeping three running quantities
# per row $r$ of the tile: $m_r$, the largest score so far; $\ell_r$, the sum of
# $e^{x - m_r}$ over the scores $x$ seen so far; and $o_r$, the sum of $e^{x - m_r} v$ over
# the same keys — an output not yet divided by $\ell_r$. A new tile of scores $s$ (shape
# $[R, C]$) with its values $v$ ($[C, H]$) may raise the maximum to $m'_r$; everything summed
# so far used the old maximum and must be rescaled by $e^{m_r - m'_r}$ before the new tile's
# terms are added {cite:p}`milakov2018online`. The softmax over all keys is $o / \ell$ at the
# end.
#
# **2.1** Write the step. Masked scores hold $-10^{30}$ (they add nothing); before the first
# tile, $m = -10^{30}$, $\ell = 0$, $o = 0$. Return the new `(o, m, l)`.

# %%
def online_softmax_step(o_RH, m_R, l_R, s_RC, v_CH):
    """Fold one tile of scores s [R, C] and its values v [C, H] into (o, m, l)."""
    # BEGIN SOLUTION
    m_new = jnp.maximum(m_R, s_RC.max(axis=1))
    rescale = jnp.exp(m_R - m_new)
    weights_RC = jnp.exp(s_RC - m_new[:, None])
    l_new = rescale * l_R + weights_RC.sum(axis=1)
    o_new = rescale[:, None] * o_RH + weights_RC @ v_CH
    return o_new, m_new, l_new
    # END SOLUTION


# %%
check("ch06.online_softmax_step", online_softmax_step)

# %% [markdown]
# ## Part 3: decoding
#
# At decode time each sequence brings one query per head. The work of attention is
# $4NSH$ FLOPs against a cache of $2KSH$ numbers, so its arithmetic intensity hardly depends
# on anything but $G = N/K$, the number of query heads that share each KV head.
#
# **3.1** How many FLOPs per byte does one decode step of Mistral-7B's attention perform at a
# context of $S = 8192$ tokens, with the query, output and cache in bfloat16? Count the bytes
# of the query and the output too (they hardly matter).

# %%
mistral = get_preset("mistral-7b")
S = 8192
print(f"Mistral-7B: N = {mistral.N}, K = {mistral.K}, H = {mistral.H}")

# %%
# BEGIN SOLUTION
flops = 4 * mistral.N * S * mistral.H
moved = 2 * mistral.N * mistral.H * 2 + 2 * mistral.K * S * mistral.H * 2
decode_intensity = flops / moved
# END SOLUTION

# %%
check("ch07.decode_intensity", decode_intensity)

# %% [markdown]
# A handful of FLOPs per byte, while an H100 needs hundreds to be compute-bound: decode
# attention runs at the speed the cache is read, and reading at full speed needs many SMs
# issuing loads. A kernel that handles the $G$ query heads of one KV head together gives
# $B \cdot K$ programs at batch $B$. Flash-Decoding also splits the cache into $P$ chunks,
# each its own program: $B \cdot K \cdot P$.
#
# **3.2** At batch 1, what is the smallest $P$ for which Mistral-7B's decode attention gives
# every SM of an H100 a program?

# %%
h100_sms = on_chip["H100 SXM"]["sms"]
print(f"H100: {h100_sms} SMs")

# %%
# BEGIN SOLUTION
splits = math.ceil(h100_sms / (1 * mistral.K))
# END SOLUTION

# %%
check("ch07.splits_to_fill", splits)

# %% [markdown]
# **3.3 Combining the chunks.** Chunk $p$ of the cache gives, for every query row, an output
# $o_p$ normalised over its own keys and the log-sum-exp $\ell_p$ of its scores. Over the whole
# cache, $\ell = \log \sum_p e^{\ell_p}$ and $o = \sum_p e^{\ell_p - \ell}\, o_p$. Write the
# combine for outputs `out_BKPMH` of shape $[B, K, P, M, H]$ (chunks on axis 2, $M$ query rows
# per KV head) and log-sum-exps `lse_BKPM`; return `(out [B, K, M, H], lse [B, K, M])`. The
# log-sum-exps can be in the thousands, and a chunk that saw no key at all (past the end of a
# short sequence) has $\ell_p = -\infty$ and must weigh nothing.

# %%
def combine_chunks(out_BKPMH, lse_BKPM):
    """Attention over the whole cache from attention over each of its P chunks."""
    # BEGIN SOLUTION
    m_BKM = lse_BKPM.max(axis=2)                                  # some chunk is finite
    w_BKPM = jnp.exp(lse_BKPM - m_BKM[:, :, None])                 # exp(-inf) = 0
    total_BKM = w_BKPM.sum(axis=2)
    out = jnp.einsum("BKPM,BKPMH->BKMH", w_BKPM, out_BKPMH) / total_BKM[..., None]
    return out, m_BKM + jnp.log(total_BKM)
    # END SOLUTION


# %%
check("ch07.combine_chunks", combine_chunks)

# %% [markdown]
# **3.4 Reading a paged cache.** PagedAttention keeps each layer's keys in a pool of
# fixed-size blocks, `pool_NKCH` of shape $[\text{blocks}, K, C, H]$ with $C$ tokens per
# block, and each sequence has a row in a block table `block_table_BJ` ($[B, J]$) listing its
# blocks in order. The simplest attention over a paged cache first gathers every sequence's
# blocks into a contiguous cache $[B, K, J \cdot C, H]$ — position $p$ of sequence $b$ at
# index $p$ — and runs ordinary attention on it. Write that gather. (Blocks may appear in
# several rows: sequences can share a prefix.)

# %%
def gather_blocks(pool_NKCH, block_table_BJ):
    """Each sequence's blocks, in order, as a contiguous cache [B, K, J·C, H]."""
    # BEGIN SOLUTION
    blocks_BJKCH = pool_NKCH[block_table_BJ]
    B, J, K, C, H = blocks_BJKCH.shape
    return blocks_BJKCH.transpose(0, 2, 1, 3, 4).reshape(B, K, J * C, H)
    # END SOLUTION


# %%
check("ch07.gather_blocks", gather_blocks)

# %% [markdown]
# ## Your score

# %%
summary("ch06")
summary("ch07")
