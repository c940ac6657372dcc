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
# # Paged KV memory and prefix caching
#
# A serving engine's scarcest resource is usually not arithmetic but the memory that holds the
# KV cache: it decides how many sequences can decode together, and so the throughput
# (chapters 3 and 5). This chapter is about spending that memory well. The first half is
# *paging*: allocate KV memory in small fixed-size blocks as sequences grow, instead of
# reserving a maximal contiguous region per request, so that almost nothing is wasted
# {cite:p}`kwon2023pagedattention`. The second half is *prefix caching*: keep the KV blocks of
# earlier requests and hand them to later requests whose prompts begin the same way, so that
# shared system prompts, few-shot examples and conversation histories are prefilled once
# {cite:p}`zheng2024sglang`. Both are implemented in the library's engine, measured on this
# device, and — as the KV-caching article insists {cite:p}`lienhart2023kvcache` — both are
# memory management in the server, not changes to attention.

# %%
import timeit

import inferbook

info = inferbook.setup()

import matplotlib.pyplot as plt
import numpy as np

from inferbook.book import bookdata
from inferbook.book.listing import show_source
from inferbook.model import decoder
from inferbook.model.presets import get_preset
from inferbook.perf import counts, phase_time, timing
from inferbook.perf.hardware import get_chip
from inferbook.serving import (
    BlockManager,
    CostTimer,
    HashChainCache,
    LinearCost,
    MedianClock,
    MockEngine,
    ModelEngine,
    RadixCache,
    Usage,
    mock_stream,
    paged_usage,
    serve,
    warm_up,
)
from inferbook.serving.workloads import few_shot_trace, multi_turn_trace, route

print(info.describe())
DEVICE = timing.device_name()

# %% tags=["hide-input"]
from inferbook.book.claims import expect_measured
from inferbook.book.present import fmt_bytes, fmt_percent, fmt_ratio, fmt_seconds, glue

glue("ch12_device", DEVICE)

# %% [markdown]
# ## Block tables
#
# The contiguous cache of chapter 1 gives every sequence a row of `max_len` slots. Nobody knows
# how long an answer will be, so the row must be as long as the longest answer the server
# accepts, and every slot the answer does not reach is reserved for nothing. Paging replaces
# the row by a list of *blocks* of $b$ tokens each, taken from a shared pool only when the
# sequence needs them. The list is the sequence's *block table*: token $t$ lives in block
# `table[t // b]`, at offset `t % b`. A sequence wastes at most the unfilled end of its last
# block; and since all blocks are the same size, any free block fits any request, so the pool
# never fragments into holes too small to use.
#
# The library's `BlockManager` keeps that bookkeeping: a free list, and a reference count per
# block (a block can belong to several sequences, as we will see).

# %%
show_source(BlockManager.grow)

# %%
blocks = BlockManager(num_blocks=12, block_size=16)
tables = {"a": [], "b": [], "c": []}
lengths = {"a": 5, "b": 40, "c": 17}
for name, n in lengths.items():
    assert blocks.grow(tables[name], n)
lengths["a"] = 20                              # sequence a decodes 15 more tokens
assert blocks.grow(tables["a"], lengths["a"])   # ... and crosses into a second block
for name, table in tables.items():
    t = lengths[name] - 1
    print(f"sequence {name}: {lengths[name]:3d} tokens, block table {table}; its last token "
          f"sits in block {table[t // 16]} at offset {t % 16}")
usage = paged_usage(lengths.values(), 16)
assert usage.reserved - usage.tokens < 16 * len(lengths)    # less than a block each
print(f"{blocks.num_used} of {blocks.num_blocks} blocks in use; {usage.tokens} tokens in "
      f"{usage.reserved} slots")
for table in tables.values():
    blocks.release(table)
assert blocks.all_free()

