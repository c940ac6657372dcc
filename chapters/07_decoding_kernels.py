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
# # Decoding kernels
#
# Chapter 6 made prefill attention fast by tiling it. A decode step is a different problem.
# Each sequence brings *one* new query, which must read every key and value in its cache. The
# work per byte is tiny, so the step is bound by memory bandwidth — and reaching the bandwidth
# requires the whole chip to be reading at once, which FlashAttention's schedule does not
# arrange when there is one query per sequence. This chapter follows the fixes in the order
# the CIS 565 project {cite:p}`cis565llm2023` presents them: Flash-Decoding
# {cite:p}`dao2023flashdecoding` splits the cache across the chip, FlashDecoding++
# {cite:p}`hong2023flashdecodingpp` removes the synchronisation that splitting needs, and
# PagedAttention {cite:p}`kwon2023pagedattention` changes where the cache lives. Each comes with
# its implementation in the library, a check against the reference, and a measurement on your
# device; the project's own measurements close the chapter.

# %%
import textwrap
from functools import partial

import inferbook

info = inferbook.setup()

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.kernels import flash_decoding, kernel_bench, paged
from inferbook.kernels.pallas import pallas_flash_decoding
from inferbook.model import decoder
from inferbook.model.attention import attend, attention_mask, reference_at_positions
from inferbook.model.presets import get_preset
from inferbook.perf import compiled, counts, microbench, timing
from inferbook.perf.hardware import get_chip

print(info.describe())
DEVICE = timing.device_name()
on_chip = {c["chip"]: c for c in bookdata.load("gpu_on_chip.json")["chips"]}
reference = jax.jit(reference_at_positions, static_argnames=("window",))

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.present import (
    fmt_bytes,
    fmt_count,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    glue,
)

glue("ch7_device", DEVICE)

# %% [markdown]
# ## Why FlashAttention leaves the chip idle at decode
#
# One decode step of one sequence: a query per head, $N$ of them, against $S$ cached keys and
# values per KV head. The arithmetic is $4NSH$ FLOPs (scores and weighted sum); the memory
# traffic is the cache, $2KSH$ elements. With $G = N/K$ query heads per KV head and $b$ bytes
# per element, the intensity is $2G/b$ FLOPs per byte — a handful, for any model. Batching does
# not help: every sequence has its own cache.

# %%
h100 = get_chip("H100 SXM")
ridge = h100.bf16_flops_per_s / h100.hbm_bytes_per_s
for name in ("llama-2-7b", "mistral-7b"):
    cfg = get_preset(name)
    decode_intensity = 2 * (cfg.N // cfg.K) / 2
    assert decode_intensity < ridge / 50
    print(f"{name}: {decode_intensity:.0f} FLOPs per byte of cache read (bfloat16); "
          f"an H100 needs {ridge:,.0f} to be compute-bound")

# %% tags=["hide-input"]
glue("ch7_h100_ridge", f"{ridge:,.0f}")

# %% [markdown]
# So decode attention runs at the speed the cache can be read, and reading at full bandwidth
# takes many SMs issuing loads at once; one SM alone can pull only a small share of the HBM
# bandwidth. Now count the work units. FlashAttention's grid is one program per
# (sequence, query head, query tile); at decode there is one query tile, so a batch of $B$
# gives $B \cdot N$ programs — or $B \cdot K$ if, as a decode kernel should, the $G$ query
# heads that share a KV head are handled together so that each key is read once. For a
# Mistral-7B-shaped model ($K =$ {glue:text}`ch7_mistral_K`) at batch 1 that is
# {glue:text}`ch7_mistral_K` programs:

# %%
mistral = get_preset("mistral-7b")
P_fd = 32
batches = np.array([1, 2, 4, 8, 16, 32, 64])


def busy_fraction(programs, sms):
    """Share of SMs with a program to run (one wave)."""
    return np.minimum(1.0, programs / sms)


h100_sms = on_chip["H100 SXM"]["sms"]
busy_b1 = busy_fraction(mistral.K, h100_sms)
assert busy_b1 < 0.1 and busy_fraction(mistral.K * P_fd, h100_sms) == 1.0

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 3.8))
for chip_name, style in (("H100 SXM", "-"), ("L4", "--")):
    sms = on_chip[chip_name]["sms"]
    ax.plot(batches, busy_fraction(batches * mistral.K, sms), "o" + style,
            label=f"one program per (sequence, KV head) — {chip_name}, {sms} SMs")
    ax.plot(batches, busy_fraction(batches * mistral.K * P_fd, sms), "s" + style,
            label=f"Flash-Decoding, P = {P_fd} chunks — {chip_name}")
