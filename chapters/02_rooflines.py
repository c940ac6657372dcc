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
# # Rooflines: when is inference compute-bound?
#
# Chapter 1 found a decode step waiting on memory: it reads every weight to do two FLOPs with
# each. That changes as more work shares the same bytes. This chapter makes the idea exact with
# the *roofline model* {cite:p}`williams2009roofline`: for each part of a transformer — the
# weight matmuls, attention — it counts the FLOPs done per byte moved and compares that with
# what the chip can do per byte it reads. The comparison says when inference is compute-bound:
# prefill almost always, the weight matmuls of decoding only once many sequences share a step,
# attention during decoding never {cite:p}`austin2025scaling,chen2022arithmetic`. The chapter
# ends by measuring the roofline on the device you are running and comparing the library's
# decode step with the prediction.

# %%
import inferbook

info = inferbook.setup()

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown

from inferbook.book.listing import show_source
from inferbook.model.presets import get_preset
from inferbook.perf import calibration, counts, roofline, timing
from inferbook.perf.hardware import CHIPS, get_chip

print(info.describe())
DEVICE = timing.device_name()

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

# %% [markdown]
# ## Two roofs
#
# A chip can do at most $C$ FLOPs per second and read at most $W$ bytes per second from its
# memory. An operation that performs $F$ FLOPs on $M$ bytes that must come from memory
# therefore takes at least
#
# $$ T \ge \max\left(\frac{F}{C}, \frac{M}{W}\right), $$
#
# assuming, as the hardware is built to allow, that the loading overlaps with the arithmetic.
# Which term wins depends on the operation's **arithmetic intensity** $F / M$, FLOPs per byte,
# against the chip's $C / W$: above it the operation is compute-bound, below it memory-bound.
# The registry's chips (bfloat16 dense peak, memory bandwidth):

# %% tags=["hide-input"]
rows = []
for chip in CHIPS.values():
    rows.append(f"| {chip.name} | {fmt_rate(chip.bf16_flops_per_s, 'FLOP/s')} | "
                f"{fmt_rate(chip.hbm_bytes_per_s)} | {roofline.critical_intensity(chip):,.0f} |")
Markdown("| chip | C (bf16) | W | C / W (FLOPs per byte) |\n|---|---:|---:|---:|\n"
         + "\n".join(rows))

# %%
v5e, h100, a100 = get_chip("TPU v5e"), get_chip("H100 SXM"), get_chip("A100 40GB")
ci = {c.name: roofline.critical_intensity(c) for c in CHIPS.values()}
assert 100 < min(ci.values()) and max(ci.values()) < 1000

# %% tags=["hide-input"]
glue("ch2_ci_v5e", f"{ci['TPU v5e']:.0f}")
glue("ch2_ci_h100", f"{ci['H100 SXM']:.0f}")
glue("ch2_ci_a100", f"{ci['A100 40GB']:.0f}")
glue("ch2_ci_min", f"{min(ci.values()):.0f}")
glue("ch2_ci_max", f"{max(ci.values()):.0f}")

intensity = np.geomspace(0.1, 3000, 200)
fig, ax = plt.subplots(figsize=(6.5, 4))
for chip in (v5e, h100, a100):
    attainable = np.minimum(chip.bf16_flops_per_s, intensity * chip.hbm_bytes_per_s)
    ax.loglog(intensity, attainable, label=chip.name)
    ax.axvline(ci[chip.name], ls=":", lw=0.8, color=ax.lines[-1].get_color())
ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
ax.set_ylabel("attainable FLOP/s")
ax.set_title("The roofline: memory-bound left of each dotted line, compute-bound right",
             fontsize=10)
ax.legend()
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# Every chip in the registry needs between {glue:text}`ch2_ci_min` and
# {glue:text}`ch2_ci_max` FLOPs per byte before arithmetic becomes its bottleneck:
# {glue:text}`ch2_ci_v5e` for a TPU v5e, {glue:text}`ch2_ci_a100` for an A100,
# {glue:text}`ch2_ci_h100` for an H100. (kipply calls the A100's figure the
# "flops to bandwidth ratio"; chapter 4 follows her argument.)
#
# ## Matrix multiplications
#
# Every weight in a transformer — the attention projections $W_Q, W_K, W_V, W_O$ and the MLP
# matrices — is used in a product of the same form: activations $[B, D]$ times weights
# $[D, F]$, where $B$ counts the tokens in the step. In bfloat16 it does $2BDF$ FLOPs and
# moves $2BD + 2DF + 2BF$ bytes (read the activations and the weights, write the result):

# %%
show_source(roofline.matmul_bytes, roofline.matmul_intensity)