# %% [markdown]
# Sequence `a` got block 0 when it started and block 4 when it grew: its blocks are not
# adjacent, and need not be. Whoever reads the cache — the attention kernel — follows the
# block table. That is the whole of *PagedAttention*: an attention kernel that gathers keys and
# values through a block table (chapter 7 writes one), plus this allocator. The attention it
# computes is exactly the usual one.
#
# A word on what the library's engine does with it. Its decode batch keeps each running
# sequence's KV contiguous in a slot — the layout its decode step reads — and uses the block
# manager to decide who may run: a request is admitted only if blocks for its prompt can be
# had, a decoding sequence takes a block whenever it crosses into a new one, and when none is
# left the most recently admitted sequence is *preempted*, releasing its blocks, to be
# recomputed later. The blocks become physical only for the prefix cache below, which stores
# KV in a real block pool. A production engine such as vLLM keeps all KV in the pool and reads
# it with a paged kernel; the accounting, which is what decides how much fits, is the same.
#
# ## How much memory paging saves
#
# The PagedAttention paper reports that serving systems which reserved contiguous memory per
# request used only a small part of their KV memory for actual tokens, and that paging brings
# the waste down to almost nothing {cite:p}`kwon2023pagedattention,lienhart2023kvcache`. Their
# figures are kept in a data file with their source:

# %%
paper = bookdata.load("pagedattention_waste.json")
before, paged_reported = 1 - paper["token_state_share"]["orca_max"], paper["paged_waste_at_most"]

# %% tags=["hide-input"]
print(f"KV memory wasted: {before:.0%} with maximum-length reservations (Orca), at most "
      f"{paged_reported:.0%} with paging (source: {paper['source']})")
glue("ch12_reported_before", fmt_percent(before)); glue("ch12_reported_paged",
                                                        fmt_percent(paged_reported))

# %% [markdown]
# That is, at least {glue:text}`ch12_reported_before` wasted before paging and at most
# {glue:text}`ch12_reported_paged` with it. We measure our own allocator during a real run.
# The workload, which the prefix-cache section reuses, is a few-shot service: every prompt is
# one shared 256-token set of examples followed by the user's own question, and answers are
# short. The engine has eight slots of 384 tokens, blocks of 16. As in chapter 11, every
# engine call runs for real and is charged the median measured duration of its compiled
# program on this device.

# %%
cfg = get_preset("small")
params = decoder.init_params(cfg, seed=0)
engine = ModelEngine(cfg, slots=8, max_len=384, min_bucket=32)
BLOCK = 16
trace = few_shot_trace(24, cfg.V, shared=256, question=(8, 32), output=(8, 24), rate=30.0,
                       seed=3)
runs = {}
for cache in (None, "hash", "radix"):
    warm_up(engine, params, trace, "continuous", block_size=BLOCK, prefix_cache=cache)
    runs[cache] = serve(engine, params, trace, "continuous", timer=MedianClock(),
                        block_size=BLOCK, prefix_cache=cache)
# A prefix cache is an optimisation: every request gets the same tokens with or without it
# (and the library's tests check those against generating each request alone).
assert runs["hash"].outputs() == runs[None].outputs() == runs["radix"].outputs()

plain = runs[None]
paged = sum((m.paged for m in plain.memory), Usage(0, 0))
slot_rows = sum((m.contiguous for m in plain.memory), Usage(0, 0))
# A contiguous allocator that accepts requests as long as the model's context must reserve
# that much for each: the same sequences, reserved at cfg.max_seq_len.
live = slot_rows.reserved // engine.max_len
model_rows = Usage(paged.tokens, live * cfg.max_seq_len)
assert paged.waste < paged_reported, paged.waste      # paging wastes under 4%, as reported
assert model_rows.waste > 0.5, model_rows.waste       # contiguous rows waste most of it

# %% tags=["hide-input"]
glue("ch12_paged_waste", fmt_percent(paged.waste, 1))
glue("ch12_slot_waste", fmt_percent(slot_rows.waste))
glue("ch12_model_waste", fmt_percent(model_rows.waste))
glue("ch12_max_len", str(engine.max_len)); glue("ch12_ctx", f"{cfg.max_seq_len:,}")
print(f"waste, averaged over the {len(plain.memory)} generate steps: paged "
      f"{paged.waste:.1%}, contiguous rows of {engine.max_len} {slot_rows.waste:.0%}, "
      f"contiguous rows of the model's context ({cfg.max_seq_len}) {model_rows.waste:.0%}")

fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.6), width_ratios=(3, 2))
t = np.array([m.t for m in plain.memory])
ax.plot(t, [m.paged.waste for m in plain.memory], label=f"paged, blocks of {BLOCK}")
ax.plot(t, [m.contiguous.waste for m in plain.memory],
        label=f"contiguous rows of {engine.max_len}")
ax.plot(t, [1 - m.paged.tokens / (m.contiguous.reserved / engine.max_len * cfg.max_seq_len)
            for m in plain.memory], label=f"contiguous rows of {cfg.max_seq_len}")
ax.set_xlabel("time (s)"); ax.set_ylabel("fraction of reserved KV memory unused")
ax.set_ylim(0, 1); ax.legend(fontsize=8)
ax.set_title(f"During our run, measured on {DEVICE}", fontsize=9)
labels = ["reported:\ncontiguous\n(at least)", "reported:\nPagedAttention\n(at most)",
          f"ours:\nrows of\n{cfg.max_seq_len}", "ours:\npaged"]
values = [before, paged_reported, model_rows.waste, paged.waste]
bx.bar(labels, values, color=["lightgrey", "lightgrey", "tab:green", "tab:blue"])
bx.set_ylim(0, 1); bx.tick_params(axis="x", labelsize=7)
bx.set_title("Averaged KV waste: reported and ours", fontsize=9)
plt.show()

# %% [markdown]
# Averaged over the run, paging leaves {glue:text}`ch12_paged_waste` of the reserved KV memory
# unused: the half-empty last block of each sequence. Rows of {glue:text}`ch12_max_len` tokens,
# the engine's own slots, waste {glue:text}`ch12_slot_waste`; rows as long as the model's
# {glue:text}`ch12_ctx`-token context — what a server that accepts any request the model can
# handle must reserve — waste {glue:text}`ch12_model_waste`. Memory reclaimed this way is
# memory for more sequences in the batch, and decode throughput grows with the batch until the
# step becomes compute-bound (chapter 2). Paging also makes sharing possible: two block tables
# may point at the same block. Beam search uses that for the common start of its candidates;
# prefix caching uses it across requests.
#
# ## Prefix caching
#
# Keys and values at position $i$ depend only on tokens $0 \dots i$. Two prompts that begin with
# the same 256 tokens therefore have identical KV for those tokens, and a server that kept the
# first request's blocks could give them to the second and prefill only what differs. Chat is
# the best case: each turn re-sends the whole conversation, so everything but the newest
# message was computed before. Few-shot prompts and system instructions are the other
# {cite:p}`austin2025scaling`.
#
# Two details decide how a prefix cache is built. Only *full* blocks can be shared, since a
# partly filled block is still being written. And a block's identity is its whole prefix, not
# its own tokens: the block holding tokens 16–31 of "A, B" differs from the block holding the
# same tokens after "C, B". Two designs encode that.
#
# **The hash chain** (vLLM). Block $i$ is filed in a dictionary under
# $h_i = \text{hash}(h_{i-1}, \text{tokens of block } i)$, so its key depends on everything
# before it. A lookup walks the prompt block by block, chaining hashes, until a key is missing.
# Our implementation also stores each block's tokens and its parent block and checks both, so
# that a hash collision costs a miss and never returns the KV of a different prefix (the tests
# use a deliberately terrible hash to prove it):

# %%
show_source(HashChainCache._lookup)

# %% [markdown]
# **The radix tree** (SGLang's RadixAttention {cite:p}`zheng2024sglang`). The cached prefixes
# form a tree whose edges are runs of blocks; the path from the root to a node spells a prefix,
# and requests that share an opening share the nodes. A lookup walks down from the root. Here
# are three requests, blocks of four tokens: two share a system prompt of eight tokens, and one
# of those continues a conversation:

# %%
def show_tree(cache, node=None, depth=0):
    node = node or cache.root
    for child in node.children.values():
        tokens = " | ".join(" ".join(map(str, c)) for c in child.chunks)
        print("    " * depth + f"[{tokens}]  blocks {child.blocks}")
        show_tree(cache, child, depth + 1)


demo_blocks = BlockManager(num_blocks=16, block_size=4)
radix = RadixCache(demo_blocks)
system = [1, 2, 3, 4, 5, 6, 7, 8]
for prompt in (system + [9, 9, 9, 9], system + [7, 7, 7, 7, 6, 6, 6, 6], [4, 4, 4, 4]):
    table = radix.match(prompt)
    demo_blocks.grow(table, len(prompt))
    radix.insert(prompt, table)
    demo_blocks.release(table)
show_tree(radix)
assert radix.peek(system + [9, 9, 9, 9, 0]) == 12 and radix.peek(system + [0] * 4) == 8
assert radix.cached_blocks == 6      # the shared system prompt is stored once

# %% [markdown]
# Both designs find the same hits. They differ in what they make cheap: the hash chain is a
# flat dictionary, one lookup per block and nothing to rebalance; the radix tree keeps the
# prefix structure explicit, which makes eviction natural (remove leaves, the least recently
# used first) and lets a scheduler ask which waiting requests share the most with what is
# cached. In the hash chain, evicting a block must also drop every block chained after it:
# their keys still exist, but the block id their chain runs through may now hold other tokens.
#
# Now the measurement: the few-shot trace through continuous batching without a cache, with
# the hash chain, and with the radix tree, each on this device.

# %%
summ = {c: r.summary for c, r in runs.items()}
for c, s in summ.items():
    print(f"{str(c):6s} prefilled {s.prefill_tokens:6,d} tokens, {s.cached_tokens:6,d} from "
          f"cache; TTFT mean {fmt_seconds(s.ttft_mean_s)}, p90 {fmt_seconds(s.ttft_p90_s)}")
prefill_cut = {c: summ[None].prefill_tokens / summ[c].prefill_tokens for c in ("hash", "radix")}
ttft_cut = {c: summ[None].ttft_mean_s / summ[c].ttft_mean_s for c in ("hash", "radix")}
assert summ["hash"].cached_tokens == summ["radix"].cached_tokens > 0
assert min(prefill_cut.values()) >= 1.5, prefill_cut          # tokens: exact
# What the two designs cost on the host: one lookup of a request's prompt.
probe = trace[-1].prompt
lookup_s = {c: min(timeit.repeat(lambda: runs[c].extra["cache"].peek(probe), number=200,
                                 repeat=3)) / 200 for c in ("hash", "radix")}

# %% tags=["hide-input"]
expect_measured(min(ttft_cut.values()) >= 1.5, "a prefix cache cuts the mean time to first token",
                expected="at least 1.5× shorter with either cache",
                measured=", ".join(f"{c}: {fmt_ratio(v)}" for c, v in ttft_cut.items()))
print(f"measured on {DEVICE}")
glue("ch12_prefill_none", f"{summ[None].prefill_tokens:,}")
glue("ch12_prefill_cached", f"{summ['radix'].prefill_tokens:,}")
glue("ch12_prefill_cut", fmt_ratio(prefill_cut["radix"]))
glue("ch12_ttft_none", fmt_seconds(summ[None].ttft_mean_s))
glue("ch12_ttft_hash", fmt_seconds(summ["hash"].ttft_mean_s))
glue("ch12_ttft_radix", fmt_seconds(summ["radix"].ttft_mean_s))
glue("ch12_ttft_cut", fmt_ratio(min(ttft_cut.values())))
glue("ch12_lookup_hash", fmt_seconds(lookup_s["hash"]))
glue("ch12_lookup_radix", fmt_seconds(lookup_s["radix"]))
print({c: fmt_seconds(v) for c, v in lookup_s.items()})

