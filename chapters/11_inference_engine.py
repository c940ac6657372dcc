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

# %% [markdown] tags=["lang-zh"]
# # 设计推理引擎
#
# 到目前为止，各章每次只优化一次预填充和一个解码步骤。服务器要做的事更多：请求在用户发出时随时到达，提
# 示词长短不一，想要的回答也长短不一。总得有个东西时时刻刻地决定：预填充哪个提示词，把哪些序列放在一起
# 解码，某个序列结束时又该怎么办。这个东西就是*推理引擎*，它的选择决定了服务器落在第 3 章所讲的延迟–吞
# 吐量权衡上的哪个位置 {cite:p}`austin2025scaling`。
#
# 本章就来构建一个推理引擎。模型提供三种操作——预填充一个提示词；把结果插入正在解码的批次中的一个槽位；
# 让每个槽位前进一个词元（token）——其形式仿照 Google 的 JetStream {cite:p}`jetstream2024`。一个*编排器*按四种设
# 计把它们串起来：静态批处理、预填充与生成交错执行、带分页内存的连续批处理，以及预填充服务器与生成服务
# 器分离。我们在这台机器的 CPU 上用库中的模型，让同一份请求轨迹依次经过每一种设计，并从编排器自己的事
# 件日志中读出首个词元延迟、每个输出词元的时间和吞吐量。

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
from inferbook.perf.step_cost import step_time
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
from inferbook.book.figures import glue_figure
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

# %% [markdown] tags=["lang-zh"]
# ## 模型与服务器之间的接口
#
# JetStream 对模型的要求很少。`prefill` 以批量大小 1 把一个提示词送进模型，返回它的 KV 缓存（即*前缀*）
# 以及生成的第一个词元。`insert` 把一个前缀复制到解码器所处理的固定大小批次中的一行（一个*槽位*）。
# `generate` 为所有槽位同时运行一个解码步骤，每个槽位返回一个词元。无论请求如何来去，解码批次的形状都
# 不变，所以每个操作只需编译一次；又因为前缀是一个自成一体的值，预填充和生成甚至不必在同一台机器上运行。
# 下面是库中定义的这个接口：

# %%
show_source(api.Engine.prefill, api.Engine.insert, api.Engine.generate)

# %% [markdown]
# `ModelEngine` implements it over the library's transformer. The decode batch is a KV cache of
# `slots` rows, each `max_len` tokens long, plus each slot's next input token and the sampling
# step it has reached. `generate` is the decoding loop of chapter 1, split as there into a
# program that reads the cache and samples, and one that appends the new keys and values in
# place. Each method is a thin shell; the compiled functions it calls, shown after it, do the
# work:

# %% [markdown] tags=["lang-zh"]
# `ModelEngine` 在库中的 transformer 之上实现了这个接口。解码批次是一个有 `slots` 行的 KV 缓存，每行长
# `max_len` 个词元，外加每个槽位的下一个输入词元和它已进行到的采样步数。`generate` 就是第 1 章的解码循
# 环，并像那里一样拆成两个程序：一个读取缓存并采样，另一个原地追加新的键和值。每个方法都只是一层薄壳，
# 真正干活的是它调用的编译函数，列在它后面：

# %%
show_source(ModelEngine.generate, ModelEngine.insert, callees=True)

# %% [markdown]
# Driving the engine by hand shows what a server does. Two requests are prefilled one at a
# time and inserted into slots 0 and 2 of an eight-slot batch; a few generate steps later each
# slot has produced exactly the tokens `decode.generate` produces for its prompt (which, as the
# library's tests check, are the tokens of generating that prompt alone):

# %% [markdown] tags=["lang-zh"]
# 手动驱动引擎，就能看清服务器要做什么。两个请求逐个预填充，分别插入一个八槽位批次的槽位 0 和槽位 2；
# 几个生成步骤之后，每个槽位产生的词元，都与 `decode.generate` 为它的提示词产生的词元完全相同（库的测
# 试检查过，这些也正是单独为该提示词生成时得到的词元）：

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

