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

# %% [markdown] tags=["lang-zh"]
# # 分页 KV 内存与前缀缓存
#
# 服务引擎最稀缺的资源通常不是算力，而是存放 KV 缓存的内存：它决定了有多少序列能一起解码，从而决定了吞
# 吐量（第 3 章和第 5 章）。本章讲的是如何用好这块内存。前半部分讲*分页*：随着序列增长，以固定大小的小
# 块分配 KV 内存，而不是为每个请求预留一整段最大长度的连续区域，这样几乎不会有浪费
# {cite:p}`kwon2023pagedattention`。后半部分讲*前缀缓存*：保留先前请求的 KV 块，交给提示词开头相同的后
# 续请求，这样共享的系统提示词、少样本示例和对话历史只需预填充一次 {cite:p}`zheng2024sglang`。两者都在
# 库的引擎中实现，都在这台设备上测量；而且正如那篇关于 KV 缓存的文章所强调的
# {cite:p}`lienhart2023kvcache`，两者都是服务器中的内存管理，而不是对注意力的改动。

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
from inferbook.perf.step_cost import step_time
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
from inferbook.book.figures import glue_figure
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

# %% [markdown] tags=["lang-zh"]
# ## 块表
#
# 第 1 章的连续缓存给每个序列一行 `max_len` 个槽位。谁也不知道回答会有多长，所以这一行必须和服务器接受
# 的最长回答一样长，而回答没用到的每个槽位都白白预留着。分页用一个*块*列表取代这一行，每块 $b$ 个词元（token），
# 只在序列需要时才从共享池中取出。这个列表就是该序列的*块表*：词元 $t$ 位于块 `table[t // b]` 中偏移
# `t % b` 处。一个序列最多浪费它最后一个块中没填满的尾部；而且所有块大小相同，任何空闲块都能满足任何请
# 求，所以块池永远不会碎裂成小得用不上的空洞。
#
# 库中的 `BlockManager` 负责这些账目：一个空闲列表，以及每个块的引用计数（一个块可以属于多个序列，我们
# 后面会看到）。

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

# %% [markdown] tags=["lang-zh"]
# 序列 `a` 开始时拿到块 0，增长时拿到块 4：它的块并不相邻，也不必相邻。读取缓存的一方——注意力内核——顺
# 着块表去读。这就是 *PagedAttention* 的全部：一个通过块表收集键和值的注意力内核（第 7 章写了一个），
# 再加上这个分配器。它计算的注意力与通常的注意力完全相同。
#
# 说一说库中的引擎是怎么用它的。引擎的解码批次把每个正在运行的序列的 KV 连续地存放在一个槽位里——这是它
# 的解码步骤读取的布局——并用块管理器来决定谁可以运行：只有能为提示词分到块时，请求才会被接纳；正在解码
# 的序列每跨入一个新块，就取一个块；块用完时，最近被接纳的序列会被*抢占*，释放它的块，稍后再重新计算。
# 块只有在下面的前缀缓存中才成为物理实体，前缀缓存把 KV 存在真正的块池里。vLLM 这样的生产级引擎把所有
# KV 都放在块池中，并用分页内核读取；而决定能装下多少的账目是一样的。
#
# ## 分页能省多少内存
#
# PagedAttention 论文报告说，为每个请求预留连续内存的服务系统，只把 KV 内存中的一小部分用在了实际的词
# 元上，而分页把浪费降到几乎为零 {cite:p}`kwon2023pagedattention,lienhart2023kvcache`。他们的数据连同
# 出处保存在一个数据文件里：

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