# %% [markdown]
# Without a cache the server prefilled {glue:text}`ch12_prefill_none` prompt tokens; with
# either cache, {glue:text}`ch12_prefill_cached` — {glue:text}`ch12_prefill_cut` fewer: after the
# first request, only the questions are new. Mean time to first token fell from
# {glue:text}`ch12_ttft_none` to {glue:text}`ch12_ttft_hash` (hash chain) and
# {glue:text}`ch12_ttft_radix` (radix tree) on {glue:text}`ch12_device`, at least
# {glue:text}`ch12_ttft_cut` better: each prefill is shorter, and shorter prefills also shorten
# the queue behind them. The two designs found exactly the same blocks; looking up a prompt
# costs {glue:text}`ch12_lookup_hash` in the hash chain and {glue:text}`ch12_lookup_radix` in
# the radix tree on the host, negligible beside a prefill, so the difference between their
# times to first token comes from the timing of this shared machine and the queueing it
# perturbs, not from the designs.
#
# ## Eviction and cache-aware admission
#
# Memory is finite, so a cache must forget. Both designs evict the least recently used blocks
# that no running request holds. When the working set outgrows the pool, *which* requests run
# together starts to matter: a first-come-first-served queue can alternate between two
# templates and evict each just before it is needed again. SGLang's scheduler therefore admits
# first the waiting requests with the longest cached prefix ("longest prefix match"). The mock
# engine and a cost-model clock show the effect, deterministically, with two 48-token
# templates arriving alternately and a pool with room for little more than one of them:

# %%
rng = np.random.default_rng(0)
templates = [list(rng.integers(0, 97, 48)) for _ in range(2)]
alternating = [dict(prompt=templates[i % 2] + list(rng.integers(0, 97, 4)), n=6)
               for i in range(24)]
from inferbook.serving import Request  # noqa: E402

alt_trace = [Request(i, a["prompt"], a["n"]) for i, a in enumerate(alternating)]
toy = MockEngine(slots=2, max_len=64)
hits = {}
for admission in ("fcfs", "lpm"):
    run = serve(toy, None, alt_trace, "continuous", timer=CostTimer(LinearCost()),
                num_blocks=9, block_size=8, prefix_cache="radix", admission=admission)
    assert run.outputs() == {r.id: mock_stream(r.prompt, r.max_new_tokens, 97)
                             for r in alt_trace}
    hits[admission] = run.summary.cached_tokens / sum(len(r.prompt) for r in alt_trace)
assert hits["lpm"] > hits["fcfs"]

# %% tags=["hide-input"]
print({k: f"{v:.0%}" for k, v in hits.items()})
glue("ch12_hit_fcfs", fmt_percent(hits["fcfs"])); glue("ch12_hit_lpm", fmt_percent(hits["lpm"]))

# %% [markdown]
# First come, first served finds {glue:text}`ch12_hit_fcfs` of the prompt tokens in the cache;
# admitting the best-matching request first finds {glue:text}`ch12_hit_lpm`. Longest-prefix-first
# can starve an unlucky request whose prefix is never cached; real schedulers bound how long a
# request may be passed over.
#
# ## Affinity routing
#
# A prefix cache is local to one server: its blocks live in that server's memory. A deployment
# with several replicas behind a load balancer only benefits if a conversation's next turn
# reaches the replica that served its previous turns. *Affinity routing* sends each request by a
# session id, or a hash of its opening tokens, rather than round-robin
# {cite:p}`austin2025scaling`. We replay twenty-one three-turn conversations — each turn re-sends
# the history, the answers are the mock model's — over four replicas, each with its own radix
# cache:

# %%
V = 97
convos = multi_turn_trace(21, 3, V, lambda p, n: mock_stream(p, n, V), system=24,
                          message=(8, 16), output=(8, 16), think_s=1.0, seed=1)
replica = MockEngine(slots=4, max_len=256)
routing = {}
for policy in ("round-robin", "affinity"):
    shards = route(convos, 4, policy)
    cached = prompt_tokens = 0
    for shard in shards:
        if shard:
            run = serve(replica, None, shard, "continuous", timer=CostTimer(LinearCost()),
                        block_size=8, prefix_cache="radix")
            cached += run.summary.cached_tokens
            prompt_tokens += sum(len(r.prompt) for r in shard)
    routing[policy] = (cached / prompt_tokens, [len(s) for s in shards])
    print(f"{policy:12s} prompt tokens from cache {cached / prompt_tokens:.0%}; "
          f"requests per replica {[len(s) for s in shards]}")