# %% [markdown] tags=["lang-zh"]
# 其余的一切——哪个请求进哪个槽位，何时预填充、何时解码——都归编排器管。为了让它的决策看得见，我们先在一
# 个玩具模型上运行它，这个模型的计算简单到可以写在页边：`MockEngine` 把上下文 $c$ 续写为词元
# $(\sum c + |c|) \bmod V$；一个成本模型（`LinearCost`）对每次预填充收取
# {glue:text}`ch11_cost_prefill`，外加每个提示词词元 {glue:text}`ch11_cost_token`，对每个生成步骤收取
# {glue:text}`ch11_cost_generate`。在 $V = 97$ 时，提示词 `[1, 2, 3]` 续写为 9、19、39：

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

# %% [markdown] tags=["lang-zh"]
# 编排器的每一次调用都是它日志里的一个 `Event`：哪台服务器、哪种调用、何时开始、何时结束、为哪些请求。
# 本章的时间线图只依据这些日志和每个请求的词元时间画出，别无其他。

# %% tags=["hide-input"]
KIND_COLOURS = {"prefill": "tab:orange", "generate": "tab:blue", "insert": "tab:green",
                "transfer": "tab:purple", "load": "tab:olive", "save": "tab:olive"}
KIND_LABELS = {"prefill": "prefill", "generate": "generate", "insert": "insert",
               "transfer": "transfer", "load": "prefix copy", "save": "prefix copy"}
# The Chinese edition's words for the timelines' legend and lanes.
KIND_ZH = {"prefill": "预填充", "generate": "生成", "insert": "插入", "transfer": "传输",
           "prefix copy": "前缀复制"}
SERVER_ZH = {"engine": "引擎", "generate": "生成", "link": "链路"}


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
    # Lane names are texts beside the axis rather than tick labels, so that the Chinese
    # figure can name them too (glue_figure translates an axes' texts).
    ax.set_yticks([])
    for y, label in zip(ticks, labels):
        if label:
            ax.text(-0.005, y, label, transform=ax.get_yaxis_transform(), ha="right",
                    va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(title, fontsize=9)
    # One legend entry per kind of event this run has: handles and labels always pair up.
    kinds = {e.kind for e in run.events}
    return {KIND_LABELS[k]: plt.Rectangle((0, 0), 1, 1, color=c)
            for k, c in KIND_COLOURS.items() if k in kinds}


def add_legend(ax, handles):
    """A legend of `draw_timeline`'s handles, each with its own label, right of `ax`."""
    legend = ax.legend(list(handles.values()), list(handles), loc="upper left",
                       bbox_to_anchor=(1.01, 1), fontsize=8)
    assert len(legend.legend_handles) == len(legend.get_texts()) == len(handles)


def lane_zh(label):
    """A timeline lane's name in Chinese: a server, or a request."""
    if label.startswith("request "):
        return "请求 " + label.removeprefix("request ")
    if label.startswith("prefill"):
        return "预填充 " + label.removeprefix("prefill")
    return SERVER_ZH[label]


def timeline_zh(ax, title):
    """The Chinese labels of a `draw_timeline` axes, for `glue_figure`: its title, the time
    axis, the lanes, and the legend if the axes carries it."""
    zh = dict(title=title, xlabel=ax.get_xlabel().replace("time (", "时间（").replace(")", "）"),
              texts=[lane_zh(t.get_text()) for t in ax.texts])
    if ax.get_legend():
        zh["legend"] = [KIND_ZH[t.get_text()] for t in ax.get_legend().get_texts()]
    return zh


DESIGN_ZH = {"static": "静态批处理", "interleaved": "交错式服务"}


fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharex=True)
handles = {}
for ax, (design, run) in zip(axes, toy_runs.items()):
    handles |= draw_timeline(run, ax, f"{design} (toy model, cost model clock)")