# %% [markdown] tags=["lang-zh"]
# 也就是说，分页之前至少浪费 {glue:text}`ch12_reported_before`，分页之后至多浪费
# {glue:text}`ch12_reported_paged`。我们在一次真实运行中测量自己的分配器。这个工作负载在前缀缓存一节还
# 会用到，它是一个少样本服务：每个提示词都由一组共享的 256 个词元的示例开头，后面跟着用户自己的问题，
# 回答都很短。引擎有八个槽位，每个 384 个词元，块大小为 16。和第 11 章一样，每次引擎调用都真实执行，并
# 按它的已编译程序在这台设备上测得的中位时长计时。

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
bx.bar(range(len(labels)), values, color=["lightgrey", "lightgrey", "tab:green", "tab:blue"])
bx.set_ylim(0, 1); bx.set_xticks(range(len(labels))); bx.tick_params(axis="x", labelbottom=False)
# The bars' names are texts under the axis rather than tick labels, so that the Chinese figure
# can name them too (glue_figure translates an axes' texts).
for i, label in enumerate(labels):
    bx.text(i, -0.03, label, transform=bx.get_xaxis_transform(), ha="center", va="top",
            fontsize=7)
bx.set_title("Averaged KV waste: reported and ours", fontsize=9)
glue_figure("ch12_waste", fig, zh=[
    dict(title=f"我们的运行过程中，在 {DEVICE} 上测得", xlabel="时间（s）",
         ylabel="预留的 KV 内存中未使用的比例",
         legend=[f"分页，块大小 {BLOCK}", f"连续行，每行 {engine.max_len}",
                 f"连续行，每行 {cfg.max_seq_len}"]),
    dict(title="平均 KV 浪费：报告值与我们的测量",
         texts=["报告值：\n连续分配\n（至少）", "报告值：\nPagedAttention\n（至多）",
                f"我们的：\n每行 {cfg.max_seq_len}\n个词元", "我们的：\n分页"])])

# %% [markdown]
# ```{glue:figure} ch12_waste
# ```
#
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

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch12_waste
# ```
#
# 在整个运行中平均，分页让预留的 KV 内存有 {glue:text}`ch12_paged_waste` 未被使用：也就是每个序列最后
# 那个半空的块。长 {glue:text}`ch12_max_len` 个词元的行（即引擎自己的槽位）浪费
# {glue:text}`ch12_slot_waste`；与模型 {glue:text}`ch12_ctx` 个词元的上下文一样长的行——接受模型所能处
# 理的任何请求的服务器就必须这样预留——浪费 {glue:text}`ch12_model_waste`。这样回收的内存，就是让批次容
# 纳更多序列的内存，而解码吞吐量会随批次增大而增长，直到这一步变成计算受限（第 2 章）。分页还让共享成
# 为可能：两个块表可以指向同一个块。束搜索用它来共享各候选的公共开头；前缀缓存则用它在请求之间共享。
#
# ## 前缀缓存
#
# 位置 $i$ 上的键和值只依赖于词元 $0 \dots i$。因此，两个开头有相同 256 个词元的提示词，在这些词元上的
# KV 完全相同；保留了第一个请求的块的服务器，可以把它们交给第二个请求，只预填充不同的部分。聊天是最好
# 的情形：每一轮都会重新发送整个对话，所以除了最新的一条消息，其余的都计算过。少样本提示词和系统指令是
# 另一种情形 {cite:p}`austin2025scaling`。
#
# 有两个细节决定了前缀缓存如何构建。只有*满*块才能共享，因为部分填充的块还在写入。而且一个块的身份是它
# 的整个前缀，而不只是它自己的词元：在“A, B”之后存放第 16–31 个词元的块，与在“C, B”之后存放同样词元的
# 块并不相同。有两种设计来表达这一点。
#
# **哈希链**（vLLM）。块 $i$ 以 $h_i = \text{hash}(h_{i-1}, \text{tokens of block } i)$ 为键存进一个字
# 典，所以它的键取决于它之前的一切。查找时沿着提示词逐块前进，把哈希串起来，直到某个键不存在为止。我们
# 的实现还为每个块存下它的词元和它的父块，并检查两者，这样哈希冲突只会造成一次未命中，而绝不会返回另一
# 个前缀的 KV（测试中故意用一个极差的哈希函数来证明这一点）：