ax.set_xscale("log", base=2)
ax.set_xlabel("batch size B")
ax.set_ylabel("share of SMs with work")
ax.set_title("Decode attention for Mistral-7B (K = 8): the grid against the chip")
ax.legend(fontsize=7)
ax.grid(True, alpha=0.3)
plt.show()
glue("ch7_busy_b1", fmt_percent(busy_b1)); glue("ch7_h100_sms", str(h100_sms))
glue("ch7_full_batch", str(int(np.ceil(h100_sms / mistral.K))))
glue("ch7_P", str(P_fd)); glue("ch7_mistral_K", str(mistral.K))

# %% [markdown]
# At batch 1 the H100's {glue:text}`ch7_h100_sms` SMs have {glue:text}`ch7_mistral_K`
# programs between them: {glue:text}`ch7_busy_b1` of the chip does all the reading. It takes
# a batch of {glue:text}`ch7_full_batch` before every SM has work — and long contexts, where
# attention matters most, are exactly where memory limits the batch to a few sequences.
#
# ## Flash-Decoding: split the cache
#
# The one long dimension left is the cache itself. Flash-Decoding cuts each sequence's cache
# into $P$ chunks of $S/P$ slots and gives every (sequence, KV head, chunk) its own program:
#
# 1. **split** — chunk $p$ is slots $pS/P \ldots (p+1)S/P - 1$: a view of the cache, nothing
#    moves;
# 2. **attend** — each program computes attention of its queries over its chunk alone, the
#    FlashAttention way, and writes its output $O_p$ and the log-sum-exp $\lambda_p$ of its
#    scores;
# 3. **combine** — a small reduction: $\lambda = \log \sum_p e^{\lambda_p}$ and
#    $O = \sum_p e^{\lambda_p - \lambda} O_p$.
#
# Step 3 is chapter 6's merging rule applied to $P$ parts at once: each chunk's output is
# normalised over its own keys, and $e^{\lambda_p - \lambda}$ is the share of the total
# softmax weight that its keys carry. In the library:

# %%
show_source(flash_decoding.combine_chunks, flash_decoding.flash_decoding)

# %% [markdown]
# Checked against the reference on a decode step for a ragged batch with grouped-query heads,
# for several numbers of chunks — including chunks that lie entirely beyond a short sequence's
# length, which must contribute nothing:

# %%
B, N, K, H, S = 3, 8, 2, 32, 512
keys = jax.random.split(jax.random.key(0), 3)
q = jax.random.normal(keys[0], (B, 1, N, H))
k_cache, v_cache = (jax.random.normal(kk, (B, K, S, H)) for kk in keys[1:])
lengths = jnp.array([512, 300, 17])
q_pos = lengths[:, None] - 1
ref_out, ref_lse = reference(q, k_cache, v_cache, q_pos, lengths)
split = jax.jit(flash_decoding.flash_decoding, static_argnames=("num_splits", "window"))
for P in (8, 64):
    out, lse = split(q, k_cache, v_cache, q_pos, lengths, num_splits=P)
    assert jnp.allclose(out, ref_out, atol=1e-5) and jnp.allclose(lse, ref_lse, atol=1e-5)
print("split-KV attention equals the reference for every P")

# The Pallas kernel: grid (B, K, P), one program per sequence, KV head and chunk.
for P in (1, 4):
    out, lse = pallas_flash_decoding(q, k_cache, v_cache, q_pos, lengths, num_splits=P,
                                     block_k=32)
    assert jnp.allclose(out, ref_out, atol=1e-5) and jnp.allclose(lse, ref_lse, atol=1e-5)
print(f"Pallas Flash-Decoding (interpreted: {jax.default_backend() == 'cpu'}) equals the reference")

# %% tags=["hide-input"]
glue("ch7_pallas_grid", f"{B} × {K} × 4")

# %% [markdown]
# The library's Pallas version (`inferbook.kernels.pallas.pallas_flash_decoding`) has exactly
# this grid — {glue:text}`ch7_pallas_grid` programs above — and each program loads its
# queries once and walks its chunk in tiles; with `num_splits=1` it is the unsplit kernel, one
# program per (sequence, KV head). On a CPU it runs in Pallas' interpreter, which is how the
# tests check it; on a GPU, Triton compiles it.
#
# ## Measured on this device
#
# Decode attention for one sequence of a Mistral-7B-shaped layer ($N = 32$, $K = 8$,
# $H = 128$, float32), against context length: XLA's unsplit reference against the split
# version, and the bytes of cache each step reads against the bandwidth this device achieves
# on a plain read. Each time is the fastest of nine runs after a warm-up.

# %%
contexts = [2048, 8192, 32768]
Nm, Km, Hm = mistral.N, mistral.K, mistral.H
kernels = {"unsplit (reference)": reference_at_positions,
           f"split, P = {P_fd}": partial(flash_decoding.flash_decoding, num_splits=P_fd)}