# %% [markdown]
# When $B$ is small next to $D$ and $F$ — a decode step's batch against a model's width — the
# weights dominate the bytes and the intensity is $2BDF / 2DF = B$. The matmul turns
# compute-bound when $B$ passes the chip's $C / W$. That threshold, in tokens per step, is the
# **critical batch size**:
#
# $$ B_\text{crit} = \frac{C}{W} \cdot \frac{\text{bytes per weight}}{2}. $$

# %%
show_source(roofline.critical_batch)

# %%
D = F = 8192
bs = np.arange(1, 1025)
# Where does the intensity cross each chip's line? Search, counting activations too.
for chip in (v5e, h100, a100):
    crossing = next(b for b in bs if roofline.matmul_intensity(b, D, F) >= ci[chip.name])
    b_crit = roofline.critical_batch(chip)
    assert b_crit <= crossing <= 1.1 * b_crit + 1, (chip.name, crossing, b_crit)
    print(f"{chip.name:10s} B_crit {b_crit:6.1f}   first compute-bound batch {crossing}")

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(bs, [roofline.matmul_intensity(b, D, F) for b in bs], "k", label=f"[B, {D}]·[{D}, {F}]")
for chip in (v5e, h100, a100):
    ax.axhline(ci[chip.name], ls=":", label=f"C / W of {chip.name}",
               color=plt.get_cmap("tab10")(list(CHIPS).index(chip.name) % 10))