# %%
show_source(HashChainCache._lookup)

# %% [markdown]
# **The radix tree** (SGLang's RadixAttention {cite:p}`zheng2024sglang`). The cached prefixes
# form a tree whose edges are runs of blocks; the path from the root to a node spells a prefix,
# and requests that share an opening share the nodes. A lookup walks down from the root. Here
# are three requests, blocks of four tokens: two share a system prompt of eight tokens, and one
# of those continues a conversation:

# %% [markdown] tags=["lang-zh"]
# **基数树**（SGLang 的 RadixAttention {cite:p}`zheng2024sglang`）。缓存的各个前缀组成一棵树，树的边是
# 一段段连续的块；从根到某个节点的路径拼出一个前缀，开头相同的请求共享同样的节点。查找时从根向下走。下
# 面是三个请求，块大小为四个词元：其中两个共享一段八个词元的系统提示词，而其中之一还延续了一段对话：

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

# %% [markdown] tags=["lang-zh"]
# 两种设计找到的命中完全相同。它们的区别在于让什么变得便宜：哈希链是一个扁平的字典，每个块查一次，没有
# 什么需要重新平衡；基数树则把前缀结构明确地表示出来，这让淘汰变得自然（删除叶子，最久未使用的先删），
# 也让调度器能够询问：哪些等待中的请求与缓存内容共享得最多。在哈希链中，淘汰一个块时，还必须丢掉链在它
# 之后的每一个块：它们的键仍然存在，但它们的链所经过的那个块号现在可能存放着别的词元。
#
# 现在来测量：让少样本轨迹经过连续批处理，分别不带缓存、带哈希链、带基数树，每种都在这台设备上运行。

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
TTFT_CUT_FLOOR = 1.5            # the claim's floor, glued into the sentence that states it
expect_measured(min(ttft_cut.values()) >= TTFT_CUT_FLOOR, "a prefix cache cuts the mean time to "
                f"first token at least {fmt_ratio(TTFT_CUT_FLOOR)}",
                expected=f"at least {fmt_ratio(TTFT_CUT_FLOOR)} shorter with either cache",
                measured=", ".join(f"{c}: {fmt_ratio(v)}" for c, v in ttft_cut.items()))
print(f"measured on {DEVICE}")
glue("ch12_prefill_none", f"{summ[None].prefill_tokens:,}")
glue("ch12_prefill_cached", f"{summ['radix'].prefill_tokens:,}")
glue("ch12_prefill_cut", fmt_ratio(prefill_cut["radix"]))
glue("ch12_ttft_none", fmt_seconds(summ[None].ttft_mean_s))
glue("ch12_ttft_hash", fmt_seconds(summ["hash"].ttft_mean_s))
glue("ch12_ttft_radix", fmt_seconds(summ["radix"].ttft_mean_s))
glue("ch12_ttft_cut", fmt_ratio(min(ttft_cut.values())))
glue("ch12_ttft_floor", fmt_ratio(TTFT_CUT_FLOOR))
glue("ch12_lookup_hash", fmt_seconds(lookup_s["hash"]))
glue("ch12_lookup_radix", fmt_seconds(lookup_s["radix"]))
print({c: fmt_seconds(v) for c, v in lookup_s.items()})

# %% [markdown]
# Without a cache the server prefilled {glue:text}`ch12_prefill_none` prompt tokens; with
# either cache, {glue:text}`ch12_prefill_cached` — {glue:text}`ch12_prefill_cut` fewer: after the
# first request, only the questions are new. Mean time to first token fell from
# {glue:text}`ch12_ttft_none` to {glue:text}`ch12_ttft_hash` (hash chain) and
# {glue:text}`ch12_ttft_radix` (radix tree) on {glue:text}`ch12_device`, at least
# {glue:text}`ch12_ttft_cut` better (the chapter checks at least {glue:text}`ch12_ttft_floor`):
# each prefill is shorter, and shorter prefills also shorten
# the queue behind them. The two designs found exactly the same blocks; looking up a prompt
# costs {glue:text}`ch12_lookup_hash` in the hash chain and {glue:text}`ch12_lookup_radix` in
# the radix tree on the host, negligible beside a prefill, so the difference between their
# times to first token comes from the timing of this shared machine and the queueing it
# perturbs, not from the designs.