add_legend(axes[-1], handles)
fig.tight_layout()
glue_figure("ch11_toy_timelines", fig, zh=[
    timeline_zh(ax, f"{DESIGN_ZH[d]}（玩具模型，成本模型计时）") for ax, d in zip(axes, toy_runs)])

# %% [markdown]
# ```{glue:figure} ch11_toy_timelines
# ```
#
# **Static batching** (left) takes the requests that are waiting, prefills them as one padded
# batch, and runs generate steps until *every* one of them has finished; only then does it
# look at the queue again. Request 1 wanted two tokens and is done after one step, but its slot
# idles until request 0's six tokens are out, and request 2 has been waiting all along.
# **Interleaved** serving (right) prefills one prompt whenever a slot is free — prefill has
# priority — and decodes the slots in between. A slot is refilled the step after it empties:
# this is *continuous batching* {cite:p}`yu2022orca`, at its plainest.

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch11_toy_timelines
# ```
#
# **静态批处理**（左）取出正在等待的请求，把它们补齐成一个批次一起预填充，然后不断运行生成步骤，直到其
# 中*每一个*请求都完成；只有这时，它才会再去看队列。请求 1 只要两个词元，一步之后就完成了，但它的槽位
# 要一直空闲到请求 0 的六个词元都输出为止，而请求 2 从头到尾都在等待。**交错式**服务（右）只要有空闲槽
# 位就预填充一个提示词（预填充优先），在两次预填充之间对各槽位做解码。槽位空出后的下一步就被重新填上：
# 这就是最朴素形式的*连续批处理* {cite:p}`yu2022orca`。

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

# %% [markdown] tags=["lang-zh"]
# 即使只有四个请求，交错式调度的吞吐量也达到静态批处理的 {glue:text}`ch11_toy_tput_gain`，而且每个人都
# 更早拿到第一个词元。原文列出了静态批处理服务效果差的四个原因 {cite:p}`austin2025scaling`：大的预填充
# 批次让每个人都要等所有人的预填充完成（首个词元延迟很差）；短回答完成后，它们的槽位要空等长回答结束；
# 提示词要补齐到批次中最长的那个；预填充和生成被迫使用同样的芯片和同样的分片方式。尽管如此，大多数代码
# 库都是从它起步的，而对笔记本电脑上的单个用户来说，它也完全够用。
#
# ## 在这台 CPU 上比较四种设计
#
# 现在换成真实模型：`small` 预设，八个解码槽位，每个 192 个词元。这份轨迹具备实践中最要紧的特征：大多
# 数回答很短，少数很长。所有请求同时到达，就像一个离线批处理作业，这样吞吐量衡量的是每种设计能做到什么，
# 而不是请求碰巧以多快的速度到来。

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

# %% [markdown] tags=["lang-zh"]
# 输出长度的中位数是 {glue:text}`ch11_out_median` 个词元，最大值是 {glue:text}`ch11_out_max`。每种设计
# 都在同一个有 {glue:text}`ch11_slots` 个槽位的引擎上重放同样的 {glue:text}`ch11_n_requests` 个请求。
# 时间是*测量*出来的：编排器真实地执行每一次引擎调用，并按它在这台设备上实际花费的挂钟时间计时；在此之
# 前，一轮预热已经编译好这次运行要用到的每一个程序。这台机器可能同时在跑别的任务，所以一次调用按同一个
# 已编译程序全部测量调用的中位数计时（`MedianClock`），这样，操作系统碰巧拖慢的某次调用就不会算在发起
# 它的那个设计头上。分离式设计的两台服务器本应是两台机器，所以每台服务器各有自己的时钟；两者之间的链路
# 则由估算器估算耗时（见下一节）。各种设计必须在每一个词元上都彼此一致，并与 `decode.generate` 一致。

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

# %% [markdown] tags=["lang-zh"]
# 本节的论断，经过检验：槽位数相同时，在这份轨迹上，连续批处理的吞吐量至少是静态批处理的
# {glue:text}`ch11_floor`（本次构建中为 {glue:text}`ch11_gain`），并让更多槽位保持忙碌。这个下限定得比
# 安静机器上的表现低，这样即使有别的程序共享 CPU，它也仍然成立。