ax.set_xlabel("tokens per step, B")
ax.set_ylabel("FLOPs per byte (bfloat16)")
ax.set_title("A weight matmul's intensity grows with the batch", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
plt.show()

# %% [markdown]
# The curve crosses each chip's line a little after $B_\text{crit}$ (activations add a few
# bytes the formula ignores). Quantization moves the threshold. Storing weights in int8 halves
# the bytes per weight and so halves $B_\text{crit}$; doing the arithmetic in int8 as well
# doubles $C$ and brings it back {cite:p}`austin2025scaling`:

# %%
formats = [("bf16 weights, bf16 math", 2, "bf16"), ("int8 weights, bf16 math", 1, "bf16"),
           ("int8 weights, int8 math", 1, "int8"), ("int4 weights, bf16 math", 0.5, "bf16")]
bc = {label: roofline.critical_batch(v5e, wb, math) for label, wb, math in formats}
assert bc["int8 weights, bf16 math"] == bc["bf16 weights, bf16 math"] / 2
assert bc["int8 weights, int8 math"] == bc["bf16 weights, bf16 math"]

# %% tags=["hide-input"]
table = "| chip | " + " | ".join(f[0] for f in formats) + " |\n|---|" + "---:|" * len(formats)
for chip in CHIPS.values():
    cells = [f"{roofline.critical_batch(chip, wb, math):.0f}" for _, wb, math in formats]
    table += f"\n| {chip.name} | " + " | ".join(cells) + " |"
glue("ch2_bcrit_v5e", f"{bc['bf16 weights, bf16 math']:.0f}")
glue("ch2_bcrit_v5e_int8w", f"{bc['int8 weights, bf16 math']:.0f}")
glue("ch2_bcrit_h100", f"{roofline.critical_batch(h100):.0f}")
Markdown(table)

# %% [markdown]
# This is the first half of the chapter's answer.
#
# - **Prefill** multiplies every weight by all $T$ tokens of a prompt at once. A prompt of a
#   few hundred tokens already passes $B_\text{crit}$: prefill is compute-bound, and its cost
#   is FLOPs over peak.
# - **Decoding** has one new token per sequence per step, so only batching sequences raises
#   $B$. A TPU v5e needs {glue:text}`ch2_bcrit_v5e` sequences decoding together in bfloat16
#   ({glue:text}`ch2_bcrit_v5e_int8w` with int8 weights), an H100
#   {glue:text}`ch2_bcrit_h100` — each with its own KV cache in memory. Below that, a step costs
#   the time to read the weights, however many sequences share it.
#
# ## Attention
#
# Attention is different: its "weights" are the KV cache, and every sequence has its own. One
# layer of multi-head attention over $B$ sequences, $T$ new queries each against $S$ keys,
# reads the queries and the cache and writes the output — without writing the $T \times S$
# score matrix, as a fused kernel does (chapter 6). Both products, $QK^\top$ and $PV$, do
# $2BTSNH$ FLOPs:

# %%
show_source(roofline.attention_cost, roofline.attention_intensity)

# %% [markdown]
# The batch cancels: $B$ sequences bring $B$ times the FLOPs and $B$ times the bytes. With
# $N = K$ heads in bfloat16 the intensity is $ST / (S + T)$. In **prefill** ($S = T$) that is
# $T/2$, so a long prompt's attention is compute-bound once $T$ is about twice the chip's
# $C / W$. In **generation** ($T = 1$) it is $S / (S + 1)$, below one FLOP per byte for any
# context: decoding attention is memory-bound at every batch size. Grouped-query attention, $G$
# query heads per KV head, reuses each key $G$ times and raises the intensity towards $G$ —
# still far below any chip's $C / W$.

# %%
contexts = np.unique(np.geomspace(1, 131072, 200).astype(int))
prefill_threshold = next(t for t in range(1, 10_000)
                         if roofline.attention_intensity(t, t) >= ci["TPU v5e"])
assert abs(prefill_threshold - 2 * ci["TPU v5e"]) <= 1
assert all(roofline.attention_intensity(1, s) < 1 for s in contexts)
assert all(roofline.attention_intensity(1, s, 8) < 8 for s in contexts)

# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(contexts, [roofline.attention_intensity(s, s) for s in contexts], label="prefill, T = S")
for G in (1, 8):
    ax.loglog(contexts, [roofline.attention_intensity(1, s, G) for s in contexts],
              label=f"generate, T = 1, G = {G}")
for chip in (v5e, h100):
    ax.axhline(ci[chip.name], ls=":", color="gray")
    ax.annotate(f"C / W {chip.name}", (1.2, ci[chip.name] * 1.1), fontsize=8, color="gray")
ax.set_xlabel("context S (keys per query)")
ax.set_ylabel("FLOPs per byte (bfloat16)")
ax.set_title("Attention: prefill grows with the prompt, generation stays below G", fontsize=10)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
plt.show()
glue("ch2_prefill_attention_v5e", f"{prefill_threshold:,}");

# %% [markdown]
# On a TPU v5e a prompt's attention is compute-bound from about
# {glue:text}`ch2_prefill_attention_v5e` tokens. During generation the weights get cheaper per
# token as the batch grows, the caches do not: every added sequence adds its cache to the bytes
# of every step. Once the caches outweigh the weights, batching buys little. The batch where
# they weigh the same is the weight bytes over one sequence's cache:

# %%
context = 4096
rows = []
for name in ("llama-2-13b", "llama-3-8b", "llama-3-70b", "mistral-7b"):
    cfg = get_preset(name)
    per_seq = counts.kv_cache_bytes(cfg, 1, context)
    rows.append((name, cfg.K, per_seq, counts.param_bytes(cfg) / per_seq))
even = {r[0]: r[3] for r in rows}
assert even["llama-3-8b"] > 3 * even["llama-2-13b"]       # GQA: four times smaller caches

# %% tags=["hide-input"]
glue("ch2_even_13b", f"{even['llama-2-13b']:.1f}")
glue("ch2_even_l3", f"{even['llama-3-8b']:.0f}")
glue("ch2_l3_K", str(get_preset("llama-3-8b").K)); glue("ch2_l3_N", str(get_preset("llama-3-8b").N))
Markdown(f"| model | K | KV cache of one {context:,}-token sequence | batch where caches = weights |"
         "\n|---|---:|---:|---:|\n" + "\n".join(
             f"| {n} | {k} | {fmt_bytes(b)} | {e:.1f} |" for n, k, b, e in rows))

# %% [markdown]
# LLaMA-2 13B's caches outweigh its weights from a batch of {glue:text}`ch2_even_13b`; LLaMA-3
# 8B, with {glue:text}`ch2_l3_K` KV heads for {glue:text}`ch2_l3_N` query heads, only from
# about {glue:text}`ch2_even_l3`. Both are
# far below $B_\text{crit}$: at long contexts, decoding is memory-bound through and through, and
# chapter 3 turns this into step times and throughputs.
#
# ## The roofline on your device
#
# Now a measurement. We time the library's decode step — exactly as `decode.generate` runs it,
# the sampling step and then the in-place append to the cache — at batch sizes from 1 to 256,
# and put two predictions beside it:
#
# - the **roofline** with two measured constants, as an *empirical* roofline takes them: $W$,
#   the best read bandwidth seen (a large reduction, or the model's weights streaming through
#   its matmuls at batch 1), and $C$, the best FLOP/s the model's matmuls reach at any batch.
#   A step costs $\text{KV bytes} / W + \max(2BP / C, \text{weight bytes} / W)$;
# - a **calibrated** prediction that keeps the roofline's split of a step into a weight part
#   and a cache part, but takes each part's time from the device instead of from the two roofs:
#   the model's weight matmuls at $B$ rows, run alone in one program; its attention over $B$
#   caches, run alone; plus the fixed cost of a step that moves almost nothing (the same step
#   for a model of tiny width).
#
# The three are timed in alternation, so that whatever else runs on the machine affects them
# alike, and each reports its median over the rounds. Nothing in either prediction is fitted
# to the decode step. `inferbook.perf.calibration` does the measuring:

# %%
show_source(calibration.model_matmul_program, calibration.attention_program,
            calibration.decode_sweep)

# %% [markdown]
# The model is the library's `cpu-336mb` preset, {glue:text}`ch2_sweep_params` parameters: big
# enough that reading its weights dominates a step's fixed costs. Every sequence has a
# 128-token cache.

# %%
sweep_cfg = get_preset("cpu-336mb")
# Five batch sizes keep this cell to about a minute; `inferbook bench` sweeps them all (last
# section).
sweep = calibration.decode_sweep(sweep_cfg, batches=(1, 4, 16, 64, 256), context=128)
B_axis = np.array(sweep.column("batch"))
measured = np.array(sweep.column("measured_s"))
predicted = np.array(sweep.column("predicted_s"))
roofline_s = np.array(sweep.column("roofline_s"))
errors = predicted / measured - 1
roof_errors = roofline_s / measured - 1
b_crit_here = sweep.critical_batch
tput = B_axis / measured
KNEE = 0.8                  # the knee: where throughput first reaches this share of its best
knee = int(B_axis[np.argmax(tput >= KNEE * tput.max())])
attn_bw = sweep.points[-1].attention_bytes_per_s

# %% tags=["hide-input"]
glue("ch2_sweep_params", fmt_count(counts.param_count(sweep_cfg), 0))
Markdown("| batch | measured | matmuls | attention | calibrated prediction | error | roofline "
         "| error |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(
             f"| {p.batch} | {fmt_seconds(p.measured_s, 2)} | {fmt_seconds(p.matmul_s, 2)} | "
             f"{fmt_seconds(p.attention_s, 2)} | {fmt_seconds(p.predicted_s, 2)} | "
             f"{p.error:+.0%} | {fmt_seconds(p.roofline_s, 2)} | "
             f"{p.roofline_s / p.measured_s - 1:+.0%} |" for p in sweep.points))

