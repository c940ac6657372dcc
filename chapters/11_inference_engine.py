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
# # Designing an inference engine
#
# The chapters so far optimised one prefill and one decode step at a time. A server has to do
# more: requests arrive whenever their users send them, with prompts of every length, and
# want answers of every length. Something has to decide, moment by moment, which prompt to
# prefill, which sequences to decode together, and what to do when one of them finishes. That
# something is the *inference engine*, and its choices place the server somewhere on the
# latency–throughput trade-off of chapter 3 {cite:p}`austin2025scaling`.
#
# This chapter builds one. The model offers three operations — prefill a prompt, insert the
# result into a slot of the batch being decoded, advance every slot by one token — in the
# shape of Google's JetStream {cite:p}`jetstream2024`. An *orchestrator* strings them together
# under four designs: static batching, interleaved prefill and generate, continuous batching
# with paged memory, and disaggregated prefill and generate servers. We replay one trace of
# requests through each, on this machine's CPU with the library's model, and read time to
# first token, time per output token and throughput off the orchestrator's own event log.

# %%
import inferbook

info = inferbook.setup()

import matplotlib.pyplot as plt
import numpy as np

from inferbook.book.listing import show_source
from inferbook.model import decode, decoder
from inferbook.model.presets import get_preset
from inferbook.perf import counts, phase_time, timing
from inferbook.perf.hardware import get_chip
from inferbook.serving import (
    CostTimer,
    LinearCost,
    MedianClock,
    MockEngine,
    ModelEngine,
    Request,
    api,
    mock_stream,
    serve,
    warm_up,
)
from inferbook.serving.workloads import mixed_trace

print(info.describe())
DEVICE = timing.device_name()

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.present import (
    fmt_bytes,
    fmt_percent,
    fmt_rate,
    fmt_ratio,
    fmt_seconds,
    fmt_tokens_per_s,
    glue,
)

glue("ch11_device", DEVICE)

# %% [markdown]
# ## The interface between model and server
#
# JetStream asks a model for very little. `prefill` runs a prompt through the model at batch
# one and returns its KV cache — the *prefix* — together with the first generated token.
# `insert` copies a prefix into one row (a *slot*) of the fixed-size batch the decoder works
# on. `generate` runs one decode step for every slot at once and returns one token per slot.
# Because the decode batch has the same shape whatever requests come and go, each operation
# compiles once; and because the prefix is a self-contained value, prefill and generate need
# not even run on the same machine. Here is the interface as the library defines it:

# %%
show_source(api.Engine.prefill, api.Engine.insert, api.Engine.generate)

# %% [markdown]
# `ModelEngine` implements it over the library's transformer. The decode batch is a KV cache of
# `slots` rows, each `max_len` tokens long, plus each slot's next input token and the sampling
# step it has reached. `generate` is the decoding loop of chapter 1, split as there into a
# program that reads the cache and samples, and one that appends the new keys and values in
# place. Each method is a thin shell; the compiled functions it calls, shown after it, do the
# work:

# %%
show_source(ModelEngine.generate, ModelEngine.insert, callees=True)

# %% [markdown]
# Driving the engine by hand shows what a server does. Two requests are prefilled one at a
# time and inserted into slots 0 and 2 of an eight-slot batch; a few generate steps later each
# slot has produced exactly the tokens `decode.generate` produces for its prompt (which, as the
# library's tests check, are the tokens of generating that prompt alone):

# %%
cfg = get_preset("small")
params = decoder.init_params(cfg, seed=0)
# Prompts are padded to 16, 32, 64, ... tokens (powers of two times min_bucket), so each
# length bucket compiles one prefill program.
engine = ModelEngine(cfg, slots=8, max_len=192, min_bucket=16)

prompts = {0: [5, 17, 400, 23, 9], 2: list(range(100, 112))}
state = engine.init_decode_state()
streams = {}
for slot, prompt in prompts.items():
    prefix, first = engine.prefill(params, prompt)
    state = engine.insert(prefix, state, slot)
    streams[slot] = [first]
