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
# # FlashAttention: IO-aware attention for prefill
#
# Attention as written in the textbook — scores $QK^\top/\sqrt{H}$, a softmax, a product with
# $V$ — is exact, simple, and on a GPU mostly a memory benchmark. For a prompt of $T$ tokens it
# computes a $T \times S$ matrix of scores, writes it to memory, reads it back to exponentiate
# it, writes the probabilities, and reads those back to multiply them by $V$. The arithmetic is
# cheap next to that traffic, and the matrix grows with the square of the sequence.
#
# FlashAttention {cite:p}`dao2022flashattention` computes the same numbers without ever
# writing that matrix. It is not an approximation: it reorders the computation so that each
# piece of $Q$, $K$ and $V$ is used as often as possible while it sits in fast on-chip memory,
# and it makes the softmax — which looks like it needs a whole row at once — work one block
# of keys at a time. This chapter derives it step by step, implements it in JAX, checks it
# against the reference, measures what it saves on your device, and then walks through the
# changes of FlashAttention-2 {cite:p}`dao2023flashattention2`. The decode-time descendants
# (Flash-Decoding, FlashDecoding++, paged attention) are chapter 7.

# %%
from functools import partial

import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.kernels import flash, kernel_bench
from inferbook.kernels.pallas import pallas_flash_attention
from inferbook.model.attention import reference_at_positions
from inferbook.perf import compiled, timing
from inferbook.perf.hardware import get_chip

print(info.describe())
DEVICE = timing.device_name()
on_chip = bookdata.load("gpu_on_chip.json")
chip_data = {c["chip"]: c for c in on_chip["chips"]}

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
# ## The memory hierarchy
#
# A GPU has a large, slow memory and a small, fast one. The weights, the activations and the
# KV cache live in high-bandwidth memory (HBM), tens of gigabytes off the compute die. Each of
# the chip's streaming multiprocessors (SMs) has a few hundred kilobytes of on-chip SRAM
# (registers, shared memory, L1) that it can read an order of magnitude faster. The
# FlashAttention paper's figures for an A100:

# %%
hierarchy = on_chip["memory_hierarchy"]
levels = {lv["level"]: lv for lv in hierarchy["levels"]}
sram, hbm = levels["on-chip SRAM"], levels["HBM"]
a100 = get_chip("A100 40GB")
a100_sms = chip_data["A100 40GB"]["sms"]
assert sram["bytes_per_s"] > 10 * hbm["bytes_per_s"] and hbm["bytes"] > 1000 * sram["bytes"]

# %% tags=["hide-input"]
for level in hierarchy["levels"]:
    print(f"{level['level']:>13s}: {fmt_bytes(level['bytes']):>8s} at {fmt_rate(level['bytes_per_s'])}")
print(f"(source: {hierarchy['source']})")
glue("ch6_sram_speed", fmt_ratio(sram["bytes_per_s"] / hbm["bytes_per_s"], 0))
glue("ch6_hbm_size", fmt_ratio(hbm["bytes"] / sram["bytes"], 0))
glue("ch6_sram_per_sm", fmt_bytes(chip_data["A100 40GB"]["sram_per_sm_bytes"], 0))
glue("ch6_a100_sms", str(a100_sms))
glue("ch6_a100_ridge", f"{a100.bf16_flops_per_s / a100.hbm_bytes_per_s:,.0f}")

# %% [markdown]
# On-chip SRAM is {glue:text}`ch6_sram_speed` faster than HBM and HBM is
# {glue:text}`ch6_hbm_size` larger; the SRAM is split into {glue:text}`ch6_a100_sms` slices of
# {glue:text}`ch6_sram_per_sm`, one per SM. Every kernel a GPU runs reads its inputs from HBM
# into SRAM, computes, and writes its outputs back. Whether the kernel is fast depends on how
# much arithmetic it does per byte it moves: the A100 performs
# {glue:text}`ch6_a100_ridge` bfloat16 FLOPs in the time it reads one byte from HBM
# (chapter 2's *critical intensity*). Below that a kernel waits for memory; above it, for
# arithmetic.
#
# ## Standard attention is bound by memory traffic
#
# For one head, with $Q \in \mathbb{R}^{T \times H}$ and $K, V \in \mathbb{R}^{S \times H}$,
# the standard implementation runs three kernels:
#
# 1. read $Q$ and $K$, compute $X = QK^\top / \sqrt{H}$, write $X$ ($T \times S$);
# 2. read $X$, compute $P = \mathrm{softmax}(X)$ row by row, write $P$ ($T \times S$);
# 3. read $P$ and $V$, compute $O = PV$, write $O$ ($T \times H$).
#
# Its HBM traffic is $b\,(2TH + 2SH + 4TS)$ bytes for $b$ bytes per element, while its
# arithmetic is the two products, $4TSH$ FLOPs. For a prefill, $T = S = n$: the $4n^2$ term
# dominates, and the arithmetic intensity approaches $4n^2H / 4bn^2 = H/b$.