# %% tags=["hide-input"]
# The calibrated prediction holds. This build may share the machine with other programs, so
# the live check is looser than the book's targets (±15% median, ±25% worst), which the
# last section asserts on benchmark runs recorded on a quiet machine.
expect_measured(np.median(np.abs(errors)) <= 0.25 and np.max(np.abs(errors)) <= 0.5,
                "the calibrated prediction follows the measured decode step at every batch",
                expected="a median error within 25% and every error within 50%",
                measured=", ".join(f"batch {b}: {e:+.0%}" for b, e in zip(B_axis, errors)))
glue("ch2_knee_share", fmt_percent(KNEE))
glue("ch2_device", DEVICE)
glue("ch2_W", fmt_rate(sweep.bandwidth))
glue("ch2_C", fmt_rate(sweep.peak_flops, "FLOP/s"))
glue("ch2_weights", fmt_bytes(sweep.weight_bytes))
glue("ch2_bcrit_here", f"{b_crit_here:.0f}")
glue("ch2_worst_error", fmt_percent(np.max(np.abs(errors))))
glue("ch2_worst_roof_error", fmt_percent(np.max(np.abs(roof_errors))))
glue("ch2_worst_roof_batch", str(int(B_axis[np.argmax(np.abs(roof_errors))])))
glue("ch2_knee", str(knee))
glue("ch2_step_1", fmt_seconds(measured[0], 1))
glue("ch2_step_max", fmt_seconds(measured[-1], 1))
glue("ch2_tput_ratio", fmt_ratio(tput.max() / tput[0], 0))
glue("ch2_attn_bw", fmt_rate(attn_bw))
glue("ch2_attn_share", fmt_percent(attn_bw / sweep.bandwidth))

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
ax1.loglog(B_axis, measured * 1e3, "o-", label="measured")
ax1.loglog(B_axis, predicted * 1e3, "s--", label="calibrated prediction")
ax1.loglog(B_axis, roofline_s * 1e3, ":", label="roofline (W and C)")
ax1.axvline(b_crit_here, color="gray", lw=0.8)
ax1.annotate("B_crit", (b_crit_here * 1.05, ax1.get_ylim()[0] * 1.2), fontsize=8)
ax1.set_xlabel("batch size B")
ax1.set_ylabel("decode step (ms)")
ax1.legend(fontsize=8)
ax1.grid(True, which="both", alpha=0.3)
ax2.semilogx(B_axis, tput, "o-", label="measured")
ax2.semilogx(B_axis, B_axis / predicted, "s--", label="calibrated prediction")
ax2.semilogx(B_axis, B_axis / roofline_s, ":", label="roofline")
ax2.axvline(b_crit_here, color="gray", lw=0.8)
ax2.set_xlabel("batch size B")
ax2.set_ylabel("tokens per second")
ax2.legend(fontsize=8)
ax2.grid(True, which="both", alpha=0.3)
fig.suptitle(f"{sweep_cfg.name}, context {sweep.context}: measured on {DEVICE}", fontsize=10)
fig.tight_layout()
plt.show()