# %% [markdown] tags=["lang-zh"]
# 不带缓存时，服务器预填充了 {glue:text}`ch12_prefill_none` 个提示词词元；带任一种缓存时，只有
# {glue:text}`ch12_prefill_cached` 个，前者是后者的 {glue:text}`ch12_prefill_cut`：在第一个请求之后，
# 只有问题是新的。在 {glue:text}`ch12_device` 上，平均首个词元延迟从 {glue:text}`ch12_ttft_none` 降到
# {glue:text}`ch12_ttft_hash`（哈希链）和 {glue:text}`ch12_ttft_radix`（基数树），不带缓存时的延迟至少是带缓存时的
# {glue:text}`ch12_ttft_cut`（本章检验至少为 {glue:text}`ch12_ttft_floor`）：每次预填充都更短了，而更短的预填充也缩短了排在它们后面的队列。两种设计找
# 到的块完全相同；在主机上，查找一个提示词在哈希链中要 {glue:text}`ch12_lookup_hash`，在基数树中要
# {glue:text}`ch12_lookup_radix`，与一次预填充相比可以忽略，所以两者首个词元延迟的差异来自这台共享机器
# 上的计时以及受它扰动的排队，而不是来自设计本身。

# %% [markdown]
# ### Real conversations on a trained model
#
# The trace above is made of token ids. A chat server's shared prefixes come from somewhere
# concrete: its chat template, which opens every conversation with the same system prompt. We
# write a few questions, render each with the chat template of SmolLM2-135M-Instruct
# {cite:p}`allal2025smollm2` (the trained model of chapter 1, whose template adds a default
# system prompt) and tokenize them with its tokenizer. The conversations have a few dozen
# tokens each, and {glue:text}`ch12_real_shared` of them are the same in all of them: the
# system turn and the opening of the user's turn, {glue:text}`ch12_real_pages` full blocks of
# {glue:text}`ch12_real_block` tokens. Only full blocks can be shared, so that is what a prefix
# cache can give every conversation after the first.

# %% [markdown] tags=["lang-zh"]
# ### 训练好的模型上的真实对话
#
# 上面的轨迹由词元 ID 组成。而聊天服务器的共享前缀有具体的来源：它的对话模板，每段对话都以同一段系统
# 提示词开头。我们写几个问题，用 SmolLM2-135M-Instruct {cite:p}`allal2025smollm2`（第 1 章里那个训练好的
# 模型，它的模板会加上一段默认的系统提示词）的对话模板渲染每个问题，再用它的分词器切成词元。每段对话有
# 几十个词元，其中 {glue:text}`ch12_real_shared` 个在所有对话中都相同：系统那一轮，加上用户那一轮的开头，
# 也就是 {glue:text}`ch12_real_pages` 个满块，每块 {glue:text}`ch12_real_block` 个词元。只有满块才能共享，
# 所以这就是前缀缓存能给第一段之后每段对话的部分。

# %%
import os

from inferbook.model.pretrained import load_pretrained
from inferbook.serving import Request

model = load_pretrained("smollm2-135m-instruct")
questions = ["What is the capital of France?", "Name three primary colours.",
             "How many legs does a spider have?", "What is the boiling point of water?",
             "Who wrote Hamlet?", "Give me a synonym for happy."]
chats = [model.prompt(q, chat=True) for q in questions]
shared = len(os.path.commonprefix(chats))
REAL_BLOCK = 8
shared_pages = shared // REAL_BLOCK
print(f"{shared} tokens shared by every conversation "
      f"({shared_pages} full blocks of {REAL_BLOCK}):")