for _ in range(7):
    state, tokens = engine.generate(params, state)
    for slot in prompts:
        streams[slot].append(int(tokens[slot]))
expected = decode.generate(params, cfg, list(prompts.values()), 8).tokens
assert list(streams.values()) == expected
streams

# %% [markdown]
# Everything else — which request goes into which slot, when to prefill and when to decode —
# belongs to the orchestrator. To make its decisions visible we first run it on a toy model
# whose arithmetic fits in a margin: `MockEngine` continues a context $c$ with the token
# $(\sum c + |c|) \bmod V$, and a cost model (`LinearCost`) charges
# {glue:text}`ch11_cost_prefill` plus {glue:text}`ch11_cost_token` per prompt token for a
# prefill and {glue:text}`ch11_cost_generate` per generate step. Prompt `[1, 2, 3]` with
# $V = 97$ continues with 9, 19, 39:

# %%
assert mock_stream([1, 2, 3], 3, 97) == [9, 19, 39]
toy = MockEngine(slots=2, max_len=64)
toy_trace = [Request(0, [1, 2, 3], 6), Request(1, [4] * 30, 2), Request(2, [5] * 8, 5),
             Request(3, [6] * 12, 3, arrival_s=0.004)]
cost = CostTimer(LinearCost())
toy_runs = {d: serve(toy, None, toy_trace, d, timer=cost) for d in ("static", "interleaved")}
for run in toy_runs.values():
    assert run.outputs() == {r.id: mock_stream(r.prompt, r.max_new_tokens, 97)
                             for r in toy_trace}
print(toy_runs["static"].events[:4])

# %% tags=["hide-input"]
glue("ch11_cost_prefill", fmt_seconds(LinearCost().prefill_s, 0))
glue("ch11_cost_token", fmt_seconds(LinearCost().per_token_s))
glue("ch11_cost_generate", fmt_seconds(LinearCost().generate_s, 0))

# %% [markdown]
# Every call the orchestrator makes is an `Event` in its log: which server, what kind of call,
# when it started and ended, for which requests. The timelines in this chapter are drawn from
# those logs and from the per-request token times, nothing else.

# %% tags=["hide-input"]
KIND_COLOURS = {"prefill": "tab:orange", "generate": "tab:blue", "insert": "tab:green",
                "transfer": "tab:purple", "load": "tab:olive", "save": "tab:olive"}
KIND_LABELS = {"prefill": "prefill", "generate": "generate", "insert": "insert",
               "transfer": "transfer", "load": "prefix copy", "save": "prefix copy"}


def draw_timeline(run, ax, title, scale=1e3, unit="ms"):
    """Servers' events above, each request's wait (light) and stream (dark) below."""
    servers = sorted({e.server for e in run.events})
    lane = 3 if len(run.sequences) > 12 else 1        # server lanes stand out from requests
    for i, server in enumerate(servers):
        for kind, colour in KIND_COLOURS.items():
            spans = [(e.start * scale, (e.end - e.start) * scale) for e in run.events
                     if e.server == server and e.kind == kind and e.end > e.start]
            ax.broken_barh(spans, (lane * i - 0.4 * lane, 0.8 * lane), color=colour,
                           edgecolor="white", lw=0.3)
    seqs = sorted(run.sequences, key=lambda s: s.id)
    base = lane * (len(servers) - 0.5) + 1
    for j, seq in enumerate(seqs):
        arrive, first, last = seq.request.arrival_s, seq.token_times[0], seq.token_times[-1]
        ax.broken_barh([(arrive * scale, (first - arrive) * scale)], (base + j - 0.3, 0.6),
                       color="lightgrey")
        ax.broken_barh([(first * scale, max(last - first, 1e-9) * scale)],
                       (base + j - 0.3, 0.6), color="dimgrey")
    ticks = [lane * i for i in range(len(servers))] + [base + j for j in range(len(seqs))]
    labels = servers + [f"request {s.id}" if len(seqs) <= 12 or s.id % 8 == 0 else ""
                        for s in seqs]
    ax.set_yticks(ticks)
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title, fontsize=9)
    # One legend entry per kind of event this run has: handles and labels always pair up.
    kinds = {e.kind for e in run.events}
    return {KIND_LABELS[k]: plt.Rectangle((0, 0), 1, 1, color=c)
            for k, c in KIND_COLOURS.items() if k in kinds}