# %%
def standard_io_bytes(T, S, H, b):
    """HBM bytes of the three-kernel attention above (one head)."""
    return b * (2 * T * H + 2 * S * H + 4 * T * S)


def attention_flops(T, S, H):
    return 4 * T * S * H


H_gpu, b16 = 128, 2
ns = [1024, 2048, 4096, 8192, 16384, 32768]
intensity = {n: attention_flops(n, n, H_gpu) / standard_io_bytes(n, n, H_gpu, b16) for n in ns}
ridge = a100.bf16_flops_per_s / a100.hbm_bytes_per_s
assert all(i < H_gpu / b16 <= ridge for i in intensity.values())
n_ex = 8192
t_mem = standard_io_bytes(n_ex, n_ex, H_gpu, b16) / a100.hbm_bytes_per_s
t_flop = attention_flops(n_ex, n_ex, H_gpu) / a100.bf16_flops_per_s
assert t_mem > t_flop

# %% tags=["hide-input"]
glue("ch6_std_intensity", f"{intensity[n_ex]:.0f}")
glue("ch6_std_of_ridge", fmt_percent(intensity[n_ex] / ridge))
glue("ch6_std_tmem", fmt_seconds(t_mem)); glue("ch6_std_tflop", fmt_seconds(t_flop))
glue("ch6_n_ex", f"{n_ex:,}")

# %% [markdown]
# With $H = 128$ in bfloat16 that is {glue:text}`ch6_std_intensity` FLOPs per byte at
# $n =$ {glue:text}`ch6_n_ex`, {glue:text}`ch6_std_of_ridge` of the A100's {glue:text}`ch6_a100_ridge`: for one
# head, the A100 needs {glue:text}`ch6_std_tmem` to move the bytes and only
# {glue:text}`ch6_std_tflop` to do the arithmetic. The softmax in the middle is worse still —
# a few FLOPs per element of a matrix that is read and written in full.
#
# We can check the traffic count against a real compiler. XLA reports, for a compiled program,
# how many bytes its instructions read and write. Here is the library's reference attention
# (`attention_reference`, which follows the three steps above) compiled on this device for one
# head of width 64 in float32:

# %%
ref = jax.jit(reference_at_positions)
xla_bytes, xla_flops = {}, {}
for n in (1024, 2048):
    cost = compiled.compiled_cost(ref, *kernel_bench.attention_inputs(1, n, n, 1, 1, 64, "float32"))
    xla_bytes[n], xla_flops[n] = cost["bytes_accessed"], cost["flops"]
    print(f"n={n:5d}: XLA counts {fmt_bytes(xla_bytes[n])} moved, {fmt_flops(xla_flops[n])}; "
          f"the three-kernel count is {fmt_bytes(standard_io_bytes(n, n, 64, 4))}")
# At least the textbook's traffic, and quadratic in n: doubling n quadruples it.
assert all(xla_bytes[n] >= standard_io_bytes(n, n, 64, 4) for n in xla_bytes)
assert 3.5 < xla_bytes[2048] / xla_bytes[1024] < 4.5

# %% tags=["hide-input"]
glue("ch6_xla_intensity", f"{xla_flops[2048] / xla_bytes[2048]:.0f}")
glue("ch6_xla_vs_count", fmt_ratio(xla_bytes[2048] / standard_io_bytes(2048, 2048, 64, 4)))