# %% [markdown]
# On {glue:text}`ch2_device` the read bandwidth is {glue:text}`ch2_W` and the best matmul
# reaches {glue:text}`ch2_C`. The model's matmul weights are {glue:text}`ch2_weights`, so the
# roofline's knee — its critical batch — sits at $B =$ {glue:text}`ch2_bcrit_here`. The
# measured step takes {glue:text}`ch2_step_1` at batch 1 and {glue:text}`ch2_step_max` at the
# largest batch; the throughput rises {glue:text}`ch2_tput_ratio` and reaches
# {glue:text}`ch2_knee_share` of its best
# at batch {glue:text}`ch2_knee`: the knee of the measured curve. The calibrated prediction is
# within {glue:text}`ch2_worst_error` of the measured step at every batch size; the two-constant
# roofline is off by up to {glue:text}`ch2_worst_roof_error` (at batch
# {glue:text}`ch2_worst_roof_batch`). {glue:text}`ch2_valley_sentence` Attention, for its part,
# read the caches at {glue:text}`ch2_attn_bw` at the largest batch, {glue:text}`ch2_attn_share`
# of $W$: many small per-sequence products use the memory less well than one large one.
#
# The reason is in the matmuls themselves. Here is the FLOP rate the model's weight matmuls
# achieved at each batch size, against the two roofs — $C$, and $2B$ FLOPs per weight at
# bandwidth $W$:

# %%
achieved = 2 * B_axis * sweep.params / np.array(sweep.column("matmul_s"))
bytes_per_weight = sweep.weight_bytes / sweep.params
roof = np.minimum(sweep.peak_flops, 2 * B_axis * sweep.bandwidth / bytes_per_weight)
share_of_roof = achieved / roof
worst = int(np.argmin(share_of_roof))

# %% tags=["hide-input"]
if info.platform == "cpu":
    # XLA:CPU's products with a few rows reach neither roof: the valley the roofline cannot see.
    expect_measured(share_of_roof[worst] < 0.7 and 2 <= B_axis[worst] <= 32,
                    "the model's matmuls fall into a valley below both roofs at a few rows",
                    expected="below 70% of the roofline somewhere between 2 and 32 rows",
                    measured=f"lowest {fmt_percent(share_of_roof[worst])} at "
                             f"{int(B_axis[worst])} rows")
    valley = ("On a CPU the roofline misses a valley: XLA's matrix products with a handful of "
              "rows run far below both of its roofs, so the step time rises long before the "
              "critical batch, and only a measurement of the matmuls at those shapes predicts it.")
else:
    valley = ("The roofline's shape — flat, then linear — is what an accelerator delivers; the "
              "calibrated prediction adds what its kernels achieve at each shape.")

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(B_axis, roof, "k:", label="roofline: min(C, 2B·W / bytes per weight)")
ax.loglog(B_axis, achieved, "o-", label="the model's matmuls, measured")
ax.set_xlabel("rows B")
ax.set_ylabel("FLOP/s")
ax.set_title(f"Achieved matmul throughput at {sweep_cfg.name}'s shapes, {DEVICE}", fontsize=9)
ax.legend(fontsize=8)
ax.grid(True, which="both", alpha=0.3)
plt.show()
glue("ch2_valley_batch", str(int(B_axis[worst])))
glue("ch2_valley_share", fmt_percent(share_of_roof[worst]))
glue("ch2_valley_sentence", valley);