def add_legend(fig, handles):
    """A figure legend of `draw_timeline`'s handles, each with its own label."""
    legend = fig.legend(list(handles.values()), list(handles), loc="lower center",
                        ncol=len(handles), fontsize=8)
    assert len(legend.legend_handles) == len(legend.get_texts()) == len(handles)


fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharex=True)
handles = {}
for ax, (design, run) in zip(axes, toy_runs.items()):
    handles |= draw_timeline(run, ax, f"{design} (toy model, cost model clock)")
add_legend(fig, handles)
fig.tight_layout(rect=(0, 0.08, 1, 1))
plt.show()

# %% [markdown]
# **Static batching** (left) takes the requests that are waiting, prefills them as one padded
# batch, and runs generate steps until *every* one of them has finished; only then does it
# look at the queue again. Request 1 wanted two tokens and is done after one step, but its slot
# idles until request 0's six tokens are out, and request 2 has been waiting all along.
# **Interleaved** serving (right) prefills one prompt whenever a slot is free — prefill has
# priority — and decodes the slots in between. A slot is refilled the step after it empties:
# this is *continuous batching* {cite:p}`yu2022orca`, at its plainest.

# %%
toy_static, toy_inter = (toy_runs[d].summary for d in ("static", "interleaved"))
assert toy_inter.throughput > toy_static.throughput
assert toy_inter.ttft_mean_s < toy_static.ttft_mean_s

# %% tags=["hide-input"]
glue("ch11_toy_tput_gain", fmt_ratio(toy_inter.throughput / toy_static.throughput))

# %% [markdown]
# Even on four requests the interleaved schedule delivers {glue:text}`ch11_toy_tput_gain` the
# throughput and an earlier first token for everyone. The sources list four reasons static
# batching serves badly {cite:p}`austin2025scaling`: large prefill batches make everyone wait
# for everyone's prefill (bad time to first token); short answers leave their slots idle while
# long ones finish; prompts are padded to the longest in the batch; and prefill and generate
# are forced onto the same chips and sharding. It is nevertheless where most codebases start,
# and it is fine for a single user on a laptop.
#
# ## Four designs on this CPU
#
# Now the real model: the `small` preset with eight decode slots of 192 tokens. The trace has
# the feature that matters most in practice: most answers are short, a few are long. All
# requests arrive at once, as in an offline batch job, so that throughput measures what each
# design can do rather than how fast requests happen to arrive.

# %%
trace = mixed_trace(48, cfg.V, prompt_len=(4, 16), short=(2, 8), long=(128, 176),
                    long_fraction=0.125, seed=1)
out_lens = np.array([r.max_new_tokens for r in trace])

# %% tags=["hide-input"]
glue("ch11_n_requests", str(len(trace)))
glue("ch11_slots", str(engine.max_concurrent_decodes))
glue("ch11_out_median", str(int(np.median(out_lens))))
glue("ch11_out_max", str(int(out_lens.max())))
print(f"{len(trace)} requests; output lengths: median {np.median(out_lens):.0f}, "
      f"max {out_lens.max()}, total {out_lens.sum()}")

# %% [markdown]
# The output lengths have a median of {glue:text}`ch11_out_median` tokens and a maximum of
# {glue:text}`ch11_out_max`. Each design replays the same {glue:text}`ch11_n_requests`
# requests on the same engine with {glue:text}`ch11_slots` slots. Time is *measured*: the
# orchestrator runs every engine call for real and charges it the wall-clock time it took on
# this device, after a warm-up pass has compiled every program the run will use. Because this
# machine may be running other work, a call is charged the median of all the measured calls
# of the same compiled program (`MedianClock`), so that a call the operating system happened
# to delay does not count against the design that made it. For the disaggregated design, whose
# two servers would be two machines, each server keeps its own clock; the link between them is
# charged by the estimator (next section). The designs must agree on every token, and agree
# with `decode.generate`.