print(model.tokenizer.decode(chats[0][:shared], skip_special=False))
assert shared_pages >= 1 and all(len(c) > shared for c in chats)

# %% [markdown]
# We serve the conversations through the engine of the previous sections, now holding the
# trained weights, a few milliseconds apart, with greedy decoding, once without a prefix cache
# and once with the radix tree, and count what each run prefilled.

# %% [markdown] tags=["lang-zh"]
# 我们让这些对话经过前几节的引擎，现在装的是训练好的权重；它们相隔几毫秒到达，用贪心解码；一次不带前缀
# 缓存，一次带基数树，并统计每次运行预填充了多少词元。

# %%
real_trace = [Request(i, chat, 8, arrival_s=0.005 * i) for i, chat in enumerate(chats)]
real_engine = ModelEngine(model.cfg, slots=4, max_len=128, min_bucket=32)
real_runs = {}
for cache in (None, "radix"):
    warm_up(real_engine, model.params, real_trace, "continuous", block_size=REAL_BLOCK,
            prefix_cache=cache)
    real_runs[cache] = serve(real_engine, model.params, real_trace, "continuous",
                             timer=MedianClock(), block_size=REAL_BLOCK, prefix_cache=cache)
# The cache changes what is computed, never what is answered.
assert real_runs[None].outputs() == real_runs["radix"].outputs()
for i, tokens in real_runs["radix"].outputs().items():
    print(f"{questions[i]:40s} -> {model.decode(tokens)!r}")

prompt_tokens = sum(len(c) for c in chats)
real_summ = {c: r.summary for c, r in real_runs.items()}
hit_rate = real_summ["radix"].cached_tokens / prompt_tokens
# The most a cache of full blocks can supply: each conversation's longest full-block match
# with an earlier one (the shared system prompt at least).
best = sum(max(len(os.path.commonprefix([c, e])) // REAL_BLOCK * REAL_BLOCK
               for e in chats[:i]) for i, c in enumerate(chats) if i)
assert real_summ[None].cached_tokens == 0
assert real_summ[None].prefill_tokens == prompt_tokens
assert 0 < real_summ["radix"].cached_tokens <= best
assert real_summ["radix"].prefill_tokens + real_summ["radix"].cached_tokens == prompt_tokens

# %% tags=["hide-input"]
glue("ch12_real_shared", str(shared)); glue("ch12_real_pages", str(shared_pages))
glue("ch12_real_block", str(REAL_BLOCK)); glue("ch12_real_n", str(len(chats)))
glue("ch12_real_prompt_tokens", f"{prompt_tokens:,}")
glue("ch12_real_cached", f"{real_summ['radix'].cached_tokens:,}")
glue("ch12_real_best", f"{best:,}")
glue("ch12_real_hit", fmt_percent(hit_rate))
glue("ch12_real_saved", fmt_percent(1 - real_summ["radix"].prefill_tokens / prompt_tokens))
glue("ch12_real_ttft_none", fmt_seconds(real_summ[None].ttft_mean_s))
glue("ch12_real_ttft_radix", fmt_seconds(real_summ["radix"].ttft_mean_s))
for c, s in real_summ.items():
    print(f"{str(c):6s} prefilled {s.prefill_tokens:4d} of {prompt_tokens} prompt tokens, "
          f"{s.cached_tokens:4d} from cache; TTFT mean {fmt_seconds(s.ttft_mean_s)} ({DEVICE})")