# %% [markdown]
# At batch {glue:text}`ch2_valley_batch` the matmuls reach only {glue:text}`ch2_valley_share` of
# what the roofline allows. Accelerators come much closer to both roofs (chapter 4 holds the
# sources' estimates against measurements on A100s), which is why the sources can reason with
# two constants. The lesson carries over anyway: a roofline is a bound, and the distance to it
# belongs to the kernels, the shapes and the device — measure it where it matters.
#
# The scaling book's appendix shows the same kind of sweep on a TPU: step time almost flat up to
# a batch of about {glue:text}`ch2_bcrit_v5e` — the v5e's $B_\text{crit}$ — then growing
# linearly, and throughput levelling off beyond it {cite:p}`austin2025scaling`.
#
# ```{admonition} Takeaways
# - An operation is compute-bound when its FLOPs per byte exceed the chip's $C / W$ — a few
#   hundred for current accelerators.
# - A weight matmul does about $B$ FLOPs per bfloat16 byte: prefill is compute-bound, decoding
#   needs $B_\text{crit} = (C / W) \cdot (\text{bytes per weight} / 2)$ sequences per step to
#   be. Quantized weights lower $B_\text{crit}$; quantized arithmetic raises it.
# - Decoding attention does about one FLOP per byte of KV cache at any batch size: it is always
#   memory-bound, and its cost grows with every sequence added.
# - On a real device the roofline is a floor. Measuring the kernels at the model's shapes turns
#   it into a prediction.
# ```

# %% [markdown]
# ## Measured on real hardware
#
# The sweep above ran on whatever device is executing this page, with a few repeats. The
# library's benchmark, `inferbook bench` (`make bench` in a checkout), does the same work
# more thoroughly — batch sizes 1 to 256 at two context lengths, more repeats, prefill as well
# — and records the result, with the device, the date and the library and JAX versions, in a
# file under `book/data/bench/`. For each decode configuration it reports the *model bandwidth
# utilisation*: the bytes a step must move (every weight, every cached key and value) divided
# by the step time and by the read bandwidth measured in alternation with the step, so that
# whatever else shares the machine slows both alike. Here is every device on record: the
# measured step time against the calibrated prediction.

# %%
from inferbook.perf import bench_results

records = bench_results.load_results()
# The book's targets for a full CPU run of the benchmark model, held to the runs recorded on
# a quiet machine: at the start, a 1-minute load average at most half the cores.
TARGETS = {"mbu": 0.70, "mbu_alone": 0.60, "median": 0.15, "worst": 0.25}


def quiet(rec):
    load = rec.get("load_average_before")
    return load is not None and load[0] <= 0.5 * rec["cpu_count"]


def label(rec):
    return (f"{rec['device']}, {rec['model']} ({rec['dtype']}), jax {rec['jax_version']}, "
            f"{rec['date'][:10]}" + ("" if quiet(rec) else ", under load"))


# %% tags=["hide-input"]
fig, ax = plt.subplots(figsize=(6.5, 5))
for rec in records:
    dec = [r for r in rec["rows"] if r["kind"] == "decode"]
    ax.loglog([r["measured_s"] * 1e3 for r in dec], [r["predicted_s"] * 1e3 for r in dec],
              "o" if quiet(rec) else "x", alpha=0.8, label=label(rec))
lo, hi = ax.get_xlim()
line = np.geomspace(lo, hi, 50)
ax.plot(line, line, "k-", lw=0.8, label="prediction = measurement")
ax.fill_between(line, (1 - TARGETS["median"]) * line, (1 + TARGETS["median"]) * line,
                color="gray", alpha=0.2, label=f"±{fmt_percent(TARGETS['median'])}")
ax.set_xlabel("measured decode step (ms)")
ax.set_ylabel("calibrated prediction (ms)")
ax.set_title("Decode step, measured against predicted, every device on record", fontsize=10)
ax.legend(fontsize=6, loc="upper left")
ax.grid(True, which="both", alpha=0.3)
plt.show()

Markdown("| device | model | JAX | date | load at start | bandwidth | MBU at batch 1 "
         "| median \\|error\\| | worst \\|error\\| |\n|---|---|---|---|---:|---:|---:|---:|---:|\n"
         + "\n".join(
             f"| {r['device']} | {r['model']} ({r['dtype']}) | {r['jax_version']} | "
             f"{r['date'][:10]} | {r['load_average_before'][0]:.1f} | "
             f"{fmt_rate(r['read_bytes_per_s'])} | {fmt_percent(r['summary']['mbu_measured'])} "
             f"| {fmt_percent(r['summary']['median_abs_error'], 1)} | "
             f"{fmt_percent(r['summary']['worst_abs_error'], 1)} |" for r in records))

# %%
cpu_runs = [r for r in records if r["platform"] == "cpu" and not r["quick"]
            and r["model"] == bench_results.default_model("cpu")]