# %%
link_chip = get_chip("TPU v5e")
DESIGNS = {
    "static": {},
    "interleaved": {},
    "continuous": dict(block_size=16),
    "disaggregated": dict(link_bytes_per_s=link_chip.link_bytes_per_s),
}
# The reference for the first eight requests: decode.generate on their prompts (one ragged
# batch, which gives each prompt its tokens alone), cut to each request's length.
check = trace[:8]
reference = decode.generate(params, cfg, [r.prompt for r in check],
                            max(r.max_new_tokens for r in check)).tokens
runs = {}
for design, options in DESIGNS.items():
    warm_up(engine, params, trace, design, **options)
    runs[design] = serve(engine, params, trace, design, timer=MedianClock(), **options)
    assert runs[design].outputs() == runs["static"].outputs(), design
    assert all(runs[design].outputs()[r.id] == reference[i][:r.max_new_tokens]
               for i, r in enumerate(check))
summaries = {d: r.summary for d, r in runs.items()}
print(f"measured on {DEVICE}")
print(f"{'design':14s} {'throughput':>16s} {'TTFT mean':>10s} {'TTFT p90':>10s} "
      f"{'TPOT mean':>10s} {'makespan':>9s}")
for d, s in summaries.items():
    print(f"{d:14s} {fmt_tokens_per_s(s.throughput):>16s} "
          f"{fmt_seconds(s.ttft_mean_s):>10s} {fmt_seconds(s.ttft_p90_s):>10s} "
          f"{fmt_seconds(s.tpot_mean_s):>10s} {fmt_seconds(s.makespan_s):>9s}")

# %% [markdown]
# The claim of this section, checked: at the same number of slots, continuous batching
# delivers at least {glue:text}`ch11_floor` the throughput of static batching on this trace
# ({glue:text}`ch11_gain` in this build) and keeps more of its slots busy. The floor is set
# below what a quiet machine shows so that it holds while other programs share the CPU.

# %%
gain = summaries["continuous"].throughput / summaries["static"].throughput
gain_inter = summaries["interleaved"].throughput / summaries["static"].throughput
floor = 1.5


def slot_utilisation(run):
    """Fraction of slot-steps that produced a token someone wanted."""
    steps = [e for e in run.events if e.kind == "generate"]
    return sum(len(e.requests) for e in steps) / (len(steps) * engine.max_concurrent_decodes)


util = {d: slot_utilisation(r) for d, r in runs.items()}
assert util["continuous"] > util["static"]

# %% tags=["hide-input"]
glue("ch11_floor", fmt_ratio(floor))
expect_measured(gain >= floor, "continuous batching delivers far more throughput than static "
                "batching with the same slots", expected=f"at least {fmt_ratio(floor)}",
                measured=fmt_ratio(gain))
expect_measured(gain_inter > 1.2, "interleaved serving beats static batching too",
                expected="over 1.2× the throughput", measured=fmt_ratio(gain_inter))
expect_measured(summaries["continuous"].ttft_mean_s < summaries["static"].ttft_mean_s,
                "continuous batching gives an earlier first token on average",
                expected="a shorter mean TTFT than static batching",
                measured=f"{fmt_seconds(summaries['continuous'].ttft_mean_s)} against "
                         f"{fmt_seconds(summaries['static'].ttft_mean_s)}")
for d in runs:
    glue(f"ch11_tput_{d}", fmt_tokens_per_s(summaries[d].throughput))
    glue(f"ch11_ttft_{d}", fmt_seconds(summaries[d].ttft_mean_s))
    glue(f"ch11_tpot_{d}", fmt_seconds(summaries[d].tpot_mean_s))
    glue(f"ch11_util_{d}", fmt_percent(util[d]))