# %% [markdown]
# The compiled program moves {glue:text}`ch6_xla_vs_count` the three-kernel count (it makes
# extra passes over the score matrix for the mask and the softmax's maximum and sum),
# quadrupling each time $n$ doubles, and performs {glue:text}`ch6_xla_intensity` FLOPs per
# byte. Making the arithmetic faster would not help; moving fewer bytes would.
#
# ## Softmax one block at a time
#
# The obstacle to fusing the three steps is the softmax: row $i$ of $P$ needs every score of
# row $i$ before it can normalise any of them. FlashAttention removes the obstacle with
# three small observations.
#
# **1. Subtracting the row maximum changes nothing — and is necessary.** Softmax is invariant
# to shifting its inputs, $\mathrm{softmax}(x) = \mathrm{softmax}(x - c)$, and
# $e^{x}$ overflows float32 beyond $x \approx$ {glue:text}`ch6_exp_limit`, so every
# implementation subtracts the maximum $m = \max_j x_j$ first:

# %%
exp_limit = float(np.log(np.finfo(np.float32).max))
x = np.array([100.0, 101.0, 99.0], np.float32)
assert x.max() > exp_limit
with np.errstate(over="ignore", invalid="ignore"):
    unsafe = np.exp(x) / np.exp(x).sum()
safe = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
assert np.isnan(unsafe).all() and np.isclose(safe.sum(), 1.0)

# %% tags=["hide-input"]
glue("ch6_exp_limit", f"{exp_limit:.1f}")
print("exp(x) / sum:        ", unsafe, "\nexp(x - m) / sum:    ", safe)

# %% [markdown]
# **2. Two blocks can be normalised separately and merged.** Split a row of scores into
# $x^{(1)}$ and $x^{(2)}$. Each block has its own maximum $m_i$ and sum
# $\ell_i = \sum_j e^{x^{(i)}_j - m_i}$. With $m = \max(m_1, m_2)$,
#
# $$\ell = e^{m_1 - m}\,\ell_1 + e^{m_2 - m}\,\ell_2,
# \qquad \mathrm{softmax}(x) = \big[e^{x^{(1)} - m},\; e^{x^{(2)} - m}\big] / \ell .$$
#
# Each block's statistics are rescaled by $e^{m_i - m}$ — the factor that converts
# "exponentials relative to my maximum" into "exponentials relative to the overall maximum".

# %%
rng = np.random.default_rng(0)
x = rng.normal(size=12) * 3
x1, x2 = x[:5], x[5:]
m1, m2 = x1.max(), x2.max()
l1, l2 = np.exp(x1 - m1).sum(), np.exp(x2 - m2).sum()
m = max(m1, m2)
l = np.exp(m1 - m) * l1 + np.exp(m2 - m) * l2
merged = np.concatenate([np.exp(x1 - m), np.exp(x2 - m)]) / l
np.testing.assert_allclose(merged, np.exp(x - x.max()) / np.exp(x - x.max()).sum(), rtol=1e-12)
print("two-block softmax equals the softmax of the whole row")

# %% [markdown]
# **3. The output can be rescaled the same way, so nothing has to be kept but three running
# quantities per row.** We never need $P$ itself, only $O = PV$. Walk through the keys block
# by block, keeping for each query row the running maximum $m$, the running sum $\ell$ and the
# *unnormalised* output $o = \sum_j e^{x_j - m} v_j$. When block $j$ arrives with scores
# $x^{(j)}$:
#
# $$m' = \max\!\big(m, \max x^{(j)}\big), \quad
# \ell' = e^{m - m'}\ell + \sum e^{x^{(j)} - m'}, \quad
# o' = e^{m - m'}\,o + e^{x^{(j)} - m'}\, V^{(j)} .$$
#
# After the last block, $O = o / \ell$, and as a by-product $\log \ell + m$ is the row's
# log-sum-exp, $\log \sum_j e^{x_j}$. This is the *online softmax* of
# {cite:t}`milakov2018online`, applied to attention (see also {cite:t}`rabe2021selfattention`).
# Written from scratch for one query row, in numpy:

# %%
def attention_row_by_blocks(q_H, K_SH, V_SH, block):
    """One query row's attention, visiting the keys `block` at a time."""
    m, l, o = -np.inf, 0.0, np.zeros(V_SH.shape[1])
    for start in range(0, len(K_SH), block):
        x = K_SH[start:start + block] @ q_H / np.sqrt(len(q_H))
        m_new = max(m, x.max())
        p = np.exp(x - m_new)
        l = np.exp(m - m_new) * l + p.sum()
        o = np.exp(m - m_new) * o + p @ V_SH[start:start + block]
        m = m_new
    return o / l, m + np.log(l)