held = [r for r in cpu_runs if quiet(r)]
assert held, "no full CPU benchmark recorded on a quiet machine"
for rec in held:
    s = rec["summary"]
    batches = {r["batch"] for r in rec["rows"] if r["kind"] == "decode"}
    assert {1, 256} <= batches                          # the targets span batch 1..256
    assert s["mbu_measured"] >= TARGETS["mbu"], s       # decode at batch 1 streams the weights
    assert s["mbu_microbenchmark"] >= TARGETS["mbu_alone"], s    # ... under every JAX version
    assert s["median_abs_error"] <= TARGETS["median"], s   # the calibrated estimator holds ...
    assert s["worst_abs_error"] <= TARGETS["worst"], s     # ... at every batch size and context
cpu = held[-1]
first = next(r for r in cpu["rows"] if r["kind"] == "decode"
             and (r["batch"], r["context"]) == (cpu["summary"]["batch"], cpu["summary"]["context"]))
n_devices = len({r["device"] for r in records})

# %% tags=["hide-input"]
glue("ch2_rec_devices", "One device is" if n_devices == 1 else f"{n_devices} devices are")
glue("ch2_rec_cpu", cpu["device"])
glue("ch2_rec_jax", cpu["jax_version"])
glue("ch2_rec_rows", str(sum(r["kind"] == "decode" for r in cpu["rows"])))
glue("ch2_rec_step1", fmt_seconds(first["measured_s"], 1))
glue("ch2_rec_bw1", fmt_rate(first["bytes_per_s"]))
glue("ch2_rec_read1", fmt_rate(first["read_bytes_per_s"]))
glue("ch2_rec_mbu1", fmt_percent(cpu["summary"]["mbu_measured"]))
glue("ch2_rec_read_alone", fmt_rate(cpu["read_bytes_per_s"]))
glue("ch2_rec_mbu_alone", fmt_percent(cpu["summary"]["mbu_microbenchmark"]))
glue("ch2_rec_median", fmt_percent(cpu["summary"]["median_abs_error"], 1))
glue("ch2_rec_worst", fmt_percent(cpu["summary"]["worst_abs_error"], 1))
glue("ch2_target_mbu", fmt_percent(TARGETS["mbu"]))
glue("ch2_target_alone", fmt_percent(TARGETS["mbu_alone"]))
glue("ch2_target_median", fmt_percent(TARGETS["median"]))
glue("ch2_target_worst", fmt_percent(TARGETS["worst"]))

# %% [markdown]
# {glue:text}`ch2_rec_devices` on record so far. On {glue:text}`ch2_rec_cpu`, under jax
# {glue:text}`ch2_rec_jax`, the decode step at batch 1 took {glue:text}`ch2_rec_step1`: it moved
# the weights and the cache at {glue:text}`ch2_rec_bw1` while the memory delivered
# {glue:text}`ch2_rec_read1` to a plain read, a model bandwidth utilisation of
# {glue:text}`ch2_rec_mbu1`. (The same run's read at its start, alone, reached
# {glue:text}`ch2_rec_read_alone`; against that the step's MBU is
# {glue:text}`ch2_rec_mbu_alone`. On a machine that others share, the bandwidth a read gets
# changes from one moment to the next, which is why the benchmark reads it in alternation with
# the step.) Over all {glue:text}`ch2_rec_rows` decode configurations the calibrated prediction
# was off by {glue:text}`ch2_rec_median` in the median and {glue:text}`ch2_rec_worst` at worst.
# The asserts above hold every run recorded on a quiet machine to the book's targets — at
# least {glue:text}`ch2_target_mbu` MBU at batch 1 ({glue:text}`ch2_target_alone` against the
# standalone read), within {glue:text}`ch2_target_median` in the median and
# {glue:text}`ch2_target_worst` at worst — so a new quiet recording that missed them would fail
# the build. Runs recorded under load are plotted (as crosses) but not held to the targets. A
# GPU run adds MBU against the datasheet's bandwidth and Hugging Face's `generate` on the same
# model beside the library's.
#
# ### Two versions of JAX on one machine
#
# Colab runs an older JAX than this book's build machine, and XLA's CPU compiler changed in
# between. Here are the benchmark runs of this CPU under each version side by side: the decode
# step across batch sizes at the shorter context, and the batch-1 step against the read
# bandwidth.

# %%
by_version = {}
for rec in cpu_runs:                 # oldest first: the latest run of each version wins
    if quiet(rec) or not any(quiet(r) for r in cpu_runs
                             if r["jax_version"] == rec["jax_version"]):
        by_version[rec["jax_version"]] = rec
versions = sorted(by_version, key=lambda v: tuple(int(x) for x in v.split(".")))


def decode_rows(rec, context):
    return sorted((r for r in rec["rows"] if r["kind"] == "decode" and r["context"] == context),
                  key=lambda r: r["batch"])