# %%
gain = summaries["continuous"].throughput / summaries["static"].throughput
gain_inter = summaries["interleaved"].throughput / summaries["static"].throughput
# The claims' floors, glued into the sentences that state them.
GAIN_FLOOR = 1.5                # continuous over static batching
INTERLEAVED_FLOOR = 1.2         # interleaved over static batching


def slot_utilisation(run):
    """Fraction of slot-steps that produced a token someone wanted."""
    steps = [e for e in run.events if e.kind == "generate"]
    return sum(len(e.requests) for e in steps) / (len(steps) * engine.max_concurrent_decodes)


util = {d: slot_utilisation(r) for d, r in runs.items()}
assert util["continuous"] > util["static"]

# %% tags=["hide-input"]
glue("ch11_floor", fmt_ratio(GAIN_FLOOR))
glue("ch11_inter_floor", fmt_ratio(INTERLEAVED_FLOOR))
expect_measured(gain >= GAIN_FLOOR, "continuous batching delivers at least "
                f"{fmt_ratio(GAIN_FLOOR)} the throughput of static batching with the same slots",
                expected=f"at least {fmt_ratio(GAIN_FLOOR)}", measured=fmt_ratio(gain))
expect_measured(gain_inter >= INTERLEAVED_FLOOR, "interleaved serving delivers at least "
                f"{fmt_ratio(INTERLEAVED_FLOOR)} the throughput of static batching",
                expected=f"at least {fmt_ratio(INTERLEAVED_FLOOR)}",
                measured=fmt_ratio(gain_inter))
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
# paged memory, gets {glue:text}`ch11_gain_inter`, and the chapter checks at least
# {glue:text}`ch11_inter_floor`: on this trace the two differ only by measurement noise.) The
# reason is in the slot utilisation, counted
# from the event log as the fraction of slot-steps that produced a wanted token: static
# batching keeps {glue:text}`ch11_util_static` of its slots busy, continuous batching
# {glue:text}`ch11_util_continuous`. A generate step costs the same whether its slots are busy
# or not — it is bound by reading the weights — so idle slots are pure loss. Time to first
# token falls too, from {glue:text}`ch11_ttft_static` to {glue:text}`ch11_ttft_continuous` on
# average: nobody waits for a whole batch to drain before being admitted.

# %% [markdown] tags=["lang-zh"]
# 在 {glue:text}`ch11_device` 上，静态批处理的吞吐量是 {glue:text}`ch11_tput_static`，连续批处理是
# {glue:text}`ch11_tput_continuous`：槽位相同、模型相同，后者的吞吐量却是前者的 {glue:text}`ch11_gain`。（交
# 错式服务，也就是不带分页内存的连续批处理，吞吐量是静态批处理的 {glue:text}`ch11_gain_inter`，本章检验它至少
# 为 {glue:text}`ch11_inter_floor`：在这份轨迹上，两者只差测量噪声。）原因在于槽位利用率，它由事件日志统计，即产生了所需词元的“槽位·步”所占的比例：静态批处理
# 让 {glue:text}`ch11_util_static` 的槽位保持忙碌，连续批处理则是 {glue:text}`ch11_util_continuous`。
# 无论槽位是否忙碌，一个生成步骤的代价都一样——它的瓶颈是读取权重——所以空闲的槽位纯属损失。首个词元延迟
# 也下降了，平均从 {glue:text}`ch11_ttft_static` 降到 {glue:text}`ch11_ttft_continuous`：没有谁需要等
# 整个批次跑完才能被接纳。

# %% tags=["hide-input"]
fig, axes = plt.subplots(2, 1, figsize=(11, 9), sharex=True)
handles = draw_timeline(runs["static"], axes[0], f"static batching, measured on {DEVICE}")
handles |= draw_timeline(runs["continuous"], axes[1],
                         f"continuous batching, measured on {DEVICE}")