glue("ch11_gain", fmt_ratio(gain))
glue("ch11_gain_inter", fmt_ratio(gain_inter))
print({d: f"{u:.0%}" for d, u in util.items()})

# %% [markdown]
# On {glue:text}`ch11_device`, static batching delivers {glue:text}`ch11_tput_static` and
# continuous batching {glue:text}`ch11_tput_continuous`: {glue:text}`ch11_gain` as much, with
# the same slots and the same model. (Interleaved serving, continuous batching without the
# paged memory, gets {glue:text}`ch11_gain_inter`: on this trace the two differ only by
# measurement noise.) The reason is in the slot utilisation, counted
# from the event log as the fraction of slot-steps that produced a wanted token: static
# batching keeps {glue:text}`ch11_util_static` of its slots busy, continuous batching
# {glue:text}`ch11_util_continuous`. A generate step costs the same whether its slots are busy
# or not — it is bound by reading the weights — so idle slots are pure loss. Time to first
# token falls too, from {glue:text}`ch11_ttft_static` to {glue:text}`ch11_ttft_continuous` on
# average: nobody waits for a whole batch to drain before being admitted.

# %% tags=["hide-input"]
fig, axes = plt.subplots(2, 1, figsize=(11, 9), sharex=True)
handles = draw_timeline(runs["static"], axes[0], f"static batching, measured on {DEVICE}")
handles |= draw_timeline(runs["continuous"], axes[1],
                         f"continuous batching, measured on {DEVICE}")
add_legend(fig, handles)
fig.tight_layout(rect=(0, 0.04, 1, 1))
plt.show()

# %% [markdown]
# In the static timeline the batches are easy to see: a burst of prefill, then a long run of
# generate steps whose active requests dwindle until the longest answer is out. In the
# continuous one, short prefills are sprinkled between generate steps as slots free up, and the
# requests' streams overlap.
#
# ## Prefill pauses everyone else
#
# Interleaving has a price the throughput table hides. While the engine prefills a prompt, no
# slot advances: the user in slot 3 waits for the user in slot 5's prompt. The gap between two
# of a user's tokens is one generate step, *plus every prefill that happened in between*.
# Two remedies exist. *Chunked prefill* {cite:p}`agrawal2023sarathi` caps the prompt tokens
# processed between two generate steps (the `chunk` option of our continuous design), so a
# long prompt is fed in pieces. *Disaggregation* moves prefill off the generate server entirely.
# The cost model makes the effect easy to see with long prompts:

# %%
long_trace = [Request(i, [i + 1] * 400, 24, arrival_s=0.03 * i) for i in range(6)]
toy = MockEngine(slots=4, max_len=512)
gaps = {}
for name, design, options in [("interleaved", "interleaved", {}),
                              ("chunked (64)", "continuous", dict(chunk=64)),
                              ("disaggregated", "disaggregated", dict(link_bytes_per_s=1e9))]:
    run = serve(toy, None, long_trace, design, timer=cost, **options)
    gaps[name] = max(np.diff(s.token_times).max() for s in run.sequences)
assert gaps["chunked (64)"] < gaps["interleaved"]
assert gaps["disaggregated"] <= gaps["chunked (64)"]

# %% tags=["hide-input"]
print({k: fmt_seconds(v) for k, v in gaps.items()})
glue("ch11_gap_inter", fmt_seconds(gaps["interleaved"]))
glue("ch11_gap_chunk", fmt_seconds(gaps["chunked (64)"]))
glue("ch11_gap_disagg", fmt_seconds(gaps["disaggregated"]))

