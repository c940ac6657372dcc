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
# needs — memory, memory bandwidth, peak *dense* bfloat16 and int8 throughput, interconnect —
# and where the figure comes from. NVIDIA's datasheets lead with 2:4-sparse throughput, twice
# the dense figure; the registry keeps the dense one, because a dense transformer gets no
# benefit from sparsity support.
#
# The last column is the chip's *critical arithmetic intensity*: peak FLOP/s divided by memory
# bandwidth, the number of FLOPs an operation must perform per byte it reads before the chip's
# arithmetic, rather than its memory, becomes the bottleneck. The chapter on rooflines is
# built on it.

# %% tags=["remove-input"]
from IPython.display import Markdown

from inferbook.perf.hardware import CHIPS


def fmt(value, scale, digits=0):
    return "—" if value is None else f"{value / scale:,.{digits}f}"


rows = ["| Chip | Memory (GB) | Bandwidth (GB/s) | bf16 (TFLOP/s) | int8 (TOP/s) "
        "| Interconnect (GB/s one way, per link × links) | FLOPs per byte |",
        "|---|---|---|---|---|---|---|"]
for chip in CHIPS.values():
    link = ("—" if chip.link_bytes_per_s is None
            else f"{chip.interconnect}: {fmt(chip.link_bytes_per_s, 1e9)} × {chip.links}")
    rows.append(f"| {chip.name} | {fmt(chip.hbm_bytes, 1e9)} | {fmt(chip.hbm_bytes_per_s, 1e9)} "
                f"| {fmt(chip.bf16_flops_per_s, 1e12, 1)} | {fmt(chip.int8_ops_per_s, 1e12, 1)} "
                f"| {link} | {chip.bf16_flops_per_s / chip.hbm_bytes_per_s:,.0f} |")
Markdown("\n".join(rows))

# %% [markdown]
# ## Sources

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
