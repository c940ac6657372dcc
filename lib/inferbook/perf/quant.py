"""Storage formats of weights and KV caches, scales included.

A quantized number is a short code plus its share of a scale that turns codes back into
values. Counting only the code (1 byte for int8, half a byte for int4) is the rule of thumb of
the sources; what real formats store is a little more, and this module counts it:

* **weights** ``bf16 | fp8 | int8[+min] | int4[+min][:group]`` — the layer matrices are stored
  as codes with one 16-bit scale per `group` consecutive input rows of each output column
  (GPTQ's and AWQ's layout, Frantar et al. 2023, Lin et al. 2024, whose checkpoints keep fp16
  scales). Without a group, fp8 and int8 keep one scale per output channel (per-channel
  quantization, as SmoothQuant and vLLM's fp8 do) and int4 uses groups of 128, the common
  choice. Embeddings, the unembedding, norms, biases and routers stay in bfloat16, as those
  recipes leave them.
* **KV cache** ``bf16 | fp8 | int8`` — the scheme of the book's KV chapter
  (`inferbook.memory.kv_quant`): each cached vector (a key or a value of one head, H numbers;
  or a latent-attention token's R_kv + H_rope numbers) is stored as 1-byte codes and one
  float32 scale, 1 + 4/H bytes per element.

The formats are symmetric (w = scale · code) unless ``+min`` makes them asymmetric
(w = scale · code + min): a 16-bit minimum beside each group's scale, as llama.cpp's Q4_1
stores it (``int4+min:32``: 16 bytes of codes, a scale and a minimum, 20 bytes per 32
weights, against Q4_0's 18 for ``int4:32``). GPTQ's and AWQ's zero points are 4-bit instead,
0.5/group bytes more than symmetric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inferbook.model.config import ModelConfig
from inferbook.perf.params import tensors

__all__ = ["WeightFormat", "parse_weight_format", "weight_bytes", "KV_FORMATS",
           "kv_element_bytes", "WEIGHT_CODES"]

# Bytes per code of each format, and the default group (None: one scale per output channel).
WEIGHT_CODES = {"bf16": (2.0, None), "fp8": (1.0, None), "int8": (1.0, None),
                "int4": (0.5, 128)}
WEIGHT_SCALE_BYTES = 2          # fp16/bf16 scales, as GPTQ, AWQ and vLLM checkpoints store
MIN_SUFFIX = "+min"             # asymmetric: a 16-bit minimum per group beside its scale
ASYMMETRIC = ("int8", "int4")   # the formats that take one
KV_FORMATS = {"bf16": 2.0, "fp8": 1.0, "int8": 1.0}
KV_SCALE_BYTES = 4              # float32, one per cached vector (memory.kv_quant)


@dataclass(frozen=True)
class WeightFormat:
    """How layer matrices are stored: `code_bytes` per weight plus a `scale_bytes` scale per
    `group` input rows of each output column (group None: one per output column; bf16 has
    no scales), plus `min_bytes` per group for an asymmetric format's minimum."""

    name: str
    code_bytes: float
    group: int | None = None
    scale_bytes: float = WEIGHT_SCALE_BYTES
    min_bytes: float = 0.0

    @property
    def label(self) -> str:
        name = self.name + (MIN_SUFFIX if self.min_bytes else "")
        return name if self.group is None or self.name == "bf16" else f"{name}:{self.group}"

    def matrix_bytes(self, rows: int, cols: int) -> float:
        """Bytes of one [rows (inputs), cols (outputs)] matrix in this format."""
        codes = rows * cols * self.code_bytes
        if self.name == "bf16":
            return codes
        groups = 1 if self.group is None else math.ceil(rows / self.group)
        return codes + groups * cols * (self.scale_bytes + self.min_bytes)


def parse_weight_format(text: str) -> WeightFormat:
    """'bf16', 'fp8', 'int8', 'int4', any of the three quantized ones with ':group'
    (a positive integer number of input rows per scale): 'int4:64', 'int8:128'; int8 and
    int4 with '+min' for a minimum per group as well: 'int4+min:32' (llama.cpp's Q4_1)."""
    if not isinstance(text, str):
        raise ValueError(f"a weight format must be a string, got {text!r}")
    name, sep, group_text = text.strip().partition(":")
    asymmetric = name.endswith(MIN_SUFFIX)
    name = name.removesuffix(MIN_SUFFIX)
    if asymmetric and name not in ASYMMETRIC:
        raise ValueError(f"only {' and '.join(ASYMMETRIC)} take '{MIN_SUFFIX}' (a minimum "
                         f"per group): {text!r}")
    if name not in WEIGHT_CODES:
        raise ValueError(f"unknown weight format {text!r}; known: {', '.join(WEIGHT_CODES)} "
                         "(fp8, int8 and int4 take ':group', int8 and int4 '+min')")
    code, group = WEIGHT_CODES[name]
    if sep:
        if name == "bf16":
            raise ValueError(f"bf16 has no scales, so no group: {text!r}")
        if not group_text.isdigit() or int(group_text) < 1 or int(group_text) > 2 ** 31:
            raise ValueError(f"the group of {text!r} must be a positive integer "
                             "(input rows per scale)")
        group = int(group_text)
    return WeightFormat(name, code, group, min_bytes=WEIGHT_SCALE_BYTES if asymmetric else 0.0)


def weight_bytes(cfg: ModelConfig, fmt: WeightFormat | str,
                 roles: tuple[str, ...] | None = None) -> float:
    """Bytes of all weights of `cfg` with the layers' matrices stored in `fmt`.

    Routed experts and every other layer matrix take the format; the (un)embedding, routers,
    norms and biases stay bfloat16. With 'bf16' this is 2 · param_count(cfg). `roles` keeps
    only tensors of those roles (`params.Tensor.role`), e.g. ("expert",) for routed experts.
    """
    fmt = parse_weight_format(fmt) if isinstance(fmt, str) else fmt
    total = 0.0
    for t in tensors(cfg):
        if roles is not None and t.role not in roles:
            continue
        if t.role in ("matrix", "expert"):
            rows, cols = t.shape
            total += t.count * fmt.matrix_bytes(rows, cols)
        else:
            total += t.size * 2.0
    return total


def kv_element_bytes(cfg: ModelConfig, fmt: str) -> float:
    """Bytes per cached element of `cfg` in KV format `fmt`, its share of a scale included:
    2 for bf16, 1 + 4/H for int8 and fp8 (1 + 4/(R_kv + H_rope) with latent attention)."""
    if fmt not in KV_FORMATS:
        raise ValueError(f"unknown KV format {fmt!r}; known: {', '.join(KV_FORMATS)}")
    if fmt == "bf16":
        return KV_FORMATS[fmt]
    width = cfg.mla.cache_width if cfg.mla is not None else cfg.H
    return KV_FORMATS[fmt] + KV_SCALE_BYTES / width