jitted = {name: jax.jit(lambda *a, f=fn: f(*a)[0]) for name, fn in kernels.items()}
inputs = {S_: kernel_bench.attention_inputs(1, 1, S_, Nm, Km, Hm, "float32") for S_ in contexts}
# Three interleaved rounds, keeping each measurement's fastest run: on a shared machine the
# least disturbed run is the best estimate of what the device can do.
times = {name: {S_: np.inf for S_ in contexts} for name in kernels}
read_bw = 0.0
for _ in range(3):
    for S_ in contexts:
        for name, fn in jitted.items():
            t = timing.time_fn(fn, *inputs[S_], repeats=3).min_s
            times[name][S_] = min(times[name][S_], t)
    read_bw = max(read_bw, microbench.measure_bandwidth(1 << 28, repeats=3).reduction)
del inputs
kv_bytes = {S_: 2 * Km * S_ * Hm * 4 for S_ in contexts}
achieved = {name: {S_: kv_bytes[S_] / t for S_, t in ts.items()} for name, ts in times.items()}

longest = contexts[-1]
unsplit_name, split_name = list(kernels)
frac = achieved[unsplit_name][longest] / read_bw
ratio = times[split_name][longest] / times[unsplit_name][longest]
# At long contexts a decode step is a read of the cache: time grows in proportion to S, and
# the step streams the cache at a sizeable part of the device's read bandwidth (a tenth at
# the very least, a floor that holds while other programs share the machine).
growth = times[unsplit_name][32768] / times[unsplit_name][8192]

# %% tags=["hide-input"]
for S_ in contexts:
    print(f"S={S_:6d}: cache {fmt_bytes(kv_bytes[S_]):>9s}  " + "  ".join(
        f"{name}: {fmt_seconds(times[name][S_])} ({fmt_rate(achieved[name][S_])})"
        for name in kernels))
print(f"plain read bandwidth: {fmt_rate(read_bw)} ({DEVICE})")
expect_measured(2 < growth < 10, "a decode step over a long cache grows with the cache",
                expected="32,768 cached tokens take 2 to 10 times as long as 8,192",
                measured=fmt_ratio(growth))
expect_measured(frac > 0.1, "the step streams the cache at a sizeable part of the bandwidth",
                expected="over 10% of the plain read bandwidth", measured=fmt_percent(frac))
# On a CPU there are no idle SMs to recruit: splitting changes little.
if info.platform == "cpu":
    expect_measured(0.5 < ratio < 2, "on a CPU, splitting the cache changes little",
                    expected="split time between 0.5× and 2× the unsplit",
                    measured=fmt_ratio(ratio, 2))
glue("ch7_frac", fmt_percent(frac)); glue("ch7_read_bw", fmt_rate(read_bw))
glue("ch7_split_ratio", fmt_ratio(ratio, 2)); glue("ch7_longest", f"{longest:,}")
glue("ch7_kv_longest", fmt_bytes(kv_bytes[longest]))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
for name in kernels:
    ax1.loglog(contexts, [times[name][s] * 1e3 for s in contexts], "o-", label=name)
    ax2.semilogx(contexts, [achieved[name][s] / 1e9 for s in contexts], "o-", label=name)
ax2.axhline(read_bw / 1e9, color="k", ls=":", label="plain read")
ax1.set_xlabel("context length S"); ax1.set_ylabel("decode attention time (ms)")
ax2.set_xlabel("context length S"); ax2.set_ylabel("cache bytes read / time (GB/s)")
for ax in (ax1, ax2):
    ax.set_title(f"Measured on {DEVICE}", fontsize=9)
    ax.set_xticks(contexts, [f"{c:,}" for c in contexts])
    ax.minorticks_off()
    ax.legend(fontsize=8); ax.grid(True, alpha=0.3)
ax2.set_ylim(bottom=0)
plt.tight_layout()
plt.show()

# %% [markdown]
# At {glue:text}`ch7_longest` tokens the step reads {glue:text}`ch7_kv_longest` of cache at
# {glue:text}`ch7_frac` of the {glue:text}`ch7_read_bw` this device reads at: decode attention
# is a pass over the cache, and its time grows with the context. The split version takes
# {glue:text}`ch7_split_ratio` the time of the unsplit one here. That is the expected result on
# a CPU: XLA already spreads the one long matrix–vector product over all cores, so there is no
# idle hardware for the split to recruit. Flash-Decoding is a fix for a GPU's grid, and its
# gains must be measured on one.

# %% tags=["hide-input"]
# Recorded runs are listed in an index file, fetched by name: on Colab only the files asked
# for by name are downloaded, so listing a folder would never see a new record.
gpu_records = bookdata.records("flash_decoding_index.json")
if not gpu_records:
    glue("ch7_gpu_note", "No GPU measurement has been recorded in the book's data yet")
    print("No GPU record in book/data. On a GPU, run\n"
          "  python -m inferbook.cli.kernel_bench --out book/data/flash_decoding_<device>.json\n"
          "  python -m inferbook.book.bookdata reindex\n"
          "and this cell plots it.")