assert routing["affinity"][0] > routing["round-robin"][0]

# %% tags=["hide-input"]
glue("ch12_route_rr", fmt_percent(routing["round-robin"][0]))
glue("ch12_route_aff", fmt_percent(routing["affinity"][0]))
glue("ch12_route_load", str(routing["affinity"][1]))

# %% [markdown]
# Round-robin scatters each conversation across replicas and finds {glue:text}`ch12_route_rr`
# of the prompt tokens cached (mostly the shared system prompt, which every replica learns);
# affinity routing keeps each conversation on one replica and finds
# {glue:text}`ch12_route_aff`. The price is balance: by hash of the session id, the replicas
# received {glue:text}`ch12_route_load` requests, where round-robin spreads them evenly.
# Routing by a prefix that everyone shares — a long system prompt — would send all traffic to
# one replica, which is why affinity keys on something that distinguishes conversations.
#
# ## Where the cache can live
#
# A prefix cache competes with running requests for accelerator memory. Disaggregation helps
# here (chapter 11): a prefill server holds no decoding caches, so its spare memory can hold
# prefixes. Host memory is larger still, and slower; for a cache it only has to be faster than
# recomputing. For a LLaMA-2 13B conversation history of 2,000 tokens:

# %%
llama = get_preset("llama-2-13b")
history = 2000
kv_history = history * counts.kv_bytes_per_token(llama, 2)
for name in ("L4", "A10"):
    chip = get_chip(name)
    load = kv_history / chip.link_bytes_per_s           # over the chip's PCIe link
    recompute = phase_time.prefill_seconds(llama, chip, history)
    assert load < recompute
    print(f"{name}: read {fmt_bytes(kv_history)} of cached KV from host memory over "
          f"{chip.interconnect}: {fmt_seconds(load)}; recompute it: {fmt_seconds(recompute)}")
l4 = get_chip("L4")

# %% tags=["hide-input"]
glue("ch12_hist_kv", fmt_bytes(kv_history))
glue("ch12_l4_load", fmt_seconds(kv_history / l4.link_bytes_per_s))
glue("ch12_l4_recompute", fmt_seconds(phase_time.prefill_seconds(llama, l4, history)))

# %% [markdown]
# Fetching {glue:text}`ch12_hist_kv` over an L4's PCIe link takes
# {glue:text}`ch12_l4_load`; recomputing it takes {glue:text}`ch12_l4_recompute` by the
# roofline estimate. Host memory is too slow to decode from, but fast enough to refill a
# prefix. Smaller KV caches (chapter 5) make every option cheaper: more prefixes fit, and each
# moves faster.
#
# ## What PagedAttention and RadixAttention are not
#
# Both names suggest new kinds of attention; neither is one {cite:p}`lienhart2023kvcache`. The
# attention they compute is exactly softmax attention over the same keys and values. Paging
# changes where those keys and values sit in memory, so that less of it is wasted; the radix
# tree changes how long they are kept and who may reuse them. That is why this chapter could
# assert that every request gets the same tokens with and without a cache, and why both
# combine freely with the kernels of chapters 6 and 7 and the compression of chapter 5.
#
# ## Summary
#
# - Paged KV memory allocates fixed-size blocks on demand and addresses them through a block
#   table. In our run it wasted {glue:text}`ch12_paged_waste` of KV memory, where contiguous
#   rows of the model's context would waste {glue:text}`ch12_model_waste`.
# - Reference counts let blocks be shared; a prefix cache keeps full blocks of past requests,
#   identified by their whole prefix (a hash chain, or a radix tree), evicting the least
#   recently used.
# - On a few-shot workload the cache cut prefilled tokens by {glue:text}`ch12_prefill_cut` and
#   time to first token by at least {glue:text}`ch12_ttft_cut` on this device.
# - Cache-aware admission and affinity routing decide whether the cache's contents are the
#   ones the next requests need.