add_legend(axes[0], handles)
fig.tight_layout()
glue_figure("ch11_batching_timelines", fig, zh=[
    timeline_zh(axes[0], f"静态批处理，在 {DEVICE} 上测得"),
    timeline_zh(axes[1], f"连续批处理，在 {DEVICE} 上测得")])

# %% [markdown]
# ```{glue:figure} ch11_batching_timelines
# ```
#
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

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch11_batching_timelines
# ```
#
# 在静态批处理的时间线上，批次一目了然：一阵预填充，然后是一长串生成步骤，其中活跃的请求越来越少，直到
# 最长的回答输出完毕。在连续批处理的时间线上，随着槽位陆续空出，短小的预填充穿插在生成步骤之间，各个请
# 求的输出流相互重叠。
#
# ## 预填充让其他所有人暂停
#
# 交错执行有一个吞吐量表格看不出的代价。引擎预填充一个提示词时，没有一个槽位能前进：槽位 3 的用户要等
# 槽位 5 的用户的提示词。同一用户两个词元之间的间隔，是一个生成步骤，*再加上这期间发生的每一次预填充*。
# 补救办法有两种。*分块预填充* {cite:p}`agrawal2023sarathi` 限制两个生成步骤之间处理的提示词词元数（即
# 我们的连续批处理设计中的 `chunk` 选项），于是长提示词被分成几块送入。*分离*则把预填充完全移出生成服
# 务器。用长提示词，成本模型能让这个效果一目了然：

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

# %% [markdown] tags=["lang-zh"]
# 在按成本模型计时的 400 个词元的提示词下，一个输出流中两个词元之间的最长停顿：交错执行时为
# {glue:text}`ch11_gap_inter`，分块预填充时为 {glue:text}`ch11_gap_chunk`，预填充在别处运行时为
# {glue:text}`ch11_gap_disagg`——一个生成步骤加一次传输。
#
# ## 分离式服务
#
# 对于大规模、对延迟敏感的服务，原文建议把两个阶段分别放到不同的芯片上 {cite:p}`austin2025scaling`（另见
# {cite:p}`zhong2024distserve` 和 {cite:p}`patel2024splitwise`）。预填充服务器以批量大小 1 把提示词变
# 成 KV 缓存；这些缓存经网络传到生成服务器，由后者插入它的批次。用户不再需要等待彼此的预填充；两种服务
# 器可以各自独立扩展（提示词长时就多配预填充服务器）；每个阶段都可以采用适合自己的分片方式和芯片数量——
# 解码比预填充需要更多的模型并行。预填充服务器除了手头正在处理的提示词之外，也不需要任何 KV 内存，这就
# 为前缀缓存（第 12 章）留出了空间。代价是第二组芯片，以及要在网络上传输的 KV 字节：
#
# $$t_\text{transfer} = \text{latency} + \frac{2 \cdot L \cdot K \cdot H \cdot
#   \text{bytes} \cdot T_\text{prompt}}{\text{link bandwidth}}.$$
#
# 我们测量的那次运行就按这个公式为每次传输计时，带宽取硬件表中一条 TPU v5e 互连链路的带宽，缓存是 `small` 模型的 float32 缓存。事件日志把每次传输画在它自己的泳道上：

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
add_legend(ax, handles)
fig.tight_layout()
glue_figure("ch11_disaggregated_timeline", fig, zh=timeline_zh(
    ax, f"分离式服务，在 {DEVICE} 上测得（两台服务器，链路时间由估算器计算）"))

# %% [markdown]
# ```{glue:figure} ch11_disaggregated_timeline
# ```
#
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