context0 = min(r["context"] for r in cpu_runs[0]["rows"] if r["kind"] == "decode")
mbu_alone = [by_version[v]["summary"]["mbu_microbenchmark"] for v in versions]

# %% tags=["hide-input"]
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
for v in versions:
    rows = decode_rows(by_version[v], context0)
    ax1.loglog([r["batch"] for r in rows], [r["measured_s"] * 1e3 for r in rows], "o-",
               label=f"jax {v}" + ("" if quiet(by_version[v]) else " (under load)"))
ax1.set_xlabel("batch size B")
ax1.set_ylabel(f"decode step, context {context0} (ms)")
ax1.legend(fontsize=8)
ax1.grid(True, which="both", alpha=0.3)
ax2.bar([f"jax {v}" for v in versions], [100 * m for m in mbu_alone], color="tab:blue")
ax2.axhline(100 * TARGETS["mbu_alone"], color="gray", ls=":", label="target")
ax2.set_ylabel("batch-1 step, % of the standalone read")
ax2.legend(fontsize=8)
fig.suptitle(f"{cpu_runs[0]['model']} on {cpu_runs[0]['device']}, by JAX version",
             fontsize=10)
fig.tight_layout()
plt.show()

Markdown("| JAX | date | load at start | step at batch 1 | at batch 8 | batch 1, % of the "
         "standalone read | model's matmuls at batch 8 | held to the targets |\n"
         "|---|---|---:|---:|---:|---:|---:|---|\n" + "\n".join(
             f"| {v} | {r['date'][:10]} | {r['load_average_before'][0]:.1f} | "
             f"{fmt_seconds(step[1], 1)} | {fmt_seconds(step[8], 1)} | "
             f"{fmt_percent(r['summary']['mbu_microbenchmark'])} | {fmt_seconds(mm[8], 1)} | "
             f"{'yes' if quiet(r) else 'no (recorded under load)'} |"
             for v in versions for r in [by_version[v]]
             for step in [{x['batch']: x['measured_s'] for x in decode_rows(r, context0)}]
             for mm in [{x['batch']: x['matmul_s'] for x in decode_rows(r, context0)}]))

# %%
old, new = versions[0], versions[-1]
# The matmuls alone, at the largest batch both runs measured.
matmul_at = {v: {r["batch"]: r["matmul_s"] for r in decode_rows(by_version[v], context0)}
             for v in versions}
B_top = max(set(matmul_at[old]) & set(matmul_at[new]))
loaded = [v for v in versions if not quiet(by_version[v])]

# %% tags=["hide-input"]
glue("ch2_jax_old", old)
glue("ch2_jax_new", new)
glue("ch2_jax_B", str(B_top))
glue("ch2_jax_mm_old", fmt_seconds(matmul_at[old][B_top]))
glue("ch2_jax_mm_new", fmt_seconds(matmul_at[new][B_top]))
glue("ch2_jax_status",
     "Every version's run was recorded on a quiet machine." if not loaded else
     f"Only jax {' and '.join(v for v in versions if v not in loaded) or 'no version'} has a "
     f"run recorded on a quiet machine; jax {' and '.join(loaded)} was recorded only under "
     "load, so its figures are provisional and not held to the targets.")

# %% [markdown]
# {glue:text}`ch2_jax_status` The two versions compile the same program differently. Under
# jax {glue:text}`ch2_jax_old` (Colab's), XLA:CPU used to rewrite the cache write of every decode
# step — a scatter into each sequence's slot of a [B, K, S, H] array — by moving the indexed
# axes to the front: it transposed every layer's whole cache, wrote the new token and
# transposed it back, two copies of the cache per step, which made every batch beyond the first
# few sequences markedly slower than under {glue:text}`ch2_jax_new` (the copies grow with the
# batch and the context). The library now writes
# the cache as a scatter into rows of a [B·K, S, H] view (`kvcache.write`), whose indexed axes
# are already in front, and a test compiles the append under each version and checks that no
# copy of the cache is left. What remains between the versions is in the matmuls themselves,
# which XLA hands to different kernels in each: the table's matmul column is the model's weight
# products timed alone. At batch {glue:text}`ch2_jax_B` they take {glue:text}`ch2_jax_mm_old`
# under jax {glue:text}`ch2_jax_old` and {glue:text}`ch2_jax_mm_new` under
# {glue:text}`ch2_jax_new`: the same shapes, the same weights, another compiler — a limit of
# XLA's, not of the model's code, and one the calibrated prediction already carries, since it
# times the matmuls under the version it runs on.