for record in gpu_records:
    rows = record["rows"]
    for r in rows:                                   # the file's bytes are the cache's bytes
        itemsize = jnp.dtype(r["dtype"]).itemsize
        assert r["kv_bytes"] == 2 * r["B"] * r["K"] * r["S"] * r["H"] * itemsize
    names = sorted({r["kernel"] for r in rows})
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for name in names:
        mine = sorted((r["S"], r) for r in rows if r["kernel"] == name)
        ax1.loglog([s for s, _ in mine], [r["seconds"] * 1e6 for _, r in mine], "o-", label=name)
        if mine[0][1]["hbm_fraction"] is not None:
            ax2.semilogx([s for s, _ in mine], [100 * r["hbm_fraction"] for _, r in mine], "o-",
                         label=name)
    ax1.set_xlabel("context length S"); ax1.set_ylabel("decode attention time (µs)")
    ax2.set_xlabel("context length S"); ax2.set_ylabel("% of HBM bandwidth")
    for ax in (ax1, ax2):
        ax.set_title(f"{record['device']}, jax {record['jax_version']}, {record['date']}",
                     fontsize=8)
        ax.legend(fontsize=7); ax.grid(True, which="both", alpha=0.3)
    plt.tight_layout()
    plt.show()
    glue("ch7_gpu_note", f"The GPU measurement recorded in book/data ({record['device']}) "
                         "is plotted above")

# %% [markdown]
# {glue:text}`ch7_gpu_note`: the same sweep on an accelerator — Pallas Flash-Decoding split
# and unsplit, and XLA's attention — recorded by `python -m inferbook.cli.kernel_bench` with
# the device, date and versions, is what this cell plots whenever such a file is present.
#
# ## FlashDecoding++: one maximum for everyone
#
# Splitting has a cost of its own. Every chunk subtracts *its own* maximum before
# exponentiating, so the partial results are on different scales, and the combine must read
# every chunk's maximum (or log-sum-exp) before it can rescale anything: a synchronisation
# across programs that the FlashDecoding++ authors measured at a noticeable fraction of the
# attention time. Their observation: softmax is unchanged by subtracting *any* constant, and
# for a given model the scores fall in a predictable range. Pick one number $\varphi$ for the
# model in advance, let every chunk compute $e^{x - \varphi}$, and the partial sums simply
# add:
#
# $$O = \frac{\sum_p \sum_{j \in p} e^{x_j - \varphi} v_j}{\sum_p \sum_{j \in p} e^{x_j - \varphi}} .$$
#
# The risk is numerical. If a score lies far above $\varphi$, $e^{x - \varphi}$ overflows; if
# every score of a row lies far below it, the row's weights underflow and its sum loses its
# precision. So each chunk checks, for each of its rows, that the largest score is within
# $[\varphi + a, \varphi + b]$ — a local test, no communication — and if any row fails, the
# step is recomputed with per-chunk maxima. The answer is always exact; the speed depends on
# how rarely the fallback runs.

# %%
show_source(flash_decoding.unified_max_attention)

# %% [markdown]
# How rarely depends on the model: $\varphi$, $a$ and $b$ must suit the distribution of its
# scores. FlashDecoding++ computes in float16, where the range is narrow: a chunk of $C$
# weights of at most $e^b$ must sum below float16's largest value, and weights below its
# smallest normal number lose precision. We take those bounds for chunks of
# {glue:text}`ch7_C` keys and look at the scores of the library's `small` model on random
# tokens, and of the same model with its queries multiplied by {glue:text}`ch7_q_scale` — a
# stand-in for a trained model whose attention is much more peaked than random weights make
# it.

# %%
f16 = np.finfo(np.float16)
C_fdpp = 64
a_lo, b_hi = float(np.log(f16.smallest_normal)), float(np.log(float(f16.max) / C_fdpp))
small_cfg = get_preset("small")
small_params = decoder.init_params(small_cfg, seed=0)


@jax.jit
def layer_qkv(params, tokens_BT):
    """Every layer's rotated queries and this step's keys and values, from a forward pass."""
    B_, T_ = tokens_BT.shape
    pos = jnp.broadcast_to(jnp.arange(T_), (B_, T_))
    mask = attention_mask(pos, jnp.arange(T_), jnp.full((B_,), T_))
    got = []

    def capture(i, q_BTNH, k_BTKH, v_BTKH):
        got.append((q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2)))
        return attend(q_BTNH, k_BTKH.swapaxes(1, 2), v_BTKH.swapaxes(1, 2), mask)

    decoder.transformer(params, small_cfg, tokens_BT, pos, capture)
    return got