# %% [markdown]
# The {glue:text}`ch12_real_n` conversations hold {glue:text}`ch12_real_prompt_tokens` prompt
# tokens. With the radix tree, {glue:text}`ch12_real_cached` of them came from the cache — a hit
# rate of {glue:text}`ch12_real_hit`, out of at most {glue:text}`ch12_real_best` that full
# blocks shared with an earlier conversation could supply — so the server prefilled
# {glue:text}`ch12_real_saved` fewer tokens, and every answer is the one it gives without the
# cache. The mean time to first token was {glue:text}`ch12_real_ttft_none` without the cache and
# {glue:text}`ch12_real_ttft_radix` with it on {glue:text}`ch12_device`; prompts this short are
# cheap to prefill, and a step's fixed costs and the queue weigh as much as its tokens; the
# saving in time grows with the share of each prompt the cache covers, and deployed
# assistants' system prompts are far longer than this model's.

# %% [markdown] tags=["lang-zh"]
# 这 {glue:text}`ch12_real_n` 段对话共有 {glue:text}`ch12_real_prompt_tokens` 个提示词词元。带基数树时，
# 其中 {glue:text}`ch12_real_cached` 个来自缓存——命中率为 {glue:text}`ch12_real_hit`；与更早的对话共享的
# 满块最多能提供 {glue:text}`ch12_real_best` 个——所以服务器少预填充了 {glue:text}`ch12_real_saved` 的
# 词元，而每个回答都与不带缓存时的回答相同。在 {glue:text}`ch12_device` 上，平均首个词元延迟不带缓存时为
# {glue:text}`ch12_real_ttft_none`，带缓存时为 {glue:text}`ch12_real_ttft_radix`；这么短的提示词预填充起来
# 很便宜，一步的固定开销和排队与它的词元数同样重要；时间上的节省随缓存覆盖的提示词比例增长，而实际部署
# 的助手的系统提示词比这个模型的长得多。

# %% [markdown]
# ## Eviction and cache-aware admission
#
# Memory is finite, so a cache must forget. Both designs evict the least recently used blocks
# that no running request holds. When the working set outgrows the pool, *which* requests run
# together starts to matter: a first-come-first-served queue can alternate between two
# templates and evict each just before it is needed again. SGLang's scheduler therefore admits
# first the waiting requests with the longest cached prefix ("longest prefix match"). The mock
# engine and a cost-model clock show the effect, deterministically, with two 48-token
# templates arriving alternately and a pool with room for little more than one of them:

# %% [markdown] tags=["lang-zh"]
# ## 淘汰与缓存感知的接纳
#
# 内存是有限的，所以缓存必须遗忘。两种设计都淘汰没有被任何运行中请求持有的、最久未使用的块。当工作集超
# 出块池时，*哪些*请求一起运行就变得重要了：先来先服务的队列可能在两个模板之间来回切换，每次都恰好在某
# 个模板即将再次被用到之前把它淘汰。因此，SGLang 的调度器优先接纳与缓存匹配的前缀最长的等待请求（“最长
# 前缀匹配”）。模拟引擎和成本模型时钟能确定性地展示这个效果：两个各 48 个词元的模板交替到达，而块池的
# 空间只比其中一个多一点点：

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

# %% [markdown] tags=["lang-zh"]
# 先来先服务在缓存中找到了 {glue:text}`ch12_hit_fcfs` 的提示词词元；优先接纳匹配最好的请求，则找到了
# {glue:text}`ch12_hit_lpm`。最长前缀优先可能让某个倒霉的请求一直得不到运行，因为它的前缀从来不在缓存
# 里；真实的调度器会限制一个请求最多被跳过多久。
#
# ## 亲和性路由
#
# 前缀缓存只属于一台服务器：它的块存放在那台服务器的内存里。在负载均衡器后面有多个副本的部署中，只有当
# 一段对话的下一轮到达曾为它前几轮服务的那个副本时，才能从缓存中受益。*亲和性路由*按会话 ID 或开头词元
# 的哈希来分发每个请求，而不是轮询 {cite:p}`austin2025scaling`。我们把二十一段三轮对话——每一轮都重新发
# 送历史，回答由模拟模型给出——重放到四个副本上，每个副本有自己的基数树缓存：

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