# %% [markdown] tags=["lang-zh"]
# ```{glue:figure} ch11_disaggregated_timeline
# ```
#
# 在 {glue:text}`ch11_link_bw` 下，一次传输平均耗时 {glue:text}`ch11_transfer_mean`：这个模型很小。在
# 交错式运行中，{glue:text}`ch11_steps_n` 个生成步骤里有 {glue:text}`ch11_paused_n` 个至少要等一次预填
# 充，这让每个输出流平均停顿 {glue:text}`ch11_pause_mean`；而分离式的生成服务器一步接一步地运行，中间
# 没有停顿。一个请求的第一个词元来自预填充服务器，马上就有；第二个词元则要等一个空闲的生成槽位，所以分
# 离式运行的平均每个输出词元的时间（{glue:text}`ch11_tpot_disaggregated`）并不是它最好看的数字：这一波
# 突发请求让八个生成槽位一直满载。与单台共置服务器的比较在另一个方向上也不公平，因为分离式服务用了两台
# 机器。
#
# 对真实模型而言，传输就不能忽略了。一个 2,000 个词元的 LLaMA-2 13B 提示词在 bfloat16 下携带的 KV，以
# 及经每种芯片的一条链路传输它所需的时间如下：

# %%
llama = get_preset("llama-2-13b")
prompt_tokens = 2000
kv = prompt_tokens * counts.kv_bytes_per_token(llama, 2)
rows = []
for name in ("TPU v5e", "H100 SXM", "L4"):
    chip = get_chip(name)
    t = phase_time.kv_transfer_seconds(llama, prompt_tokens, chip.link_bytes_per_s, 2)
    prefill = step_time(phase_time.prefill_step_cost(llama, prompt_tokens), chip)
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

# %% [markdown] tags=["lang-zh"]
# 也就是 {glue:text}`ch11_llama_kv` 的 KV。经一条 TPU v5e 链路传输需要 {glue:text}`ch11_v5e_transfer`，
# 而按屋顶线估算，一开始把它计算出来就要 {glue:text}`ch11_v5e_prefill`，所以传输可以从容地被下一次预
# 填充掩盖；L4 上也是如此。H100 算预填充快得多，用它的一条 NVLink 链路传送结果，需要预填充时间的
# {glue:text}`ch11_h100_ratio`：分离式部署的 H100 要把传输分散到多条链路上（这款芯片有
# {glue:text}`ch11_h100_links` 条），或者使用快速网络。更小的 KV 缓存（第 5 章）让每次传输都更便宜。
#
# ## JetStream 是怎么安排的
#
# JetStream 的编排器把这些部件作为围绕队列的线程来运行：每个预填充引擎有一个*预填充线程*，从队列中取出
# 请求并调用 `prefill`；一个*传输线程*把每个前缀搬到生成引擎的设备上；每个生成引擎有一个*生成线程*，只
# 要手里有前缀、又有空闲槽位，就调用 `insert`，并在循环中调用 `generate`；一个*反词元化线程*把返回的词
# 元变成文本，以流式方式送回 {cite:p}`jetstream2024`。我们的编排器是同样的安排，只是改成了单线程、确定
# 性的：每台服务器是一个时钟而不是一个线程，事件日志记下那些线程本会做的事。库中的其他设计也是同一个循
# 环，只是在何时调用哪个操作上规则不同：

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

# %% [markdown] tags=["lang-zh"]
# ## 小结
#
# - 引擎需要模型提供三种操作：以批量大小 1 预填充、把前缀插入一个槽位，以及对所有槽位执行一个解码步骤。
#   其余的一切都是调度。
# - 静态批处理浪费已完成请求的槽位，还让每个人都等整个批次结束；连续批处理则在槽位一空出来时就重新填上。
#   在这台 CPU 上，槽位相同时，它的吞吐量是静态批处理的 {glue:text}`ch11_gain`。
# - 把预填充与解码交错执行，会让每个输出流为每一次预填充而停顿；分块预填充限制停顿的长度，分离式服务则
#   消除停顿，代价是第二台服务器，以及一次 KV 传输，其时间由估算器预测。
# - 下一章为引擎加上分页内存和前缀缓存；第 13 章让每个解码步骤产出不止一个词元。
