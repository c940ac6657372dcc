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
# # Hardware
#
# Every performance number in this book is computed from one table: the library's registry,
# `inferbook.perf.hardware.CHIPS`. This page renders it. Each chip lists what the roofline model
# needs — memory, memory bandwidth, peak *dense* bfloat16, int8 and 8-bit floating-point (fp8)
# throughput, interconnect, and each chip's share of the data-centre network between hosts
# with the latency of one message over it — and where the figure comes from. NVIDIA's datasheets lead with
# 2:4-sparse throughput, twice the dense figure; the registry keeps the dense one, because a
# dense transformer gets no benefit from sparsity support.
#
# The last column is the chip's *critical arithmetic intensity*: peak FLOP/s divided by memory
# bandwidth, the number of FLOPs an operation must perform per byte it reads before the chip's
# arithmetic, rather than its memory, becomes the bottleneck. The chapter on rooflines is
# built on it.

# %% [markdown] tags=["lang-zh"]
# # 硬件
#
# 本书中的每一个性能数字都由同一张表算出：库中的注册表 `inferbook.perf.hardware.CHIPS`。本页把它
# 呈现出来。每款芯片列出屋顶线模型需要的一切——内存、内存带宽、*稠密* bfloat16、int8 与 8 位浮点（fp8）
# 的峰值吞吐量、互连，以及每个芯片分得的主机之间数据中心网络的带宽和其上一条消息的延迟——以及每个数字的出处。NVIDIA 的数据手册首先列出的是 2:4 稀疏下的吞吐量，是稠密数字翻一番的结果；
# 注册表保留稠密的那个，因为稠密的 Transformer 从稀疏支持中得不到任何好处。
#
# 最后一列是芯片的*临界算术强度*：峰值 FLOP/s 除以内存带宽，即一个操作每读取一个字节至少要做多少
# FLOPs，芯片的瓶颈才会从内存变成算力。讲屋顶线的那一章就建立在它之上。

# %% tags=["remove-input"]
from IPython.display import Markdown

from inferbook.perf.hardware import CHIPS


def fmt(value, scale, digits=0):
    return "—" if value is None else f"{value / scale:,.{digits}f}"


rows = ["| Chip | Memory (GB) | Bandwidth (GB/s) | bf16 (TFLOP/s) | int8 (TOP/s) "
        "| fp8 (TFLOP/s) | Interconnect (GB/s one way, per link × links) "
        "| Data-centre network (GB/s per chip, µs a message) | FLOPs per byte |",
        "|---|---|---|---|---|---|---|---|---|"]
for chip in CHIPS.values():
    link = ("—" if chip.link_bytes_per_s is None
            else f"{chip.interconnect}: {fmt(chip.link_bytes_per_s, 1e9)} × {chip.links}")
    dcn = ("—" if chip.dcn_bytes_per_s is None
           else f"{fmt(chip.dcn_bytes_per_s, 1e9, 2)}, {fmt(chip.dcn_latency_s, 1e-6, 1)}")
    rows.append(f"| {chip.name} | {fmt(chip.hbm_bytes, 1e9)} | {fmt(chip.hbm_bytes_per_s, 1e9)} "
                f"| {fmt(chip.bf16_flops_per_s, 1e12, 1)} | {fmt(chip.int8_ops_per_s, 1e12, 1)} "
                f"| {fmt(chip.fp8_flops_per_s, 1e12, 1)} | {link} | {dcn} "
                f"| {chip.bf16_flops_per_s / chip.hbm_bytes_per_s:,.0f} |")
Markdown("\n".join(rows))

# %% [markdown]
# ## Sources

# %% [markdown] tags=["lang-zh"]
# ## 出处

# %% tags=["remove-input"]
Markdown("\n".join(f"- **{chip.name}**: {chip.source}." for chip in CHIPS.values()))

# %% [markdown]
# ## Your own hardware
#
# The command-line estimator and the library accept any chip described by a JSON file with at
# least its memory, bandwidth and FLOP/s:
#
# ```json
# {"name": "my-chip", "hbm_bytes": 48e9, "hbm_bandwidth": 9.6e11, "flops": 3.6e14}
# ```
#
# and `inferbook.perf.hardware.chip_from_json(path)` turns it into a `Chip` like the ones above.

# %% [markdown] tags=["lang-zh"]
# ## 你自己的硬件
#
# 命令行估算器和库接受任何用 JSON 文件描述的芯片，文件里至少要有内存、带宽和 FLOP/s：
#
# ```json
# {"name": "my-chip", "hbm_bytes": 48e9, "hbm_bandwidth": 9.6e11, "flops": 3.6e14}
# ```
#
# `inferbook.perf.hardware.chip_from_json(path)` 会把它变成一个 `Chip`，和上表中的芯片一样。