def row_maxima(q_BTNH, k_BKSH, q_pos_BT=None):
    """The largest visible score of every query row (by default a causal prefill)."""
    B_, T_ = q_BTNH.shape[:2]
    S_ = k_BKSH.shape[2]
    if q_pos_BT is None:
        q_pos_BT = jnp.broadcast_to(jnp.arange(T_), (B_, T_))
    s = flash_decoding.chunk_scores(q_BTNH, k_BKSH, q_pos_BT, jnp.full((B_,), S_), 1)
    return np.asarray(s.max(axis=(2, 4))).ravel()


rng = np.random.default_rng(0)
calib, held_out = (jnp.asarray(rng.integers(0, small_cfg.V, (4, 256)), jnp.int32) for _ in range(2))
q_scale = 4.0
models = {"small (random weights)": 1.0, f"small, queries × {q_scale:.0f} (peaked)": q_scale}
phi, in_range, maxima = {}, {}, {}
for name, scale in models.items():
    cal = np.concatenate([row_maxima(q * scale, k) for q, k, _ in layer_qkv(small_params, calib)])
    grid = np.linspace(cal.min() - b_hi, cal.max() - a_lo, 400)
    cover = [np.mean((cal - g >= a_lo) & (cal - g <= b_hi)) for g in grid]
    best = np.flatnonzero(np.isclose(cover, max(cover)))   # calibrated offline, once per
    phi[name] = float(grid[best[len(best) // 2]])           # model: mid-way through the best
    maxima[name] = np.concatenate([row_maxima(q * scale, k)
                                   for q, k, _ in layer_qkv(small_params, held_out)])
    in_range[name] = np.mean((maxima[name] - phi[name] >= a_lo) & (maxima[name] - phi[name] <= b_hi))
    print(f"{name}: φ = {phi[name]:.2f}; rows in range on held-out text: "
          f"{fmt_percent(in_range[name], 2)}")

names = list(models)
assert in_range[names[0]] == 1.0 and in_range[names[1]] < 1.0
rows_per_step = 8 * small_cfg.N          # a decode step of 8 sequences, one row per query head
p_step = 1 - in_range[names[1]] ** rows_per_step

# %% tags=["hide-input"]
glue("ch7_C", str(C_fdpp)); glue("ch7_q_scale", f"{q_scale:.0f}")
glue("ch7_window", f"{b_hi - a_lo:.1f}")
glue("ch7_out_peaked", fmt_percent(1 - in_range[names[1]], 1))
glue("ch7_rows_per_step", str(rows_per_step)); glue("ch7_p_step", fmt_percent(p_step))

fig, ax = plt.subplots(figsize=(6.5, 3.8))
for name in models:
    ax.hist(maxima[name], bins=80, alpha=0.5, label=name)
    ax.axvspan(phi[name] + a_lo, phi[name] + b_hi, alpha=0.08, color="k")
ax.set_xlabel("largest score of a query row"); ax.set_ylabel("rows")
ax.set_title(f"Where φ + [a, b] (shaded, float16, chunks of {C_fdpp}) must fall", fontsize=9)
ax.legend(fontsize=8)
plt.show()

# %%
# Exactness on a real decode step: the last position's queries against the cache, both models.
for name, scale in models.items():
    q_all, k_all, v_all = layer_qkv(small_params, held_out)[0]
    q_last, pos_last, lens = q_all[:, -1:] * scale, jnp.full((4, 1), 255), jnp.full((4,), 256)
    out, lse, redo = jax.jit(flash_decoding.unified_max_attention,
                             static_argnames=("num_splits", "window", "bounds"))(
        q_last, k_all, v_all, pos_last, lens, phi[name], num_splits=256 // C_fdpp,
        bounds=(a_lo, b_hi))
    r_out, r_lse = reference(q_last, k_all, v_all, pos_last, lens)
    assert jnp.allclose(out, r_out, atol=1e-5) and jnp.allclose(lse, r_lse, atol=1e-5)
    # Any row whose maximum is out of range, and only then, must trigger the fallback.
    m_last = row_maxima(q_last, k_all, pos_last)
    out_of_range = np.any((m_last - phi[name] < a_lo) | (m_last - phi[name] > b_hi))
    assert bool(redo) == bool(out_of_range)
    print(f"{name}: exact; recomputed: {bool(redo)}")

# %% [markdown]
# The shaded band is $\varphi + [a, b]$: {glue:text}`ch7_window` wide in float16 with chunks
# of {glue:text}`ch7_C`. For the random-weight model one $\varphi$ covers every row, and the fast path always
# applies. For the peaked model, the best $\varphi$ still leaves {glue:text}`ch7_out_peaked` of
# rows outside — and because one such row sends the whole step down the slow path, a step of
# {glue:text}`ch7_rows_per_step` rows recomputes with probability {glue:text}`ch7_p_step`. This
# is the caveat the CIS 565 write-up draws from the FlashDecoding++ paper: the unified maximum
# is a per-model setting, and for a model whose scores spread widely it buys little. (In the
# library the check is global and the fallback recomputes everything; a kernel could recompute
# only the failing rows.) Both paths agree with the reference in every case above.
#
# ## PagedAttention: where the cache lives
#
# So far each sequence owned a contiguous cache of $S$ slots, allocated at the longest length
# it might reach. Requests do not know their length in advance, so a server reserves the
# maximum and most of it sits empty. PagedAttention borrows virtual memory's answer: store the
# cache in fixed-size **blocks** from a shared pool, and give every sequence a **block table**
# mapping its logical blocks to physical ones. A sequence then holds only the blocks it has
# filled, wasting less than one block. How much that matters, for requests whose lengths are
# spread evenly up to the maximum:

# %%
max_len, block = 2048, 16
req_lengths = np.random.default_rng(1).integers(1, max_len + 1, size=10_000)
contiguous_use = req_lengths.sum() / (len(req_lengths) * max_len)
paged_use = req_lengths.sum() / (np.ceil(req_lengths / block) * block).sum()
assert paged_use > 0.99 > 0.6 > contiguous_use
llama7 = get_preset("llama-2-7b")
a100_80 = get_chip("A100 80GB")
kv_budget = a100_80.hbm_bytes - counts.param_bytes(llama7, 2)
per_token = counts.kv_bytes_per_token(llama7, 2)
seqs_contiguous = int(kv_budget // (max_len * per_token))
seqs_paged = int(kv_budget // (req_lengths.mean() / paged_use * per_token))

# %% tags=["hide-input"]
glue("ch7_contig_use", fmt_percent(contiguous_use)); glue("ch7_paged_use", fmt_percent(paged_use, 1))
glue("ch7_seqs_contig", str(seqs_contiguous)); glue("ch7_seqs_paged", str(seqs_paged))
glue("ch7_block", str(block)); glue("ch7_max_len", f"{max_len:,}")
print(f"memory holding real tokens: contiguous {fmt_percent(contiguous_use)}, "
      f"paged (blocks of {block}) {fmt_percent(paged_use, 1)}")
print(f"LLaMA-2 7B on an A100 80GB: {seqs_contiguous} sequences (contiguous) vs "
      f"{seqs_paged} (paged, on average)")

# %% [markdown]
# With requests of up to {glue:text}`ch7_max_len` tokens, contiguous reservation fills only
# {glue:text}`ch7_contig_use` of the cache memory with real tokens; blocks of
# {glue:text}`ch7_block` fill {glue:text}`ch7_paged_use`. For LLaMA-2 7B in bfloat16 on an
# A100 80GB that is the difference between {glue:text}`ch7_seqs_contig` and about
# {glue:text}`ch7_seqs_paged` sequences decoding together — and since a decode step reads the
# weights once for the whole batch, nearly that factor in throughput. Blocks can also be shared
# between sequences that start with the same prompt; chapter 12 builds prefix caching on that.
#
# The library's layout (`inferbook.kernels.paged`, which the engine's block manager and the KV-cache
# chapter build on) is a pool of `[num_blocks, K, block_size, H]` per layer — each block
# head-major, like the contiguous cache — and an int32 table `[B, max_blocks]`. The reference
# gathers each sequence's blocks into a contiguous cache and calls `attention_reference`; the
# kernel walks the logical blocks and fetches each straight from the pool:

# %%
show_source(paged.paged_attention)

# %%
Bp, Kp, Hp, bs, Jp = 3, 2, 16, 8, 6
rng = np.random.default_rng(2)
num_blocks = 20
k_pool = jnp.asarray(rng.normal(size=(num_blocks, Kp, bs, Hp)), jnp.float32)
v_pool = jnp.asarray(rng.normal(size=(num_blocks, Kp, bs, Hp)), jnp.float32)
table = rng.permutation(num_blocks)[:Bp * Jp].reshape(Bp, Jp)
table[1, 0] = table[0, 0]                      # sequences 0 and 1 share their first block
table = jnp.asarray(table, jnp.int32)
kv_len = jnp.array([45, 20, 3])
qp = jnp.asarray(rng.normal(size=(Bp, 1, 4, Hp)), jnp.float32)
pos = kv_len[:, None] - 1
out_k, lse_k = jax.jit(paged.paged_attention)(qp, k_pool, v_pool, table, pos, kv_len)
out_g, lse_g = paged.paged_attention_reference(qp, k_pool, v_pool, table, pos, kv_len)
contiguous = paged.gather_blocks(k_pool, table), paged.gather_blocks(v_pool, table)
out_c, lse_c = reference(qp, *contiguous, pos, kv_len)
assert jnp.allclose(out_k, out_c, atol=1e-5) and jnp.allclose(lse_k, lse_c, atol=1e-5)
assert jnp.allclose(out_g, out_c, atol=1e-5)
print("block table (pool index of each logical block):\n", np.asarray(table))
print("paged kernel = gather-then-reference = reference on the contiguous cache")

# What each needs beyond its inputs, at a realistic size (compiled only, never run).
Bm, Sm, bsm = 4, 8192, 256
pool_shape = jax.ShapeDtypeStruct((Bm * Sm // bsm, mistral.K, bsm, mistral.H), jnp.float32)
shapes = (jax.ShapeDtypeStruct((Bm, 1, mistral.N, mistral.H), jnp.float32), pool_shape, pool_shape,
          jax.ShapeDtypeStruct((Bm, Sm // bsm), jnp.int32), jax.ShapeDtypeStruct((Bm, 1), jnp.int32),
          jax.ShapeDtypeStruct((Bm,), jnp.int32))
mem_gather = compiled.program_memory(paged.paged_attention_reference, *shapes)
mem_paged = compiled.program_memory(paged.paged_attention, *shapes)
cache_bytes = 2 * Bm * mistral.K * Sm * mistral.H * 4
assert mem_gather.temp_bytes >= cache_bytes > 20 * mem_paged.temp_bytes

# %% tags=["hide-input"]
glue("ch7_gather_mem", fmt_bytes(mem_gather.temp_bytes))
glue("ch7_paged_mem", fmt_bytes(mem_paged.temp_bytes))
glue("ch7_cache_bytes", fmt_bytes(cache_bytes))
glue("ch7_Bm", str(Bm)); glue("ch7_Sm", f"{Sm:,}")

# %% [markdown]
# The gathering reference needs {glue:text}`ch7_gather_mem` of scratch memory for
# {glue:text}`ch7_Bm` sequences of {glue:text}`ch7_Sm` tokens — a full contiguous copy of their {glue:text}`ch7_cache_bytes`
# cache, made at every step — while the paged kernel needs {glue:text}`ch7_paged_mem`. A GPU
# paged kernel goes further and folds the block-table lookup into its loads, with the same
# split-KV grid as Flash-Decoding when sequences are long.
#
# ## What the CIS 565 project measured
#
# The project forked vLLM, replaced its decode-attention kernel with a Flash-Decoding kernel
# of its own, and served models on one NVIDIA L4. Its reported numbers are kept, with their
# source, in `book/data/cis565_results.json`:

# %%
cis = bookdata.load("cis565_results.json")
ftl = cis["first_token_latency"]
fd_gain = [r["baseline_kernel"] / r["flash_decoding"] for r in ftl["rows"]]
cache_gain = [r["flash_decoding"] / r["flash_decoding_cached"] for r in ftl["rows"]]
assert all(g > 1 for g in fd_gain) and fd_gain[-1] == max(fd_gain)
assert cache_gain[0] > cache_gain[-1]
network_share = max(r["network"] / r["baseline_kernel"] for r in ftl["rows"])
assert network_share < 0.05

# %% tags=["hide-input"]
print(textwrap.fill(cis["source"], 100))
cols = list(ftl["configurations"])
sizes = [r["model_size"] for r in ftl["rows"]]
fig, ax = plt.subplots(figsize=(7, 3.8))
width = 0.2
short = {"network": "network round trip only", "baseline_kernel": "baseline attention kernel",
         "flash_decoding": "Flash-Decoding kernel",
         "flash_decoding_cached": "Flash-Decoding kernel + prefix cache"}
for i, col in enumerate(cols):
    ax.bar(np.arange(len(sizes)) + (i - 1.5) * width, [r[col] for r in ftl["rows"]], width,
           label=short[col])
ax.set_xticks(np.arange(len(sizes)), sizes)
ax.set_xlabel("model size"); ax.set_ylabel("first-token latency (ms)")
ax.set_title("Reported by the CIS 565 project (one NVIDIA L4)", fontsize=9)
ax.legend(fontsize=8)
plt.show()
glue("ch7_network_share", fmt_percent(network_share))
glue("ch7_fd_gain_lo", fmt_ratio(min(fd_gain), 2)); glue("ch7_fd_gain_hi", fmt_ratio(max(fd_gain), 2))
glue("ch7_cache_gain_lo", fmt_ratio(cache_gain[-1])); glue("ch7_cache_gain_hi", fmt_ratio(cache_gain[0]))

# %% [markdown]
# Swapping in Flash-Decoding cut the first-token latency by a factor between
# {glue:text}`ch7_fd_gain_lo` and {glue:text}`ch7_fd_gain_hi`, most for the largest model; the
# prefix cache (reusing earlier requests' keys and values) helped far more, from
# {glue:text}`ch7_cache_gain_hi` on the smallest model down to {glue:text}`ch7_cache_gain_lo`
# on the largest. The network round trip was at most {glue:text}`ch7_network_share` of the
# uncached latency. The throughput they report is
# a more sobering number:

# %%
tput = {r["framework"]: r["tokens_per_s"] for r in cis["throughput"]["rows"]}
base, fd, ds = tput["vLLM (baseline kernel)"], tput["vLLM (Flash-Decoding kernel)"], tput["DeepSpeed"]
gain = fd / base
# If a kernel makes attention f times faster, a step whose attention share is s speeds up by
# 1 / (1 - s (1 - 1/f)). The share that explains their gain if the kernel halved attention:
f_kernel = 2.0
share = (1 - 1 / gain) / (1 - 1 / f_kernel)
# Attention's share of a Mistral-7B decode step's bytes: the cache against weights + cache.
weights_m = counts.param_bytes(mistral, 2)
kv_tok = counts.kv_bytes_per_token(mistral, 2)
tokens_for_share = share / (1 - share) * weights_m / kv_tok
l4 = get_chip("L4")
max_cached = (l4.hbm_bytes - weights_m) / kv_tok
max_share = max_cached * kv_tok / (weights_m + max_cached * kv_tok)
assert 1 < gain < 1.2 and share < max_share

# %% tags=["hide-input"]
for name, value in tput.items():
    print(f"{name:32s} {value:>6,} tokens/s")
glue("ch7_tput_gain", fmt_ratio(gain, 2)); glue("ch7_ds_gain", fmt_ratio(ds / fd))
glue("ch7_f_kernel", fmt_ratio(f_kernel, 0)); glue("ch7_l4_mem", fmt_bytes(l4.hbm_bytes, 0))
glue("ch7_share", fmt_percent(share)); glue("ch7_tokens_share", fmt_count(round(tokens_for_share, -3)))
glue("ch7_max_share", fmt_percent(max_share)); glue("ch7_max_cached", fmt_count(round(max_cached, -3)))
cached_tokens = np.geomspace(1e3, max_cached, 50)
fig, ax = plt.subplots(figsize=(6.5, 3.5))
ax.semilogx(cached_tokens, 100 * cached_tokens * kv_tok / (weights_m + cached_tokens * kv_tok))
ax.axhline(100 * share, color="k", ls=":", label="share implied by the reported +throughput")
ax.set_xlabel("tokens in the KV cache, summed over the batch")
ax.set_ylabel("attention's share of step bytes (%)")
ax.set_title("Mistral-7B decode step in bfloat16, up to a full L4 (predicted)", fontsize=9)
ax.legend(fontsize=8); ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# The Flash-Decoding kernel raised vLLM's throughput by {glue:text}`ch7_tput_gain`, and
# DeepSpeed (whose kernels and batching differ) delivered {glue:text}`ch7_ds_gain` that. The
# estimator explains why a better attention kernel moves end-to-end throughput so little. A
# decode step reads the weights and the cache; only the cache is attention's. If the kernel
# made attention {glue:text}`ch7_f_kernel` faster, a {glue:text}`ch7_tput_gain` gain means attention was about
# {glue:text}`ch7_share` of the step — which for Mistral-7B is where the batch holds about
# {glue:text}`ch7_tokens_share` cached tokens in total. On an L4's {glue:text}`ch7_l4_mem` the cache can grow to about
# {glue:text}`ch7_max_cached` tokens, where attention would be {glue:text}`ch7_max_share` of the
# step: decode kernels matter in proportion to how much of the memory traffic is cache, which
# is why they matter most for long contexts and large batches, and why batching, scheduling and
# memory management (the rest of this book) decide the rest.
#
# ## Summary
#
# - A decode step's attention does $2G/b$ FLOPs per byte of cache: it is a read of the cache,
#   and its speed is the bandwidth the kernel can draw.
# - FlashAttention's grid at decode has one program per sequence and head, too few to keep a
#   GPU's SMs reading at small batch. Flash-Decoding splits the cache into chunks, computes a
#   partial output and log-sum-exp per chunk in parallel, and combines them exactly.
# - FlashDecoding++ replaces the per-chunk maxima with one calibrated $\varphi$, checks each row
#   locally and recomputes when a row is out of range; how often that happens is a property of
#   the model's score distribution.
# - PagedAttention stores the cache in blocks of a shared pool addressed by a block table,
#   wasting less than a block per sequence instead of the unused part of a maximum-length
#   reservation, and reads blocks in place.
# - End to end, a faster attention kernel helps in proportion to the cache's share of the bytes
#   a step reads.