S_demo, H_demo = 300, 16
q_H = rng.normal(size=H_demo)
K_SH, V_SH = rng.normal(size=(S_demo, H_demo)), rng.normal(size=(S_demo, H_demo))
scores = K_SH @ q_H / np.sqrt(H_demo)
p_full = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
for block in (1, 7, 64, 300):
    o_blk, lse_blk = attention_row_by_blocks(q_H, K_SH, V_SH, block)
    np.testing.assert_allclose(o_blk, p_full @ V_SH, rtol=1e-10)
    np.testing.assert_allclose(lse_blk, np.log(np.exp(scores).sum()), rtol=1e-12)
print("block by block equals the full softmax, for every block size")

# %% [markdown]
# FlashAttention is this loop, with one more level of tiling: a *block of query rows* is
# processed together, so each tile of keys and values read from HBM serves all of them. The
# library's version takes query tiles of `block_q` rows and KV tiles of `block_k` keys, handles
# grouped-query heads (the $G$ query heads of one KV head share a tile of $K$ and $V$), and
# builds each tile's piece of the causal, padding and window mask from positions instead of
# reading a $T \times S$ mask. The update step, the final division by the running sum, and
# the kernel:

# %%
show_source(flash.online_softmax_step, flash.online_softmax_result, flash.flash_attention)

# %% [markdown]
# Two details are worth pointing at. The loop over KV tiles runs from `lo` to `hi` — only the
# tiles some query in the block can see — so a causal prefill visits about half of them. And
# the function returns the log-sum-exp beside the output: with it, attention over two sets of
# keys can be merged exactly (chapter 1's decode step already does this; chapter 7 builds on it).
# Against the reference, on a ragged batch with grouped-query heads and a sliding window:

# %%
B, T, N, K, H = 3, 200, 8, 2, 32
keys = jax.random.split(jax.random.key(0), 3)
q = jax.random.normal(keys[0], (B, T, N, H))
k, v = (jax.random.normal(kk, (B, K, T, H)) for kk in keys[1:])
lengths = jnp.array([200, 137, 9])
q_pos = jnp.broadcast_to(jnp.arange(T), (B, T))
visible = jnp.arange(T)[None, :] < lengths[:, None]          # padding rows are ignored
blockwise_jit = jax.jit(flash.flash_attention, static_argnames=("window", "block_q", "block_k"))
reference_jit = jax.jit(reference_at_positions, static_argnames=("window",))
for window in (64,):
    out, lse = blockwise_jit(q, k, v, q_pos, lengths, window, block_q=32, block_k=48)
    ref_out, ref_lse = reference_jit(q, k, v, q_pos, lengths, window)
    err = float(jnp.max(jnp.where(visible[..., None, None], jnp.abs(out - ref_out), 0)))
    err_lse = float(jnp.max(jnp.where(visible[..., None], jnp.abs(lse - ref_lse), 0)))
    assert err < 1e-5 and err_lse < 1e-5, (err, err_lse)
    print(f"window={window}: largest difference from the reference {err:.1e} (output), "
          f"{err_lse:.1e} (log-sum-exp)")

# %% [markdown]
# ## What tiling saves
#
# Each query tile of $b_q$ rows reads $Q$ once, then every tile of $K$ and $V$ once, and
# writes its output once. Nothing of size $T \times S$ touches HBM:
#
# $$\text{bytes} \approx b\,\Big(2TH + \frac{T}{b_q}\cdot 2SH\Big).$$
#
# The $K$, $V$ term is re-read $T/b_q$ times, so bigger query tiles help, up to what fits in
# an SM's SRAM: a tile of {glue:text}`ch6_bq` queries plus tiles of {glue:text}`ch6_bk` keys
# and values, with $H = 128$ in bfloat16, take {glue:text}`ch6_tile_kb`. For a prefill the
# ratio of the two counts tends to $4n^2 / (2n^2H/b_q) = 2b_q/H$: a constant factor, set by how
# many query rows share each load of $K$ and $V$. {cite:t}`dao2022flashattention` show that no
# exact algorithm does better than $\Theta(n^2H^2/M)$ HBM accesses for SRAM of size $M$, which
# tiling achieves; on a real GPU the concurrently running query tiles of one head also share
# $K$ and $V$ through the L2 cache, so the measured traffic is lower than this count.