# %% [markdown]
# With 400-token prompts priced by the cost model, the longest pause between two tokens of a
# stream is
# {glue:text}`ch11_gap_inter` under interleaving, {glue:text}`ch11_gap_chunk` with chunked
# prefill, and {glue:text}`ch11_gap_disagg` — a generate step and a transfer — when prefill
# runs elsewhere.
#
# ## Disaggregated serving
#
# For latency-sensitive services at scale the sources recommend splitting the two phases onto
# different chips {cite:p}`austin2025scaling` (also {cite:p}`zhong2024distserve` and
# {cite:p}`patel2024splitwise`). A prefill server turns prompts into KV caches at batch one;
# the caches travel over the network to a generate server, which inserts them into its batch.
# Users never wait for each other's prefills, the two servers can be scaled independently
# (more prefill servers when prompts are long), and each phase can use the sharding and chip
# count that suit it — decode wants more model parallelism than prefill does. The prefill
# server also needs no KV memory beyond the prompt it is working on, which leaves room for a
# prefix cache (chapter 12). The price is a second set of chips, and KV bytes on the wire:
#
# $$t_\text{transfer} = \text{latency} + \frac{2 \cdot L \cdot K \cdot H \cdot
#   \text{bytes} \cdot T_\text{prompt}}{\text{link bandwidth}}.$$
#
# Our measured run charged each transfer with that formula, at the bandwidth of one
# TPU v5e interconnect link from the hardware table, for the float32 cache of the `small`
# model. The event log shows each transfer on its own lane:

# %%
disagg = runs["disaggregated"]
transfers = [e for e in disagg.events if e.kind == "transfer"]
for e in transfers:
    expected = phase_time.kv_transfer_seconds(cfg, e.tokens, link_chip.link_bytes_per_s, 4)
    assert np.isclose(e.end - e.start, expected)
# The generate server never runs a prefill; every prefill runs on the prefill server.
assert {e.kind for e in disagg.events if e.server == "generate"} <= {"insert", "generate"}


def step_gaps(run, server):
    """Gaps between consecutive generate steps of a server, split by whether a prefill ran
    on that server in between (the pause streaming users feel)."""
    events = [e for e in run.events if e.server == server]
    gens = [i for i, e in enumerate(events) if e.kind == "generate"]
    paused, clean = [], []
    for a, b in zip(gens, gens[1:]):
        gap = events[b].start - events[a].end
        (paused if any(e.kind == "prefill" for e in events[a + 1:b]) else clean).append(gap)
    return paused, clean


paused_i, clean_i = step_gaps(runs["interleaved"], "engine")
paused_d, clean_d = step_gaps(disagg, "generate")
assert paused_i and not paused_d

# %% tags=["hide-input"]
expect_measured(np.mean(paused_i) > np.mean(clean_i), "a prefill between two generate steps "
                "pauses the streams", expected="longer gaps where a prefill ran",
                measured=f"{fmt_seconds(np.mean(paused_i))} against "
                         f"{fmt_seconds(np.mean(clean_i))}")
glue("ch11_transfer_mean", fmt_seconds(np.mean([e.end - e.start for e in transfers])))
glue("ch11_link_bw", fmt_rate(link_chip.link_bytes_per_s))
glue("ch11_paused_n", str(len(paused_i)))
glue("ch11_steps_n", str(len(paused_i) + len(clean_i) + 1))
glue("ch11_pause_mean", fmt_seconds(np.mean(paused_i)))

fig, ax = plt.subplots(figsize=(11, 5))
handles = draw_timeline(disagg, ax, f"disaggregated serving, measured on {DEVICE} "
                                    "(two servers, link charged by the estimator)")
add_legend(fig, handles)
fig.tight_layout(rect=(0, 0.06, 1, 1))
plt.show()

# %% [markdown]
# A transfer takes {glue:text}`ch11_transfer_mean` on average at {glue:text}`ch11_link_bw`:
# the model is small. In the interleaved run, {glue:text}`ch11_paused_n` of the
# {glue:text}`ch11_steps_n` generate steps had to wait for at least one prefill, which held
# every stream for {glue:text}`ch11_pause_mean` on average; the disaggregated generate server
# ran its steps back to back. A request's first token comes from the prefill server, straight
# away; the second has to wait for a free generate slot, which is why the mean time per output
# token of the disaggregated run ({glue:text}`ch11_tpot_disaggregated`) is not its best
# number: this burst keeps all eight generate slots full. The comparison with one colocated
# server is also unfair in the other direction, since disaggregation uses two machines.
#
# For a real model the transfer is not negligible. A LLaMA-2 13B prompt of 2,000 tokens carries
# this much KV in bfloat16, and takes this long over one link of each kind of chip:

# %%
llama = get_preset("llama-2-13b")
prompt_tokens = 2000
kv = prompt_tokens * counts.kv_bytes_per_token(llama, 2)
rows = []
for name in ("TPU v5e", "H100 SXM", "L4"):
    chip = get_chip(name)
    t = phase_time.kv_transfer_seconds(llama, prompt_tokens, chip.link_bytes_per_s, 2)
    prefill = phase_time.prefill_seconds(llama, chip, prompt_tokens)
    rows.append((name, chip.interconnect, t, prefill))
    print(f"{name:9s} one {chip.interconnect} link: transfer {fmt_seconds(t)}; "
          f"prefill on one chip (roofline) {fmt_seconds(prefill)}")
assert rows[0][2] < rows[0][3] and rows[2][2] < rows[2][3]   # TPU v5e and L4: transfer < prefill
assert rows[1][2] > rows[1][3]                              # H100, one NVLink link: not so

# %% tags=["hide-input"]
glue("ch11_llama_kv", fmt_bytes(kv))
glue("ch11_v5e_transfer", fmt_seconds(rows[0][2]))
glue("ch11_v5e_prefill", fmt_seconds(rows[0][3]))
glue("ch11_h100_ratio", fmt_ratio(rows[1][2] / rows[1][3]))
glue("ch11_h100_links", str(get_chip("H100 SXM").links))

# %% [markdown]
# That is {glue:text}`ch11_llama_kv` of KV. Over one TPU v5e link it takes
# {glue:text}`ch11_v5e_transfer`, against a roofline estimate of {glue:text}`ch11_v5e_prefill`
# to compute it in the first place, so the transfer hides comfortably behind the next
# prefill; on an L4 the same holds. An H100 computes the prefill so fast that one of its
# NVLink links would need {glue:text}`ch11_h100_ratio` the prefill time to ship the result: a
# disaggregated H100 deployment spreads the transfer over many links (the chip has
# {glue:text}`ch11_h100_links`) or a fast network. Smaller KV caches (chapter 5) make every
# transfer cheaper.
#
# ## How JetStream arranges it
#
# JetStream's orchestrator runs these pieces as threads around queues: a *prefill thread* per
# prefill engine takes requests from the queue and calls `prefill`; a *transfer thread* moves
# each prefix to the generate engine's devices; a *generate thread* per generate engine calls
# `insert` whenever it holds a prefix and a free slot, and `generate` in a loop; a *detokenize
# thread* turns the returned tokens into text and streams them back
# {cite:p}`jetstream2024`. Our orchestrator is the same arrangement made single-threaded and
# deterministic: each server is a clock instead of a thread, and the event log records what
# the threads would have done. The library's other designs are the same loop with different
# rules about when to call which operation:

# %%
from inferbook.serving.scheduler import Interleaved  # noqa: E402

show_source(Interleaved.run)

# %% [markdown]
# ## Summary
#
# - An engine needs three operations from the model: prefill at batch one, insert a prefix
#   into a slot, and one decode step over all slots. Everything else is scheduling.
# - Static batching wastes the slots of finished requests and makes everyone wait for the
#   whole batch; continuous batching refills a slot as soon as it empties. On this CPU it
#   delivered {glue:text}`ch11_gain` the throughput of static batching with the same slots.
# - Interleaving prefills with decoding pauses every stream for every prefill; chunked prefill
#   bounds the pause, disaggregation removes it at the cost of a second server and a KV
#   transfer whose time the estimator predicts.
# - The next chapter gives the engine paged memory and a prefix cache; chapter 13 makes each
#   decode step yield more than one token.
