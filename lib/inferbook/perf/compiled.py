"""What XLA says about a compiled program, without running it.

A compiled program carries exact facts about itself: XLA's count of its floating-point
operations and the bytes its operations access (`compiled_cost`, from the cost analysis),
the memory its buffers take (`program_memory`, from the buffer assignment), and the arrays
its text declares (`hlo_arrays`). They are the same on every run and on every machine
load, so the book checks its formulas against them (FLOPs of a decode step, bytes a kernel
keeps alive) where a timing could only be compared loosely. Sizes that would not fit in
memory can be examined too: `jax.ShapeDtypeStruct` arguments compile without allocating.

The collectives of a sharded program are read from the same text by `inferbook.perf.hlo`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np

__all__ = ["compiled_cost", "ProgramMemory", "program_memory", "HLO_DTYPE_BYTES", "hlo_arrays",
           "array_bytes"]

# Bytes per element of the element types HLO text names (s4/u4: two per byte).
HLO_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
               "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
               "c128": 16, "s4": 0.5, "u4": 0.5, "f8e4m3fn": 1, "f8e5m2": 1}
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]")


def compiled_cost(fn: Callable[..., Any], *args: Any, optimized: bool = True,
                  **kwargs: Any) -> dict[str, float]:
    """XLA's own count of FLOPs and bytes accessed for the program of a jitted `fn`.

    These are exact properties of the program (not measurements), the same on every run; they
    are what the book compares its formulas against. With optimized=False the count is taken
    before XLA's optimisations, without compiling: the FLOPs are the same to a fraction of a
    percent and it is several times faster, but bytes are counted before fusion (too high).
    Returns {"flops", "bytes_accessed"}.
    """
    lowered = fn.lower(*args, **kwargs)
    analysis = (lowered.compile() if optimized else lowered).cost_analysis()
    if isinstance(analysis, (list, tuple)):       # older JAX: one dict per computation
        analysis = analysis[0]
    return {"flops": float(analysis.get("flops", 0.0)),
            "bytes_accessed": float(analysis.get("bytes accessed", 0.0))}


def hlo_arrays(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every array type HLO `text` spells (`f32[8,128]`), as (element type, shape), in order;
    tokens that only look like one (an unknown element type) are left out."""
    return [(dtype, tuple(int(d) for d in dims.split(",") if d))
            for dtype, dims in _ARRAY.findall(text) if dtype in HLO_DTYPE_BYTES]


def array_bytes(dtype: str, shape: tuple[int, ...]) -> float:
    """Bytes of one array of an HLO element type and shape."""
    return int(np.prod(shape, dtype=np.int64)) * HLO_DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class ProgramMemory:
    """What one compiled program needs, from XLA's memory analysis (bytes)."""

    temp_bytes: int             # scratch for intermediates (buffers reused where possible)
    argument_bytes: int
    output_bytes: int
    largest_array_bytes: int    # the largest array in the compiled program's text

    @property
    def total_bytes(self) -> int:
        """Scratch, arguments and outputs together."""
        return self.temp_bytes + self.argument_bytes + self.output_bytes


def program_memory(fn: Callable[..., Any], *args: Any) -> ProgramMemory:
    """Compile `fn` for `args` (arrays or jax.ShapeDtypeStruct) and read its memory needs.

    Nothing is run: it costs a compile, and gives the same number on every run.
    """
    compiled = jax.jit(fn).lower(*args).compile()
    stats = compiled.memory_analysis()
    largest = max((array_bytes(*a) for a in hlo_arrays(compiled.as_text())), default=0)
    return ProgramMemory(int(stats.temp_size_in_bytes), int(stats.argument_size_in_bytes),
                         int(stats.output_size_in_bytes), int(largest))