# %%
def flash_io_bytes(T, S, H, b, block_q):
    return b * (2 * T * H + (T / block_q) * 2 * S * H)


block_q_gpu, block_k_gpu = 128, 64
tile_bytes = b16 * (block_q_gpu * H_gpu + 2 * block_k_gpu * H_gpu)
assert tile_bytes <= chip_data["A100 40GB"]["sram_per_sm_bytes"]
std_b = np.array([standard_io_bytes(n, n, H_gpu, b16) for n in ns])
fl_b = np.array([flash_io_bytes(n, n, H_gpu, b16, block_q_gpu) for n in ns])
assert (fl_b < std_b).all()
assert abs((std_b / fl_b)[-1] / (2 * block_q_gpu / H_gpu) - 1) < 0.05   # → 2·b_q / H

# %% tags=["hide-input"]
glue("ch6_tile_kb", fmt_bytes(tile_bytes, 0))
glue("ch6_bq", str(block_q_gpu)); glue("ch6_bk", str(block_k_gpu))
glue("ch6_io_saving", fmt_ratio(std_b[ns.index(n_ex)] / fl_b[ns.index(n_ex)]))

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(ns, std_b, "o-", label="standard (writes and reads the n × n matrices)")
ax.loglog(ns, fl_b, "s-", label=f"FlashAttention, {block_q_gpu}-row query tiles")
ax.set_xlabel("sequence length n (T = S)")
ax.set_ylabel("HBM bytes per head (bfloat16, H = 128)")
ax.set_title("Attention's memory traffic, by the count above")
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# At $n =$ {glue:text}`ch6_n_ex` FlashAttention moves {glue:text}`ch6_io_saving` fewer bytes
# than the standard algorithm by this count, while doing the same matrix products (plus the
# cheap rescaling) — and more importantly the bytes it does move are the inputs, read in large
# contiguous tiles, not a quadratic intermediate. Its memory *footprint* changes even more: the
# standard algorithm must hold an $n \times n$ matrix somewhere, FlashAttention only tiles.
#
# ## Measured on this device
#
# On a CPU there is no programmer-visible SRAM, but the same two effects are there: the
# reference writes and rereads $n^2$ scores through the caches to main memory, and it needs
# memory for them. We read the memory each compiled program needs from XLA's buffer
# assignment (exact, and free: nothing has to run), for one head of width 64 in float32, and
# time both on {glue:text}`ch6_device` (the fastest of three runs after a warm-up).

# %%
blockwise = partial(flash.flash_attention, block_q=512, block_k=512)
mem_n = [1024, 2048, 4096, 8192, 16384]
mem_ref, mem_flash = {}, {}
for n in mem_n:
    shapes = kernel_bench.attention_inputs(1, n, n, 1, 1, 64, "float32", abstract=True)
    mem_ref[n] = compiled.program_memory(reference_at_positions, *shapes)
    mem_flash[n] = compiled.program_memory(blockwise, *shapes)
for n in mem_n:
    square = n * n * 4
    assert mem_ref[n].temp_bytes >= square                 # the reference holds n² scores ...
    assert mem_ref[n].largest_array_bytes >= square
    # ... the blockwise program's largest array is a tile of scores or its own output.
    assert mem_flash[n].largest_array_bytes <= max(512 * 512 * 4, n * 64 * 4) < square
    print(f"n={n:6d}: scratch memory {fmt_bytes(mem_ref[n].temp_bytes):>9s} (reference)  "
          f"{fmt_bytes(mem_flash[n].temp_bytes):>9s} (blockwise); n²·4 = {fmt_bytes(square)}")
# The blockwise program's memory grows linearly in n (its output and tiles), not quadratically.
assert mem_flash[16384].temp_bytes < 4 * mem_flash[4096].temp_bytes

# %% tags=["hide-input"]
glue("ch6_device", DEVICE)
glue("ch6_mem_ref_16k", fmt_bytes(mem_ref[16384].temp_bytes))
glue("ch6_mem_flash_16k", fmt_bytes(mem_flash[16384].temp_bytes))
glue("ch6_square_16k", fmt_bytes(16384 ** 2 * 4))