# %% [markdown] tags=["lang-zh"]
# 轮询把每段对话分散到各个副本上，在缓存中找到了 {glue:text}`ch12_route_rr` 的提示词词元（大多是共享的
# 系统提示词，每个副本都会学到它）；亲和性路由让每段对话留在一个副本上，找到了
# {glue:text}`ch12_route_aff`。代价是均衡性：按会话 ID 的哈希分配，各副本收到的请求数为
# {glue:text}`ch12_route_load`，而轮询会把请求平均分开。按人人共享的前缀——比如一段很长的系统提示词——来
# 路由，会把所有流量都送到同一个副本上，所以亲和性要以能区分对话的东西为键。
#
# ## 缓存可以放在哪里
#
# 前缀缓存要与运行中的请求争夺加速器内存。分离式服务在这里有帮助（第 11 章）：预填充服务器不持有正在解
# 码的缓存，所以它空闲的内存可以存放前缀。主机内存更大，也更慢；对缓存来说，它只需要比重新计算快就行。
# 以一段 2,000 个词元的 LLaMA-2 13B 对话历史为例：

# %%
llama = get_preset("llama-2-13b")
history = 2000
kv_history = history * counts.kv_bytes_per_token(llama, 2)
for name in ("L4", "A10"):
    chip = get_chip(name)
    load = kv_history / chip.link_bytes_per_s           # over the chip's PCIe link
    recompute = step_time(phase_time.prefill_step_cost(llama, history), chip)
    assert load < recompute
    print(f"{name}: read {fmt_bytes(kv_history)} of cached KV from host memory over "
          f"{chip.interconnect}: {fmt_seconds(load)}; recompute it: {fmt_seconds(recompute)}")
l4 = get_chip("L4")

# %% tags=["hide-input"]
glue("ch12_hist_kv", fmt_bytes(kv_history))
glue("ch12_l4_load", fmt_seconds(kv_history / l4.link_bytes_per_s))
glue("ch12_l4_recompute", fmt_seconds(step_time(phase_time.prefill_step_cost(llama, history), l4)))

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

# %% [markdown] tags=["lang-zh"]
# 经 L4 的 PCIe 链路取回 {glue:text}`ch12_hist_kv` 需要 {glue:text}`ch12_l4_load`；按屋顶线估算，重新
# 计算它需要 {glue:text}`ch12_l4_recompute`。主机内存太慢，不能直接从中解码，但用来重新填充一个前缀已
# 经足够快。更小的 KV 缓存（第 5 章）让每种选择都更便宜：能放下更多前缀，每个前缀也搬得更快。
#
# ## PagedAttention 和 RadixAttention 不是什么
#
# 这两个名字都暗示着新的注意力类型，但两者都不是 {cite:p}`lienhart2023kvcache`。它们计算的注意力，正是
# 在同样的键和值上的 softmax 注意力。分页改变的是这些键和值在内存中存放的位置，从而少浪费一些内存；基
# 数树改变的是它们被保留多久、谁可以复用它们。正因如此，本章才能断言每个请求无论有没有缓存都得到相同的
# 词元；也正因如此，两者都能与第 6、7 章的内核以及第 5 章的压缩方法自由组合。
#
# ## 小结
#
# - 分页 KV 内存按需分配固定大小的块，并通过块表来寻址。在我们的运行中，它浪费了
#   {glue:text}`ch12_paged_waste` 的 KV 内存，而按模型上下文长度预留的连续行会浪费
#   {glue:text}`ch12_model_waste`。
# - 引用计数让块可以共享；前缀缓存保留过去请求的满块，以它们的整个前缀来标识（用哈希链或基数树），并驱
#   逐最久未使用的块。
# - 在少样本工作负载上，在这台设备上，不带缓存时预填充的词元数是带缓存时的
#   {glue:text}`ch12_prefill_cut`，首个词元延迟至少是带缓存时的 {glue:text}`ch12_ttft_cut`。
# - 缓存感知的接纳和亲和性路由，决定了缓存里的内容是不是接下来的请求所需要的。