# %%
time_ref, time_flash = {}, {}
for n in [512, 1024, 2048, 4096]:
    time_ref[n] = timing.time_fn(jax.jit(reference_at_positions),
                                *kernel_bench.attention_inputs(1, n, n, 1, 1, 64), repeats=3)
for n in [512, 1024, 2048, 4096, 8192, 16384]:
    time_flash[n] = timing.time_fn(jax.jit(blockwise),
                                  *kernel_bench.attention_inputs(1, n, n, 1, 1, 64), repeats=3)
for n in time_flash:
    r = fmt_seconds(time_ref[n].min_s) if n in time_ref else "(not run)"
    print(f"n={n:6d}: blockwise {fmt_seconds(time_flash[n].min_s):>9s}   reference {r}")

# The 16k result, checked against the reference on its last 128 queries (a 128 × 16k problem).
q16, k16, v16, pos16, len16 = kernel_bench.attention_inputs(1, 16384, 16384, 1, 1, 64)
out16, lse16 = jax.jit(blockwise)(q16, k16, v16, pos16, len16)
tail_out, tail_lse = jax.jit(reference_at_positions)(q16[:, -128:], k16, v16, pos16[:, -128:],
                                                     len16)
assert jnp.allclose(out16[:, -128:], tail_out, atol=1e-5)
assert jnp.allclose(lse16[:, -128:], tail_lse, atol=1e-4)

# %% tags=["hide-input"]
expect_measured(time_flash[4096].min_s < time_ref[4096].min_s,
                "at 4,096 tokens the blockwise program beats the reference",
                expected="blockwise faster than the reference",
                measured=f"{fmt_seconds(time_flash[4096].min_s)} against "
                         f"{fmt_seconds(time_ref[4096].min_s)}")
glue("ch6_time_flash_16k", fmt_seconds(time_flash[16384].min_s))
glue("ch6_speedup_4k", fmt_ratio(time_ref[4096].min_s / time_flash[4096].min_s))
glue("ch6_n_max", f"{max(mem_n):,}"); glue("ch6_n_ref_max", f"{max(time_ref):,}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
ax1.loglog(mem_n, [mem_ref[n].temp_bytes for n in mem_n], "o-", label="reference")
ax1.loglog(mem_n, [mem_flash[n].temp_bytes for n in mem_n], "s-", label="blockwise")
ax1.loglog(mem_n, [n * n * 4 for n in mem_n], "k:", label="n² float32 values")
ax1.set_xlabel("sequence length n"); ax1.set_ylabel("scratch memory of the program (bytes)")
ax1.set_title("XLA's memory analysis (exact)", fontsize=9)
ax1.legend(fontsize=8); ax1.grid(True, which="both", alpha=0.3)
ax2.loglog(list(time_ref), [t.min_s for t in time_ref.values()], "o-", label="reference")
ax2.loglog(list(time_flash), [t.min_s for t in time_flash.values()], "s-", label="blockwise")
ax2.set_xlabel("sequence length n"); ax2.set_ylabel("time (s)")
ax2.set_title(f"Measured on {DEVICE}", fontsize=9)
ax2.legend(fontsize=8); ax2.grid(True, which="both", alpha=0.3)
plt.tight_layout()
plt.show()

# %% [markdown]
# At $n =$ {glue:text}`ch6_n_max` the reference program would need {glue:text}`ch6_mem_ref_16k` of scratch
# memory — more than the {glue:text}`ch6_square_16k` of one $n \times n$ float32 matrix, because
# it keeps both scores and probabilities — while the blockwise program needs
# {glue:text}`ch6_mem_flash_16k`, and runs in {glue:text}`ch6_time_flash_16k` on
# {glue:text}`ch6_device` (its last queries checked against the reference). On a CPU the
# blockwise version is also faster, {glue:text}`ch6_speedup_4k` at $n =$ {glue:text}`ch6_n_ref_max`: it skips the
# key tiles that the causal mask hides and never streams the $n^2$ matrices through memory.
#
# ## FlashAttention-2
#
# FlashAttention-2 made the kernel considerably faster again with three changes, all about
# keeping the tensor cores busy.
#
# **Fewer non-matmul FLOPs.** Tensor cores do only matrix products. Everything else — the
# exponentials, the rescaling, the divisions — runs on the ordinary float32 units, which are
# much slower:

# %%
a100_fp32 = chip_data["A100 40GB"]["fp32_flops_per_s"]
nonmatmul_cost = a100.bf16_flops_per_s / a100_fp32
assert nonmatmul_cost > 10


def fa1_step(o, m, l, s_RC, v_CH):
    """FlashAttention-1's update: the output is kept normalised after every KV tile."""
    m_new = jnp.maximum(m, s_RC.max(-1))
    p = jnp.exp(s_RC - m_new[:, None])
    l_new = jnp.exp(m - m_new) * l + p.sum(-1)
    o_new = ((l * jnp.exp(m - m_new))[:, None] * o + p @ v_CH) / l_new[:, None]
    return o_new, m_new, l_new


def fa2_step(o, m, l, s_RC, v_CH):
    """FlashAttention-2's update (the library's): unnormalised, divided once at the end."""
    return flash.online_softmax_step((o, m, l), s_RC, v_CH, "RC,CH->RH")


R, C, Hs = 128, 128, 64
tile = [jax.ShapeDtypeStruct(s, jnp.float32) for s in [(R, Hs), (R,), (R,), (R, C), (C, Hs)]]
matmul = 2 * R * C * Hs
extra = {name: compiled.compiled_cost(jax.jit(f), *tile)["flops"] - matmul
         for name, f in [("FA1", fa1_step), ("FA2", fa2_step)]}
assert extra["FA2"] < extra["FA1"]

# %% tags=["hide-input"]
glue("ch6_nonmatmul_cost", fmt_ratio(nonmatmul_cost, 0))
glue("ch6_a100_fp32", fmt_rate(a100_fp32, "FLOP/s"))
glue("ch6_a100_bf16", fmt_rate(a100.bf16_flops_per_s, "FLOP/s"))
print({k: fmt_flops(v) for k, v in extra.items()}, "non-matmul FLOPs per tile (XLA's count)")
glue("ch6_fa1_extra", fmt_count(extra["FA1"])); glue("ch6_fa2_extra", fmt_count(extra["FA2"]))
glue("ch6_R", str(R))

# %% [markdown]
# On an A100 that is {glue:text}`ch6_a100_bf16` for bfloat16 matrix products against
# {glue:text}`ch6_a100_fp32` for everything else: a non-matmul FLOP costs
# {glue:text}`ch6_nonmatmul_cost` as much as a matmul FLOP. FlashAttention-1 kept the output
# normalised after every KV tile (multiply by the old sum, divide by the new one);
# FlashAttention-2 keeps it unnormalised and divides once at the end, and stores only the
# log-sum-exp rather than both $m$ and $\ell$ for the backward pass. Compiled for one
# tile of {glue:text}`ch6_R` × {glue:text}`ch6_R` scores, XLA counts {glue:text}`ch6_fa1_extra` non-matmul FLOPs for the first
# update and {glue:text}`ch6_fa2_extra` for the second.
#
# FlashAttention-1 also ordered its loops the other way round: the *outer* loop ran over KV
# tiles and the inner one over query tiles, so every query tile's $o$, $m$, $\ell$ went back to
# HBM after each KV tile and were read again for the next. FlashAttention-2 puts the query tile
# outside; its accumulators stay on chip from the first KV tile to the last.
#
# **Parallelism over the sequence.** A GPU kernel is a grid of independent thread blocks, each
# running on one SM. FlashAttention-1 launched one per (sequence, head): enough when batch ×
# heads is large, but a long prompt usually comes with a small batch. FlashAttention-2 adds the
# query tiles to the grid — they are independent, since each owns its rows of the output.

# %%
llama_heads, long_T = 32, 8192
fa1_blocks = 1 * llama_heads
fa2_blocks = 1 * llama_heads * (long_T // block_q_gpu)
busy_fa1, busy_fa2 = min(1, fa1_blocks / a100_sms), min(1, fa2_blocks / a100_sms)
assert busy_fa1 < 0.5 and busy_fa2 == 1

# The library's Pallas kernel uses FlashAttention-2's grid. On a CPU, Pallas interprets it.
Bp, Tp, Np, Kp, Hp = 2, 40, 4, 2, 16
small = kernel_bench.attention_inputs(Bp, Tp, Tp, Np, Kp, Hp)
p_out, p_lse = pallas_flash_attention(*small, block_q=16, block_k=16)
r_out, r_lse = jax.jit(reference_at_positions)(*small)
assert jnp.allclose(p_out, r_out, atol=1e-5) and jnp.allclose(p_lse, r_lse, atol=1e-5)
grid = (Bp, Np, -(-Tp // 16))

# %% tags=["hide-input"]
glue("ch6_fa1_blocks", str(fa1_blocks)); glue("ch6_fa2_blocks", f"{fa2_blocks:,}")
glue("ch6_busy_fa1", fmt_percent(busy_fa1))
glue("ch6_pallas_grid", " × ".join(map(str, grid)))
print(f"Pallas kernel (grid {grid}, interpreted: {jax.default_backend() == 'cpu'}) "
      "equals the reference")

# %% [markdown]
# A prefill of {glue:text}`ch6_n_ex` tokens of a 32-head model at batch 1 gives
# FlashAttention-1 {glue:text}`ch6_fa1_blocks` thread blocks for the A100's
# {glue:text}`ch6_a100_sms` SMs — {glue:text}`ch6_busy_fa1` of the chip at most — and
# FlashAttention-2 {glue:text}`ch6_fa2_blocks`. The library's Pallas kernel
# (`inferbook.kernels.pallas`) is written with that grid, one program per (batch row, query
# head, query tile) — {glue:text}`ch6_pallas_grid` programs for the small problem above, which
# Pallas' interpreter ran on this CPU and which matches the reference. On a GPU the same code
# is compiled by Triton.
#
# **Work partitioning between warps.** Inside a thread block the work is split over warps,
# groups of threads that execute in lockstep. FlashAttention-1 split the *keys*: each warp
# held a slice of the $K$ and $V$ tile, computed its share of every query row's scores and of
# $PV$, and then the warps had to exchange their partial outputs through shared memory and
# add them up — a "split-K" scheme. FlashAttention-2 splits the *queries*: each warp owns a
# slice of the rows, sees all of $K$ and $V$, and finishes its rows alone.

# %%
warps = 4
exchange_fa1 = (warps - 1) * block_q_gpu * H_gpu * 4     # float32 partial outputs to combine
per_head = exchange_fa1 * (long_T // block_q_gpu) * (long_T // block_k_gpu)
assert per_head > standard_io_bytes(long_T, long_T, H_gpu, b16) / 100

# %% tags=["hide-input"]
glue("ch6_exchange_tile", fmt_bytes(exchange_fa1, 0)); glue("ch6_warps", str(warps))
glue("ch6_exchange_head", fmt_bytes(per_head))

# %% [markdown]
# With {glue:text}`ch6_warps` warps and an output tile of {glue:text}`ch6_bq` rows, split-K writes and reads back
# {glue:text}`ch6_exchange_tile` of partial outputs in shared memory for every KV tile —
# {glue:text}`ch6_exchange_head` for one head of an {glue:text}`ch6_n_ex`-token prefill, plus
# a synchronisation of the warps each time. Split-Q exchanges nothing.
#
# ## Summary
#
# - Standard attention writes and reads $T \times S$ matrices; its arithmetic intensity is
#   about $H/b$ FLOPs per byte, below any accelerator's critical intensity. It is bound by
#   memory traffic and needs $O(TS)$ memory.
# - The online softmax keeps three numbers per query row (running maximum, sum, unnormalised
#   output) and rescales them when the maximum grows, so keys can be visited in tiles; the
#   result, and its log-sum-exp, are exact.
# - FlashAttention tiles queries and keys so each tile is read once into fast memory: HBM
#   traffic falls from $O(n^2)$ to $O(n^2H/b_q)$ and memory from $O(n^2)$ to $O(n)$. On this
#   device the longest prefill measured needs megabytes instead of gigabytes.
# - FlashAttention-2 does fewer non-matmul FLOPs (one division at the end), parallelises over
#   query tiles as well as batch and heads, and splits queries rather than keys across warps.
# - At decode time there is one query per sequence, and this grid runs dry: chapter 7.
